"""The CPU sampler's decode steps through transformers' forward, or written out as their tensor ops
(``polyrl_torch.decode_step``), in one process, alternating.

    python bench/decode_step_ab.py --threads 1 --rounds 6 \\
        --output bench/results/decode_step_ab_smollm2_32rows_1thread.json
    # few rows, long completions: --prompts 1 --max-new-tokens 128 --rounds 4
    # a mixed-precision sampler (bfloat16 copy): --compute-dtype bfloat16

Why: the written-out step saves work around the matmuls of a few-row step, a change of a few
percent, less than a shared VM's speed drifts between runs, so both ways run on the same engine
and the same packed copy (its decode step switched on and off), taking turns (who goes first
alternates), and the report gives each pair's ratio. The two ways must sample the same tokens
with the same log-probs, bit for bit, so both keep per-row caches (a shared prompt cache is
``bench/shared_prompt_ab.py``'s question).
"""

from __future__ import annotations

import functools
import json
import statistics
import sys

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    p.add_argument("--compute-dtype", choices=["bfloat16"], default=None)
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
        compute_dtype=args.compute_dtype, max_length=args.max_new_tokens + 256,
        options={"shared_prompt_attention": False}))  # per-row caches both ways: bit for bit
    prompts = bench_prompts(args.prompts)
    written_out = ab_workload.written_out_step(engine, prompts, args.model)
    if written_out is None:
        return 2
    written_out.native = False  # its torch ops, the same bits as transformers' (C ops: bench/native_ops_ab.py)
    copy = engine.raw.generation_copy

    def sample(step: object, sampling: SamplingParams) -> list:
        copy.decode_step = step
        return engine.generate(prompts, sampling)

    seconds, rounds = ab_workload.alternating_rounds(
        args, {"transformers": functools.partial(sample, None), "written_out": functools.partial(sample, written_out)})
    identical = all(list(a.completion_ids) == list(b.completion_ids) and list(a.logprobs) == list(b.logprobs)
                    for outputs in rounds for a, b in zip(outputs["transformers"], outputs["written_out"]))
    if not identical:
        print("error: the two ways sampled different tokens or log-probs", file=sys.stderr)
        return 1
    pairs = [t / w for t, w in zip(seconds["transformers"], seconds["written_out"])]
    report = {**ab_workload.report_header(args), "compute_dtype": args.compute_dtype or "float32",
              "generate_s": seconds,
              "median_s": {n: statistics.median(v) for n, v in seconds.items()},
              "transformers_over_written_out_each": pairs,
              "transformers_over_written_out_median": statistics.median(pairs), "bit_identical": identical}
    print(json.dumps({k: report[k] for k in ("median_s", "transformers_over_written_out_each",
                                             "transformers_over_written_out_median", "bit_identical")}))
    ab_workload.write_report(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
