"""The CPU sampler's decode steps with each prompt's keys and values held once for its group, or
copied to every row (``polyrl_torch.shared_prompt_cache``), in one process, alternating.

    python bench/shared_prompt_ab.py --threads 1 --rounds 6 \\
        --output bench/results/shared_prompt_ab_smollm2_8x4x32_1thread.json    # the reference batch
    # long prompts, large groups: --prompts 1 --prompt-tokens 512 --group-size 16 --max-new-tokens 64

Why: how much a shared prompt saves depends on how many bytes of prompt keys and values each step
reads per row against the weights it streams anyway, so the bench takes the prompt's length and
the group's size. Both ways run on the same engine and packed copy (the decode step's switch
flipped), taking turns (who goes first alternates); the report gives each pair's ratio. The two
ways attend in a different order of float operations, so their log-probs agree to float rounding,
not bit for bit: the same tokens get log-probs within ``ROUNDING`` (the largest gap is reported),
and a row may part ways where a draw lands within that rounding of the boundary between two tokens
(likeliest in the long tail of a flat distribution, such as random-token prompts give; the rows
that parted are counted).
"""

from __future__ import annotations

import functools
import sys

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams, TokenPrompt

#: The largest log-prob gap between the two ways that still counts as float rounding.
ROUNDING = 1e-3


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.split("\n\n")[0])
    p.add_argument("--prompt-tokens", type=int, default=0,
                   help="prompts of this many random tokens (0: the reference prompts)")
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    if args.prompt_tokens < 0:
        print("error: --prompt-tokens must be >= 0 (0: the reference prompts)", file=sys.stderr)
        return 2
    import torch

    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
        max_length=args.max_new_tokens + max(256, args.prompt_tokens + 8)))
    if args.prompt_tokens:
        vocab = engine.raw.causal_lm.config.vocab_size
        draw = torch.Generator().manual_seed(args.prompt_tokens)
        prompts: list = [TokenPrompt([int(i) for i in torch.randint(100, vocab, (args.prompt_tokens,), generator=draw)])
                         for _ in range(args.prompts)]
    else:
        prompts = bench_prompts(args.prompts)
    step = ab_workload.written_out_step(engine, prompts, args.model)
    if step is None:
        return 2

    def sample(shared: bool, sampling: SamplingParams) -> list:
        step.share_prompts = shared
        return engine.generate(prompts, sampling)

    seconds, rounds = ab_workload.alternating_rounds(
        args, {"per_row": functools.partial(sample, False), "shared": functools.partial(sample, True)})
    report = ab_workload.two_way_report(args, seconds, rounds, "per_row", "shared", len(prompts) * args.group_size,
                                        ROUNDING, prompt_tokens=args.prompt_tokens or "reference")
    return 1 if report is None else 0


if __name__ == "__main__":
    sys.exit(main())
