"""What the code sandbox costs per sample, per isolation level.

    python bench/sandbox_cost.py [--samples 200] [--workers 2] [--repeats 3] [--out FILE]

Scores ``--samples`` completions (a correct ``add`` checked by 3 asserts) through the real
``code_tests`` reward at ``max_workers = --workers``, for each level:

``off``           a plain subprocess, no audit hook (the floor: starting Python and the harness)
``python_guard``  a plain subprocess with the Python audit hook (the guard before bubblewrap)
``bwrap``         full isolation: bubblewrap namespaces, nobody, seccomp, private tmpfs, audit hook

Each level runs ``--repeats`` times; the JSON keeps every run (ms per sample, samples/s) with the
CPU model, its AVX-512 flags, the core count and the load average before and after, because on a
shared machine other work moves these numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from polyrl.rewards.code import score_code, sandbox_for, _options
from polyrl.bench.machine import cpu_info

TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(-1, 1) == 0\n"
SOLUTION = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"
LEVELS = {
    "off": {"isolation": "off", "audit_hook": False},
    "python_guard": {"isolation": "off", "audit_hook": True},
    "bwrap": {"isolation": "require", "audit_hook": True},
}


def one_run(level: dict[str, object], samples: int, workers: int) -> dict[str, float]:
    options = {**level, "max_workers": workers, "timeout_s": 30}
    sandbox_for(_options(options))  # choosing the level (probes) is a one-off cost, not per sample
    rows = [{"prompt": "add", "tests": TESTS}] * samples
    t0 = time.perf_counter()
    scores = asyncio.run(score_code([SOLUTION] * samples, rows, options))
    wall = time.perf_counter() - t0
    if list(scores) != [1.0] * samples:
        raise SystemExit(f"a correct solution did not score 1.0: {sorted(set(scores))}")
    return {"wall_s": wall, "ms_per_sample": 1000 * wall / samples, "samples_per_s": samples / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--out", default="bench/results/sandbox_cost.json")
    args = ap.parse_args()
    result: dict[str, object] = {"cpu": cpu_info(), "samples": args.samples, "max_workers": args.workers,
                                 "load_before": os.getloadavg(), "levels": {}}
    for name in args.levels.split(","):
        runs = [one_run(LEVELS[name], args.samples, args.workers) for _ in range(args.repeats)]
        ms = [r["ms_per_sample"] for r in runs]
        result["levels"][name] = {"runs": runs, "ms_per_sample_median": statistics.median(ms),
                                  "ms_per_sample_min": min(ms), "ms_per_sample_max": max(ms),
                                  "samples_per_s_median": statistics.median(r["samples_per_s"] for r in runs),
                                  "report": sandbox_for(_options({**LEVELS[name], "max_workers": args.workers,
                                                                  "timeout_s": 30})).report}
        print(f"{name:13s} {statistics.median(ms):7.1f} ms/sample (min {min(ms):.1f}, max {max(ms):.1f}) "
              f"{result['levels'][name]['samples_per_s_median']:6.1f} samples/s", flush=True)
    result["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['cpu']['model']}, {result['cpu']['cpus']} CPUs; load {result['load_before']} -> "
          f"{result['load_after']}; wrote {args.out}")


if __name__ == "__main__":
    main()
