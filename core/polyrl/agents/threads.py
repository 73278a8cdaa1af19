"""Plugin code (a tool, an environment) on a daemon thread, awaited with a time limit.

Why a thread: a call that never returns must not hang the run. The episode's event loop waits
for the thread with a deadline and, past it, *abandons* the call (a thread cannot be killed; a
daemon does not keep the process alive at exit). Whatever the code raises on its own thread,
``SystemExit``, ``KeyboardInterrupt`` and ``os._exit`` (intercepted there, as on reward threads)
included, comes back as ``CallRaised``: it is the plugin's, never a real Ctrl-C, which Python
delivers to the main thread only. An ``async def`` runs on that thread's own event loop
(``finished``): a ``CancelledError`` of its own is its error too, and past the limit (or when the
awaiting side is itself cancelled) its task is cancelled there; one that ignores that is abandoned
like a plain function, never awaited by the caller's loop.

The process's working folder and ``sys.stdout``/``sys.stderr``, which the code may change, are
set back once no awaited call runs (``plugin_state``). A child process the code forks that returns
(or raises, ``sys.exit`` included) back onto the worker's thread ends there, with the call's exit
code (``_leave_forked_child``).

A call given up before its turn on the thread came (queued behind an abandoned one) is never run.
``CallTimedOut.abandoned`` says whether the code is still running; ``ended`` is set once it is not.
``LateCalls`` counts the abandoned calls still running and caps them (``MAX_ABANDONED``): the tool
box and the episode runner's environment calls both start no call past it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from polyrl import plugin_state
from polyrl.rewards import guard


class CallRaised(Exception):
    """The code raised ``cause`` (any BaseException)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause


class CallTimedOut(Exception):
    """The code did not return within the time limit. ``abandoned``: it is still running (its thread
    cannot be stopped; an async one ignored its cancellation), until ``ended`` is set; False when it
    never started or stopped on being cancelled."""

    def __init__(self, fn: Any, abandoned: bool = True, ended: threading.Event | None = None) -> None:
        super().__init__(fn)
        self.abandoned = abandoned
        self.ended = ended if ended is not None else threading.Event()


#: Seconds an async call cancelled at its time limit gets to stop before it counts as abandoned.
#: Why a grace: cancelling is a request its code handles on its own thread (``finally`` blocks, a
#: connection closed); most stop within it, and only those that do not keep a thread busy.
CANCEL_GRACE_S = 0.2

#: Longest the caller sleeps while it waits for a call (its event loop, or ``call_blocking``'s
#: thread). Why: Python runs signal handlers on the main thread only, and the OS may hand a Ctrl-C to
#: any thread that does not block it (always another one while the main thread starts a thread:
#: glibc blocks every signal meanwhile). There it only sets Python's flag and wakes nothing, so a
#: caller asleep until the call's time limit would notice the Ctrl-C a tool's 60 s later.
WAKE_S = 0.2

_jobs_lock = threading.Lock()  # a job's state changes on the worker's thread and on the caller's


class _Job:
    """One call queued on a ``Worker``: its code, how to report its outcome, and its state."""

    __slots__ = ("fn", "settle", "started", "given_up", "task", "ended", "awaited")

    def __init__(self, fn: Callable[[], Any], settle: Callable[[bool, Any], None]) -> None:
        self.fn, self.settle = fn, settle
        self.started = False  # the worker began running it
        self.given_up = False  # the caller stopped waiting (time limit, or the caller was cancelled)
        self.task: asyncio.Task[Any] | None = None  # the coroutine it runs on the worker's loop, if any
        self.ended = threading.Event()  # it returned or raised, or will never run
        self.awaited = False  # it runs and its caller waits for it (``plugin_state``'s count)

    def give_up(self) -> bool:
        """Stop waiting for this call: never run it if it has not started, cancel its coroutine if
        it runs one. Whether it is still running."""
        with _jobs_lock:
            self.given_up = True
            if not self.started:
                self.ended.set()
            task = self.task
            awaited, self.awaited = self.awaited, False
        if awaited:  # abandoned while running: what it changed of the process's state is set back now
            plugin_state.abandoned()
        if task is not None:
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its loop is closed: the call is over
                pass
        return not self.ended.is_set()

    def cancellable(self) -> bool:
        with _jobs_lock:
            return self.task is not None


async def _awaited(value: Any) -> Any:
    return await value


_local = threading.local()  # a Worker thread's own event loop, and the job it runs now


def finished(value: Any) -> Any:
    """``value``, or what it resolves to when awaitable (run to the end on this thread's own event
    loop, so an ``async def`` that blocks its loop is bounded like a plain function). On a
    ``Worker`` that loop is the worker's, the same for every call: what an async environment makes
    on it in ``reset`` (a client, a lock) still works in ``step``; and a caller giving the call up
    cancels it there."""
    if not inspect.isawaitable(value):
        return value
    loop = getattr(_local, "loop", None)
    if loop is None:
        return asyncio.run(_awaited(value))
    task = loop.create_task(_awaited(value))
    job: _Job | None = getattr(_local, "job", None)
    if job is not None:
        with _jobs_lock:
            job.task = task
            if job.given_up:
                task.cancel()
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved here: asyncio would log it as never retrieved
        raise
    finally:
        if job is not None:
            with _jobs_lock:
                job.task = None


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(CallRaised(value))


async def _wait_awake(future: asyncio.Future[Any], timeout_s: float) -> None:
    """Wait for ``future`` at most ``timeout_s``, the loop waking every ``WAKE_S`` (so a signal
    left pending by another thread is handled within it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not future.done() and (left := deadline - loop.time()) > 0:
        await asyncio.wait({future}, timeout=min(left, WAKE_S))


def _wait_event_awake(event: threading.Event, timeout_s: float) -> bool:
    """``event.wait(timeout_s)``, waking every ``WAKE_S`` as ``_wait_awake`` does."""
    deadline = time.monotonic() + timeout_s
    while not event.is_set() and (left := deadline - time.monotonic()) > 0:
        event.wait(min(left, WAKE_S))
    return event.is_set()


class Worker:
    """One daemon thread, with its own event loop, that runs one plugin object's calls in order
    (an environment's factory, ``reset`` and every ``step``; a tracker's ``create``, logs, ``close``).

    Why one per object rather than one per call: such an object has state, and state is often tied
    to the thread or the loop that made it (an sqlite connection refuses any other thread, an async
    client any other loop). A call past its limit abandons the worker with it (the object is
    unusable until that call ends: calls queued meanwhile wait, and those given up never run)."""

    def __init__(self, name: str = "polyrl-env") -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._running: _Job | None = None  # the call on the thread now
        guard.install_exit_guard()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        guard.register_reward_thread()  # os._exit here raises instead of ending the run
        owner = os.getpid()
        loop = _local.loop = asyncio.new_event_loop()
        try:
            while (job := self._jobs.get()) is not None:
                with _jobs_lock:
                    if job.given_up:  # its caller left before its turn came: running it helps no one
                        continue
                    job.started = True
                    job.awaited = True  # until given up (``_Job.give_up``)
                    plugin_state.enter()
                _local.job = self._running = job
                try:
                    outcome = (True, job.fn())
                except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, RewardExit included
                    outcome = (False, exc)
                if os.getpid() != owner:  # a child the plugin forked came back here: it must not run polyrl
                    _leave_forked_child(outcome)
                with _jobs_lock:
                    awaited, job.awaited = job.awaited, False
                plugin_state.leave(threading.current_thread().name, awaited)
                _local.job = self._running = None
                job.ended.set()
                job.settle(*outcome)
        finally:
            guard.unregister_reward_thread()
            _close(loop)

    @property
    def late(self) -> bool:
        """A call given up past its time limit still runs here: a call queued now would wait for it."""
        job = self._running
        return job is not None and job.given_up and not job.ended.is_set()

    async def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``fn()`` on this worker; its result, or ``CallRaised`` / ``CallTimedOut``. Cancelling
        the caller gives the call up as its time limit does."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value)
            except RuntimeError:  # the loop is gone: nobody waits for this abandoned call
                pass

        job = _Job(fn, settle)
        self._jobs.put(job)
        try:
            # asyncio.wait inside, not wait_for: the future must outlive the time limit (see below)
            await _wait_awake(future, timeout_s)
        except asyncio.CancelledError:  # the caller's own cancellation (a Ctrl-C of the run)
            job.give_up()
            raise
        if not future.done():
            cancellable = job.cancellable()
            if job.give_up() and cancellable:  # an async call: give it a moment to stop on its cancel
                await asyncio.wait({future}, timeout=CANCEL_GRACE_S)
            raise CallTimedOut(fn, abandoned=not job.ended.is_set(), ended=job.ended)
        return future.result()

    def call_blocking(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``call`` for code outside an event loop. The caller waits on an Event (waking every
        ``WAKE_S``), so a signal handler still runs meanwhile and a real Ctrl-C raises here, in the caller."""
        done, outcome = threading.Event(), []

        def settle(ok: bool, value: Any) -> None:
            outcome.append((ok, value))
            done.set()

        job = _Job(fn, settle)
        self._jobs.put(job)
        if not _wait_event_awake(done, timeout_s):
            job.give_up()
            raise CallTimedOut(fn, abandoned=not job.ended.is_set(), ended=job.ended)
        ok, value = outcome[0]
        if not ok:
            raise CallRaised(value)
        return value

    def close(self) -> None:
        """Let the thread end once its current call (if any) returns."""
        self._jobs.put(None)


def _leave_forked_child(outcome: tuple[bool, Any]) -> None:
    """End a process the plugin's code forked (``os.fork()``) whose child returned from that code,
    or raised out of it (``sys.exit`` included), onto this worker's thread: with the call's exit
    code, at once (``os._exit``: no ``atexit`` handler or buffer of the parent's runs twice).
    Why: the child went on serving this worker, the only thread it has, waiting for calls that
    never come, for ever: an orphan holding a copy of the trainer's memory and its open files (a
    pipe reading the run's output never closed), however the run itself ended."""
    ok, value = outcome
    code = 0
    if not ok:
        code = 1
        value = value.cause if isinstance(value, Described) else value
        if isinstance(value, SystemExit):
            code = value.code if isinstance(value.code, int) else (0 if value.code is None else 1)
    guard.real_exit(code)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close a worker's loop once its calls are over, its code's leftover tasks cancelled first
    (given a moment to stop, as ``asyncio.run`` gives its own, but never waited for past it: a
    task ignoring its cancellation must not keep the thread)."""
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=CANCEL_GRACE_S))
    except BaseException:  # noqa: BLE001 - its code raising SystemExit on cancel, or a loop it left running
        pass
    try:
        loop.close()
    except Exception:  # noqa: BLE001 - a loop its code left running
        pass


async def call_in_thread(fn: Callable[[], Any], timeout_s: float, name: str = "polyrl-plugin") -> Any:
    """``fn()`` on a fresh daemon thread (a one-call ``Worker``); its result, or ``CallRaised`` /
    ``CallTimedOut``."""
    worker = Worker(name=name)
    try:
        return await worker.call(fn, timeout_s)
    finally:
        worker.close()


#: Calls left running past their time limit at once (per ``LateCalls``) past which no further call
#: starts until some end. Why: each holds a thread Python cannot stop; code that always hangs would
#: otherwise add a thread per call (a tool call, an episode's ``reset`` or ``step``) until the
#: process could start no more.
MAX_ABANDONED = 32


class LateCalls:
    """The calls of one kind of plugin code (a tool box's tools, an environment's calls) left
    running past their time limit, each until it ends, and the cap on them (``limit``): the
    caller asks ``full`` before it starts another call. Thread-safe (boxes extended from one box,
    and every episode of a run, share one)."""

    def __init__(self, limit: int = MAX_ABANDONED) -> None:
        self.limit = int(limit)
        self.total = 0  # calls ever abandoned
        self._ended: list[threading.Event] = []
        self._lock = threading.Lock()

    def add(self, timed_out: CallTimedOut) -> bool:
        """Count a timed-out call while it keeps running; whether it does (False: it never
        started, or stopped on being cancelled)."""
        if not timed_out.abandoned:
            return False
        with self._lock:
            self.total += 1
            self._ended.append(timed_out.ended)
        return True

    @property
    def running(self) -> int:
        """Abandoned calls that have not ended yet."""
        with self._lock:
            self._ended[:] = [ended for ended in self._ended if not ended.is_set()]
            return len(self._ended)

    @property
    def full(self) -> bool:
        """No call should start: ``limit`` abandoned calls are still running."""
        return self.running >= self.limit


def describe(exc: BaseException, run_goes_on: bool = True) -> str:
    """What the plugin code raised, in words (exits named as such, and by default that the run goes on)."""
    goes_on = " (the run goes on)" if run_goes_on else ""
    if isinstance(exc, guard.RewardExit):
        return f"os._exit({exc.code}){goes_on}"
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}){goes_on}"
    try:
        text = str(exc)
    except Exception as failed:  # noqa: BLE001 - plugin code: its exception's __str__ may raise too
        text = f"(its message cannot be shown: {type(failed).__name__})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Described(Exception):
    """What plugin code raised (``cause``) with its ``describe`` text, made on the code's own
    thread (``described``). Why there: an exception's message is the plugin's code too (its
    ``__str__``), which may hang or build megabytes; made on the caller's thread it ran outside the
    call's time limit (a tool raising one whose ``__str__`` blocked hung the step)."""

    def __init__(self, cause: BaseException, text: str) -> None:
        super().__init__(text)
        self.cause, self.text = cause, text


def described(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` whose exceptions (exits included) leave it as ``Described``, their text made here."""
    def run() -> Any:
        try:
            return fn()
        except BaseException as exc:  # noqa: BLE001 - the plugin's code, exits included
            raise Described(exc, describe(exc)) from None
    return run


def raised_text(raised: CallRaised) -> tuple[BaseException, str]:
    """What the code of a ``CallRaised`` raised, and ``describe``'s text of it (made on the code's
    thread when it ran ``described``)."""
    cause = raised.cause
    if isinstance(cause, Described):
        return cause.cause, cause.text
    return cause, describe(cause)
