"""How a sample's process is isolated by the operating system, decided once per configuration.

The ``isolation`` option (code_tests' and the ``python`` tool's ``environment.python_isolation``):

``auto``        (default) the strong level or nothing: where bubblewrap cannot run, building the
                sandbox raises an error naming what is missing (fail closed). Without libseccomp the
                strong level still runs, with a warning and a report line saying the filter is off.
``require``     strict: the strong level *and* the seccomp filter, else the same error.
``weak``        the old "auto": the strongest level that works here, down to ``unshare`` and
                ``off``, with a warning. An explicit opt-in: at those levels a non-root trainer's
                sample runs as the trainer's own uid (reads its files, ~/.netrc, the dataset with
                the expected answers; at ``off`` 127.0.0.1, and its /proc/<pid>/environ and
                memory where the kernel refuses the sample a user namespace: ``userns_wrapper``),
                and the audit hook, the only guard left, is Python inside the sample.
``off``         a plain subprocess: rlimits, the Python audit hook and the timeout only.

Levels, strongest first. Only ``bwrap`` is STRONG (``STRONG_LEVELS``): it alone gives the sample
namespaces that keep it from the trainer's files, processes (environment, memory), network and
run folder whatever its uid; the others leave the host's files (and at ``off`` its processes and
network) to kernel permissions of a uid that may be the trainer's own.

``bwrap``       bubblewrap: fresh mount, PID (own /proc), network, IPC, UTS and cgroup namespaces
                and a user namespace where no other nests (as root ``userns_wrapper``'s, else
                bubblewrap's with ``--disable-userns``); the only filesystem is a read-only view of
                /usr and the interpreter's bin, lib, share and ssl (a venv's: its python and
                lib/pythonX.Y only; ``interpreter_binds``) plus a private tmpfs at /tmp capped in size and
                inodes (``tmpfs_wrapper``, which also makes the network namespace, its TCP buffers,
                accept queues and TIME_WAIT sockets capped: ``TCP_BUFFER_MAX``, ``ACCEPT_QUEUE``,
                ``TIME_WAIT_MAX``; without util-linux ``python_wrapper`` does it); no capabilities; the sample's uid is an unprivileged
                user, as root one per sample running at once (``polyrl.sandbox.uids``: the kernel
                counts ``max_processes`` per uid) with the gid of the same number; seccomp filter if built (it also refuses new
                processes: the sample is one process, ``memory_mb`` in all).
``unshare``     util-linux unshare: network, PID, IPC, UTS and mount namespaces (a user namespace when
                not root); a root of the sample's own as bubblewrap builds it (``new_root``):
                read-only /usr and the interpreter's folders, its own /proc, a minimal /dev and a
                capped private tmpfs at /tmp, nothing else of the host; chrooted below its mount
                namespace's root, so the kernel refuses it a user namespace; the seccomp filter
                if built, loaded by the setup program last (``new_root.LOAD_FILTER``: the sample
                is one process there too). Where ``pivot_root`` is
                refused: the host's files read-only, with ``/run``, ``/var/tmp``, ``/dev/shm``,
                ``/dev/pts``, the homes and the trainer's working folder hidden under empty
                read-only folders (``polyrl.sandbox.host_view``), kernel permissions applying to
                the rest (as root the sample is ``nobody``, which reads every world-readable file
                left visible; a non-root trainer's sample is the trainer's own uid without
                capabilities, which reads the trainer's files left visible). Where the kernel
                refuses those mounts too: files of the host visible and writable with those
                permissions, disk capped per file (a non-root trainer's sample without capabilities
                in its user namespace all the same: ``_namespace_caps``). The report says which
                holds and why.
                Where not chrooted (the view), and as root also in the root of its own, the sample
                is in a user namespace of its own where no other nests (``userns_wrapper``; a
                non-root trainer's: the setup sets its ``user.max_user_namespaces``).
``off``         a plain subprocess: rlimits, the Python audit hook and the timeout only; it starts
                in a user namespace of its own where no other nests (``userns_wrapper``), where
                the kernel lets it.

At every level the sample starts under ``choom`` (util-linux) with ``oom_score_adj`` 1000: rlimits
are per process, so without the seccomp filter (off, no libseccomp) a sample's processes
together can hold ``max_processes`` x ``memory_mb``, and samples run ``max_workers`` at a time;
when that exhausts the machine the kernel's OOM killer must take a sample, never the trainer (with
the largest memory it is the first choice otherwise). Set by root, the value is also the floor
the sample cannot go under; behind bubblewrap ``/proc`` is read-only, so it cannot write it at all.
After ``choom`` comes ``ionice -c 2 -n 7`` (``io_last``): the lowest best-effort I/O priority, not
the trainer's inherited class.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

import attrs

from polyrl.errors import RewardError
from polyrl.sandbox import host_view, new_root, python_wrapper, seccomp, uids

LEVELS = ("auto", "require", "weak", "off")
#: Levels that keep the sample from the trainer's files, environment, memory and network.
STRONG_LEVELS = ("bwrap",)
#: What the sample sees at / (besides /usr): the merged-/usr links or folders of the host.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Where the sample lives inside bubblewrap: its cwd, HOME and TMPDIR.
SANDBOX_HOME = "/tmp"


@attrs.define(frozen=True)
class Launch:
    """How to start one sample: ``argv(python_args)`` and the report of what it gets."""

    level: str  # "bwrap", "unshare" or "off"
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]  # between the prefix's end and the interpreter (privilege drop)
    python: str
    private_tmp: bool  # the sample's folder is a tmpfs inside the sandbox (else a host temp dir)
    ids: tuple[int, int] | None  # (uid, gid) a host temp dir must belong to
    seccomp_program: bytes | None
    report: dict[str, str]
    site_dirs: tuple[str, ...] = ()
    oom: tuple[str, ...] = ()  # ``choom -n 1000 --`` before everything (module docstring), or ()
    #: After ``oom``: ``ionice -c 2 -n 7 --``, the lowest best-effort I/O priority (``io_last``), or ().
    io: tuple[str, ...] = ()
    #: Between ``oom`` and ``prefix``: the private mount namespace that mounts the inode-capped
    #: tmpfs (``tmpfs_wrapper``), or () where it cannot (the tmpfs is then bwrap's own).
    wrapper: tuple[str, ...] = ()
    #: Each sample running at once gets its own uid from ``polyrl.sandbox.uids``, and the gid of the
    #: same number (``ids`` is the pool's first: ``(uids.FIRST, uids.FIRST)``); with ``ids`` None (a
    #: root sample, ``user = "none"``) the uid is its real uid only (``no_capabilities``).
    uid_pool: bool = False
    #: Between ``oom`` and ``wrapper``: the sample's own user namespace, where no other nests
    #: (``userns_wrapper``: a root trainer's under bubblewrap, every trainer's at ``off``), or ().
    userns: tuple[str, ...] = ()

    def argv(self, python_args: Sequence[str], seccomp_fd: int | None, uid: int | None = None) -> list[str]:
        """The command line; ``uid`` (from the pool) replaces ``ids``' uid and gid in the privilege drop."""
        cmd = list(self.oom) + list(self.io) + list(self.userns) + list(self.wrapper) + list(self.prefix)
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        suffix = list(self.suffix)
        if uid is not None:  # ``--ruid``: a root sample's real uid only (``no_capabilities``)
            swap = {f"--ruid={uids.FIRST}": f"--ruid={uid}", f"--regid={uids.FIRST}": f"--regid={uid}"}
            if self.ids is not None:
                swap.update({f"--reuid={self.ids[0]}": f"--reuid={uid}", f"--regid={self.ids[1]}": f"--regid={uid}"})
            suffix = [swap.get(arg, arg) for arg in suffix]
        return cmd + suffix + [self.python, *python_args]


_lock = threading.Lock()
_probes: dict[tuple[str, ...], str | None] = {}


def probe(cmd: Sequence[str], expect: str | None = None, pass_fds: Sequence[int] = ()) -> str | None:
    """None when ``cmd`` exits 0 (printing ``expect`` when given), else why not. Cached per command."""
    key = tuple(cmd) + (expect or "",)
    with _lock:
        if key in _probes and not pass_fds:
            return _probes[key]
    try:
        done = subprocess.run(list(cmd), stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                              cwd=tempfile.gettempdir(), env={"PATH": "/usr/bin:/bin"}, pass_fds=tuple(pass_fds))
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            reason: str | None = lines[-1] if lines else f"exit {done.returncode}"
        elif expect is not None and done.stdout.decode(errors="replace").strip() != expect:
            reason = f"it runs a different Python there ({done.stdout.decode(errors='replace').strip()!r})"
        else:
            reason = None
    except (OSError, subprocess.SubprocessError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    with _lock:
        _probes[key] = reason
    return reason


_IDENTITY = "import sys; print(sys.version, sys.prefix, sys.base_prefix)"


def site_dirs(python: str) -> list[str]:
    """The interpreter's site-packages folders. The sample's Python starts with ``-S`` (no ``site``:
    processing every ``.pth`` file of a venv with editable installs is half its start-up time) and
    the server adds these folders itself, so installed packages (numpy, ...) stay importable."""
    done = subprocess.run([python, "-I", "-c", "import site; print(chr(10).join(site.getsitepackages()))"],
                          capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    return [line for line in done.stdout.decode().splitlines() if line.strip()] if done.returncode == 0 else []


def interpreter_paths(python: str, inside: Sequence[str] = ()) -> list[str]:
    """Folders the interpreter needs (its prefix, base prefix, real binary's folder), outside /usr
    (bound whole) or inside one of ``inside`` (the trainer's folders in /usr, hidden: a venv there)."""
    done = subprocess.run([python, "-I", "-c", "import os, sys; print(sys.prefix); print(sys.base_prefix); "
                           "print(os.path.dirname(os.path.realpath(sys.executable)))"],
                          capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RewardError(f"code_tests: cannot run {python!r}: {done.stderr.decode(errors='replace')[-200:]}. "
                          "Fix: set options.python to a working interpreter")
    paths = []
    for line in done.stdout.decode().splitlines() + [os.path.dirname(os.path.realpath(python))]:
        real = os.path.realpath(line.strip())
        if real and (not real.startswith("/usr/") or any(host_view.under(real, top) for top in inside)) \
                and real not in paths:
            paths.append(real)
    return sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths))


#: What of an interpreter's installation prefix (a folder holding ``bin``, ``lib`` or
#: ``pyvenv.cfg``) the sample gets: its programs, its libraries, the data they read at run time
#: (conda's OpenSSL reads ``ssl/`` (certificates, openssl.cnf), terminfo and Tcl/Tk data live in
#: ``share/``) and a venv's ``pyvenv.cfg``; nothing else that lives beside them.
PREFIX_ENTRIES = ("bin", "lib", "lib32", "lib64", "share", "ssl", "pyvenv.cfg")
#: A venv's interpreter entries in its ``bin`` and its ``lib/pythonX.Y`` folders.
_PYTHON_NAME = re.compile(r"python[0-9.]*")


def _venv_entries(path: str, python: str | None) -> list[str]:
    """Of a venv's folder (it holds ``pyvenv.cfg``) only ``pyvenv.cfg``, the interpreter's entries
    of ``bin`` (``python``, ``python3``, ``python3.X``, the one started) and ``lib/pythonX.Y``. Why:
    a venv made in the project's folder (``python -m venv .``) shares ``bin`` and ``lib`` with the
    project, and its own ``lib/`` or ``bin/`` (data, scripts with keys) was the sample's to read."""
    entries = [os.path.join(path, "pyvenv.cfg")] if "pyvenv.cfg" in PREFIX_ENTRIES else []
    started = os.path.abspath(python) if python else ""
    for folder in ("bin", "lib", "lib32", "lib64"):
        where = os.path.join(path, folder)
        if folder not in PREFIX_ENTRIES or os.path.islink(where) or not os.path.isdir(where):
            continue  # lib64 -> lib: lib's own entries are bound
        for name in sorted(os.listdir(where)):
            full = os.path.join(where, name)
            if _PYTHON_NAME.fullmatch(name) and (folder == "bin" or os.path.isdir(full)) or full == started:
                entries.append(full)
    return entries


def interpreter_binds(paths: Sequence[str], python: str | None = None) -> list[str]:
    """What to bind of ``interpreter_paths``: of a venv only ``_venv_entries``, of another prefix
    (a folder holding ``bin``, ``lib`` or ``pyvenv.cfg``) its ``PREFIX_ENTRIES``, of any other
    folder all of it. Why: the whole prefix was bound, and a venv made in the project's own folder
    (``python -m venv .``) showed a sample the dataset with its expected answers, the run's config
    and its checkpoints. ``python``: the interpreter started, bound even under another name."""
    binds: list[str] = []
    for path in paths:
        if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
            entries = _venv_entries(path, python)
        else:
            entries = [os.path.join(path, name) for name in PREFIX_ENTRIES if os.path.lexists(os.path.join(path, name))]
        binds += entries or [path]
    return binds


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


#: The private tmpfs's inode cap: this many per MB of ``disk_mb``, at least ``MIN_INODES``. Why:
#: ``--size`` caps its blocks only; empty files (and directories, symlinks) take none, each costs
#: about 1 KB of kernel memory no rlimit counts, and tmpfs allows half of RAM's pages in inodes (a
#: sample made 520 000 empty files, 0.5 GB of kernel memory, in 4 s, and a longer timeout_s made more).
INODES_PER_MB = 256
MIN_INODES = 4096
#: Sysctls of the sample's IPC namespace set to 0 (no SysV shared memory segment or message
#: queue). Why: without the seccomp filter (no libseccomp), which refuses ``shmget``, a sample held
#: 384 MB of detached SysV segments with ``memory_mb = 128`` (RLIMIT_AS counts only what is
#: mapped, and a segment outlives its mapping in the sample's IPC namespace). ``kernel/sem``'s
#: first value (SEMMSL, semaphores per set) too: at 0 no set can be made (EINVAL), where each
#: ``semget`` held 2 MB of kernel memory (32000 semaphores), 300 MB in 0.6 s at ``memory_mb = 128``.
IPC_LIMITS = ("kernel/shmmni", "kernel/msgmni", "kernel/sem")
#: The most a loopback TCP socket of a sample may buffer, each way (bytes): the maximum of
#: ``net.ipv4.tcp_wmem`` and ``tcp_rmem`` in the sample's network namespace (``TCP_BUFFERS``). Why:
#: TCP grows a connection's send buffer by itself up to ``tcp_wmem``'s maximum (4 MB by default),
#: whatever ``SO_SNDBUF`` says, and what is sent and not read sits in kernel memory no rlimit
#: counts: a sample filling the loopback connections it never read held 108 MB with
#: ``memory_mb = 128`` and ``max_open_files = 64``. 128 KB still fills a loopback connection's pipe.
TCP_BUFFER_MAX = 128 * 1024
#: The per-network-namespace TCP buffer settings (min, default, max) capped at ``TCP_BUFFER_MAX``.
TCP_BUFFERS = ("net/ipv4/tcp_wmem", "net/ipv4/tcp_rmem")
#: ``net.core.somaxconn`` in the sample's network namespace (``new_root.ACCEPT_QUEUE``, which the
#: ``unshare`` level's setup writes too): the longest accept queue of a listening
#: socket (a larger ``listen`` backlog is clamped to it). Why: a connection waiting there needs no
#: descriptor of the sample's, nor does its client once closed with data unsent (an orphan), so
#: ``max_open_files`` did not bound them: a sample connecting to its own listener, filling and
#: closing each connection, held 87 MB of the host's TCP memory in 300 of them, and the default
#: queue is 4096 a listener (the host's ``tcp_mem`` limit, shared with the trainer's connections,
#: is a few GB). Now at most ``max_open_files`` x ``ACCEPT_QUEUE`` such connections, each within
#: ``TCP_BUFFER_MAX`` each way.
ACCEPT_QUEUE = new_root.ACCEPT_QUEUE
#: ``net.ipv4.tcp_max_tw_buckets`` in the sample's network namespace: the most connections it keeps
#: in TIME_WAIT (past that the kernel closes them at once; the sample sees no error). Why: each
#: closed connection stays in TIME_WAIT for 60 s, kernel memory no rlimit counts, in the host's
#: shared connection table: a sample connecting to its own listener and closing made 14 000 of
#: them in 3 s (the namespace's limit was 131 072). They go when its namespace does, at its end.
TIME_WAIT_MAX = 256
#: ``net.unix.max_dgram_qlen`` in the sample's network namespace (``new_root.UNIX_DGRAM_QUEUE`` says why).
UNIX_DGRAM_QUEUE = new_root.UNIX_DGRAM_QUEUE


def namespace_sysctls() -> list[tuple[str, str]]:
    """What either wrapper writes in the sample's network namespace (under /proc/sys): the capped
    ``TCP_BUFFERS``, ``ACCEPT_QUEUE``, ``TIME_WAIT_MAX`` and ``UNIX_DGRAM_QUEUE``; any refused fails
    the wrapper."""
    return [*zip(TCP_BUFFERS, tcp_buffer_limits()), ("net/core/somaxconn", str(ACCEPT_QUEUE)),
            ("net/ipv4/tcp_max_tw_buckets", str(TIME_WAIT_MAX)),
            ("net/unix/max_dgram_qlen", str(UNIX_DGRAM_QUEUE))]


def tcp_buffer_limits() -> list[str]:
    """The values written to ``TCP_BUFFERS`` in the sample's network namespace: the host's own,
    none above ``TCP_BUFFER_MAX`` (a host set lower keeps its lower ones)."""
    values = []
    for name in TCP_BUFFERS:
        try:
            with open(f"/proc/sys/{name}") as f:
                host = [int(v) for v in f.read().split()]
        except (OSError, ValueError):
            host = [4096, 16384 if name.endswith("wmem") else 131072, TCP_BUFFER_MAX]
        if len(host) != 3:
            host = [4096, 16384, TCP_BUFFER_MAX]
        values.append(" ".join(str(min(v, TCP_BUFFER_MAX)) for v in host))
    return values


#: Brings the loopback device of a fresh network namespace up without iproute2 (SIOCGIFFLAGS,
#: then SIOCSIFFLAGS with IFF_UP; the kernel gives it 127.0.0.1 and ::1 then), as bubblewrap's
#: ``--unshare-net`` does for the namespace it makes.
_LOOPBACK_UP = ("import fcntl, socket, struct\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "flags = struct.unpack('16sH14x', fcntl.ioctl(s, 0x8913, struct.pack('16sH14x', b'lo', 0)))[1]\n"
                "fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', flags | 1))\n")


def _mount_script() -> str:
    """The wrapper's shell line: mount the sample's tmpfs (bubblewrap 0.8 has ``--size`` for it
    but no inode option), set ``IPC_LIMITS`` (where the kernel lets it), cap ``TCP_BUFFERS`` in the
    sample's network namespace, and its accept queues at ``ACCEPT_QUEUE``, and bring its loopback up (both or the wrapper fails: the launch
    then falls back to bubblewrap's own namespace and tmpfs, and the report says so), then exec
    the rest of the command (bubblewrap, which then makes no network namespace)."""
    ip = shutil.which("ip")
    loopback = (f"{shlex.quote(ip)} link set lo up" if ip is not None
                else f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(_LOOPBACK_UP)}")
    tcp = " && ".join(f"echo {shlex.quote(v)} > /proc/sys/{name}" for name, v in namespace_sysctls())
    return ('mount -t tmpfs -o "$1" polyrl-sample "$2" || exit; { '
            + " && ".join(f"echo 0 > /proc/sys/{name}" for name in IPC_LIMITS)
            + f"; }} 2>/dev/null; {tcp} || exit; {loopback} || exit; "
            + ("" if os.geteuid() == 0 else  # root: userns_wrapper's namespace has them; never the host's
               "for n in " + " ".join(NOTIFY_LIMITS) + '; do [ ! -e "/proc/sys/user/$n" ] || echo 0 > "/proc/sys/user/$n" '
               "|| exit; done; ")
            + 'shift 2 && exec "$@"')


def tmpfs_inodes(disk_mb: int) -> int:
    return max(MIN_INODES, int(disk_mb) * INODES_PER_MB)


def tmpfs_wrapper(disk_mb: int, mount_dir: str) -> list[str]:
    """A private mount namespace (util-linux ``unshare --mount``, propagation private, so the host
    never sees the mount) that mounts the sample's tmpfs with ``size`` *and* ``nr_inodes`` on
    ``mount_dir``, then execs bubblewrap, which binds it at ``/tmp``. Where ``unshare``, ``mount``
    or ``sh`` is missing, ``python_wrapper`` does the same steps in the trainer's interpreter.
    Not root: in a user namespace of its own where the trainer is root (``--map-root-user``),
    which may mount a tmpfs; bubblewrap's user namespace nests in it (``--uid``: the same uid).
    It also makes the sample's IPC namespace (``--ipc``; bubblewrap then makes none) and sets its
    ``IPC_LIMITS`` to 0, and its network namespace (``--net``; bubblewrap then makes none), where it
    writes ``namespace_sysctls`` (per namespace: the host's stay as they are) and brings loopback up; not
    root, it sets its user namespace's ``NOTIFY_LIMITS`` to 0 (as root ``userns_wrapper`` does)."""
    unshare, sh = shutil.which("unshare"), shutil.which("sh")
    options = f"size={int(disk_mb) * 1024 * 1024},nr_inodes={tmpfs_inodes(disk_mb)},mode=1777,nosuid,nodev"
    if unshare is None or sh is None or shutil.which("mount") is None:  # the same steps in Python
        return python_wrapper.command(options, mount_dir, namespace_sysctls(), IPC_LIMITS,
                                      () if os.geteuid() == 0 else NOTIFY_LIMITS)
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--mount", "--ipc", "--net", "--propagation", "private", "--", sh, "-c", _mount_script(),
            "polyrl-sandbox", options, mount_dir]


#: Per-user-namespace limits set to 0 in the sample's namespace: no inotify or fanotify instance
#: or watch. Why: the kernel counts them per uid up every user namespace, and in the one above the
#: sample's against the uid that made it (the trainer's: root), so a sample held 59 inotify
#: instances (and 59 unprivileged fanotify groups) out of root's 128 on the host, and the trainer's
#: own ``inotify_init1`` then failed (EMFILE) while the sample ran; watches likewise (root's 16384
#: here). A sample has no use for them; its namespace's own limit was INT_MAX.
NOTIFY_LIMITS = ("max_inotify_instances", "max_inotify_watches", "max_fanotify_groups", "max_fanotify_marks")
_NOTIFY_PYTHON = f"NOTIFY_LIMITS = {NOTIFY_LIMITS!r}\n"
#: ``userns_wrapper``'s program: it makes a user namespace and maps its uids and gids, sets its
#: ``user.max_user_namespaces`` to 0 (it holds every capability there until it execs) and execs the
#: rest of the command. As root a helper forked first (still in the host's user namespace, where
#: it may) maps every uid and gid to itself; else the process maps its own uid and gid (all an
#: unprivileged process may map), and sets its ``NOTIFY_LIMITS`` to 0. Errors: one line on stderr,
#: status 126.
_USERNS_SCRIPT = _NOTIFY_PYTHON + r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
parent, root, uid, gid = os.getpid(), os.geteuid() == 0, os.geteuid(), os.getegid()
ready, go = os.pipe()
helper = os.fork() if root else -1
if helper == 0:
    os.close(go)
    code = 1
    try:
        if os.read(ready, 1) == b"u":
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{parent}/{name}", "w") as out:
                    out.write("0 0 4294967295\n")
            code = 0
    finally:
        os._exit(code)
os.close(ready)
made = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
why = os.strerror(ctypes.get_errno())
if root:
    os.write(go, b"u" if made else b"-")
os.close(go)
mapped = os.waitpid(helper, 0)[1] == 0 if root else True
try:
    if not made or not mapped:
        raise OSError(why if not made else "its uid and gid maps were refused")
    if not root:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as out:
                out.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as out:
        out.write("0")
    for name in NOTIFY_LIMITS:  # absent on older kernels
        try:
            with open(f"/proc/sys/user/{name}", "w") as out:
                out.write("0")
        except FileNotFoundError:
            pass
except OSError as exc:
    print(f"polyrl-sandbox user namespace: {exc}", file=sys.stderr)
    sys.exit(126)
os.execv(sys.argv[1], sys.argv[1:])
'''


def userns_wrapper(python: str) -> list[str]:
    """A user namespace of the sample's own where no other nests (``user.max_user_namespaces`` 0),
    its uids mapped to themselves (as root every one: the pool's uids, root for ``user = "none"``;
    else the trainer's), around the rest of the command (bubblewrap with its tmpfs wrapper, as
    root; the ``unshare`` level's host view, as root; the ``off`` level). Why: a sample in the
    host's user namespace, whose limit is the host's, made a user namespace of its own without the
    seccomp filter (no libseccomp) and held every capability there (nf_tables, the usual kernel
    exploit's first step); and one at the trainer's uid (``user = "none"`` as root, a non-root
    trainer at ``off``) read that uid's user keyring ``@u``, which is per user namespace. Root there
    has capabilities over that namespace only, which bubblewrap and ``setpriv`` need. Its
    ``NOTIFY_LIMITS`` are 0: no inotify or fanotify instance counted against the trainer's uid."""
    return [python, "-I", "-S", "-c", _USERNS_SCRIPT]


def ensure_mount_dir(path: str) -> None:
    """``path`` is root's own empty folder, made again if a temp cleaner removed it (never a link)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise RewardError(f"code sandbox: {path} (where each sample's tmpfs is mounted, in its own mount "
                          "namespace) is not this user's folder. Fix: remove it")


def bwrap_prefix(python: str, ids: tuple[int, int] | None, disk_mb: int, tmpfs_dir: str | None = None,
                 whole_prefix: bool = False, hide: Sequence[str] = (),
                 real_uid: int | None = None) -> tuple[list[str], list[str]]:
    """(bwrap command up to the program, privilege drop to run before the interpreter). With
    ``tmpfs_dir`` (under ``tmpfs_wrapper``) the sample's /tmp is the inode-capped tmpfs mounted
    there, else bwrap's own (size-capped only). The interpreter's folders are bound as
    ``interpreter_binds`` says, or whole with ``whole_prefix`` (where that alone starts it).
    ``hide``: the trainer's folders inside /usr (``host_view.usr_hidden``), under an empty
    read-only tmpfs (the interpreter's folders in them bound back), and the run's dataset files
    no such folder holds, under /dev/null (bound without devices: it cannot be opened).
    ``real_uid``: a root sample's (``ids`` None) real uid, as ``no_capabilities`` says."""
    bwrap = shutil.which("bwrap") or "bwrap"
    root = os.geteuid() == 0
    # under the wrapper: its IPC and network namespaces, limits set
    own = [] if tmpfs_dir is not None else ["--unshare-net", "--unshare-ipc"]
    cmd = [bwrap, "--unshare-pid", *own, "--unshare-uts", "--hostname", new_root.HOSTNAME, "--unshare-cgroup-try",
           "--die-with-parent", "--clearenv"]
    if not root:  # the trainer's own uid inside, also under tmpfs_wrapper (where it is root)
        cmd += ["--unshare-user", *disable_userns(), "--uid", str(os.geteuid()), "--gid", str(os.getegid())]
    cmd += [*_usr_binds(), "--proc", "/proc", "--dev", "/dev"]
    for path in new_root.PROC_MASKED:  # the keys the sample may view, by name; the host's boot line (``new_root``)
        cmd += ["--ro-bind", "/dev/null", path] if os.path.exists(path) else []
    if tmpfs_dir is not None:
        cmd += ["--bind", tmpfs_dir, SANDBOX_HOME]
    else:
        cmd += ["--size", str(int(disk_mb) * 1024 * 1024), "--perms", "1777", "--tmpfs", SANDBOX_HOME]
    made: set[str] = {SANDBOX_HOME}
    for folder in hide:  # a dataset file of the run's (``host_view.in_view_files``): /dev/null over it, no device
        cmd += ["--perms", f"{stat.S_IMODE(os.stat(folder).st_mode):o}", "--size", str(1024 * 1024), "--tmpfs", folder] \
            if os.path.isdir(folder) else ["--ro-bind", "/dev/null", folder]
    folders = interpreter_paths(python, hide)
    binds = folders if whole_prefix else interpreter_binds(folders, python)
    for path in binds:  # after the tmpfs: a venv under /tmp stays visible
        for folder in _ancestors(path):
            if folder not in made and not any(folder == f"/{n}" for n in ROOT_LINKS + ("usr",)):
                made.add(folder)
                cmd += ["--perms", "0755", "--dir", folder]
        cmd += ["--ro-bind", path, path]
    for path in host_view.bound_files(python, binds, hide):  # a dataset file the binds show (in the venv): /dev/null
        cmd += ["--ro-bind", "/dev/null", path]
    # /proc read-only: a sample with uid 0 (user = "none", or no user nobody) could otherwise write
    # /proc/sys (kernel.core_pattern runs a program as the host's root) and lower its oom_score_adj
    for folder in hide:
        cmd += ["--remount-ro", folder] if os.path.isdir(folder) else []
    cmd += ["--remount-ro", "/dev", "--remount-ro", "/proc", "--remount-ro", "/", "--chdir", SANDBOX_HOME]
    for key, value in sandbox_env(SANDBOX_HOME).items():
        cmd += ["--setenv", key, value]
    drop: list[str] = []
    # CAP_SETPCAP only for setpriv, to empty the bounding set (without it ``--bounding-set=-all``
    # silently kept the container's full set); the sample itself never holds it
    if root and ids is not None:
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        drop = drop_privileges(ids)
    elif root and real_uid is not None and (drop := no_capabilities(real_uid, real_uid)):  # setreuid: CAP_SETUID
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    elif root and (drop := no_capabilities(group=uids.FIRST)):  # a group not bubblewrap's PID 1's
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        cmd += ["--cap-drop", "ALL"]
    return cmd, drop


def covers_gone(launch: Launch, output: str) -> list[str]:
    """The run's dataset files ``launch`` binds /dev/null over (``bwrap_prefix``) that are gone now
    and that bubblewrap said it could not make a mount point for (``output``: what the sample's
    process wrote). Why: a file that vanished between ``sandbox_hidden.state()`` and the launch
    (a dataset shard rewritten, a temp copy removed) made bubblewrap stop before the sample ran,
    and a right sample scored 0 as "ended without an answer"; nothing is left to cover then, so
    the runner builds the launch again and starts the sample once more."""
    if launch.level != "bwrap":  # the unshare level's setup programs skip a file that is gone
        return []
    args = launch.prefix
    covered = [args[i + 2] for i in range(len(args) - 2) if args[i] == "--ro-bind" and args[i + 1] == "/dev/null"]
    return [path for path in covered if not os.path.lexists(path) and f"Can't create file at {path}:" in output]


def disable_userns() -> list[str]:
    """``--disable-userns`` where this bubblewrap has it (0.8 on) and it works here, else []; for a
    non-root trainer, whose sample has a user namespace of its own. Why: without the seccomp filter
    (no libseccomp), which refuses ``unshare``, the sample made a user namespace inside it, and
    held ``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN`` there (nf_tables, the usual kernel exploit's first
    step). bubblewrap sets ``user.max_user_namespaces`` of the sample's namespace so no other nests
    (ENOSPC). Asked once per process (``probe`` caches it)."""
    bwrap = shutil.which("bwrap")
    true = shutil.which("true", path="/usr/bin:/bin")
    if bwrap is None or true is None:
        return []
    return ["--disable-userns"] if probe([bwrap, "--unshare-user", "--disable-userns", *_usr_binds(), true]) is None else []


def _usr_binds() -> list[str]:
    """bubblewrap's arguments for a read-only /usr and the root folders that are links into it
    (or folders of their own) on this host: every layout's and probe's base view."""
    cmd = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        host = "/" + name
        if os.path.islink(host):
            cmd += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            cmd += ["--ro-bind", host, host]
    return cmd


def options_fd(options: Sequence[str]) -> int:
    """A descriptor (close-on-exec: pass it) of an in-memory file holding ``options`` NUL-separated,
    read from its start: bubblewrap's ``--args FD``; -1 where no such file can be made (the options
    then stay on the command line). Why: bubblewrap's PID 1 in the sample's PID namespace keeps
    bubblewrap's command line, and a sample read it in ``/proc/1/cmdline``: the host folder its
    tmpfs is mounted from (``tmpfs_wrapper``), the trainer's pid, every bind, the names of what is
    hidden: host paths its mount table (``/proc/self/mountinfo``) no longer names."""
    data = b"".join(os.fsencode(option) + b"\0" for option in options)
    try:
        fd = os.memfd_create("polyrl-bwrap-args")
    except (AttributeError, OSError):  # not Linux, or a kernel before 3.17
        return -1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        return -1
    return fd


def sandbox_env(home: str) -> dict[str, str]:
    """The sample's whole environment: nothing of the trainer's (no keys, no PYTHON* variables)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "TMP": home, "TEMP": home,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def drop_privileges(ids: tuple[int, int]) -> list[str]:
    """Root becomes ``ids`` and can never gain a privilege again: no capabilities in any set and
    ``no_new_privs``, so a setuid-root binary (su, mount, passwd, newgrp, ...) or a file capability
    runs without its privilege. Without them a sample at the ``unshare`` and ``off`` levels ran such
    binaries as root (bubblewrap's level had them already)."""
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]


def no_capabilities(real_uid: int | None = None, group: int | None = None) -> list[str]:
    """As root without a user to drop to (user = "none"): exec the sample with an empty bounding
    set, so root's file capabilities give it none (the report says "without capabilities"; at the
    unshare and off levels it kept every one). Nothing to do for an unprivileged trainer.

    ``real_uid`` (a pool uid, ``uids``): the sample's real uid, its effective and saved uids staying
    0 (root's files, as asked). Why: the kernel never applies RLIMIT_NPROC to real uid 0, so
    ``max_processes`` did not bound a root sample's threads: it started hundreds (each a host pid
    and kernel memory) and samples at once could empty the host's pids. Only with the seccomp
    filter, which refuses a setuid call back to uid 0 (the sample holds 0 as its euid, so the
    kernel would let it).

    ``group`` (bubblewrap's layouts: the pool uid's number, else the pool's first): the sample's
    real, effective and saved gid, no supplementary groups. Why: bubblewrap's PID 1 in the sample's
    PID namespace is uid and gid 0 without capabilities and dumpable, so a root sample (fsuid and
    fsgid 0, no capabilities either) passed the kernel's same-ids check and read its
    ``/proc/1/mem`` (bubblewrap's options: the host paths ``options_fd`` keeps from its command
    line), ``environ``, ``maps`` and open descriptors, and could write its memory: code run there
    holds the trainer's rlimits (no ``memory_mb``) with real uid 0. A gid of its own fails that
    check; with no capability to set its gid back, the sample keeps it."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:  # without util-linux's setpriv: as before (the report says so)
        return []
    ruid = [] if real_uid is None else [f"--ruid={real_uid}"]
    gid = [] if group is None else [f"--regid={group}", "--clear-groups"]
    return [setpriv, *ruid, *gid, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]


def resolve_user(user: Any) -> tuple[tuple[int, int] | None, str, bool]:
    """(uid, gid) to run samples as or None, a sentence for the report, and whether it was asked
    for explicitly (then failing to use it is an error, not a fallback)."""
    if user is None or user is False or user == "none":  # not ``in``: 0 == False, and uid 0 is root
        root = ": samples run as root " + ("without capabilities" if shutil.which("setpriv") else
                                           "with its capabilities (no setpriv to drop them)")
        return None, "off (user = none)" + (root if os.geteuid() == 0 else ""), False
    auto = user == "auto"
    if auto:
        if os.geteuid() != 0:
            return None, f"on: the trainer's own unprivileged uid {os.geteuid()}", False
        user = "nobody"
    try:
        entry = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
    except (KeyError, ValueError):
        if auto:
            return None, "off: no user 'nobody'", False
        raise RewardError(f"code_tests: user {user!r} does not exist. Fix: user = \"auto\", \"none\" or an "
                          "existing user") from None
    if entry.pw_uid == 0:  # before "already running as": a root trainer asking for root got it, as "on"
        raise RewardError("code_tests: user must not be root. Fix: user = \"auto\" (nobody) or an unprivileged user, "
                          "or user = \"none\" to accept samples running as root")
    if entry.pw_uid == os.geteuid():
        return None, f"on: already running as {entry.pw_name}", False
    if os.geteuid() != 0:
        raise RewardError(f"code_tests: only root can run samples as {user!r}. Fix: user = \"auto\" or \"none\"")
    return (entry.pw_uid, entry.pw_gid), f"on: samples run as {entry.pw_name} (uid {entry.pw_uid})", not auto


def choose(isolation: str, user: Any, python: str, disk_mb: int) -> Launch:
    """The strongest level that works here for these options (see the module docstring)."""
    launch = _choose(isolation, user, python, disk_mb)
    return attrs.evolve(launch, site_dirs=tuple(site_dirs(python)), oom=oom_first(), io=io_last())


#: The OOM killer's score adjustment of every sample process: the highest, "kill this first".
OOM_SCORE_ADJ = 1000


def oom_first() -> tuple[str, ...]:
    """The command prefix that starts a sample as the OOM killer's first choice, or () when
    ``choom`` is missing or refused here (the sample then competes with the trainer)."""
    choom = shutil.which("choom")
    if choom is None:
        return ()
    prefix = (choom, "-n", str(OOM_SCORE_ADJ), "--")
    return prefix if probe([*prefix, "true"]) is None else ()


#: The sample's I/O scheduling class and level: best-effort (2), its lowest level (7).
IO_CLASS, IO_LEVEL = 2, 7


def io_last() -> tuple[str, ...]:
    """The command prefix that starts a sample at the lowest best-effort I/O priority (util-linux
    ``ionice``), or () where it is missing or refused. Why: the I/O class is inherited, so a trainer
    started under ``ionice -c 1`` (real-time) or ``-c 2 -n 0`` passed it to every sample, whose
    reads and writes then went before the trainer's own (checkpoints, the dataset). Lowering one's
    own I/O priority needs no privilege; the seccomp filter refuses ``ioprio_set``, so the sample
    cannot raise it back (without the filter it may take best-effort 0, as any process may)."""
    ionice = shutil.which("ionice")
    if ionice is None:
        return ()
    prefix = (ionice, "-c", str(IO_CLASS), "-n", str(IO_LEVEL), "--")
    return prefix if probe([*prefix, "true"]) is None else ()


def _refuse_root(python: str, why: str, reasons: Sequence[str]) -> None:
    """Without bubblewrap's mount namespace, a sample that cannot be dropped to ``nobody`` would run
    as the trainer's root, with every capability: it reads /etc/shadow and the trainer's
    /proc/<pid>/environ and writes any host file once it has switched the audit hook off. That must
    be asked for (user = "none"), never a silent fallback of user = "auto"."""
    if os.geteuid() != 0:
        return
    raise RewardError(
        f"code_tests: samples would run as root with every capability: {python} cannot run as user "
        f"'nobody' ({why}) and {'; '.join(reasons)}. Fix: install bubblewrap (its mount namespace "
        "makes the interpreter readable to nobody), set options.python to an interpreter every user "
        "can run, or set user = \"none\" to accept samples running as root")


def _fixes(reasons: Sequence[str]) -> str:
    """What to do on this machine for the strong level, from why bubblewrap failed."""
    text = " ".join(reasons)
    if "bwrap not found" in text:
        return "install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap)"
    if not any(word in text for word in ("namespace", "not permitted", "Permission denied", "uid map", "RTM_NEWADDR")):
        return "make bwrap start the interpreter (the reason above says why; options.python picks another one)"
    if os.geteuid() == 0:
        return ("let root create namespaces (in a container: docker run --cap-add SYS_ADMIN --security-opt "
                "seccomp=unconfined --security-opt apparmor=unconfined), or run the trainer as a non-root user "
                "on a kernel with unprivileged user namespaces")
    return ("enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ "
            "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile allowing bwrap; "
            "user.max_user_namespaces > 0)")


def refusal(isolation: str, reasons: Sequence[str]) -> str:
    """The one error for a sandbox that cannot get the strong level: what is missing, how to get it,
    and the explicit opt-in to a weaker level with its risks."""
    return (f"code sandbox: isolation = \"{isolation}\" needs bubblewrap's namespaces to keep samples (a policy's "
            f"code) from the trainer's files, environment, memory and network, but here {'; '.join(reasons)}. "
            f"Fix: {_fixes(reasons)}; or accept the risk with isolation = \"weak\" (falls back to unshare or a plain "
            "subprocess: a sample may run as the trainer's user, read its files and keys, write its run folder and "
            "reach 127.0.0.1; train on hostile code only with bubblewrap)")


def _mount_dir() -> str:
    """The trainer's empty folder where each sample's private mount namespace mounts its tmpfs: one
    for every run, in /run (root's) or else the temp folder; the host never sees a mount on it."""
    if os.geteuid() == 0 and os.path.isdir("/run") and os.access("/run", os.W_OK):
        return "/run/polyrl-sandbox-tmpfs"
    return os.path.join(tempfile.gettempdir(), f"polyrl-sandbox-tmpfs-{os.geteuid()}")


_starts_lock = threading.Lock()
_starts: dict[str, str | None] = {}


def bwrap_starts() -> str | None:
    """None when bubblewrap can create the sandbox's namespaces here, else why not; asked once per
    process and bwrap program (thread-safe: a second caller waits for the first's answer). Why:
    each configuration (disk_mb, user, interpreter) searched every layout afresh, so where
    bubblewrap cannot start at all each one launched it up to eight times before falling back."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found"
    true = shutil.which("true", path="/usr/bin:/bin")
    if true is None:
        return None  # nothing to ask with: the layouts themselves say
    with _starts_lock:
        if bwrap not in _starts:
            _starts[bwrap] = probe([*_start_command(bwrap), true])
        return _starts[bwrap]


def _start_command(bwrap: str) -> list[str]:
    """bubblewrap with the sandbox's namespaces, /usr, /proc and /dev: ``bwrap_starts``' question."""
    cmd = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent"]
    if os.geteuid() != 0:
        cmd += ["--unshare-user", "--uid", str(os.geteuid()), "--gid", str(os.getegid())]
    return [*cmd, *_usr_binds(), "--proc", "/proc", "--dev", "/dev"]


def _bwrap_launch(python: str, ids: tuple[int, int] | None, poolable: bool, disk_mb: int,
                  program: bytes | None, expected: str) -> tuple[Launch | None, str | None, dict[str, str]]:
    """The first bwrap layout that starts the interpreter here, strongest first: a uid per sample
    (``uids``) and the inode-capped tmpfs (``tmpfs_wrapper``), each dropped only where it fails
    (then ``notes`` says why); (launch or None, why the last try failed, notes)."""
    if (cannot := bwrap_starts()) is not None:
        return None, cannot, {}
    pool = (uids.FIRST, uids.FIRST) if ids is not None and poolable and os.geteuid() == 0 else None
    # a root sample's real uid from the pool (``no_capabilities``), only with the filter that keeps it there
    real = uids.FIRST if ids is None and poolable and os.geteuid() == 0 and program is not None \
        and no_capabilities() else None
    mount_dir = _mount_dir()
    wrapper = tmpfs_wrapper(disk_mb, mount_dir)
    notes: dict[str, str] = {}
    try:
        ensure_mount_dir(mount_dir)
    except (RewardError, OSError) as exc:
        wrapper, notes = [], {"inodes": str(exc)}
    hide = host_view.usr_hidden(python)
    nest = tuple(userns_wrapper(python)) if os.geteuid() == 0 else ()  # not root: bwrap's --disable-userns
    true = shutil.which("true", path="/usr/bin:/bin") or "true"
    if nest and (refused := probe([*nest, *_start_command(shutil.which("bwrap") or "bwrap"), true])) is not None:
        nest, notes["userns"] = (), refused
    users = [(pool, None), (ids, None)] if pool else [(None, real), (None, None)] if real else [(ids, None)]
    order = [(i, w, n) for i in users for n in ((nest, ()) if nest else ((),))
             for w in ((tuple(wrapper), ()) if wrapper else ((),))]
    failed: dict[tuple[tuple[tuple[int, int] | None, int | None], tuple[str, ...]], str] = {}
    why: str | None = None
    # each layout binds only the interpreter's bin and lib (``interpreter_binds``) first, its whole folders only where that
    # alone starts it (an unusual layout: then ``notes`` says the sample reads all of them)
    for try_user, try_wrapper, try_nest, whole in [(i, w, n, whole) for whole in (False, True) for i, w, n in order]:
        try_ids, try_real = try_user
        prefix, drop = bwrap_prefix(python, try_ids, disk_mb, mount_dir if try_wrapper else None, whole_prefix=whole,
                                    hide=hide, real_uid=try_real)
        fd_args: list[str] = []
        fds: tuple[int, ...] = ()
        r = -1
        if program is not None:
            r, w = os.pipe()
            os.write(w, program)
            os.close(w)
            fd_args, fds = ["--seccomp", str(r)], (r,)
        try:
            why = probe(list(try_nest) + list(try_wrapper) + prefix + fd_args + drop + [python, "-I", "-c", _IDENTITY],
                        expected, pass_fds=fds)
        finally:
            if r >= 0:
                os.close(r)
        if why is not None:
            failed.setdefault((try_user, try_wrapper), why)
            continue
        if whole:
            notes["interpreter"] = (f"{', '.join(interpreter_paths(python, hide))} bound whole (with their bin and lib "
                                    f"only: {failed.get((try_user, try_wrapper), 'refused')}): samples read all of it")
        if wrapper and not try_wrapper:
            notes["inodes"] = failed.get((try_user, tuple(wrapper)), "the mount was refused")
        if (pool and try_ids != pool) or (real and try_real is None):
            notes["uid"] = next(iter(failed.values()), "refused")
        if nest and not try_nest:
            notes["userns"] = next(iter(failed.values()), "refused")
        if hide:
            notes["hidden"] = host_view.hidden_text(hide)
        return Launch("bwrap", tuple(prefix), tuple(drop), python, True, try_ids, program, {}, wrapper=try_wrapper,
                      uid_pool=(pool is not None and try_ids == pool) or try_real is not None, userns=try_nest), None, notes
    return None, why, notes


def _host_view(prefix: list[str], python: str, disk_mb: int, expected: str,
               program: bytes | None = None) -> tuple[list[str], str, list[str], str]:
    """(``prefix`` with the filesystem setup appended, which: "root" (``new_root``: a root of the
    sample's own), else "view" (``host_view``: the host read-only, its usual folders hidden), the
    folders hidden, why the stronger ones failed) for the first that starts the interpreter here,
    else (``prefix``, "", [], why not): the kernel may refuse the mounts (a container without
    CAP_SYS_ADMIN) or ``pivot_root`` (a root on the initramfs), and a non-root trainer needs
    ``setpriv`` to take its sample's capabilities in its own user namespace
    (``host_view.namespace_drop``)."""
    if os.geteuid() != 0 and not host_view.namespace_drop():
        return prefix, "", [], "needs util-linux setpriv"
    in_usr = host_view.usr_hidden(python)
    try:
        keep = interpreter_binds(interpreter_paths(python, in_usr), python)
    except RewardError as exc:
        return prefix, "", [], str(exc)
    # as root, each first in a user namespace of the sample's own (``userns_wrapper``: no other nests in
    # it, and its @u is its own), then in the host's; a non-root trainer's sample has one (``prefix``)
    nests = [userns_wrapper(python), []] if os.geteuid() == 0 else [[]]
    files = host_view.bound_files(python, keep, in_usr)  # the run's dataset files the kept folders show
    root = prefix + new_root.setup_command(python, disk_mb, tmpfs_inodes(disk_mb), keep, in_usr + files, program)
    why_root = ""
    for nest in nests:
        if (why_root := probe(nest + root + [python, "-I", "-c", _IDENTITY], expected) or "") == "":
            return nest + root, "root", in_usr, ""
    # the trainer's folders inside /usr too: ``hidden_folders`` never hides one inside a system folder
    hide = sorted(set(host_view.hidden_folders(host_view.trainer_folders())) | set(in_usr))
    # and, as the whole host is in view, the run's dataset files elsewhere no hidden folder holds (/opt/train.jsonl)
    hide = sorted(set(hide) | set(host_view.in_view_files(python, [h for h in hide if os.path.isdir(h)])))
    hide = sorted(set(hide) | set(host_view.bound_files(python, keep, hide)))  # and those the kept folders show
    view = prefix + host_view.setup_command(python, disk_mb, tmpfs_inodes(disk_mb), keep, hide, program=program)
    why = ""
    for nest in nests:
        if (why := probe(nest + view + [python, "-I", "-c", _IDENTITY], expected) or "") == "":
            return nest + view, "view", hide, why_root
    return prefix, "", [], f"{why_root}; {why}"


def _namespace_caps(prefix: list[str], python: str, expected: str) -> tuple[list[str], list[str], str]:
    """(``prefix``, privilege drop, what the isolation line says of its capabilities) for a non-root
    trainer's sample at the ``unshare`` level. Why: it is root of a user namespace of its own
    (``--map-root-user``), with every capability there; only the setup program's layouts took them
    (``host_view.namespace_drop``), and where the kernel refused those mounts the sample kept them
    (CapEff 000001ffffffffff: it mounted tmpfs in its mount namespace, reconfigured its network
    namespace). Without setpriv it is the trainer's uid there (``--map-current-user``): not root of
    the namespace, so exec leaves it no capability."""
    if drop := host_view.namespace_drop():
        return prefix, drop, " (no capabilities in its user namespace)"
    mapped = ["--map-current-user" if arg == "--map-root-user" else arg for arg in prefix]
    if mapped != prefix and probe([*mapped, python, "-I", "-c", _IDENTITY], expected) is None:
        return mapped, [], " (no capabilities in its user namespace: the trainer's uid there, --map-current-user)"
    return prefix, [], (" (EVERY capability in its user namespace: no setpriv, and unshare refused "
                        "--map-current-user. Fix: install util-linux's setpriv)")


_POOL_REPORT = ("on: each sample running at once has its own uid and gid (from {first}; no supplementary groups), "
                "so max_processes counts its own threads and processes only and no other sample shares its "
                "group's file permissions")


def _pooled(cmd: Sequence[str], ids: tuple[int, int] | None, explicit: bool, python: str,
            expected: str) -> tuple[int, int] | None:
    """The pool's first (uid, gid) when a root trainer's samples (``user = "auto"``) start as it
    under ``cmd`` here, else None (they share ``ids``). The gid is the uid's number: with nobody's
    group (nogroup) for all, a file one sample made with group permissions (mode 0770 in the
    host's /tmp) was another concurrent sample's to read and write."""
    if ids is None or explicit or os.geteuid() != 0:
        return None
    pool = (uids.FIRST, uids.FIRST)
    return pool if probe([*cmd, *drop_privileges(pool), python, "-I", "-c", _IDENTITY], expected) is None else None


def _real_pooled(prefix: Sequence[str], drop: list[str], explicit: bool, filtered: bool, python: str,
                 expected: str) -> tuple[list[str], bool]:
    """(the privilege drop, whether it sets the pool's first uid as the real uid) for a root sample
    (``ids`` None) at the ``unshare`` level: as ``no_capabilities`` says, only where the seccomp
    filter is loaded (``filtered``) and the interpreter starts so under ``prefix``."""
    real = no_capabilities(uids.FIRST)
    if explicit or not filtered or not real or probe([*prefix, *real, python, "-I", "-c", _IDENTITY], expected):
        return drop, False
    return real, True


_REAL_REPORT = ("; its real uid is one of its own (from {first}), so max_processes counts its threads (the kernel "
                "exempts real uid 0), and the seccomp filter keeps it there")
_UNCOUNTED_REPORT = "; max_processes does not bind it (real uid 0: its threads are bounded by memory_mb only; {why})"


def _userns_report(launch: Launch, notes: dict[str, str]) -> str:
    """What the isolation line says of the sample's user namespace."""
    if launch.userns or "--disable-userns" in launch.prefix:
        return " and user namespace (no other nests in it)"
    if os.geteuid() != 0:
        return " and user namespace (another may nest in it without the filter: this bwrap has no --disable-userns)"
    return f"; the host's user namespace (one of its own may nest without the filter: {notes.get('userns', 'refused')})"


def _pool_report(launch: Launch, notes: dict[str, str], user: str) -> str:
    if launch.uid_pool and launch.ids is not None:
        return _POOL_REPORT.format(first=uids.FIRST)
    if launch.uid_pool:
        return user + _REAL_REPORT.format(first=uids.FIRST)
    if launch.ids is not None and os.geteuid() == 0:
        why = f" ({notes['uid']})" if "uid" in notes else ""
        return user + f"; samples at once share this uid's max_processes{why}"
    if launch.ids is None and os.geteuid() == 0:
        return user + _UNCOUNTED_REPORT.format(why=notes.get("uid", "no seccomp filter to keep a real uid of the "
                                                             "pool's" if launch.seccomp_program is None else "no setpriv"))
    return user


def _choose(isolation: str, user: Any, python: str, disk_mb: int) -> Launch:
    if isolation not in LEVELS:
        raise RewardError(f"code_tests: isolation must be auto, require, weak or off, got {isolation!r}. "
                          "Fix: isolation = \"auto\"")
    ids, user_report, explicit = resolve_user(user)
    program, seccomp_report = seccomp.compiled_filter()
    expected = subprocess.run([python, "-I", "-c", _IDENTITY], capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL).stdout.decode(errors="replace").strip()
    base = {"user": user_report, "audit_hook": "on", "verdict": "computed by the trainer from typed values"}
    reasons: list[str] = []
    if isolation != "off":
        if shutil.which("bwrap") is None:
            reasons.append("bwrap not found")
        else:
            launch, why, notes = _bwrap_launch(python, ids, not explicit, disk_mb, program, expected)
            if why is None:
                if program is None and isolation == "require":
                    raise RewardError(
                        f"code sandbox: isolation = \"require\" needs the seccomp filter, and it is {seccomp_report}. "
                        "Without it a sample forks (ctypes passes the audit hook behind bubblewrap) and holds "
                        "max_processes x memory_mb. Fix: install libseccomp (apt-get install libseccomp2, "
                        "dnf install libseccomp) and the pyseccomp package, or set isolation = \"auto\" to run "
                        "without the filter (with a warning)")
                assert launch is not None
                inodes = (f", {tmpfs_inodes(disk_mb)} inodes" if launch.wrapper else "") + " private tmpfs only" + (
                    "" if launch.wrapper else f" (inodes not capped: {notes.get('inodes', 'bwrap has no option')})")
                return attrs.evolve(launch, report={
                    **base, "user": _pool_report(launch, notes, base["user"]),
                    "isolation": "bwrap: own mount, PID (fresh /proc), network, IPC, UTS namespaces"
                    + _userns_report(launch, notes) + "; no capabilities; "
                    + (f"TCP buffers at most {TCP_BUFFER_MAX // 1024} KB each way, accept queues {ACCEPT_QUEUE}, "
                       f"TIME_WAIT sockets {TIME_WAIT_MAX}, unix datagram queues {UNIX_DGRAM_QUEUE + 1}" + (
                           " (set by Python: no util-linux unshare, mount or sh)"
                           if launch.wrapper[:1] == (sys.executable,) else "")
                       if launch.wrapper else
                       f"TCP buffers not capped: {notes.get('inodes', 'no wrapper')}")
                    + ("" if launch.suffix or os.geteuid() != 0 else " (bounding set kept: no setpriv)"),
                    "filesystem": "read-only /usr" + (f" ({notes['hidden']})" if "hidden" in notes else "") + " and "
                    + (notes["interpreter"] if "interpreter" in notes else "the interpreter's bin and lib")
                    + f"; writable: a {disk_mb} MB{inodes}",
                    "seccomp": seccomp_report if program is not None else (
                        f"OFF ({seccomp_report.removeprefix('off: ')}): a sample can fork, its processes together "
                        "hold max_processes x memory_mb, and socket families beyond unix/inet/inet6 (AF_VSOCK, AF_NETLINK) are open; "
                        "isolation = \"require\" refuses this. Fix: install libseccomp"),
                    "descriptors": "only stdin/stdout/stderr reach the sample (the server checks and reports)"})
            reasons.append(f"bwrap does not work here ({why})")
        if isolation in ("auto", "require"):
            raise RewardError(refusal(isolation, reasons))
        unshare = shutil.which("unshare")
        if unshare:
            # --mount-proc: a fresh /proc of the sample's own PID namespace; without it the host's
            # /proc (every process's cmdline, and as root every environ: the trainer's keys) is there
            # --uts: a host name of its own (``new_root.OWN_NAMES``), not a copy of the host's
            prefix = [unshare, "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
            if os.geteuid() != 0:
                prefix[1:1] = ["--user", "--map-root-user"]
            prefix, kind, view, view_note = _host_view(prefix, python, disk_mb, expected, program)
            drop = drop_privileges(ids) if ids else no_capabilities()
            caps = ""
            if os.geteuid() != 0:  # with the setup program or without it (the host files visible)
                prefix, drop, caps = _namespace_caps(prefix, python, expected)
            why = probe(prefix + drop + [python, "-I", "-c", _IDENTITY], expected)
            if why is not None and ids is not None and (bare := probe(prefix + [python, "-I", "-c", _IDENTITY],
                                                                      expected)) is not None:
                why = bare  # unshare itself is refused (a container): not the user's fault; try "off"
            elif why is not None and ids is not None and not explicit:
                _refuse_root(python, why, reasons)
                ids, drop, user_report = None, [], f"off: {python} cannot run as that user ({why})"
                base["user"] = user_report
                why = None
            if why is None:
                real = False
                if pool := _pooled(prefix, ids, explicit, python, expected):
                    ids, drop = pool, drop_privileges(pool)
                    base["user"] = _POOL_REPORT.format(first=uids.FIRST)
                elif os.geteuid() == 0 and ids is None:  # a root sample: its real uid from the pool, with the filter
                    drop, real = _real_pooled(prefix, drop, explicit, kind != "" and program is not None, python,
                                              expected)
                    base["user"] += _REAL_REPORT.format(first=uids.FIRST) if real else _UNCOUNTED_REPORT.format(
                        why="no seccomp filter to keep a real uid of the pool's" if not kind or program is None
                        else f"{python} cannot run with such a real uid here")
                own = ": the sample is the trainer's own uid" if ids is None and os.geteuid() != 0 else ""
                if kind == "root":
                    filesystem = ("a root of its own (as bubblewrap's): read-only /usr"
                                  + (f" ({host_view.hidden_text(view)})" if view else "")
                                  + ", the interpreter's bin and lib, its own /proc and a /dev of null, zero, "
                                  "full, random and urandom; no other host file, folder or unix socket; "
                                  "no user namespace of its own (chrooted below its root, the kernel refuses "
                                  "one); "
                                  f"writable: a {disk_mb} MB, {tmpfs_inodes(disk_mb)} inodes private tmpfs at /tmp only"
                                  + (f" ({own[2:]})" if own else ""))
                elif kind:
                    filesystem = (f"host files read-only (kernel permissions apply{own}); " + host_view.hidden_text(
                                      view, "hidden under empty read-only folders: {} (their unix sockets and writable "
                                      "folders out of reach; a unix socket elsewhere stays reachable)")
                                  + "; a /dev of null, zero, full, random and urandom only; writable: a "
                                  f"{disk_mb} MB, {tmpfs_inodes(disk_mb)} inodes private tmpfs at /tmp only "
                                  f"(no root of its own: {view_note}); " + (
                                      "a user namespace of its own where no other nests"
                                      if os.geteuid() != 0 or _USERNS_SCRIPT in prefix else
                                      "the host's user namespace: one of its own may nest without the filter"))
                else:
                    filesystem = (f"host files visible (kernel permissions apply{own}); disk capped per file only "
                                  f"(no read-only view: {view_note})")
                filtered = program if kind else None  # loaded by the setup program, last
                return Launch("unshare", tuple(prefix), tuple(drop), python, bool(kind), ids, filtered, {
                    **base, "isolation": "PARTIAL (unshare): network, PID, IPC, UTS" + (" and mount" if kind else "")
                    + " namespaces" + caps + "; " + "; ".join(reasons),
                    "filesystem": filesystem,
                    "seccomp": seccomp_report if filtered is not None else (
                        f"off: {seccomp_report.removeprefix('off: ') if program is None else f'no setup program ran ({view_note})'}"),
                    "descriptors": "only stdin/stdout/stderr (close_fds)"},
                    uid_pool=pool is not None or real)
            reasons.append(f"unshare does not work here ({why})")
        else:
            reasons.append("unshare not found")
    drop = drop_privileges(ids) if ids else no_capabilities()
    if ids is not None and (why_not := probe(drop + [python, "-I", "-c", _IDENTITY], expected)) is not None:
        if not explicit:  # isolation = "off" asks for a plain subprocess, not for root: user = "none" does
            _refuse_root(python, why_not, reasons or ["isolation = \"off\""])
        if explicit:
            raise RewardError(f"code_tests: {python} cannot run as user {user!r}. Fix: install an interpreter "
                              "that user can run and set options.python, or set user = \"none\"")
        drop = no_capabilities()
        ids, base["user"] = None, f"off: {python} cannot run as that user" + (
            " (root " + ("without capabilities)" if drop else "with its capabilities: no setpriv)") if os.geteuid() == 0 else "")
    if pool := _pooled([], ids, explicit, python, expected):
        ids, drop = pool, drop_privileges(pool)
        base["user"] = _POOL_REPORT.format(first=uids.FIRST) + (
            "; at sample end every process of its uid is killed (a setsid daemon too)")
    why_off = "isolation = off" if isolation == "off" else "; ".join(reasons)
    nest = tuple(userns_wrapper(python))
    if (refused := probe([*nest, *drop, python, "-I", "-c", _IDENTITY], expected)) is not None:
        nest = ()
    return Launch("off", (), tuple(drop), python, False, ids, None, {
        **base, "isolation": f"OFF ({why_off}): a plain subprocess" + (
            " in a user namespace of its own where no other nests" if nest else
            f" (a user namespace may nest in it: {refused})"),
        "filesystem": "host files visible" + (": the sample is the trainer's own uid" if ids is None and
                                              os.geteuid() != 0 else "") + "; disk capped per file only",
        "seccomp": "off", "descriptors": "only stdin/stdout/stderr (close_fds)"}, uid_pool=pool is not None,
        userns=nest)
