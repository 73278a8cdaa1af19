"""``polyrl.trl.GRPOTrainer(model=PeftModel)``: the base, the LoRA settings and the adapter TRL trains.

Why: TRL trains a ``PeftModel`` given as ``model`` (``get_peft_model(base, LoraConfig(...))``, or
``PeftModel.from_pretrained(base, dir, is_trainable=True)`` to continue an adapter) from its
current adapter weights. polyrl's backends load a folder, so the base weights are saved without
the adapter layers (unmerged), the adapter as peft saves it (the torch backend starts training
from it: ``backends.options.initial_adapter``), and where a KL term needs the reference, the
adapter merged into a copy of the base (TRL's reference is a frozen copy of the adapter as given).
The script's object is only read. peft is imported only here, when a script passed a ``PeftModel``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a peft ``PeftModel`` (without importing peft where it was not)."""
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload") and hasattr(model, "get_base_model")


def adapter_config(model: Any, peft_config: Any) -> tuple[str, Any]:
    """(the adapter's name, a copy of its ``peft.LoraConfig``): the one LoRA adapter of ``model``,
    else one ``ConfigError`` naming what and the fix."""
    if peft_config is not None:
        raise ConfigError("model is a PeftModel and peft_config is given too (TRL refuses both: it would train "
                          "the model's adapter, not a new one)", field="peft_config",
                          fix="remove peft_config to train the PeftModel's adapter, or pass the base model "
                              "(model.merge_and_unload()) with the new peft_config")
    adapters = dict(model.peft_config)
    if len(adapters) != 1:
        raise ConfigError(f"model is a PeftModel with {len(adapters)} adapters ({', '.join(map(repr, adapters))}); "
                          "polyrl trains one", field="model",
                          fix="pass a PeftModel holding only the adapter to train (model.delete_adapter(name) "
                              "for the others)")
    name, config = next(iter(adapters.items()))
    from peft import LoraConfig

    if not isinstance(config, LoraConfig):
        kind = getattr(getattr(config, "peft_type", None), "value", None) or type(config).__name__
        raise ConfigError(f"model is a PeftModel with a {kind} adapter; polyrl trains LoRA adapters only",
                          field="model", fix="pass a PeftModel with a peft.LoraConfig adapter, or the base model "
                                             "with peft_config=peft.LoraConfig(...)")
    config = copy.deepcopy(config)
    config.inference_mode = False
    # how the adapter was initialised is past: its weights (and a base PiSSA/OLoRA changed) are what is saved
    config.init_lora_weights = True
    from polyrl.types import LoraConfig as PolyrlLora

    try:
        PolyrlLora.from_peft(config)  # what polyrl cannot carry (modules_to_save, use_dora...), named as the model's
    except ConfigError as exc:
        raise ConfigError(f"model is a PeftModel whose adapter {name!r} polyrl cannot train: {exc.message}",
                          field="model", fix=(exc.fix or "") + "; or pass the base model with peft_config") from None
    check_adapted_layers(model, name, config)
    return name, config


_LAYERS_FIX = ("pass a PeftModel whose target_modules name only linear layers of the decoder blocks "
               "(e.g. [\"q_proj\", \"v_proj\"] or \"all-linear\"), or the base model with such a peft_config")


def check_adapted_layers(model: Any, name: str, config: Any) -> None:
    """Refuse now, before anything is saved or loaded, an adapter the train engine cannot build:
    polyrl adapts the linear layers of the decoder blocks (the outermost ``ModuleList``), and
    every listed ``target_modules`` name must reach one. peft adapts the output head or the
    embeddings when named and skips a name that matches nothing; the engine refused both only
    once it loaded, after the saves, and named ``peft_config``, which the script did not pass."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    lists = [(path.count("."), path) for path, module in base.named_modules()
             if isinstance(module, torch.nn.ModuleList) and len(module)]
    blocks = min(lists)[1] if lists else None
    adapted = [path for path, module in base.named_modules() if isinstance(module, LoraLayer)
               and (name in module.lora_A or name in getattr(module, "lora_embedding_A", {}))]
    for path in adapted:
        layer = base.get_submodule(path).get_base_layer()
        if blocks is None or not path.startswith(blocks + ".") or type(layer).__name__ not in ("Linear", "Conv1D"):
            where = "outside the decoder blocks" if blocks is None or not path.startswith(blocks + ".") \
                else f"a {type(layer).__name__}, not a linear layer"
            raise ConfigError(f"model is a PeftModel whose adapter {name!r} adapts {path} ({where}); polyrl adapts "
                              "the linear layers of the decoder blocks only", field="model", fix=_LAYERS_FIX)
    targets = config.target_modules
    if isinstance(targets, str):  # "all-linear": peft's set is the blocks' linear layers, checked above
        return
    for target in sorted(targets or ()):
        if not any(path == target or path.endswith("." + target) for path in adapted):
            raise ConfigError(f"model is a PeftModel whose adapter {name!r} lists target_modules {target!r}, which "
                              "names no layer of the model (peft skipped it; polyrl refuses a name that adapts "
                              "nothing)", field="model", fix=f"remove {target!r} from the adapter's target_modules "
                                                              "(peft_config[name].target_modules), or " + _LAYERS_FIX)


def base_state(model: Any) -> dict[str, Any]:
    """The base model's weights as ``save_pretrained`` names them: the adapter layers' own
    tensors left out, each wrapped layer's ``base_layer`` under the layer's name (not merged)."""
    state = model.get_base_model().state_dict()
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if any(part.startswith("lora_") for part in parts):
            continue
        out[".".join(part for part in parts if part != "base_layer")] = value
    return out


def save_base(model: Any, folder: Path) -> None:
    """The base weights of ``model`` (no adapter) saved as a transformers folder."""
    model.get_base_model().save_pretrained(folder, state_dict=base_state(model), safe_serialization=True)


def save_adapter(model: Any, name: str, folder: Path) -> Path:
    """The adapter ``name`` as ``PeftModel.save_pretrained`` writes it; its folder (peft puts an
    adapter not named "default" in a subfolder of that name)."""
    model.save_pretrained(str(folder), selected_adapters=[name])
    return folder if name == "default" else folder / name


def save_merged(model: Any, name: str, folder: Path) -> None:
    """The base weights with the adapter ``name`` added (``W + scale * B @ A`` per layer), computed
    from the tensors, the script's model left unmerged: TRL's KL reference for a ``PeftModel``."""
    import torch
    from peft.tuners.lora import LoraLayer

    state = base_state(model)
    with torch.no_grad():
        for prefix, module in model.get_base_model().named_modules():
            if isinstance(module, LoraLayer) and name in module.lora_A:
                key = f"{prefix}.weight"
                state[key] = state[key] + module.get_delta_weight(name).to(state[key].dtype)
    model.get_base_model().save_pretrained(folder, state_dict=state, safe_serialization=True)
