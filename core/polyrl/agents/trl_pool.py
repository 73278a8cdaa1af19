"""The pool of TRL environment instances behind ``environment_factory`` (TRL's "construct once,
reset often": an instance serves one rollout after another, ``reset`` before each).

Each instance lives on a ``Worker`` of its own, made with it: its factory call, every ``reset``
and every tool call run on that one thread and its event loop, whichever episode drives it. Why:
an episode's own worker ends with the episode, and state an environment ties to its thread or
loop (an sqlite connection, an async client) must keep working in the next rollout. The episode's
thread forwards each call there and waits for it, so the episode's time limits still bound it.

An instance is taken by one rollout at a time (``take``) and handed back once its episode is over
(``put``, at the end of the rollout, after the rewards' last look: the next rollout samples only
after this one is scored). One whose call is still running then (abandoned past its time limit)
or whose ``reset`` failed is dropped, never handed out again; a new one replaces it when needed.
Its ``get_reward`` runs on its thread too (``Pool.owner``): TRL calls it on the thread ``reset``
ran on, and an sqlite connection ``reset`` made raised ``ProgrammingError`` on a reward thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from polyrl.agents.threads import CallRaised, Worker, finished

#: the caller's limit on a forwarded call: none of its own (the episode's env_timeout_s or
#: tool_timeout_s bounds the call that forwards it)
NO_LIMIT = 1e300


class Pooled:
    """One instance with the thread it lives on. ``running``: forwarded calls not yet returned;
    ``spoiled``: never hand it out again (a failed ``reset``, a call cancelled that may still run)."""

    def __init__(self, key: str | None, instance: Any, worker: Worker) -> None:
        self.key, self.instance, self.worker = key, instance, worker
        self.running = 0
        self.spoiled = False
        #: its worker was told to end (``close``): a call queued now would never run
        self.closed = False
        self.pid = os.getpid()  # a forked child (a reward run in one) has none of this worker's thread
        self._lock = threading.Lock()

    def close(self) -> None:
        """End its thread once the running call (if any) returns; no call is sent to it after."""
        self.closed = True
        self.worker.close()

    def _count(self, delta: int) -> None:
        with self._lock:
            self.running += delta

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the instance's thread (an awaitable it returns awaited on that thread's
        loop), from a thread that may block; what it raises is raised here as it is."""
        self._count(1)
        try:
            return self.worker.call_blocking(lambda: finished(fn()), NO_LIMIT)
        except CallRaised as raised:
            raise raised.cause from None
        finally:
            self._count(-1)

    async def acall(self, fn: Callable[[], Any]) -> Any:
        """``call`` for a coroutine: cancelling it cancels the call on the instance's loop."""
        self._count(1)
        try:
            return await self.worker.call(lambda: finished(fn()), NO_LIMIT)
        except CallRaised as raised:
            raise raised.cause from None
        except asyncio.CancelledError:  # its coroutine was asked to stop, and may not have
            self.spoiled = True
            raise
        finally:
            self._count(-1)

    def forwarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` (a bound tool method) run on the instance's thread, with its name, docstring
        and signature (what its tool schema is built from)."""
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await self.acall(lambda: method(*args, **kwargs))
            return run_async

        @functools.wraps(method)
        def run(*args: Any, **kwargs: Any) -> Any:
            return self.call(lambda: method(*args, **kwargs))
        return run


class Pool:
    """The instances of each factory (``factories``: key -> factory; None: the single one), free
    or taken. Thread-safe: the episodes of a rollout take theirs concurrently."""

    def __init__(self, factories: Mapping[str | None, Callable[[], Any]]) -> None:
        self.factories = dict(factories)
        self._free: dict[str | None, list[Pooled]] = {key: [] for key in self.factories}
        #: instances made per key (the probe's included): the pool's size, dropped ones counted
        self.made: dict[str | None, int] = dict.fromkeys(self.factories, 0)
        self._lock = threading.Lock()
        self._closed = False
        #: every instance not yet dropped, free or taken, by ``id`` (``owner``)
        self._alive: dict[int, Pooled] = {}

    def add(self, pooled: Pooled) -> None:
        """A free instance made elsewhere (the probe of the factory)."""
        with self._lock:
            self.made[pooled.key] += 1
            self._free[pooled.key].append(pooled)
            self._alive[id(pooled.instance)] = pooled

    def take(self, key: str | None) -> Pooled:
        """A free instance of ``key``'s factory, or a new one (made on a new thread of its own);
        what the factory raises is raised here. A free one whose call still runs (a ``get_reward``
        abandoned past its reward's time limit) is dropped, not handed out: the next rollout's
        ``reset`` would wait behind it."""
        busy: list[Pooled] = []
        try:
            with self._lock:
                while self._free[key]:
                    pooled = self._free[key].pop()
                    if pooled.running == 0 and not pooled.spoiled:
                        return pooled
                    busy.append(pooled)
                    self._alive.pop(id(pooled.instance), None)
        finally:
            for dropped in busy:
                dropped.close()
        pooled = make(key, self.factories[key])
        with self._lock:
            self.made[key] += 1
            self._alive[id(pooled.instance)] = pooled
        return pooled

    def owner(self, instance: Any) -> Pooled | None:
        """The pooled entry of ``instance`` while its thread still takes calls, in the process that
        made it; else None (call it where you are)."""
        with self._lock:
            pooled = self._alive.get(id(instance))
        if pooled is None or pooled.instance is not instance or pooled.closed or pooled.pid != os.getpid():
            return None
        return pooled

    def put(self, pooled: Pooled) -> None:
        """Hand ``pooled`` back: free again, unless a call of its still runs or it is spoiled."""
        with pooled._lock:
            usable = not pooled.spoiled and pooled.running == 0
        with self._lock:
            if usable and not self._closed:
                self._free[pooled.key].append(pooled)
                return
            self._alive.pop(id(pooled.instance), None)
        pooled.close()  # its thread ends once the running call returns

    def close(self) -> None:
        """End the free instances' threads (those taken end when handed back). Why: a worker's
        thread waits for calls for ever, and a trainer built and dropped would leave them behind."""
        with self._lock:
            self._closed = True
            free = [pooled for pooled_list in self._free.values() for pooled in pooled_list]
            for pooled_list in self._free.values():
                pooled_list.clear()
            for pooled in free:
                self._alive.pop(id(pooled.instance), None)
        for pooled in free:
            pooled.close()


def make(key: str | None, factory: Callable[[], Any]) -> Pooled:
    """A new instance of ``factory`` made on a new thread of its own; raises what it raises."""
    worker = Worker(name="polyrl-trl-env")
    try:
        instance = worker.call_blocking(factory, NO_LIMIT)
    except CallRaised as raised:
        worker.close()
        raise raised.cause from None
    except BaseException:
        worker.close()
        raise
    return Pooled(key, instance, worker)


__all__ = ["NO_LIMIT", "Pool", "Pooled", "make"]
