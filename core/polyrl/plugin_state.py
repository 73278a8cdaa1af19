"""Process-wide state that plugin code (a tool, an environment, a reward function) may change,
set back after it.

Why: the working folder and ``sys.stdout``/``sys.stderr`` are the whole process's, not the calling
thread's. An environment whose ``reset`` did ``os.chdir(workdir)`` (a coding task's usual first
line) moved the trainer with it: every file the run then wrote by a relative path
(``train.output_dir`` is ``runs/polyrl`` by default: checkpoints, metrics) went into the
environment's folder, silently. Two tool calls at once that each capture output with
``contextlib.redirect_stdout``/``redirect_stderr`` (not thread-safe: each restores what it found)
left the streams pointing at one call's buffer for good: every later warning and the run's
``error:`` line were written into it, never shown.

Each call on a ``threads.Worker`` (tools, environments) and on a reward thread
(``rewards.guard.call_guarded``) is bracketed by ``enter``/``leave``: the state to keep is the
one the process had when the first of the awaited calls then running began, and it is set back,
with a warning (once per process) naming the fix, as soon as no awaited call runs (``leave``), or
when the last one is abandoned past its time limit (``abandoned``: one that moved the folder and
then hung). A call's own capture is never cut short by another call ending; a stream it closed
is opened again on its descriptor; streams the trainer itself replaces meanwhile (the progress
bar's) are told (``streams_replaced``) and kept as the trainer's. What this cannot undo: while such
a call runs, the folder and the streams are its own for every thread (the run's own paths are
absolute from its start: ``polyrl.run_paths``); what a call changes after it was abandoned stays
until the next awaited call ends.

Below the streams, the descriptors 1 and 2 themselves are the process's too: a call that closed
one (``os.close(2)``) ended the run with exit code 1 and nothing said (the ``error:`` line had
nowhere to go); one that pointed it elsewhere (``os.dup2(devnull, 2)``) silenced every later line.
A duplicate of each is kept from the first plugin call on (taken anew when the descriptor names
another file as a call begins), and put back (``os.dup2``) where the descriptor is closed or names
another file as the calls end. What this cannot undo: a file another
thread opened while descriptor 2 was closed may have been given number 2; it is replaced too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

from polyrl.logs import get_logger

log = get_logger(__name__)

_lock = threading.Lock()
_awaited = 0  # plugin calls under way that a caller still waits for (not abandoned)
_home: tuple[str | None, Any, Any] | None = None  # (folder, stdout, stderr) when the first of them began
_warned = False
#: the descriptor each kept stream wrote to (by ``id``), to open again one that plugin code closed
_descriptors: dict[int, int] = {}
#: descriptor number (1, 2) -> (a duplicate of it, (st_dev, st_ino) of its file) as plugin calls began
_kept_fds: dict[int, tuple[int, tuple[int, int]]] = {}


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was deleted under the process
        return None


def enter() -> None:
    """A plugin call begins: the process's state now is the one to keep, unless awaited calls
    already run (then the one kept when the first of them began)."""
    global _awaited, _home
    with _lock:
        if _awaited == 0:
            _home = (_cwd(), sys.stdout, sys.stderr)
            _descriptors.clear()
            _descriptors.update({id(s): fd for s in (sys.stdout, sys.stderr) if (fd := _descriptor(s)) is not None})
            _keep_fds()
        _awaited += 1


def leave(where: str, awaited: bool) -> None:
    """A plugin call on thread ``where`` returned or raised (``awaited``: its caller still waited
    for it); the state set back if it was the last awaited call running. One abandoned earlier
    sets nothing back as it ends: the trainer went on meanwhile, and its own state then (a
    reward's captured stderr, say) is not the plugin's to undo; the next call's end does."""
    global _awaited
    with _lock:
        _awaited -= int(awaited)
        changed = _set_back() if awaited and _awaited == 0 else []
    _warn(where, changed)


def abandoned(where: str = "a call abandoned past its time limit") -> None:
    """A running call was given up (past its time limit): it is no longer waited for, so the state
    is set back now if no awaited call runs (it may have moved the folder before it hung)."""
    global _awaited
    with _lock:
        _awaited -= 1
        changed = _set_back() if _awaited == 0 else []
    _warn(where, changed)


def streams_replaced(old: tuple[Any, Any], new: tuple[Any, Any]) -> None:
    """The trainer's own code replaced ``(sys.stdout, sys.stderr)`` ``old`` by ``new`` (the progress
    display: rich wraps both in a ``FileProxy`` while it draws, and puts them back as it ends) while
    plugin calls may run: the streams kept for them follow. Why: a tool call under
    ``generation.overlap`` that began while the bar was drawn and ended after it was gone set back
    the bar's retired proxies, which sent every later line of stdout (the run's summary) to stderr,
    under a warning blaming the plugin for a change that was the trainer's."""
    global _home
    with _lock:
        if _awaited == 0 or _home is None:
            return
        folder, stdout, stderr = _home
        _home = (folder, new[0] if stdout is old[0] else stdout, new[1] if stderr is old[1] else stderr)
        _descriptors.update({id(s): fd for s in new if (fd := _descriptor(s)) is not None})


def _set_back() -> list[str]:
    """Under ``_lock``: the kept state restored where it changed; what changed."""
    if _home is None:
        return []
    folder, stdout, stderr = _home
    reopened: dict[int, Any] = {}  # by the kept stream's id: sys.stdout is sys.stderr under `polyrl train`
    changed = _restore_fds()  # first: a stream opened again below needs its descriptor
    now = _cwd()
    if folder is not None and now != folder:
        try:
            os.chdir(folder)
            changed.append(f"the working folder (os.chdir to {now})")
        except OSError:  # the trainer's own folder is gone: nothing to go back to
            pass
    for name, kept in (("stdout", stdout), ("stderr", stderr)):
        closed = _closed(kept)
        if getattr(sys, name) is not kept or closed:
            if closed and id(kept) not in reopened:
                reopened[id(kept)] = _open_again(kept, _descriptors.get(id(kept)))
            setattr(sys, name, reopened[id(kept)] if closed else kept)
            changed.append(f"sys.{name}" + (" (closed it)" if closed else ""))
    return changed


def _identity(fd: int) -> tuple[int, int] | None:
    """The file descriptor ``fd`` names (device, inode), or None when it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _keep_fds() -> None:
    """Under ``_lock``: a duplicate of descriptors 1 and 2 as they are now, where not kept already.
    One that is closed now keeps the duplicate taken before (a call abandoned past its time limit
    may have closed it since: the next calls' end puts it back); one naming another file than the
    kept one (the trainer's own change, a test's capture) is kept anew."""
    for number in (1, 2):
        identity = _identity(number)
        kept = _kept_fds.get(number)
        if identity is None or (kept is not None and kept[1] == identity == _identity(kept[0])):
            continue
        try:
            duplicate = os.dup(number)
        except OSError:  # out of descriptors: the one kept before, if any, stays
            continue
        if kept is not None and _identity(kept[0]) == kept[1]:  # still ours: a closed one's number may be another's
            with contextlib.suppress(OSError):
                os.close(kept[0])
        _kept_fds[number] = (duplicate, identity)


def _restore_fds() -> list[str]:
    """Under ``_lock``: descriptors 1 and 2 put back where plugin code closed them or pointed them
    at another file; what changed."""
    changed = []
    for number, (duplicate, identity) in list(_kept_fds.items()):
        now = _identity(number)
        if now == identity:
            continue
        if _identity(duplicate) != identity:  # the duplicate itself closed (os.closerange(3, ...)), its number reused
            del _kept_fds[number]
            continue
        try:
            os.dup2(duplicate, number)
        except OSError:
            continue
        changed.append(f"file descriptor {number} ({'closed it' if now is None else 'pointed it at another file'})")
    return changed


def _closed(stream: Any) -> bool:
    try:
        return bool(stream.closed)
    except Exception:  # noqa: BLE001 - a stream object of someone else's without the attribute
        return False


def _descriptor(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except Exception:  # noqa: BLE001 - an in-memory stream (a test's capture), or closed already
        return None


def _open_again(stream: Any, fd: int | None) -> Any:
    """A stream in place of ``stream``, which plugin code closed (``sys.stderr.close()``: every later
    write, the run's ``error:`` line included, raised "I/O operation on closed file" and the process
    ended on "lost sys.stderr"): a new one on the descriptor it wrote to (``fd``, read as the call
    began), which Python's own streams leave open when closed."""
    if fd is None:
        return stream
    try:
        return open(fd, "w", buffering=1, encoding=getattr(stream, "encoding", None) or "utf-8",
                    errors="backslashreplace", closefd=False)
    except OSError:  # the descriptor itself is closed: nothing left to write to
        return stream


def _warn(where: str, changed: list[str]) -> None:
    """The warning, once per process. Never raises: it runs on a worker's thread, which a stream
    that cannot be written (closed under it) must not end."""
    global _warned
    with _lock:
        if not changed or _warned:
            return
        _warned = True
    with contextlib.suppress(Exception):
        log.warning(f"plugin code changed {' and '.join(changed)}, which the whole process shares; set back "
                    "(said once)", thread=where,
                    fix="use absolute paths or subprocess's cwd= instead of os.chdir, and capture output in a "
                        "subprocess rather than with contextlib.redirect_stdout/redirect_stderr (not thread-safe: "
                        "tool calls run at once); leave descriptors 1 and 2 open where they are (no os.close, "
                        "os.dup2 onto them)")
