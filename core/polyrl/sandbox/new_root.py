"""The ``unshare`` level's filesystem: a root of the sample's own, built as bubblewrap builds one.

Why: the read-only host view (``polyrl.sandbox.host_view``) hid only the usual folders (``/run``,
the homes, the trainer's working folder, ...). A sample still read every file its uid could read
elsewhere (a world-readable dataset with the expected answers in ``/opt`` or on a data disk) and
connected to every unix socket its permissions allowed there (a judge's 0666 socket in
``/var/lib``: ``connect`` needs write permission on the socket, which a read-only mount keeps).

In the sample's own mount namespace (``unshare --mount``, inside a user namespace of its own for a
non-root trainer) a short setup program, run before the privilege drop, mounts an empty tmpfs on
``/tmp`` and builds the new root in it: ``/usr`` and the merged-/usr links (or folders) of ``/``,
the interpreter's folders (``interpreter_binds``), the sample's own ``/proc`` (``--mount-proc``),
a ``/dev`` of ``null``, ``zero``, ``full``, ``random`` and ``urandom`` only, every mount of it
read-only, and the sample's size- and inode-capped tmpfs at ``/tmp``. Then ``pivot_root`` makes
the outer tmpfs holding it ``/`` and the host's whole tree is detached, so no path, socket or
folder of the host outside those binds is there at all (the trainer's ``/etc`` neither, as under
bubblewrap). ``hide``: the trainer's folders inside ``/usr`` (``usr_hidden``), under an empty
read-only tmpfs, and the run's dataset files no such folder holds (in ``/usr``, or in a folder
kept for the interpreter: ``host_view.bound_files``), under ``/dev/null`` after those binds.

Before all that it sets ``shmmni``, ``msgmni`` and ``sem``'s SEMMSL of the sample's IPC namespace to 0 (where the kernel
lets it: always as root): without the seccomp filter (which refuses ``shmget``) a sample held
384 MB of detached SysV segments with ``memory_mb = 128`` (RLIMIT_AS counts only what is mapped).

Last, it chroots into the new root, one mount below the namespace's root. Why: without the
seccomp filter a sample made a user namespace of its own (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``)
and held CAP_NET_ADMIN and CAP_SYS_ADMIN there (nf_tables and the other usual first steps of a
kernel exploit; a sysfs of its own where one was in view). The kernel refuses a user namespace
to a chrooted process (``create_user_ns``: ``current_chrooted``, since Linux 3.9), and a sample
without CAP_SYS_CHROOT and no descriptor outside cannot leave the chroot.

Where this fails (no ``pivot_root`` on a root that is the initramfs, an architecture without its
number here) the level falls back to the read-only host view and the report says why.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

#: ``pivot_root``'s system call number per machine (glibc has no wrapper).
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203,
              "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218, "loongarch64": 41}
#: The devices a sample gets in its ``/dev`` (bubblewrap's ``--dev`` gives these and a few more).
DEVICES = ("null", "zero", "full", "random", "urandom")
#: What of ``/`` the new root holds besides ``/usr``: the merged-/usr links or folders.
ROOT_ENTRIES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

#: ``/proc`` files with /dev/null bound over them in every sample's own ``/proc`` (bubblewrap's,
#: both setup programs'): ``keys`` listed, by description, every key the sample may view, and it
#: possesses the trainer's session keyring's (a key named "hf-token" added there was listed with its
#: length in every sample, root or pool uid; a root sample, ``user = "none"``, also saw root's
#: keyrings), and ``key-users`` every uid's key counts. The filter refuses the calls that read a key.
#: ``cmdline``: the host kernel's command line (the machine's boot setup, and where a host boots from
#: the network the credentials of its root, e.g. dracut's ``netroot=iscsi:user:password@...``), which
#: every sample read; nothing a sample runs needs it. ``ROOT_ONLY_PROC`` too.
#: The kernel's own mode-0400 ``/proc`` files (``cmdline`` above is 0444), which no capability guards: a
#: root sample (``user = "none"``: effective uid 0 without capabilities, its user namespace mapping
#: uid 0 to the host's) read them as their owner under bubblewrap and at the ``unshare`` level:
#: ``kpageflags``, ``kpagecount`` and ``kpagecgroup`` (the flags, use counts and cgroup of every
#: physical page of the host: the map a Rowhammer or page-cache attack starts from), ``slabinfo``
#: (the kernel heap's caches, which a kernel exploit grooms), ``vmallocinfo``, ``pagetypeinfo`` and
#: ``timer_list`` (every CPU's timers, by kernel function). A pool uid's sample was refused them already.
ROOT_ONLY_PROC = ("/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup", "/proc/slabinfo",
                  "/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/timer_list")
PROC_MASKED = ("/proc/keys", "/proc/key-users", "/proc/cmdline", *ROOT_ONLY_PROC)

#: Both setup programs' binds of /dev/null (``null``) over ``PROC_MASKED`` under ``top`` (their
#: ``/proc``); where the kernel refuses one the sample runs as before (the bind is not a wall the
#: rest rests on: the filter refuses ``keyctl``).
MASK_PROC = r'''
def mask_proc(top, null):
    for path in @PROC_MASKED@:
        if os.path.exists(top + path):
            try:
                mount(null, top + path, None, BIND)
            except OSError:
                pass
'''.replace("@PROC_MASKED@", repr(PROC_MASKED))

#: The setup programs' last step (this one's and ``host_view``'s), right before they exec the
#: privilege drop: load the seccomp filter (``polyrl.sandbox.seccomp``; hex, or "-" for none), as
#: bubblewrap's ``--seccomp`` does. ``no_new_privs`` first: the kernel asks it of a process
#: without CAP_SYS_ADMIN, and the privilege drop sets it anyway.
LOAD_FILTER = r'''
def load_filter(hexed):
    if hexed == "-":
        return
    program = bytes.fromhex(hexed)

    class Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs: " + os.strerror(ctypes.get_errno()))
    if libc.prctl(22, 2, ctypes.byref(Program(len(program) // 8, program)), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter: " + os.strerror(ctypes.get_errno()))
'''

#: Sets ``shmmni`` and ``msgmni`` of the sample's IPC namespace to 0 (module doc: SysV memory
#: held past ``memory_mb``); both setup programs run it before the privilege drop.
NO_SYSV_IPC = '''
for limit in ("kernel/shmmni", "kernel/msgmni", "kernel/sem"):  # no SysV segment, queue or semaphore set there
    try:
        with open(f"/proc/sys/{limit}", "w") as out:
            out.write("0")
    except OSError:  # a kernel whose IPC limits a user namespace may not set: as before
        pass
'''

#: ``net.core.somaxconn`` of the sample's network namespace: the longest accept queue of a listener,
#: TCP or unix (``isolation.ACCEPT_QUEUE`` says why for TCP). A unix stream connection waiting there,
#: its client closed after filling it, holds up to the client's send buffer (208 KB) and no
#: descriptor: at the ``unshare`` level, whose setup wrote none of the namespace limits, one listener
#: queued 300 such connections holding 68 MB (the default queue is 4096 a listener).
ACCEPT_QUEUE = 8
#: ``net.unix.max_dgram_qlen`` of the sample's network namespace: a unix datagram socket queues one
#: more than this of what others send it (what it sends itself is bounded by its own send buffer).
#: Why: a datagram waits there after its sender is closed, up to the sender's send buffer (208 KB)
#: each, kernel memory no rlimit counts, and the default is 10: a sample sending to 40 sockets of
#: its own from short-lived senders held 86 MB in them (MemAvailable fell 104 MB) at any
#: ``memory_mb``. Now two datagrams a socket, at most ``max_open_files`` x 416 KB.
UNIX_DGRAM_QUEUE = 1
#: Sets ``ACCEPT_QUEUE`` and ``UNIX_DGRAM_QUEUE`` in the sample's network namespace; both setup
#: programs of the ``unshare`` level run it before the privilege drop (bubblewrap's wrapper writes
#: them with its TCP limits: ``isolation.namespace_sysctls``; the ``unshare`` level's loopback is
#: down, so only unix sockets queue there).
UNIX_QUEUES = '''
for limit, value in @UNIX_QUEUES@:
    try:
        with open(f"/proc/sys/{limit}", "w") as out:
            out.write(value)
    except OSError:  # a kernel that lets no namespace set it: as before
        pass
'''.replace("@UNIX_QUEUES@", repr((("net/core/somaxconn", str(ACCEPT_QUEUE)),
                                     ("net/unix/max_dgram_qlen", str(UNIX_DGRAM_QUEUE)))))

#: The sample's host name (``uname -n``, ``socket.gethostname()``, ``/proc/sys/kernel/hostname``) in
#: its UTS namespace of its own, at every level with one (bubblewrap's ``--hostname``; the ``unshare``
#: level's setup programs). Why: a new UTS namespace starts with a copy of the host's names, so every
#: sample read the machine's host name (a cluster node's, naming the site and the node).
HOSTNAME = "sandbox"
#: Sets ``HOSTNAME`` (and the NIS domain name, which the new namespace copied too, to the kernel's
#: default) in the sample's UTS namespace; both setup programs of the ``unshare`` level run it
#: before the privilege drop (``unshare --uts`` made the namespace; where it did not, e.g. a
#: command line built without it, the host's names are left as they are: it is not a wall).
OWN_NAMES = """
for call, name in (("sethostname", @HOSTNAME@), ("setdomainname", b"(none)")):
    getattr(libc, call)(name, len(name))
""".replace("@HOSTNAME@", repr(HOSTNAME.encode()))

#: The setup program (``setup_command``, then the command it execs). Errors end it with status 126
#: and one line on stderr, which the level's probe reports.
SETUP = r'''
import ctypes, os, sys
args = sys.argv[1:]  # tmpfs options, pivot_root's number, filter, hidden folders, "--", kept paths, "--", command
cut = args.index("--", 3)
end = args.index("--", cut + 1)
tmp, pivot, hide, keep, rest = args[0], int(args[1]), args[3:cut], args[cut + 1:end], args[end + 1:]
libc = ctypes.CDLL(None, use_errno=True)
@LOAD_FILTER@
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC = 1, 2, 4, 8, 32, 4096, 16384
KEPT = (NOSUID | NODEV | NOEXEC | 1024 | 2048 | (1 << 21))  # locked flags a remount must repeat
OUTER = "/tmp"  # a tmpfs of this namespace (the host never sees it): the root left after pivot_root
NEW = OUTER + "/root"  # the sample's root, built in a tmpfs of its own inside OUTER

def fail(err, what):
    raise OSError(err, f"{what}: {os.strerror(err)}")

def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    if libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        fail(ctypes.get_errno(), f"mount {fstype or 'bind'} on {dst}")

def read_only(path, flags):
    mount(None, path, None, REMOUNT | BIND | RDONLY | (flags & KEPT))

def all_read_only(top):
    attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr: attr_set = MOUNT_ATTR_RDONLY
    if libc.syscall(ctypes.c_long(442), ctypes.c_int(-100), top.encode(), ctypes.c_uint(0x8000), attr,
                    ctypes.c_size_t(32)) == 0:  # mount_setattr(AT_FDCWD, top, AT_RECURSIVE, ...)
        return
    if ctypes.get_errno() not in (38, 22):  # ENOSYS (before Linux 5.12), EINVAL
        fail(ctypes.get_errno(), "mount_setattr")
    with open("/proc/self/mountinfo") as info:
        points = [line.split()[4].encode().decode("unicode_escape") for line in info]
    for point in points:
        if point == top or point.startswith(top + "/"):
            try:
                read_only(point, os.statvfs(point).f_flag)
            except OSError:
                if os.path.exists(point) and os.statvfs(point).f_flag & RDONLY == 0:
                    raise

@MASK_PROC@

def place(path, fd):
    """An empty folder or file at ``NEW + path`` (its missing folders 0755), ``fd``'s bound on it."""
    target = NEW + path
    os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, 0o755, exist_ok=True)
    elif not os.path.lexists(target):
        open(target, "x").close()
    mount(f"/proc/self/fd/{fd}", target, None, BIND | REC)

@NO_SYSV_IPC@
try:
    program = os.path.realpath(rest[0])  # a link in a folder about to be left behind (a tool in /tmp)
    links, binds = {}, []
    for name in @ROOT_ENTRIES@:
        if os.path.islink("/" + name):
            links[name] = os.readlink("/" + name)
        elif os.path.isdir("/" + name):
            binds.append("/" + name)
    binds += ["/usr", "/proc"] + [f"/dev/{d}" for d in @DEVICES@ if os.path.exists(f"/dev/{d}")]
    opened = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in binds]
    first = len(opened)
    under = lambda path, top: path == top or path.startswith(top + "/")
    files = [f for f in hide if not os.path.isdir(f)]  # the run's dataset files: /dev/null over each, after the binds
    hide = [f for f in hide if f not in files]
    # never a path of the host's /usr (bound whole: a folder made there would be the host's), but
    # what is under a hidden folder in it (a venv in a project folder under /usr/local)
    keep = [p for p in keep if os.path.lexists(p) and (not under(p, "/usr") or any(under(p, h) and p != h for h in hide))]
    opened += [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in keep]
    mount("polyrl-outer", OUTER, "tmpfs", NOSUID | NODEV, "size=64k,nr_inodes=16,mode=755")
    os.mkdir(NEW, 0o755)
    mount("polyrl-root", NEW, "tmpfs", NOSUID | NODEV, "size=1m,nr_inodes=4096,mode=755")
    for name, target in links.items():
        os.symlink(target, f"{NEW}/{name}")
    os.makedirs(f"{NEW}/dev", 0o755)
    os.symlink("/proc/self/fd", f"{NEW}/dev/fd")
    for index, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{index}", f"{NEW}/dev/{name}")
    for path, fd in opened[:first]:
        place(path, fd)
    mask_proc(NEW, f"{NEW}/dev/null")
    for folder in hide:  # the trainer's folders inside /usr: an empty tmpfs, before the kept binds under it
        mode = os.stat(NEW + folder).st_mode & 0o7777
        mount("polyrl-hidden", NEW + folder, "tmpfs", NOSUID | NODEV, f"size=1m,nr_inodes=4096,mode={mode:o}")
    late = [(path, fd) for path, fd in opened[first:] if under(path, "/tmp")]  # a venv under /tmp (CI runners)
    for path, fd in opened[first:]:
        if (path, fd) not in late:
            place(path, fd)
    for path in files:  # in /usr or a kept folder (the interpreter's venv), covered after its bind
        if not any(under(path, top) for top, _ in late) and os.path.lexists(NEW + path):  # gone: nothing to cover
            mount(f"{NEW}/dev/null", NEW + path, None, BIND)
    os.makedirs(f"{NEW}/tmp", 0o755, exist_ok=True)
    all_read_only(NEW)
    mount("polyrl-sample", f"{NEW}/tmp", "tmpfs", NOSUID | NODEV, tmp)
    for path, fd in late:  # after the sample's tmpfs, which would cover them, as bubblewrap binds them
        place(path, fd)
        for file in files:
            if under(file, path) and os.path.lexists(NEW + file):
                mount(f"{NEW}/dev/null", NEW + file, None, BIND)
        all_read_only(NEW + path)
    for path, fd in opened:
        os.close(fd)
    read_only(OUTER, NOSUID | NODEV)
    os.chdir(OUTER)
    if libc.syscall(ctypes.c_long(pivot), b".", b".") != 0:  # pivot_root(".", "."): no folder for the old root
        fail(ctypes.get_errno(), "pivot_root")
    if libc.umount2(b".", 2) != 0:  # MNT_DETACH: the host's tree, stacked on the outer tmpfs, goes
        fail(ctypes.get_errno(), "umount the host's root")
    # chrooted below the namespace's root, the kernel refuses the sample a user namespace (EPERM,
    # create_user_ns' current_chrooted check): no nested namespaces owned by it
    os.chdir(NEW[len(OUTER):])
    if libc.chroot(b".") != 0:
        fail(ctypes.get_errno(), "chroot")
    os.chdir("/tmp")
    load_filter(args[2])
except OSError as exc:
    print(f"polyrl-sandbox new root: {exc}", file=sys.stderr)
    sys.exit(126)
os.execv(program, rest)  # argv[0] as given: a venv's python finds its pyvenv.cfg from it
'''.replace("@ROOT_ENTRIES@", repr(ROOT_ENTRIES)).replace("@DEVICES@", repr(DEVICES)).replace(
    "@LOAD_FILTER@", LOAD_FILTER).replace("@NO_SYSV_IPC@", NO_SYSV_IPC + UNIX_QUEUES + OWN_NAMES).replace(
    "@MASK_PROC@", MASK_PROC)


def pivot_root_number() -> int | None:
    """``pivot_root``'s number on this machine, or None where it is not known here."""
    return PIVOT_ROOT.get(platform.machine())


def setup_command(python: str, disk_mb: int, inodes: int, keep: Sequence[str],
                  hide: Sequence[str] = (), program: bytes | None = None) -> list[str]:
    """The setup program's command line (module docstring), to put between ``unshare`` and the
    privilege drop; ``keep`` are the interpreter's folders and files to bind into the new root,
    ``hide`` the trainer's folders inside ``/usr`` to cover, ``program`` the seccomp filter."""
    tmp = f"size={int(disk_mb) * 1024 * 1024},nr_inodes={inodes},mode=1777"
    return [python, "-I", "-S", "-c", SETUP, tmp, str(pivot_root_number() or -1),
            program.hex() if program else "-", *hide, "--", *keep, "--"]
