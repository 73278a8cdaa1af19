"""Running reward code so that it can neither hang the trainer nor end it.

Each reward call runs on a fresh daemon thread while the trainer's thread waits for it, waking
often enough to notice a timeout or a stop request (SIGINT/SIGTERM set the trainer's flag).

Why a thread and not a process: a process could be killed, but every user function and plugin
object would have to be picklable (closures, ``api.run`` lambdas and judge clients are not), its
arguments copied, and the ``log_metric`` callbacks relayed back. A thread runs any callable as
TRL runs it. The price: a thread cannot be killed, so one that times out or is cancelled is
*abandoned*: it keeps running in the background (a daemon: it does not keep the process alive)
while the trainer raises, checkpoints and exits. Reward code that is expected to hang in C or to
kill its own process should isolate itself (``code_tests`` runs samples in a sandboxed process),
or run in a forked child that can be killed (``[[rewards]] isolation = "process"``:
``polyrl.rewards.forked``, where the same timeout and stop rules apply).

The process's working folder and ``sys.stdout``/``sys.stderr``, which reward code may change
(``os.chdir``, ``contextlib.redirect_stdout`` left open, ``sys.stderr.close()``), are set back once
the call ends or is abandoned (``polyrl.plugin_state``, as after a tool's call); a child process the
reward forks that returns (or raises) onto the reward's thread ends there (``_leave_forked_child``).

``sys.exit`` in a reward raises ``SystemExit`` in its thread, which is caught and reported.
``os._exit`` would end the whole process at once (exit code as given, no checkpoint), so while
reward threads exist ``os._exit`` is replaced by a guard that raises ``RewardExit`` in a reward
thread and exits as before anywhere else (other threads, forked children).
"""

from __future__ import annotations

import os
import posix
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from polyrl import plugin_state
from polyrl.errors import PolyrlError

#: What ``os._exit`` was before the guard.
_REAL_EXIT = os._exit
_OWNER_PID = os.getpid()
_reward_threads: set[int] = set()
_lock = threading.Lock()


class RewardExit(BaseException):
    """``os._exit(code)`` called from reward code (a BaseException, like SystemExit)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class RewardCancelled(PolyrlError):
    """A stop was requested (SIGINT/SIGTERM) while a reward was running; the step is abandoned."""


class RewardTimedOut(Exception):
    """The call did not finish within its time limit (the thread is abandoned)."""


class RewardCallFailed(Exception):
    """The reward code raised (any BaseException, SystemExit included); ``cause`` is what it raised."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause


def _guarded_exit(code: int) -> None:
    if os.getpid() == _OWNER_PID and threading.get_ident() in _reward_threads:
        raise RewardExit(code)
    _REAL_EXIT(code)


def real_exit(code: int) -> NoReturn:
    """``os._exit`` itself, guard or not (a forked reward child ends with it)."""
    _REAL_EXIT(code)


def install_exit_guard() -> None:
    """Route ``os._exit`` through the guard (idempotent)."""
    global _OWNER_PID
    with _lock:
        if os._exit is not _guarded_exit:
            _OWNER_PID = os.getpid()
            os._exit = _guarded_exit  # type: ignore[assignment]
            posix._exit = _guarded_exit  # type: ignore[assignment]


def is_reward_thread() -> bool:
    return threading.get_ident() in _reward_threads


def register_reward_thread() -> None:
    """Mark the calling thread as running reward code (helper threads a reward starts itself)."""
    _reward_threads.add(threading.get_ident())


def unregister_reward_thread() -> None:
    _reward_threads.discard(threading.get_ident())


#: Seconds a running reward still gets after a stop request: a reward about to finish lets the
#: step complete (the usual graceful stop); a stuck one is abandoned.
STOP_GRACE_S = 5.0


class CallWatch:
    """One reward call's time limit and stop grace, checked while it runs (on a thread here, in a
    forked child in ``polyrl.rewards.forked``): ``check`` raises ``RewardCancelled`` once a stop
    request has lasted ``grace`` seconds, ``RewardTimedOut`` past ``timeout_s``."""

    def __init__(self, label: str, timeout_s: float, should_stop: Callable[[], bool], grace: float,
                 fate: str = "") -> None:
        self.label, self.timeout_s, self.should_stop, self.grace = label, timeout_s, should_stop, grace
        self.fate = fate  # what became of the call, for the cancel message, e.g. " (its process was killed)"
        self.start = time.monotonic()
        self.stop_seen: float | None = None

    def check(self) -> None:
        now = time.monotonic()
        if self.stop_seen is None and self.should_stop():
            self.stop_seen = now
        if self.stop_seen is not None and now - self.stop_seen >= self.grace:
            raise RewardCancelled(f"stop requested while reward {self.label!r} was running{self.fate}")
        if now - self.start > self.timeout_s:
            raise RewardTimedOut(self.label)


def call_guarded(fn: Callable[[], Any], *, label: str, timeout_s: float,
                 should_stop: Callable[[], bool] = lambda: False, poll_s: float = 0.05,
                 stop_grace_s: float | None = None) -> Any:
    """``fn()`` on a reward thread; its result, or:

    RewardCallFailed  it raised (SystemExit and os._exit, as RewardExit, included)
    RewardTimedOut    it ran longer than ``timeout_s`` (abandoned)
    RewardCancelled   ``should_stop()`` was true for ``stop_grace_s`` (default ``STOP_GRACE_S``)
                      while it ran (abandoned)
    """
    grace = STOP_GRACE_S if stop_grace_s is None else stop_grace_s
    box: dict[str, Any] = {}
    done = threading.Event()
    owner = os.getpid()
    awaited = _Awaited()

    def target() -> None:
        register_reward_thread()
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported in the caller's thread
            box["error"] = exc
        if os.getpid() != owner:  # a child the reward forked came back here: it must not run polyrl
            _leave_forked_child(box.get("error"))
        try:
            unregister_reward_thread()
            plugin_state.leave(threading.current_thread().name, awaited.end())  # before the caller goes on
        finally:
            done.set()

    install_exit_guard()
    thread = threading.Thread(target=target, name=f"polyrl-reward-{label}", daemon=True)
    watch = CallWatch(label, timeout_s, should_stop, grace)
    plugin_state.enter()
    try:
        thread.start()
        while not done.wait(poll_s):
            watch.check()
    except BaseException:  # timed out, cancelled, no thread to start, or a second Ctrl-C: abandoned
        if awaited.end():
            plugin_state.abandoned(f"reward {label!r}, abandoned")
        raise
    if "error" in box:
        raise RewardCallFailed(box["error"])
    return box.get("value")


class _Awaited:
    """Whether a reward call's caller still waits for it; ended once, by whichever comes first:
    the call ending (``plugin_state.leave``) or its caller giving it up (``plugin_state.abandoned``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._awaited = True

    def end(self) -> bool:
        """True the first time only: the one that ends it settles ``plugin_state``'s count."""
        with self._lock:
            was, self._awaited = self._awaited, False
            return was


def _leave_forked_child(error: BaseException | None) -> NoReturn:
    """End a process the reward forked (``os.fork()``) whose child returned from the reward or raised
    out of it (``sys.exit`` included) onto the reward's thread: at once, with the call's exit code
    (``os._exit``: no ``atexit`` handler or buffer of the parent's runs twice). Why: the child went
    on as a copy of the trainer with no main thread; ending that thread printed "Fatal Python
    error: init_threadstate" and a stack dump into the run's output."""
    code = 0
    if isinstance(error, SystemExit):
        code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    elif isinstance(error, RewardExit):
        code = error.code
    elif error is not None:
        code = 1
    _REAL_EXIT(code)
