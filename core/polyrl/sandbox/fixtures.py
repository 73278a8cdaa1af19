"""pytest's output fixtures (``capsys``, ``capfd``) for the tests' own ``test_*`` functions.

Why: KodCode-style pytest cells check a solution that prints with ``def test_x(capsys): ...
capsys.readouterr().out``; called with no argument, the test raised TypeError, so a right solution
scored 0. A test naming one gets a ``Captured`` whose streams are ``sys.stdout``/``sys.stderr``
while it runs (``test_cells``); what the sample prints during its calls reaches them through the
harness (``harness.Session.printed``), so ``capfd`` (file descriptors, in pytest) is the same here."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import NamedTuple

#: The fixtures a test function's parameter may name (``test_cells``).
OUTPUT_FIXTURES = frozenset({"capsys", "capfd"})


class CaptureResult(NamedTuple):
    """``readouterr()``'s answer, as pytest's: what was printed since the last one."""

    out: str
    err: str


class Captured:
    """The text printed while a test runs, read as pytest's ``capsys`` reads it."""

    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self) -> CaptureResult:
        """What was printed since the last call (pytest's), then forgotten."""
        result = CaptureResult(self.out.getvalue(), self.err.getvalue())
        for stream in (self.out, self.err):
            stream.seek(0)
            stream.truncate()
        return result


@contextlib.contextmanager
def capture() -> Iterator[Captured]:
    """A ``Captured`` holding ``sys.stdout``/``sys.stderr`` until the test ends, however it ends."""
    captured = Captured()
    with contextlib.redirect_stdout(captured.out), contextlib.redirect_stderr(captured.err):
        yield captured
