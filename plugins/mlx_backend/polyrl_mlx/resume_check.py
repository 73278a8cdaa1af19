"""A LoRA checkpoint's tensor files checked against the model before an exact resume loads them.

Why: the resume loads the adapters (and the unmerged base) with ``load_weights(strict=False)``,
because each file holds only part of the model's parameters. Non-strict also takes a file with
tensors missing (they silently kept their fresh values: B = 0 for an adapter, the model folder's
base for a replaced one), tensors the model does not have (silently ignored) or of another shape.
The resume then did not continue the run it names. The torch backend refuses the same edits
(``polyrl_torch.weights``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError

FIX = ("resume from a checkpoint whose adapter and mlx_state files are intact (as polyrl wrote them), or "
       "with --resume-weights-only to start fresh adapters on its merged weights")


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def refuse_mismatched_tensors(file: Path, given: Mapping[str, Any], expected: Mapping[str, Any], what: str) -> None:
    """``ConfigError`` on ``--resume`` when ``file``'s tensors (``given``: name -> array) are not
    exactly ``expected``'s names and shapes (``what``: e.g. "LoRA adapter tensors")."""
    missing = sorted(set(expected) - set(given))
    if missing:
        raise ConfigError(f"{file} lacks {len(missing)} of this model's {len(expected)} {what} ({_shown(missing)}); "
                          "resuming would restart them from their initial values", field="--resume", fix=FIX)
    unexpected = sorted(set(given) - set(expected))
    if unexpected:
        raise ConfigError(f"{file} holds {len(unexpected)} tensor(s) not among this model's {len(expected)} {what} "
                          f"({_shown(unexpected)}); resuming would ignore them", field="--resume", fix=FIX)
    for name in sorted(given):
        have, want = tuple(given[name].shape), tuple(expected[name].shape)
        if have != want:
            raise ConfigError(f"{file} holds {name} of shape {list(have)}, but this model's is {list(want)}",
                              field="--resume", fix=FIX)
