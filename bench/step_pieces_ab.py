"""Small pieces of a GRPO step, each timed in the ways it could be written, alternating in one
process: short masked attention (forward + backward), one sampling step's draw, and the training
pass's target log-probs over the output head's logits.

    python bench/step_pieces_ab.py --model smollm2-135m-instruct --threads 1 --rounds 6 \\
        --output bench/results/step_pieces_ab_smollm2_1thread.json

Why a bench of pieces: each change is worth a few percent of a step or less, below what a shared
VM's whole-step time drifts between runs, while one piece timed alone, its ways alternating, shows
it. Heads, vocabulary and width are ``--model``'s (SmolLM2: 9 query heads over 3 key heads of 64,
49,152 entries), the workload the reference one (8 prompts of 46 tokens, 4 completions of 32 each)
or the flags'.

* attention, per layer at the completion pass (``rows`` x ``tokens - 1`` queries after the prompt's
  keys) and the prompt pass: torch's flash SDPA; the scores scaled and masked in place after the
  matmul (autograd answers in-place ops on a matmul's output with copies of the scores in
  backward); and ``polyrl_torch.attention.matmul_attention``, whose ``baddbmm`` folds scale and
  mask into the matmul.
* sampling, one step over ``[rows, vocab]`` logits written by the output head's matmul just before
  (as in a decode step, so they are not all in cache): log-softmax for the sampled tokens'
  log-probs and then either a second softmax for the draw, or the exp of those log-probs (what the
  sampler does when no top-k / top-p / min-p / penalty filters the distribution); both then draw with
  ``polyrl_torch.generation.sample_probs`` and must pick the same tokens.
* target log-probs with the entropy, forward and backward, over the completion tokens' ``[tokens,
  vocab]`` logits (``polyrl_torch.target_logprobs``), its row blocks of 16 MB (as first written) or
  of ``BLOCK_ELEMENTS``; the passes are row-local, so both must give the same bits.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.bench.flops import ModelShape
from polyrl.registry import get_registry


def alternate(ways: list[str], rounds: int, one_round: Callable[[str], float],
              side: dict[str, list[float]] | None = None) -> tuple[dict[str, float], dict[str, list[float]]]:
    """``one_round(way)`` (milliseconds) for every way, ``rounds`` + 1 times, the order reversed every
    other round; round 0 only warms up. Returns each way's median and its rounds. ``side``: a second
    measure ``one_round`` appends per call (way -> list); its warm-up entries are dropped here too."""
    times: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(rounds + 1):
        for way in (ways if r % 2 == 0 else ways[::-1]):
            ms = one_round(way)
            if r:
                times[way].append(ms)
            elif side is not None:
                side[way].pop()
    return ({w: round(float(np.median(t)), 3) for w, t in times.items()},
            {w: [round(x, 3) for x in t] for w, t in times.items()})


def in_place_attention(query: Any, key: Any, value: Any, mask: Any) -> Any:
    """The scores rewritten in place after the matmul (the way ``matmul_attention`` was first written)."""
    import torch

    batch, heads, queries, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = heads // kv_heads
    scores = torch.matmul(query.reshape(batch, kv_heads, group * queries, dim), key.transpose(-1, -2))
    bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill_(~mask, torch.finfo(scores.dtype).min)
    scores = scores.view(batch, kv_heads, group, queries, keys).mul_(dim ** -0.5).add_(bias.unsqueeze(2))
    probs = torch.softmax(scores, dim=-1).view(batch, kv_heads, group * queries, keys)
    return torch.matmul(probs, value).view(batch, heads, queries, dim)


def attention_ways() -> dict[str, Callable[..., Any]]:
    import torch

    from polyrl_torch.attention import matmul_attention

    def flash(q: Any, k: Any, v: Any, mask: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    return {"flash_sdpa": flash, "in_place_scores": in_place_attention,
            "baddbmm": lambda q, k, v, mask: matmul_attention(q, k, v, mask, None)}


def attention_inputs(rows: int, queries: int, keys: int, heads: int, kv_heads: int, dim: int) -> tuple[Any, ...]:
    """Queries ``[rows, heads, queries, dim]`` as transposed views (as a model's projections give
    them), keys and values likewise, and a causal mask over the last ``queries`` keys."""
    import torch

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(rows, queries, heads, dim, generator=gen).transpose(1, 2).requires_grad_()
    k = torch.randn(rows, keys, kv_heads, dim, generator=gen).transpose(1, 2).requires_grad_()
    v = torch.randn(rows, keys, kv_heads, dim, generator=gen).transpose(1, 2).requires_grad_()
    mask = torch.ones(rows, 1, queries, keys, dtype=torch.bool).tril(keys - queries)
    return q, k, v, mask


def time_attention(rows: int, queries: int, keys: int, heads: dict[str, int], rounds: int,
                   reps: int) -> dict[str, Any]:
    """Per way, milliseconds per forward + backward (median over rounds) and the largest output
    difference from flash; ``heads``: ``heads``, ``kv_heads`` and ``dim`` (per head)."""
    import torch

    q, k, v, mask = attention_inputs(rows, queries, keys, **heads)
    grad = torch.randn(q.shape)
    ways = attention_ways()
    reference = ways["flash_sdpa"](q, k, v, mask).detach()
    diffs = {w: float((f(q, k, v, mask).detach() - reference).abs().max()) for w, f in ways.items()}

    def one_round(way: str) -> float:
        def step() -> None:
            torch.autograd.grad(ways[way](q, k, v, mask), (q, k, v), grad)
        step()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        return (time.perf_counter() - start) / reps * 1e3

    median, rounds_ms = alternate(list(ways), rounds, one_round)
    return {"rows": rows, "queries": queries, "keys": keys, "max_abs_diff_vs_flash": diffs,
            "ms_per_layer_fwd_bwd": median, "rounds_ms": rounds_ms}


def time_sampling(rows: int, vocab: int, hidden: int, rounds: int, reps: int) -> dict[str, Any]:
    """Per way, milliseconds per sampling step (median), the output head's matmul excluded."""
    import torch

    from polyrl_torch.generation import sample_probs

    gen = torch.Generator().manual_seed(0)
    head = torch.randn(vocab, hidden, generator=gen) * hidden ** -0.5
    states = torch.randn(rows, hidden, generator=gen) * 3
    draws = torch.rand(rows, generator=gen, dtype=torch.float64)
    ways: dict[str, Callable[[Any], Any]] = {
        "second_softmax": lambda logits: torch.softmax(logits, dim=-1),
        "exp_of_logprobs": lambda logp: logp.exp(),
    }
    picks: dict[str, Any] = {}

    def one_round(way: str) -> float:
        spent = 0.0
        for _ in range(reps):
            logits = states @ head.t()  # fresh logits, as the head writes them each step
            start = time.perf_counter()
            logp = torch.log_softmax(logits, dim=-1)
            probs = ways[way](logits if way == "second_softmax" else logp)
            picks[way] = sample_probs(probs, draws)
            logp.gather(-1, picks[way][:, None])
            spent += time.perf_counter() - start
        return spent / reps * 1e3

    median, rounds_ms = alternate(list(ways), rounds, one_round)
    return {"rows": rows, "vocab": vocab, "same_tokens": bool(torch.equal(picks["second_softmax"], picks["exp_of_logprobs"])),
            "ms_per_step": median, "rounds_ms": rounds_ms}


#: The target log-probs' first block size (logit entries), the "before" side of that piece.
FIRST_TARGET_BLOCK = 1 << 22


def time_target_logprobs(tokens: int, vocab: int, hidden: int, rounds: int, reps: int) -> dict[str, Any]:
    """Per way (block size), milliseconds for the forward with the entropy and for the backward
    (medians), the output head's matmul excluded; whether both ways gave the same bits."""
    import torch

    import polyrl_torch.target_logprobs as target

    gen = torch.Generator().manual_seed(0)
    head = torch.randn(vocab, hidden, generator=gen) * hidden ** -0.5
    states = torch.randn(tokens, hidden, generator=gen) * 3
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    grad = torch.randn(tokens, generator=gen)
    blocks = {"blocks_16mb": FIRST_TARGET_BLOCK, "blocks_now": target.BLOCK_ELEMENTS}
    kept = target.BLOCK_ELEMENTS
    results: dict[str, tuple[Any, ...]] = {}
    backward_ms: dict[str, list[float]] = {w: [] for w in blocks}

    def one_round(way: str) -> float:
        forward = backward = 0.0
        target.BLOCK_ELEMENTS = blocks[way]
        try:
            for _ in range(reps):
                logits = (states @ head.t()).requires_grad_()  # fresh, as the head writes them
                start = time.perf_counter()
                picked, entropy = target.target_logprobs(logits, targets, 1.0, with_entropy=True)
                middle = time.perf_counter()
                (logit_grad,) = torch.autograd.grad(picked, logits, grad)
                forward, backward = forward + middle - start, backward + time.perf_counter() - middle
                results[way] = (picked.detach(), entropy, logit_grad)
        finally:
            target.BLOCK_ELEMENTS = kept
        backward_ms[way].append(backward / reps * 1e3)
        return forward / reps * 1e3

    median, rounds_ms = alternate(list(blocks), rounds, one_round, side=backward_ms)
    same = all(torch.equal(a, b) for a, b in zip(results["blocks_16mb"], results["blocks_now"]))
    return {"tokens": tokens, "vocab": vocab, "block_elements": blocks, "same_bits": same,
            "ms_forward_with_entropy": median, "rounds_ms_forward": rounds_ms,
            "ms_backward": {w: round(float(np.median(t)), 3) for w, t in backward_ms.items()}}


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20, help="calls per way per round")
    p.add_argument("--prompt-tokens", type=int, default=46)
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    if args.reps < 1 or min(args.prompt_tokens, args.max_new_tokens) < 2:
        print("error: --reps must be >= 1, --prompt-tokens and --max-new-tokens >= 2", file=sys.stderr)
        return 2
    import torch

    shape = ModelShape.from_config(get_registry().resolve_model(args.model))
    torch.set_num_threads(args.threads)
    rows, tail = args.prompts * args.group_size, args.max_new_tokens - 1
    heads = {"heads": shape.heads, "kv_heads": shape.kv_heads, "dim": shape.head_dim}
    report = {
        **ab_workload.report_header(args), "reps": args.reps, "prompt_tokens": args.prompt_tokens,
        "attention_completion_pass": time_attention(rows, tail, args.prompt_tokens + tail, heads, args.rounds, args.reps),
        "attention_prompt_pass": time_attention(args.prompts, args.prompt_tokens, args.prompt_tokens, heads,
                                                args.rounds, args.reps),
        "sampling_step": time_sampling(rows, shape.vocab, shape.hidden, args.rounds, args.reps),
        "target_logprobs": time_target_logprobs(rows * args.max_new_tokens, shape.vocab, shape.hidden,
                                                args.rounds, max(1, args.reps // 10)),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}), flush=True)
    if args.output:
        args.output.write_text(strict_json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
