"""Every process below a sample's first one, killed with it: what ``killpg`` alone missed.

Why: at the ``unshare`` level the sample's interpreter is PID 1 of its own PID namespace, a child
of util-linux ``unshare``, which is the process the trainer starts and kills. ``--kill-child``
asks the kernel to SIGKILL that child when ``unshare`` dies (``PR_SET_PDEATHSIG``), but the
kernel clears that request when the child changes its uid (``setpriv --reuid``, the privilege
drop), and a sample may clear it itself (``prctl``). So a sample that left the trainer's process
group (``os.setsid()``) outlived its sample when the trainer's ``killpg`` ended ``unshare``: it
slept on with up to ``memory_mb`` for as long as it liked, and its pooled uid went to the next
sample. Killing the namespace's PID 1 ends every process of the namespace, so the trainer finds
the whole tree below the process it started (by the parent ids in /proc, before anything is
killed: a child whose parent died is another's child after) and SIGKILLs all of it.
"""

from __future__ import annotations

import os
import select
import signal
import time


def _stat(pid: str | int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, or None (gone, or a zombie:
    it holds nothing). The start time tells a process from a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> dict[int, int]:
    """The live processes below ``pid`` (children, their children, ...): pid -> start time."""
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:  # no /proc (not Linux): the process group is all there is to kill
        return {}
    stats = {int(name): st for name in entries if (st := _stat(name)) is not None}
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = stats[child][1]
                todo.append(child)
    return found


def hold(pid: int) -> dict[int, int]:
    """A pidfd of every process below ``pid`` (all found before any is killed): pid -> pidfd, for
    ``kill``. Each is of a process that started when the scan's did, so a pid reused meanwhile is
    never hit; where the kernel has no pidfds, those processes are SIGKILLed here at once."""
    held: dict[int, int] = {}
    for child, started in descendants(pid).items():
        try:
            fd = os.pidfd_open(child)
        except (AttributeError, OSError):  # no pidfds (a kernel before 5.3): checked, then kill(2)
            if (st := _stat(child)) is not None and st[1] == started:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
            continue
        if (st := _stat(child)) is None or st[1] != started:
            os.close(fd)  # gone, or another process by now
            continue
        held[child] = fd
    return held


def kill(held: dict[int, int], wait_s: float = 2.0) -> list[int]:
    """SIGKILL the processes ``hold`` found, wait up to ``wait_s`` until they are gone and close
    their pidfds; the pids still running after that."""
    for fd in held.values():
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
    left: list[int] = []
    end = time.monotonic() + wait_s
    try:
        for child, fd in held.items():  # a pidfd is readable once its process has exited
            if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
                left.append(child)
    finally:
        for fd in held.values():
            os.close(fd)
    return left
