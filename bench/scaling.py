"""polyrl vs TRL over completion length, group size and full vs LoRA, in one run.

    python bench/scaling.py --model smollm2-135m-instruct --threads 1 --lengths 32,128,512 \\
        --groups 4,16 --lora both --tokens-per-step 1024 --steps 2 --trl \\
        --memory-lengths 1024,2048,4096 --trl-timeout 1800 --output bench/results/scaling.json [--resume]

Every length x group x full/LoRA point runs polyrl's bench child, then TRL's GRPOTrainer, each in
its own process at a fixed completion length (polyrl ``ignore_eos``, TRL ``min_new_tokens``), with
max(1, tokens_per_step // (group x length)) prompts so long points use fewer prompts. Memory points
(``--memory-lengths``) are 1 prompt x 2 completions, one step: peak RSS at long lengths. A side
past its timeout or crashing (OOM included) is recorded as such. The JSON is saved after every
point; ``--resume`` skips the points it already holds. ``--interleave`` runs each speed point's two
sides at once, stepping in turn, and records each step pair's ratio (memory points stay sequential).
Writes the JSON, a PNG beside it (speed-up vs TRL, peak RSS and MFU per phase against length) and a
markdown table (printed and beside it, .md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polyrl.bench.report import sweep_markdown, write_sweep_chart
from polyrl.bench.sweep import SweepPoint, plan_points, run_sweep
from polyrl.errors import ConfigError


def positive_ints(text: str) -> list[int]:
    """``32,128,512`` -> [32, 128, 512]; anything else is an argparse error naming the flag."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers (e.g. 32,128,512)") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 32,128,512")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="model folder or registered name")
    p.add_argument("--backend", default="torch", help="polyrl backend to compare with TRL")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lengths", type=positive_ints, default=[32, 128, 512], help="completion lengths")
    p.add_argument("--groups", type=positive_ints, default=[4, 16], help="group sizes")
    p.add_argument("--lora", choices=["full", "lora", "both"], default="both")
    p.add_argument("--tokens-per-step", type=int, default=1024,
                   help="sampled tokens per step: prompts = max(1, this // (group x length))")
    p.add_argument("--steps", type=int, default=2, help="steps per point (TRL times those after its first)")
    p.add_argument("--memory-lengths", type=positive_ints, default=[],
                   help="memory-only points: 1 prompt x 2 completions, one step (e.g. 1024,2048,4096)")
    p.add_argument("--trl", action=argparse.BooleanOptionalAction, default=True, help="run TRL at each point")
    p.add_argument("--timeout", type=float, default=None, help="seconds per polyrl child (default: none)")
    p.add_argument("--trl-timeout", type=float, default=None, help="seconds per TRL child (default: none)")
    p.add_argument("--interleave", action="store_true",
                   help="run each speed point's polyrl and TRL at once, stepping in turn (a drifting machine slows "
                        "both sides of a step pair alike); needs --trl")
    p.add_argument("--resume", action="store_true", help="skip the points already in --output")
    p.add_argument("--output", default="bench/results/scaling.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for flag in ("threads", "tokens_per_step", "steps", "timeout", "trl_timeout"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            print(f"error: --{flag.replace('_', '-')} must be positive, got {value}", file=sys.stderr)
            return 2
    if args.interleave and not args.trl:
        print("error: --interleave pairs polyrl's steps with TRL's: drop --no-trl, or drop --interleave", file=sys.stderr)
        return 2
    modes = {"full": [False], "lora": [True], "both": [False, True]}[args.lora]
    points = plan_points(args.lengths, args.groups, modes, args.tokens_per_step, args.steps, args.memory_lengths)

    def progress(point: SweepPoint, what: str) -> None:
        print(f"{what}: {point.key}", file=sys.stderr, flush=True)

    try:
        report = run_sweep(args.model, points, args.output, backend=args.backend, threads=args.threads,
                           tokens_per_step=args.tokens_per_step, steps=args.steps, trl=args.trl,
                           timeout=args.timeout, trl_timeout=args.trl_timeout, resume=args.resume,
                           interleave=args.interleave,
                           command=[sys.executable, *sys.argv] if argv is None else ["bench/scaling.py", *argv],
                           on_point=progress)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    output = Path(args.output)
    chart = write_sweep_chart(report, output.with_suffix(".png"))
    table = sweep_markdown(report)
    output.with_suffix(".md").write_text(table)
    print(table)
    print(f"{output}, {chart or 'no chart (pip install matplotlib)'}, {output.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
