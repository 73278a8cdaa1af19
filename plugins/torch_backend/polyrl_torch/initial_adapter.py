"""``backends.options.initial_adapter``: the train engine's LoRA adapters start from a saved peft adapter.

Why: a TRL script may pass a ``PeftModel`` (a fresh ``get_peft_model`` with its own random A, or
an adapter loaded to train further); TRL trains that adapter from its current weights, so polyrl
must start from exactly those A and B, not its own init. The folder is what
``PeftModel.save_pretrained`` writes; its rank, alpha and adapted layers must be ``[lora]``'s (the
layers polyrl built), else it is refused rather than half loaded. A checkpoint resumed later
replaces these weights as it replaces a fresh init's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError

_FIELD = "backends.options.initial_adapter"


def load_initial_adapter(peft_model: Any, folder: str, lora: Any, adapter_name: str) -> None:
    """Put the adapter weights of ``folder`` into ``peft_model``'s adapter ``adapter_name``."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(folder)
    weights, config_file = path / "adapter_model.safetensors", path / "adapter_config.json"
    if not weights.is_file() or not config_file.is_file():
        raise ConfigError(f"{folder} holds no peft adapter (adapter_config.json + adapter_model.safetensors)",
                          field=_FIELD, fix="name a folder PeftModel.save_pretrained wrote, or remove the option")
    saved = json.loads(config_file.read_text(encoding="utf-8"))
    if saved.get("r") != lora.rank or float(saved.get("lora_alpha", -1)) != float(lora.alpha):
        raise ConfigError(f"the adapter in {folder} has r={saved.get('r')}, lora_alpha={saved.get('lora_alpha')}; "
                          f"[lora] has rank={lora.rank}, alpha={lora.alpha}", field=_FIELD,
                          fix="set [lora] rank and alpha to the adapter's r and lora_alpha")
    try:
        result = set_peft_model_state_dict(peft_model, load_file(str(weights)), adapter_name=adapter_name)
    except RuntimeError as exc:  # a shape differs
        raise ConfigError(f"the adapter in {folder} does not fit the LoRA layers built: {str(exc)[:200]}",
                          field=_FIELD, fix="train with the adapter's own target_modules and r") from None
    missing = [key for key in result.missing_keys if "lora_" in key]
    unexpected = list(result.unexpected_keys)
    if missing or unexpected:
        raise ConfigError(f"the adapter in {folder} adapts other layers than [lora] does (not in it: "
                          f"{missing[:2]}; not built: {unexpected[:2]})", field=_FIELD,
                          fix="set [lora] target_modules to the adapter's target_modules")
