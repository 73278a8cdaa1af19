"""The train engine's LoRA targets, checked at startup on the model built without weights.

Why: ``lora.target_modules`` naming the output head, the embeddings or no layer of the model was
refused only as ``MLXEngine`` added the adapter, after mlx-lm read every weight. mlx-lm's model
classes build from config.json alone (with the same config keys and classes the engine's load
uses): MLX arrays are lazy, so the parameters are never computed and no weight file is read.
The engine's own rule (``lora_targets.lora_keys``) then runs on that model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_without_weights(model_dir: Path) -> tuple[Any, dict[str, Any]]:
    """(model, config) as ``engine.load_mlx_lm`` builds them, before it loads any weight: the
    parameters stay unevaluated, so this costs no memory the model's size would."""
    from mlx_lm.utils import _get_classes, load_config

    from polyrl_mlx.engine import config_overrides
    from polyrl_mlx.expert_names import model_classes

    config = load_config(model_dir)
    if config.get("model_file") is not None:  # mlx-lm builds a custom architecture only with trust_remote_code
        raise ValueError(f"{model_dir} names its own model_file")
    config.update(config_overrides(model_dir))
    model_class, args_class = model_classes(_get_classes)(config)
    args: Any = args_class
    return model_class(args.from_dict(config)), config


def check_model(config: Any) -> None:
    """``ConfigError`` on ``lora.target_modules`` for targets the train engine would refuse; silent
    when there is no LoRA, no config.json, remote code (``model_file``), or a config mlx-lm cannot
    build a model from (the engine's load then names what is wrong)."""
    if config.lora is None or config.role != "train" or config.trust_remote_code:
        return
    folder = Path(str(config.model)).expanduser()
    if not (folder / "config.json").is_file():
        return
    try:
        model, hf_config = build_without_weights(folder)
    except Exception:  # noqa: BLE001 - an unknown model type, a damaged config: the load's error says it
        return
    from polyrl_mlx.lora_targets import lora_keys

    lora_keys(model, config.lora, str(hf_config.get("model_type", "")))
