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
import shutil
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
    recorded = recorded_results(folder)
    for name in dict.fromkeys((*RUN_FILES, *recorded)):
        path = folder / name
        if (path.exists() or path.is_symlink()) and not (name in own and _same(_content(path), own[name])):
            found.append(path)
    if folder / "all_results.json" in found:
        found += older_splits(folder, {*RUN_FILES, *recorded, *own})
    record = folder / RESULTS_RECORD
    if found and (record.exists() or record.is_symlink()):
        found.append(record)
    return found


def older_splits(folder: Path, known: set[str]) -> list[Path]:
    """The ``{split}_results.json`` files in ``folder`` (none of ``known``) that ``save_metrics()``
    wrote with no ``RESULTS_RECORD`` entry (a polyrl before the record, or transformers' Trainer):
    a non-empty JSON object every item of which ``all_results.json`` holds, as save_metrics merges
    each split into it. Why: the record lists only what a newer polyrl wrote, so an older run's
    ``validation_results.json`` stayed beside the next run's files as if that run's; a user's
    own ``*_results.json`` (other keys or values) stays."""
    merged = _content(folder / "all_results.json")
    if not isinstance(merged, dict):
        return []
    found = []
    for path in sorted(folder.glob("*_results.json")):
        if path.name in known or path.is_symlink() or not _RESULTS_NAME.fullmatch(path.name):
            continue
        content = _content(path)
        if isinstance(content, dict) and content and all(
                key in merged and _same(merged[key], value) for key, value in content.items()):
            found.append(path)
    return found


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: a NaN metric read back equals the one saved (``==`` says not, and a trainer's
    own all_results.json holding one was taken for another's and moved aside at each save)."""
    if a is _UNREADABLE or b is _UNREADABLE:
        return False
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _content(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return _UNREADABLE


_UNREADABLE = object()  # never equal to a trainer's own content


def restore_own(folder: Path, own: Mapping[str, Any]) -> None:
    """Write back this trainer's own saves that ``folder`` no longer holds as it alone saved them
    (set aside because another trainer's results were merged into them, ``all_results.json``, or
    moved out by another trainer's save: ``set_aside_others``), and list its own results in
    ``RESULTS_RECORD`` again (the record went aside with the others')."""
    from polyrl import strict_json

    for name, content in own.items():
        if not _same(_content(folder / name), content):
            indent = 2 if name == "trainer_state.json" else 4  # as transformers writes each
            strict_json.rewrite_lines(folder / name, [json.dumps(content, indent=indent, sort_keys=True)])
        if (folder / name).exists():
            record_results(folder, name)


def run_results(folder: Path) -> dict[str, Any]:
    """The run files in ``folder`` (``RUN_FILES``, the recorded splits): name -> content. What a
    trainer's run holds when its ``train()`` returns: its own from then on (``set_aside_others``)."""
    names = dict.fromkeys((*RUN_FILES, *recorded_results(folder)))
    return {name: content for name in names if (content := _content(folder / name)) is not _UNREADABLE}


#: which run an output_dir holds: its model/'s file stats and its checkpoints' names (both empty: none)
RunKey = tuple[Identity, tuple[str, ...]]


def run_key(output_dir: Path) -> RunKey:
    """The ``RunKey`` of the run in ``output_dir`` now."""
    try:
        checkpoints = tuple(sorted(p.name for p in (output_dir / "checkpoints").iterdir()))
    except OSError:
        checkpoints = ()
    return model_identity(output_dir / "model"), checkpoints


def rejoin(aside: Path, displaced: Sequence[tuple[Path, RunKey]], run: RunKey) -> None:
    """Move the results a trainer's saves moved out of the output_dir (``set_aside_others``) into
    ``aside``, the ``previous/`` folder their run (``run``, as it was then) was just set aside
    into, and remove their emptied ``previous/results-<time>/``. Why: set apart, an earlier run's
    results lay in one folder and its model in another. Each file is renamed: cut short, some are
    in one folder and some in the other, none lost."""
    for folder, key in displaced:
        if key != run or not any(run) or not folder.is_dir():
            continue
        entries = list(folder.iterdir())
        if any((aside / entry.name).exists() for entry in entries):
            continue  # not that run's alone: left where it is
        try:
            for entry in entries:
                entry.replace(aside / entry.name)
            folder.rmdir()
        except OSError as exc:
            log.warning("results moved aside before this run could not join their run in previous/; they stay "
                        "where they are", path=str(folder), moved_to=str(aside), error=str(exc))
            continue
        log.info("an earlier run's results a trainer's save had moved aside are back with that run",
                 moved_from=str(folder), moved_to=str(aside))


def rejoin_resumed(output_dir: Path, displaced: Sequence[tuple[Path, RunKey]], run: RunKey) -> None:
    """A resume of the run (``run``, as it was before the resume) whose results a trainer's save
    before ``train()`` moved out (``set_aside_others``): they come back into ``output_dir``, where
    that run goes on, as a fresh start puts them back with their run in ``previous/`` (``rejoin``).
    Why: they stayed in ``previous/results-<time>/``, apart from the run they belong to. A file
    the trainer saved itself there stays its own (it replaced the earlier one, as transformers'
    save into the run would have): ``all_results.json`` gets the earlier keys it lacks (as
    save_metrics merges), and what it replaced stays aside; an emptied folder is removed."""
    for folder, key in displaced:
        if key != run or not any(run) or not folder.is_dir():
            continue
        try:
            for entry in sorted(folder.iterdir()):
                dest = output_dir / entry.name
                if entry.name == RESULTS_RECORD or entry.is_symlink():
                    continue
                if not (dest.exists() or dest.is_symlink()):
                    entry.replace(dest)
                    record_results(output_dir, entry.name)
                elif entry.name == "all_results.json":
                    earlier, mine = _content(entry), _content(dest)
                    if isinstance(earlier, dict) and isinstance(mine, dict):
                        from polyrl import strict_json

                        strict_json.rewrite_lines(dest, [json.dumps({**earlier, **mine}, indent=4, sort_keys=True)])
                        if all(k not in mine or _same(mine[k], v) for k, v in earlier.items()):
                            entry.unlink()  # nothing of it is lost: every key is in the run's file
            if [p.name for p in folder.iterdir()] in ([], [RESULTS_RECORD]):
                (folder / RESULTS_RECORD).unlink(missing_ok=True)
                folder.rmdir()
        except OSError as exc:
            log.warning("results moved aside before this resumed run could not all come back into its output_dir; "
                        "the rest stay where they are", path=str(folder), error=str(exc))
            continue
        log.info("an earlier save's results moved aside are back with the run this resume continues",
                 moved_from=str(folder))


def drop_own_copies(output_dir: Path, own: Mapping[str, Any]) -> None:
    """Remove each ``previous/results-<time>/`` that holds nothing but copies of this trainer's
    own saves (``own``: name -> content) that ``output_dir`` holds as they are (``restore_own``
    put them back). Why: another trainer's save had moved them there, and the copy stayed beside
    the restored files, one more set of results in previous/ that no run owns. A copy of a file
    the output_dir no longer holds so stays: it is the only one."""
    root = output_dir / PREVIOUS_DIR
    if not own or not root.is_dir():
        return
    for folder in sorted(root.glob(previous_runs.RESULTS_PREFIX + "*")):
        if not folder.is_dir() or folder.is_symlink():
            continue
        entries = [p for p in folder.iterdir() if p.name != RESULTS_RECORD]
        if entries and all(p.name in own and p.is_file() and not p.is_symlink() and _same(_content(p), own[p.name])
                           and _same(_content(output_dir / p.name), own[p.name]) for p in entries):
            try:
                shutil.rmtree(folder)
            except OSError as exc:
                log.warning("a copy of this trainer's own results in previous/ could not be removed",
                            path=str(folder), error=str(exc))


def set_aside_others(folder: Path, own: Mapping[str, Any]) -> Path | None:
    """Before a trainer's ``save_metrics()``/``save_state()`` writes into the output_dir
    ``folder``: move the run files there that are not its own (``own``: what it saved itself, or
    its run held) intact into ``previous/results-<time>/``, and list its own in ``RESULTS_RECORD``
    again. Why: as transformers does, it overwrote another run's ``eval_results.json`` and
    ``trainer_state.json`` and merged into its ``all_results.json`` (an earlier run's, or another
    trainer's on the same output_dir): that run's results were lost or mixed with this trainer's.
    Returns the folder they went into (None: nothing was moved)."""
    others = leftover_run_files(folder, own)
    if not others:
        return None
    aside = previous_runs.set_aside_results(folder, others, why="another run's or trainer's results (save_metrics/"
                                    "save_state) were in the output_dir a trainer saves into; they were moved "
                                    "aside whole, not overwritten or merged into this trainer's")
    restore_own(folder, own)
    drop_own_copies(folder, own)  # an earlier save of another trainer moved them aside: back here now
    return aside


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


__all__ = ["RESULTS_RECORD", "RUN_FILES", "Identity", "check_still_ours", "claim", "drop_own_copies", "leftover_run_files",
           "model_identity", "older_splits", "record_results", "recorded_results", "rejoin", "rejoin_resumed",
           "restore_own", "run_folder", "run_key", "run_results", "set_aside_others", "trained_model"]
