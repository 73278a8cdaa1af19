"""The CPU sampler with each linear packed on its own, or with sibling projections sharing one
packed weight (``polyrl_torch.generation_weights.PackedSiblings``), in one process, alternating.

    python bench/sibling_packing_ab.py --threads 1 --rounds 8 \
        --output bench/results/sibling_packing_ab_smollm2_32rows_1thread.json
    # few rows, long completions: --prompts 1 --max-new-tokens 128

Float32 only (the sampler shares sibling weights in float32 only: ``generation_weights``).

Why: one wide matmul for q/k/v (and one for gate/up) instead of three (two) narrow ones saves a
few-row decode step the work around each call, a change of some percent, less than a shared VM's
speed drifts between runs, so one engine holds both copies and samples with them in turns (who goes
first alternates); the report gives each pair's ratio. Every output column is the same dot product
either way: the two must sample the same tokens with the same log-probs, bit for bit.
"""

from __future__ import annotations

import sys

from polyrl.bench import ab_workload


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    from polyrl_torch.generation_weights import GenerationCopy

    engine, prompts = ab_workload.sampling_engine(args)
    raw = engine.raw
    shared = raw.generation_copy
    if shared is None or not shared.siblings:
        print(f"error: {args.model}'s sampler has no packed sibling projections here", file=sys.stderr)
        return 2
    separate = GenerationCopy(raw, pack_siblings=False)
    timing = ab_workload.alternate_sampling(engine, prompts, args, {
        "separate": lambda: setattr(raw, "generation_copy", separate),
        "shared": lambda: setattr(raw, "generation_copy", shared)})
    if not timing["bit_identical"]:
        print("error: the two ways sampled different tokens or log-probs", file=sys.stderr)
        return 1
    report = {**ab_workload.report_header(args), "sibling_groups": len(shared.siblings), **timing}
    ab_workload.write_report(args, report, ("median_s", "separate_over_shared_each",
                                            "separate_over_shared_median", "bit_identical"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
