"""The torch backend for multi-turn episodes (issue 16) and clip regions (issue 17).

Real tiny Llama, real tokenizer, no mocks. The kit (tests/test_torch_backend.py) checks token
prompts, ``encode_chat`` and masked loss/gradient on the plain path; this file checks what the kit
does not: mixed prompt batches, bad token prompts, ``tools=`` reaching the template, and masks under
LoRA, micro-batches and gradient checkpointing, each by an exact equivalence: inserted tokens at the
start of a completion train exactly as if they were prompt, inserted tokens at its end exactly as if
they were absent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import (
    EngineConfig,
    LoraConfig,
    OptimizerConfig,
    SamplingParams,
    TokenPrompt,
    TokenSequence,
    TrainBatch,
)

torch = pytest.importorskip("torch")

CHAT = [{"role": "user", "content": "What is 2 + 3?"}]
OTHER_CHAT = [{"role": "user", "content": "Name a colour."}]
#: Adam with eps far above every gradient: its first update is ~ (lr / eps) x gradient, linear in
#: it, so weights after one step compare the gradients themselves (see test_micro_batches_equal_full_batch).
LINEAR_ADAM = dict(lr=1e-3, eps=1e-2, max_grad_norm=None)


def make_engine(model: str, **overrides) -> Engine:
    reg = get_registry()
    status = reg.status("torch")
    if not status.available:
        pytest.skip(f"torch backend not usable: {status.reason}")
    overrides.setdefault("optimizer", OptimizerConfig(**LINEAR_ADAM))
    overrides.setdefault("threads", 1)
    return Engine(reg, "torch", EngineConfig(model=model, **overrides))


def trained_weights(engine: Engine) -> dict[str, np.ndarray]:
    return {k: v.detach().float().cpu().numpy().copy() for k, v in engine.raw.model.named_parameters()
            if v.requires_grad}


@pytest.fixture(scope="module")
def gen(tiny_model_dir) -> Engine:
    return make_engine(tiny_model_dir, role="generate")


@pytest.fixture(scope="module")
def rollouts(gen) -> list[TokenSequence]:
    """Four sampled rollouts of 8 tokens (the tiny model rarely stops early)."""
    out = gen.generate([CHAT, OTHER_CHAT], SamplingParams(max_new_tokens=8, n=2, seed=5))
    seqs = [TokenSequence.of(c) for c in out]
    if min(len(s.completion_ids) for s in seqs) < 6:
        pytest.skip("a rollout stopped before 6 tokens; the episode layout needs 6")
    return seqs


# --- generate: token prompts ---------------------------------------------------------------------


def test_mixed_text_chat_and_token_prompts_in_one_call(gen):
    """Text, chat and token prompts share a call; a token prompt of a chat's ids behaves as that chat
    (greedy: same tokens; seeded: the same sample index draws the same tokens, whichever form)."""
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    chat = gen.generate([CHAT], greedy)[0]
    text = gen.generate(["12 + 7 ="], greedy)[0]
    mixed = gen.generate(["12 + 7 =", TokenPrompt(chat.prompt_ids), CHAT], greedy)
    assert [c.prompt_index for c in mixed] == [0, 1, 2]
    np.testing.assert_array_equal(mixed[0].completion_ids, text.completion_ids)
    for c in mixed[1:]:
        np.testing.assert_array_equal(c.prompt_ids, chat.prompt_ids)
        np.testing.assert_array_equal(c.completion_ids, chat.completion_ids)
    sampled = SamplingParams(max_new_tokens=6, n=2, seed=3)
    as_token = gen.generate([TokenPrompt(chat.prompt_ids), OTHER_CHAT], sampled)
    as_chat = gen.generate([CHAT, TokenPrompt(gen.encode_chat(OTHER_CHAT, None, True))], sampled)
    for a, b in zip(as_token, as_chat):
        np.testing.assert_array_equal(a.prompt_ids, b.prompt_ids)
        np.testing.assert_array_equal(a.completion_ids, b.completion_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_token_prompt_gets_no_bos_and_no_template(gen):
    """The ids are the model's input as given: a text's ids without BOS stay without BOS, and the
    completion is what the model predicts after exactly those ids."""
    ids = gen.raw.tokenizer("12 + 7 =", add_special_tokens=False)["input_ids"]
    bos = gen.raw.tokenizer.bos_token_id
    assert ids and ids[0] != bos
    out = gen.generate([TokenPrompt(ids)], SamplingParams(max_new_tokens=4, temperature=0.0))[0]
    assert out.prompt_ids.tolist() == ids
    with torch.no_grad():
        logits = gen.raw.model(torch.tensor([ids], device=gen.raw.device)).logits[0, -1]
    assert out.completion_ids[0] == int(logits.argmax())


def test_bad_token_prompts_are_config_errors(gen):
    vocab = gen.raw.causal_lm.config.vocab_size
    with pytest.raises(ConfigError, match="vocabulary") as info:
        gen.generate([TokenPrompt([1, 2, vocab])], SamplingParams(max_new_tokens=2))
    assert info.value.field == "prompt"
    with pytest.raises(ConfigError) as info:
        gen.generate([TokenPrompt(np.full(gen.config.max_length, 5))], SamplingParams(max_new_tokens=2))
    assert info.value.field == "model.max_length"


def test_encode_chat_passes_tools_to_the_template(tiny_model_dir, tmp_path):
    """``tools=`` reaches the chat template (a template that lists the tool names before the chat),
    and generate renders a chat through the same code (no tools there)."""
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "tools-model"))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = (
        "{% if tools %}{{ '<|im_start|>system\\ntools:' }}{% for t in tools %}{{ ' ' + t['function']['name'] }}"
        "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}" + config["chat_template"])
    config_path.write_text(json.dumps(config))
    engine = make_engine(str(folder), role="generate")
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    plain = engine.encode_chat(CHAT, None, add_generation_prompt=True)
    with_tools = engine.encode_chat(CHAT, tools, add_generation_prompt=True)
    assert with_tools.dtype == np.int64
    assert "tools: add" in engine.raw.tokenizer.decode(with_tools.tolist())
    np.testing.assert_array_equal(with_tools[-len(plain):], plain)
    chat = engine.generate([CHAT], SamplingParams(max_new_tokens=1, temperature=0.0))[0]
    np.testing.assert_array_equal(chat.prompt_ids, plain)


def test_encode_chat_of_a_gguf_model_is_its_generate_prompt(tiny_model_dir, tmp_path):
    """A model loaded from a GGUF file (tokenizer and chat template from the GGUF's metadata alone)
    renders chats through ``encode_chat`` exactly as generate does, and as the HF folder it came from."""
    from gguf_util import bpe_vocab, write_gguf

    vocab = bpe_vocab(tiny_model_dir)
    vocab["chat_template"] = json.loads((Path(tiny_model_dir) / "tokenizer_config.json").read_text())["chat_template"]
    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=vocab, copy_files=False)
    engine = make_engine(str(path), role="generate")
    assert engine.raw.gguf_file == path.name
    ids = engine.encode_chat(CHAT, None, add_generation_prompt=True)
    chat = engine.generate([CHAT], SamplingParams(max_new_tokens=1, temperature=0.0))[0]
    np.testing.assert_array_equal(ids, chat.prompt_ids)
    hf = make_engine(tiny_model_dir, role="generate")
    np.testing.assert_array_equal(ids, hf.encode_chat(CHAT, None, add_generation_prompt=True))
    turn = CHAT + [{"role": "assistant", "content": "5"}, {"role": "user", "content": "And 3 + 4?"}]
    np.testing.assert_array_equal(engine.encode_chat(turn, None, True), hf.encode_chat(turn, None, True))


@pytest.mark.slow
def test_encode_chat_of_the_embedded_smollm2_gguf():
    """The embedded SmolLM2 GGUF (Q4_1, dequantised on load): encode_chat is generate's prompt and
    starts with the template's own system turn (its chat template came from the GGUF)."""
    from polyrl_torch.models import SMOLLM2_GGUF, smollm2_gguf_dir

    try:
        folder = smollm2_gguf_dir()
    except ConfigError as exc:
        pytest.skip(str(exc))
    engine = make_engine(str(folder / SMOLLM2_GGUF), role="generate")
    ids = engine.encode_chat(CHAT, None, add_generation_prompt=True)
    chat = engine.generate([CHAT], SamplingParams(max_new_tokens=1, temperature=0.0))[0]
    np.testing.assert_array_equal(ids, chat.prompt_ids)
    assert engine.raw.tokenizer.decode(ids.tolist()).startswith("<|im_start|>system\n")


# --- train_step: masks ---------------------------------------------------------------------------


def _episode_batch(seqs: list[TokenSequence], engine: Engine, lead: int, tail: int, seed: int = 0):
    """(masked batch, equivalent unmasked batch): each completion's first ``lead`` tokens and last
    ``tail`` tokens inserted (mask False); the equivalent moves the lead into the prompt and drops the
    tail. Old/ref/sampler log-probs are off the current ones so clipping and KL are exercised."""
    rng = np.random.default_rng(seed)
    current = engine.logprobs(seqs, 1.0)
    old = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    ref = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    sampler = [lp + rng.normal(0, 0.1, len(lp)).astype(np.float32) for lp in old]
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    masked, plain = [], []
    for s in seqs:
        n = len(s.completion_ids)
        mask = np.zeros(n, dtype=bool)
        mask[lead:n - tail] = True
        masked.append(TokenSequence(s.prompt_ids, s.completion_ids, mask))
        plain.append(TokenSequence(np.concatenate([s.prompt_ids, s.completion_ids[:lead]]),
                                   s.completion_ids[lead:n - tail]))

    def cut(values):
        return [v[lead:len(v) - tail] for v in values]

    return (TrainBatch(masked, adv, old, ref, sampler_logprobs=sampler),
            TrainBatch(plain, adv, cut(old), cut(ref), sampler_logprobs=cut(sampler)))


SETUPS = {
    "plain": {},
    "micro_batches": {"optimizer": OptimizerConfig(**LINEAR_ADAM, micro_batch_size=1)},
    "lora": {"lora": LoraConfig(rank=4, alpha=8.0)},
    "gradient_checkpointing": {"gradient_checkpointing": True},
}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize(
    "objective",
    [Objective(beta=0.1, kl_estimator="k3", dual_clip=3.0),
     Objective(loss_aggregation="token_mean", clip_eps_high=0.28, mismatch_correction="tis", mismatch_cap=1.2),
     Objective(importance_sampling_level="sequence", clip_eps_low=0.05, clip_eps_high=0.05)],
    ids=["grpo_kl_dual", "dapo_tis", "gspo"],
)
def test_inserted_tokens_train_as_context(tiny_model_dir, rollouts, setup, objective):
    """Inserted tokens before the sampled ones are context, after them nothing: one step on the
    masked episode equals one step on (prompt + lead, sampled tokens) in loss, metrics, gradient
    norm and the weights it leaves, under LoRA, micro-batches and gradient checkpointing alike."""
    options = {"shared_prompt_forward": False} if setup == "gradient_checkpointing" else {}
    masked_engine = make_engine(tiny_model_dir, options=options, **SETUPS[setup])
    plain_engine = make_engine(tiny_model_dir, options=options, **SETUPS[setup])
    masked, plain = _episode_batch(rollouts, masked_engine, lead=2, tail=2)
    a, b = masked_engine.train_step(masked, objective), plain_engine.train_step(plain, objective)
    assert not a.skipped and not b.skipped
    assert a.tokens == b.tokens == masked.num_tokens == sum(len(s.completion_ids) for s in plain.sequences)
    assert a.loss == pytest.approx(b.loss, rel=1e-4, abs=1e-6)
    assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4) and a.grad_norm > 0
    for key in ("kl", "clip_fraction"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), abs=1e-6)
    for key in ("clip_low_fraction", "clip_high_fraction", "mismatch_abs", "mismatch_corrected"):
        assert a.extra[key] == pytest.approx(b.extra[key], abs=1e-6), key
    wa, wb = trained_weights(masked_engine), trained_weights(plain_engine)
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], atol=1e-6, rtol=0, err_msg=k)


def test_masked_out_values_never_reach_the_loss(tiny_model_dir, rollouts):
    """NaN old/ref/sampler log-probs at inserted positions (a backend may never have scored them)
    leave the step finite and identical: masked-out tokens are removed before any arithmetic."""
    objective = Objective(beta=0.1, mismatch_correction="tis", mismatch_cap=1.5, loss_aggregation="token_mean")
    engine_a = make_engine(tiny_model_dir)
    engine_b = make_engine(tiny_model_dir)
    masked, _ = _episode_batch(rollouts, engine_a, lead=1, tail=1)

    def poisoned(values):
        out = [v.copy() for v in values]
        for v, s in zip(out, masked.sequences):
            v[~s.loss_mask] = np.nan
        return out

    bad = attrs.evolve(masked, old_logprobs=poisoned(masked.old_logprobs), ref_logprobs=poisoned(masked.ref_logprobs),
                       sampler_logprobs=poisoned(masked.sampler_logprobs))
    a, b = engine_a.train_step(masked, objective), engine_b.train_step(bad, objective)
    assert not b.skipped and np.isfinite(b.loss)
    assert b.loss == pytest.approx(a.loss, rel=1e-6) and b.grad_norm == pytest.approx(a.grad_norm, rel=1e-6)


def test_a_fully_inserted_sequence_counts_as_a_sequence_only(tiny_model_dir, rollouts):
    """A sequence with no sampled token adds no tokens and no gradient, but still counts in the
    sequence mean (as in the reference): the loss equals the reference's with that mask."""
    engine = make_engine(tiny_model_dir)
    masked, _ = _episode_batch(rollouts, engine, lead=1, tail=1)
    empty = TokenSequence(masked.sequences[0].prompt_ids, masked.sequences[0].completion_ids,
                          np.zeros(len(masked.sequences[0].completion_ids), dtype=bool))
    batch = attrs.evolve(masked, sequences=[empty, *masked.sequences[1:]])
    objective = Objective(beta=0.1)
    current = engine.logprobs(batch.sequences, 1.0)
    masks = [s.loss_mask for s in batch.sequences]
    expected, metrics = policy_loss(current, batch.advantages, objective, batch.old_logprobs, batch.ref_logprobs,
                                    masks=masks)
    got = engine.train_step(batch, objective)
    assert not got.skipped and got.tokens == metrics["tokens"] == batch.num_tokens
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


# --- clip regions (issue 17) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "objective",
    [Objective(), Objective(clip_eps_low=0.1, clip_eps_high=0.28, dual_clip=2.0),
     Objective(importance_sampling_level="sequence", clip_eps_low=0.02, clip_eps_high=0.02),
     Objective(policy_loss="cispo", clip_eps_high=0.1, loss_aggregation="token_mean")],
    ids=["grpo", "dapo_dual", "gspo", "cispo"],
)
def test_clip_region_fractions_equal_the_reference(tiny_model_dir, rollouts, objective):
    """``clip_low_fraction``/``clip_high_fraction`` equal the reference's on a masked batch run in
    micro-batches of one (the counts are summed over micro-batches, divided by the batch's tokens)."""
    engine = make_engine(tiny_model_dir, optimizer=OptimizerConfig(**LINEAR_ADAM, micro_batch_size=1))
    masked, _ = _episode_batch(rollouts, engine, lead=1, tail=1, seed=2)
    current = engine.logprobs(masked.sequences, 1.0)
    # ratios leaning the advantage's way (plus noise): both regions and the unclipped middle occur
    rng = np.random.default_rng(7)
    old = [lp + rng.normal(-0.15 * np.sign(a), 0.3, len(lp)).astype(np.float32)
           for lp, a in zip(current, masked.advantages)]
    batch = attrs.evolve(masked, ref_logprobs=None, sampler_logprobs=None, old_logprobs=old)
    _, metrics = policy_loss(current, batch.advantages, objective, old, masks=batch.masks)
    got = engine.train_step(batch, objective)
    assert metrics["clip_low_fraction"] + metrics["clip_high_fraction"] > 0, "no clipping: the check is empty"
    assert got.extra["clip_low_fraction"] == pytest.approx(metrics["clip_low_fraction"], abs=1e-6)
    assert got.extra["clip_high_fraction"] == pytest.approx(metrics["clip_high_fraction"], abs=1e-6)
    assert got.clip_fraction == pytest.approx(metrics["clip_fraction"], abs=1e-6)


def test_entropy_rules_see_masked_in_tokens_only(tiny_model_dir, rollouts):
    """top_entropy_quantile's threshold, the entropy bonus and the entropy metrics are over the
    sampled tokens: equal to the reference given the trainer's entropies and the masks."""
    from polyrl_torch.scoring import token_logprobs_with_entropy

    engine = make_engine(tiny_model_dir)
    masked, _ = _episode_batch(rollouts, engine, lead=1, tail=1, seed=3)
    batch = attrs.evolve(masked, ref_logprobs=None, sampler_logprobs=None)
    objective = Objective(top_entropy_quantile=0.5, entropy_coef=0.01, loss_aggregation="token_mean")
    with torch.no_grad():
        logps, ents = token_logprobs_with_entropy(engine.raw, batch.sequences, 1.0)
    current = [x.cpu().numpy() for x in logps]
    entropies = [x.cpu().numpy() for x in ents]
    expected, metrics = policy_loss(current, batch.advantages, objective, batch.old_logprobs,
                                    entropies=entropies, masks=batch.masks)
    got = engine.train_step(batch, objective)
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert got.extra["entropy"] == pytest.approx(metrics["entropy"], rel=1e-5)
    assert got.extra["entropy_selected"] == pytest.approx(metrics["entropy_selected"], abs=1e-9)
