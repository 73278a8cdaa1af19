"""Sampling with fixed shapes (on CUDA: one captured graph replayed per token) against the
row-dropping loop, in one process, taking turns.

    python bench/fixed_decode_ab.py --model .gpu/models/smollm2-135m-shape --device cuda \\
        --compute-dtype bfloat16 --prompts 8 --group-size 8 --max-new-tokens 256 --rounds 4 \\
        --output bench/results/gpu/fixed_decode_ab_135m.json

Why: the GPU runs found generation bound by the host's kernel launches (README "On a GPU"), which
``polyrl_torch.fixed_decode`` replaces by graph replays; its worth is the ratio of the two ways on
the same weights and prompts, with the same seeds. Two engines load the same model, one per way
(``backends.options.fixed_shape_decode`` "on" and "off"), and generate in turns, who goes first
alternating; each generate is timed to the device's end. The ways compute in a different order of
float operations (all rows to the end, attention over the whole capacity), so their log-probs agree
to rounding, not bit for bit: the same tokens get log-probs within ``ROUNDING`` (the largest gap is
reported), and a row may part ways where a draw lands within that rounding of a token boundary
(the rows that parted are counted). On the CPU the fixed shapes run eagerly (no graph): that
checks this script, not the speed a GPU gets.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from typing import Any

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams

#: The largest log-prob gap between the two ways that still counts as rounding (bfloat16 on a GPU).
ROUNDING = 0.05
WAYS = ("dropping", "fixed")


def _run(args: Any, replays: dict[str, int]) -> dict[str, Any] | None:
    """Both ways' rounds; the report, or None (an ``error:`` line printed) when they disagree."""
    import torch

    registry = get_registry()
    engines = {way: Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device=args.device,
        compute_dtype=args.compute_dtype, max_length=args.max_new_tokens + 256,
        options={"fixed_shape_decode": "on" if way == "fixed" else "off"})) for way in WAYS}
    device = torch.device(str(engines["fixed"].raw.device))
    prompts = bench_prompts(args.prompts)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for engine in engines.values():  # warm-up: lazy initialisation, the sampler's copy, kernel choice
        engine.generate(prompts, SamplingParams(max_new_tokens=4, n=args.group_size, seed=0, ignore_eos=True))
    seconds, rounds = ab_workload.alternating_rounds(
        args, {way: functools.partial(engines[way].generate, prompts) for way in WAYS}, sync, digits=3)
    parted, gap = ab_workload.agreement(rounds, "dropping", "fixed")
    tokens = sum(len(c.completion_ids) for c in rounds[-1]["fixed"])
    if gap > ROUNDING:
        print(f"error: the two ways gave different log-probs for the same tokens (largest gap {gap:.3g})",
              file=sys.stderr)
        return None
    pairs = [d / f for d, f in zip(seconds["dropping"], seconds["fixed"])]
    median = {w: statistics.median(v) for w, v in seconds.items()}
    report = {**ab_workload.report_header(args), "device": str(device), "compute_dtype": args.compute_dtype or "float32",
              "torch": torch.__version__, "generate_s": seconds, "median_s": median,
              "tokens_per_s": {w: tokens / s for w, s in median.items()},
              "ms_per_decode_step": {w: 1000 * s / args.max_new_tokens for w, s in median.items()},
              "dropping_over_fixed_each": pairs, "dropping_over_fixed_median": statistics.median(pairs),
              "fixed_steps": replays["steps"], "graph_replays": replays["graphs"],
              "rows_parted": parted, "rows": args.rounds * args.prompts * args.group_size, "largest_logprob_gap": gap}
    return report


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (CUDA when there is one), cpu, cuda, ...")
    p.add_argument("--compute-dtype", choices=["bfloat16"], default=None)
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    import torch

    from polyrl_torch.fixed_decode import FixedShapeDecoder

    replays = {"steps": 0, "graphs": 0}
    step = FixedShapeDecoder.step

    def counted(self: FixedShapeDecoder, tokens: torch.Tensor) -> torch.Tensor:
        replays["steps"] += 1
        replays["graphs"] += self.graph is not None
        return step(self, tokens)

    FixedShapeDecoder.step = counted  # type: ignore[method-assign]
    try:
        report = _run(args, replays)
    finally:
        FixedShapeDecoder.step = step  # type: ignore[method-assign]
    if report is None:
        return 1
    print(json.dumps({k: report[k] for k in ("device", "median_s", "ms_per_decode_step", "dropping_over_fixed_each",
                                             "dropping_over_fixed_median", "graph_replays", "fixed_steps",
                                             "rows_parted", "largest_logprob_gap")}))
    ab_workload.write_report(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
