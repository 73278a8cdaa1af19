"""A seccomp program refusing ``memfd_create``, ``memfd_secret``, ``socketpair``, ``pidfd_send_signal``,
``openat2``, ``io_setup``, ``vmsplice``, ``splice``, ``sendfile`` and writes through ``openat`` relative
to a folder's descriptor, built without libseccomp (the module's name is its first job's).

Why: where the sample runs without the full filter (``polyrl.sandbox.seccomp``: no libseccomp,
the ``off`` level, ``unshare`` without its setup program), a sample held up to ``max_open_files``
x ``file_size_mb`` in memfds (300 MB at ``memory_mb = 128``): their pages are written, never
mapped, so RLIMIT_AS does not count them, and a memfd lives on the kernel's internal tmpfs, whose
size no mount option or namespace reaches. The server loads this program before the sample's code
runs (``prctl``, after ``no_new_privs``), so both calls fail with EPERM as under the full filter.

``io_setup`` too (EPERM, as under the full filter): Linux AIO's events count against
``fs.aio-max-nr``, one limit for the whole host, and a sample took all of it (every ``io_setup``
on the host failed while it ran).

``vmsplice`` too (EPERM, as under the full filter): a pipe holds its pages by reference, and a page
of a transparent huge page pinned its whole 2 MB folio after the sample unmapped it (32 MB per pipe
no rlimit counts). ``splice`` and ``sendfile`` too (EPERM, as under the full filter): into a socket
they send a pipe's or file's pages by reference, and the send queue counts bytes, not pages (one
byte of each of 16 pages a splice: 459 MB at ``memory_mb = 128``; ``polyrl.sandbox.seccomp``).
``sync`` and ``syncfs`` (EPERM; Python's ``os.sync`` ignores the answer, and the
full filter answers them 0 without effect): each flushes the host's disks, and a sample looping on
``os.sync()`` made 120 such flushes a second.

``pidfd_send_signal`` too (EPERM, as under the full filter): the audit hook refuses ``os.kill`` of
another process, but ``signal.pidfd_send_signal`` raises no audit event, so at the ``off`` level
(no PID namespace) a sample of the trainer's uid (a non-root trainer's, or ``user = "none"`` as
root) could stop or kill the trainer through ``os.pidfd_open`` of its pid.

``socketpair`` too (EPERM, as under the full filter): it is the one socket the audit hook never
hears of (``_socket.socketpair`` raises no event, and a fresh copy of the ``_socket`` module
brings it back whatever the server patches), so at the ``off`` level, where that hook is the only
wall, a sample made unix pairs whose buffers are kernel memory no rlimit counts.

``openat`` for writing (``O_WRONLY``, ``O_RDWR``, ``O_CREAT`` or ``O_TRUNC``) relative to a folder's
descriptor (any ``dirfd`` but ``AT_FDCWD``), and ``openat2``: the audit hook's ``open`` event
carries the path and flags but not ``dir_fd``, so it resolved ``os.open("x", O_WRONLY | O_CREAT,
dir_fd=d)`` against the sample's folder and let it through, and at ``off`` a sample wrote (created,
truncated) files in any folder its uid may write, root's as ``user = "none"``, once it had opened
that folder for reading. Python's own ``open``, ``os.open`` without ``dir_fd`` and libc's ``open``
pass ``AT_FDCWD``; reading relative to a folder's descriptor (``os.fwalk``) still works.

At the ``off`` level only (``program(paths=True)``: no mount namespace there, so the audit hook's
path checks are the only wall and a path must name the same file when the kernel opens it as when
the hook judged it), the calls that change what a path of the sample's names are refused whole
too: ``rename``/``renameat``/``renameat2``, ``link``/``linkat``, ``symlink``/``symlinkat``,
``chdir``/``fchdir``, and ``mount``, ``umount2``, ``chroot``, ``pivot_root``, ``unshare``,
``setns``. Why: the hook judges a path (its ``realpath`` inside the sample's folder), then the
kernel opens it, and a second thread changed it in between: renaming a folder of the sample's over
one holding a link to a file outside, or moving the working folder the path is relative to, wrote
a root-owned file as ``user = "none"`` within a few thousand tries.

Renames and ``chdir`` with the audit hook on (``program(paths=True, renames=True)``): ``rename``
and ``chdir`` are allowed, ``renameat``/``renameat2`` only with both folders ``AT_FDCWD`` (the
paths the hook judged), while ``link``, ``symlink`` and ``fchdir`` stay refused. Why: natural
code (a temporary file ``os.replace``-d into place, ``shutil.move``, ``os.chdir`` into a folder
of its own) failed at ``off`` only. What keeps the race closed is the hook's ``strict`` rule
(``server._install_audit_hook``): no path it lets write, rename or chdir has a ``..``
component, and the sample can make no link, so every such path walks only down from the
sample's folder (or its working folder, which is in it): a second thread moving folders or the
working folder changes which of the sample's files it names, never takes it outside. With
``..`` allowed the race was real: ``../../f`` judged from a working folder two levels deep,
then a thread's ``chdir`` back up, wrote outside in under a second. Without the hook
(``audit_hook = false``) renames and chdir are refused whole, as before.

Classic-BPF instructions (22, 37 with the path calls on x86_64, 39 with renames let through) with the system call
numbers of x86_64 and aarch64 (None elsewhere); a call of another ABI (x32, i386 through ``int 0x80``) is refused whole, so the
number of a 32-bit ``memfd_create`` needs no table.

Whether the kernel took it is asked once per interpreter and program (``refused``): where it
answers EINVAL (no seccomp filters) the server runs the sample without it, and the isolation
report said the memfd calls were refused all the same.
"""

from __future__ import annotations

import ast
import errno
import platform
import struct
from pathlib import Path

from polyrl.sandbox import isolation

#: Per machine: the audit architecture (``seccomp_data.arch``), the numbers of the calls refused
#: whole (memfd_create, memfd_secret, socketpair, pidfd_send_signal, openat2, io_setup, vmsplice,
#: sync, syncfs, splice, sendfile) and openat's.
CALLS = {"x86_64": (0xC000003E, (319, 447, 53, 424, 437, 206, 278, 162, 306, 275, 40), 257),
         "aarch64": (0xC00000B7, (279, 447, 199, 424, 437, 0, 75, 81, 267, 76, 71), 56)}
#: Per machine: the calls refused whole at ``off`` only (module docstring): rename, renameat,
#: renameat2, chdir, link, linkat, symlink, symlinkat, fchdir, mount, umount2, chroot, pivot_root,
#: unshare, setns (aarch64 has only the ``at`` forms of the first ones).
PATH_CALLS = {"x86_64": (82, 264, 316, 80, 86, 265, 88, 266, 81, 165, 166, 161, 155, 272, 308),
              "aarch64": (38, 276, 49, 37, 36, 50, 40, 39, 51, 41, 97, 268)}
#: Per machine: of ``PATH_CALLS``, the ones a hooked sample at ``off`` may make (``renames=True``):
#: rename and chdir whole, renameat and renameat2 with both folders ``AT_FDCWD`` (``RENAME_AT``).
RENAME_CALLS = {"x86_64": (82, 80), "aarch64": (49,)}
#: Per machine: renameat and renameat2, allowed with ``renames=True`` when both ``dirfd`` are AT_FDCWD.
RENAME_AT = {"x86_64": (264, 316), "aarch64": (38, 276)}
#: ``openat``'s ``dirfd`` meaning "the working folder" (-100 as the 32 bits the kernel reads).
AT_FDCWD = 0xFFFFFF9C
#: ``openat`` flags that write: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC (the same on x86_64 and aarch64).
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000
#: Offsets in ``struct seccomp_data`` of the low 32 bits of ``args[0]`` and ``args[2]`` (little-endian):
#: openat's dirfd and flags, renameat's two dirfds.
_DIRFD, _FLAGS = 16, 32
#: x32 system calls on x86_64 have this bit set in their number.
X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO | EPERM


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter, native order as the kernel reads it


def program(machine: str | None = None, paths: bool = False, renames: bool = False) -> bytes | None:
    """The program for ``machine`` (default: this one's), or None where its numbers are not known;
    ``paths``: the ``off`` level's, also refusing the calls that change what a path names;
    ``renames`` (with ``paths``, where the audit hook judges paths strictly: ``server``'s
    ``strict``): ``rename`` and ``chdir`` are allowed, and ``renameat``/``renameat2`` from the
    working folder to the working folder (module docstring)."""
    machine = machine or platform.machine()
    found = CALLS.get(machine)
    if found is None:
        return None
    arch, whole, openat = found
    allowed = RENAME_CALLS[machine] + RENAME_AT[machine] if paths and renames else ()
    refused = whole + tuple(nr for nr in (PATH_CALLS[machine] if paths else ()) if nr not in allowed)
    checked = RENAME_AT[machine] if paths and renames else ()
    code: list[tuple[int, int, str | None, str | None]] = [  # (op, k, true label, false label)
        (_LD_W_ABS, 4, None, None),                          # A = seccomp_data.arch
        (_JEQ_K, arch, None, "deny"),                        # another ABI: refused
        (_LD_W_ABS, 0, None, None),                          # A = seccomp_data.nr
        (_JGE_K, X32_BIT, "deny", None),                     # x32: refused
        *((_JEQ_K, nr, "deny", None) for nr in refused),
        *((_JEQ_K, nr, "both_cwd", None) for nr in checked),
        (_JEQ_K, openat, None, "allow"),                     # openat: its dirfd and flags
        (_LD_W_ABS, _DIRFD, None, None),
        (_JEQ_K, AT_FDCWD, "allow", None),                   # the working folder: the audit hook's to judge
        (_LD_W_ABS, _FLAGS, None, None),
        (_JSET_K, WRITE_FLAGS, "deny", "allow"),
    ]
    labels = {}
    if checked:  # renameat(olddirfd, old, newdirfd, new): both AT_FDCWD, the paths the hook judged
        labels["both_cwd"] = len(code)
        code += [(_LD_W_ABS, _DIRFD, None, None), (_JEQ_K, AT_FDCWD, None, "deny"),
                 (_LD_W_ABS, _FLAGS, None, None), (_JEQ_K, AT_FDCWD, "allow", "deny")]
    labels["allow"], labels["deny"] = len(code), len(code) + 1
    code += [(_RET_K, _ALLOW, None, None), (_RET_K, _EPERM, None, None)]
    return b"".join(_op(op, k, jt=labels[t] - at - 1 if t else 0, jf=labels[f] - at - 1 if f else 0)
                    for at, (op, k, t, f) in enumerate(code))


#: The server's loader (``server._memfd_filter``), then the check that memfd_create now fails.
_CHECK = """
import os, sys
try:
    why = _memfd_filter(sys.argv[1])
except OSError as exc:
    sys.exit(f"memfd filter: {exc}")
if why:
    sys.exit(why)
try:
    os.memfd_create("polyrl-probe")
except PermissionError:
    sys.exit(0)
except AttributeError:  # no os.memfd_create in this Python: the filter loaded, nothing to check
    sys.exit(0)
sys.exit("memfd_create still works under it")
"""


def _loader_source() -> str:
    """``_memfd_filter``'s source, read from the server itself: the probe runs the very code the sample's
    server runs (the server cannot import polyrl, so there is no shared module to import)."""
    text = (Path(__file__).with_name("server.py")).read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "_memfd_filter")
    return ast.get_source_segment(text, node) or ""


def refused(python: str, hexed: str) -> str | None:
    """None when ``python``, loading ``hexed`` as the sample's server does, can no longer make a memfd;
    else why (the kernel has no seccomp filters, or refuses this one). Asked once per interpreter
    and program (``isolation.probe`` caches it): the kernel's answer is the same for every sample."""
    return isolation.probe([python, "-I", "-S", "-c", _loader_source() + "\n" + _CHECK, hexed])
