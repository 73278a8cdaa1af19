"""Which threads plugin code started: an environment's, a tool's or a reward's own threads.

Why: the ``polyrl`` program leaves past threads such code left running (``cli``'s exit grace: an
environment's ``threading.Thread(daemon=False)`` that never ends kept a finished run from exiting),
but it must wait for every other thread the interpreter waits for: the run's own and its
libraries' (a tracker uploading its last metrics, a callback's upload to the Hub), whose work is
lost if the process leaves under them. A thread is the plugin code's when it was started on a
thread that runs such code (``PLUGIN_THREADS``) or on a thread one of those started, however deep.
Recorded only once ``record_starts`` is called (the program does, never a library user's process).
"""

from __future__ import annotations

import threading
from typing import Any

#: Name prefixes of the threads polyrl runs plugin code on: an environment's calls
#: (``agents.episodes``, ``agents.setup``'s check, TRL's pool), a tool's calls (``agents.tools``)
#: and a reward's (``rewards.guard``, ``rewards.functions``). A tracker's thread is not one: what it
#: starts is the run's own (its writer must finish).
PLUGIN_THREADS = ("polyrl-env", "polyrl-trl-env", "polyrl-tool", "polyrl-reward", "polyrl-async-reward")

_MARK = "_polyrl_started_by_plugin"
_lock = threading.Lock()
_original_start: Any = None


def runs_plugin_code(thread: threading.Thread) -> bool:
    """Whether ``thread`` runs plugin code: one of polyrl's own (``PLUGIN_THREADS``), or one that
    plugin code started (recorded since ``record_starts``)."""
    return bool(getattr(thread, _MARK, False)) or thread.name.startswith(PLUGIN_THREADS)


def record_starts() -> None:
    """From now on, mark each thread started on a thread that runs plugin code (idempotent)."""
    global _original_start
    with _lock:
        if _original_start is not None:
            return
        original = _original_start = threading.Thread.start

        def start(self: threading.Thread) -> None:
            if runs_plugin_code(threading.current_thread()):
                setattr(self, _MARK, True)
            original(self)

        threading.Thread.start = start  # type: ignore[method-assign]


__all__ = ["PLUGIN_THREADS", "record_starts", "runs_plugin_code"]
