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
``save_model()`` and ``model`` read that other run's weights without a word; its
``save_metrics()`` and ``save_state()`` wrote over that run's files (``run_folder``).

The files those two write in the output_dir (``RUN_FILES``, and any other split's
``{split}_results.json``, listed in ``RESULTS_RECORD`` as written) go into ``previous/`` with the
rest of a run when a later run starts fresh there: left behind, the later run's ``save_metrics()``
merged into the earlier run's ``all_results.json``, so the earlier run's keys the later one does
not write were read as the later run's. A trainer that saved results but never trained left no run
to set aside, and its files stayed for the next run to merge into: they go into
``previous/results-<time>/`` (``previous_runs.set_aside_results``). What the starting trainer
itself saved before its ``train()`` stays its own (``leftover_run_files``, ``restore_own``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl import previous_runs
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.previous_runs import PREVIOUS_DIR

log = get_logger("polyrl.trl")

#: what tells one exported model folder from another: each file's relative path, size and mtime
Identity = previous_runs.FileStats

#: What ``save_metrics()`` (the splits transformers' examples use) and ``save_state()`` write in
#: the output_dir: part of the run there, set aside with its model when a later run starts fresh.
RUN_FILES = ("all_results.json", "train_results.json", "eval_results.json", "test_results.json",
             "predict_results.json", "trainer_state.json")

#: In a folder polyrl's ``save_metrics()`` wrote into: the names of the ``{split}_results.json``
#: files it wrote there, any split (transformers writes one per split name it is given), so a fresh
#: start sets aside exactly those: a pattern would take a user's own ``*_results.json`` too.
RESULTS_RECORD = ".polyrl-results.json"
_RESULTS_NAME = re.compile(r"[^/\\]+_results\.json")

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


def recorded_results(folder: Path) -> list[str]:
    """The ``{split}_results.json`` names ``RESULTS_RECORD`` lists in ``folder``; [] when there is
    none or it cannot be read (then only ``RUN_FILES`` are known)."""
    try:
        names = json.loads((folder / RESULTS_RECORD).read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str) and _RESULTS_NAME.fullmatch(n)] if isinstance(names, list) else []


def record_results(folder: Path, name: str) -> None:
    """Add ``name`` (a ``{split}_results.json`` just written in ``folder``) to its ``RESULTS_RECORD``."""
    from polyrl import strict_json

    names = recorded_results(folder)
    if _RESULTS_NAME.fullmatch(name) and name not in names and name not in RUN_FILES:
        strict_json.rewrite_lines(folder / RESULTS_RECORD, [json.dumps(sorted([*names, name]))])


def leftover_run_files(folder: Path, own: Mapping[str, Any]) -> list[Path]:
    """The run files in ``folder`` (``RUN_FILES``, the recorded ``{split}_results.json``, the
    record) a fresh start sets aside: all but those holding exactly what this trainer saved there
    itself before its ``train()`` (``own``: name -> content), which stay its own."""
    found = []
    for name in dict.fromkeys((*RUN_FILES, *recorded_results(folder))):
        path = folder / name
        if (path.exists() or path.is_symlink()) and not (name in own and _content(path) == own[name]):
            found.append(path)
    record = folder / RESULTS_RECORD
    if found and (record.exists() or record.is_symlink()):
        found.append(record)
    return found


def _content(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return _UNREADABLE


_UNREADABLE = object()  # never equal to a trainer's own content


def restore_own(folder: Path, own: Mapping[str, Any], moved: Sequence[Path]) -> None:
    """Write back this trainer's own saves among ``moved`` (files a fresh start set aside because
    another trainer's results were merged into them: ``all_results.json``), as it alone saved them,
    and list its own results in ``RESULTS_RECORD`` again (the record went aside with the others')."""
    from polyrl import strict_json

    moved_names = {path.name for path in moved}
    for name, content in own.items():
        if name in moved_names:
            indent = 2 if name == "trainer_state.json" else 4  # as transformers writes each
            strict_json.rewrite_lines(folder / name, [json.dumps(content, indent=indent, sort_keys=True)])
        if (folder / name).exists():
            record_results(folder, name)


def model_identity(folder: Path) -> Identity:
    """``folder``'s files (relative path, size, mtime in ns), sorted; empty when it cannot be read.
    A rename into ``previous/`` keeps them; a copy across filesystems records them beside the copy
    (``previous_runs.copied_stats``), since that filesystem may keep coarser mtimes; another run's
    export has its own checkpoint's mtimes. Stats only: no weights read."""
    return previous_runs.file_stats(folder)


def _is_copy_of(copy: Path, identity: Identity) -> bool:
    """Whether ``copy`` (a model folder in a previous/ run) is the export ``identity`` describes:
    the same stats, or (copied across filesystems) recorded so, with the same files and sizes."""
    if model_identity(copy) == identity:
        return True
    recorded = previous_runs.copied_stats(copy)
    return recorded == identity and [f[:2] for f in model_identity(copy)] == [f[:2] for f in identity]


def _kept_at(folder: Path, identity: Identity, asked: str) -> Path:
    """``folder`` while it is still this run's export, else its copy under ``previous/``; a
    ``ConfigError`` naming ``asked`` when neither is (or when no identity was recorded)."""
    previous = folder.parent / PREVIOUS_DIR
    if not identity:  # said so: "replaced by a later run" sent the user after a run that never was
        raise ConfigError(
            f"this trainer could not list the files of the model its run exported ({folder}) when train() "
            f"returned, so it cannot tell that model from another run's: {asked} would not know which to use",
            field=asked,
            fix=f"make {folder} readable (check its permissions and disk), then call this trainer's train() again")
    if model_identity(folder) == identity:
        return folder
    aside = sorted(previous.glob(f"*/{folder.name}"), reverse=True) if previous.is_dir() else []
    found = next((p for p in aside if _is_copy_of(p, identity)), None)
    if found is not None:
        return found
    raise ConfigError(
        f"the model this trainer trained ({folder}) was replaced by a later run in the same output_dir "
        f"and is not kept under {previous}: {asked} would use that other run's model",
        field=asked,
        fix="give each trainer its own output_dir (GRPOConfig(output_dir=...)), then call this trainer's "
            "train() again")


def trained_model(folder: Path, identity: Identity, asked: str) -> Path:
    """The folder holding the model this trainer's run exported to ``folder`` (``output_dir/model``):
    ``folder`` while it is still that export, else the copy a later run there set aside under
    ``output_dir/previous/`` (said in a warning); a ``ConfigError`` naming ``asked`` when neither
    holds it (replaced, and not kept)."""
    found = _kept_at(folder, identity, asked)
    if found != folder:
        log.warning(f"{asked}: a later run in the same output_dir replaced {folder}; this trainer's trained model "
                    f"is read where that run set it aside", path=str(found))
    return found


def run_folder(folder: Path, identity: Identity, asked: str) -> Path:
    """Where this trainer's run files are (``save_metrics``, ``save_state`` write beside them): the
    output_dir while its ``model/`` (``folder``) is this run's export, else the ``previous/``
    folder a later run moved this run into (said in a warning). Why: written to the output_dir
    they replaced the later run's trainer_state.json and merged into its all_results.json."""
    found = _kept_at(folder, identity, asked).parent
    if found != folder.parent:
        log.warning(f"{asked}: a later run in the same output_dir set this trainer's run aside; its files are "
                    f"written there, beside this trainer's trained model", path=str(found))
    return found


__all__ = ["RESULTS_RECORD", "RUN_FILES", "Identity", "check_still_ours", "claim", "leftover_run_files", "model_identity",
           "record_results", "recorded_results", "restore_own", "run_folder", "trained_model"]
