"""How a script's ``processing_class`` differs from the tokenizer its model folder holds.

Why: ``polyrl.trl.GRPOTrainer`` given a model folder tokenizes with the folder's own files, while
TRL tokenizes with the object it was handed. Edits a TRL script makes to that object in memory
(``tokenizer.eos_token = "<|im_end|>"``, which TRL's sampling stops at; a ``chat_template`` given
to a base model's tokenizer, which renders TRL's chat prompts; added tokens; ``add_bos_token``)
changed TRL's run and were dropped here without a word. What only pads (``pad_token``,
``padding_side``) changes no token TRL samples or trains on, so it is not compared.
"""

from __future__ import annotations

from typing import Any

#: text whose ids show an edit to how plain text is encoded (``add_bos_token``, ``add_eos_token``)
_PROBE = "Hello, world! 42"


def differences(theirs: Any, folders: Any) -> list[str]:
    """What TRL would read from ``theirs`` (the script's tokenizer) that ``folders`` (the same
    folder's tokenizer, loaded afresh) does not hold, each as a phrase; empty when they agree."""
    out = []
    mine, own = getattr(theirs, "chat_template", None), getattr(folders, "chat_template", None)
    if mine != own:
        out.append("its chat template differs from the folder's" if own is not None
                   else "it has a chat template the folder's tokenizer lacks (TRL renders chat prompts with it)")
    if getattr(theirs, "eos_token", None) != getattr(folders, "eos_token", None):
        out.append(f"its eos_token {getattr(theirs, 'eos_token', None)!r} is not the folder's "
                   f"{getattr(folders, 'eos_token', None)!r} (TRL ends completions at it)")
    added = _added(theirs).keys() - _added(folders).keys()
    if added or _length(theirs) != _length(folders):
        shown = ", ".join(repr(t) for t in sorted(added)[:3]) or f"{_length(theirs)} tokens, not {_length(folders)}"
        out.append(f"it has tokens the folder's tokenizer lacks ({shown})")
    elif _ids(theirs) != _ids(folders):
        out.append(f"it encodes text to other ids than the folder's ({_PROBE!r}: {_ids(theirs)} against "
                   f"{_ids(folders)}; add_bos_token or add_eos_token changed?)")
    return out


def _added(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's added tokens (empty where it cannot say)."""
    try:
        return dict(tokenizer.get_added_vocab())
    except Exception:  # noqa: BLE001 - a tokenizer class without the method: compared by length alone
        return {}


def _length(tokenizer: Any) -> int | None:
    """The tokenizer's vocabulary size, added tokens included (None where it cannot say: a processor)."""
    try:
        return len(tokenizer)
    except Exception:  # noqa: BLE001 - compared as equal: nothing to tell
        return None


def _ids(tokenizer: Any) -> list[int] | None:
    """The ids of ``_PROBE`` (None where the tokenizer cannot encode it)."""
    try:
        return list(tokenizer(_PROBE)["input_ids"])
    except Exception:  # noqa: BLE001 - compared as equal: nothing to tell
        return None
