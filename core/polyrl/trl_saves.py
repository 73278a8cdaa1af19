"""Which ``GRPOTrainer`` of this process last saved its model objects into an output_dir.

Why: ``GRPOTrainer`` saves a model object (and reward models, reward tokenizers) under its
output_dir (``initial_model``, ``reward_models/``, ``reward_tokenizers/``) when it is built, and
trains from those folders. Two trainers built in one process before either trains (a notebook
comparing two models with the same ``GRPOConfig``, or TRL's default output_dir of one model name)
shared those folders: the second's save replaced the first's, and the first then trained the
second's model without a word (and put those weights into its own model object). The first is
refused instead, naming the folders and the fix; a trainer built again (a notebook cell re-run)
is the newest saver and trains.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from polyrl.errors import ConfigError

#: resolved output_dir -> the token of the trainer that saved there last (this process)
_LAST_SAVER: dict[str, str] = {}


def _key(output_dir: str | Path) -> str:
    return str(Path(output_dir).resolve())


def claim(output_dir: str | Path) -> str:
    """A new trainer's token, recorded as the last to save into ``output_dir``."""
    token = uuid.uuid4().hex
    _LAST_SAVER[_key(output_dir)] = token
    return token


def check_still_ours(output_dir: str | Path, token: str | None, folders: Sequence[str]) -> None:
    """A ``ConfigError`` when a trainer built after the one holding ``token`` saved its own
    objects over ``folders`` (what this one saved in ``output_dir``); nothing when it saved none."""
    if token is None or not folders or _LAST_SAVER.get(_key(output_dir)) == token:
        return
    raise ConfigError(
        f"another GRPOTrainer built after this one saved its own models into the same output_dir "
        f"({output_dir}), replacing {', '.join(folders)}: this trainer would train those, not the ones given to it",
        field="output_dir",
        fix="give each GRPOTrainer its own output_dir (GRPOConfig(output_dir=...)), or build this trainer again")


__all__ = ["check_still_ours", "claim"]
