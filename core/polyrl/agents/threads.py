"""Plugin code (a tool, an environment) on a daemon thread, awaited with a time limit.

Why a thread: a call that never returns must not hang the run. The episode's event loop waits
for the thread with a deadline and, past it, *abandons* the call (a thread cannot be killed; a
daemon does not keep the process alive at exit). Whatever the code raises on its own thread,
``SystemExit``, ``KeyboardInterrupt`` and ``os._exit`` (intercepted there, as on reward threads)
included, comes back as ``CallRaised``: it is the plugin's, never a real Ctrl-C, which Python
delivers to the main thread only.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

from polyrl.rewards import guard


class CallRaised(Exception):
    """The code raised ``cause`` (any BaseException)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause


class CallTimedOut(Exception):
    """The code did not return within the time limit; its thread was abandoned."""


async def _awaited(value: Any) -> Any:
    return await value


_local = threading.local()  # a Worker thread's own event loop


def finished(value: Any) -> Any:
    """``value``, or what it resolves to when awaitable (run to the end on this thread's own event
    loop, so an ``async def`` that blocks its loop is bounded like a plain function). On a
    ``Worker`` that loop is the worker's, the same for every call: what an async environment makes
    on it in ``reset`` (a client, a lock) still works in ``step``."""
    if not inspect.isawaitable(value):
        return value
    loop = getattr(_local, "loop", None)
    return loop.run_until_complete(_awaited(value)) if loop is not None else asyncio.run(_awaited(value))


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(CallRaised(value))


class Worker:
    """One daemon thread, with its own event loop, that runs one plugin object's calls in order
    (an environment's factory, ``reset`` and every ``step``; a tracker's ``create``, logs, ``close``).

    Why one per object rather than one per call: such an object has state, and state is often tied
    to the thread or the loop that made it (an sqlite connection refuses any other thread, an async
    client any other loop). A call past its limit abandons the worker with it (the object is
    unusable then)."""

    def __init__(self, name: str = "polyrl-env") -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[bool, Any], None]] | None] = \
            queue.SimpleQueue()
        guard.install_exit_guard()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        guard.register_reward_thread()  # os._exit here raises instead of ending the run
        loop = _local.loop = asyncio.new_event_loop()
        try:
            while (job := self._jobs.get()) is not None:
                fn, settle = job
                try:
                    outcome = (True, fn())
                except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, RewardExit included
                    outcome = (False, exc)
                settle(*outcome)
        finally:
            guard.unregister_reward_thread()
            try:
                loop.close()
            except Exception:  # noqa: BLE001 - a loop the environment left running
                pass

    async def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``fn()`` on this worker; its result, or ``CallRaised`` / ``CallTimedOut``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value)
            except RuntimeError:  # the loop is gone: nobody waits for this abandoned call
                pass

        self._jobs.put((fn, settle))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:  # only wait_for's: the code's own errors arrive as CallRaised
            raise CallTimedOut(fn) from None

    def call_blocking(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``call`` for code outside an event loop. The caller waits on an Event, so a signal handler
        still runs meanwhile and a real Ctrl-C raises here, in the caller."""
        done, outcome = threading.Event(), []

        def settle(ok: bool, value: Any) -> None:
            outcome.append((ok, value))
            done.set()

        self._jobs.put((fn, settle))
        if not done.wait(min(timeout_s, threading.TIMEOUT_MAX)):  # a larger wait is an OverflowError
            raise CallTimedOut(fn)
        ok, value = outcome[0]
        if not ok:
            raise CallRaised(value)
        return value

    def close(self) -> None:
        """Let the thread end once its current call (if any) returns."""
        self._jobs.put(None)


async def call_in_thread(fn: Callable[[], Any], timeout_s: float, name: str = "polyrl-plugin") -> Any:
    """``fn()`` on a fresh daemon thread (a one-call ``Worker``); its result, or ``CallRaised`` /
    ``CallTimedOut``."""
    worker = Worker(name=name)
    try:
        return await worker.call(fn, timeout_s)
    finally:
        worker.close()


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
