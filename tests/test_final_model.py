"""Outputs a user can ship: ``output_dir/model`` after a run, from the torch and the MLX train
backends, loads in transformers, peft (LoRA adapter), ``mlx_lm.load`` and MAX's pipeline, and
never carries optimizer or RNG state (that lives beside ``model/`` inside each checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from polyrl import checkpoint as ckpt
from polyrl.config import RunConfig
from polyrl.registry import get_registry
from polyrl.trainer import Trainer

CHAT = [{"role": "user", "content": "What is 2 + 3?"}]
STATE_NAMES = ("optimizer", "rng", "torch_state", "mlx_state", "engine_state", "base_model", "trainer_state")


def _usable(name: str) -> None:
    status = get_registry().status(name)
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")


def run(model: str, out: Path, backend: str = "torch", lora: dict | None = None, steps: int = 2) -> dict:
    from crash_util import REWARD

    reward = out.parent / "reward.py"
    reward.write_text(REWARD)  # rewards differ within a group, so every step updates the weights
    data = {
        "model": {"path": model},
        "backends": {"train": backend},
        "generation": {"group_size": 4, "max_new_tokens": 8},
        "optimizer": {"lr": 1e-2},
        "data": {"task": "arithmetic", "options": {"count": 16}},
        "rewards": [{"function": f"{reward}:digits"}],
        "train": {"steps": steps, "prompts_per_step": 2, "threads": 1, "output_dir": str(out)},
    }
    if lora:
        data["lora"] = lora
    return Trainer(RunConfig.from_dict(data)).run(progress=False)


def assert_shippable(model_dir: Path, checkpoint: Path) -> None:
    """Only model files in ``model/``; the optimizer/RNG state sits beside it in the checkpoint."""
    names = [str(p.relative_to(model_dir)) for p in model_dir.rglob("*")]
    assert not [n for n in names if any(s in n for s in STATE_NAMES)], names
    assert (checkpoint / ckpt.ENGINE_STATE_DIR).is_dir()
    assert any("optimizer" in p.name for p in (checkpoint / ckpt.ENGINE_STATE_DIR).iterdir())
    from safetensors.numpy import load_file

    shipped = load_file(str(model_dir / "model.safetensors"))
    saved = load_file(str(checkpoint / ckpt.MODEL_DIR / "model.safetensors"))
    assert shipped.keys() == saved.keys()
    for name in shipped:
        np.testing.assert_array_equal(shipped[name], saved[name], err_msg=name)


def assert_loads_in_transformers(model_dir: Path, source: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    original = AutoTokenizer.from_pretrained(source)
    text = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert text == original.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4


def test_torch_run_ships_a_transformers_model_without_optimizer_state(tiny_model_dir, tmp_path):
    summary = run(tiny_model_dir, tmp_path / "run")
    model_dir = tmp_path / "run" / "model"
    assert summary["model"] == str(model_dir)
    assert_shippable(model_dir, Path(summary["checkpoint"]))
    assert_loads_in_transformers(model_dir, tiny_model_dir)


def test_torch_lora_run_ships_merged_weights_and_the_peft_adapter(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    summary = run(tiny_model_dir, tmp_path / "run", lora={"rank": 4, "alpha": 8.0})
    model_dir = tmp_path / "run" / "model"
    assert_shippable(model_dir, Path(summary["checkpoint"]))
    assert_loads_in_transformers(model_dir, tiny_model_dir)
    assert json.loads((model_dir / "adapter" / "adapter_config.json").read_text())["r"] == 4
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, model_dir / "adapter").merge_and_unload().state_dict()
    shipped = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for name, value in shipped.items():
        torch.testing.assert_close(merged[name], value, rtol=0, atol=1e-6, msg=name)
    changed = [name for name, value in shipped.items() if not torch.equal(value, original[name])]
    assert changed  # training moved the adapters, so the merge is not the base


def test_mlx_run_ships_a_model_mlx_lm_and_transformers_load(tiny_model_dir, tmp_path):
    _usable("mlx")
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load

    summary = run(tiny_model_dir, tmp_path / "run", backend="mlx")
    model_dir = tmp_path / "run" / "model"
    assert_shippable(model_dir, Path(summary["checkpoint"]))
    model, tokenizer = load(str(model_dir))
    from safetensors.numpy import load_file

    shipped = load_file(str(model_dir / "model.safetensors"))
    loaded = dict(tree_flatten(model.parameters()))
    for name, value in shipped.items():
        np.testing.assert_array_equal(np.array(loaded[name].astype(mx.float32)), value, err_msg=name)
    assert tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)
    assert_loads_in_transformers(model_dir, tiny_model_dir)


@pytest.mark.slow  # MAX compiles the tiny model's graph: minutes on 2 cores without a warm cache
def test_shipped_model_runs_in_max_pipelines_like_transformers(tiny_model_dir, tmp_path):
    _usable("max")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyrl.engine import Engine
    from polyrl.types import EngineConfig, SamplingParams

    run(tiny_model_dir, tmp_path / "run")
    model_dir = tmp_path / "run" / "model"
    engine = Engine(get_registry(), "max", EngineConfig(model=str(model_dir), role="generate", threads=1))
    got = engine.generate([CHAT], SamplingParams(max_new_tokens=6, temperature=0.0))[0]

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    want = hf.generate(**ids, max_new_tokens=6, do_sample=False)[0, ids["input_ids"].shape[1]:]
    assert list(got.completion_ids[: len(want)]) == want.tolist()[: len(got.completion_ids)]
    assert len(got.completion_ids) > 0
