"""What a model folder's config.json tells at startup, before any model loads: a pre-quantized
folder, LoRA targets the train engine would refuse, a MoE config's router coefficient left out,
and the router term's ``aux_loss`` on a step that trains nothing (as TRL logs it)."""

from __future__ import annotations

import shutil

import pytest
from model_copies import edited_copy

from polyrl.errors import ConfigError


def _run_config(model: str, tmp_path, **sections):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({
        "model": {"path": model}, "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": sections.pop("rewards", [{"name": "numeric_match"}]), "backends": {"train": "torch"},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        **sections})


def _no_model_loads(monkeypatch) -> None:
    from polyrl import engines

    monkeypatch.setattr(engines, "Engine", lambda *a, **k: pytest.fail("a model was loaded before the refusal"))


def _quantized_copy(source: str, folder, quantization: dict) -> str:
    return str(edited_copy(source, folder, {"quantization_config": quantization}))


# --- 1. a pre-quantized model folder as model.path -----------------------------------------------


@pytest.mark.parametrize("quantization, shown", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq 4-bit"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bitsandbytes 4-bit"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
])
def test_a_pre_quantized_model_folder_is_one_error_on_model_path_before_any_model_loads(
        quantization, shown, tiny_model_dir, tmp_path, monkeypatch):
    """Before: a GPTQ/AWQ/bitsandbytes/fp8 folder passed every startup check (only a quantized
    object and model_init_kwargs were refused) and failed as the torch engine loaded it. Now one
    error line on model.path, from config.json alone, on polyrl train and its check (launch)."""
    from polyrl.trainer import Trainer, check_run

    model = _quantized_copy(tiny_model_dir, tmp_path / "quantized", quantization)
    _no_model_loads(monkeypatch)
    for start in (check_run, Trainer):
        with pytest.raises(ConfigError, match="pre-quantized") as err:
            start(_run_config(model, tmp_path))
        assert err.value.field == "model.path" and shown in err.value.message and "\n" not in err.value.message
        assert "unquantized model" in (err.value.fix or "")


@pytest.mark.parametrize("kind, words", [
    ("folder", "has no config.json"),
    ("file", "is a file but not a .gguf file"),
    ("fifo", "is neither a folder nor a regular file (a FIFO, socket or device)"),
])
def test_a_model_path_the_torch_load_refuses_is_refused_by_the_launch_check(kind, words, tmp_path, monkeypatch):
    """``polyrl launch --dry-run`` (``check_run``) passed an empty folder, a data file or a FIFO as
    model.path (exit 0), and every rank then refused it as the engine loaded; a FIFO was "has no
    config.json", as if it were a folder."""
    import os

    from polyrl.trainer import check_run

    model = tmp_path / "model"
    if kind == "folder":
        model.mkdir()
    elif kind == "file":
        model.write_text('{"prompt": "2+2", "answer": "4"}\n')
    else:
        os.mkfifo(model)
    _no_model_loads(monkeypatch)
    with pytest.raises(ConfigError) as err:
        check_run(_run_config(str(model), tmp_path))
    assert err.value.field in ("model", "model.path") and words in err.value.message


def test_mlx_quantized_folders_and_float_folders_are_not_read_as_pre_quantized(tiny_model_dir, tmp_path):
    """mlx-lm writes its own 4-bit folders' quantization_config without a quant_method: the MLX
    backend trains LoRA over them, so they are not refused here."""
    from polyrl.prequantized import quantization_of

    mlx = _quantized_copy(tiny_model_dir, tmp_path / "mlx", {"group_size": 64, "bits": 4})
    assert quantization_of(mlx) is None and quantization_of(tiny_model_dir) is None


def test_a_trl_scripts_model_id_of_a_pre_quantized_folder_is_refused_before_it_loads(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    """The same folder named by a TRL script's model string."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from polyrl.trl import GRPOTrainer

    model = _quantized_copy(tiny_model_dir, tmp_path / "awq", {"quant_method": "awq", "bits": 4})
    _no_model_loads(monkeypatch)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), max_steps=1, num_generations=2,
                          per_device_train_batch_size=2, max_completion_length=4, use_cpu=True, report_to="none",
                          disable_tqdm=True, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          train_dataset=datasets.Dataset.from_list([{"prompt": "Hi"}] * 2), args=args)
    with pytest.raises(ConfigError, match="pre-quantized .awq 4-bit"):
        trainer.train()


def test_a_pre_quantized_kl_reference_is_one_error_on_model_reference_path_before_any_model_loads(
        tiny_model_dir, tmp_path, monkeypatch):
    """Only model.path (train and generate) was checked: a GPTQ folder as model.reference_path (a
    TRL reference model saved from a quantized checkpoint) passed every startup check and failed as
    the reference engine loaded it. Now the same error line, on model.reference_path; with beta = 0
    no reference is loaded, so nothing is refused."""
    pytest.importorskip("polyrl_torch")
    import attrs

    from polyrl.trainer import Trainer, check_run

    reference = _quantized_copy(tiny_model_dir, tmp_path / "gptq", {"quant_method": "gptq", "bits": 4})
    _no_model_loads(monkeypatch)
    config = _run_config(tiny_model_dir, tmp_path, algorithm={"beta": 0.04})
    config = attrs.evolve(config, model=attrs.evolve(config.model, reference_path=reference))
    for start in (check_run, Trainer):
        with pytest.raises(ConfigError, match="pre-quantized") as err:
            start(config)
        assert err.value.field == "model.reference_path" and "gptq 4-bit" in err.value.message
        assert "cannot score the KL reference over quantized weights" in err.value.message
        assert "\n" not in err.value.message and "unquantized model" in (err.value.fix or "")


def test_a_reference_backend_that_cannot_read_the_quantized_model_path_is_one_error_on_it(
        tiny_model_dir, tmp_path, monkeypatch):
    """MLX trains over an AWQ folder (its declared quant_methods) but torch cannot score it: with
    ``backends.reference = "torch"`` the reference engine failed at its load; now one error on
    backends.reference at startup."""
    pytest.importorskip("polyrl_torch")
    pytest.importorskip("polyrl_mlx")
    pytest.importorskip("mlx.core")
    from polyrl.trainer import check_run

    model = _quantized_copy(tiny_model_dir, tmp_path / "awq", {"quant_method": "awq", "bits": 4})
    _no_model_loads(monkeypatch)
    with pytest.raises(ConfigError, match="pre-quantized") as err:
        check_run(_run_config(model, tmp_path, algorithm={"beta": 0.04},
                              backends={"train": "mlx", "reference": "torch"}))
    assert err.value.field == "backends.reference" and "backend 'torch' cannot score" in err.value.message


# --- 2. LoRA targets the train engine would refuse ------------------------------------------------


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens", "no_such_proj"])
def test_lora_targets_outside_the_blocks_are_refused_before_any_model_loads(target, tiny_model_dir, tmp_path,
                                                                            monkeypatch):
    """Before: the torch engine refused them as it added the adapter, after the model's weights
    loaded. Now the same rule runs at startup on the model built on the meta device."""
    pytest.importorskip("polyrl_torch")
    from polyrl.trainer import Trainer, check_run

    _no_model_loads(monkeypatch)
    lora = {"rank": 4, "alpha": 8, "target_modules": [target]}
    for start in (check_run, Trainer):
        with pytest.raises(ConfigError, match=f"'{target}' names no layer") as err:
            start(_run_config(tiny_model_dir, tmp_path, lora=lora))
        assert err.value.field == "lora.target_modules"
    check_run(_run_config(tiny_model_dir, tmp_path, lora={**lora, "target_modules": ["q_proj"]}))


def test_a_trl_peft_config_naming_the_output_head_is_refused_before_any_model_loads(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    """A TRL script's peft_config (not a PeftModel) naming lm_head: the same refusal, at train()
    before the engines load (the PeftModel case was already checked on the object)."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    peft = pytest.importorskip("peft")
    from polyrl.trl import GRPOTrainer

    _no_model_loads(monkeypatch)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), max_steps=1, num_generations=2,
                          per_device_train_batch_size=2, max_completion_length=4, use_cpu=True, report_to="none",
                          disable_tqdm=True, bf16=False)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          train_dataset=datasets.Dataset.from_list([{"prompt": "Hi"}] * 2), args=args,
                          peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(ConfigError, match="'lm_head' names no layer"):
        trainer.train()


# --- 3. a MoE config.json without router_aux_loss_coef ---------------------------------------------


@pytest.mark.parametrize("model_type", ["qwen2_moe", "mixtral", "olmoe"])
def test_a_moe_config_json_without_the_coefficient_gets_transformers_default_for_its_type(model_type):
    """transformers loads such a config.json with its config class's default, which the torch
    backend reads off the loaded config. Before: the core's router_aux_coef read the file's missing
    key as 0.0 (no term), eval and MLX as 0.001 (OLMoE's is 0.01). Now every reader agrees."""
    transformers = pytest.importorskip("transformers")
    from polyrl.backend_kit.router_aux import refuse_router_aux, router_aux_coef

    config = {"model_type": model_type, "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
              "output_router_logits": False}
    loaded = transformers.CONFIG_MAPPING[model_type]()  # what transformers builds without the key
    assert loaded.router_aux_loss_coef > 0
    assert router_aux_coef(config, None) == pytest.approx(loaded.router_aux_loss_coef)
    assert router_aux_coef(loaded, None) == router_aux_coef(config, None)
    assert router_aux_coef(config, 0.0) == 0.0 and router_aux_coef({**config, "router_aux_loss_coef": 0.2}, None) == 0.2
    with pytest.raises(ConfigError, match=f"model's own coefficient applies \\({loaded.router_aux_loss_coef:g}\\)"):
        refuse_router_aux(config, None, "max")


# --- 4. aux_loss on a step that trains nothing ---------------------------------------------------


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens", "no_such_proj"])
def test_mlx_lora_targets_outside_the_blocks_are_refused_before_any_model_loads(target, tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    """Before: MLXEngine refused them as it added the adapter, after mlx-lm read every weight. Now
    the engine's own rule (lora_targets.lora_keys) runs at startup on the mlx-lm model built from
    config.json alone, its parameters never evaluated."""
    pytest.importorskip("polyrl_mlx")
    from polyrl.registry import get_registry
    from polyrl.trainer import Trainer, check_run

    status = get_registry().status("mlx")
    if not status.available:
        pytest.skip(f"mlx backend not usable here: {status.reason}")
    _no_model_loads(monkeypatch)
    lora = {"rank": 4, "alpha": 8, "target_modules": [target]}
    for start in (check_run, Trainer):
        with pytest.raises(ConfigError, match=f"'{target}' names no layer") as err:
            start(_run_config(tiny_model_dir, tmp_path, lora=lora, backends={"train": "mlx"}))
        assert err.value.field == "lora.target_modules" and "\n" not in err.value.message
    check_run(_run_config(tiny_model_dir, tmp_path, lora={**lora, "target_modules": ["q_proj"]},
                          backends={"train": "mlx"}))


def test_the_mlx_startup_check_reads_no_weight_file(tiny_model_dir, tmp_path):
    """config.json (and the tokenizer) alone: a folder whose weight files are gone still gets the
    refusal, and a good target list passes (the load, not this check, names the missing weights)."""
    pytest.importorskip("polyrl_mlx")
    pytest.importorskip("mlx_lm")
    from polyrl_mlx.startup_check import check_model

    from polyrl.types import EngineConfig, LoraConfig

    folder = tmp_path / "no_weights"
    shutil.copytree(tiny_model_dir, folder, ignore=shutil.ignore_patterns("*.safetensors*"))
    assert not list(folder.glob("*.safetensors"))
    with pytest.raises(ConfigError, match="'lm_head' names no layer"):
        check_model(EngineConfig(model=str(folder), lora=LoraConfig(rank=4, alpha=8, target_modules=["lm_head"])))
    check_model(EngineConfig(model=str(folder), lora=LoraConfig(rank=4, alpha=8, target_modules=["q_proj"])))
