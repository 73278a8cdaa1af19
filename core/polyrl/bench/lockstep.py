"""Bench children run at once, taking their steps in turn (``polyrl bench --interleave``).

Why: a shared VM's speed drifts over minutes (one of this project's machines ran the same step
20-40 % slower an hour later), and ``polyrl bench`` runs its sides one after the other, so a ratio
of two sides' medians also carries whatever the machine did between them. Here every side loads
first, then they step in turn, one step each, the order rotating every round, each alone on the
machine while it steps (the others block, idle): a drift slows both sides of a step pair alike,
and the pair's ratio shows it. Memory is the cost: every side's process is resident at once.

Protocol: the parent passes a pipe's write end in ``LOCKSTEP_FD_ENV``; a child calls
``wait_for_turn()`` before each step, which writes ``ready`` there and blocks until the parent
writes ``go`` on its stdin. A child that exits closes the pipe, which the parent reads as done.
A child may have a timeout: the seconds the parent may spend waiting on it (its loading and its
own steps, not the others' turns); past it the child is killed and recorded as timed out.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import IO, Any

from polyrl.bench.children import parse_child_output

#: The environment variable naming the file descriptor a lockstep child reports ``ready`` on.
LOCKSTEP_FD_ENV = "POLYRL_BENCH_LOCKSTEP_FD"
READY, GO = b"ready\n", b"go\n"


def wait_for_turn() -> None:
    """In a bench child, before each timed step: nothing when run alone; in lockstep, say ready
    and block until the parent says go (a parent gone away ends the child)."""
    fd = os.environ.get(LOCKSTEP_FD_ENV)
    if not fd:
        return
    os.write(int(fd), READY)
    if sys.stdin.buffer.readline() != GO:
        raise SystemExit("error: the lockstep parent went away (no 'go' on stdin)")


class _Child:
    """One child process in lockstep: its ready pipe, its stdin, and files for its output."""

    def __init__(self, name: str, argv: Sequence[str], timeout: float | None = None) -> None:
        self.name = name
        self.timeout = timeout
        self.waited = 0.0  # seconds the parent has waited on this child so far
        self.timed_out = False
        read_end, write_end = os.pipe()
        # files, not pipes, for its output: a child writing more than a pipe holds while the
        # parent waits on another child would block forever
        self.stdout: IO[bytes] = tempfile.TemporaryFile()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=self.stdout, stderr=self.stderr,
                                     pass_fds=(write_end,), env={**os.environ, LOCKSTEP_FD_ENV: str(write_end)})
        os.close(write_end)  # the child's copy alone keeps it open: its exit is the pipe's end
        self.ready_pipe = os.fdopen(read_end, "rb", buffering=0)  # unbuffered: select sees every byte not yet read
        self.waiting = False

    def wait_ready(self) -> None:
        """Block until the child waits for its next turn (``waiting``), has exited, or has used up
        its timeout (then it is killed; neither ends ``waiting``)."""
        started = time.monotonic()
        left = None if self.timeout is None else max(0.0, self.timeout - self.waited)
        readable, _, _ = select.select([self.ready_pipe], [], [], left)
        self.waited += time.monotonic() - started
        if not readable:
            self.proc.kill()
            self.timed_out, self.waiting = True, False
            return
        self.waiting = self.ready_pipe.readline() == READY

    def step(self) -> None:
        """Let the waiting child take one step and block until it waits again or exits."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(GO)
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died while waiting
            self.waiting = False
            return
        self.wait_ready()

    def result(self) -> dict[str, Any]:
        """The child's result line once it has exited (see ``parse_child_output``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # a child still waiting reads EOF and ends
        returncode = self.proc.wait()
        self.ready_pipe.close()
        outputs = []
        for f in (self.stdout, self.stderr):
            f.seek(0)
            outputs.append(f.read().decode(errors="replace"))
            f.close()
        if self.timed_out:
            return {"backend": self.name, "error": f"timed out after {self.timeout:g} s", "timed_out": True}
        return parse_child_output(self.name, returncode, *outputs)


def run_in_lockstep(children: Sequence[tuple[str, Sequence[str]]], steps: int,
                    timeouts: Sequence[float | None] | None = None) -> list[dict[str, Any]]:
    """Run ``children`` (name, argv) at once for ``steps`` steps each, one step at a time in
    rotating order, every child loaded before the first; their result lines, in order. A child
    that fails or passes its timeout (``timeouts``, one per child, None for none) is recorded as
    an ``error`` and the others go on."""
    limits = list(timeouts) if timeouts is not None else [None] * len(children)
    if len(limits) != len(children):
        raise ValueError(f"{len(limits)} timeouts for {len(children)} children")
    running = [_Child(name, argv, limit) for (name, argv), limit in zip(children, limits)]
    try:
        for child in running:
            child.wait_ready()  # loaded: nobody steps while another still loads
        for step in range(steps):
            turn = step % len(running)
            for child in running[turn:] + running[:turn]:
                if child.waiting:
                    child.step()
    finally:
        results = [child.result() for child in running]
    return results
