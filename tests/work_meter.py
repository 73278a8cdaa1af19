"""Count the work a call does, not the time it takes: tests of linear-time code that hold on a loaded machine.

Why not a stopwatch: a wall-clock limit wide enough for a busy CI machine is too wide to catch a slow
regression, and one tight enough fails under load. Why this count: CPython checks for a pending
signal at every Python function entry, loop back-edge and return from a C call, and the regex
engine every 4096 of its steps (``sre``'s ``MAYBE_CHECK_SIGNALS``; a big-int power or division
every few of its loops). With a signal kept pending, each check runs the handler once, so the
number of runs counts Python-level operations plus regex backtracking: the same on any machine,
under any load. A quadratic loop or a catastrophic regex counts in the millions where the linear
code counts in the thousands, and the budget stops it there instead of waiting minutes.

How the signal stays pending without recursion: the handler is C only (``print`` to a sink whose
``flush`` re-trips the signal through ``PyErr_SetInterruptEx``, no Python frame to check it again),
and each re-trip takes one item of a bounded iterator: its end raises in the measured call.
Not counted: work inside one C call that never checks signals (``str.find``, copying a string).
Main thread only: CPython runs signal handlers there.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import operator
import signal
import threading
import types
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_SIGNAL = signal.SIGUSR2
_OVER = "over budget"  # not an int: the trip after the last one raises ctypes.ArgumentError
_trip = ctypes.pythonapi.PyErr_SetInterruptEx
_trip.argtypes = [ctypes.c_int]
_trip.restype = ctypes.c_int


class WorkExceeded(AssertionError):
    """The call did more work than its budget allowed (it was stopped there)."""


def measured(call: Callable[[], T], budget: int) -> tuple[T, int]:
    """``call()``'s result and the signal checks it ran (see the module docstring); raises
    ``WorkExceeded`` once it runs ``budget`` of them."""
    assert threading.current_thread() is threading.main_thread(), "signal handlers run in the main thread"
    left = itertools.repeat(int(_SIGNAL), budget)
    rearm = map(_trip, itertools.chain(left, [_OVER])).__next__
    sink = types.SimpleNamespace(write=len, flush=rearm)
    previous = signal.signal(_SIGNAL, functools.partial(print, file=sink, sep="", end="", flush=True))
    try:
        _trip(int(_SIGNAL))
        result = call()
    except ctypes.ArgumentError as over:
        raise WorkExceeded(f"more than {budget} signal checks: stopped there") from over
    finally:
        signal.signal(_SIGNAL, {}.get)  # a C no-op takes the trip still pending
        signal.signal(_SIGNAL, previous)
    return result, budget - operator.length_hint(left)
