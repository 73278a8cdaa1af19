"""The CPU sampler's decode steps through transformers' forward, or written out as their tensor ops
(``polyrl_torch.decode_step``), in one process, alternating.

    python bench/decode_step_ab.py --threads 1 --rounds 6 \
        --output bench/results/decode_step_ab_smollm2_32rows_1thread.json
    # few rows, long completions: --prompts 1 --max-new-tokens 128 --rounds 4
    # a mixed-precision sampler (bfloat16 copy): --compute-dtype bfloat16

Why: the written-out step saves work around the matmuls of a few-row step, a change of a few
percent, less than a shared VM's speed drifts between runs, so both ways run on the same engine
and the same packed copy (its decode step switched on and off), taking turns (who goes first
alternates), and the report gives each pair's ratio. The two ways must sample the same tokens
with the same log-probs, bit for bit.
"""

from __future__ import annotations

import sys

from polyrl.bench import ab_workload


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    p.add_argument("--compute-dtype", choices=["bfloat16"], default=None)
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    engine, prompts = ab_workload.sampling_engine(args, args.compute_dtype)
    copy = engine.raw.generation_copy
    written_out = copy.decode_step
    if written_out is None:
        print(f"error: {args.model}'s sampler has no written-out decode step", file=sys.stderr)
        return 2
    timing = ab_workload.alternate_sampling(engine, prompts, args, {
        "transformers": lambda: setattr(copy, "decode_step", None),
        "written_out": lambda: setattr(copy, "decode_step", written_out)})
    if not timing["bit_identical"]:
        print("error: the two ways sampled different tokens or log-probs", file=sys.stderr)
        return 1
    report = {**ab_workload.report_header(args), "compute_dtype": args.compute_dtype or "float32", **timing}
    ab_workload.write_report(args, report, ("median_s", "transformers_over_written_out_each",
                                            "transformers_over_written_out_median", "bit_identical"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
