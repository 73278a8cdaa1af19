"""A tracker's code on a daemon thread of its own, each call awaited with a time limit.

Why: tracker libraries are third-party code on the run's critical path. One that blocks (a
dashboard that never answers) must not hang the run, and one that raises ``SystemExit``,
``KeyboardInterrupt`` or any other BaseException, or calls ``os._exit``, must not end it. On the
tracker's own thread, whatever it raises comes back as ``CallRaised``: a real Ctrl-C is delivered
to the main thread only, where the trainer's signal handler (or, outside a step, Python's
KeyboardInterrupt) still stops the run. Past the limit the call is abandoned (a thread cannot be
killed; a daemon does not keep the process alive at exit). One thread per tracker runs its calls
in order and keeps thread-bound state (an sqlite store) on the thread that made it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from polyrl.agents.threads import CallRaised, CallTimedOut
from polyrl.rewards import guard

__all__ = ["CallRaised", "CallTimedOut", "TrackerThread"]


class _Outcome:
    """One call's result, handed from the tracker's thread to the caller."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class TrackerThread:
    """One daemon thread that runs one tracker's calls (``create``, every log, ``close``) in order."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], _Outcome] | None] = queue.SimpleQueue()
        guard.install_exit_guard()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        guard.register_reward_thread()  # os._exit here raises instead of ending the run
        try:
            while (job := self._jobs.get()) is not None:
                fn, outcome = job
                try:
                    outcome.value, outcome.ok = fn(), True
                except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, os._exit included
                    outcome.value = exc
                outcome.done.set()
        finally:
            guard.unregister_reward_thread()

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``fn()`` on this thread; its result, or ``CallRaised`` / ``CallTimedOut``. The caller
        waits on an Event, so a signal handler still runs meanwhile and a real Ctrl-C raises here."""
        outcome = _Outcome()
        self._jobs.put((fn, outcome))
        if not outcome.done.wait(timeout_s):
            raise CallTimedOut(fn)
        if not outcome.ok:
            raise CallRaised(outcome.value)
        return outcome.value

    def close(self) -> None:
        """Let the thread end once its current call (if any) returns."""
        self._jobs.put(None)
