"""Which ``GRPOTrainer`` of this process last saved its model objects into an output_dir.

Why: ``GRPOTrainer`` saves a model object (and reward models, reward tokenizers) under its
output_dir (``initial_model``, ``reward_models/``, ``reward_tokenizers/``) when it is built, and
trains from those folders. Two trainers built in one process before either trains (a notebook
comparing two models with the same ``GRPOConfig``, or TRL's default output_dir of one model name)
shared those folders: the second's save replaced the first's, and the first then trained the
second's model without a word (and put those weights into its own model object). The first is
refused instead, naming the folders and the fix; a trainer built again (a notebook cell re-run)
is the newest saver and trains.

The trained model is checked too (``trained_model``): a later run in the same output_dir (another
trainer of this process, or another process once this one's run had ended) sets this run's
``model/`` aside into ``previous/`` and writes its own there, and this trainer's ``evaluate()``,
``save_model()`` and ``model`` read that other run's weights without a word.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.previous_runs import PREVIOUS_DIR

log = get_logger("polyrl.trl")

#: what tells one exported model folder from another: each file's relative path, size and mtime
Identity = tuple[tuple[str, int, int], ...]

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


def model_identity(folder: Path) -> Identity:
    """``folder``'s files (relative path, size, mtime in ns), sorted; empty when it cannot be read.
    A rename into ``previous/`` keeps them, and a copy across filesystems keeps sizes and mtimes
    (``copy2``); another run's export has its own checkpoint's mtimes. Stats only: no weights read."""
    try:
        return tuple(sorted((str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
                            for p in folder.rglob("*") if p.is_file() for st in (p.stat(),)))
    except OSError:
        return ()


def trained_model(folder: Path, identity: Identity, asked: str) -> Path:
    """The folder holding the model this trainer's run exported to ``folder`` (``output_dir/model``):
    ``folder`` while it is still that export, else the copy a later run there set aside under
    ``output_dir/previous/`` (said in a warning); a ``ConfigError`` naming ``asked`` when neither
    holds it (replaced, and not kept)."""
    if identity and model_identity(folder) == identity:
        return folder
    previous = folder.parent / PREVIOUS_DIR
    aside = sorted(previous.glob(f"*/{folder.name}"), reverse=True) if previous.is_dir() else []
    found = next((p for p in aside if identity and model_identity(p) == identity), None)
    if found is not None:
        log.warning(f"{asked}: a later run in the same output_dir replaced {folder}; this trainer's trained model "
                    f"is read where that run set it aside", path=str(found))
        return found
    raise ConfigError(
        f"the model this trainer trained ({folder}) was replaced by a later run in the same output_dir "
        f"and is not kept under {previous}: {asked} would use that other run's model",
        field=asked,
        fix="give each trainer its own output_dir (GRPOConfig(output_dir=...)), then call this trainer's "
            "train() again")


__all__ = ["Identity", "check_still_ours", "claim", "model_identity", "trained_model"]
