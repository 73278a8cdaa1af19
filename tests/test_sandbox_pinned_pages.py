"""Kernel calls a sample used to hold memory past ``memory_mb`` by reference, or to flush the host's
disks: ``vmsplice`` and ``SO_ZEROCOPY`` (a page of a transparent huge page, held by a pipe or a send
queue, pinned its whole 2 MB after the sample unmapped it: 256 MB in 8 pipes), ``splice`` and
``sendfile`` into a socket (the send queue counts the bytes sent, not the pages it holds: one byte of
each of 16 pages a splice), and ``sync``/``fsync`` in a loop (hundreds of disk cache flushes a
second). The seccomp filter refuses the first four and answers the flushes 0 without effect; the
small filter of the levels without it refuses ``vmsplice``, ``splice``, ``sendfile``, ``sync`` and
``syncfs``. The calls go through ctypes or ``os`` (which raises no audit event for them), past the
audit hook, as a policy's would."""

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


#: ``pinned(most_mb)`` -> (splice's errno, sendfile's errno, MB of pages held): one byte of each of 16
#: pages of its tmpfs file per splice (pipe -> unix socket, the file truncated and written again
#: between splices, so ``disk_mb`` never fills) into connections nobody reads, until ``most_mb`` is
#: held, the kernel would block, or descriptors run out. Sockets through libc: the audit hook
#: refuses ``socket.socket``, and ``os.splice``/``os.sendfile`` raise no audit event.
SPLICED = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def unix_pair():
    listener = libc.socket(1, 1, 0)  # AF_UNIX, SOCK_STREAM
    family = ctypes.c_ushort(1)
    assert libc.bind(listener, ctypes.byref(family), 2) == 0  # an abstract name the kernel picks
    assert libc.listen(listener, 1) == 0
    name, size = ctypes.create_string_buffer(110), ctypes.c_uint(110)
    assert libc.getsockname(listener, name, ctypes.byref(size)) == 0
    sender = libc.socket(1, 1, 0)
    assert libc.connect(sender, name, size) == 0
    receiver = libc.accept(listener, None, None)
    os.close(listener)
    os.set_blocking(sender, False)
    return sender, receiver
def errno_of(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0
def drain(read_end):
    try:
        while os.read(read_end, 4096):
            pass
    except BlockingIOError:
        pass
def pinned(most_mb):
    pages = os.open("pages", os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(pages, b"x" * 4096, 0)
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    sender, receiver = unix_pair()
    answers = (errno_of(lambda: os.splice(pages, write_end, 1, offset_src=0)),
               errno_of(lambda: os.sendfile(sender, pages, 0, 1)))
    drain(read_end)
    held, ends = 0, [sender, receiver]
    try:
        while held < most_mb << 8:
            while held < most_mb << 8:
                for _ in range(16):
                    os.ftruncate(pages, 0)
                    os.pwrite(pages, b"x" * 4096, 0)
                    os.splice(pages, write_end, 1, offset_src=0)
                try:
                    held += os.splice(read_end, sender, 16, flags=os.SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    break
                finally:
                    drain(read_end)
            sender, receiver = unix_pair()
            ends += [sender, receiver]
    except (OSError, AssertionError):  # refused, or out of descriptors
        pass
    for end in ends:
        os.close(end)
    return answers + (held >> 8,)
"""

#: ``copies()``: what ``shutil.copyfile`` and ``socket.sendfile`` (both first try ``sendfile``)
#: delivered, as (bytes equal, bytes the receiver got).
COPIES = """
import shutil, socket, threading
def copies():
    data = b"0123456789" * 50000
    with open("a.bin", "wb") as out:
        out.write(data)
    shutil.copyfile("a.bin", "b.bin")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("")
    listener.listen(1)
    sender = socket.socket(socket.AF_UNIX)
    sender.connect(listener.getsockname())
    receiver = listener.accept()[0]
    got = []
    reader = threading.Thread(target=lambda: got.append(b"".join(iter(lambda: receiver.recv(65536), b""))))
    reader.start()
    with open("a.bin", "rb") as source:
        sender.sendfile(source)
    sender.close()
    reader.join()
    return open("b.bin", "rb").read() == data, len(got[0])
"""


@needs_bwrap
def test_pages_spliced_into_sockets_are_refused():
    """On main one byte of each of 16 pages per ``splice`` (pipe -> socket) held 16 pages for about
    800 bytes of the send buffer: the sample below held the 256 MB it asked for at ``memory_mb =
    128`` (459 MB, and a 560-720 MB drop of MemAvailable, when run to its descriptors' end), and
    ``sendfile`` held a page per call. The filter refuses both (EPERM)."""
    box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128), isolation="require")
    if box.launch.seccomp_program is None:
        pytest.skip(f"no seccomp filter here: {box.report['seccomp']}")
    result = box.run(SPLICED, parse_tests("assert pinned(256) == (1, 1, 0)\n"))  # EPERM, EPERM, nothing held
    assert result.status == "ok", (result.status, result.error, result.output[-500:])
    assert result.passed == [True], result.output[-500:]


@needs_bwrap
def test_copies_that_try_sendfile_first_still_work():
    """``shutil.copyfile`` and ``socket.sendfile`` try ``sendfile`` first and copy when it fails at
    once, so a sample using them still gets its bytes across with ``sendfile`` refused."""
    box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512), isolation="require", audit_hook=False)
    result = box.run(COPIES, parse_tests("assert copies() == (True, 500000)\n"))
    assert result.status == "ok", (result.status, result.error, result.output[-500:])
    assert result.passed == [True], result.output[-500:]


def test_the_small_filter_refuses_vmsplice_sync_and_syncfs(tmp_path):
    """``memfd_filter``'s program (the ``off`` level's, and bubblewrap's without libseccomp), loaded
    by the server's own loader in a process of its own: ``vmsplice``, ``syncfs``, ``splice`` and
    ``sendfile`` fail with EPERM (on main: EBADF, the kernel ran them), ``fsync`` of the sample's own
    file and ``shutil.copyfile`` (``sendfile`` first, then a copy) still work."""
    program = memfd_filter.program(paths=True, renames=True)
    if program is None:
        pytest.skip("the small filter's numbers are known here for x86_64 and aarch64 only")
    code = ("import ctypes, os, sys\n" + memfd_filter._loader_source() + "\n_memfd_filter(sys.argv[1])\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('SPLICE', libc.vmsplice(-1, None, ctypes.c_ulong(0), 0), ctypes.get_errno())\n"
            "print('SYNCFS', libc.syncfs(-1), ctypes.get_errno())\n"
            "print('SPLICE2', libc.splice(-1, None, -1, None, ctypes.c_size_t(1), 0), ctypes.get_errno())\n"
            "print('SENDFILE', libc.sendfile(-1, -1, None, ctypes.c_size_t(1)), ctypes.get_errno())\n"
            "fd = os.open('own.txt', os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')\nos.fsync(fd)\nprint('FSYNC done')\n"
            "import shutil\nshutil.copyfile('own.txt', 'copy.txt')\nprint('COPIED', open('copy.txt').read())\n")
    done = subprocess.run([sys.executable, "-I", "-c", code, program.hex()], capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SPLICE -1 1" in done.stdout and "SYNCFS -1 1" in done.stdout, done.stdout
    assert "SPLICE2 -1 1" in done.stdout and "SENDFILE -1 1" in done.stdout, done.stdout
    assert "FSYNC done" in done.stdout and "COPIED x" in done.stdout, done.stdout
