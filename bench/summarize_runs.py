"""The README's learning figures from finished `polyrl train` runs, one JSON for several runs.

    python bench/summarize_runs.py --out bench/results/FILE.json --note "..." NAME=RUN_DIR ...

Reads each run's ``eval_completions.jsonl`` (held-out greedy accuracy before and after training)
and ``metrics.jsonl`` (mean reward per step, the ``mismatch_*`` metrics when present), so the
numbers in README come from the run's own files rather than from a copied log line.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from polyrl.bench.machine import cpu_info

MISMATCH_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_corrected")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def accuracy(rows: list[dict], phase: str) -> float | None:
    picked = [r for r in rows if r.get("phase") == phase]
    return sum(bool(r["correct"]) for r in picked) / len(picked) if picked else None


def summarize(run_dir: Path, last: int) -> dict[str, object]:
    steps = [m for m in _jsonl(run_dir / "metrics.jsonl") if "reward_mean" in m]
    evals = _jsonl(run_dir / "eval_completions.jsonl") if (run_dir / "eval_completions.jsonl").exists() else []
    rewards = [round(m["reward_mean"], 4) for m in steps]
    tail = rewards[-last:]
    out: dict[str, object] = {
        "run_dir": str(run_dir), "steps": len(steps),
        "held_out_accuracy_before": accuracy(evals, "before"),
        "held_out_accuracy_after": accuracy(evals, "after"),
        "reward_first_step": rewards[0] if rewards else None,
        f"reward_mean_last_{len(tail)}": round(sum(tail) / len(tail), 4) if tail else None,
        "reward_per_step": rewards,
        "seconds_in_steps": round(sum(m.get("time/step", 0.0) for m in steps), 1),
    }
    for key in MISMATCH_KEYS:
        if any(key in m for m in steps):
            out[f"{key}_per_step"] = [m.get(key) for m in steps]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="NAME=RUN_DIR")
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--last", type=int, default=10, help="how many final steps the reward mean covers")
    parser.add_argument("--note", default="")
    args = parser.parse_args()

    from polyrl import strict_json

    result: dict[str, object] = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_info(args.threads), "note": args.note,
        "runs": {name: summarize(Path(d), args.last) for name, d in (r.split("=", 1) for r in args.runs)},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(strict_json.dumps(result, indent=2) + "\n")
    print(strict_json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
