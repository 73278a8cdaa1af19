"""Bring-your-own-model on MLX: the untested ("*") families, against their own transformers forward.

The tiny models of ``hf_families`` (transformers' own config classes, each family's quirk) go
through the mlx backend. A family mlx-lm runs as transformers does must sample, score, train and
sync weights with torch, its sampler, scorer and the model's own eager forward agreeing; one whose
quirk mlx-lm drops or does not run must be refused when it loads (``polyrl_mlx.family_check``),
with one ``error:`` on ``model.path``, not load and compute other log-probs. The same holds for a
tested family's sliding window mlx-lm's module does not apply (Mistral, Qwen2/3, Phi-3), while
Gemma 3's, which it applies, runs as transformers' does. Mixture-of-experts weights cross between
transformers' fused expert tensors and mlx-lm's stacked ones exactly, in syncs and checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hf_families import build_family_model, require_backends, eager_logprobs, largest_gap, sample_and_train_as_its_own_forward, train_once_and_save
from model_copies import REMOVE, edited_copy

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.tiny_model import build_tiny_model
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

CHATS = [[{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
         [{"role": "user", "content": "Hi"}]]  # two prompt lengths: the sampler pads
#: float32 error of two kernels (MLX vs torch eager) over a few layers
FLOAT_ERROR = 2e-5
#: families mlx-lm runs as transformers does (sampler == scorer == the model's own forward)
RUN = ["cohere", "granite", "olmo2", "phi", "qwen2_moe", "qwen3_moe", "smollm3", "stablelm"]
#: mixture-of-experts families: mlx-lm stacks the experts transformers 5 fuses (polyrl_mlx.expert_names)
MOE = ["qwen2_moe", "qwen3_moe"]
#: transformers' name of layer 0's experts (fused ``gate_up_proj`` and ``down_proj``)
EXPERTS = "model.layers.0.mlp.experts"
#: families refused at load, and words the error line must hold
REFUSED = {
    "gemma2": "sliding_window=8",  # mlx-lm's gemma2 attends to the whole past
    "starcoder2": "sliding_window=8",  # as its starcoder2
    "falcon": "not supported",  # mlx-lm has no falcon module
    "gpt2": "does not match its weights",  # mlx-lm's gpt2 expects the hub layout, not transformers'
    "gpt_neox": "does not match its weights",  # its gpt_neox assumes intermediate_size = 4 x hidden
}



@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("mlx-families")


def _engine(path: str, backend: str = "mlx", role: str = "train", max_length: int = 1024) -> Engine:
    return Engine(get_registry(), backend, EngineConfig(
        model=path, role=role, threads=1, max_length=max_length,
        optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None)))




@pytest.mark.parametrize("model_type", RUN)
def test_family_samples_scores_trains_and_syncs_on_mlx_as_its_own_forward(model_type, models):
    require_backends("mlx", "torch")
    path = build_family_model(model_type, models / model_type)
    trainer = _engine(path)
    seqs, after = sample_and_train_as_its_own_forward(trainer, path, CHATS, 12, FLOAT_ERROR)
    torch_engine = _engine(path, "torch")
    torch_engine.import_weights(trainer.export_weights())  # MLX -> torch
    assert largest_gap(after, torch_engine.logprobs(seqs, 1.0)) < FLOAT_ERROR
    torch_engine.train_step(TrainBatch(seqs, np.linspace(1, -1, len(seqs))), Objective())
    generator = _engine(path, role="generate")
    generator.import_weights(torch_engine.export_weights())  # torch -> MLX
    assert largest_gap(torch_engine.logprobs(seqs, 1.0), generator.logprobs(seqs, 1.0)) < FLOAT_ERROR


@pytest.mark.faults
@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_family_mlx_lm_runs_otherwise_than_transformers_is_refused_at_load(model_type, models):
    require_backends("mlx")
    path = build_family_model(model_type, models / model_type)
    with pytest.raises(ConfigError) as err:
        _engine(path, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and REFUSED[model_type] in text and "\n" not in text, text
    assert "torch" in err.value.fix


@pytest.mark.faults
def test_a_config_without_a_key_mlx_lms_module_requires_is_one_error(models, tmp_path):
    require_backends("mlx")
    folder = edited_copy(build_family_model("qwen3_moe", models / "qwen3_moe"), tmp_path / "qwen3_moe-no-experts",
                         {"num_local_experts": REMOVE})
    with pytest.raises(ConfigError) as err:
        _engine(str(folder), role="generate")
    assert err.value.field == "model.path" and "num_experts" in str(err.value), str(err.value)


@pytest.mark.faults
def test_a_family_whose_module_cannot_run_the_samplers_padded_batch_is_refused(models, tmp_path):
    """Gemma 2 with a window longer than model.max_length (nothing for mlx-lm to drop): its module
    fails on the sampler's left-padded grouped-query batch, which the load-time probe runs."""
    require_backends("mlx")
    folder = edited_copy(build_family_model("gemma2", models / "gemma2"), tmp_path / "gemma2-long-window",
                         {"sliding_window": 4096})
    with pytest.raises(ConfigError) as err:
        _engine(str(folder), role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and "'gemma2'" in text and "probe" in text and "\n" not in text, text


@pytest.mark.faults
def test_a_family_whose_cached_forward_differs_from_its_full_forward_is_refused(models, monkeypatch):
    """A fake of a family whose KV-cache path (the sampler's) computes other logits than its full
    forward (the scorer's): granite's module scaled twice when a cache is given."""
    require_backends("mlx")
    from mlx_lm.models import granite

    path = build_family_model("granite", models / "granite")
    _engine(path, role="generate")  # the probe passes on the real module
    full = granite.Model.__call__
    monkeypatch.setattr(granite.Model, "__call__",
                        lambda self, inputs, cache=None, **kw: full(self, inputs, cache, **kw) * (1 if cache is None else 2))
    with pytest.raises(ConfigError) as err:
        _engine(path, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and "'granite'" in text and "probe" in text and "\n" not in text


@pytest.mark.faults
def test_a_checkpoint_tensor_mlx_lm_drops_is_refused_unless_it_is_the_tied_copy(models, tmp_path):
    """granite's sanitize drops ``lm_head.weight`` when the config ties the head: a checkpoint whose
    head is its own tensor loads silently wrong there; a saved copy of the embedding loses nothing."""
    require_backends("mlx")
    from safetensors.numpy import load_file, save_file

    source = build_family_model("granite", models / "granite")
    tensors = load_file(f"{source}/model.safetensors")
    embed = tensors["model.embed_tokens.weight"]
    for name, head in (("copy", embed.copy()), ("own", embed[::-1].copy())):
        folder = edited_copy(source, tmp_path / name, {"tie_word_embeddings": True})
        save_file({**tensors, "lm_head.weight": head}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        if name == "copy":
            _engine(str(folder), role="generate")
            continue
        with pytest.raises(ConfigError) as err:
            _engine(str(folder), role="generate")
        assert err.value.field == "model.path" and "ignores" in str(err.value) and str(folder) in str(err.value)


#: fixed rows for the checkpoint and window tests: 14 and 16 tokens, past a 4-token window
SEQS = [TokenSequence(np.array([5, 17, 42]), np.array([7, 99, 3, 250, 11, 64, 8, 31, 140, 22, 5])),
        TokenSequence(np.arange(3, 9), np.arange(20, 30))]


def test_expert_layouts_convert_exactly_and_a_missing_expert_is_named():
    require_backends("mlx")
    import mlx.core as mx
    from polyrl_mlx.expert_names import to_hf, to_mlx

    rng = np.random.default_rng(0)
    p = "model.layers.0.mlp"
    stacked = {f"{p}.switch_mlp.{n}_proj.weight": mx.array(rng.standard_normal(shape).astype(np.float32))
               for n, shape in (("gate", (3, 2, 4)), ("up", (3, 2, 4)), ("down", (3, 4, 2)))}
    stacked["model.norm.weight"] = mx.ones((4,))
    hf = to_hf("qwen3_moe", stacked)
    assert sorted(hf) == [f"{p}.experts.down_proj", f"{p}.experts.gate_up_proj", "model.norm.weight"]
    gate_up = np.array(hf[f"{p}.experts.gate_up_proj"])  # [E, 2I, H], each expert's gate rows first
    assert np.array_equal(gate_up[:, :2], np.array(stacked[f"{p}.switch_mlp.gate_proj.weight"]))
    per_expert = {f"{p}.experts.{e}.{n}_proj.weight": stacked[f"{p}.switch_mlp.{n}_proj.weight"][e]
                  for e in range(3) for n in ("gate", "up", "down")}
    for given in (hf, {**per_expert, "model.norm.weight": mx.ones((4,))}):
        back = to_mlx("qwen3_moe", given)
        assert sorted(back) == sorted(stacked)
        assert all(np.array_equal(np.array(back[k]), np.array(v)) for k, v in stacked.items())
    assert to_hf("llama", stacked).keys() == stacked.keys()  # only known layouts are converted
    del per_expert[f"{p}.experts.1.up_proj.weight"]
    with pytest.raises(ValueError, match=r"switch_mlp.up_proj.weight: the import holds experts \[0, 2\]"):
        to_mlx("qwen2_moe", per_expert)


@pytest.mark.parametrize("model_type", MOE)
def test_moe_checkpoints_cross_between_torch_and_mlx_exactly(model_type, models, tmp_path):
    """A torch-trained MoE's checkpoint (transformers' fused experts) loads on MLX, as a checkpoint
    and as model.path, with torch's log-probs; an MLX-trained one's loads in torch and in
    transformers' own from_pretrained with MLX's; HF files' per-expert tensors import too."""
    require_backends("mlx", "torch")
    from safetensors.numpy import load_file

    path = build_family_model(model_type, models / model_type)
    want = train_once_and_save(_engine(path, "torch"), SEQS, str(tmp_path / "torch"))
    mlx = _engine(path)
    fresh = mlx.logprobs(SEQS, 1.0)
    assert largest_gap(want, fresh) > 1e-3, "torch's train_step changed nothing"
    mlx.load_checkpoint(str(tmp_path / "torch"), weights_only=True)
    assert largest_gap(want, mlx.logprobs(SEQS, 1.0)) < FLOAT_ERROR
    assert largest_gap(want, _engine(str(tmp_path / "torch"), role="generate").logprobs(SEQS, 1.0)) < FLOAT_ERROR

    mlx.train_step(TrainBatch(SEQS, np.array([-1.0, 1.0])), Objective(router_aux_loss_coef=0.0))  # router term: test_router_aux.py
    want = mlx.logprobs(SEQS, 1.0)
    mlx.save_checkpoint(str(tmp_path / "mlx"))
    torch_engine = _engine(path, "torch", role="generate")
    torch_engine.load_checkpoint(str(tmp_path / "mlx"), weights_only=True)
    assert largest_gap(want, torch_engine.logprobs(SEQS, 1.0)) < FLOAT_ERROR
    assert largest_gap(want, eager_logprobs(str(tmp_path / "mlx"), SEQS)) < FLOAT_ERROR

    on_disk = load_file(f"{path}/model.safetensors")  # save_pretrained's layout: one tensor per expert
    assert any(".mlp.experts.0.gate_proj.weight" in name for name in on_disk)
    mlx.import_weights(on_disk)
    assert largest_gap(fresh, mlx.logprobs(SEQS, 1.0)) < FLOAT_ERROR


#: tested families whose mlx-lm module does not apply the config's sliding window, and the keys
#: that make transformers slide their layers
WINDOW_NOT_APPLIED = {"mistral": {}, "phi3": {},
                      "qwen2": {"use_sliding_window": True, "max_window_layers": 0},
                      "qwen3": {"use_sliding_window": True, "max_window_layers": 0}}


def _windowed(models, folder: Path, arch: str, **config_keys) -> str:
    """The tiny ``arch`` model with ``config_keys`` in its config.json, at ``folder``."""
    return str(edited_copy(build_tiny_model(models / arch, arch=arch), folder, config_keys))


@pytest.mark.faults
@pytest.mark.parametrize("arch", sorted(WINDOW_NOT_APPLIED))
def test_a_sliding_window_mlx_lm_does_not_apply_is_refused_at_load(arch, models, tmp_path):
    require_backends("mlx")
    folder = _windowed(models, tmp_path / arch, arch, sliding_window=4, **WINDOW_NOT_APPLIED[arch])
    with pytest.raises(ConfigError) as err:
        _engine(folder, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and "sliding_window=4" in text and folder in text, text
    assert "\n" not in text and "model.max_length" in err.value.fix and "torch" in err.value.fix
    _engine(folder, role="generate", max_length=4)  # no sequence reaches past the window


def test_a_window_no_layer_or_sequence_reaches_loads(models, tmp_path):
    """Qwen2 with ``use_sliding_window`` off, or on with ``max_window_layers`` = every layer (no layer
    slides in transformers), and Mistral's window as long as model.max_length: nothing to refuse."""
    require_backends("mlx")
    _engine(_windowed(models, tmp_path / "off", "qwen2", sliding_window=4), role="generate")
    _engine(_windowed(models, tmp_path / "none", "qwen2", sliding_window=4, use_sliding_window=True,
                      max_window_layers=2), role="generate")
    _engine(_windowed(models, tmp_path / "long", "mistral", sliding_window=64), role="generate", max_length=64)


def _mlx_lm_logprobs(folder: str, seqs: list[TokenSequence]) -> list[np.ndarray]:
    """Log-probs of mlx-lm's own module, without polyrl's engine (and its load-time refusal)."""
    import mlx.core as mx
    from polyrl_mlx.engine import load_mlx_lm

    model, _, _ = load_mlx_lm(Path(folder), False)
    out = []
    for s in seqs:
        logits = model(mx.array(np.concatenate([s.prompt_ids, s.completion_ids]))[None])[0].astype(mx.float32)
        logp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))[len(s.prompt_ids) - 1:-1]
        out.append(logp[np.arange(len(s.completion_ids)), s.completion_ids])
    return out


def test_mlx_lm_runs_mistral_without_the_window_transformers_applies(models, tmp_path):
    """Why the refusal above: mlx-lm's module attends past Mistral's window (a 4-token window, rows
    of 14 and 16 tokens), transformers' does not; with no window they agree. When mlx-lm applies
    it, this fails: drop mistral from ``family_check.WINDOW_NOT_APPLIED``."""
    require_backends("mlx", "torch")
    windowed = _windowed(models, tmp_path / "window", "mistral", sliding_window=4)
    plain = build_tiny_model(models / "mistral", arch="mistral")
    assert largest_gap(_mlx_lm_logprobs(plain, SEQS), eager_logprobs(plain, SEQS)) < FLOAT_ERROR
    assert largest_gap(_mlx_lm_logprobs(windowed, SEQS), eager_logprobs(windowed, SEQS)) > 1e-2


def test_gemma3_sliding_window_runs_on_mlx_as_transformers_applies_it(models, tmp_path):
    """Gemma 3 (a sliding and a global layer) with a 4-token window: mlx-lm applies it, so the MLX
    sampler, scorer and transformers' eager forward agree on sequences far past the window."""
    require_backends("mlx", "torch")
    folder = _windowed(models, tmp_path / "gemma3", "gemma3_text", sliding_window=4)
    engine = _engine(folder, role="generate")
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=12, n=1, seed=0))
    seqs = [TokenSequence.of(c) for c in out]
    assert min(len(s.prompt_ids) for s in seqs) > 4
    sampler = [c.logprobs for c in out]
    assert largest_gap(sampler, engine.logprobs(seqs, 1.0)) < FLOAT_ERROR, "sampler != scorer"
    eager = eager_logprobs(folder, seqs)
    assert largest_gap(sampler, eager) < FLOAT_ERROR, "sampler != transformers' forward"
    wider = eager_logprobs(build_tiny_model(models / "gemma3_text", arch="gemma3_text"), seqs)
    assert largest_gap(eager, wider) > 1e-3, "the window changed nothing: the test would not see it dropped"


def test_a_quantized_moe_generator_takes_and_gives_torchs_expert_weights(models, tmp_path):
    """An 8-bit MLX Qwen3-MoE (its experts ``QuantizedSwitchLinear``) exports float weights under
    torch's names, and takes a torch trainer's weights (re-quantized: 8-bit rounding apart, equal)."""
    require_backends("mlx", "torch")
    from polyrl_mlx.convert import convert

    path = build_family_model("qwen3_moe", models / "qwen3_moe")
    convert(path, str(tmp_path / "q8"), to="mlx", quantize_bits=8)
    generator = _engine(str(tmp_path / "q8"), role="generate")
    trainer = _engine(path, "torch")
    trainer.train_step(TrainBatch(SEQS, np.array([1.0, -1.0])), Objective())
    want = trainer.export_weights()
    before = generator.export_weights()
    assert sorted(before) == sorted(want) and before[f"{EXPERTS}.gate_up_proj"].dtype == np.float32
    generator.import_weights(want)
    after = generator.export_weights()
    rounding = max(float(np.abs(after[k] - want[k]).max()) for k in want)
    assert rounding < 1e-2 and float(np.abs(after[f"{EXPERTS}.gate_up_proj"] - before[f"{EXPERTS}.gate_up_proj"]).max()) > 2 * rounding
