"""An ``async def`` solution's calls, as the tests await them.

Why: the sample's coroutine stayed a handle in the tests, so ``asyncio.run(f(x))`` raised ValueError
("a coroutine was expected") and ``await f(x)`` TypeError: a right async solution scored 0. The
sample now runs a coroutine its call returned to its end, in an event loop of its own
(``server._awaited``), and answers ``["a", answer]``; the tests get a real coroutine of theirs
giving that answer, converted as any call's (``finished``). So the solution's code runs at the
call, not at the ``await`` (its order against the tests' other statements between the two may
differ), and a value merely claiming to be awaitable (its own ``__await__``) is no coroutine here."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any


def is_awaited(answer: object) -> bool:
    """Whether a call's encoded answer is an ``async def``'s (``["a", answer]``)."""
    return isinstance(answer, list) and len(answer) == 2 and answer[0] == "a"


async def _giving(value: Any) -> Any:
    return value


def finished(value: Any) -> Coroutine[Any, Any, Any]:
    """A coroutine of the tests' own that gives ``value`` (what ``asyncio.run`` and ``await`` take)."""
    return _giving(value)
