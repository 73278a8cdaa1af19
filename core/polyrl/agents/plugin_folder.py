"""The process's working folder, set back after plugin code (a tool, an environment) changed it.

Why: ``os.chdir`` is process-wide, not the calling thread's. An environment whose ``reset`` did
``os.chdir(workdir)`` (a coding task's usual first line) moved the trainer along with it: every
file the run then wrote by a relative path (``train.output_dir`` is ``runs/polyrl`` by default:
checkpoints, metrics, the completions log) went into the environment's folder, silently, and a
``--resume`` from the usual place found nothing. Each call on a ``threads.Worker`` is bracketed by
``enter``/``leave``: the folder is the one the process had when the first of the calls running at
once began, and once a call returns it is set back there, with a warning (once per process) naming
the fix. What this cannot undo: while such a call runs, the folder is the plugin's for every thread.
"""

from __future__ import annotations

import os
import threading

from polyrl.logs import get_logger

log = get_logger(__name__)

_lock = threading.Lock()
_running = 0  # plugin calls under way (abandoned ones included: they may still change it)
_home: str | None = None  # the folder when the first of them began
_warned = False


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was deleted under the process
        return None


def enter() -> None:
    """A plugin call begins: the process's folder now is the one to keep, unless calls already run."""
    global _running, _home
    with _lock:
        if _running == 0:
            _home = _cwd()
        _running += 1


def leave(where: str) -> None:
    """A plugin call (on thread ``where``) returned or raised: the folder set back if it moved."""
    global _running, _warned
    with _lock:
        _running -= 1
        home, now = _home, _cwd()
        if home is None or now == home:
            return
        try:
            os.chdir(home)
        except OSError:  # the trainer's own folder is gone: nothing to go back to
            return
        warn, _warned = not _warned, True
    if warn:
        log.warning("plugin code changed the process's working folder (os.chdir), which the trainer shares; it was "
                    "set back (said once)", thread=where, changed_to=now, set_back_to=home,
                    fix="use absolute paths in the tool or environment (or subprocess's cwd=) instead of os.chdir")
