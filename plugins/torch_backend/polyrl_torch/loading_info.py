"""transformers' ``output_loading_info`` in polyrl's words, for the policy and the reward model.

Why: loaded with ``ignore_mismatched_sizes=True``, transformers reports a tensor of another shape
as ``(name, shape in the weights, shape in the model)`` instead of raising a RuntimeError that
names neither tensor nor shape; both loaders (``engine._load_pretrained``, ``reward_weights``)
refuse it here with one line naming them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from polyrl.errors import ConfigError

CONFIG_FIX = ("use the config.json saved with these weights (e.g. num_hidden_layers, hidden_size), "
              "or re-copy / re-download the model folder")


def shown(names: Iterable[str]) -> str:
    """The first three names, sorted, then "..." when there are more."""
    listed = sorted(names)
    return ", ".join(listed[:3]) + (", ..." if len(listed) > 3 else "")


def mismatched_shapes(info: Mapping[str, Any]) -> list[str]:
    """Each tensor of another shape as ``name ([saved] in the weights, [wanted] in config.json's model)``."""
    described = []
    for entry in info.get("mismatched_keys") or ():
        if isinstance(entry, tuple) and len(entry) == 3:
            name, saved, wanted = entry
            described.append(f"{name} ({list(saved)} in the weights, {list(wanted)} in config.json's model)")
        else:
            described.append(str(entry))
    return described


def refuse_mismatched_shapes(folder: str, info: Mapping[str, Any], field: str) -> None:
    """``ConfigError`` on ``field`` naming the tensors of ``folder``'s weights whose shapes differ
    from the model config.json describes, with both shapes."""
    mismatched = mismatched_shapes(info)
    if mismatched:
        raise ConfigError(
            f"config.json in {folder!r} does not match its weights: {len(mismatched)} tensor(s) of another "
            f"shape: {shown(mismatched)}", field=field, fix=CONFIG_FIX)
