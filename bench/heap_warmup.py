"""Seconds and page faults of each GRPO step's phases from a process's first step on, in one process.

    python bench/heap_warmup.py --threads 1 --rounds 5 [--lora] \\
        --output bench/results/heap_warmup_smollm2_full_1thread.json

Why: ``polyrl bench`` takes the median of the steps after the first, and a step that still grows
the C heap pays a page fault for every 4 KiB page it touches for the first time (on a KVM guest,
paid by the host too), so a short bench's first timed step can be slower than a long run's steps.
This shows from which step on the heap stops growing (``polyrl_torch.host_memory`` keeps what it
reached): each round samples the workload (``--prompts`` x ``--group-size`` x
``--max-new-tokens``) and trains one step on a batch sampled once, and the report gives each phase's
seconds and minor page faults (``getrusage``), round by round.
"""

from __future__ import annotations

import resource
import sys
import time

from polyrl.algorithms.objective import Objective
from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.types import SamplingParams


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser("each step's seconds and page faults from the first step on")
    p.add_argument("--lora", action="store_true", help="polyrl's default LoRA instead of full weights")
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    before = _faults()
    engine, batch = ab_workload.engine_and_batch(args, args.lora)  # loads, and samples the batch once
    rounds = [{"phase": "load and first sample", "faults": _faults() - before}]
    prompts = bench_prompts(args.prompts)
    for r in range(args.rounds):
        row: dict[str, float] = {}
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=r + 1, ignore_eos=True)
        for phase, run in (("generate", lambda sampling=sampling: engine.generate(prompts, sampling)),
                           ("train", lambda: engine.train_step(batch, Objective()))):
            faults, start = _faults(), time.perf_counter()
            run()
            row[f"{phase}_s"] = round(time.perf_counter() - start, 3)
            row[f"{phase}_faults"] = _faults() - faults
        print(f"step {r + 1}: {row}", file=sys.stderr)
        rounds.append({"step": r + 1, **row})
    ab_workload.write_report(args.output, {**ab_workload.report_header(args), "lora": args.lora, "steps": rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
