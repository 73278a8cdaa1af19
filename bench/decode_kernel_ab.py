"""The sampler on polyrl's own float32 decode kernel against oneDNN's packed weights, in one
process, taking turns.

    python bench/decode_kernel_ab.py --threads 1 --rounds 6 \\
        --output bench/results/decode_kernel_ab_smollm2_1thread.json

Why: ``polyrl_torch.decode_kernel`` replaces oneDNN's packed matmul in the sampler's copy where
``backends.options.decode_kernel`` is "auto" (Intel AVX-512 and AMD AVX2-only CPUs); its worth is the ratio
of whole generate calls (prefill, decode steps, sampling) on the same weights and prompts, with the same
seeds. Two engines load the same model, one per way ("on" and "off"), and generate in turns, who goes
first alternating. The kernels add in another order, so log-probs agree to float32 rounding (the
largest gap over shared tokens is reported) and a row may part ways where a draw lands within that
rounding of a token boundary (counted).
"""

from __future__ import annotations

import functools
import sys

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl_torch.bench.kernel_ab import kernel_args, kernel_engine
from polyrl.types import SamplingParams

#: The largest log-prob gap over shared tokens that still counts as float32 rounding.
ROUNDING = 1e-3
WAYS = ("onednn", "kernel")


def main(argv: list[str] | None = None) -> int:
    args = kernel_args(__doc__.split("\n\n")[0], argv)
    if args is None:
        return 2
    import torch

    from polyrl_torch import decode_kernel

    from polyrl_torch.generation_weights import PackedLinear

    engines = {way: kernel_engine(args, "on" if way == "kernel" else "off") for way in WAYS}
    prompts = bench_prompts(args.prompts)
    for engine in engines.values():  # warm-up: the sampler's copy, packed or in panels
        engine.generate(prompts, SamplingParams(max_new_tokens=4, n=args.group_size, seed=0, ignore_eos=True))
    on_kernel = {way: {m.kernel for m in engines[way].raw.generation_copy.model.modules()
                       if isinstance(m, PackedLinear)} for way in WAYS}
    if on_kernel != {"onednn": {False}, "kernel": {True}}:
        print(f"error: the engines did not run the ways asked (PackedLinear.kernel per way: {on_kernel})",
              file=sys.stderr)
        return 1
    seconds, rounds = ab_workload.alternating_rounds(
        args, {way: functools.partial(engines[way].generate, prompts) for way in WAYS}, digits=3)
    report = ab_workload.two_way_report(args, seconds, rounds, "onednn", "kernel", args.prompts * args.group_size,
                                        ROUNDING, torch=torch.__version__,
                                        kernel_build=decode_kernel.instruction_set())
    return 1 if report is None else 0


if __name__ == "__main__":
    sys.exit(main())
