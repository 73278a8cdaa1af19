"""Checkpoint directories that never lie: atomic, checksummed, verified before use.

Layout of one checkpoint (``checkpoints/step-XXXXXXXX/``)::

    model/               the policy as a plain HF folder (+ ``adapter/`` for LoRA): shippable
    engine_state/        the backend's optimizer, RNG and (LoRA) base weights: never shipped
    trainer_state.json   step, data position, Python/numpy RNG, the run's config
    MANIFEST.json        sha256, size and mtime_ns of every file above
    COMPLETE             written last: {"step": N, "manifest_sha256": ...}

It is written into ``.tmp-step-XXXXXXXX``, every file fsynced, the manifest then the marker
written, and the directory renamed into place (parent fsynced). At resume the newest checkpoint
whose files match its manifest is used; a damaged newer one is skipped with a warning naming it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl import strict_json
from polyrl.errors import PolyrlError
from polyrl.file_modes import honour_umask
from polyrl.folder_links import outside_link

MARKER = "COMPLETE"
MANIFEST = "MANIFEST.json"
STATE_FILE = "trainer_state.json"
MODEL_DIR = "model"
ENGINE_STATE_DIR = "engine_state"
_HASH_CHUNK = 1 << 20
#: The largest state file ``is_complete`` parses (a step's pending rollout makes it this large).
PARSED_STATE_BYTES = 64 << 20
#: A marker is one short line; anything larger is not one.
_MARKER_BYTES = 4096
#: Free space below which a failed write is reported as a full disk: backends' writers (torch.save,
#: safetensors) often report ENOSPC as their own error types without the errno.
_NEARLY_FULL_BYTES = 256 * 1024


#: How close to RLIMIT_FSIZE a partial file must be for a failed write without an errno (torch.save's
#: "unexpected pos") to be that limit's doing: writers stop up to one buffer short of it.
_LIMIT_SLACK_BYTES = 1 << 20
#: An errno a Rust writer (safetensors) puts in its message instead of raising an OSError.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class CheckpointWriteError(PolyrlError):
    """Writing a checkpoint failed; the partial directory is gone, older checkpoints are intact.
    ``fix``: what to do when the cause is known (a file-size limit, a quota), else None."""

    def __init__(self, step: int, reason: str, disk_problem: bool, fix: str | None = None) -> None:
        self.step, self.reason, self.disk_problem, self.fix = step, reason, disk_problem, fix
        super().__init__(f"cannot write checkpoint step {step}: {reason}")


def _os_error(exc: BaseException | None) -> OSError | None:
    """The OSError behind ``exc`` (a backend's hook error wraps it), or None."""
    while exc is not None:
        if isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _chain_message(exc: BaseException | None, words: str) -> str | None:
    """The message of the first exception in ``exc``'s chain that holds ``words``."""
    while exc is not None:
        if words in str(exc):
            return str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


def _errno(exc: BaseException | None) -> int | None:
    """The errno behind ``exc``: an OSError's, or the "(os error N)" a Rust writer (safetensors)
    writes into its own exception's message."""
    os_error = _os_error(exc)
    if os_error is not None and os_error.errno is not None:
        return os_error.errno
    message = _chain_message(exc, "(os error ")
    found = _RUST_OS_ERROR.search(message) if message else None
    return int(found.group(1)) if found else None


def _file_size_limit() -> int | None:
    """This process's RLIMIT_FSIZE (``ulimit -f``) in bytes, or None when there is none."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _largest_file(folder: Path) -> tuple[str, int] | None:
    """(path relative to ``folder``, size) of the largest file a failed write left there."""
    try:
        sizes = [(p.stat().st_size, str(p.relative_to(folder))) for p in folder.rglob("*") if p.is_file()]
    except OSError:
        return None
    if not sizes:
        return None
    size, name = max(sizes)
    return name, size


def limit_problem(exc: BaseException, largest: tuple[str, int] | None = None) -> tuple[str, str] | None:
    """(the reason, the fix) when a limit is why a write failed, else None: this process's file-size
    limit (RLIMIT_FSIZE: EFBIG, or no errno from a writer that stopped just short of it, ``largest``
    being the (name, size) of the file it left), the filesystem's largest file (EFBIG), a disk quota
    (EDQUOT). Shared by every file of a run: metrics.jsonl reaching ``ulimit -f`` said "File too
    large. Fix: free space", which frees nothing."""
    code = _errno(exc)
    limit = _file_size_limit()
    near_limit = (limit is not None and largest is not None
                  and largest[1] >= limit - min(_LIMIT_SLACK_BYTES, limit // 4))
    if limit is not None and (code == errno.EFBIG or (code is None and near_limit)):
        what = f"{largest[0]} reached" if largest else "a file reached"
        return (f"{what} this process's file-size limit of {limit} bytes (RLIMIT_FSIZE)",
                "raise the file-size limit (`ulimit -f unlimited` in the shell that starts polyrl, or the "
                "job scheduler's file-size limit)")
    if code == errno.EFBIG:
        return ("a file is larger than the filesystem of train.output_dir allows (File too large)",
                "put train.output_dir on a filesystem that takes larger files")
    if code == errno.EDQUOT:
        return os.strerror(code), "free space within your disk quota, or ask for a larger quota"
    return None


def in_the_way(exc: BaseException) -> tuple[str, str] | None:
    """(the reason, the fix) when a file stands where the run needs a folder (EEXIST from a mkdir,
    ENOTDIR below it), else None. Why: ``checkpoints`` made a file said "File exists. Fix: free
    space or make train.output_dir writable", neither of which moves the file."""
    code = _errno(exc)
    os_error = _os_error(exc)
    name = getattr(os_error, "filename", None)
    if code not in (errno.EEXIST, errno.ENOTDIR) or not name:
        return None
    return (f"{name} is in the way: a file stands where a folder is needed ({os.strerror(code)})",
            f"move or delete the file {name}")


def too_long(exc: BaseException) -> tuple[str, str] | None:
    """(the reason, the fix) when a path the run writes is past the system's limits
    (ENAMETOOLONG: the whole path past PATH_MAX, under a deep ``train.output_dir``), else None.
    Why: it said "File name too long. Fix: free space or make train.output_dir writable", after
    the whole run trained (its first checkpoint, with checkpoint_every = 0, is its last)."""
    if _errno(exc) != errno.ENAMETOOLONG:
        return None
    name = getattr(_os_error(exc), "filename", None)
    size = f" ({len(os.fsencode(name))} bytes: {str(name)[:40]}...)" if isinstance(name, (str, bytes)) else ""
    return (f"a path under train.output_dir is longer than the system allows{size}",
            "set train.output_dir to a shorter path (fewer or shorter folder names; the files of a "
            "checkpoint lie a few folders below it)")


def _why(exc: Exception, root: Path, partial: Path) -> tuple[str, bool, str | None]:
    """(a readable reason, whether it is the disk's fault, the fix when a limit is the cause) for a
    failed write, judged before the ``partial`` directory is deleted (deleting it frees the space
    again). Why: a file-size limit (RLIMIT_FSIZE, ``ulimit -f``) or quota hit inside torch.save was
    only "unexpected pos 798720 vs 798612", blamed on the backend, with no fix."""
    limited = limit_problem(exc, _largest_file(partial)) or in_the_way(exc) or too_long(exc)
    if limited is not None:
        return limited[0], True, limited[1]
    code = _errno(exc)
    if code is not None:
        return os.strerror(code), True, None
    free = _free_bytes(root)
    if free is not None and free < _NEARLY_FULL_BYTES:
        return f"No space left on device ({free} bytes free; the writer said: {exc})", True, None
    short = _chain_message(exc, "unexpected pos")  # torch's zip writer: a write came back short, no errno
    if short is not None:
        return (f"the writer stopped part-way ({short}), as a full disk, a disk quota or a file-size limit "
                "makes it", True, "free space, or raise the disk quota or the file-size limit (ulimit -f)")
    return str(exc), False, None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path, durable: frozenset[str] = frozenset()) -> None:
    """fsync every file and folder under ``path``, except the files ``durable`` names (relative
    paths): hard links of a file an earlier checkpoint already fsynced (``_unchanged_links``)."""
    for root, _, files in os.walk(path):
        for name in files:
            if str(Path(root, name).relative_to(path)) in durable:
                continue
            # read-only: a kept reference is a hard link of the user's model, perhaps mode 0444
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(root))


def write_file_synced(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def _files(folder: Path) -> list[str]:
    skip = {MARKER, MANIFEST}
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and str(p.relative_to(folder)) not in skip)


def _manifest(folder: Path, known: dict[str, str] | None = None) -> dict[str, Any]:
    """Each file's digest and size, and its mtime_ns (what ``_unchanged_links`` compares at the
    next save); ``known``: digests taken from the previous checkpoint instead of read again. The
    stat comes before the read: a file written during it shows a newer mtime next time."""
    files: dict[str, Any] = {}
    for rel in _files(folder):
        st = (folder / rel).stat()
        digest = (known or {}).get(rel) or sha256(folder / rel)
        files[rel] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return {"format": 1, "files": files}


def _previous_manifest(root: Path, final: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint under ``root`` other than ``final`` and its manifest's
    files, when the manifest matches its marker's checksum; else None."""
    previous = [p for p in complete_checkpoints(root) if p.name != final.name]
    if not previous:
        return None
    files, _ = _manifest_files(previous[-1])
    return (previous[-1], files) if isinstance(files, dict) else None


def _unchanged_links(root: Path, final: Path, folder: Path) -> dict[str, str]:
    """{file of ``folder``: its digest} for the files that are the very file (same device and
    inode: a hard link, ``kept_inputs``' reference) an earlier checkpoint holds at the same place,
    with the size and mtime_ns its manifest recorded. Why: every save of a TRL PeftModel run with
    beta > 0 read and fsynced the whole merged reference again (seconds per GB each save), though
    it is one file on disk, already hashed and fsynced. Sound: the digest is the one read from
    this inode, unchanged since by its size and mtime; and ``verify`` reads every file again at
    resume, so a file changed even so (its mtime set back) is refused there, as any change is."""
    found = _previous_manifest(root, final)
    if found is None:
        return {}
    previous, files = found
    known: dict[str, str] = {}
    for rel in _files(folder):
        meta = files.get(rel)
        if not (isinstance(meta, dict) and _entry(meta) and isinstance(meta.get("mtime_ns"), int)):
            continue
        try:
            now, then = (folder / rel).stat(), (previous / rel).stat()
        except OSError:
            continue
        if ((now.st_dev, now.st_ino) == (then.st_dev, then.st_ino) and now.st_nlink > 1
                and now.st_size == meta["size"] and now.st_mtime_ns == meta["mtime_ns"]):
            known[rel] = meta["sha256"]
    return known


def _fresh_folder(tmp: Path) -> None:
    """An empty folder at ``tmp``: what a killed write left there removed first (a file or link
    of that name too, which failed every later save)."""
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp)
    elif tmp.exists() or tmp.is_symlink():
        tmp.unlink()
    tmp.mkdir()


@contextlib.contextmanager
def _staging(root: Path, tmp: Path, step: int) -> Iterator[None]:
    """Around the writing of the staging folder ``tmp``: on any failure it is removed, and an
    ``Exception`` becomes one ``CheckpointWriteError`` saying why (``_why``), so every checkpoint
    write fails the same way and leaves the complete checkpoints as they were."""
    try:
        yield
    except Exception as exc:
        reason, disk_problem, fix = _why(exc, root, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(step, reason, disk_problem, fix) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_checkpoint(
    root: str | Path, step: int, state: dict[str, Any], write_engine: Callable[[str, str], None]
) -> Path:
    """Write a checkpoint for ``step`` atomically; ``write_engine(model_dir, engine_state_dir)``
    saves the backend's part. On any failure the partial directory is removed and the previous
    checkpoints are untouched (the caller prunes only after success)."""
    root = Path(root)
    final = checkpoint_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    with _staging(root, tmp, step):
        # in here: a checkpoints/ that cannot be made (a full disk, a file of that name) was an
        # OSError traceback, and under a launcher no error line of this rank's
        root.mkdir(parents=True, exist_ok=True)
        _fresh_folder(tmp)
        write_engine(str(tmp / MODEL_DIR), str(tmp / ENGINE_STATE_DIR))
        honour_umask(tmp)  # safetensors writes 0600: the run's other files are readable by the umask
        write_file_synced(tmp / STATE_FILE, strict_json.dumps(state, indent=1, sort_keys=True))
        known = _unchanged_links(root, final, tmp)  # hashed and fsynced by an earlier checkpoint
        _seal_and_replace(root, final, tmp, step, known)
    shutil.rmtree(root / f".old-{final.name}", ignore_errors=True)
    return final


def _seal_and_replace(root: Path, final: Path, tmp: Path, step: int, known: dict[str, str]) -> None:
    """Fsync ``tmp`` (but the ``known`` files: hashed and fsynced already), write its manifest and
    marker, and put it in place of ``final`` (an existing one set aside first, as
    ``finish_interrupted_replacements`` expects: a kill between the renames loses neither)."""
    _fsync_tree(tmp, frozenset(known))
    write_file_synced(tmp / MANIFEST, strict_json.dumps(_manifest(tmp, known), indent=1, sort_keys=True))
    write_file_synced(tmp / MARKER, json.dumps({"step": step, "manifest_sha256": sha256(tmp / MANIFEST)}))
    _fsync_dir(tmp)
    old = root / f".old-{final.name}"
    if final.exists():  # the same step again: set the old one aside until the new one is in place
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(root)


def rewrite_state(path: Path, step: int, state: dict[str, Any]) -> None:
    """Replace the state file of the complete checkpoint ``path`` (of ``step``) with ``state``,
    atomically: a copy whose other files are hard links to these (their digests taken from the
    manifest: the same inodes), a new manifest and marker, then the same-step replacement
    ``write_checkpoint`` does. Why: a fact learned after the last checkpoint was written (the
    evaluation after training setting a new best) belongs in it, as transformers' last checkpoint,
    written after that evaluation, holds it; editing the file in place would leave the manifest's
    checksum wrong (a resume refuses the checkpoint) and a kill midway a torn file. Raises
    ``CheckpointWriteError``; the checkpoint is then as it was."""
    root = path.parent
    tmp = root / f".tmp-{path.name}"
    with _staging(root, tmp, step):
        files, problem = _manifest_files(path)
        if problem is not None or not isinstance(files, dict):
            raise OSError(f"{path.name}: {problem or 'no manifest'}")
        _fresh_folder(tmp)
        known: dict[str, str] = {}
        for rel in _files(path):
            if rel == STATE_FILE:
                continue
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path / rel, tmp / rel)
            except OSError:  # a filesystem without hard links: a copy, hashed again
                shutil.copy2(path / rel, tmp / rel)
                continue
            meta = files.get(rel)
            if isinstance(meta, dict) and _entry(meta):
                known[rel] = meta["sha256"]
        write_file_synced(tmp / STATE_FILE, strict_json.dumps(state, indent=1, sort_keys=True))
        honour_umask(tmp)
        _seal_and_replace(root, path, tmp, step, known)
    shutil.rmtree(root / f".old-{path.name}", ignore_errors=True)


def _plain_file(path: Path) -> bool:
    """A regular file, not a link: a checkpoint is someone's folder to read, never a way out of
    it (a link to another file, a FIFO that blocks the read)."""
    return path.is_file() and not path.is_symlink()


def is_complete(path: Path) -> bool:
    """Cheap check (no hashing): the marker names this directory's step and the state parses
    (one past ``PARSED_STATE_BYTES`` is not parsed here: listing checkpoints parsed a 2 GB file
    whole; the resume checks its size and fields, ``polyrl.checkpoint_state``)."""
    if not (_plain_file(path / MARKER) and _plain_file(path / STATE_FILE)):
        return False
    try:
        if (path / MARKER).stat().st_size > _MARKER_BYTES:
            return False
        marker = json.loads((path / MARKER).read_text())
        if (path / STATE_FILE).stat().st_size <= PARSED_STATE_BYTES:
            json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError, RecursionError):  # nested past the parser's depth
        return False
    step = marker.get("step") if isinstance(marker, dict) else None
    return isinstance(step, int) and not isinstance(step, bool) and path.name == f"step-{step:08d}"


def is_unverifiable(path: Path) -> bool:
    """A checkpoint written before manifests existed: its marker names no manifest checksum."""
    try:
        return "manifest_sha256" not in json.loads((path / MARKER).read_text())
    except (OSError, ValueError, TypeError):
        return False


def verify(path: Path, only: str | None = None) -> str | None:
    """Why ``path`` cannot be trusted (a missing, truncated or altered file), or None when every
    file matches the manifest written at save time. ``only`` restricts the check to a subfolder
    (``model``: the weights alone, for a weights-only resume). A checkpoint from before manifests
    (see ``is_unverifiable``) passes on its marker alone; the caller warns about it. A link leading
    out of the checkpoint, or a FIFO or device in it, never passes (``polyrl.folder_links``)."""
    if (strange := outside_link(path)) is not None:
        return f"{strange[0]} is {strange[1]}"
    if not is_complete(path):
        return f"no valid {MARKER} marker or {STATE_FILE}"
    if is_unverifiable(path):
        return None
    files, why = _manifest_files(path)
    if why is not None:
        return why
    if not isinstance(files, dict) or not all(_entry(meta) for meta in files.values()):
        return f'{MANIFEST} is not {{"files": {{path: {{"sha256": ..., "size": ...}}}}}}'
    wanted = {rel: meta for rel, meta in files.items() if only is None or rel.startswith(only + "/")}
    if only is not None and not wanted:
        return f"no {only}/ files in its manifest"
    for rel, meta in sorted(wanted.items()):
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"{MANIFEST} names {rel!r}, outside the checkpoint"
        file = path / rel
        if not file.is_file():
            return f"{rel} is missing"
        if file.stat().st_size != meta["size"]:
            return f"{rel} has {file.stat().st_size} bytes, {meta['size']} were written"
        if sha256(file) != meta["sha256"]:
            return f"{rel} does not match its checksum{_linked_reference(file, rel)}"
    return None


def _linked_reference(file: Path, rel: str) -> str:
    """What a changed file of a checkpoint's hard link of the KL reference (``kept_inputs``) is:
    the user's model.reference_path edited in place (the same file), not a damaged checkpoint."""
    if rel.split("/", 1)[0] != "initial_reference" or file.stat().st_nlink < 2:
        return ""
    return (" (a hard link of the KL reference, model.reference_path: that model's file was changed in place "
            "since; put it back as it was, or resume with --resume-weights-only to take the new one)")


def _manifest_files(path: Path) -> tuple[Any, str | None]:
    """(the manifest's ``files``, None) when ``MANIFEST.json`` matches the checksum ``path``'s
    marker holds, else (None, why): what ``verify`` and ``_previous_manifest`` both trust."""
    try:
        if sha256(path / MANIFEST) != json.loads((path / MARKER).read_text())["manifest_sha256"]:
            return None, f"{MANIFEST} does not match the checksum in {MARKER}"
        return json.loads((path / MANIFEST).read_text())["files"], None
    except FileNotFoundError:
        return None, f"{MANIFEST} is missing"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None, f"{MANIFEST} is unreadable"


def _entry(meta: Any) -> bool:
    """A manifest entry as ``_manifest`` writes it: a hex digest and a byte count."""
    return (isinstance(meta, dict) and isinstance(meta.get("sha256"), str)
            and isinstance(meta.get("size"), int) and not isinstance(meta.get("size"), bool))


def not_a_checkpoint(path: Path) -> tuple[str, str] | None:
    """(what is wrong, how to fix it) when ``path`` is not a checkpoint folder at all: missing, a
    file, a run's or a checkpoints folder; None when it looks like one (``verify`` then checks
    it). Why: "no valid marker" for a mistyped path sent users to delete good checkpoints."""
    inside = complete_checkpoints(path) or complete_checkpoints(path / "checkpoints")
    if inside:
        return (f"{path} is a folder of checkpoints, not one checkpoint",
                f"pass one of them, e.g. --resume {inside[-1]} (the newest), or --resume without a "
                "path to resume the newest that verifies")
    if not path.exists():
        near = latest_checkpoint(path.parent) if path.parent.is_dir() else None
        return (f"{path} does not exist",
                f"check the path{f'; the newest checkpoint there is {near}' if near else ''}, or use "
                "--resume without a path to resume the newest checkpoint of train.output_dir")
    if not path.is_dir():
        return (f"{path} is a file, not a checkpoint folder",
                "pass a checkpoint folder (output_dir/checkpoints/step-NNNNNNNN), or --resume without a "
                "path; the config goes first: polyrl train CONFIG --resume")
    if not (path / MARKER).exists() and not (path / STATE_FILE).exists() and not (path / MODEL_DIR).exists():
        return (f"{path} is not a polyrl checkpoint (no {MARKER}, {STATE_FILE} or {MODEL_DIR}/ in it)",
                "pass a checkpoint folder (output_dir/checkpoints/step-NNNNNNNN), or --resume without a path")
    return None


def finish_interrupted_replacements(root: str | Path) -> list[Path]:
    """Put back the ``step-N`` folder of a same-step re-save that a kill cut between its two
    renames (``step-N`` -> ``.old-step-N``, then ``.tmp-step-N`` -> ``step-N``): the new one when it
    is complete, else the old one. Why: only ``step-*`` folders are resumed, so the next
    ``--resume`` found no checkpoint and started over at step 0 though both copies were whole.
    Call it holding the output_dir lock. Returns the folders put back."""
    root = Path(root)
    restored: list[Path] = []
    if not root.is_dir():
        return restored
    for old in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(".old-step-")):
        final = root / old.name.removeprefix(".old-")
        if final.exists():
            continue  # the replacement finished; the old copy is only left to delete
        tmp = root / f".tmp-{final.name}"
        if tmp.is_dir() and is_complete(tmp) and verify(tmp) is None:
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, final)
        _fsync_dir(root)
        restored.append(final)
    return restored


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoints under ``root`` with a valid marker (not yet checksum-verified), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(root: str | Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def newest_verified(root: str | Path, only: str | None = None) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the newest checkpoint whose files match its manifest, [(newer ones skipped, why)])."""
    skipped: list[tuple[Path, str]] = []
    root = Path(root)
    candidates = sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-")),
                        key=lambda p: p.name) if root.is_dir() else []
    for path in reversed(candidates):
        problem = verify(path, only=only)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def read_state(path: Path) -> dict[str, Any]:
    return json.loads((path / STATE_FILE).read_text())


#: The name prefix of a pruned checkpoint being deleted (``prune``).
DELETING = ".deleting-"


def remove_pruned_leftovers(root: str | Path) -> None:
    """Delete the ``.deleting-step-*`` folders a kill left half-deleted during ``prune``. Only
    pruned checkpoints get that name, so no kept checkpoint is touched."""
    root = Path(root)
    if root.is_dir():
        for leftover in root.glob(f"{DELETING}step-*"):
            shutil.rmtree(leftover, ignore_errors=True)


#: The name ``checkpoint_dir`` gives a checkpoint: ``step-`` and the step number.
_STEP_NAME = re.compile(r"step-(\d+)")


def remove_unmarked_leftovers(root: str | Path) -> list[Path]:
    """Delete the ``step-N`` folders without any ``COMPLETE`` file that are older than the newest
    complete checkpoint: what an earlier polyrl's pruning left when killed part-way through
    deleting one in place (before ``.deleting-`` existed). Why: no prune counts a folder without a
    marker, so it stayed on disk for good. Only those: checkpoints are written in ``.tmp-step-N``
    and marked before they take their name, and pruning deletes the oldest, so an unmarked folder
    below a complete one was never going to be completed; one newer than every complete checkpoint
    is left as it is (the resume skips it with a warning, and a save of that step replaces it), as
    is one whose marker is there but damaged (its files may still be worth saving by hand). Call it
    holding the output_dir lock. Returns the folders deleted."""
    root = Path(root)
    if not root.is_dir():
        return []
    # named exactly as polyrl names a checkpoint (``checkpoint_dir``): "step-00000004-merged" is a
    # user's folder, which a prefix match deleted with a warning
    unmarked = [p for p in sorted(root.iterdir())
                if _STEP_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
                and not (p / MARKER).exists() and not (p / MARKER).is_symlink()]
    complete = complete_checkpoints(root) if unmarked else []  # parsed only when there is one to judge
    newest = max((int(m.group(1)) for p in complete if (m := _STEP_NAME.fullmatch(p.name))), default=None)
    doomed = [p for p in unmarked if newest is not None and int(p.name.removeprefix("step-")) < newest]
    removed = []
    for leftover in doomed:
        target = root / f"{DELETING}{leftover.name}"
        try:
            os.replace(leftover, target)
        except OSError:
            continue
        removed.append(leftover)
    if removed:
        _fsync_dir(root)
        remove_pruned_leftovers(root)
    return removed


def prune(root: str | Path, keep: int, protect: Sequence[Path] = ()) -> None:
    """Delete all but the newest ``keep`` complete checkpoints, and stale temp dirs. Called only
    after a save succeeded, so the newest kept one is always the one just written. ``protect``:
    checkpoints never deleted (a TRL run's best one), counted among the ``keep`` as transformers'
    ``rotate_checkpoints`` counts its best: the oldest others go first. Each one is
    renamed ``.deleting-step-N`` before its files go. Why: a kill part-way through deleting
    ``step-N`` in place left a folder without its marker, which no later prune counted as a
    checkpoint, so it stayed on disk for good; the renamed one is removed at the next start or
    save (``remove_pruned_leftovers``)."""
    root = Path(root)
    remove_pruned_leftovers(root)
    for stale in [*root.glob(".tmp-step-*"), *root.glob(".old-step-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    doomed = []
    kept = complete_checkpoints(root)
    spared = {p.resolve() for p in protect} | ({kept[-1].resolve()} if kept else set())
    excess = len(kept) - max(keep, len([p for p in kept if p.resolve() in spared])) if keep > 0 else 0
    for old in [p for p in kept if p.resolve() not in spared][:max(excess, 0)]:
        target = root / f"{DELETING}{old.name}"
        try:
            os.replace(old, target)
        except OSError:  # left in place: a complete checkpoint, pruned at the next save
            continue
        doomed.append(target)
    if doomed:
        _fsync_dir(root)
    for target in doomed:
        shutil.rmtree(target, ignore_errors=True)
