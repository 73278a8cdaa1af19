"""Earlier runs set aside in ``output_dir/previous/``, and how many of them are kept.

Why: a fresh (not resumed) run in an output_dir that holds a finished run moves that run's
checkpoints, final model and metrics aside instead of mixing them with its own. Each rerun into
the same output_dir sets one more run aside; unbounded, ``previous/`` grows until the disk is
full, and a full disk mid-run is the crash a run must not have. ``train.keep_previous_runs``
bounds it: the newest N are kept, 0 deletes the earlier run instead.

``previous/`` may be on another filesystem (a symlink to a bigger disk): a rename there fails with
EXDEV, so the item is copied whole beside its destination, renamed into place, and only then deleted
where it was; a copy that fails half-way is removed and the original stays. A copied folder's files
as they were (path, size, mtime) are written beside it (``COPIED_STATS``): the other filesystem may
keep coarser mtimes (FAT: 2 s), and a trainer that knows its model by those stats
(``trl_saves.trained_model``) still finds it there.

Only folders named here (``20250101T120000Z``, ``20250101T120000Z-2`` for a second run set aside
within the same second) are ever deleted; anything else in ``previous/`` is left alone. A folder
that cannot be deleted is a warning, never a crash: the new run goes on. An earlier run is moved
into a ``.setting-aside-...`` folder and given its timestamp name only once all of it is there, so
a start killed half-way leaves part of a run under a name that is never deleted (the next start
says so) rather than a timestamp folder that the next start's pruning takes for a whole run.

What counts as an earlier run, and when it may go (``earlier_run``): a start that fails on its
first step leaves only a step-0 checkpoint; set aside, that "run" would count against the limit
and push a finished run out of ``previous/`` (two failed starts with ``keep_previous_runs = 1``
deleted it). Such leftovers are removed instead. Files polyrl did not write (notes in ``model/``,
a folder in ``checkpoints/``) are never moved or deleted: the start stops and names them. And with
``keep_previous_runs = 0`` the earlier run is deleted only once the new run has saved a trained
checkpoint (``deferred_prune``), so a start that fails does not cost the run it replaced.
"""

from __future__ import annotations

import errno
import itertools
import json
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from polyrl.errors import PolyrlError
from polyrl.logs import get_logger

log = get_logger("polyrl.previous_runs")

PREVIOUS_DIR = "previous"
_STAMP = "%Y%m%dT%H%M%SZ"
_NAME = re.compile(r"(\d{8}T\d{6}Z)(?:-([1-9]\d{0,8}))?")
#: The name an earlier run is moved under before it is named ``_NAME``: a kill between the moves of
#: its files left part of it in a timestamp folder that the next start's prune counted as a whole
#: run and deleted (with ``keep_previous_runs = 1``, the checkpoints). This name is never deleted.
STAGING = ".setting-aside-"
#: In a folder of previous/: each folder copied there across filesystems -> its files' stats as
#: they were before the copy (``file_stats``), which the copy may not keep exactly.
COPIED_STATS = ".copied-stats.json"

#: a folder's files: (relative path, size, mtime in ns) each, sorted
FileStats = tuple[tuple[str, int, int], ...]


def file_stats(folder: Path) -> FileStats:
    """``folder``'s files (relative path, size, mtime in ns), sorted; empty when it cannot be read.
    Stats only: no file is read."""
    try:
        return tuple(sorted((str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
                            for p in folder.rglob("*") if p.is_file() for st in (p.stat(),)))
    except OSError:
        return ()


def copied_stats(copy: Path) -> FileStats | None:
    """The stats ``copy`` (a folder in a previous/ run) had before it was copied there across
    filesystems, as ``_move_in`` recorded them; None when it was renamed (stats kept) or the
    record is missing or unreadable."""
    try:
        recorded = json.loads((copy.parent / COPIED_STATS).read_text()).get(copy.name)
        return tuple((str(rel), int(size), int(mtime)) for rel, size, mtime in recorded)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


class SetAsideError(PolyrlError):
    """An earlier run could not be moved into previous/; nothing of it was deleted."""


def aside_key(name: str) -> tuple[str, int] | None:
    """The sort key (older first) of a folder name this module makes; None for any other name."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 1)


def new_aside_dir(root: Path, now: float | None = None, prefix: str = "") -> Path:
    """A new empty folder under ``root`` named by the UTC time (``now``: seconds since the epoch).
    Created with a plain ``mkdir``, so a second start within the same second gets ``...Z-2``
    rather than merging into the first one's folder. ``prefix``: ``STAGING`` for the folder a
    run is moved into before it is named (``set_aside``)."""
    stamp = time.strftime(_STAMP, time.gmtime(now))
    try:  # a file named previous, or a full or read-only disk, was an OSError traceback
        root.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            path = root / (prefix + (stamp if n == 1 else f"{stamp}-{n}"))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except OSError as exc:
        raise SetAsideError(f"cannot make a folder in {root} to move an earlier run's files into "
                            f"({exc.strerror or exc}); nothing was moved. Fix: make {root} a writable folder "
                            "(move a file of that name away), then start again") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _named(staging: Path, root: Path) -> Path:
    """``staging``, its run moved in whole, renamed to its timestamp name (a rename fails onto a
    folder that is not empty: a second run set aside within the same second gets ``...Z-2``)."""
    stamp = time.strftime(_STAMP, time.gmtime())
    for n in itertools.count(1):
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            staging.rename(path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                continue
            raise SetAsideError(f"the earlier run was moved whole into {staging}, but it could not be named "
                                f"{path.name} ({exc.strerror or exc}). Fix: rename it to {path.name} yourself, "
                                "then start again") from exc
        return path
    raise AssertionError("unreachable")  # pragma: no cover


def earlier_runs(root: Path) -> list[Path]:
    """The runs set aside under ``root``, oldest first by name. Symlinks and entries with other
    names are not ours and are never listed."""
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return []
    ours = [(key, p.name, p) for p in entries
            if (key := aside_key(p.name)) is not None and p.is_dir() and not p.is_symlink()]
    return [p for *_, p in sorted(ours)]


def _delete(paths: Iterable[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Delete each folder; (deleted, [(not deleted, why)])."""
    deleted: list[Path] = []
    failed: list[tuple[Path, str]] = []
    for path in paths:
        try:
            shutil.rmtree(path)
        except OSError as exc:
            failed.append((path, exc.strerror or str(exc)))
        else:
            deleted.append(path)
    return deleted, failed


def prune(root: Path, keep: int, newest: Path | None, protect: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Delete all but the ``keep`` newest runs under ``root``. ``newest`` (the run just set aside)
    counts as the newest whatever its name, so a clock set back never deletes it first; a folder
    holding ``protect`` (the current output_dir) is never deleted. (deleted, [(not deleted, why)])."""
    runs = [p for p in earlier_runs(root) if p != newest]
    if newest is not None and newest.is_dir():
        runs.append(newest)
    doomed = runs[: max(len(runs) - keep, 0)]
    here = protect.resolve()
    return _delete(p for p in doomed if not here.is_relative_to(p.resolve()))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _copy(item: Path, dest: Path) -> None:
    """A whole copy of ``item`` at ``dest``: written under a hidden name, then renamed into place,
    so a half copy is never taken for the run (and is removed when the copy fails)."""
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        if item.is_dir() and not item.is_symlink():
            shutil.copytree(item, partial, symlinks=True)
        else:
            shutil.copy2(item, partial, follow_symlinks=False)
        partial.replace(dest)
    except OSError:
        try:
            _remove(partial)
        except OSError:
            pass  # a half copy under its hidden name; the original is whole either way
        raise


def _undo(renamed: list[tuple[Path, Path]], copied: list[tuple[Path, Path]]) -> bool:
    """Put back what a failed set-aside moved (renames reversed, copies removed); True if all went back."""
    whole = True
    for item, dest in reversed(renamed):
        try:
            dest.replace(item)
        except OSError:
            whole = False  # it stays whole in previous/
    for _, dest in copied:
        try:
            _remove(dest)
        except OSError:
            pass  # an extra copy; the original was never touched
    return whole


def move_aside(items: Iterable[Path], aside: Path) -> None:
    """Move ``items`` into ``aside``, all or none. A rename across filesystems (EXDEV) becomes a
    copy, and the originals of copies are deleted only once every item is in place. No
    ``COPIED_STATS`` record: ``aside`` is a checkpoints folder (a resume's newer checkpoints), where
    a file polyrl does not write in checkpoints/ stopped a later fresh start (``earlier_run``) once
    the folder was moved back to continue that run, and nothing looks checkpoints up by stats."""
    delete_originals(_move_in(items, aside, record=False), aside)


def _move_in(items: Iterable[Path], aside: Path, record: bool = True) -> list[Path]:
    """``move_aside`` up to the deletion of the originals of copies, which it returns; ``record``:
    write the ``COPIED_STATS`` of the folders copied (a run's ``model/`` is known by them)."""
    renamed: list[tuple[Path, Path]] = []
    copied: list[tuple[Path, Path]] = []
    stats: dict[str, FileStats] = {}
    try:
        for item in items:
            if not (item.exists() or item.is_symlink()):
                continue
            dest = aside / item.name
            try:
                item.replace(dest)
                renamed.append((item, dest))
                continue
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
            if record and item.is_dir() and not item.is_symlink():
                stats[item.name] = file_stats(item)
            _copy(item, dest)
            copied.append((item, dest))
        if stats:
            (aside / COPIED_STATS).write_text(json.dumps(stats))
    except OSError as exc:
        try:
            (aside / COPIED_STATS).unlink(missing_ok=True)
        except OSError:
            pass  # a stray record; set_aside leaves the folder it is in
        back = ("the earlier run was left where it was" if _undo(renamed, copied)
                else f"part of the earlier run is in {aside}, the rest where it was")
        raise SetAsideError(f"could not move {item} into {aside.parent} ({exc.strerror or exc}); {back}, "
                            "nothing was deleted. Fix: free space or make previous/ writable, or move the "
                            "earlier run out of the output_dir yourself, then start again") from exc
    return [item for item, _ in copied]


def delete_originals(copied: list[Path], aside: Path) -> None:
    """Delete the originals of items copied whole into ``aside``; one error naming those left."""
    stuck: list[str] = []
    for item in copied:
        try:
            _remove(item)
        except OSError as exc:
            stuck.append(f"{item.name} ({exc.strerror or exc})")
    if stuck:
        raise SetAsideError(f"the earlier run was copied whole to {aside}, but not all of {', '.join(stuck)} could "
                            "be deleted from the output_dir. Fix: delete those yourself (their copies are "
                            "complete), then start again")


#: What a checkpoints/ folder of ours holds: checkpoints, the temp folders of one being written and
#: of one being pruned (`.deleting-`).
_CHECKPOINT_ENTRY = re.compile(r"(?:\.tmp-|\.old-|\.deleting-)?step-\d{8}")
_STEP_ZERO = re.compile(r"(?:\.tmp-|\.old-|\.deleting-)?step-0{8}")
#: A model folder polyrl exported: a HF model (or a LoRA adapter beside the merged one).
_MODEL_FILES = ("config.json", "adapter_config.json")


def _foreign(checkpoint_root: Path, model_dir: Path) -> list[Path]:
    """Entries that are not what polyrl writes in these two folders (a user's notes, data, models)."""
    found: list[Path] = []
    if checkpoint_root.is_symlink() or (checkpoint_root.exists() and not checkpoint_root.is_dir()):
        found.append(checkpoint_root)
    elif checkpoint_root.is_dir():
        found += sorted(p for p in checkpoint_root.iterdir()
                        if not (_CHECKPOINT_ENTRY.fullmatch(p.name) and p.is_dir() and not p.is_symlink()))
    if model_dir.is_symlink() or (model_dir.exists() and not model_dir.is_dir()):
        found.append(model_dir)
    elif model_dir.is_dir() and not any((model_dir / name).is_file() for name in _MODEL_FILES) \
            and not _exported_from(checkpoint_root, model_dir):
        found.append(model_dir)
    return found


def _listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def _exported_from(checkpoint_root: Path, model_dir: Path) -> bool:
    """Whether ``model_dir`` is the copy of a checkpoint's model folder that a run exports (same
    files, same sizes): how a backend whose model is not in HF layout (no config.json) is known as
    polyrl's. Why: such a run's output_dir could not be started over at all."""
    if not checkpoint_root.is_dir() or checkpoint_root.is_symlink():
        return False
    mine = _listing(model_dir)
    for entry in sorted(checkpoint_root.iterdir(), reverse=True):  # the newest first: the usual source
        source = entry / "model"
        if _CHECKPOINT_ENTRY.fullmatch(entry.name) and source.is_dir() and _listing(source) == mine:
            return True
    return False


def _untrained(checkpoint_root: Path, model_dir: Path) -> bool:
    """True when the folders hold a run that trained nothing: step-0 checkpoints (a start that
    failed on its first step saves one to resume from) and no final model."""
    if model_dir.exists() or not checkpoint_root.is_dir():
        return False
    return all(_STEP_ZERO.fullmatch(p.name) for p in checkpoint_root.iterdir())


def earlier_run(checkpoint_root: Path, model_dir: Path, model_paths: Iterable[str | Path] = ()) -> bool:
    """Whether the output_dir holds an earlier run to set aside. A run that trained nothing is
    removed here (it is the initial weights, and would push a real run out of previous/). Raises
    SetAsideError, before anything moves, when the folders hold files polyrl did not write or the
    model this run trains (``model_paths``) lives inside them."""
    foreign = _foreign(checkpoint_root, model_dir)
    if foreign:
        shown = ", ".join(str(p) for p in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise SetAsideError(f"train.output_dir holds {shown}, which polyrl did not write (a fresh start moves an "
                            "earlier run's checkpoints/ and model/ aside, and may delete them later); nothing was "
                            "moved. Fix: move those files out of the output_dir, or set train.output_dir to "
                            "another folder")
    inside = [str(m) for m in model_paths for folder in (checkpoint_root, model_dir)
              if folder.exists() and Path(m).resolve().is_relative_to(folder.resolve())]
    if inside:
        raise SetAsideError(f"the model this run loads ({inside[0]}) is inside the earlier run this fresh start "
                            "would move aside; nothing was moved. Fix: copy that model out of the output_dir and "
                            "point model.path at the copy, or continue that run with --resume")
    if _untrained(checkpoint_root, model_dir):
        shutil.rmtree(checkpoint_root)
        log.info("removed the step-0 checkpoint of an earlier start that trained nothing",
                 path=str(checkpoint_root))
        return False
    return checkpoint_root.exists() or model_dir.exists()


def set_aside(output_dir: Path, items: Iterable[Path], keep: int) -> Path:
    """Move ``items`` (an earlier run's files in ``output_dir``) into a new folder under
    ``output_dir/previous/``, then keep only the ``keep`` newest runs there, logging what was
    deleted and how to keep more. With ``keep`` 0 the run just set aside stays until
    ``deferred_prune`` runs (after this run's first trained checkpoint). Returns its folder."""
    root = output_dir / PREVIOUS_DIR
    cut_short = sorted(p for p in root.glob(STAGING + "*") if p.is_dir() and not p.is_symlink())
    if cut_short:
        log.warning("an earlier start was killed while it moved a run aside: part of that run is in these "
                    "folders, which are never deleted by polyrl", folders=[str(p) for p in cut_short],
                    fix="look through them (the rest of that run is in the newest previous/ folder) and "
                        "delete them when they are not needed")
    staging = new_aside_dir(root, prefix=STAGING)
    try:
        copied = _move_in(items, staging)
    except SetAsideError:
        try:
            staging.rmdir()  # nothing moved yet: no empty folder to count as a run
        except OSError:
            pass
        raise
    aside = _named(staging, root)  # the run is whole in it: now it may count (and be pruned) as one
    delete_originals(copied, aside)
    deleted, failed = prune(output_dir / PREVIOUS_DIR, max(keep, 1), newest=aside, protect=output_dir)
    setting = f"train.keep_previous_runs = {keep}"
    if keep == 0:
        log.warning(f"output_dir held an earlier run; it was moved aside and is deleted ({setting}) once this run "
                    "saves its first trained checkpoint; this run starts from its first step", moved_to=str(aside),
                    fix="set train.keep_previous_runs >= 1 to keep earlier runs under previous/, or use --resume "
                        "to continue a run instead")
    else:
        log.warning("output_dir held an earlier run; it was moved aside, this run starts from its first step",
                    moved_to=str(aside), fix="use --resume to continue a run instead")
    _report(deleted, failed, setting, keep)
    return aside


#: The prefix of a previous/ folder holding the saved results of a trainer that never trained: not
#: a timestamp name (``_NAME``), so it is never counted as a run, pruned or deleted.
RESULTS_PREFIX = "results-"


def set_aside_results(output_dir: Path, items: Iterable[Path], why: str = "") -> Path:
    """Move ``items`` (results a TRL trainer saved in ``output_dir`` without a run: no checkpoint,
    no model) into a new ``previous/results-<time>/``, all or none. Why a folder apart: left in
    place, a later run's ``save_metrics()`` merged into them; counted as a run, metrics alone would
    push a trained run out of previous/ (``keep_previous_runs``), so they are never pruned. ``why``:
    the warning's text, when not a fresh start's (``trl_saves.set_aside_others``)."""
    aside = new_aside_dir(output_dir / PREVIOUS_DIR, prefix=RESULTS_PREFIX)
    try:
        move_aside(items, aside)
    except SetAsideError:
        try:
            aside.rmdir()  # nothing moved: no empty folder left behind
        except OSError:
            pass
        raise
    log.warning(why or "output_dir held results a trainer saved without training (save_metrics/save_state, no "
                "checkpoint or model); they were moved aside, not merged into this run's", moved_to=str(aside),
                fix="nothing to do; they are never deleted by polyrl")
    return aside


def deferred_prune(output_dir: Path, aside: Path | None) -> None:
    """``keep_previous_runs = 0``: delete the runs in previous/ (``aside``: the one ``set_aside``
    moved there at this start, if any), now that this run has a trained checkpoint of its own."""
    deleted, failed = prune(output_dir / PREVIOUS_DIR, 0, newest=aside, protect=output_dir)
    if aside is not None and aside in deleted:
        log.warning("the earlier run set aside at the start was deleted (train.keep_previous_runs = 0): this run "
                    "has saved a trained checkpoint", deleted=str(aside),
                    fix="set train.keep_previous_runs >= 1 to keep earlier runs under previous/")
    _report([p for p in deleted if p != aside], failed, "train.keep_previous_runs = 0", 0)


def _report(deleted: list[Path], failed: list[tuple[Path, str]], setting: str, keep: int) -> None:
    older = [str(p) for p in deleted]
    if older:
        log.warning(f"older runs in previous/ deleted ({setting} keeps the newest {keep})", deleted=older,
                    fix="raise train.keep_previous_runs to keep more, or move them out of previous/ first")
    for path, why in failed:
        log.warning("an earlier run in previous/ could not be deleted; this run goes on", path=str(path),
                    error=why, fix="delete it by hand to free its disk space")
