"""``polyrl.bench.flops``: the workload's FLOPs, checked against a count written out by hand.

MFU is only as right as its numerator: full training is 3x the forward; LoRA's frozen linears and
``lm_head`` take input gradients only, attention's backward is still 2x its forward, and the
adapters' own products (forward, input and weight gradients) are counted, not waved away.
"""

from __future__ import annotations

import pytest

from polyrl.bench.flops import ModelShape, group_forward_flops, group_forward_parts, step_flops

SHAPE = ModelShape(hidden=8, intermediate=20, layers=3, heads=4, kv_heads=2, head_dim=2, vocab=50)


def _by_hand(prompts: list[int], completions: list[int], owners: list[int], rank: int) -> dict[str, float]:
    """Each token position, layer and linear counted one at a time."""
    linears = [(8, 8), (8, 4), (8, 4), (8, 8), (8, 20), (8, 20), (20, 8)]  # q k v o gate up down
    linear = attention = head = adapters = 0.0
    seen = set()
    for owner, p, c in zip(owners, prompts, completions):
        positions = ([] if owner in seen else list(range(p))) + [p + j for j in range(c)]
        seen.add(owner)
        for pos in positions:
            for _ in range(3):
                linear += sum(2 * i * o for i, o in linears)
                attention += 2 * (4 * 2) * (pos + 1) * 2  # q.k scores and the weighted sum
                adapters += sum(2 * rank * (i + o) for i, o in linears)
        head += c * 2 * 8 * 50
    forward = linear + attention + head
    return {"forward": forward, "full": 3 * forward,
            "lora": 2 * linear + 3 * attention + 2 * head + 3 * adapters}


@pytest.mark.parametrize("owners", [[0, 0, 1, 1], [0, 1, 2, 3]])
def test_phases_match_a_count_by_hand(owners):
    prompts, completions = [5, 5, 3, 3], [4, 2, 6, 1]
    want = _by_hand(prompts, completions, owners, rank=4)
    parts = group_forward_parts(SHAPE, prompts, completions, owners)
    assert parts["linear"] + parts["attention"] + parts["head"] == pytest.approx(want["forward"])
    assert group_forward_flops(SHAPE, prompts, completions, owners) == pytest.approx(want["forward"])
    full = step_flops(SHAPE, prompts, completions, owners, lora=False)
    assert full == pytest.approx({"generate": want["forward"], "logprobs": want["forward"], "train": want["full"]})
    lora = step_flops(SHAPE, prompts, completions, owners, lora=True, lora_rank=4)
    assert lora["train"] == pytest.approx(want["lora"])
    assert lora["generate"] == full["generate"]  # adapters are folded into the sampler's weights


def test_the_adapters_of_smollm2_are_a_few_percent_of_a_lora_step():
    """SmolLM2-135M, 8 prompts x 4 x 32 tokens (the reference workload), rank 16: the adapters'
    products are ~6 % of the LoRA step's count, and LoRA's step is between 2x and 3x the forward."""
    smol = ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, head_dim=64, vocab=49152)
    owners = [i // 4 for i in range(32)]
    flops = step_flops(smol, [46] * 32, [32] * 32, owners, lora=True)
    without = step_flops(smol, [46] * 32, [32] * 32, owners, lora=True, lora_rank=0)
    assert 0.04 < flops["train"] / without["train"] - 1 < 0.08
    assert 2.0 * flops["logprobs"] < flops["train"] < 3.0 * flops["logprobs"]
