"""One trainer per output directory: an advisory ``flock`` held for the whole run.

Why flock: the kernel releases it when the holder dies (even by ``kill -9``), so a stale lock
never blocks the next run, and nothing has to guess whether a recorded pid is still alive. The
holder's pid is written into the file only to name it in the error a second trainer gets.

The lock belongs to the process: several ``Trainer`` objects of one process on one directory
share it (a test or notebook that stops one and resumes in another); another process is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from polyrl.errors import ConfigError, PolyrlError

LOCK_FILE = ".polyrl.lock"
OUTPUT_DIR_BUSY_FIX = "wait for that run to finish (or stop it), or give this run another output_dir"


class OutputDirBusy(ConfigError):
    """Another live process holds the output directory."""


#: lock file (resolved) -> [fd, holders in this process]
_HELD: dict[str, list[int]] = {}


class OutputDirLock:
    """``acquire()`` takes the lock (idempotent per object); ``release()`` drops this object's hold."""

    def __init__(self, output_dir: Path) -> None:
        self.path = Path(output_dir) / LOCK_FILE
        self._key: str | None = None

    @property
    def held(self) -> bool:
        return self._key is not None

    def acquire(self) -> None:
        if self._key is not None:
            return
        check_output_dir(self.path.parent)
        key = str(self.path.parent.resolve() / LOCK_FILE)
        if key in _HELD:
            _HELD[key][1] += 1
            self._key = key
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _refuse_other_kind(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise unwritable(self.path.parent, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutputDirBusy(
                f"output_dir {self.path.parent} is in use by another trainer (pid {holder})",
                field="train.output_dir",
                fix=OUTPUT_DIR_BUSY_FIX,
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # a full disk: the lock still holds, only the pid note is missing
            pass
        _HELD[key] = [fd, 1]
        self._key = key

    def release(self) -> None:
        if self._key is None:
            return
        held = _HELD[self._key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[self._key]
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])
        self._key = None


def _refuse_other_kind(path: Path) -> None:
    """A lock path that is no regular file (a folder, a FIFO, a socket) is one error naming it. Why:
    a folder there was "cannot write to output_dir ...: Is a directory. Fix: free space or make it
    writable", naming neither the entry nor what to do; a FIFO took the lock without a word."""
    try:
        kind = os.stat(path).st_mode
    except FileNotFoundError:  # no lock file yet (or a link to nowhere: open makes its file)
        return
    if not stat.S_ISREG(kind):
        what = "a folder" if stat.S_ISDIR(kind) else "not a regular file"
        raise ConfigError(f"output_dir {path.parent} holds {path.name}, {what}, where the run keeps its lock file",
                          field="train.output_dir",
                          fix=f"remove {str(path)!r} (polyrl makes it as a file), or point train.output_dir "
                              "(--output-dir) elsewhere")


@contextlib.contextmanager
def held_while_writing(output_dir: Path, main_process: bool = True) -> Iterator[None]:
    """The output_dir lock held around what is written there before a run starts (``polyrl.trl``
    saves the script's model objects and tokenizers): a run holding the directory refuses the
    writer before any of its files is replaced (they were replaced, and only ``train()`` was
    refused), and no run starts there mid-write. Under a launcher rank 0 takes it, as for the run
    (``main_process``); the other ranks' saves of the same objects land beside rank 0's."""
    lock = OutputDirLock(Path(output_dir))
    if main_process:
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def check_output_dir(output_dir: Path) -> None:
    """An output_dir that can never be a run's folder is one error naming what it is, before any
    model loads: a symlink loop was a traceback (``resolve()`` in the trackers' run name), a file
    "cannot write ...: File exists" with a fix about free space, once the models had loaded."""
    path = Path(output_dir)
    try:
        path.resolve(strict=False)
        exists = path.exists()
    except (OSError, RuntimeError) as exc:  # ELOOP (RuntimeError before Python 3.13's resolve)
        raise ConfigError(f"output_dir {path} cannot be followed: {getattr(exc, 'strerror', None) or exc}",
                          field="train.output_dir",
                          fix="remove the looping symlink, or point train.output_dir (--output-dir) at a folder") from None
    _refuse_link_to_nowhere(path, exists)
    blocking = path if exists else next((p for p in path.parents if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        what = "is a file" if blocking == path else f"is inside {blocking}, a file"
        raise ConfigError(f"output_dir {path} {what}, not a folder", field="train.output_dir",
                          fix="move the file away, or point train.output_dir (--output-dir) at a folder")
    if blocking is not None:
        _check_writable(path, blocking)


def _refuse_link_to_nowhere(path: Path, exists: bool) -> None:
    """An output_dir that is (or lies below) a symlink whose target is gone is one error naming the
    link and its target. Why: the check passed it (the folder above takes entries) and the run,
    once its models had loaded, failed to make the folder: "cannot write to output_dir ...: File
    exists. Fix: free space or make it writable", naming neither the link nor what to do."""
    if exists:
        return
    link = next((p for p in (path, *path.parents) if p.is_symlink() and not p.exists()), None)
    if link is None:
        return
    target = os.readlink(link)
    where = "is" if link == path else f"is inside {link},"
    raise ConfigError(f"output_dir {path} {where} a symlink to {target!r}, a path that does not exist",
                      field="train.output_dir",
                      fix=f"make the folder it points to (mkdir -p {shlex.quote(str(link.parent / target))}), "
                          f"remove the link, or point train.output_dir (--output-dir) elsewhere")


def _check_writable(path: Path, folder: Path) -> None:
    """The run's folder (or the nearest one above it that exists, where it will be made) takes a
    new entry, else ``unwritable``. Why a real folder made and removed at once, not ``os.access``:
    root passes ``os.access`` on a read-only mount or /proc, where mkdir still fails. Why here: a
    folder the run cannot write was refused only once the models had loaded (minutes for a large
    model), and ``polyrl launch --dry-run`` passed it."""
    try:
        probe = tempfile.mkdtemp(prefix=".polyrl-write-check-", dir=folder)
    except OSError as exc:
        raise unwritable(path, exc) from None
    with contextlib.suppress(OSError):
        os.rmdir(probe)


def unwritable(path: Path, exc: OSError) -> PolyrlError:
    """The one-line error for an output path the run cannot write (read-only, full, no rights)."""
    return ConfigError(
        f"cannot write to output_dir {path}: {exc.strerror or exc}",
        field="train.output_dir",
        fix="free space or make it writable, or point train.output_dir (--output-dir) elsewhere",
    )


def check_free(output_dir: Path) -> None:
    """Raise ``OutputDirBusy`` when another process holds ``output_dir`` now (``polyrl launch``
    asks before it starts any rank). Creates nothing: a directory without a lock file is free."""
    if not (Path(output_dir) / LOCK_FILE).is_file():
        return
    lock = OutputDirLock(Path(output_dir))
    lock.acquire()
    lock.release()
