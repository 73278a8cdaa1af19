"""Weights across engines and backends (HF-named numpy arrays) and checkpoints on disk.

Names: mlx-lm builds Llama-family models with the module paths of transformers, so a parameter's
MLX path is its HF name (``model.layers.0.self_attn.q_proj.weight``). Imports drop what HF
exports carry and a loaded MLX model does not keep (rotary ``inv_freq``, a tied
``lm_head.weight``) themselves: mlx-lm's ``sanitize`` is for checkpoints, not loaded models.
Exports hold one entry per tensor: a tied ``lm_head`` is not repeated, as in HF safetensors files.
Mixture-of-experts layers are the exception to "MLX path = HF name": their experts cross in
transformers' fused layout (``polyrl_mlx.expert_names``), which the torch backend exports, imports
and saves; imports also take HF files' one-tensor-per-expert names.

* Quantized layers (``QuantizedLinear``/``QuantizedEmbedding``, a MoE's ``QuantizedSwitchLinear``)
  export dequantized float weights; imported float weights are quantized with the layer's own
  group size, bits and mode (and nvfp4 experts' per-expert global scales: ``polyrl_mlx.packed``),
  so a 4-bit MLX generator can take a torch trainer's weights.
* LoRA: ``export_weights`` merges ``W + scale * (A B)^T`` on the fly (the engine is unchanged),
  per expert for a MoE's adapted experts (``LoRASwitchLinear``: ``polyrl_mlx.lora_layers``).
  ``import_weights`` into a LoRA engine writes the full weights into the *base*, re-draws A, zeroes
  B and resets the optimizer, so the engine then computes exactly the imported weights (as the
  torch backend does).
* A checkpoint is a plain HF folder (config, tokenizer, merged ``model.safetensors``) every backend
  loads, plus ``mlx_state/``: optimizer state (``optimizer.safetensors``, the flattened MLX
  optimizer tree), the sampler key, LoRA adapters in mlx-lm's format (``adapters.safetensors`` +
  ``adapter_config.json``, loadable with ``mlx_lm.load(..., adapter_path=...)``) and, for exact
  resumption of LoRA runs, the unmerged base weights (a merge is not invertible).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from polyrl.backend_kit import engine_state as es
from polyrl.backend_kit.checkpoints import missing_piece
from polyrl.backend_kit.versions import installed_version
from polyrl.types import NamedWeights

from polyrl_mlx._mx import mx
from polyrl_mlx.engine import MLXEngine
from polyrl_mlx.expert_names import to_hf, to_mlx
from polyrl_mlx.lora_layers import base_weight, fresh_adapters, lora_modules, merged_weight
from polyrl_mlx.packed import PACKING_LEAVES, dequantized, is_packed, packed_like
from polyrl_mlx import state_files
from polyrl_mlx.resume_check import refuse_mismatched_tensors

STATE_DIR = "mlx_state"
ADAPTER_DIR = "adapter"
FORMAT = 1
QUANT_KEYS = ("quantization", "quantization_config")


# --- names ---------------------------------------------------------------------------------------


def _model_type(model: Any) -> str:
    return str(getattr(getattr(model, "args", None), "model_type", "") or "")


def hf_tensors(model: Any, merged: bool = True) -> dict[str, mx.array]:
    """HF-named float arrays of ``model``: quantized layers dequantized, LoRA merged (or, with
    ``merged=False``, the base weights alone), experts in transformers' fused layout."""
    from mlx.utils import tree_flatten

    flat = dict(tree_flatten(model.parameters()))
    modules = dict(model.named_modules())
    lora = lora_modules(model)
    out: dict[str, mx.array] = {}
    for path, module in lora.items():
        out[f"{path}.weight"] = merged_weight(module) if merged else base_weight(module)
        if "bias" in module.linear:
            out[f"{path}.bias"] = module.linear.bias
        for key in [k for k in flat if k.startswith(path + ".")]:
            del flat[key]
    for path, module in modules.items():
        if not is_packed(module) or any(path.startswith(p + ".") for p in lora):
            continue
        out[f"{path}.weight"] = dequantized(module)
        for leaf in ("weight", *PACKING_LEAVES):
            flat.pop(f"{path}.{leaf}", None)
    out.update(flat)
    return dict(sorted(to_hf(_model_type(model), out).items()))


def export_weights(engine: MLXEngine) -> NamedWeights:
    """float32 numpy copies of the (merged, dequantized) weights under HF names."""
    with mx.stream(engine.device):
        tensors = hf_tensors(engine.model)
        tensors = {k: v.astype(mx.float32) for k, v in tensors.items()}
        mx.eval(tensors)
    return {k: np.array(v, copy=True) for k, v in tensors.items()}


def _targets(engine: MLXEngine) -> dict[str, tuple[str, Any]]:
    """HF name -> (kind, module or parameter path) for every tensor an import must provide."""
    from mlx.utils import tree_flatten

    model = engine.model
    modules = dict(model.named_modules())
    lora = set(lora_modules(model))
    out: dict[str, tuple[str, Any]] = {}
    for name, _ in tree_flatten(model.parameters()):
        path, leaf = name.rsplit(".", 1)
        if leaf in ("lora_a", "lora_b"):
            continue
        parent = path[: -len(".linear")]
        hf_path = parent if path.endswith(".linear") and parent in lora else path
        module = modules.get(path)
        if module is not None and is_packed(module):
            if leaf in PACKING_LEAVES:
                continue
            if leaf == "weight":
                out[f"{hf_path}.weight"] = ("quantized", path)
                continue
        out[f"{hf_path}.{leaf}"] = ("plain", name)
    return out


def _drop_unkept(weights: Mapping[str, Any], targets: Mapping[str, Any]) -> dict[str, Any]:
    """Drop what HF exports carry but a loaded MLX model does not keep: rotary ``inv_freq``
    buffers, and ``lm_head.weight`` when the model ties its head to the embedding.

    Why not ``model.sanitize``: it is written for a checkpoint about to be loaded and may change
    the model itself (Gemma 3's pops its ``lm_head`` module when the weights lack one, which
    raises ``KeyError`` on the second sync), so it must not run on an already-loaded model.
    """
    out = {k: v for k, v in weights.items() if not k.endswith(".rotary_emb.inv_freq")}
    if "lm_head.weight" in out and "lm_head.weight" not in targets:
        out.pop("lm_head.weight")  # tied: the embedding (also imported) is the head
    return out


def assign(engine: MLXEngine, weights: Mapping[str, Any]) -> None:
    """Write HF-named arrays into the model (base weights), checking names and shapes first.

    Expert tensors come in transformers' fused or per-expert names (``expert_names``)."""
    from mlx.utils import tree_flatten, tree_unflatten

    model = engine.model
    targets = _targets(engine)
    incoming = to_mlx(engine.model_type, {k: mx.array(np.asarray(v))
                                          for k, v in _drop_unkept(weights, targets).items()})
    unknown = sorted(set(incoming) - set(targets))
    if unknown:
        raise ValueError(f"{len(unknown)} weight names unknown to this model, e.g. {unknown[:3]}")
    missing = sorted(set(targets) - set(incoming))
    if missing:
        raise ValueError(f"{len(missing)} weights missing from the import, e.g. {missing[:3]}")
    current = dict(tree_flatten(model.parameters()))
    modules = dict(model.named_modules())
    updates: list[tuple[str, mx.array]] = []
    for name, value in incoming.items():
        kind, where = targets[name]
        if kind == "plain":
            old = current[where]
            if tuple(value.shape) != tuple(old.shape):
                raise ValueError(f"{name}: shape {tuple(value.shape)} != model's {tuple(old.shape)}")
            updates.append((where, value.astype(old.dtype)))
        else:
            module = modules[where]
            try:
                packed = packed_like(module, value)
            except ValueError as exc:  # a shape the layer's group size or experts do not divide
                raise ValueError(f"{name}: {exc}") from None
            if tuple(packed["weight"].shape) != tuple(module.weight.shape):
                raise ValueError(f"{name}: shape {tuple(value.shape)} does not fit the quantized layer")
            updates.extend((f"{where}.{leaf}", array) for leaf, array in packed.items())
    model.update(tree_unflatten(updates))
    mx.eval(model.parameters())


def reset_adapters(engine: MLXEngine) -> None:
    """A fresh LoRA init (A uniform as mlx-lm draws it, B = 0) and a fresh optimizer."""
    for module in engine.lora_modules().values():
        fresh_adapters(module)
    engine.reset_optimizer()
    mx.eval(engine.model.parameters())


def import_weights(engine: MLXEngine, weights: NamedWeights) -> bool:
    """Replace the weights; for LoRA engines see the module docstring (base + adapter reset)."""
    with mx.stream(engine.device):
        assign(engine, weights)
        if engine.lora is not None:
            engine.base_replaced = True
            reset_adapters(engine)
    return True


# --- checkpoints ---------------------------------------------------------------------------------



def save_hf_folder(folder: Path, tensors: Mapping[str, mx.array], config: Mapping[str, Any],
                   tokenizer: Any, source: Path | None = None) -> None:
    """A plain HF model folder: ``config.json`` (no quantization keys), tokenizer files,
    ``generation_config.json`` (copied from ``source``) and ``model.safetensors``."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in config.items() if k not in QUANT_KEYS}
    dtypes = {str(v.dtype).replace("mlx.core.", "") for v in tensors.values()
              if mx.issubdtype(v.dtype, mx.floating)}
    if len(dtypes) == 1:
        cfg["torch_dtype"] = dtypes.pop()
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(str(folder))
    if source is not None and (source / "generation_config.json").exists():
        shutil.copy(source / "generation_config.json", folder / "generation_config.json")
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tensors), metadata={"format": "pt"})


def _mlx_adapter_config(engine: MLXEngine) -> dict[str, Any]:
    lora = engine.lora
    assert lora is not None  # only a LoRA engine saves adapters
    return {"fine_tune_type": "lora", "num_layers": len(engine.model.layers),
            "lora_parameters": {"rank": lora.rank, "scale": lora.alpha / lora.rank,
                                "dropout": lora.dropout, "keys": engine.lora_keys}}


def save_checkpoint(engine: MLXEngine, path: str, state_path: str | None = None) -> bool:
    """Merged HF model at ``path`` (LoRA adapters, mlx-lm format, in ``path/adapter/``);
    optimizer, key and the LoRA base in ``state_path`` (default ``path/mlx_state``)."""
    from mlx.utils import tree_flatten

    folder = Path(path)
    state = Path(state_path) if state_path else folder / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    with mx.stream(engine.device):
        save_hf_folder(folder, hf_tensors(engine.model), engine.hf_config, engine.tokenizer,
                       source=engine.model_dir)
        if engine.lora is not None:
            adapter = folder / ADAPTER_DIR
            adapter.mkdir(exist_ok=True)
            adapters = {k: v for k, v in tree_flatten(engine.model.parameters())
                        if k.rsplit(".", 1)[-1] in ("lora_a", "lora_b")}
            mx.save_safetensors(str(adapter / "adapters.safetensors"), adapters)
            adapter_config = json.dumps(_mlx_adapter_config(engine), indent=2)
            (adapter / "adapter_config.json").write_text(adapter_config + "\n")
            if engine.base_replaced:
                base = {k: v for k, v in tree_flatten(engine.model.parameters())
                        if k.rsplit(".", 1)[-1] not in ("lora_a", "lora_b")}
                mx.save_safetensors(str(state / "base_model.safetensors"), base)
        if engine.optimizer is not None:
            opt_state = dict(tree_flatten(engine.optimizer.state))
            mx.save_safetensors(str(state / "optimizer.safetensors"), opt_state)
        mx.save_safetensors(str(state / "rng.safetensors"), {"sampler_key": engine.rng_key})
    meta = {"format": FORMAT, "polyrl_mlx": installed_version("polyrl-mlx"), "mlx": mx.__version__,
            "lora": engine.lora is not None, "dtype": engine.config.dtype,
            "base_replaced": engine.base_replaced, "optimizer": engine.optimizer is not None,
            "quantization": engine.quantization}
    (state / "engine.json").write_text(json.dumps(meta, indent=1) + "\n")
    return True


def load_checkpoint(engine: MLXEngine, path: str, state_path: str | None = None,
                    weights_only: bool = False) -> bool:
    """Restore weights (base + adapters for LoRA), optimizer and key so training continues exactly.

    A checkpoint of another backend (a plain HF folder) loads with ``weights_only``: its merged
    weights are imported (LoRA adapters reset) and the optimizer starts fresh. Otherwise a
    missing optimizer or RNG file is an error naming it. The learning rate comes from this
    engine's config (MLX keeps it inside the optimizer state).
    """
    from mlx.utils import tree_flatten, tree_unflatten

    folder = Path(path)
    if not (folder / "model.safetensors").exists():
        raise FileNotFoundError(f"{folder} is not a checkpoint (no model.safetensors)")
    state = state_files.state_folder(path, state_path)
    meta = state_files.check_checkpoint(path, state_path, weights_only)  # again: a direct call, or edited since
    opt_file = state / "optimizer.safetensors"
    if not weights_only and engine.optimizer is not None and not opt_file.exists():
        raise missing_piece("optimizer state", opt_file)
    adapter = folder / ADAPTER_DIR
    if not (adapter / "adapters.safetensors").exists():
        adapter = state  # written before adapters moved beside the model
    with mx.stream(engine.device):
        saved_optimizer = None
        same_kind = bool(meta.get("lora")) == (engine.lora is not None)
        if not weights_only and engine.optimizer is not None and same_kind:
            # read and checked against the parameters' shapes (which importing keeps) before any
            # weight is replaced: a refused file leaves the engine as it was
            with es.loading(opt_file, "the optimizer state polyrl saved"):
                saved_optimizer = mx.load(str(opt_file))
            state_files.check_optimizer(opt_file, saved_optimizer, dict(tree_flatten(engine.model.parameters())))
        exact_lora = (not weights_only and engine.lora is not None and meta.get("lora")
                      and (adapter / "adapters.safetensors").exists())
        if exact_lora:
            # each file holds part of the model (strict=False): both checked before either loads
            params = dict(tree_flatten(engine.model.parameters()))
            lora = {k: v for k, v in params.items() if k.rsplit(".", 1)[-1] in ("lora_a", "lora_b")}
            adapters = mx.load(str(adapter / "adapters.safetensors"))
            refuse_mismatched_tensors(adapter / "adapters.safetensors", adapters, lora, "LoRA adapter tensors")
            base_file = state / "base_model.safetensors"
            base = mx.load(str(base_file)) if base_file.exists() else None
            if base is not None:
                refuse_mismatched_tensors(base_file, base, {k: v for k, v in params.items() if k not in lora},
                                          "LoRA base weight tensors")
                engine.model.load_weights(list(base.items()), strict=False)
                engine.base_replaced = True
            engine.model.load_weights(list(adapters.items()), strict=False)
            mx.eval(engine.model.parameters())
        else:
            model_file = folder / "model.safetensors"
            with es.loading(model_file, "model weights", es.WEIGHTS_FIX):
                weights = mx_to_numpy(mx.load(str(model_file)))
            with es.fitting(model_file):
                import_weights(engine, weights)
        if weights_only:
            return True
        if engine.optimizer is not None and saved_optimizer is not None:  # checked above
            engine.optimizer.state = tree_unflatten(list(saved_optimizer.items()))
            engine.optimizer.learning_rate = engine.config.optimizer.lr
            mx.eval(engine.optimizer.state)
        with es.loading(state / "rng.safetensors", "the sampler key polyrl saved"):
            engine.rng_key = mx.load(str(state / "rng.safetensors"))["sampler_key"]
    return True


def mx_to_numpy(arrays: Mapping[str, mx.array]) -> dict[str, np.ndarray]:
    out = {}
    for k, v in arrays.items():
        if v.dtype == mx.bfloat16:
            v = v.astype(mx.float32)
        out[k] = np.array(v)
    return out


__all__ = ["assign", "export_weights", "hf_tensors", "import_weights", "load_checkpoint",
           "mx_to_numpy", "save_checkpoint", "save_hf_folder"]
