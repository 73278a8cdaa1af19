"""Kernel calls a sample used to hold memory past ``memory_mb`` by reference, or to flush the host's
disks: ``vmsplice`` and ``SO_ZEROCOPY`` (a page of a transparent huge page, held by a pipe or a send
queue, pinned its whole 2 MB after the sample unmapped it: 256 MB in 8 pipes), and ``sync``/``fsync``
in a loop (hundreds of disk cache flushes a second). The seccomp filter refuses the first two and
answers the flushes 0 without effect; the small filter of the levels without it refuses ``vmsplice``,
``sync`` and ``syncfs``. The calls go through ctypes, past the audit hook, as a policy's would."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bwrap_util import needs_bwrap

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, memfd_filter

pytestmark = pytest.mark.faults

#: ``probe()`` -> (vmsplice's errno, setsockopt(SO_ZEROCOPY)'s errno, the answers of syncfs, fsync and
#: fdatasync of descriptor -1: 0 where the call never reached the kernel, else -1 with EBADF).
PINNING = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def probe():
    page = ctypes.create_string_buffer(4096)
    read_end, write_end = os.pipe()
    vec = IoVec(ctypes.addressof(page), 4096)
    ctypes.set_errno(0)
    spliced = libc.vmsplice(write_end, ctypes.byref(vec), ctypes.c_ulong(1), 0)
    splice_errno = ctypes.get_errno() if spliced < 0 else 0
    tcp = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM (Python's socket raises an audit event)
    one = ctypes.c_int(1)
    ctypes.set_errno(0)
    zero_copy = libc.setsockopt(tcp, 1, 60, ctypes.byref(one), 4)  # SOL_SOCKET, SO_ZEROCOPY
    zero_copy_errno = ctypes.get_errno() if zero_copy < 0 else 0
    flushes = [libc.syncfs(-1), libc.fsync(-1), libc.fdatasync(-1)]
    os.sync()
    return splice_errno, zero_copy_errno, flushes
print("PROBE", probe())
"""


@needs_bwrap
def test_pages_held_by_reference_are_refused_and_disk_flushes_answered_without_effect():
    """On main ``vmsplice`` and ``SO_ZEROCOPY`` worked (errno 0) and the flushes reached the kernel
    (EBADF, -1): a page of a huge page a pipe holds pinned 2 MB no rlimit counts, and each flush was
    one of the host's disks."""
    box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512), isolation="require")
    if box.launch.seccomp_program is None:
        pytest.skip(f"no seccomp filter here: {box.report['seccomp']}")
    result = box.run(PINNING, parse_tests("assert probe() == (1, 1, [0, 0, 0])\n"))  # EPERM, EPERM
    assert result.status == "ok", (result.status, result.error, result.output[-500:])
    assert result.passed == [True], result.output[-500:]


def test_the_small_filter_refuses_vmsplice_sync_and_syncfs(tmp_path):
    """``memfd_filter``'s program (the ``off`` level's, and bubblewrap's without libseccomp), loaded
    by the server's own loader in a process of its own: ``vmsplice`` and ``syncfs`` fail with EPERM
    (on main: EBADF, the kernel ran them), ``fsync`` of the sample's own file still works."""
    program = memfd_filter.program(paths=True, renames=True)
    if program is None:
        pytest.skip("the small filter's numbers are known here for x86_64 and aarch64 only")
    code = ("import ctypes, os, sys\n" + memfd_filter._loader_source() + "\n_memfd_filter(sys.argv[1])\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('SPLICE', libc.vmsplice(-1, None, ctypes.c_ulong(0), 0), ctypes.get_errno())\n"
            "print('SYNCFS', libc.syncfs(-1), ctypes.get_errno())\n"
            "fd = os.open('own.txt', os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')\nos.fsync(fd)\nprint('FSYNC done')\n")
    done = subprocess.run([sys.executable, "-I", "-c", code, program.hex()], capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SPLICE -1 1" in done.stdout and "SYNCFS -1 1" in done.stdout, done.stdout
    assert "FSYNC done" in done.stdout, done.stdout
