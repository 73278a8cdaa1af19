"""``model.compute_dtype = "bfloat16"`` on float32 weights: the torch backend's mixed precision.

A real tiny Llama trained side by side with a plain float32 engine: the masters and AdamW state
stay float32, the steps track the float32 ones to bfloat16 precision, the policy still moves
the way the advantages say, and the sampler's bfloat16 weight copy follows every update. The
refusal (a backend not declaring it) and the emulated-bfloat16 warning are checked too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
#: bfloat16 keeps 8 bits of mantissa: log-probs of the tiny model move by a few 1e-3
BF16_LOGP_TOL = 0.03
PROMPTS = ["hello there", "count to three"]
ADVANTAGES = np.array([1.0, -1.0, 1.0, -1.0], dtype=np.float32)


def _engine(model_dir: str, **kw) -> Engine:
    kw.setdefault("optimizer", OptimizerConfig(lr=1e-3))
    return Engine(get_registry(), "torch", EngineConfig(model=model_dir, threads=1, seed=0, **kw))


def _max_gap(a, b) -> float:
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


def _batch(engine: Engine) -> list[TokenSequence]:
    completions = engine.generate(PROMPTS, SamplingParams(max_new_tokens=10, n=2, seed=0, temperature=1.0))
    return [TokenSequence.of(c) for c in completions]


@pytest.mark.parametrize("variant", ["full", "lora_checkpointed_micro"])
def test_bf16_compute_keeps_float32_masters_and_tracks_float32(tiny_model_dir, variant):
    extra = {} if variant == "full" else {"lora": LoraConfig(rank=4, alpha=8), "gradient_checkpointing": True}
    optimizer = OptimizerConfig(lr=1e-3, micro_batch_size=None if variant == "full" else 1)
    plain = _engine(tiny_model_dir, optimizer=optimizer, **extra)
    mixed = _engine(tiny_model_dir, optimizer=optimizer, compute_dtype="bfloat16", **extra)
    seqs = _batch(plain)
    before = mixed.logprobs(seqs, 1.0)
    for _ in range(3):
        m_plain = plain.train_step(TrainBatch(seqs, ADVANTAGES), Objective())
        m_mixed = mixed.train_step(TrainBatch(seqs, ADVANTAGES), Objective())
        assert not m_mixed.skipped
        assert m_mixed.grad_norm == pytest.approx(m_plain.grad_norm, rel=0.05)
    engine = mixed.raw
    trainable = engine.trainable_parameters()
    assert trainable and all(p.dtype == torch.float32 for p in engine.model.parameters())
    state = [s for p in trainable for s in engine.optimizer.state[p].values() if torch.is_tensor(s) and s.numel() > 1]
    assert state and all(s.dtype == torch.float32 for s in state)  # AdamW moments in float32
    after_plain, after_mixed = plain.logprobs(seqs, 1.0), mixed.logprobs(seqs, 1.0)
    assert _max_gap(after_plain, after_mixed) < BF16_LOGP_TOL
    # the policy learned what the advantages asked: sequences 0, 2 up, 1, 3 down
    moved = [float(np.sum(a) - np.sum(b)) for a, b in zip(after_mixed, before)]
    assert moved[0] > 0 and moved[2] > 0 and moved[1] < 0 and moved[3] < 0, moved


def test_bf16_sampler_logprobs_reproduced_and_copy_follows_updates(tiny_model_dir):
    mixed = _engine(tiny_model_dir, compute_dtype="bfloat16")
    sampling = SamplingParams(max_new_tokens=10, n=2, seed=3, temperature=1.0)
    for _ in range(2):
        completions = mixed.generate(PROMPTS, sampling)
        seqs = [TokenSequence.of(c) for c in completions]
        scored = mixed.logprobs(seqs, 1.0)
        gap = _max_gap(scored, [c.logprobs for c in completions])
        assert 0 < gap < BF16_LOGP_TOL  # bfloat16 rounding shows, and no more than that
        copy = mixed.raw.generation_copy.model
        assert next(copy.parameters()).dtype == torch.bfloat16
        mixed.train_step(TrainBatch(seqs, ADVANTAGES), Objective())
        # after the update the copy must hold the new weights (float32 masters rounded)
        mixed.generate(PROMPTS[:1], SamplingParams(max_new_tokens=1, n=1, seed=0))
        live = mixed.raw.model.get_input_embeddings().weight
        assert torch.equal(copy.get_input_embeddings().weight, live.detach().to(torch.bfloat16))


def test_bf16_copy_follows_imported_weights(tiny_model_dir):
    mixed = _engine(tiny_model_dir, compute_dtype="bfloat16", lora=LoraConfig(rank=4, alpha=8))
    mixed.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2, n=1, seed=0))
    weights = mixed.export_weights()
    name = "model.norm.weight"
    weights[name] = weights[name] * 0.5
    mixed.import_weights(weights)
    mixed.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2, n=1, seed=0))
    copy = mixed.raw.generation_copy.model
    assert torch.equal(copy.state_dict()[name].cpu(), torch.from_numpy(weights[name]).to(torch.bfloat16))


def test_float32_compute_dtype_is_plain_float32(tiny_model_dir):
    same = _engine(tiny_model_dir, compute_dtype="float32")
    assert same.raw.compute_dtype is None  # equal to dtype: nothing to autocast


@pytest.mark.faults
def test_unknown_compute_dtype_is_a_config_error():
    from polyrl.config import RunConfig

    with pytest.raises(ConfigError, match="model.compute_dtype"):
        RunConfig.from_dict({"model": {"path": "tiny-llama", "compute_dtype": "int8"},
                             "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})


@pytest.mark.faults
def test_backend_without_compute_dtypes_is_refused_up_front(tmp_path):
    """MLX declares no compute dtype: the CLI says so in one error: line before any model loads."""
    pytest.importorskip("polyrl_mlx")
    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\ncompute_dtype = "bfloat16"\n[backends]\ntrain = "mlx"\n'
                    '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                    f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True,
                            text=True, timeout=120, env=env)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert lines[-1].startswith("error:") and "model.compute_dtype" in lines[-1] and "mlx" in lines[-1], lines
    assert "Traceback" not in result.stderr


@pytest.mark.faults
def test_emulated_bf16_warns_once(tiny_model_dir, monkeypatch):
    from structlog.testing import capture_logs

    import polyrl_torch.engine as torch_engine

    monkeypatch.setattr(torch_engine, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    torch_engine.warn_emulated_bf16.cache_clear()
    with capture_logs() as logs:  # a CPU's concern: on a GPU the CPU's flags do not matter
        _engine(tiny_model_dir, compute_dtype="bfloat16", role="generate", device="cpu")
        _engine(tiny_model_dir, compute_dtype="bfloat16", role="generate", device="cpu")
    warned = [e for e in logs if "without native bfloat16" in e.get("event", "")]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    monkeypatch.setattr(torch_engine, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    torch_engine.warn_emulated_bf16.cache_clear()
    with capture_logs() as logs:
        _engine(tiny_model_dir, compute_dtype="bfloat16", role="generate", device="cpu")
    assert not [e for e in logs if "without native bfloat16" in e.get("event", "")]
