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

import errno
import fcntl
import functools
import grp
import hashlib
import os
import pwd
import socket
import stat
import sys
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
#: Abstract unix sockets are the other claim: bound to a name per uid (``_socket_name``), never
#: listening. They need no writable folder (a read-only or unshared /run left the claims
#: uncoordinated) and the kernel frees the name when the process dies; they reach the processes
#: of one network namespace (the host's, for trainers; a sample under bubblewrap or unshare has
#: its own, and one at the ``off`` level can only make the pool skip a name it binds).
SOCKETS = hasattr(socket, "AF_UNIX") and sys.platform.startswith("linux")

_lock = threading.Lock()
#: uid -> what holds its claim: the lock file's fd (None: no lock folder) and the bound socket (or None).
_busy: dict[int, tuple[int | None, socket.socket | None]] = {}


class PoolExhausted(RuntimeError):
    """More samples at once than the pool has uids (``SIZE``)."""


def _socket_name(uid: int) -> bytes:
    """The abstract socket name that claims ``uid``: under ``LOCKS``' name, so processes using
    another lock folder (tests) claim apart, hashed where that would pass the 107-byte limit."""
    key = str(LOCKS)
    if len(key) > 64:
        key = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"\0polyrl-sandbox-uid:{key}/{uid}".encode()


def _bind(uid: int) -> tuple[bool, socket.socket | None]:
    """Whether no other process holds ``uid``'s socket name, and the socket that now does (None
    where abstract sockets cannot be made: then the lock file is the claim)."""
    if not SOCKETS:
        return True, None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return True, None
    try:
        sock.bind(_socket_name(uid))
    except OSError as exc:
        sock.close()
        return exc.errno != errno.EADDRINUSE, None
    return True, sock


def _claim(uid: int) -> tuple[bool, int | None, socket.socket | None]:
    """Whether ``uid`` is free host-wide, the fd that now holds its lock file (None where no lock
    folder can be made) and the socket bound to its name (``SOCKETS``). Both claims are taken
    where both work; where neither does, only this process's samples are kept apart. A lock file
    that is a link, not a regular file or not this user's makes the uid taken: the root trainer
    followed a link there with ``O_CREAT`` and truncated its target ("in use"), and a FIFO made
    ``acquire`` raise (``pread``: ESPIPE)."""
    free, sock = _bind(uid)
    if not free:
        return False, None, None
    try:
        LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(LOCKS / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link in its place: not ours to open, nor the uid ours to give
            if sock is not None:
                sock.close()
            return False, None, None
        return True, None, sock
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a lock file of this user's")  # a FIFO, a device, another user's
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        if sock is not None:
            sock.close()
        return False, None, None
    return True, fd, sock


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
            free, fd, sock = _claim(uid)
            if not free:
                continue
            if fd is None or os.pread(fd, len(CLEAN) + 1, 0) != CLEAN:
                running = live_uids() if running is None else running
                if uid in running:
                    _let_go(fd, sock)
                    continue
            if fd is not None:
                os.ftruncate(fd, 0)  # "in use" until release says otherwise
            _busy[uid] = (fd, sock)
            return uid
    raise PoolExhausted(f"more than {SIZE} samples at once (or uids held by what earlier samples left running)")


def _let_go(fd: int | None, sock: socket.socket | None) -> None:
    if sock is not None:
        sock.close()
    if fd is not None:
        os.close(fd)  # closing drops the flock; the file stays for the next claim


def release(uid: int) -> None:
    """Give ``uid`` back; call only once nothing of its sample is left (its processes, and at the
    ``unshare`` and ``off`` levels what it left on the host: ``polyrl.sandbox.leftovers``): the
    lock file then says ``CLEAN``. Where something is left, do not call it: this process keeps
    the uid, and after it the next claim looks at /proc."""
    with _lock:
        fd, sock = _busy.pop(uid, (None, None))
    try:
        if fd is not None:
            os.pwrite(fd, CLEAN, 0)
    finally:
        _let_go(fd, sock)


def busy() -> frozenset[int]:
    """The uids this process's running samples hold now (for tests and the report)."""
    with _lock:
        return frozenset(_busy)
