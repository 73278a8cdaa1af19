"""Bring-your-own-model on MLX: the untested ("*") families, against their own transformers forward.

The tiny models of ``hf_families`` (transformers' own config classes, each family's quirk) go
through the mlx backend. A family mlx-lm runs as transformers does must sample, score, train and
sync weights with torch, its sampler, scorer and the model's own eager forward agreeing; one whose
quirk mlx-lm drops or does not run must be refused when it loads (``polyrl_mlx.family_check``),
with one ``error:`` on ``model.path``, not load and compute other log-probs.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hf_families import build_family_model

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

CHATS = [[{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
         [{"role": "user", "content": "Hi"}]]  # two prompt lengths: the sampler pads
#: float32 error of two kernels (MLX vs torch eager) over a few layers
FLOAT_ERROR = 2e-5
#: families mlx-lm runs as transformers does (sampler == scorer == the model's own forward)
RUN = ["cohere", "granite", "olmo2", "phi", "qwen2_moe", "qwen3_moe", "smollm3", "stablelm"]
#: their MLX weights are named otherwise than transformers 5's fused expert tensors: no sync yet
NO_SYNC = {"qwen2_moe", "qwen3_moe"}
#: families refused at load, and words the error line must hold
REFUSED = {
    "gemma2": "sliding_window=8",  # mlx-lm's gemma2 attends to the whole past
    "starcoder2": "sliding_window=8",  # as its starcoder2
    "falcon": "not supported",  # mlx-lm has no falcon module
    "gpt2": "does not match its weights",  # mlx-lm's gpt2 expects the hub layout, not transformers'
    "gpt_neox": "does not match its weights",  # its gpt_neox assumes intermediate_size = 4 x hidden
}


def _usable(*names: str) -> None:
    reg = get_registry()
    for name in names:
        if name not in reg.names() or not reg.status(name).available:
            pytest.skip(f"backend {name!r} not usable here")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("mlx-families")


def _engine(path: str, backend: str = "mlx", role: str = "train") -> Engine:
    return Engine(get_registry(), backend, EngineConfig(
        model=path, role=role, threads=1, optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None)))


def _gap(a, b) -> float:
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


def _eager_reference(path: str, seqs: list[TokenSequence]) -> list[np.ndarray]:
    """Log-probs from the family's own transformers forward (eager attention, float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.from_numpy(np.concatenate([s.prompt_ids, s.completion_ids]))[None]
            logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)[len(s.prompt_ids) - 1:-1]
            out.append(logp.gather(-1, torch.from_numpy(s.completion_ids)[:, None])[:, 0].numpy())
    return out


@pytest.mark.parametrize("model_type", RUN)
def test_family_samples_scores_trains_and_syncs_on_mlx_as_its_own_forward(model_type, models):
    _usable("mlx", "torch")
    path = build_family_model(model_type, models / model_type)
    trainer = _engine(path)
    out = trainer.generate(CHATS, SamplingParams(max_new_tokens=12, n=2, seed=0))
    seqs = [TokenSequence.of(c) for c in out]
    sampler = [c.logprobs for c in out]
    assert _gap(sampler, trainer.logprobs(seqs, 1.0)) < FLOAT_ERROR, "sampler != scorer"
    assert _gap(sampler, _eager_reference(path, seqs)) < FLOAT_ERROR, "sampler != the model's own forward"
    metrics = trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)), sampler_logprobs=sampler),
                                 Objective())
    assert not metrics.skipped and metrics.extra["mismatch_abs"] < 1e-5
    after = trainer.logprobs(seqs, 1.0)
    assert _gap(sampler, after) > 1e-3, "train_step changed nothing"
    if model_type in NO_SYNC:
        return
    torch_engine = _engine(path, "torch")
    torch_engine.import_weights(trainer.export_weights())  # MLX -> torch
    assert _gap(after, torch_engine.logprobs(seqs, 1.0)) < FLOAT_ERROR
    torch_engine.train_step(TrainBatch(seqs, np.linspace(1, -1, len(seqs))), Objective())
    generator = _engine(path, role="generate")
    generator.import_weights(torch_engine.export_weights())  # torch -> MLX
    assert _gap(torch_engine.logprobs(seqs, 1.0), generator.logprobs(seqs, 1.0)) < FLOAT_ERROR


@pytest.mark.faults
@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_family_mlx_lm_runs_otherwise_than_transformers_is_refused_at_load(model_type, models):
    _usable("mlx")
    path = build_family_model(model_type, models / model_type)
    with pytest.raises(ConfigError) as err:
        _engine(path, role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and REFUSED[model_type] in text and "\n" not in text, text
    assert "torch" in err.value.fix


@pytest.mark.faults
def test_a_config_without_a_key_mlx_lms_module_requires_is_one_error(models, tmp_path):
    _usable("mlx")
    folder = tmp_path / "qwen3_moe-no-experts"
    shutil.copytree(build_family_model("qwen3_moe", models / "qwen3_moe"), folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("num_local_experts")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as err:
        _engine(str(folder), role="generate")
    assert err.value.field == "model.path" and "num_experts" in str(err.value), str(err.value)


@pytest.mark.faults
def test_a_family_whose_module_cannot_run_the_samplers_padded_batch_is_refused(models, tmp_path):
    """Gemma 2 with a window longer than model.max_length (nothing for mlx-lm to drop): its module
    fails on the sampler's left-padded grouped-query batch, which the load-time probe runs."""
    _usable("mlx")
    folder = tmp_path / "gemma2-long-window"
    shutil.copytree(build_family_model("gemma2", models / "gemma2"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "sliding_window": 4096}))
    with pytest.raises(ConfigError) as err:
        _engine(str(folder), role="generate")
    text = str(err.value)
    assert err.value.field == "model.path" and "'gemma2'" in text and "probe" in text and "\n" not in text, text


@pytest.mark.faults
def test_a_family_whose_cached_forward_differs_from_its_full_forward_is_refused(models, monkeypatch):
    """A fake of a family whose KV-cache path (the sampler's) computes other logits than its full
    forward (the scorer's): granite's module scaled twice when a cache is given."""
    _usable("mlx")
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
    _usable("mlx")
    from safetensors.numpy import load_file, save_file

    source = build_family_model("granite", models / "granite")
    tensors = load_file(f"{source}/model.safetensors")
    embed = tensors["model.embed_tokens.weight"]
    for name, head in (("copy", embed.copy()), ("own", embed[::-1].copy())):
        folder = tmp_path / name
        shutil.copytree(source, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
        save_file({**tensors, "lm_head.weight": head}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        if name == "copy":
            _engine(str(folder), role="generate")
            continue
        with pytest.raises(ConfigError) as err:
            _engine(str(folder), role="generate")
        assert err.value.field == "model.path" and "ignores" in str(err.value) and str(folder) in str(err.value)
