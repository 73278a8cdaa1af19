"""The MLX backend through the public path: registry -> ``polyrl.engine.Engine`` -> hooks.

A real tiny Llama (``tiny_model_dir``) is loaded, sampled, scored, trained, converted and synced
with the torch backend; the loss math is checked against the numpy reference for every
aggregation x KL estimator x dual clip, value and gradient. Skips name what is missing.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from model_copies import edited_copy
from polyrl.algorithms.objective import LOSS_AGGREGATIONS, Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad, vespo_weight
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.conformance import BackendConformance
from polyrl.types import (
    EngineConfig,
    LoraConfig,
    OptimizerConfig,
    SamplingParams,
    TokenSequence,
    TrainBatch,
)

from digits_run import digits_config

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
]


def _usable(name: str) -> None:
    reg = get_registry()
    if name not in reg.names():
        pytest.skip(f"backend {name!r} is not installed (pip install polyrl[{name}])")
    status = reg.status(name)
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")


def make_engine(model: str, backend: str = "mlx", **overrides) -> Engine:
    _usable(backend)
    overrides.setdefault("optimizer", OptimizerConfig(lr=1e-2, max_grad_norm=None))
    overrides.setdefault("threads", 1)
    return Engine(get_registry(), backend, EngineConfig(model=model, **overrides))


def rollouts(engine: Engine, n: int = 2, seed: int = 0, tokens: int = 6) -> list[TokenSequence]:
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=tokens, n=n, seed=seed))
    return [TokenSequence.of(c) for c in out]


def params(engine: Engine) -> dict[str, np.ndarray]:
    """Every array of the live MLX model (LoRA names included), as numpy copies."""
    from mlx.utils import tree_flatten

    return {k: np.array(v) for k, v in tree_flatten(engine.raw.model.parameters())}


def noisy_batch(engine: Engine, seqs, seed: int = 0, beta: bool = True) -> TrainBatch:
    rng = np.random.default_rng(seed)
    current = engine.logprobs(seqs, 1.0)
    old = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    ref = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    return TrainBatch(seqs, adv, old, ref if beta else None)


@pytest.fixture(scope="module")
def gen(tiny_model_dir) -> Engine:
    return make_engine(tiny_model_dir, role="generate")


# --- registry, probe, BLAS -----------------------------------------------------------------------


def test_registered_with_honest_capabilities():
    _usable("mlx")
    status = get_registry().status("mlx")
    assert status.distribution == "polyrl-mlx" and status.version
    caps = status.capabilities
    for key in ("generate", "logprobs", "train_step", "lora", "weight_export", "weight_import", "checkpoint",
                "token_prompts", "loss_mask"):
        assert caps[key], key
    assert "float32" in caps["dtypes"] and "cpu" in caps["devices"]


def test_probe_names_the_fix_when_mlx_is_missing(monkeypatch):
    from polyrl_mlx import plugin

    monkeypatch.setattr(plugin, "_import_error", lambda: "not installed")
    reason = plugin._probe()
    assert reason.startswith("mlx not installed: pip install polyrl[mlx]")


def test_blas_status_reports_openblas():
    _usable("mlx")
    from polyrl_mlx import blas

    status = blas.blas_status()
    assert isinstance(status, str) and status
    if blas.find_openblas() is None:
        pytest.skip("no libopenblas on this machine (apt-get install libopenblas0-pthread)")
    assert status.startswith("OpenBLAS"), status
    assert blas.fast_blas_active()
    # too late once mlx.core is imported (Python dlopens with RTLD_NOW): say so, with the fix
    import subprocess
    import sys

    code = "import mlx.core; from polyrl_mlx import blas; print(blas.blas_status())"
    late = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert late.stdout.startswith("reference BLAS") and "Fix:" in late.stdout


# --- generation ----------------------------------------------------------------------------------


def test_generate_groups_exact_ids_and_sampler_logprobs(gen):
    out = gen.generate(CHATS, SamplingParams(max_new_tokens=7, n=3, seed=11, temperature=0.8,
                                             top_p=0.9, top_k=50))
    assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1]
    assert np.array_equal(out[0].prompt_ids, gen.raw.encode_prompt(CHATS[0]))
    scored = gen.logprobs([TokenSequence.of(c) for c in out], 0.8)
    for c, lp in zip(out, scored):
        assert 1 <= len(c.completion_ids) <= 7 and c.completion_ids.dtype == np.int64
        # log softmax(logits / T) at the sampled token, before top-p/top-k truncation
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-5)
        assert c.text == gen.raw.decode(c.completion_ids.tolist())


def test_top_k_top_p_truncate_and_sample_the_kept_distribution(gen):
    from polyrl_mlx._mx import mx

    out = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=1, n=3000, seed=2, top_k=6, top_p=0.6))
    ids = np.asarray(gen.raw.encode_prompt(CHATS[0]), dtype=np.int32)
    logits = np.array(gen.raw.model(mx.array(ids[None]))[0, -1]).astype(np.float64)
    order = np.argsort(-logits)
    probs = np.exp(logits[order] - logits.max())
    probs /= probs.sum()
    top = probs[:6] / probs[:6].sum()  # top-k first, then the nucleus of what is left
    keep = int(np.sum(np.cumsum(top) - top < 0.6))
    assert 1 < keep < 6  # both truncations bite
    kept = top[:keep] / top[:keep].sum()
    first = np.array([c.completion_ids[0] for c in out])
    assert set(first.tolist()) <= set(order[:keep].tolist())
    freq = np.array([(first == t).mean() for t in order[:keep]])
    np.testing.assert_allclose(freq, kept, atol=0.035)
    # the reported log-prob is the untruncated one
    full = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    np.testing.assert_allclose([c.logprobs[0] for c in out[:20]], full[first[:20]], atol=1e-5)


def test_full_forward_fallback_equals_split_head(gen, monkeypatch):
    sp = SamplingParams(max_new_tokens=6, n=2, seed=4)
    split = gen.generate(CHATS, sp)
    seqs = [TokenSequence.of(c) for c in split]
    scored = gen.logprobs(seqs, 1.0)
    monkeypatch.setattr(gen.raw, "head_parts", lambda: None)  # as for other architectures
    full = gen.generate(CHATS, sp)
    assert [c.completion_ids.tolist() for c in full] == [c.completion_ids.tolist() for c in split]
    for a, b in zip(gen.logprobs(seqs, 1.0), scored):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.3), (7, 0.5), (1, 0.9), (0, 1e-6)])
def test_filter_logits_matches_hf_semantics(top_k, top_p):
    _usable("mlx")
    from polyrl_mlx._mx import mx
    from polyrl_mlx.generation import filter_logits

    logits = np.random.default_rng(top_k).normal(0, 2, (4, 50)).astype(np.float32)
    got = np.isfinite(np.array(filter_logits(mx.array(logits), top_k, top_p)))
    for row, kept in zip(logits, got):
        order = np.argsort(-row)
        allowed = order[:top_k] if top_k else order
        p = np.exp(row[allowed] - row[allowed].max())
        p /= p.sum()
        n = max(int(np.sum(np.cumsum(p) - p < top_p)), 1)
        assert set(np.flatnonzero(kept)) == set(allowed[:n].tolist())


def test_text_prompts_and_seed_semantics(gen):
    sp = SamplingParams(max_new_tokens=6, n=2, seed=5)
    a, b = gen.generate(["The capital of France is"], sp), gen.generate(["The capital of France is"], sp)
    assert [x.completion_ids.tolist() for x in a] == [x.completion_ids.tolist() for x in b]
    unseeded = [gen.generate(["Hello"], SamplingParams(max_new_tokens=6, n=2)) for _ in range(2)]
    assert ([c.completion_ids.tolist() for c in unseeded[0]]
            != [c.completion_ids.tolist() for c in unseeded[1]])  # the engine's stream advances


def test_sample_tokens_do_not_depend_on_batch_mates(gen):
    both = gen.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=3))
    # the same prompt at the same sample index with the same seed gives the same tokens
    alone = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=6, n=2, seed=3))
    assert [c.completion_ids.tolist() for c in alone] == [c.completion_ids.tolist() for c in both[:2]]


def test_greedy_determinism_and_eos(gen, tiny_model_dir):
    g = gen.generate(CHATS, SamplingParams(max_new_tokens=10, temperature=0.0))
    again = gen.generate(CHATS, SamplingParams(max_new_tokens=10, temperature=0.0))
    assert [c.completion_ids.tolist() for c in g] == [c.completion_ids.tolist() for c in again]
    # greedy picks the argmax of a full forward at every step
    seqs = [TokenSequence.of(c) for c in g]
    from polyrl_mlx._mx import mx

    for s in seqs:
        ids = np.concatenate([s.prompt_ids, s.completion_ids])
        logits = np.array(gen.raw.model(mx.array(ids[None, :-1].astype(np.int32)))[0])
        p = len(s.prompt_ids)
        assert logits[p - 1:].argmax(-1).tolist() == s.completion_ids.tolist()


def test_stop_strings_and_length(gen):
    free = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=12, temperature=0.0))[0]
    assert free.finish_reason == "length" and len(free.completion_ids) == 12
    assert len(free.text) >= 4, "the tiny model's greedy text is too short to pick a stop string"
    stop = free.text[2:4]
    stopped = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=12, temperature=0.0, stop=(stop,)))[0]
    assert stopped.finish_reason == "stop" and stop in stopped.text
    # it ends after the token that completed the stop string: one token fewer would not contain it
    assert stop not in gen.raw.decode(stopped.completion_ids[:-1].tolist())
    assert stopped.completion_ids.tolist() == free.completion_ids[: len(stopped.completion_ids)].tolist()


def test_max_length_is_enforced(tiny_model_dir):
    e = make_engine(tiny_model_dir, role="generate", max_length=8)
    with pytest.raises(Exception, match="max_length"):
        e.generate(["word " * 20], SamplingParams(max_new_tokens=4))


# --- objective: value and gradient vs the numpy reference ----------------------------------------


@pytest.mark.parametrize(
    "case,aggregation,kl,dual",
    [(i, *c) for i, c in enumerate(itertools.product(LOSS_AGGREGATIONS, ("k1", "k2", "k3"), (None, 2.0)))],
)
def test_objective_loss_and_grad_match_reference(case, aggregation, kl, dual):
    _usable("mlx")
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import objective_loss, token_weights

    rng = np.random.default_rng(case)
    lengths = [3, 7, 1, 5]
    logp = [-rng.uniform(0.1, 3.0, n) for n in lengths]
    old = [lp + rng.normal(0, 0.4, len(lp)) for lp in logp]
    ref = [lp + rng.normal(0, 0.4, len(lp)) for lp in logp]
    adv = np.array([1.3, -0.7, -2.0, 0.4])
    obj = Objective(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=dual, beta=0.05,
                    kl_estimator=kl, loss_aggregation=aggregation, max_completion_length=8)
    expected, metrics = policy_loss(logp, adv, obj, old, ref)
    expected_grad = np.concatenate(policy_loss_grad(logp, adv, obj, old, ref))

    with mx.stream(mx.cpu):
        f64 = mx.float64
        w = mx.array(token_weights(lengths, obj, len(lengths), sum(lengths)), dtype=f64)
        a = mx.array(np.repeat(adv, lengths), dtype=f64)
        o, r = mx.array(np.concatenate(old), dtype=f64), mx.array(np.concatenate(ref), dtype=f64)

        def f(x):
            return objective_loss(x, a, w, obj, o, r)

        (loss, kl_sum, clip_sum), grad = mx.value_and_grad(f)(mx.array(np.concatenate(logp), dtype=f64))
        assert loss.dtype == mx.float64
        # MLX's CPU exp is float32-accurate even on float64 inputs (~5e-8 relative)
        assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-9)
        np.testing.assert_allclose(np.array(grad), expected_grad, rtol=1e-6, atol=1e-9)
        tokens = sum(lengths)
        assert kl_sum.item() / tokens == pytest.approx(metrics["kl"], rel=1e-6, abs=1e-9)
        assert clip_sum.item() / tokens == pytest.approx(metrics["clip_fraction"], abs=1e-12)


def test_old_logprobs_none_means_ratio_one_with_gradient():
    _usable("mlx")
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import objective_loss

    logp = [np.array([-1.0, -2.0]), np.array([-0.5])]
    adv = np.array([2.0, -1.0])
    obj = Objective()
    expected = policy_loss(logp, adv, obj)[0]
    expected_grad = np.concatenate(policy_loss_grad(logp, adv, obj))
    with mx.stream(mx.cpu):
        w = mx.array([0.25, 0.25, 0.5], dtype=mx.float64)
        (loss, _, _), grad = mx.value_and_grad(
            lambda x: objective_loss(x, mx.array([2.0, 2.0, -1.0], dtype=mx.float64), w, obj)
        )(mx.array(np.concatenate(logp), dtype=mx.float64))
    assert loss.item() == pytest.approx(expected)
    np.testing.assert_allclose(np.array(grad), expected_grad)


# --- training ------------------------------------------------------------------------------------


def test_train_step_loss_matches_reference_and_learns(tiny_model_dir):
    e = make_engine(tiny_model_dir)
    seqs = rollouts(e)
    obj = Objective(beta=0.1, kl_estimator="k3", loss_aggregation="token_mean", dual_clip=3.0)
    batch = noisy_batch(e, seqs)
    current = e.logprobs(seqs, 1.0)
    expected, metrics = policy_loss(current, batch.advantages, obj, batch.old_logprobs, batch.ref_logprobs)
    got = e.train_step(batch, obj)
    assert not got.skipped and got.tokens == metrics["tokens"]
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert got.kl == pytest.approx(metrics["kl"], rel=1e-3, abs=1e-6)
    assert got.clip_fraction == pytest.approx(metrics["clip_fraction"], abs=1e-6)
    assert got.grad_norm > 0
    # a positive advantage raises the sequence's log-prob, a negative one lowers it
    fresh = make_engine(tiny_model_dir)
    pair = seqs[:2]
    before = [lp.sum() for lp in fresh.logprobs(pair, 1.0)]
    fresh.train_step(TrainBatch(pair, np.array([1.0, -1.0])), Objective())
    after = [lp.sum() for lp in fresh.logprobs(pair, 1.0)]
    assert after[0] > before[0] and after[1] < before[1]


def test_micro_batching_equals_full_batch(tiny_model_dir):
    from mlx.utils import tree_flatten
    from polyrl_mlx.training import accumulate_gradients

    opt = dict(lr=1e-2, max_grad_norm=0.5)
    full = make_engine(tiny_model_dir, optimizer=OptimizerConfig(**opt))
    micro = make_engine(tiny_model_dir, optimizer=OptimizerConfig(**opt, micro_batch_size=3))
    seqs = rollouts(full, n=3, tokens=8)  # 6 sequences of different lengths
    for aggregation in LOSS_AGGREGATIONS:
        obj = Objective(loss_aggregation=aggregation, beta=0.05, max_completion_length=8)
        batch = noisy_batch(full, seqs, beta=True)
        # the accumulated gradient is the full-batch gradient, micro-batch by micro-batch
        g_full, s_full = accumulate_gradients(full.raw, batch, obj)
        for size in (1, 4):
            g_micro, s_micro = accumulate_gradients(full.raw, batch, obj, micro_batch_size=size)
            assert s_micro["loss"] == pytest.approx(s_full["loss"], rel=1e-5, abs=1e-7)
            for key in ("clip_low_min", "clip_high_max"):  # extremes over every micro-batch's sequences
                assert s_micro[key] == pytest.approx(s_full[key], abs=1e-7), key
            flat_full, flat_micro = dict(tree_flatten(g_full)), dict(tree_flatten(g_micro))
            scale = max(float(np.abs(np.array(v)).max()) for v in flat_full.values())
            for k, v in flat_full.items():
                np.testing.assert_allclose(np.array(flat_micro[k]), np.array(v), atol=1e-5 * scale, err_msg=k)
        # and the step through the hook reports the same numbers
        a, b = full.train_step(batch, obj), micro.train_step(batch, obj)
        assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-7)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4)
        assert a.kl == pytest.approx(b.kl, rel=1e-5, abs=1e-8) and a.tokens == b.tokens
        assert a.extra["clip_high_max"] == pytest.approx(b.extra["clip_high_max"], abs=1e-7)
        assert 0.0 <= a.extra["clip_low_min"] <= 1.0 and "clip_low_min" in b.extra
    # Adam's m / sqrt(v) amplifies float noise in near-zero gradient entries: compare the
    # weights to a fraction of the learning rate (an update is up to lr per step)
    pa, pb = params(full), params(micro)
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], atol=1e-2 * opt["lr"], err_msg=k)


def test_non_finite_loss_is_skipped_and_weights_untouched(tiny_model_dir):
    e = make_engine(tiny_model_dir)
    seqs = rollouts(e, n=1)
    before = params(e)
    got = e.train_step(TrainBatch(seqs, np.array([np.nan, 1.0])), Objective())
    assert got.skipped
    after = params(e)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert not e.train_step(TrainBatch(seqs, np.array([1.0, -1.0])), Objective()).skipped


def test_lora_trains_only_adapters_and_reference_is_the_base(tiny_model_dir, gen):
    e = make_engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8, target_modules=("q_proj", "v_proj")))
    seqs = rollouts(gen)
    base_lp = gen.logprobs(seqs, 1.0)
    before = params(e)
    assert sum(k.endswith(("lora_a", "lora_b")) for k in before) == 2 * 2 * 2  # 2 layers x q,v x a,b
    for _ in range(2):
        assert not e.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective()).skipped
    after = params(e)
    for k in before:
        if k.endswith("lora_b"):
            assert not np.array_equal(before[k], after[k]), k
        elif not k.endswith("lora_a"):  # A moves from the 2nd step on (its gradient needs B != 0)
            assert np.array_equal(before[k], after[k]), k
    for a, b in zip(e.logprobs(seqs, 1.0, reference=True), base_lp):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert any(np.abs(a - b).max() > 1e-4 for a, b in zip(e.logprobs(seqs, 1.0), base_lp))
    assert gen.logprobs(seqs, 1.0, reference=True) is None  # no LoRA: the core loads a reference
    # export merges the adapters: a plain engine importing them computes the LoRA policy
    plain = make_engine(tiny_model_dir, role="generate")
    plain.import_weights(e.export_weights())
    for a, b in zip(plain.logprobs(seqs, 1.0), e.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_lora_bad_target_is_a_config_error(tiny_model_dir):
    with pytest.raises(ConfigError, match="lora.target_modules"):
        make_engine(tiny_model_dir, lora=LoraConfig(target_modules=("nope_proj",)))


def test_checkpoint_resumes_exactly(tiny_model_dir, tmp_path):
    for lora in (None, LoraConfig(rank=2, alpha=4, target_modules=("q_proj",))):
        a = make_engine(tiny_model_dir, lora=lora)
        seqs = rollouts(a)
        adv = np.linspace(-1, 1, len(seqs))
        a.train_step(TrainBatch(seqs, adv), Objective())
        path = tmp_path / f"ckpt-{lora is not None}"
        a.save_checkpoint(str(path))
        assert (path / "model.safetensors").exists() and (path / "config.json").exists()
        b = make_engine(tiny_model_dir, lora=lora)
        b.load_checkpoint(str(path))
        ma = a.train_step(TrainBatch(seqs, adv), Objective())
        mb = b.train_step(TrainBatch(seqs, adv), Objective())
        assert ma.loss == mb.loss and ma.grad_norm == mb.grad_norm
        pa, pb = params(a), params(b)
        assert all(np.array_equal(pa[k], pb[k]) for k in pa)
        sp = SamplingParams(max_new_tokens=5, n=2)  # unseeded: the saved sampler key continues
        assert ([c.completion_ids.tolist() for c in a.generate(CHATS, sp)]
                == [c.completion_ids.tolist() for c in b.generate(CHATS, sp)])


def test_lora_import_replaces_the_base_and_checkpoints_it(tiny_model_dir, tmp_path, gen):
    lora = LoraConfig(rank=2, alpha=4, target_modules=("q_proj", "down_proj"))
    a = make_engine(tiny_model_dir, lora=lora)
    seqs = rollouts(gen)
    a.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    new = {k: v + np.float32(0.01) if k.endswith("q_proj.weight") else v
           for k, v in gen.export_weights().items()}
    a.import_weights(new)  # base := new, adapters reset: the engine computes exactly `new`
    exported = a.export_weights()
    assert all(np.array_equal(exported[k], new[k]) for k in new)
    for x, y in zip(a.logprobs(seqs, 1.0), a.logprobs(seqs, 1.0, reference=True)):
        np.testing.assert_allclose(x, y, atol=1e-6)
    a.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    a.save_checkpoint(str(tmp_path / "c"))
    b = make_engine(tiny_model_dir, lora=lora)
    b.load_checkpoint(str(tmp_path / "c"))
    pa, pb = params(a), params(b)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    batch = TrainBatch(seqs, np.linspace(1, -1, len(seqs)))
    assert a.train_step(batch, Objective()).loss == b.train_step(batch, Objective()).loss


# --- conversion, quantization ----------------------------------------------------------------------


def test_convert_round_trip_and_quantized_model(tiny_model_dir, tmp_path, gen):
    _usable("mlx")
    from polyrl_mlx.convert import convert
    from safetensors.numpy import load_file

    mlx_dir = convert(tiny_model_dir, str(tmp_path / "mlx"), to="mlx")
    hf_dir = convert(mlx_dir, str(tmp_path / "hf"), to="hf")
    original = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    back = load_file(str(Path(hf_dir) / "model.safetensors"))
    assert sorted(original) == sorted(back)
    for k in original:
        assert back[k].dtype == original[k].dtype and np.array_equal(back[k], original[k]), k
    config = json.loads((Path(hf_dir) / "config.json").read_text())
    assert "quantization" not in config and config["model_type"] == "llama"
    with pytest.raises(ConfigError, match="not empty"):
        convert(tiny_model_dir, hf_dir, to="mlx")

    q_dir = convert(tiny_model_dir, str(tmp_path / "q4"), to="mlx", quantize_bits=4)
    assert json.loads((Path(q_dir) / "config.json").read_text())["quantization"]["bits"] == 4
    q = make_engine(q_dir, role="generate")
    out = q.generate(CHATS, SamplingParams(max_new_tokens=5, n=2, seed=0))
    scored = q.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-5)
    exported = q.export_weights()
    assert exported["model.layers.0.self_attn.q_proj.weight"].dtype == np.float32
    # float weights sync into the 4-bit engine, quantized on the way in exactly as convert did
    seqs = [TokenSequence.of(c) for c in out]
    before = q.logprobs(seqs, 1.0)
    q.import_weights(gen.export_weights())  # the same float weights the q4 folder came from
    for a, b in zip(q.logprobs(seqs, 1.0), before):
        np.testing.assert_allclose(a, b, atol=1e-6)
    diff = max(np.abs(a - b).max() for a, b in zip(before, gen.logprobs(seqs, 1.0)))
    assert 0 < diff < 0.2  # 4-bit rounding of random weights: close, not equal
    with pytest.raises(ConfigError, match="quantized"):
        make_engine(q_dir, role="train")
    # QLoRA: a quantized base trains through adapters
    ql = make_engine(q_dir, lora=LoraConfig(rank=2, alpha=4, target_modules=("q_proj",)))
    assert not ql.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective()).skipped


# --- MLX <-> torch ---------------------------------------------------------------------------------


def test_logprobs_and_weight_sync_agree_with_torch(tiny_model_dir, gen):
    _usable("torch")
    theirs = make_engine(tiny_model_dir, backend="torch")
    seqs = rollouts(gen, n=2, tokens=8)
    for a, b in zip(gen.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    for a, b in zip(gen.logprobs(seqs, 0.7), theirs.logprobs(seqs, 0.7)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    # torch trains, MLX generates with its weights
    theirs.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    mine = make_engine(tiny_model_dir, role="generate")
    mine.import_weights(theirs.export_weights())
    for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    # MLX trains, torch takes its weights
    trainer = make_engine(tiny_model_dir)
    trainer.train_step(TrainBatch(seqs, np.linspace(1, -1, len(seqs))), Objective())
    theirs.import_weights(trainer.export_weights())
    for a, b in zip(trainer.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    # the same batch gives the same loss on both backends
    obj = Objective(beta=0.1, loss_aggregation="seq_mean_token_sum_norm", max_completion_length=8)
    batch = noisy_batch(trainer, seqs)
    assert trainer.train_step(batch, obj).loss == pytest.approx(theirs.train_step(batch, obj).loss, rel=1e-4)


def test_transformers5_rope_parameters_are_honoured(tiny_model_dir, tmp_path):
    """transformers 5 writes only ``rope_parameters``; mlx-lm reads ``rope_theta`` (default 10000)."""
    _usable("torch")
    import shutil

    folder = tmp_path / "rope"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    for key in ("rope_theta", "rope_scaling"):
        config.pop(key, None)
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 37.0}
    (folder / "config.json").write_text(json.dumps(config))
    mine = make_engine(str(folder), role="generate")
    theirs = make_engine(str(folder), backend="torch", role="generate")
    seqs = rollouts(mine, tokens=10)
    for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_tied_embeddings_sync_with_torch(tiny_model_dir, tmp_path):
    _usable("torch")

    from safetensors.numpy import load_file, save_file

    folder = edited_copy(tiny_model_dir, tmp_path / "tied", {"tie_word_embeddings": True})
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    mine, theirs = make_engine(str(folder)), make_engine(str(folder), backend="torch")
    seqs = rollouts(mine)
    for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert "lm_head.weight" not in mine.export_weights()
    mine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    theirs.import_weights(mine.export_weights())
    for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    theirs.train_step(TrainBatch(seqs, np.linspace(1, -1, len(seqs))), Objective())
    mine.import_weights(theirs.export_weights())
    for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(("damage", "said"), [
    ("cut", "truncated or corrupt"), ("fewer", "does not match its weights"), ("more", "does not match its weights")])
@pytest.mark.parametrize("to", ["mlx", "hf"])
def test_convert_of_a_damaged_folder_is_one_error_naming_it(tiny_model_dir, tmp_path, damage, said, to):
    """Weights cut short (an interrupted copy) or a config.json whose layer count disagrees with
    the weights: one ConfigError naming the folder, a few tensors and the fix; nothing written."""
    _usable("mlx")
    from polyrl_mlx.convert import convert

    src = tmp_path / damage
    shutil.copytree(tiny_model_dir, src)
    if damage == "cut":
        weights = src / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    else:
        config = json.loads((src / "config.json").read_text())
        config["num_hidden_layers"] += 1 if damage == "more" else -1
        (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as err:
        convert(str(src), str(tmp_path / "out"), to=to)
    text = str(err.value)
    assert err.value.field == "src" and str(src) in text and said in text, text
    assert len(text) < 600 and ("re-download" in err.value.fix), text
    if damage == "fewer":
        assert "model.layers." in text and "config.json" in err.value.fix, text
    elif damage == "more":  # from the safetensors headers, before mlx-lm builds the model
        assert "num_hidden_layers is 3, but the weights hold 2 numbered layers" in text, text
        assert "config.json" in err.value.fix, text
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == [damage]


def test_a_converted_mlx_model_loads_in_torch(tiny_model_dir, tmp_path, gen):
    _usable("torch")
    from polyrl_mlx.convert import convert

    hf_dir = convert(convert(tiny_model_dir, str(tmp_path / "m"), to="mlx"), str(tmp_path / "h"), to="hf")
    theirs = make_engine(hf_dir, backend="torch", role="generate")
    seqs = rollouts(gen)
    for a, b in zip(gen.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    # an MLX checkpoint's model is a HF folder: torch loads it as a model and as a checkpoint's
    # weights (MLX's optimizer state is not torch's, so across backends it is a weights-only resume)
    trainer = make_engine(tiny_model_dir)
    trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    trainer.save_checkpoint(str(tmp_path / "ckpt"))
    for other in (make_engine(str(tmp_path / "ckpt"), backend="torch", role="generate"),
                  make_engine(tiny_model_dir, backend="torch")):
        if other.config.role == "train":
            other.load_checkpoint(str(tmp_path / "ckpt"), weights_only=True)
        for a, b in zip(trainer.logprobs(seqs, 1.0), other.logprobs(seqs, 1.0)):
            np.testing.assert_allclose(a, b, atol=1e-4)


class TestMLXConformance(BackendConformance):
    backend = "mlx"
    compare_with = "torch"
    logprob_atol = 1e-4


# --- the trainer end to end ------------------------------------------------------------------------

def _grpo_run(tiny_model_dir, tmp_path, train: str, generate: str) -> list[float]:
    try:
        from polyrl.trainer import Trainer
    except ImportError as exc:
        pytest.skip(f"the core trainer is not importable: {exc}")
    _usable(train)
    _usable(generate)
    config = digits_config(tiny_model_dir, tmp_path, {"name": "grpo"}, train=train, generate=generate)
    summary = Trainer(config).run(progress=False)
    return [m["reward_mean"] for m in summary["history"]]


def test_all_mlx_grpo_run_raises_the_reward(tiny_model_dir, tmp_path):
    rewards = _grpo_run(tiny_model_dir, tmp_path, "mlx", "mlx")
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards


def test_hybrid_mlx_generate_torch_train_run(tiny_model_dir, tmp_path):
    rewards = _grpo_run(tiny_model_dir, tmp_path, "torch", "mlx")
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards


def _assert_same_logprobs_and_gradients(engine: Engine, expected: Engine, batch: TrainBatch,
                                        objective: Objective) -> None:
    """Two ways of running the same model agree: log-probs (T=0.7), loss and gradients."""
    from mlx.utils import tree_flatten
    from polyrl_mlx.training import accumulate_gradients

    seqs = batch.sequences
    for a, b in zip(engine.logprobs(seqs, 0.7), expected.logprobs(seqs, 0.7)):
        assert len(a) == len(b)
        np.testing.assert_allclose(a, b, atol=2e-5)
    g_got, s_got = accumulate_gradients(engine.raw, batch, objective)
    g_want, s_want = accumulate_gradients(expected.raw, batch, objective)
    assert s_got["loss"] == pytest.approx(s_want["loss"], rel=1e-5)
    flat_got, flat_want = dict(tree_flatten(g_got)), dict(tree_flatten(g_want))
    scale = max(float(np.abs(np.array(v)).max()) for v in flat_want.values())
    for k, v in flat_want.items():
        np.testing.assert_allclose(np.array(flat_got[k]), np.array(v), atol=2e-5 * scale, err_msg=k)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text", "phi3"])
def test_shared_prompt_forward_equals_the_full_forward(tiny_model_dir, tmp_path_factory, arch):
    """Each distinct prompt through the backbone once (left-padded, masked, its keys/values reused
    per row) gives the log-probs and gradients of running every row whole, for prompts of
    different lengths, one-token and empty completions included; on Gemma 3 with its
    sliding-window layers (window 8, shorter than the rows) and Phi-3's partial rotary too."""
    from polyrl.testing.tiny_model import build_tiny_model
    from polyrl_mlx.scoring import shared_prompt_forward_allowed

    model = tiny_model_dir if arch == "llama" else build_tiny_model(
        tmp_path_factory.mktemp("shared") / arch, arch=arch)
    shared = make_engine(model)
    whole = make_engine(model, options={"shared_prompt_forward": False})
    assert shared_prompt_forward_allowed(shared.raw)
    seqs = rollouts(shared, n=3, tokens=8)
    assert len({len(s.prompt_ids) for s in seqs}) > 1  # the left padding is exercised
    seqs += [TokenSequence(seqs[0].prompt_ids, np.array([], dtype=np.int64)),
             TokenSequence(seqs[3].prompt_ids, seqs[3].completion_ids[:1])]
    _assert_same_logprobs_and_gradients(shared, whole, noisy_batch(shared, seqs),
                                        Objective(beta=0.05, max_completion_length=8))


def test_length_bucketed_completions_equal_one_padded_call(tiny_model_dir):
    """Completion rows run in length buckets (one call per distinct length with a zero call cost)
    against the one prompt pass: the log-probs and gradients of a single right-padded call."""
    one_call = make_engine(tiny_model_dir, options={"bucket_call_tokens": 10**6})
    per_length = make_engine(tiny_model_dir, options={"bucket_call_tokens": 0})
    seqs = [TokenSequence(s.prompt_ids, s.completion_ids[: 1 + i % 8])
            for i, s in enumerate(rollouts(one_call, n=4, tokens=8))]
    assert len({len(s.completion_ids) for s in seqs}) >= 4
    _assert_same_logprobs_and_gradients(per_length, one_call, noisy_batch(one_call, seqs, beta=False),
                                        Objective(max_completion_length=8))


@pytest.mark.parametrize(("options", "key"), [
    ({"shared_prompt_forward": "no"}, "shared_prompt_forward"),  # a string read as true before
    ({"bucket_call_tokens": "abc"}, "bucket_call_tokens"),
    ({"score_batch_tokens": 0}, "score_batch_tokens"),
])
def test_a_bad_backend_option_fails_at_load_naming_it(tiny_model_dir, options, key):
    with pytest.raises(ConfigError) as info:
        make_engine(tiny_model_dir, options=options)
    assert f"backends.options.{key}" in str(info.value) and "Fix:" in str(info.value)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_half_precision_on_the_cpu_warns_as_torch_does(tiny_model_dir, dtype):
    """MLX's CPU build runs both half precisions ~30x slower than float32 (README, Backends):
    like torch's float16 on a CPU, it is a warning with the fix, not a silent slow run."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        make_engine(tiny_model_dir, dtype=dtype, device="cpu")
    slow = [e for e in logs if e["log_level"] == "warning" and "slower than float32" in e["event"]]
    if dtype == "float32":
        assert slow == []
    else:
        assert len(slow) == 1 and slow[0]["event"].startswith(f"{dtype} on CPU")
        assert slow[0]["fix"] == "use dtype float32 with the mlx backend on a CPU"


def test_a_vespo_step_reports_trls_phi_seq_mean(tiny_model_dir):
    """TRL logs ``vespo/phi_seq_mean`` for loss_type "vespo" (its sequence weight's mean); the MLX
    step reported none. Checked against the reference's weight on the log-probs the step starts from."""
    engine = make_engine(tiny_model_dir)
    seqs = rollouts(engine, n=3, tokens=8)
    batch = noisy_batch(engine, seqs, beta=False)
    obj = Objective(policy_loss="vespo", loss_aggregation="token_mean")
    current = engine.logprobs(seqs, 1.0)
    want = np.mean([vespo_weight(c.astype(np.float64), o, None, a, obj)
                    for c, o, a in zip(current, batch.old_logprobs, batch.advantages)])
    step = engine.train_step(batch, obj)
    assert not step.skipped and want != pytest.approx(1.0)
    assert step.extra["vespo_phi_seq_mean"] == pytest.approx(want, rel=1e-4)


def test_a_cispo_step_reports_trls_cispo_clip_ratio(tiny_model_dir):
    """TRL 1.16 logs ``cispo_clip_ratio`` for loss_type "cispo": the share of loss tokens with
    ``coef_1 > epsilon_high`` (polyrl's cap 1 + epsilon_high) and a positive advantage. The torch
    backend reported it (``cispo_clip_fraction``, which the trainer logs under TRL's name); the MLX
    backend did not, so an MLX cispo run logged no cispo_clip_ratio."""
    engine = make_engine(tiny_model_dir)
    seqs = rollouts(engine, n=3, tokens=8)
    batch = noisy_batch(engine, seqs, beta=False)
    obj = Objective(policy_loss="cispo", clip_eps_high=0.2, loss_aggregation="token_mean")
    # TRL's own lines (grpo_trainer.py, _compute_loss) on the weights the step starts from
    current = engine.logprobs(seqs, 1.0)
    capped = [(np.exp(c.astype(np.float64) - o) > 1.2) & (a > 0) for c, o, a in zip(current, batch.old_logprobs,
                                                                                 batch.advantages)]
    theirs = sum(int(x.sum()) for x in capped) / sum(len(x) for x in capped)
    step = engine.train_step(batch, obj)
    assert not step.skipped
    assert 0.0 < theirs < step.extra["clip_high_fraction"]  # the premise: the advantage's sign matters
    assert step.extra["cispo_clip_fraction"] == pytest.approx(theirs, abs=1e-9)
    ppo = make_engine(tiny_model_dir).train_step(batch, Objective(loss_aggregation="token_mean"))
    assert "cispo_clip_fraction" not in ppo.extra  # TRL logs it for loss_type "cispo" only
