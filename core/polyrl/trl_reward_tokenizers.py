"""TRL's ``GRPOTrainer(reward_processing_classes=...)``: the tokenizer each reward model scores with.

Read as TRL 1.16 reads it: one tokenizer or a list aligned with ``reward_funcs`` (the same length,
else an error); an entry for a reward function is ignored; None for a reward model is the tokenizer
saved with it (TRL's ``AutoTokenizer.from_pretrained`` of the model's name). polyrl scores a reward
model in its ``reward_model`` reward, which loads from folders (in the trainer's process or
another), so a tokenizer given is saved with ``save_pretrained`` under
``output_dir/reward_tokenizers/`` and that folder is the reward's ``tokenizer`` option: the model
scores text tokenized by the script's tokenizer, its pad token (the eos without one) the model's
``pad_token_id``, as TRL sets them. Why save rather than pass the object: a reward's options are
plain values a checkpoint records and a worker process reads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError
from polyrl.file_modes import honour_umask

FIELD = "reward_processing_classes"
#: the folder under ``output_dir`` the given tokenizers are saved in, one sub-folder per reward
FOLDER = "reward_tokenizers"


def _is_tokenizer(value: Any) -> bool:
    """A transformers tokenizer (``PreTrainedTokenizerBase``: slow or fast), told by its class."""
    try:
        from transformers import PreTrainedTokenizerBase
    except ImportError:  # no transformers here: nothing the script made is a tokenizer
        return False
    return isinstance(value, PreTrainedTokenizerBase)


def reward_tokenizers(value: Any, rewards: Sequence[Any]) -> list[Any]:
    """``value`` as TRL aligns it with ``rewards`` (the script's ``reward_funcs``, as a list): one
    entry per reward, None where the reward model's own tokenizer is used or the reward is a
    function (whose entry TRL ignores). A list of another length, or an entry for a reward model
    that is not a tokenizer, is one ConfigError naming ``reward_processing_classes``."""
    from polyrl.api import is_reward_model_folder

    if value is None:
        return [None] * len(rewards)
    given = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(given) != len(rewards):
        raise ConfigError(f"{FIELD} has {len(given)} entr{'y' if len(given) == 1 else 'ies'} for "
                          f"{len(rewards)} reward_funcs", field=FIELD,
                          fix=f"pass a list of {len(rewards)} entries, one per reward_funcs entry in the same "
                              "order (None for a reward function, or for a reward model to use the tokenizer "
                              "saved in its folder), or one tokenizer with one reward")
    aligned: list[Any] = []
    for i, (tokenizer, reward) in enumerate(zip(given, rewards)):
        if tokenizer is None or not is_reward_model_folder(reward):
            aligned.append(None)  # a function's entry: TRL ignores it
            continue
        if not _is_tokenizer(tokenizer):
            where = FIELD if not isinstance(value, (list, tuple)) else f"{FIELD}[{i}]"
            raise ConfigError(f"{where} is a {type(tokenizer).__name__}, not a tokenizer, for the reward model "
                              f"{reward!r}", field=FIELD,
                              fix="pass that reward model's tokenizer (a transformers tokenizer, e.g. "
                                  "AutoTokenizer.from_pretrained(...); a processor's .tokenizer), or None to use "
                                  "the tokenizer saved in its folder")
        aligned.append(tokenizer)
    return aligned


def save_reward_tokenizers(tokenizers: Sequence[Any], output_dir: str) -> list[str | None]:
    """The folder each tokenizer of ``reward_tokenizers``' list is saved to
    (``output_dir/reward_tokenizers/reward_funcs_<i>``, replaced whole: no file of an earlier
    save left beside it), None where it holds None."""
    folders: list[str | None] = []
    for i, tokenizer in enumerate(tokenizers):
        if tokenizer is None:
            folders.append(None)
            continue
        target = Path(output_dir) / FOLDER / f"reward_funcs_{i}"
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            tokenizer.save_pretrained(str(staging))
            honour_umask(staging)  # mkdtemp's 0700 would keep it from the run's other readers
            if target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        folders.append(os.path.abspath(target))  # the same folder whatever directory a reward runs in
    return folders


__all__ = ["FOLDER", "reward_tokenizers", "save_reward_tokenizers"]
