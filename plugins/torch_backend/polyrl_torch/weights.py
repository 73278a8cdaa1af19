"""Weights across engines and backends (HF-named numpy arrays) and checkpoints on disk.

Names are always the transformers ones (``model.layers.0.self_attn.q_proj.weight``), whatever
peft does to module paths, so a generator on another backend can take them as they are.

LoRA choices (documented here because they are choices):

* ``export_weights`` merges ``W + scale * B @ A`` on the fly; the engine itself is not modified
  (merging in place and unmerging later would add float error to the base).
* ``import_weights`` into a LoRA engine writes the given (full) weights into the *base* and resets
  the adapters to their initial state (B = 0, A re-drawn) and the optimizer state with them, so the
  engine then computes exactly the imported weights and ``export_weights`` returns them again.
  The frozen reference (``logprobs(reference=True)``) becomes the imported weights too.
* A checkpoint holds the merged model (HF layout, loadable by any backend), the adapters in peft
  format, and, for exact resumption, the unmerged base weights (the merge is not invertible).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from polyrl.backend_kit import engine_state as es
from polyrl.backend_kit.checkpoints import missing_piece
from polyrl.backend_kit.versions import installed_version
from polyrl.errors import ConfigError
from polyrl.types import NamedWeights
from polyrl_torch import distributed, state_files
from polyrl_torch.engine import ADAPTER, TorchEngine, merged_weight
from polyrl_torch.state_files import FORMAT, STATE_DIR

ADAPTER_DIR = "adapter"


# --- names ---------------------------------------------------------------------------------------


def _lora_layers(engine: TorchEngine) -> dict[str, Any]:
    if engine.lora is None:
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in engine.causal_lm.named_modules() if isinstance(m, LoraLayer)}


def _named_tensors(engine: TorchEngine) -> dict[str, torch.Tensor]:
    """Every HF name (tied aliases included) -> the live tensor holding it (base, unmerged)."""
    out = {}
    for name, tensor in engine.causal_lm.state_dict(keep_vars=True).items():
        if "lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = tensor
    return out


def hf_sources(engine: TorchEngine, merged: bool = True) -> dict[str, tuple[torch.Tensor, Any]]:
    """HF name -> (the live base tensor, the peft LoRA layer whose adapter ``hf_value`` may fold into
    that weight, or None), tied duplicates dropped: what each ``hf_state_dict`` value is computed
    from, so the generation copy can tell which values changed without computing them."""
    layers = _lora_layers(engine) if merged else {}
    out: dict[str, tuple[torch.Tensor, Any]] = {}
    seen: set[int] = set()
    for name, tensor in _named_tensors(engine).items():
        ptr = tensor.data_ptr()
        if ptr in seen:  # tied to a tensor already listed (e.g. lm_head -> embed_tokens)
            continue
        seen.add(ptr)
        out[name] = (tensor, layers.get(name.rsplit(".", 1)[0]) if name.endswith(".weight") else None)
    return out


def _folds_adapter(layer: Any) -> bool:
    """Whether ``layer``'s adapter is applied on top of its base weight now (active, enabled, and
    not merged into the base already)."""
    return (not layer.merged and ADAPTER in layer.active_adapters
            and not getattr(layer, "disable_adapters", False))


def hf_value(tensor: torch.Tensor, layer: Any) -> torch.Tensor:
    """A detached HF value from ``hf_sources``' pair: the LoRA adapter folded in where it applies."""
    value = tensor.detach()
    if layer is not None and _folds_adapter(layer):
        value = merged_weight(layer, value)
    return value


def hf_state_dict(engine: TorchEngine, merged: bool = True) -> dict[str, torch.Tensor]:
    """HF-named detached tensors in the model's dtype: tied duplicates dropped, LoRA merged."""
    with torch.no_grad():
        return {name: hf_value(tensor, layer) for name, (tensor, layer) in hf_sources(engine, merged).items()}


# --- export / import -----------------------------------------------------------------------------


def export_weights(engine: TorchEngine) -> NamedWeights:
    """float32 numpy copies (never views: the optimizer keeps writing to the live tensors)."""
    out = {}
    tensors = engine.fsdp.state_dict(everywhere=True) if engine.fsdp is not None else hf_state_dict(engine)
    for name, t in tensors.items():
        a = t.to("cpu", torch.float32)
        if a.data_ptr() == t.data_ptr():
            a = a.clone()
        out[name] = a.numpy()
    return out


def _check_names_and_shapes(weights: Mapping[str, np.ndarray | torch.Tensor],
                            shapes: Mapping[str, tuple[int, ...]], missing: list[str]) -> None:
    unknown = sorted(set(weights) - set(shapes))
    if unknown:
        raise ValueError(f"{len(unknown)} weight names unknown to this model, e.g. {unknown[:3]}")
    if missing:
        raise ValueError(f"{len(missing)} weights missing from the import, e.g. {sorted(missing)[:3]}")
    for name, value in weights.items():
        if tuple(value.shape) != shapes[name]:
            raise ValueError(f"{name}: shape {tuple(value.shape)} != model's {shapes[name]}")


def _assign(engine: TorchEngine, weights: Mapping[str, np.ndarray | torch.Tensor]) -> None:
    """Copy HF-named values into the live (base) tensors, checking names and shapes first."""
    if engine.fsdp is not None:  # sharded tensors: names from the state dict, tied ones by alias
        shapes = {k: tuple(v.shape) for k, v in engine.causal_lm.state_dict().items()}
        aliases = engine.fsdp.aliases
        missing = [n for n in shapes if n not in weights and aliases.get(n) not in weights]
        _check_names_and_shapes(weights, shapes, missing)
        engine.fsdp.load_state_dict(weights)
        return
    engine.weight_updates += 1
    targets = _named_tensors(engine)
    covered = {targets[n].data_ptr() for n in weights if n in targets}
    missing = [n for n, t in targets.items() if t.data_ptr() not in covered]
    _check_names_and_shapes(weights, {k: tuple(v.shape) for k, v in targets.items()}, missing)
    with torch.no_grad():
        for name, value in weights.items():
            targets[name].copy_(torch.as_tensor(value))


def _reset_adapters(engine: TorchEngine) -> None:
    for module in _lora_layers(engine).values():
        module.reset_lora_parameters(ADAPTER, init_lora_weights=True)
    if engine.optimizer is not None:
        engine.optimizer.state.clear()


def import_weights(engine: TorchEngine, weights: NamedWeights) -> bool:
    """Replace the weights; for LoRA engines see the module docstring (base + adapter reset)."""
    _assign(engine, weights)
    if engine.lora is not None:
        _reset_adapters(engine)
    return True


# --- checkpoints ---------------------------------------------------------------------------------


def _save_tensors(tensors: Mapping[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}, str(path),
              metadata={"format": "pt"})


def _save_hf_model(engine: TorchEngine, folder: Path, weights: Mapping[str, torch.Tensor]) -> None:
    """config + merged safetensors + tokenizer: a plain HF folder every backend can load."""
    lm = engine.causal_lm
    config = copy.deepcopy(lm.config)
    if hasattr(config, "quantization_config"):  # set for GGUF loads; the weights are float now
        del config.quantization_config
    config.save_pretrained(folder)
    if getattr(lm, "generation_config", None) is not None:
        lm.generation_config.save_pretrained(folder)
    engine.tokenizer.save_pretrained(folder)
    _save_tensors(weights, folder / "model.safetensors")



def save_checkpoint(engine: TorchEngine, path: str, state_path: str | None = None) -> bool:
    """Merged HF model at ``path`` (adapters in ``path/adapter/``); optimizer, RNG and the LoRA
    base in ``state_path`` (default ``path/torch_state``, the layout of a direct engine call).

    Under torchrun every rank calls this (FSDP shards must be gathered); only rank 0 writes.
    """
    if engine.fsdp is not None:  # every rank takes part in gathering the shards
        weights = engine.fsdp.state_dict(everywhere=False)
        optimizer_state = engine.fsdp.optimizer_state(engine.optimizer) if engine.optimizer else None
    if distributed.rank() != 0:
        return True  # one writer under torchrun: rank 0 holds (or gathered) the same state
    if engine.fsdp is None:
        weights = hf_state_dict(engine, merged=True)
        optimizer_state = engine.optimizer.state_dict() if engine.optimizer is not None else None
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    _save_hf_model(engine, folder, weights)
    state = Path(state_path) if state_path else folder / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    if engine.lora is not None:
        engine.model.save_pretrained(str(folder / ADAPTER_DIR), selected_adapters=[ADAPTER])
        _save_tensors(hf_state_dict(engine, merged=False), state / "base_model.safetensors")
    if optimizer_state is not None:
        torch.save(optimizer_state, state / "optimizer.pt")
    rng: dict[str, Any] = {"torch": torch.get_rng_state(), "sampler": engine.generator.get_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, state / "rng.pt")
    meta = {"format": FORMAT, "polyrl_torch": installed_version("polyrl-torch"), "torch": torch.__version__,
            "lora": engine.lora is not None, "dtype": engine.config.dtype,
            "optimizer": engine.optimizer is not None}
    (state / "engine.json").write_text(json.dumps(meta, indent=1) + "\n")
    return True


def _apply_config_hyperparameters(engine: TorchEngine) -> None:
    """The saved optimizer state carries the old run's lr/betas/...: the current config wins."""
    opt = engine.config.optimizer
    for group in engine.require_optimizer().param_groups:
        group.update(lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay,
                     fused=engine.fused_optimizer())  # the saving engine's kernel choice is not ours


def _refuse_missing_adapters(engine: TorchEngine, adapters: Mapping[str, torch.Tensor], file: Path) -> None:
    """``ConfigError`` when ``file`` lacks adapter tensors this model has. peft loads the rest
    (``strict=False``) and keeps the missing ones at their initial values (B = 0: those adapters
    silently trained from nothing again), so a resume would not continue the run it names."""
    from peft.utils import get_peft_model_state_dict

    expected = get_peft_model_state_dict(engine.model, adapter_name=ADAPTER, save_embedding_layers=False)
    fix = ("resume from a checkpoint whose adapter folder is intact (as polyrl wrote it), or with "
           "--resume-weights-only to start fresh adapters on its merged weights")
    missing = sorted(set(expected) - set(adapters))
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ConfigError(
            f"{file} lacks {len(missing)} of this model's {len(expected)} LoRA adapter tensors "
            f"({shown}); resuming would restart those adapters from their initial values",
            field="--resume", fix=fix)
    unexpected = sorted(set(adapters) - set(expected))
    if unexpected:  # set_peft_model_state_dict would load the rest first, then refuse these
        raise es.state_error(file, f"holds {len(unexpected)} tensor(s) not among this model's LoRA adapter "
                                   f"tensors ({', '.join(unexpected[:3])})", fix)
    for name in sorted(adapters):
        have, want = tuple(adapters[name].shape), tuple(expected[name].shape)
        if have != want:
            raise es.state_error(file, f"holds {name} of shape {list(have)}, but this model's is {list(want)}", fix)


def load_checkpoint(engine: TorchEngine, path: str, state_path: str | None = None,
                    weights_only: bool = False) -> bool:
    """Restore weights (base + adapters for LoRA), optimizer and RNG so training continues exactly.

    ``weights_only``: the merged weights alone (LoRA adapters reset); optimizer and RNG stay fresh.
    Otherwise a missing optimizer or RNG file is an error naming it.
    """
    from safetensors.torch import load_file

    folder = Path(path)
    model_file = folder / "model.safetensors"
    if not model_file.exists():
        raise FileNotFoundError(f"{folder} is not a torch-backend checkpoint (no model.safetensors)")
    state = state_files.state_folder(path, state_path)
    meta = state_files.check_checkpoint(path, state_path, weights_only)  # again: a direct call, or edited since
    if not weights_only and engine.optimizer is not None and not (state / "optimizer.pt").exists():
        raise missing_piece("optimizer state", state / "optimizer.pt")
    same_kind = bool(meta.get("lora")) == (engine.lora is not None)
    # the pickled states are read and checked before any weight is replaced
    optimizer_state = (state_files.load_optimizer(state / "optimizer.pt", engine.optimizer,
                                                  "cpu" if engine.fsdp is not None else engine.device,
                                                  sharded=engine.fsdp is not None)
                       if not weights_only and engine.optimizer is not None and same_kind else None)
    rng = None if weights_only else state_files.load_rng(state / "rng.pt", engine.generator)
    exact_lora = (not weights_only and engine.lora is not None and meta.get("lora")
                  and (folder / ADAPTER_DIR).is_dir())
    if exact_lora:
        from peft.utils import set_peft_model_state_dict

        adapter_file = folder / ADAPTER_DIR / "adapter_model.safetensors"
        base_file = state / "base_model.safetensors"
        with es.loading(adapter_file, "LoRA adapter tensors"):
            adapters = load_file(str(adapter_file))
        _refuse_missing_adapters(engine, adapters, adapter_file)  # before anything is changed
        with es.loading(base_file, "LoRA base weights"):
            base = load_file(str(base_file))
        with es.fitting(base_file, es.FIX):
            _assign(engine, base)
        result = set_peft_model_state_dict(engine.model, adapters, adapter_name=ADAPTER)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"adapter keys not in this model: {result.unexpected_keys[:3]}")
    else:
        with es.loading(model_file, "model weights", es.WEIGHTS_FIX):
            weights = load_file(str(model_file))
        with es.fitting(model_file):
            import_weights(engine, weights)  # type: ignore[arg-type]  # merged model; LoRA adapters reset
        del weights  # not held while the optimizer state is loaded
    if rng is None:
        return True
    if optimizer_state is not None:
        if engine.fsdp is not None:  # full state by index -> this rank's shards
            engine.fsdp.load_optimizer_state(engine.require_optimizer(), optimizer_state)
        else:
            with es.loading(state / "optimizer.pt", "this optimizer's state"):
                engine.require_optimizer().load_state_dict(optimizer_state)
        _apply_config_hyperparameters(engine)
    torch.set_rng_state(rng["torch"])
    engine.generator.set_state(rng["sampler"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return True
