"""Multi-turn episodes on the MLX backend (issue 16): token prompts, ``encode_chat``, masked losses.

An episode is one token sequence: sampled segments (the model's ids, trained) and inserted ones
(template glue, tool results; mask False). These tests drive a real tiny Llama through the public
``Engine`` and check the MLX side against the numpy reference (``policy_loss(..., masks=)``,
``policy_loss_grad``), under micro-batches, LoRA and gradient checkpointing, and against the torch
backend once it declares ``Capabilities.loss_mask``.
"""

from __future__ import annotations


import attrs
import numpy as np
import pytest
from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.chat_templates import with_chat_template
from polyrl.types import LoraConfig, OptimizerConfig, SamplingParams, TokenPrompt, TokenSequence, TrainBatch
from test_mlx_backend import CHATS, make_engine

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)

#: Objectives whose every rule is touched by a mask: ratio and clipping, KL, GSPO's sequence mean,
#: CISPO's one-sided cap, the aggregations' token counts, the sampler-mismatch correction and its
#: metrics, the entropy bonus and the entropy quantile.
OBJECTIVES = {
    "grpo_kl": Objective(beta=0.1, kl_estimator="k3"),
    "dapo": Objective(loss_aggregation="token_mean", clip_eps_high=0.28),
    "dr_grpo_dual": Objective(loss_aggregation="seq_mean_token_sum_norm", max_completion_length=8, dual_clip=3.0),
    "gspo": Objective(importance_sampling_level="sequence", clip_eps_low=0.05, clip_eps_high=0.05),
    "cispo": Objective(policy_loss="cispo", clip_eps_high=0.2, loss_aggregation="token_mean"),
    "tis_sequence": Objective(mismatch_correction="tis", mismatch_level="sequence", mismatch_cap=1.2),
    "entropy": Objective(entropy_coef=0.01, top_entropy_quantile=0.5),
}

#: StepMetrics fields and extras that must equal the reference's metrics of the same name.
METRICS = ("kl", "clip_fraction", "clip_low_fraction", "clip_high_fraction", "mismatch_abs", "mismatch_kl",
           "mismatch_over", "mismatch_corrected", "entropy", "entropy_selected")


def episode_masks(seqs: list[TokenSequence], seed: int) -> list[np.ndarray]:
    """Sampled (True) and inserted (False) runs, as an episode has them; one sequence is all True
    (a single-turn row in the same batch) and every other has both kinds."""
    rng = np.random.default_rng(seed)
    masks = []
    for i, seq in enumerate(seqs):
        m = np.ones(len(seq.completion_ids), dtype=bool)
        if i and len(m) > 2:
            start = int(rng.integers(1, len(m) - 1))
            m[start:start + int(rng.integers(1, 3))] = False
        masks.append(m)
    return masks


def masked_rollouts(engine, seed: int = 4) -> tuple[list[TokenSequence], list[np.ndarray]]:
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=seed))
    seqs = [TokenSequence.of(c) for c in out]
    masks = episode_masks(seqs, seed)
    return [TokenSequence(s.prompt_ids, s.completion_ids, m) for s, m in zip(seqs, masks)], masks


def perturbed(current: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    return [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]


def token_entropies(engine, seqs: list[TokenSequence]) -> list[np.ndarray]:
    """The trainer's per-token entropies (temperature 1), as the training forward computes them."""
    from polyrl_mlx.scoring import flat_logprobs

    entropy: list = []
    _, lengths = flat_logprobs(engine.raw, seqs, 1.0, entropy=entropy)
    return np.split(np.array(entropy[0], dtype=np.float64), np.cumsum(lengths)[:-1])


def check_step_equals_reference(engine, seqs, masks, objective: Objective, seed: int) -> dict[str, float]:
    """One masked ``train_step``: loss, token count and every metric equal the reference's."""
    rng = np.random.default_rng(seed)
    current = engine.logprobs(seqs, 1.0)
    old, ref = perturbed(current, rng), perturbed(current, rng)
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    sampler = perturbed(old, rng)  # a generator that disagrees with the trainer
    entropies = token_entropies(engine, seqs) if objective.needs_entropy else None
    ref_in = ref if objective.beta else None
    expected, metrics = policy_loss(current, adv, objective, old, ref_in, sampler, entropies, masks=masks)
    got = engine.train_step(TrainBatch(seqs, adv, old, ref_in, sampler_logprobs=sampler), objective)
    assert not got.skipped
    assert got.tokens == metrics["tokens"] == sum(int(m.sum()) for m in masks)
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-5)
    reported = got.as_dict()
    for name in METRICS:
        if name in metrics:
            assert reported[name] == pytest.approx(metrics[name], rel=1e-4, abs=1e-6), name
    return metrics


# --- train_step over masked batches -----------------------------------------------------------------


@pytest.mark.parametrize("variant", ["plain", "micro_batches", "lora", "gradient_checkpointing"])
def test_masked_step_equals_reference(tiny_model_dir, variant):
    """Every objective's loss, token count and metrics (clip low/high, mismatch, entropy) on a
    batch mixing episodes and a single-turn row equal the masked reference, however the engine
    computes its forward. The entropy quantile is per loss call (the micro-batch, as TRL), so
    micro-batches are checked with the entropy bonus alone."""
    options = {
        "plain": {},
        "micro_batches": {"optimizer": OptimizerConfig(lr=1e-2, max_grad_norm=None, micro_batch_size=1)},
        "lora": {"lora": LoraConfig(rank=4, alpha=8)},
        "gradient_checkpointing": {"gradient_checkpointing": True},
    }[variant]
    engine = make_engine(tiny_model_dir, **options)
    seqs, masks = masked_rollouts(engine)
    seen_low = seen_high = 0.0
    objectives = dict(OBJECTIVES)
    if variant == "micro_batches":
        objectives["entropy"] = Objective(entropy_coef=0.01)
    for i, objective in enumerate(objectives.values()):
        metrics = check_step_equals_reference(engine, seqs, masks, objective, seed=i)
        seen_low += metrics["clip_low_fraction"]
        seen_high += metrics["clip_high_fraction"]
    assert seen_low > 0 and seen_high > 0, "the batches never hit a clip region: the check proves nothing"


def test_unmasked_clip_fractions_equal_reference(tiny_model_dir):
    """Issue 17: ``clip_low_fraction``/``clip_high_fraction`` on a plain (single-turn) batch."""
    engine = make_engine(tiny_model_dir)
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=9))
    seqs = [TokenSequence.of(c) for c in out]
    full = [np.ones(len(s.completion_ids), dtype=bool) for s in seqs]
    for i, objective in enumerate((OBJECTIVES["dapo"], OBJECTIVES["cispo"], OBJECTIVES["dr_grpo_dual"])):
        check_step_equals_reference(engine, seqs, full, objective, seed=20 + i)


def _flat_params(tree) -> dict[str, np.ndarray]:
    from mlx.utils import tree_flatten

    return {k: np.array(v, dtype=np.float64) for k, v in tree_flatten(tree)}


@pytest.mark.parametrize("objective", [OBJECTIVES["dapo"], OBJECTIVES["gspo"], OBJECTIVES["grpo_kl"]],
                         ids=["dapo", "gspo", "grpo_kl"])
def test_masked_gradient_is_the_reference_gradient(tiny_model_dir, objective):
    """The weights' gradient is ``sum_t policy_loss_grad_t * d logp_t / d weights`` with the
    reference's per-token gradient, which is 0 on inserted tokens; and what the batch says about
    inserted tokens (their old/ref log-probs) changes nothing."""
    from polyrl_mlx._mx import mx, nn
    from polyrl_mlx.scoring import flat_logprobs
    from polyrl_mlx.training import accumulate_gradients

    engine = make_engine(tiny_model_dir)
    seqs, masks = masked_rollouts(engine, seed=6)
    rng = np.random.default_rng(7)
    current = engine.logprobs(seqs, 1.0)
    old, ref = perturbed(current, rng), perturbed(current, rng)
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    batch = TrainBatch(seqs, adv, old, ref if objective.beta else None)
    got, _ = accumulate_gradients(engine.raw, batch, objective)

    per_token = policy_loss_grad(current, adv, objective, old, batch.ref_logprobs, masks=masks)
    assert all(np.all(g[~m] == 0) for g, m in zip(per_token, masks))
    slope = mx.array(np.concatenate(per_token).astype(np.float32))

    def chained():
        logp, _ = flat_logprobs(engine.raw, seqs, 1.0)
        return (mx.stop_gradient(slope) * logp).sum()

    _, want = nn.value_and_grad(engine.raw.model, chained)()
    got_flat, want_flat = _flat_params(got), _flat_params(want)
    scale = max(np.abs(v).max() for v in want_flat.values())
    assert scale > 0
    for name, value in want_flat.items():
        np.testing.assert_allclose(got_flat[name], value, atol=1e-4 * scale, err_msg=name)

    def garbled(values):  # inserted tokens' old/ref log-probs set to nonsense
        return [np.where(m, v, np.float32(-7.0)) for v, m in zip(values, masks)]

    other = attrs.evolve(batch, old_logprobs=garbled(old),
                         ref_logprobs=None if batch.ref_logprobs is None else garbled(ref))
    again, _ = accumulate_gradients(engine.raw, other, objective)
    for name, value in _flat_params(again).items():
        np.testing.assert_array_equal(value, got_flat[name], err_msg=name)


def test_fully_masked_batch_is_skipped_untouched(tiny_model_dir):
    """A batch with no sampled token has nothing to learn: skipped, weights unchanged."""
    engine = make_engine(tiny_model_dir)
    seqs, _ = masked_rollouts(engine)
    silent = [TokenSequence(s.prompt_ids, s.completion_ids, np.zeros(len(s.completion_ids), bool)) for s in seqs]
    before = engine.logprobs(seqs, 1.0)
    got = engine.train_step(TrainBatch(silent, np.ones(len(silent))), Objective())
    assert got.skipped and got.tokens == 0
    for a, b in zip(before, engine.logprobs(seqs, 1.0)):
        np.testing.assert_array_equal(a, b)


def test_masked_loss_equals_torch(tiny_model_dir):
    """The same masked batch on the same weights: the same loss and metrics on MLX and torch."""
    reg = get_registry()
    if "torch" not in reg.names() or not reg.status("torch").available:
        pytest.skip("backend 'torch' is not usable here")
    if not reg.spec("torch").capabilities.loss_mask:
        pytest.skip("backend 'torch' does not declare Capabilities.loss_mask yet")
    mine = make_engine(tiny_model_dir)
    theirs = make_engine(tiny_model_dir, backend="torch")
    seqs, masks = masked_rollouts(mine)
    rng = np.random.default_rng(3)
    current = mine.logprobs(seqs, 1.0)
    for a, b in zip(current, theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    old, ref = perturbed(current, rng), perturbed(current, rng)
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    for objective in (OBJECTIVES["grpo_kl"], OBJECTIVES["gspo"], OBJECTIVES["dapo"]):
        batch = TrainBatch(seqs, adv, old, ref if objective.beta else None)
        a = mine.train_step(batch, objective)
        b = theirs.train_step(batch, objective)
        assert a.tokens == b.tokens == batch.num_tokens
        assert a.loss == pytest.approx(b.loss, rel=1e-4, abs=1e-6)
        assert a.clip_fraction == pytest.approx(b.clip_fraction, abs=1e-6)
        mine.import_weights(theirs.export_weights())  # both on the same weights for the next one


# --- generate: token prompts -------------------------------------------------------------------------


def test_mixed_prompt_batch_equals_each_prompt_alone(tiny_model_dir):
    """Text, chat and token prompts share one call (with n > 1): each prompt gets what it gets
    alone; token prompts come back verbatim, ids a tokenizer would never produce (no BOS,
    template-free) included; the scored log-probs (shared-prompt path) are the sampler's."""
    engine = make_engine(tiny_model_dir, role="generate")
    chat_ids = engine.encode_chat(CHATS[0], None, add_generation_prompt=True)
    raw = TokenPrompt(np.asarray(engine.raw.tokenizer("count: one two", add_special_tokens=False)["input_ids"]))
    prompts = ["Write numbers 1:", CHATS[1], TokenPrompt(chat_ids), raw]
    sampling = attrs.evolve(GREEDY, n=2)
    together = engine.generate(prompts, sampling)
    assert [c.prompt_index for c in together] == [0, 0, 1, 1, 2, 2, 3, 3]
    np.testing.assert_array_equal(together[4].prompt_ids, chat_ids)
    np.testing.assert_array_equal(together[6].prompt_ids, raw.ids)
    for i, prompt in enumerate(prompts):
        alone = engine.generate([prompt], GREEDY)[0]
        for c in together[2 * i: 2 * i + 2]:
            np.testing.assert_array_equal(c.prompt_ids, alone.prompt_ids)
            np.testing.assert_array_equal(c.completion_ids, alone.completion_ids)
            np.testing.assert_allclose(c.logprobs, alone.logprobs, atol=1e-4)
    chat_alone = engine.generate([CHATS[0]], GREEDY)[0]
    np.testing.assert_array_equal(together[4].completion_ids, chat_alone.completion_ids)
    sampled = engine.generate(prompts, SamplingParams(max_new_tokens=6, n=3, seed=2))
    assert engine.raw.head_parts() is not None  # the split-head, shared-prompt scoring path
    for c, lp in zip(sampled, engine.logprobs([TokenSequence.of(c) for c in sampled], 1.0)):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)


@pytest.mark.faults
def test_token_prompt_outside_the_vocabulary_is_refused(tiny_model_dir):
    engine = make_engine(tiny_model_dir, role="generate")
    vocab = engine.raw.vocab_size
    for bad in ([1, vocab], [-1, 2]):
        with pytest.raises(ConfigError) as info:
            engine.generate([TokenPrompt(bad)], GREEDY)
        assert info.value.field == "prompt" and "vocabulary" in str(info.value)


def test_a_two_turn_episode_scores_as_it_was_sampled(tiny_model_dir):
    """Turn 2 continues from the exact ids of turn 1 plus inserted glue (a tool result rendered
    by ``encode_chat``); the episode as one masked sequence scores each sampled token at the
    log-prob its sampler gave it, and a step on it trains exactly the masked reference loss."""
    engine = make_engine(tiny_model_dir)
    sampling = SamplingParams(max_new_tokens=5, seed=3)
    first = engine.generate([CHATS[0]], sampling)[0]
    turn1 = list(CHATS[0]) + [{"role": "assistant", "content": first.text}]
    before = engine.encode_chat(turn1, None, add_generation_prompt=False)
    after = engine.encode_chat(turn1 + [{"role": "tool", "content": "5"}], None, add_generation_prompt=True)
    np.testing.assert_array_equal(after[:len(before)], before)
    glue = after[len(before):]  # the template's rendering of the tool turn
    assert len(glue) > 0
    context = np.concatenate([first.prompt_ids, first.completion_ids, glue])
    second = engine.generate([TokenPrompt(context)], sampling)[0]
    np.testing.assert_array_equal(second.prompt_ids, context)

    completion = np.concatenate([first.completion_ids, glue, second.completion_ids])
    mask = np.concatenate([np.ones(len(first.completion_ids), bool), np.zeros(len(glue), bool),
                           np.ones(len(second.completion_ids), bool)])
    episode = TokenSequence(first.prompt_ids, completion, mask)
    scored = engine.logprobs([episode], 1.0)[0]
    np.testing.assert_allclose(scored[mask], np.concatenate([first.logprobs, second.logprobs]), atol=1e-4)
    objective = Objective(loss_aggregation="token_mean")
    expected, metrics = policy_loss([scored], [1.0], objective, masks=[mask])
    got = engine.train_step(TrainBatch([episode], [1.0]), objective)
    assert got.tokens == metrics["tokens"] == int(mask.sum())
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


# --- encode_chat ---------------------------------------------------------------------------------------

TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' }}{% for t in tools %}{{ t['function']['name'] }} {% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_encode_chat_passes_tools_to_the_template(tiny_model_dir, tmp_path):
    """``tools=`` reaches the chat template (the transformers tokenizer's own rendering, token for
    token), and without tools the rendering is the chat prompt ``generate`` uses."""
    from transformers import AutoTokenizer

    folder = with_chat_template(tiny_model_dir, tmp_path / "tools-model", TOOLS_TEMPLATE)
    engine = make_engine(folder, role="generate")
    tok = AutoTokenizer.from_pretrained(folder)
    with_tools = engine.encode_chat(CHATS[0], [WEATHER], add_generation_prompt=True)
    text = tok.apply_chat_template(list(CHATS[0]), tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert "get_weather" in text
    np.testing.assert_array_equal(with_tools, tok(text, add_special_tokens=False)["input_ids"])
    plain = engine.encode_chat(CHATS[0], None, add_generation_prompt=True)
    assert len(with_tools) > len(plain)
    np.testing.assert_array_equal(plain, engine.generate([CHATS[0]], GREEDY)[0].prompt_ids)


@pytest.mark.faults
def test_encode_chat_without_a_chat_template_names_the_fix(tiny_model_dir, tmp_path):
    folder = with_chat_template(tiny_model_dir, tmp_path / "no-template", None)
    engine = make_engine(folder, role="generate")
    with pytest.raises(ConfigError) as info:
        engine.encode_chat(CHATS[0], None, add_generation_prompt=True)
    assert info.value.field == "model" and "chat template" in str(info.value)
