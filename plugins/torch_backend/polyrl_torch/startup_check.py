"""The train engine's LoRA targets, checked at startup on the model built without weights.

Why: ``lora.target_modules`` (or a TRL script's ``peft_config.target_modules``) naming the output
head, the embeddings or no module of the model was refused only as the engine added the adapter,
after the model's weights loaded (and, through ``polyrl.trl``, after the rollout setup). The same
rule (``lora_targets.peft_targets``) runs here on the model transformers builds on the meta
device from its config.json: every module, no tensor allocated, in milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_model(config: Any) -> None:
    """``ConfigError`` on ``lora.target_modules`` for targets the train engine would refuse; silent
    when there is no LoRA, no config.json (a GGUF file), remote code, or a model transformers
    cannot build from its config here (the load then names what is wrong). First, the model path
    as the load reads it (``model_location``): a folder without config.json, a file that is no
    ``.gguf``, a FIFO or a device passed ``polyrl launch --dry-run``, and every rank refused it."""
    from polyrl_torch.model_location import model_location
    from polyrl_torch.options import TorchOptions

    model_location(str(config.model), TorchOptions.read(config.options).gguf_file)
    if config.lora is None or config.role != "train" or config.trust_remote_code:
        return
    folder = Path(str(config.model))
    if not (folder / "config.json").is_file():
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        hf_config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)  # unasked: never its code
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception:  # noqa: BLE001 - an unknown model type, a damaged config: the load's error says it
        return
    from polyrl_torch.lora_targets import peft_targets

    peft_targets(model, config.lora)
