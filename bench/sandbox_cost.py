"""What the code sandbox costs per sample, per isolation level.

    python bench/sandbox_cost.py [--samples 200] [--workers 2] [--repeats 3] [--out FILE]

Scores ``--samples`` completions (a correct ``add`` checked by 3 asserts) through the real
``code_tests`` reward at ``max_workers = --workers``, for each level:

``off``           a plain subprocess, no audit hook (the floor: starting Python and the harness)
``python_guard``  a plain subprocess with the Python audit hook (the guard before bubblewrap)
``bwrap``         full isolation: bubblewrap namespaces, nobody, seccomp, private tmpfs, audit hook

Each level runs ``--repeats`` times; the JSON keeps every run (ms per sample, samples/s) with the
CPU model, its AVX-512 flags, the core count, the interpreter and the load average before and
after, because on a shared machine other work moves these numbers.

As root, samples run as an unprivileged uid, which cannot start an interpreter under root's
folders (a venv over ``/root/.pyenv``, ``/work``): without bubblewrap's mount namespace the sandbox
refuses it rather than run samples as root. So a root bench, as the sandbox tests do, runs every
level with the system interpreter every user can run (``/usr/bin/python3``; ``--python`` picks
another): one interpreter for all levels keeps their start-up cost comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from polyrl.bench.machine import cpu_info
from polyrl.errors import RewardError
from polyrl.rewards.code import _options, sandbox_for, score_code

TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(-1, 1) == 0\n"
SOLUTION = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"
LEVELS = {
    "off": {"isolation": "off", "audit_hook": False},
    "python_guard": {"isolation": "off", "audit_hook": True},
    "bwrap": {"isolation": "require", "audit_hook": True},
}


def default_python() -> str | None:
    """The interpreter samples run: this one (None), except as root the system one (module doc)."""
    if os.geteuid() != 0:
        return None
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        raise SystemExit("error: running as root needs an interpreter every user can run (no /usr/bin/python3). "
                         "Fix: --python /path/to/python3 readable by nobody, or run the bench as a non-root user")
    return system


def level_options(level: dict[str, object], workers: int, python: str | None) -> dict[str, object]:
    """The ``code_tests`` options of one level."""
    return {**level, "max_workers": workers, "timeout_s": 30, "python": python}


def one_run(level: dict[str, object], samples: int, workers: int, python: str | None) -> dict[str, float]:
    options = level_options(level, workers, python)
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
    ap.add_argument("--python", default=None,
                    help="interpreter of the samples (default: this one; as root /usr/bin/python3)")
    args = ap.parse_args()
    unknown = [name for name in args.levels.split(",") if name not in LEVELS]
    if unknown:
        raise SystemExit(f"error: --levels {','.join(unknown)} unknown. Fix: a comma-separated subset of "
                         f"{','.join(LEVELS)}")
    python = args.python or default_python()
    version = subprocess.run([python or sys.executable, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=False).stdout.strip()
    result: dict[str, object] = {"cpu": cpu_info(), "samples": args.samples, "max_workers": args.workers,
                                 "python": python or sys.executable, "python_version": version,
                                 "euid": os.geteuid(), "load_before": os.getloadavg(), "levels": {}}
    for name in args.levels.split(","):
        try:
            runs = [one_run(LEVELS[name], args.samples, args.workers, python) for _ in range(args.repeats)]
        except RewardError as exc:
            raise SystemExit(f"error: level {name}: {exc}") from None
        ms = [r["ms_per_sample"] for r in runs]
        result["levels"][name] = {"runs": runs, "ms_per_sample_median": statistics.median(ms),
                                  "ms_per_sample_min": min(ms), "ms_per_sample_max": max(ms),
                                  "samples_per_s_median": statistics.median(r["samples_per_s"] for r in runs),
                                  "report": sandbox_for(_options(level_options(LEVELS[name], args.workers,
                                                                               python))).report}
        print(f"{name:13s} {statistics.median(ms):7.1f} ms/sample (min {min(ms):.1f}, max {max(ms):.1f}) "
              f"{result['levels'][name]['samples_per_s_median']:6.1f} samples/s", flush=True)
    result["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['cpu']['model']}, {result['cpu']['cpus']} CPUs; load {result['load_before']} -> "
          f"{result['load_after']}; wrote {args.out}")


if __name__ == "__main__":
    main()
