"""The trainer's end of the pipes to one sample: requests, answers, captured output.

Requests go out as length-prefixed ``marshal`` (only the trainer writes them; the sample reads them
without importing anything); answers come back as JSON lines, which is all the trainer ever parses
from a sample (``marshal.loads`` on a sample's bytes could crash the trainer).

Why its own module: every read and write here is bounded (a deadline, an output cap, a message
cap), so a sample that stops reading, floods its output or never answers costs its own time slot
and nothing else.
"""

from __future__ import annotations

import json
import marshal
import os
import selectors
import subprocess
import time
from typing import Any

#: Largest single answer accepted from a sample (a value it returns, a list of names).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class SampleStopped(Exception):
    """The sample can no longer answer; ``status`` is "timeout", "output_limit" or "crashed"."""

    def __init__(self, status: str, detail: str = "") -> None:
        super().__init__(f"{status}: {detail}" if detail else status)
        self.status = status
        self.detail = detail


class Channel:
    """Requests to a sample's stdin, answers from its stdout; stderr (where the sample's own
    output goes) is drained all the while and kept up to ``max_output_bytes``."""

    def __init__(self, proc: subprocess.Popen, deadline: float, max_output_bytes: int) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.deadline = deadline
        self.max_output_bytes = max_output_bytes
        self.to_fd = proc.stdin.fileno()
        self.from_fd = proc.stdout.fileno()
        self.err_fd = proc.stderr.fileno()
        os.set_blocking(self.to_fd, False)
        self.output = bytearray()
        self.inbox = bytearray()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.from_fd, selectors.EVENT_READ)
        self.selector.register(self.err_fd, selectors.EVENT_READ)
        self.err_open = True
        self.dead: SampleStopped | None = None
        #: the cap on the answer awaited now (``ask``'s ``max_bytes``)
        self.max_message = MAX_MESSAGE_BYTES

    def close(self) -> None:
        self.selector.close()

    def renew_selector(self) -> None:
        """A selector of this copy's own, for a forked process that talks to the sample: an epoll
        set is shared across ``fork``, so registering the input pipe there would change the parent's."""
        self.selector.close()  # this process's descriptor only; the parent's set lives on
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.from_fd, selectors.EVENT_READ)
        if self.err_open:
            self.selector.register(self.err_fd, selectors.EVENT_READ)

    def ask(self, message: dict[str, Any], max_bytes: int | None = None) -> dict[str, Any]:
        """Send ``message`` and wait for the answer line, of at most ``max_bytes`` where given
        (a program's printed output: ``Session.program`` bounds it by the expected output's size)."""
        self.send(message)
        if max_bytes is None:
            return self.receive()
        self.max_message = max(max_bytes, MAX_MESSAGE_BYTES)
        try:
            return self.receive()
        finally:
            self.max_message = MAX_MESSAGE_BYTES

    def send(self, message: dict[str, Any]) -> None:
        if self.dead:
            raise self.dead
        body = marshal.dumps(message)
        self.send_bytes(len(body).to_bytes(8, "big") + body)

    def send_bytes(self, data: bytes) -> None:
        """Write ``data`` as it is, bounded by the deadline like every request."""
        if self.dead:
            raise self.dead
        pending = memoryview(data)
        self.selector.register(self.to_fd, selectors.EVENT_WRITE)
        try:
            while pending:
                if self._wait():  # the input pipe has room
                    try:
                        pending = pending[os.write(self.to_fd, pending[:65536]):]
                    except BlockingIOError:
                        pass
                    except OSError:  # BrokenPipeError: it is gone
                        self._stop("crashed", "the sample closed its input")
        finally:
            self.selector.unregister(self.to_fd)

    def receive(self) -> dict[str, Any]:
        if self.dead:
            raise self.dead
        while b"\n" not in self.inbox:
            self._wait()
        line, _, rest = bytes(self.inbox).partition(b"\n")
        self.inbox = bytearray(rest)
        try:
            answer = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            self._stop("crashed", "the sample wrote something else on the answer channel")
        if not isinstance(answer, dict):
            self._stop("crashed", "the sample wrote something else on the answer channel")
        return answer

    def collect_rest(self) -> None:
        """After the sample is killed: what output is still in the pipe, up to the cap."""
        if not self.err_open:
            return
        os.set_blocking(self.err_fd, False)
        try:
            while len(self.output) <= self.max_output_bytes:
                data = os.read(self.err_fd, 65536)
                if not data:
                    break
                self.output += data
        except OSError:  # BlockingIOError: a writer survives; the rest is not worth waiting for
            pass

    def text(self) -> str:
        return bytes(self.output[: self.max_output_bytes]).decode("utf-8", errors="replace")

    def _stop(self, status: str, detail: str = "") -> None:
        self.dead = SampleStopped(status, detail)
        raise self.dead

    def _wait(self) -> bool:
        """Wait for any pipe (at most until the deadline, where it raises); read what arrived on
        the output and answer pipes; True when the input pipe can take more."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self._stop("timeout")
        writable = False
        for key, _ in self.selector.select(min(remaining, 0.5)):
            if key.fd == self.to_fd:
                writable = True
                continue
            data = os.read(key.fd, 65536)
            if key.fd == self.err_fd:
                if not data:
                    self.selector.unregister(self.err_fd)
                    self.err_open = False
                    continue
                self.output += data
                if len(self.output) > self.max_output_bytes:
                    self._stop("output_limit")
            else:
                if not data:
                    self._stop("crashed", "the sample ended without an answer")
                self.inbox += data
                if len(self.inbox) > self.max_message:
                    self._stop("crashed", f"an answer over {self.max_message} bytes")
        return writable
