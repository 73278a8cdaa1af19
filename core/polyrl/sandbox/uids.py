"""One uid per running sample (a root trainer's samples, ``user = "auto"``).

Why: the kernel counts ``RLIMIT_NPROC`` (``max_processes``) per real uid, threads included. When
every sample ran as ``nobody``, a sample holding ``max_processes`` threads made a concurrent
honest sample's ``threading.Thread(...).start()`` fail ("can't start new thread"): one sample
forged another's reward down. Each sample running at the same time now has a uid of its own from
an unused range, so its limit counts its own threads only. A non-root trainer needs none of this:
bubblewrap gives each sample its own user namespace, and since Linux 5.14 the count is kept per
user namespace.

The range sits in what systemd's UID allocation leaves unused (1879048192-2147352575) and under
2^31 (some tools read uids as signed). Where it is not mapped (a container whose root has a short
uid map) the probe that picks the level fails with it and samples share ``nobody`` (the report says).
"""

from __future__ import annotations

import threading

#: The pool's first uid, and how many samples may run at once with a uid of their own.
FIRST = 2_000_000_000
SIZE = 65536

_lock = threading.Lock()
_busy: set[int] = set()


class PoolExhausted(RuntimeError):
    """More samples at once than the pool has uids (``SIZE``)."""


def acquire() -> int:
    """The lowest uid of the pool no running sample holds (reused, so at most ``max_workers`` uids)."""
    with _lock:
        for uid in range(FIRST, FIRST + SIZE):
            if uid not in _busy:
                _busy.add(uid)
                return uid
    raise PoolExhausted(f"more than {SIZE} samples at once")


def release(uid: int) -> None:
    """Give ``uid`` back; call only once every process of the sample is gone (its PID namespace)."""
    with _lock:
        _busy.discard(uid)


def busy() -> frozenset[int]:
    """The uids running samples hold now (for tests and the report)."""
    with _lock:
        return frozenset(_busy)
