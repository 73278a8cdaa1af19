"""``polyrl.trl.GRPOTrainer`` with ``peft_config``: the model and the saved folder TRL gives.

Why: TRL wraps the model with peft's ``get_peft_model``, so ``trainer.model`` is a ``PeftModel``
(scripts call ``merge_and_unload()``, ``print_trainable_parameters()``) and ``save_model(dir)``
writes the adapter alone (``adapter_config.json``, ``adapter_model.safetensors``) with the
tokenizer, which ``AutoPeftModelForCausalLM.from_pretrained(dir)`` and
``PeftModel.from_pretrained(base, dir)`` load. polyrl's run writes the merged model to
``output_dir/model`` and the trained adapter (peft's files, torch backend) to
``output_dir/model/adapter``; these helpers build TRL's objects and files from that folder.
peft is imported only here, when a script passed a ``peft_config``.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError

#: the files of a peft adapter folder (``PeftModel.save_pretrained``; README.md is peft's model card)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")


def adapter_folder(trained: Path, asked: str) -> Path:
    """The peft adapter polyrl saved beside the merged model ``trained``; ``ConfigError`` naming
    ``asked`` when the backend saved another format (MLX saves mlx-lm's adapter)."""
    folder = trained / "adapter"
    if not (folder / "adapter_config.json").is_file() or not (folder / "adapter_model.safetensors").is_file():
        raise ConfigError(f"{folder} holds no peft adapter (adapter_config.json + adapter_model.safetensors): this "
                          "backend saves its adapter in another format, so there is no PeftModel to give",
                          field=asked, fix=f"load the merged model from {trained} with "
                                           "AutoModelForCausalLM.from_pretrained, or train with backend='torch'")
    return folder


def untrained(base: Any, peft_config: Any, asked: str) -> Any:
    """``base`` with fresh adapters of ``peft_config`` injected (TRL's ``get_peft_model`` at
    construction; B = 0, so it computes what ``base`` does)."""
    try:
        from peft import PeftConfig, get_peft_model
    except ImportError:  # polyrl's own LoRA config, peft absent: nothing to build a PeftModel with
        PeftConfig, get_peft_model = None, None
    if PeftConfig is None or not isinstance(peft_config, PeftConfig):
        raise ConfigError(f"trainer.{asked} before train() needs a peft.LoraConfig as peft_config (TRL's "
                          f"untrained PeftModel); this one is a {type(peft_config).__name__}", field=asked,
                          fix="call trainer.train() first, or pass peft_config=peft.LoraConfig(...)")
    return get_peft_model(base, copy.deepcopy(peft_config))  # the script's config stays as written


def trained(base: Any, adapter: Path) -> Any:
    """``base`` with polyrl's trained adapter from ``adapter`` injected, trainable as TRL's is
    (``print_trainable_parameters`` counts the adapters)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(adapter), is_trainable=True)


def copy_adapter(adapter: Path, target: Path) -> None:
    """Copy the adapter files of ``adapter`` to ``target`` (what ``PeftModel.save_pretrained``
    writes), its base model named so that a fresh process loads it."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        if (adapter / name).is_file() and (adapter / name).resolve() != (target / name).resolve():
            shutil.copyfile(adapter / name, target / name)
    absolute_base(target)


def absolute_base(target: Path) -> None:
    """Make ``adapter_config.json``'s ``base_model_name_or_path`` absolute when it is a local
    folder: peft records the folder as given (a relative path, or ``output_dir/initial_model`` for
    a model object), which ``AutoPeftModelForCausalLM`` run elsewhere would not find. The torch
    backend's own adapters (``output_dir/model/adapter``, checkpoints) are recorded absolute when
    the model loads; this covers the untrained one ``save_model`` writes before ``train()``, and an
    adapter another backend wrote. A Hub id is left as written."""
    file = target / "adapter_config.json"
    config = json.loads(file.read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if isinstance(base, str) and base and Path(base).is_dir():
        config["base_model_name_or_path"] = str(Path(base).resolve())
        file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def recorded_base(adapter: Path) -> str:
    """The base model folder polyrl trained the adapter on (``adapter_config.json``'s record)."""
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    return str(config.get("base_model_name_or_path") or "")


def load_trained(peft_model: Any, adapter: Path) -> bool:
    """Load the trained adapter of ``adapter`` into ``peft_model`` (the untrained one a script
    took from ``trainer.model`` before ``train()``, so that object is trained, as TRL's is).
    False, with ``peft_model`` to be discarded, when its adapters are not the ones polyrl trained
    (other layers or shapes)."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    try:
        result = set_peft_model_state_dict(peft_model, load_file(str(adapter / "adapter_model.safetensors")),
                                           adapter_name=peft_model.active_adapter)  # a PeftModel given: its name
    except RuntimeError:  # a shape differs
        return False
    missing = [key for key in result.missing_keys if "lora_" in key]
    return not missing and not result.unexpected_keys
