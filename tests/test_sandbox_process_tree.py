"""``runner._kill``'s kill of the processes below the one it started (``process_tree``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from polyrl.sandbox import process_tree, runner

#: A parent that starts a child in a session of its own (as a sample's ``os.setsid()``), prints
#: the child's pid and sleeps.
PARENT = ("import subprocess, sys, time\n"
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
          "print(c.pid, flush=True)\ntime.sleep(60)\n")


def _alive(pid: int) -> bool:
    st = process_tree._stat(pid)
    return st is not None


def _start_parent(own_group: bool = True) -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, start_new_session=own_group)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def _end(parent: subprocess.Popen, child: int) -> None:
    """SIGKILL the test's own pair of processes (whatever is still running of them)."""
    for pid in (child, parent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    parent.wait()


def test_a_child_that_left_the_group_is_killed_with_the_one_started():
    parent, child = _start_parent()
    try:
        assert child in process_tree.descendants(parent.pid)
        runner._kill(parent)
        end = time.monotonic() + 5
        while _alive(child) and time.monotonic() < end:
            time.sleep(0.01)
        assert not _alive(child)
    finally:
        _end(parent, child)


def test_a_sample_already_reaped_kills_nothing_below_its_pid():
    """Once the one started has ended and been reaped, its pid may name another process (pid
    reuse, here: a Popen pointed at an unrelated live parent): its children are not the sample's
    and stay alive (it scanned /proc below the old pid and SIGKILLed them, waiting until they
    were gone)."""
    other, child = _start_parent(own_group=False)  # not a group leader: killpg of its pid finds no group
    sample = subprocess.Popen([sys.executable, "-c", "pass"])
    sample.wait()
    try:
        sample.pid = other.pid  # the reaped sample's pid, given out again to ``other``
        runner._kill(sample)
        assert _alive(child), "a process below another's pid was killed"
        assert other.poll() is None
    finally:
        _end(other, child)
