"""One uid per running sample (a root trainer's samples, ``user = "auto"``).

Why: the kernel counts ``RLIMIT_NPROC`` (``max_processes``) per real uid, threads included. When
every sample ran as ``nobody``, a sample holding ``max_processes`` threads made a concurrent
honest sample's ``threading.Thread(...).start()`` fail ("can't start new thread"): one sample
forged another's reward down. Each sample running at the same time now has a uid of its own from
an unused range, so its limit counts its own threads only. Its gid is the same number (and it has
no supplementary groups): with nobody's group for all, a file one sample made with group
permissions in a folder samples share (the host's /tmp at the ``unshare`` and ``off`` levels)
was a concurrent sample's to read and write. A non-root trainer needs none of this:
bubblewrap gives each sample its own user namespace, and since Linux 5.14 the count is kept per
user namespace.

The range sits in what systemd's UID allocation leaves unused (1879048192-2147352575) and under
2^31 (some tools read uids as signed). Where it is not mapped (a container whose root has a short
uid map) the probe that picks the level fails with it and samples share ``nobody`` (the report says).
"""

from __future__ import annotations

import fcntl
import functools
import grp
import os
import pwd
import threading
from pathlib import Path

#: The pool's first uid, and how many samples may run at once with a uid of their own.
FIRST = 2_000_000_000
SIZE = 65536
#: One lock file per uid in use, shared by every trainer on the host: two torchrun ranks, or two
#: runs, each start counting at ``FIRST``; a uid held by another process's sample is skipped, so
#: neither its RLIMIT_NPROC count nor (at the ``off`` level) its end-of-sample kill reaches
#: another process's sample. The kernel drops a dead process's locks.
LOCKS = Path("/run/polyrl-sandbox-uids")

_lock = threading.Lock()
_busy: dict[int, int | None] = {}  # uid -> the fd holding its lock file (None: no lock folder)


class PoolExhausted(RuntimeError):
    """More samples at once than the pool has uids (``SIZE``)."""


def _claim(uid: int) -> tuple[bool, int | None]:
    """Whether ``uid`` is free host-wide, and the fd that now holds it (None where no lock folder
    can be made: then only this process's samples are kept apart)."""
    try:
        LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(LOCKS / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:
        return True, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False, None
    return True, fd


@functools.lru_cache(maxsize=4096)
def _named(uid: int) -> bool:
    """Whether the host's user or group database (/etc/passwd, /etc/group, LDAP, sssd) knows
    ``uid``: a real user's uid is never given to a sample (at the ``off`` level its end-of-sample
    kill would reach that user), nor a real group's number (the sample's gid is its uid's number:
    it would get that group's file permissions)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except KeyError:
            continue
        return True
    return False


def status_uids(pid: str) -> tuple[int, ...] | None:
    """The real, effective, saved and filesystem uids of a live process (None: gone, or a zombie).
    Only the head of /proc/<pid>/status is read and scanned as bytes: a scan of every process runs
    twice per sample, and splitting each whole file into lines made it ~8x slower."""
    try:
        with open(f"/proc/{pid}/status", "rb", buffering=0) as f:
            head = f.read(1024)
    except OSError:
        return None
    state, uid = head.find(b"\nState:\t"), head.find(b"\nUid:\t")
    if state < 0 or uid < 0 or head[state + 8:state + 9] in (b"Z", b"X"):
        return None
    end = head.find(b"\n", uid + 1)
    try:
        return tuple(int(u) for u in head[uid + 6:end if end > 0 else None].split())
    except ValueError:
        return None


def live_uids() -> set[int]:
    """Every uid a live process on this host runs with (real, effective, saved or filesystem)."""
    seen: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return seen
    for name in names:
        if name.isdigit() and (ids := status_uids(name)) is not None:
            seen.update(ids)
    return seen


def processes(uid: int) -> list[int]:
    """The live processes running with ``uid`` (any of real, effective, saved, filesystem)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in names if name.isdigit() and uid in (status_uids(name) or ())]


#: What a lock file says once its last holder gave the uid back with nothing of its sample left.
#: Any other content (a holder killed mid-sample, a new file) makes the next claim look at /proc.
CLEAN = b"clean\n"


def acquire() -> int:
    """The lowest uid of the pool no running sample on this host holds (reused, so few uids).
    Skipped too: a uid the user database names, and a uid some live process runs with (what a
    sample of a trainer killed mid-sample left running, a daemon that outlived the kill, another
    user's process: a sample given it would share its RLIMIT_NPROC count and be its to signal and
    ptrace). /proc is scanned only for a uid whose lock file does not say ``CLEAN`` (a scan costs
    ~50 us per process on the host: twice that of starting the sample on a busy machine)."""
    with _lock:
        running: set[int] | None = None
        for uid in range(FIRST, FIRST + SIZE):
            if uid in _busy or _named(uid):
                continue
            free, fd = _claim(uid)
            if not free:
                continue
            if fd is None or os.pread(fd, len(CLEAN) + 1, 0) != CLEAN:
                running = live_uids() if running is None else running
                if uid in running:
                    if fd is not None:
                        os.close(fd)
                    continue
            if fd is not None:
                os.ftruncate(fd, 0)  # "in use" until release says otherwise
            _busy[uid] = fd
            return uid
    raise PoolExhausted(f"more than {SIZE} samples at once (or uids held by what earlier samples left running)")


def release(uid: int) -> None:
    """Give ``uid`` back; call only once nothing of its sample is left (its processes, and at the
    ``unshare`` and ``off`` levels what it left on the host: ``polyrl.sandbox.leftovers``): the
    lock file then says ``CLEAN``. Where something is left, do not call it: this process keeps
    the uid, and after it the next claim looks at /proc."""
    with _lock:
        fd = _busy.pop(uid, None)
    if fd is not None:
        try:
            os.pwrite(fd, CLEAN, 0)
        finally:
            os.close(fd)  # closing drops the flock; the file stays for the next claim


def busy() -> frozenset[int]:
    """The uids this process's running samples hold now (for tests and the report)."""
    with _lock:
        return frozenset(_busy)
