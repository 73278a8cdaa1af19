"""Mixture-of-experts on MLX beyond plain float weights: LoRA on the experts, folders the torch
backend saved through ``polyrl convert``, and nvfp4 experts with per-expert global scales.

* ``lora.target_modules`` naming ``gate_proj``/``up_proj``/``down_proj`` adapts a qwen2/3-MoE's
  experts on MLX (mlx-lm's ``LoRASwitchLinear``, one adapter per expert): exports, checkpoints,
  the adapters-off reference and an import's adapter reset must hold them, so torch and
  transformers compute what the MLX trainer computes.
* ``polyrl convert`` reads a torch-saved MoE (transformers' fused experts) as the engine does.
* nvfp4 experts with global scales export as the float weights they stand for and are refused
  at load on MLX's CPU, which has no kernel for them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hf_families import build_family_model, require_backends, eager_logprobs, largest_gap, train_once_and_save

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, TokenSequence, TrainBatch

FLOAT_ERROR = 2e-5  # float32 error of two kernels (MLX vs torch eager) over a few layers
MOE = ["qwen2_moe", "qwen3_moe"]
#: the router load-balancing loss is left out here: test_router_aux.py checks it on MLX and torch
NO_ROUTER_LOSS = Objective(router_aux_loss_coef=0.0)
EXPERT_PROJ = ("gate_proj", "up_proj", "down_proj")
EXPERTS = "model.layers.0.mlp.experts"
SEQS = [TokenSequence(np.array([5, 17, 42]), np.array([7, 99, 3, 250, 11, 64, 8, 31, 140, 22, 5])),
        TokenSequence(np.arange(3, 9), np.arange(20, 30))]



@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("mlx-moe")


def _engine(path: str, backend: str = "mlx", role: str = "train", lora: LoraConfig | None = None) -> Engine:
    return Engine(get_registry(), backend, EngineConfig(
        model=path, role=role, threads=1, lora=lora, optimizer=OptimizerConfig(lr=5e-2, max_grad_norm=None)))




@pytest.mark.parametrize("model_type", MOE)
def test_lora_on_moe_experts_is_merged_per_expert_wherever_weights_leave_mlx(model_type, models, tmp_path):
    """After a LoRA step that moved the experts' adapters, torch (import) and transformers (the
    checkpoint) compute the MLX trainer's log-probs; the reference is the base; an import resets
    the experts' adapters too, so the engine then computes exactly the imported weights."""
    require_backends("mlx", "torch")
    from mlx_lm.tuner.lora import LoRASwitchLinear

    path = build_family_model(model_type, models / model_type)
    trainer = _engine(path, lora=LoraConfig(rank=4, alpha=8, target_modules=EXPERT_PROJ))
    switch = [m for _, m in trainer.raw.model.named_modules() if isinstance(m, LoRASwitchLinear)]
    assert switch, "the experts are not adapted: the test would not see them merged"
    base = trainer.logprobs(SEQS, 1.0)
    trainer.train_step(TrainBatch(SEQS, np.array([1.0, -1.0])), NO_ROUTER_LOSS)
    after = trainer.logprobs(SEQS, 1.0)
    assert largest_gap(base, after) > 1e-3, "train_step changed nothing"
    assert all(float(np.abs(np.array(m.lora_b)).max()) > 0 for m in switch), "no expert adapter moved"
    assert largest_gap(base, trainer.logprobs(SEQS, 1.0, reference=True)) < FLOAT_ERROR, "reference kept the experts' adapters"

    fresh_weights = _engine(path, "torch", role="generate").export_weights()
    merged = trainer.export_weights()
    assert sorted(merged) == sorted(fresh_weights)  # torch's names: fused experts, no lora_a/lora_b
    assert float(np.abs(merged[f"{EXPERTS}.gate_up_proj"] - fresh_weights[f"{EXPERTS}.gate_up_proj"]).max()) > 0
    torch_engine = _engine(path, "torch", role="generate")
    torch_engine.import_weights(merged)
    assert largest_gap(after, torch_engine.logprobs(SEQS, 1.0)) < FLOAT_ERROR
    trainer.save_checkpoint(str(tmp_path / "ckpt"))
    assert largest_gap(after, eager_logprobs(str(tmp_path / "ckpt"), SEQS)) < FLOAT_ERROR

    trainer.import_weights(fresh_weights)  # the base model again: every adapter reset to B = 0
    assert largest_gap(base, trainer.logprobs(SEQS, 1.0)) < FLOAT_ERROR
    assert all(float(np.abs(np.array(m.lora_b)).max()) == 0 for m in switch)
    resumed = _engine(path, lora=LoraConfig(rank=4, alpha=8, target_modules=EXPERT_PROJ))
    resumed.load_checkpoint(str(tmp_path / "ckpt"))  # adapters (experts' too) and base, exactly
    assert largest_gap(after, resumed.logprobs(SEQS, 1.0)) < FLOAT_ERROR


@pytest.mark.parametrize("model_type", MOE)
def test_convert_reads_a_moe_the_torch_backend_saved(model_type, models, tmp_path):
    """A torch checkpoint holds transformers' fused experts, which mlx-lm's own load refuses:
    ``convert --to mlx`` reads it as the engine does and writes mlx-lm's stacked experts, and
    ``--to hf`` writes the fused layout transformers loads, both with torch's log-probs."""
    require_backends("mlx", "torch")
    from polyrl_mlx.convert import convert
    from safetensors.numpy import load_file

    path = build_family_model(model_type, models / model_type)
    want = train_once_and_save(_engine(path, "torch"), SEQS, str(tmp_path / "torch"))
    assert f"{EXPERTS}.gate_up_proj" in load_file(str(tmp_path / "torch" / "model.safetensors"))

    mlx_dir = convert(str(tmp_path / "torch"), str(tmp_path / "mlx"), to="mlx")
    names = set(load_file(f"{mlx_dir}/model.safetensors"))
    assert "model.layers.0.mlp.switch_mlp.gate_proj.weight" in names and f"{EXPERTS}.gate_up_proj" not in names
    assert largest_gap(want, _engine(mlx_dir, role="generate").logprobs(SEQS, 1.0)) < FLOAT_ERROR
    hf_dir = convert(str(tmp_path / "torch"), str(tmp_path / "hf"), to="hf")
    assert largest_gap(want, eager_logprobs(hf_dir, SEQS)) < FLOAT_ERROR


def _nvfp4_global_scale_folder(source: str, folder: Path) -> str:
    """``source`` quantized as mlx-lm does with ``mode="nvfp4", global_scale=True`` (experts get
    one float32 scale each), saved as mlx-lm saves it."""
    from mlx_lm.utils import quantize_model, save
    from polyrl_mlx.engine import load_mlx_lm

    model, tokenizer, config = load_mlx_lm(Path(source), False)
    model, config = quantize_model(model, config, 16, 4, mode="nvfp4", global_scale=True)
    save(str(folder), source, model, tokenizer, config, donate_model=False)
    return str(folder)


def test_nvfp4_experts_with_global_scales_export_their_weights_and_are_refused_on_cpu(models, tmp_path):
    """Unpacked without their global scale the experts were off ~10^4x (and the scale leaked out as
    a tensor name torch does not have); on MLX's CPU, where no kernel runs them, the load is refused
    on ``device`` (not as a family MLX cannot run, nor at a tested family's first forward)."""
    require_backends("mlx", "torch")
    from polyrl_mlx.convert import convert
    from safetensors import safe_open
    from safetensors.numpy import load_file

    source = build_family_model("qwen3_moe", models / "qwen3_moe")
    folder = _nvfp4_global_scale_folder(source, tmp_path / "nvfp4")
    with safe_open(f"{folder}/model.safetensors", "np") as f:
        assert any(k.endswith("switch_mlp.gate_proj.global_scale") for k in f.keys())
    with pytest.raises(ConfigError) as err:
        _engine(folder, role="generate")
    text = str(err.value)
    assert err.value.field == "device" and "global scale" in text and folder in text and "\n" not in text, text
    assert "--to hf" in err.value.fix

    want = _engine(source, "torch", role="generate").export_weights()
    got = load_file(f"{convert(folder, str(tmp_path / 'hf'), to='hf')}/model.safetensors")
    assert sorted(got) == sorted(want)
    for name in (f"{EXPERTS}.gate_up_proj", f"{EXPERTS}.down_proj"):
        for e in range(want[name].shape[0]):  # nvfp4 rounds to within a sixth of the expert's largest |w|
            amax = float(np.abs(want[name][e]).max())
            assert float(np.abs(got[name][e].astype(np.float32) - want[name][e]).max()) < amax / 5, (name, e)


def test_an_nvfp4_generator_takes_torchs_weights(models, tmp_path):
    """nvfp4 layers' scales are uint8 codes: an import cast the float weights to them before
    packing (MLX refused to quantize uint8). A Llama packed as mlx-lm packs nvfp4 takes a torch
    trainer's weights."""
    require_backends("mlx", "torch")
    from mlx_lm.utils import quantize_model, save
    from polyrl.testing.tiny_model import build_tiny_model
    from polyrl_mlx.engine import load_mlx_lm

    source = build_tiny_model(models / "llama", arch="llama")
    model, tokenizer, config = load_mlx_lm(Path(source), False)
    model, config = quantize_model(model, config, 16, 4, mode="nvfp4")
    save(str(tmp_path / "nvfp4"), source, model, tokenizer, config, donate_model=False)
    generator = _engine(str(tmp_path / "nvfp4"), role="generate")
    trainer = _engine(source, "torch")
    trainer.train_step(TrainBatch(SEQS, np.array([1.0, -1.0])), NO_ROUTER_LOSS)
    want = trainer.export_weights()
    generator.import_weights(want)
    got = generator.export_weights()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert float(np.abs(got[name] - want[name]).max()) < float(np.abs(want[name]).max()) / 5
    assert largest_gap(trainer.logprobs(SEQS, 1.0), generator.logprobs(SEQS, 1.0)) < 0.5  # 4-bit rounding apart


def test_experts_with_global_scales_repack_weights_of_another_range(models, tmp_path):
    """An import re-packs nvfp4 experts with new global scales: weights 10x larger are not clipped
    to the old scale's range (the engine refuses such a model on CPU: packing checked directly)."""
    require_backends("mlx")
    import mlx.core as mx
    from polyrl_mlx.engine import load_mlx_lm
    from polyrl_mlx.packed import dequantized, global_scale, packed_like

    source = build_family_model("qwen3_moe", models / "qwen3_moe")
    folder = _nvfp4_global_scale_folder(source, tmp_path / "nvfp4")
    model, _, _ = load_mlx_lm(Path(folder), False)
    experts = dict(model.named_modules())["model.layers.0.mlp.switch_mlp.gate_proj"]
    assert global_scale(experts) is not None
    want = dequantized(experts) * 10
    experts.update(packed_like(experts, want))
    for e in range(want.shape[0]):
        amax = float(mx.abs(want[e]).max().item())
        assert float(mx.abs(dequantized(experts)[e] - want[e]).max().item()) < amax / 5


@pytest.mark.parametrize("targets", [["all-linear"], ["gate", "gate_proj"], ["q_proj", "shared_expert.up_proj"]])
def test_the_startup_check_picks_the_layers_the_engine_adapts(targets, models):
    """The startup check (``polyrl_mlx.startup_check``, config.json alone) and the engine's load
    run one rule on one model: on a MoE, router and experts included, they pick the same layers."""
    require_backends("mlx")
    from polyrl_mlx.lora_targets import lora_keys
    from polyrl_mlx.startup_check import build_without_weights, check_model

    path = build_family_model("qwen2_moe", models / "qwen2_moe")
    lora = LoraConfig(rank=2, alpha=4, target_modules=targets)
    check_model(EngineConfig(model=path, lora=lora))
    built, config = build_without_weights(Path(path))
    assert lora_keys(built, lora, config["model_type"]) == _engine(path, lora=lora).raw.lora_keys
