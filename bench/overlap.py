"""GRPO steps with and without ``generation.overlap``, side by side in one run.

    python bench/overlap.py [--model smollm2-135m-instruct] [--steps 4] [--threads 1] [--out FILE]

Runs the trainer (torch backend, 8 prompts x 4 samples, 32 new tokens, ``train.threads`` each
side) twice, each in its own child process: once with generation inside the step, once with the
next step sampled on a worker thread while this one trains. Step 0 is never overlapped, so the
table reports the median of steps 1.. (seconds per step, the seconds a step waited for its
rollout, the generation's own duration, the weight push), the speed-up, and each child's peak RSS.
Without overlap the run uses ``threads`` cores; with it, up to twice that (sampler + trainer).
Writes JSON (default ``bench/results/overlap_<model>_<threads>thread.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def child_main(model: str, overlap: bool, steps: int, threads: int) -> dict:
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix="polyrl-bench-overlap-") as out:
        config = RunConfig.from_dict({
            "model": {"path": model},
            "generation": {"group_size": 4, "max_new_tokens": 32, "overlap": overlap},
            "data": {"task": "arithmetic", "options": {"digits": 2}},
            "rewards": [{"name": "numeric_match"}],
            "optimizer": {"lr": 1e-6},
            "train": {"steps": steps, "prompts_per_step": 8, "threads": threads, "output_dir": out},
        })
        trainer = Trainer(config)
        history = trainer.run(progress=False)["history"]
    later = history[1:]

    def median(key: str) -> float:
        return float(np.median([m.get(key, 0.0) for m in later]))

    return {
        "overlap": overlap, "steps": steps,
        "step_s": median("time/step"), "waited_for_rollout_s": median("time/generate"),
        "generate_s": median("generate_seconds"), "train_s": median("time/train"),
        "sync_s": median("time/sync"), "policy_lag": [m["policy_lag"] for m in history],
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=["inline", "overlap"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child_main(args.model, args.child == "overlap", args.steps, args.threads)))
        return

    rows = []
    for mode in ("inline", "overlap"):
        proc = subprocess.run([sys.executable, __file__, "--child", mode, "--model", args.model,
                               "--steps", str(args.steps), "--threads", str(args.threads)],
                              capture_output=True, text=True, env={**os.environ, "POLYRL_LOG_LEVEL": "warning"})
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(lines[-1][len("RESULT "):]))
    inline, overlap = rows
    result = {
        "model": args.model, "threads_per_side": args.threads,
        "workload": "GRPO, 8 prompts x 4 samples, 32 new tokens, torch backend",
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count()},
        "inline": inline, "overlap": overlap, "speedup": inline["step_s"] / overlap["step_s"],
    }
    name = Path(args.model).name.lower()
    out = Path(args.out or f"bench/results/overlap_{name}_{args.threads}thread.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'mode':<8} {'step s':>7} {'waited s':>9} {'generate s':>11} {'train s':>8} {'sync s':>7} {'RSS GB':>7}")
    for row in rows:
        print(f"{'overlap' if row['overlap'] else 'inline':<8} {row['step_s']:>7.2f} {row['waited_for_rollout_s']:>9.2f} "
              f"{row['generate_s']:>11.2f} {row['train_s']:>8.2f} {row['sync_s']:>7.2f} {row['peak_rss_gb']:>7.2f}")
    print(f"overlap speed-up: {result['speedup']:.2f}x (steps 1..{args.steps - 1}, medians) -> {out}")


if __name__ == "__main__":
    main()
