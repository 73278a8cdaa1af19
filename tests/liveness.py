"""Wait for a call that can only return by cutting off something that never ends by itself.

Why not a stopwatch: the cut is the behaviour, and its returning at all shows it (what it cut off
would run for minutes or for ever). A bound on the elapsed time wide enough for a loaded CI
machine is loose anyway, and one tight enough fails under load. The bound here is a liveness
bound far past any limit the tests set: a broken cut fails the test instead of hanging the suite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
#: Far past the sub-second to few-second limits the tests set; not a measure of the machine.
BOUND_S = 120.0


def returns(call: Callable[[], T], bound_s: float = BOUND_S) -> T:
    """``call()``'s result (what it raised, raised again), run on a daemon thread; an
    ``AssertionError`` if it has not returned within ``bound_s``."""
    done: list[T] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            raised.append(exc)

    worker = threading.Thread(target=run, name="liveness-bound", daemon=True)
    worker.start()
    worker.join(bound_s)
    if raised:
        raise raised[0]
    assert done, f"still waiting after {bound_s:g} s for a call that can only return by a cut"
    return done[0]
