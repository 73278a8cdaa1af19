"""The sampler's written-out decode step in torch ops against the same step with its elementwise
ops and shared-prompt attention in C, in one process, taking turns.

    python bench/native_ops_ab.py --threads 1 --rounds 6 \\
        --output bench/results/native_ops_ab_smollm2_1thread.json
    # few rows, long completions: --prompts 1 --group-size 4 --max-new-tokens 256 --rounds 4

Why: where the sampler runs polyrl's decode kernel, its written-out step also runs each norm (with
the residual add before it), the rotary embedding, the SiLU product (``polyrl_torch.decode_ops``)
and the attention over a shared prompt (``polyrl_torch.decode_attention``) as one C call each
(``LlamaDecodeStep.native``). Both ways run on one engine and one copy of the weights (the kernel's
panels), the step's switch flipped between generate calls, who goes first alternating; the C ops
round differently, so log-probs agree to float32 rounding (the largest gap over shared tokens is
reported) and a row may part where a draw lands within that rounding of a token boundary (counted).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl_torch.bench.kernel_ab import kernel_args, kernel_engine
from polyrl.types import Completion, SamplingParams

#: The largest log-prob gap over shared tokens that still counts as float32 rounding.
ROUNDING = 1e-3


def main(argv: list[str] | None = None) -> int:
    args = kernel_args(__doc__.split("\n\n")[0], argv)
    if args is None:
        return 2
    import torch

    from polyrl_torch import decode_kernel

    engine = kernel_engine(args)
    prompts = bench_prompts(args.prompts)
    engine.generate(prompts, SamplingParams(max_new_tokens=4, n=args.group_size, seed=0, ignore_eos=True))
    step = engine.raw.generation_copy.decode_step
    if step is None or not step.native:
        print("error: this model's sampler has no written-out step with C ops (a Llama-code model, lean_decode "
              "on)", file=sys.stderr)
        return 2

    def way(native: bool) -> Callable[[SamplingParams], list[Completion]]:
        def sample(sampling: SamplingParams) -> list[Completion]:
            step.native = native
            return engine.generate(prompts, sampling)
        return sample

    seconds, rounds = ab_workload.alternating_rounds(args, {"torch_ops": way(False), "c_ops": way(True)}, digits=3)
    report = ab_workload.two_way_report(args, seconds, rounds, "torch_ops", "c_ops", args.prompts * args.group_size,
                                        ROUNDING, torch=torch.__version__,
                                        kernel_build=decode_kernel.instruction_set())
    return 1 if report is None else 0


if __name__ == "__main__":
    sys.exit(main())
