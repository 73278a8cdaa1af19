"""The CPU sampler's written-out decode step eager or compiled (``backends.options.compile_decode``),
in one process, alternating.

    python bench/compiled_decode_ab.py --threads 1 --rounds 6 --prompts 1 --max-new-tokens 128 \
        --output bench/results/compiled_decode_ab_smollm2_4rows_1thread.json
    # the reference batch: --prompts 8 --max-new-tokens 32

Why: compiling fuses the small ops between a step's matmuls, a change of some percent, less than a
shared VM's speed drifts between runs, so both ways run on the same engine and the same packed copy
(its step's layers switched between the compiled function and the method), taking turns (who goes
first alternates); the report gives each pair's ratio, and the one-off compile time apart (the
first compiled ``generate``). Fused kernels round differently, so the report gives the largest
log-prob gap between the ways where they sampled the same token, not a bit-identity check.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
        max_length=args.max_new_tokens + 256, options={"compile_decode": True}))
    prompts = bench_prompts(args.prompts)
    start = time.perf_counter()
    engine.generate(prompts, SamplingParams(max_new_tokens=3, n=args.group_size, seed=0))  # compiles
    compile_s = time.perf_counter() - start
    step = engine.raw.generation_copy.decode_step
    if step is None:
        print(f"error: {args.model}'s sampler has no written-out decode step", file=sys.stderr)
        return 2
    ways = {"eager": step._run_layers, "compiled": step._layers_forward}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    same_tokens, gaps = [], []
    for round_ in range(args.rounds):
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=round_ + 1,
                                  ignore_eos=True)
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        outputs = {}
        for name in order:
            step._layers_forward = ways[name]
            start = time.perf_counter()
            outputs[name] = engine.generate(prompts, sampling)
            seconds[name].append(time.perf_counter() - start)
        pairs = [(a, b) for x, y in zip(outputs["eager"], outputs["compiled"])
                 for a, b in zip(zip(x.completion_ids, x.logprobs), zip(y.completion_ids, y.logprobs))]
        same_tokens.append(sum(a[0] == b[0] for a, b in pairs) / len(pairs))
        gaps.append(max((float(abs(a[1] - b[1])) for a, b in pairs if a[0] == b[0]), default=0.0))
        print(f"round {round_}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in order), file=sys.stderr)
    ratios = [e / c for e, c in zip(seconds["eager"], seconds["compiled"])]
    report = {**ab_workload.report_header(args), "compile_s": compile_s, "generate_s": seconds,
              "median_s": {n: statistics.median(v) for n, v in seconds.items()},
              "eager_over_compiled_each": ratios, "eager_over_compiled_median": statistics.median(ratios),
              "same_token_share_each": same_tokens, "max_logprob_gap_same_tokens": max(gaps)}
    print(json.dumps({k: report[k] for k in ("compile_s", "median_s", "eager_over_compiled_each",
                                             "eager_over_compiled_median", "max_logprob_gap_same_tokens")}))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(strict_json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
