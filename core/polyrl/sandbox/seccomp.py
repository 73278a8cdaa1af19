"""A seccomp filter for samples, compiled once with libseccomp (through ``pyseccomp``) if present.

Why: namespaces and a dropped uid already stop most escapes, but the kernel calls that enter or
create namespaces, mount, trace other processes, load kernel objects or set up io_uring (a large
kernel attack surface, refused by Docker's default profile too) are the usual first step of a
kernel exploit; a sample never needs them, so they fail with EPERM. TIOCSTI (typing into the
parent's terminal) is refused, and so is TIOCSETD on the pty a sample opens (``/dev/ptmx``): a line
discipline the kernel lacks is loaded as a module (``tty-ldisc-N``, with ``dev.tty.ldisc_autoload``
on, its default) by the sample's request, and n_hdlc and n_gsm were local root exploits.

One process per sample: rlimits (``memory_mb`` above all) are per process, so a sample forking
through ctypes (libc's ``fork`` passes the audit hook, which refuses process creation for every
honest sample anyway) held ``max_processes`` x ``memory_mb``, and as uid 0 RLIMIT_NPROC does not
apply. ``fork``, ``vfork`` and ``clone`` without ``CLONE_THREAD`` fail with EPERM; threads
(``CLONE_THREAD`` implies a shared address space) still start, so ``memory_mb`` bounds the whole
sample. ``clone3`` fails with ENOSYS: its flags live in a struct a filter cannot read, and on
ENOSYS libc falls back to ``clone`` for threads.

Socket pairs: ``socketpair`` fails with EPERM, whatever the family. Why: it is the one way to make
a socket that raises no audit event (``_socket.socketpair``; a fresh copy of the single-phase
``_socket`` module brings the real one back whatever the sample's code patches), so under the
audit hook, which refuses every other socket, a sample still made unix pairs (kernel memory in
their buffers, kernel attack surface); nothing in the sample needs one (asyncio's self-pipe is an
``os.pipe`` there, and ``multiprocessing`` needs processes, which are refused).

Socket families: only AF_UNIX, AF_INET and AF_INET6 (separated by the sample's network
namespace) may be created; ``socket`` of any other family fails with EAFNOSUPPORT, as on a
kernel without it. Why: some families are not network-namespaced at all
(AF_VSOCK reaches the hypervisor's services from inside a "no network" sandbox on a VM;
Docker's default profile refuses it too; AF_BLUETOOTH, AF_CAN...), and the rest (AF_ALG,
AF_PACKET, AF_KEY, AF_RDS, AF_TIPC, AF_XDP...) are kernel attack surface no sample needs.
AF_NETLINK too: its families (route, xfrm, audit, netfilter, generic netlink with its many
kernel modules) are a large, often-exploited surface, and in a sandbox whose network namespace
has only loopback it answers nothing a sample needs. What asks for it degrades as on a kernel
without it: glibc's ``getaddrinfo`` with ``AI_ADDRCONFIG`` (a NETLINK_ROUTE query of the
addresses) then assumes IPv4 and IPv6 are both configured and still answers (a name that
resolves without netlink resolves as before: the sandbox has no /etc/hosts, so not even
"localhost"); ``socket.if_nameindex()`` raises OSError.

Socket buffers: ``setsockopt`` of ``SO_SNDBUF``/``SO_RCVBUF`` succeeds and leaves the buffer at
its default (the size is a hint: the kernel, too, clamps one past ``net.core.wmem_max`` without
a word). Why: bytes sent and not yet read sit in kernel memory no rlimit counts, up to the buffer
size per socket; a sample asking for 64 MB buffers held 228 MB in 29 unix socket pairs and 300 MB
in 29 loopback TCP connections (``max_open_files = 64``, a host whose ``wmem_max`` is 4 MB) at any
``memory_mb``. Left: the default buffers (6 MB in those unix pairs); TCP's own growth of its
send buffer up to ``net.ipv4.tcp_wmem`` (108 MB in those connections) is capped apart, in the
sample's network namespace (``isolation.TCP_BUFFER_MAX``: 6 MB in them). Pipes alike: ``F_SETPIPE_SZ``
is refused (``F_SETPIPE_SZ`` below).

Real uid 0: ``setuid``, ``setreuid`` and ``setresuid`` asking for uid 0 fail with EPERM. Why: a root
trainer's sample with ``user = "none"`` runs with euid 0 (root's files) but a real uid of the pool's
(``isolation.no_capabilities``), since RLIMIT_NPROC never binds real uid 0 and only that bounds its
threads; without this rule the sample set its real uid back to 0 (a value it already holds as
euid) and started threads bounded by ``memory_mb`` alone. No sandboxed process asks for uid 0
(``setpriv``'s drops, loaded after this filter, ask for the pool's uids).
"""

from __future__ import annotations

import errno
import socket
import tempfile
import threading
from typing import Any

#: Kernel calls refused with EPERM.
DENIED = (
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsmount", "fspick", "ptrace", "process_vm_readv", "process_vm_writev",
    "pidfd_getfd", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "open_by_handle_at", "name_to_handle_at", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "syslog", "acct", "swapon", "swapoff", "reboot", "quotactl",
    "iopl", "ioperm", "personality", "io_uring_setup", "io_uring_enter", "io_uring_register",
    # the sample starts at the lowest best-effort I/O priority (``isolation.io_last``) and keeps it
    "ioprio_set",
    # Linux AIO: its events count against ``fs.aio-max-nr``, one limit for the whole host that no
    # namespace splits; a sample took all 65536 in 17 calls, and every ``io_setup`` on the host
    # (the trainer's libaio, other samples) failed with EAGAIN until it ended. Nothing a sample runs uses it
    "io_setup",
    # memory that RLIMIT_AS does not count: SysV shared memory and message queues outlive shmdt /
    # msgsnd in the sample's IPC namespace (shmmax/shmall are unlimited there), and a memfd's pages
    # are written with write(2), never mapped; each would let a sample hold far more than memory_mb.
    # SysV semaphore sets too: each semaphore is ~64 bytes of kernel memory, and the namespace's
    # defaults (32000 sets of 32000) let a sample hold 2 MB per semget call, 300 MB in 0.6 s at
    # memory_mb = 128 and up to ~64 GB in all (nothing a sample runs uses them: Python's locks are futexes)
    "shmget", "msgget", "semget", "memfd_create", "memfd_secret",
    # the socket the audit hook never hears of (module docstring); and the signal it never hears
    # of (``signal.pidfd_send_signal``; the PID namespace hides the trainer, the small filter at
    # ``off`` refuses it too: ``memfd_filter``)
    "socketpair", "pidfd_send_signal",
    # pages a pipe holds by reference (no copy): a page of a transparent huge page pins the whole 2 MB
    # folio after the sample unmaps it, so 16 such pages held 32 MB per pipe that RLIMIT_AS no longer
    # counts (256 MB in 8 pipes at memory_mb = 512, MemAvailable's drop); ``write`` copies, so pipes
    # work as before. Nothing a sample runs uses it
    "vmsplice",
    # pages a socket holds by reference: ``splice`` from a pipe, or ``sendfile``, into a socket sends
    # the pipe's or file's pages themselves (MSG_SPLICE_PAGES), and the send queue counts the bytes
    # sent, not the pages held: one byte of each of 16 pages of the sample's tmpfs file (truncated and
    # written again between splices, so ``disk_mb`` never fills) per splice pinned 16 pages for about
    # 800 bytes of the socket's send buffer, 459 MB in 27 unix connections and 338 MB in loopback TCP
    # ones at memory_mb = 128 (MemAvailable fell 560-720 MB); ``sendfile`` alone, one page a call,
    # held 30 MB there (6 MB in the same connections written with ``send``). Python's
    # ``shutil.copyfile``, ``socket.sendfile`` and asyncio's ``sendfile`` fall back to copying when
    # the first call fails, so they work as before (``tee`` and ``copy_file_range`` copy or share
    # what a pipe or file already holds: left open)
    "splice", "sendfile", "sendfile64",
)
#: Kernel calls answered 0 without effect: every file a sample may write is on its tmpfs, where they
#: do nothing, but they flush the host's disks: ``sync`` writes back every filesystem's dirty pages
#: and sends the disk a cache flush (120 a second in a loop), and ``fsync`` of a host file opened for
#: reading (a read-only bind) commits its filesystem's journal with a flush too (400 a second).
NO_EFFECT = ("sync", "syncfs", "fsync", "fdatasync", "sync_file_range", "sync_file_range2")
#: Kernel calls that start a process, refused with EPERM (``clone`` is refused unless it makes a thread).
NEW_PROCESS = ("fork", "vfork")
#: Kernel calls that set the real uid from their first argument, refused when it is 0 (module
#: docstring); the ``32`` ones exist on 32-bit ABIs only.
SET_UID = ("setuid", "setreuid", "setresuid", "setuid32", "setreuid32", "setresuid32")
#: Socket families a sample may create: AF_UNIX, AF_INET, AF_INET6 (per network namespace; not AF_NETLINK).
ALLOWED_FAMILIES = (1, 2, 10)
AF_VSOCK = 40
CLONE_THREAD = 0x00010000
CLONE_NEWNS_ANY = 0x7E020000  # every CLONE_NEW* flag (ns, cgroup, uts, ipc, user, pid, net)
TIOCSTI = 0x5412
#: ``ioctl`` setting a terminal's line discipline, refused with EPERM (module docstring).
TIOCSETD = 0x5423
#: ``fcntl`` command growing a pipe's buffer, refused with EPERM (the kernel's own answer to an
#: unprivileged process past ``fs.pipe-max-size`` or its per-user pipe pages). Why: what is written
#: to a pipe and not read is kernel memory no rlimit counts; a sample growing its pipes to 1 MB held
#: 29 MB in them at ``memory_mb = 128`` (``max_open_files = 64``), 1.8 MB with the default 64 KB ones.
F_SETPIPE_SZ = 1031
#: The bits of an ``int`` argument: the kernel drops the rest of the register, so a rule on one compares
#: these only (SOL_SOCKET | 1 << 32 is SOL_SOCKET to ``setsockopt``: an ``EQ`` rule let it through).
INT_BITS = 0xFFFFFFFF
#: ``setsockopt`` options answered 0 without effect (module docstring): (level, option name).
BUFFER_OPTIONS = tuple((socket.SOL_SOCKET, getattr(socket, name)) for name in ("SO_SNDBUF", "SO_RCVBUF")
                       if hasattr(socket, name)) if hasattr(socket, "SOL_SOCKET") else ()

#: ``setsockopt(SOL_SOCKET, SO_ZEROCOPY)``, refused with EPERM (the number of asm-generic, x86_64 and
#: aarch64). Why: with it, ``sendmsg(MSG_ZEROCOPY)`` on a TCP or UDP socket leaves the sample's pages
#: in the send queue by reference, and a page of a transparent huge page pins its whole 2 MB folio
#: after the sample unmaps it: 47 such sends per loopback connection nobody reads held about 94 MB
#: that RLIMIT_AS no longer counts (263 MB in 4 connections at memory_mb = 512). Without the option
#: the kernel copies what ``MSG_ZEROCOPY`` sends, so sockets work as before.
SO_ZEROCOPY = 60

_lock = threading.Lock()
_cache: list[tuple[bytes | None, str]] = []


def compiled_filter() -> tuple[bytes | None, str]:
    """(BPF program, sentence for the isolation report); the program is None when unavailable."""
    with _lock:
        if not _cache:
            _cache.append(_build())
        return _cache[0]


def _build() -> tuple[bytes | None, str]:
    try:
        import pyseccomp as sc
    except (ImportError, OSError, AttributeError, RuntimeError) as exc:  # not installed, or no libseccomp.so
        return None, f"off: no libseccomp bindings ({type(exc).__name__}: {exc}); namespaces and no capabilities only"
    try:
        rules = sc.SyscallFilter(sc.ALLOW)
        skipped = []
        for name in DENIED:
            try:
                rules.add_rule(sc.ERRNO(errno.EPERM), name)
            except (ValueError, RuntimeError, OSError):
                skipped.append(name)  # not a call on this architecture
        for name in NEW_PROCESS:
            try:
                rules.add_rule(sc.ERRNO(errno.EPERM), name)
            except (ValueError, RuntimeError, OSError):
                pass  # not a call on this architecture (aarch64 has clone only)
        for name in NO_EFFECT:
            try:
                rules.add_rule(sc.ERRNO(0), name)
            except (ValueError, RuntimeError, OSError):
                pass  # not a call on this architecture (sync_file_range2: 32-bit ARM and PowerPC)
        flags = _clone_flags_arg(sc)
        rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(flags, sc.MASKED_EQ, CLONE_THREAD, 0))
        rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for bit in range(32):
            flag = 1 << bit
            if CLONE_NEWNS_ANY & flag:
                rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(flags, sc.MASKED_EQ, flag, flag))
        for request in (TIOCSTI, TIOCSETD):
            rules.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, INT_BITS, request))
        for call in ("fcntl", "fcntl64"):  # fcntl64: 32-bit ABIs only
            try:
                rules.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(1, sc.MASKED_EQ, INT_BITS, F_SETPIPE_SZ))
            except (ValueError, RuntimeError, OSError):
                pass  # not a call on this architecture
        for call in SET_UID:
            try:
                rules.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.MASKED_EQ, INT_BITS, 0))
            except (ValueError, RuntimeError, OSError):
                pass  # not a call on this architecture
        _refuse_families(sc, rules)
        for level, option in BUFFER_OPTIONS:
            rules.add_rule(sc.ERRNO(0), "setsockopt", sc.Arg(1, sc.MASKED_EQ, INT_BITS, level),
                           sc.Arg(2, sc.MASKED_EQ, INT_BITS, option))
        if BUFFER_OPTIONS:  # Linux: SOL_SOCKET is known
            rules.add_rule(sc.ERRNO(errno.EPERM), "setsockopt", sc.Arg(1, sc.MASKED_EQ, INT_BITS, socket.SOL_SOCKET),
                           sc.Arg(2, sc.MASKED_EQ, INT_BITS, SO_ZEROCOPY))
        with tempfile.TemporaryFile() as out:  # libseccomp writes to a real descriptor
            rules.export_bpf(out)
            out.seek(0)
            program = out.read()
    except Exception as exc:  # noqa: BLE001 - any libseccomp failure means "no filter", reported
        return None, f"off: libseccomp failed ({type(exc).__name__}: {exc})"
    names = len(DENIED) - len(skipped)
    return program, (f"on: {names} calls refused (namespaces, mount, ptrace, keyctl, bpf, modules, io_uring, AIO, ioprio_set, "
                     "SysV IPC, socketpair, pidfd_send_signal, vmsplice, splice, sendfile, ...), sync/fsync answered "
                     "without effect, "
                     "clone with namespace flags, TIOCSTI, TIOCSETD (line disciplines), "
                     "SO_ZEROCOPY, socket families beyond unix/inet/inet6 "
                     "(AF_VSOCK, AF_NETLINK...), socket buffer sizes (SO_SNDBUF/SO_RCVBUF kept at their defaults), "
                     "pipe buffer sizes (F_SETPIPE_SZ), setuid calls to uid 0; new processes refused (fork, vfork, clone "
                     "without CLONE_THREAD; clone3 ENOSYS): one process, threads only, memory_mb in all")


def _clone_flags_arg(sc: Any) -> int:
    """Which argument of ``clone`` holds the flags: the first, except on s390 (stack first)."""
    return 1 if sc.system_arch() in (sc.Arch.S390, sc.Arch.S390X) else 0


def _refuse_families(sc: Any, rules: Any) -> None:
    """``socket`` with a family outside ``ALLOWED_FAMILIES`` -> EAFNOSUPPORT (``socketpair`` is
    refused whole, ``DENIED``). One
    comparison per rule (libseccomp ORs rules): every value below the largest allowed one that is
    not allowed, and everything above it. The comparison is on the whole register, so a family
    with high bits set (the kernel reads an int) is refused too, even when its low bits are allowed."""
    top = max(ALLOWED_FAMILIES)
    for family in range(top):  # an error here means no filter rather than one that lets AF_VSOCK through
        if family not in ALLOWED_FAMILIES:
            rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GT, top))
