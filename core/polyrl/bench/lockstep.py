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
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        self.name = name
        read_end, write_end = os.pipe()
        # files, not pipes, for its output: a child writing more than a pipe holds while the
        # parent waits on another child would block forever
        self.stdout: IO[bytes] = tempfile.TemporaryFile()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=self.stdout, stderr=self.stderr,
                                     pass_fds=(write_end,), env={**os.environ, LOCKSTEP_FD_ENV: str(write_end)})
        os.close(write_end)  # the child's copy alone keeps it open: its exit is the pipe's end
        self.ready_pipe = os.fdopen(read_end, "rb")
        self.waiting = False

    def wait_ready(self) -> None:
        """Block until the child waits for its next turn (``waiting``) or has exited (not)."""
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
        return parse_child_output(self.name, returncode, *outputs)


def run_in_lockstep(children: Sequence[tuple[str, Sequence[str]]], steps: int) -> list[dict[str, Any]]:
    """Run ``children`` (name, argv) at once for ``steps`` steps each, one step at a time in
    rotating order, every child loaded before the first; their result lines, in order. A child
    that fails is recorded as an ``error`` and the others go on."""
    running = [_Child(name, argv) for name, argv in children]
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
