"""The command's standard output, a write to which that fails is one ``error:`` line.

Why: `polyrl config-reference > /dev/full`, `polyrl train run.toml > summary.json` on a full
disk, or any listing whose output's device failed ended in an ``OSError`` traceback (and the
interpreter's last flush then printed a second one). A reader that left (``BrokenPipeError``) is
no error of the command's and is left to ``polyrl.cli.main``, as before. A standard output closed
before the command started (`polyrl backends >&-`) is an error too, as for the Unix tools: the
output went nowhere and the command said it succeeded (exit 0).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from polyrl.errors import PolyrlError


class OutputFailed(PolyrlError):
    """Writing the command's standard output failed (no space left, an I/O error)."""


class _CheckedOutput:
    """``stream`` whose ``write``/``flush`` turn an ``OSError`` into ``OutputFailed``; everything
    else (``fileno``, ``isatty``, ``encoding``: what Rich and the broken-pipe check ask) is the
    stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._checked(self._stream.write, text))

    def flush(self) -> None:
        self._checked(self._stream.flush)

    def _checked(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _failed(self._stream, exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _failed(stream: Any, exc: OSError) -> OutputFailed:
    """The error for a failed write, standard output pointed at ``os.devnull`` first so the
    interpreter's last flush of what is still buffered does not fail (and print) again."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return OutputFailed(f"standard output: writing the command's output failed: {exc.strerror or exc}. Fix: free "
                        "space where the output goes (a redirect's file system), or send it elsewhere")


#: The error for a command started with its standard output closed (`>&-`), before it does any work.
CLOSED = ("standard output is closed (the command was started with `>&-` or its parent closed descriptor 1), so "
          "the command's output would be lost. Fix: send it somewhere instead, e.g. `> out.txt`, or `> /dev/null` "
          "to drop it")


@contextlib.contextmanager
def checked_stdout() -> Iterator[None]:
    """Within: ``sys.stdout`` raises ``OutputFailed`` for a failed write, and what it holds is
    flushed at the end (a failure there is raised too, not left to the interpreter's exit), also
    at a ``sys.exit`` that says success (argparse's ``--help``/``--version`` end with one)."""
    original = sys.stdout
    if original is None:  # its descriptor was closed when Python started: every print went nowhere
        raise OutputFailed(CLOSED)
    sys.stdout = _CheckedOutput(original)
    try:
        yield
        sys.stdout.flush()
    except SystemExit as exc:
        if exc.code in (0, None):
            sys.stdout.flush()
        raise
    finally:
        sys.stdout = original
