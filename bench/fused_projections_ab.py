"""The CPU sampler with each layer's sibling projections packed as one matrix, or each on its own,
in one process, alternating.

    python bench/fused_projections_ab.py --threads 1 --rounds 8 [--compute-dtype bfloat16] \\
        --output bench/results/fused_projections_ab_smollm2_1thread.json
    # few rows, long completions: --prompts 1 --max-new-tokens 512 --rounds 4

Why: ``polyrl_torch.packed_linear.FusedProjections`` (q/k/v and gate/up as one oneDNN matmul each)
changes a generation's time by a few percent, less than a shared VM's speed drifts between runs,
so the two ways run as two engines on the same weights in one process, taking turns (who goes
first alternates), and the report gives each pair's ratio. Both ways sample from the same seed;
the report counts the rounds whose tokens differed (float rounding can move a draw across a
token boundary; both ways still sample the same number of tokens) and the largest log-prob gap on
the rounds that agree.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams

#: float32 log-probs of one token from two matmul layouts (other summation order); bfloat16 rounds more
LOGPROB_TOLERANCE = {None: 1e-3, "bfloat16": 5e-2}


def sampler(args: Any, fused: bool) -> Engine:
    """A CPU torch engine whose sampler fuses sibling projections or not (the module's list of
    siblings emptied while its copy is packed)."""
    import polyrl_torch.packed_linear as packed_linear

    registry = get_registry()
    siblings = packed_linear.FUSABLE_SIBLINGS
    packed_linear.FUSABLE_SIBLINGS = siblings if fused else ()
    try:
        engine = Engine(registry, "torch", EngineConfig(
            model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
            compute_dtype=args.compute_dtype, max_length=args.max_new_tokens + 256))
        engine.generate(bench_prompts(1), SamplingParams(max_new_tokens=2, seed=0))  # packs the copy now
    finally:
        packed_linear.FUSABLE_SIBLINGS = siblings
    groups = len(engine.raw.generation_copy.fused)
    if (groups > 0) != fused:
        raise SystemExit(f"error: the {'fused' if fused else 'unfused'} sampler has {groups} fused groups")
    return engine


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    p.add_argument("--compute-dtype", choices=["bfloat16"], default=None)
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    ways = {"fused": sampler(args, True), "separate": sampler(args, False)}
    prompts = bench_prompts(args.prompts)
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    worst_logprob_gap, rounds_differing = 0.0, 0
    for round_ in range(args.rounds):
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=round_ + 1,
                                  ignore_eos=True)
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        outputs = {}
        for name in order:
            start = time.perf_counter()
            outputs[name] = ways[name].generate(prompts, sampling)
            seconds[name].append(time.perf_counter() - start)
        fused, separate = outputs["fused"], outputs["separate"]
        if [list(c.completion_ids) for c in fused] != [list(c.completion_ids) for c in separate]:
            rounds_differing += 1
        else:
            gap = max(float(np.abs(np.subtract(a.logprobs, b.logprobs)).max()) for a, b in zip(fused, separate))
            worst_logprob_gap = max(worst_logprob_gap, gap)
        print(f"round {round_}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in order), file=sys.stderr)
    if worst_logprob_gap > LOGPROB_TOLERANCE[args.compute_dtype]:
        print(f"error: log-probs differ by {worst_logprob_gap:.2e} between the two ways", file=sys.stderr)
        return 1
    if rounds_differing == args.rounds:
        print("error: the two ways sampled different tokens in every round", file=sys.stderr)
        return 1
    pairs = [s / f for s, f in zip(seconds["separate"], seconds["fused"])]
    report = {**ab_workload.report_header(args), "compute_dtype": args.compute_dtype or "float32",
              "generate_s": seconds, "median_s": {n: statistics.median(v) for n, v in seconds.items()},
              "separate_over_fused_each": pairs, "separate_over_fused_median": statistics.median(pairs),
              "worst_logprob_gap": worst_logprob_gap, "rounds_with_different_tokens": rounds_differing}
    print(json.dumps({k: report[k] for k in ("median_s", "separate_over_fused_each", "separate_over_fused_median",
                                             "worst_logprob_gap", "rounds_with_different_tokens")}))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(strict_json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
