"""Tools the agent tests hand to a ``ToolBox``, shared so each is written once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


def calc(a: int, b: int) -> str:
    """Multiply two numbers.

    Args:
        a: the first factor
        b: the second factor
    """
    return str(a * b)


def stubborn_fetch(stop: threading.Event) -> Callable[[str], Awaitable[str]]:
    """An async tool ``fetch`` whose retry loop catches its own cancellation: it ends only once
    ``stop`` is set, whatever its caller does."""

    async def fetch(url: str) -> str:
        """Fetch, retrying on anything.

        Args:
            url: the address
        """
        while not stop.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
        return "gave up"

    return fetch
