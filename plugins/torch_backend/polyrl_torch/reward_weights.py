"""A reward model's weights checked against the model transformers built for them.

Why: ``AutoModelForSequenceClassification`` loads a folder whatever its weights hold. A tensor
the weights lack (a layer's ``q_proj``; the classification head itself when the folder is a plain
causal LM) is randomly initialised with only a warning table on stderr, so every reward is noise;
a tensor of another shape is a RuntimeError traceback. Both are one ``ConfigError`` here, naming
the tensors. Tensors the model has no place for (a config naming fewer layers than the weights
hold, a causal LM's ``lm_head``) are dropped and change no score: they pass. The benign cases
(tied weights, non-persistent buffers, keys a model class declares ignorable) never reach
transformers' ``output_loading_info``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from polyrl.errors import ConfigError
from polyrl_torch.loading_info import CONFIG_FIX, refuse_mismatched_shapes, shown

NOT_A_REWARD_MODEL_FIX = ("point options.path at a reward model (a *ForSequenceClassification folder: train or "
                          "convert one from this model), or score with an LLM judge (name = \"llm_judge\")")


def head_names(missing: Iterable[str], base_prefix: str) -> list[str]:
    """The missing tensors outside the base model (``model.``, ``bert.``...): the task head's."""
    if not base_prefix:
        return []
    return sorted(name for name in missing if not name.startswith(base_prefix + "."))


def _architectures(model: Any) -> str:
    names = getattr(getattr(model, "config", None), "architectures", None) or []
    return f" (config.json's architectures: {', '.join(map(str, names))})" if names else ""


def refuse_incomplete_weights(folder: str, model: Any, info: Mapping[str, Any], field: str = "options.path") -> None:
    """``ConfigError`` on ``field`` when the weights in ``folder`` lack tensors ``model`` needs
    (its classification head first) or hold one in another shape (``info``: transformers'
    ``output_loading_info``, loaded with ``ignore_mismatched_sizes=True`` so the shapes are named)."""
    missing = {str(name) for name in info.get("missing_keys") or ()}
    head = head_names(missing, str(getattr(model, "base_model_prefix", "") or ""))
    if head:
        raise ConfigError(
            f"{folder!r} is not a sequence-classification reward model{_architectures(model)}: its weights "
            f"have no classification head ({shown(head)}), which transformers would fill with random "
            "weights", field=field, fix=NOT_A_REWARD_MODEL_FIX)
    if missing:
        raise ConfigError(
            f"the weights in {folder!r} lack {len(missing)} tensor(s) config.json's model needs, which "
            f"transformers would fill with random weights: {shown(missing)}", field=field, fix=CONFIG_FIX)
    refuse_mismatched_shapes(folder, info, field)
