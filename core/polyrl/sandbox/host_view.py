"""The ``unshare`` level's fallback view of the host: read-only, its socket and scratch folders hidden.

The level first gives the sample a root of its own (``polyrl.sandbox.new_root``); this view is
for where that is refused (``pivot_root`` on a root that is the initramfs).

Why: without bubblewrap (``isolation = "weak"``) a sample saw the host's whole filesystem with
its uid's permissions: it wrote every world-writable folder (``/var/tmp``, ``/dev/shm``, a
project's ``chmod 777`` folder), connected to every unix socket its permissions allowed (a 0666
judge or reward server socket in ``/run`` or ``/tmp``; a network namespace hides only abstract
sockets and 127.0.0.1) and, as a non-root trainer's own uid, rewrote the trainer's files.

In the sample's own mount namespace (``unshare --mount``, inside a user namespace of its own for
a non-root trainer) a short setup program, run before the privilege drop, makes every mount
read-only (``mount_setattr`` with ``AT_RECURSIVE``, else each mount in turn), mounts the sample's
size- and inode-capped tmpfs at ``/tmp`` and an empty read-only tmpfs (with the folder's own mode)
over each of ``hidden_folders()``: the usual homes of unix sockets and world-writable folders, the
users' homes, the trainer's home, working folder and run folders (``polyrl.sandbox_hidden``),
and those of them inside ``/usr``. The interpreter's folders under them are
bound back (read-only, ancestors with their own modes); ``/dev`` is a read-only tmpfs of ``null``,
``zero``, ``full``, ``random`` and ``urandom`` bound from the host's (as ``new_root``'s: the host's
held every device node the sample's uid may open, and as uid 0 (``user = "none"``) the owner's
read and write on the console, ``/dev/vcs``, ``/dev/kvm`` and swap on ``/dev/zram0``); then it
changes to ``/tmp`` and execs the
rest of the command (first, as ``new_root``'s, it sets the IPC namespace's ``shmmni`` and
``msgmni`` to 0, and the network namespace's unix socket queues short: ``new_root.UNIX_QUEUES``).
A unix socket elsewhere stays reachable: ``connect`` needs write permission on the socket, which
a read-only mount does not take away (the kernel's EROFS check skips sockets).

Descendants of a hidden folder cannot be revealed again: a sample has no capability to unmount,
and in a user namespace of its own the mounts it inherits are locked by the kernel.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence

from polyrl import sandbox_hidden
from polyrl.sandbox.new_root import DEVICES, LOAD_FILTER, MASK_PROC, NO_SYSV_IPC, OWN_NAMES, UNIX_QUEUES

#: The setup program (``setup_command``, then the command it execs). Errors end it with status 126
#: and one line on stderr, which the level's probe reports.
SETUP = r'''
import ctypes, os, sys
args = sys.argv[1:]  # tmpfs options, "root" or "user", filter, hidden folders, "--", kept paths, "--", command
cut = args.index("--", 3)
spec = {"tmp": args[0], "root": args[1] == "root", "hide": args[3:cut]}
end = args.index("--", cut + 1)
spec["keep"], rest = args[cut + 1:end], args[end + 1:]
libc = ctypes.CDLL(None, use_errno=True)
@LOAD_FILTER@
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC = 1, 2, 4, 8, 32, 4096, 16384
KEPT = (NOSUID | NODEV | NOEXEC | 1024 | 2048 | (1 << 21))  # locked flags a remount must repeat

def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    if libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} on {dst}: {os.strerror(err)}")

def read_only(path, flags):
    mount(None, path, None, REMOUNT | BIND | RDONLY | (flags & KEPT))

@MASK_PROC@

def all_read_only():
    attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr: attr_set = MOUNT_ATTR_RDONLY
    if libc.syscall(ctypes.c_long(442), ctypes.c_int(-100), b"/", ctypes.c_uint(0x8000), attr,
                    ctypes.c_size_t(32)) == 0:  # mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, ...)
        return
    if ctypes.get_errno() not in (38, 22):  # ENOSYS (before Linux 5.12), EINVAL
        raise OSError(ctypes.get_errno(), "mount_setattr: " + os.strerror(ctypes.get_errno()))
    points = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            points.append(line.split()[4].encode().decode("unicode_escape"))
    for point in points:
        try:
            read_only(point, os.statvfs(point).f_flag)
        except OSError:
            if os.path.exists(point) and os.statvfs(point).f_flag & RDONLY == 0:
                raise

def under(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")

@NO_SYSV_IPC@
if not spec["root"]:  # a user namespace of its own (a root trainer's is the host's: its limit is the host's)
    try:  # no other nests in it: without the filter the sample made one and held every capability there
        with open("/proc/sys/user/max_user_namespaces", "w") as out:
            out.write("0")
    except OSError:
        pass
try:
    program = os.path.realpath(rest[0])  # a link in a folder about to be hidden (a tool in /tmp)
    kept = []  # (path, O_PATH fd, ancestors' (path, mode, uid, gid) below the covering mount)
    covers = ["/tmp"] + spec["hide"]
    for path in spec["keep"]:
        top = next((c for c in covers if under(path, c) and path != c), None)
        if top is None or not os.path.lexists(path):
            continue
        chain, folder = [], os.path.dirname(path)
        while under(folder, top) and folder != top:
            st = os.stat(folder)
            chain.insert(0, (folder, st.st_mode & 0o7777, st.st_uid, st.st_gid))
            folder = os.path.dirname(folder)
        kept.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), chain))
    files = [c for c in spec["hide"] if not os.path.isdir(c)]  # the run's dataset files: /dev/null over each
    spec["hide"] = [c for c in spec["hide"] if c not in files]
    modes = {c: os.stat(c) for c in spec["hide"]}
    devices = [(d, os.open(f"/dev/{d}", os.O_PATH | os.O_CLOEXEC)) for d in @DEVICES@ if os.path.exists(f"/dev/{d}")]
    all_read_only()
    mount("polyrl-sample", "/tmp", "tmpfs", NOSUID | NODEV, spec["tmp"])
    # a /dev of its own, as new_root's: the host's held every device node its uid may open (as uid 0,
    # user = "none": the owner's rw on the console, /dev/vcs, /dev/kvm, swap on /dev/zram0)
    mount("polyrl-dev", "/dev", "tmpfs", NOSUID | NOEXEC, "size=64k,nr_inodes=64,mode=755")
    for name, fd in devices:
        open(f"/dev/{name}", "x").close()
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, BIND)
        os.close(fd)
    os.symlink("/proc/self/fd", "/dev/fd")
    for index, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{index}", f"/dev/{name}")
    for folder in spec["hide"]:  # /dev/shm, /dev/pts, ...: hidden below as the host's would be
        if under(folder, "/dev"):
            os.makedirs(folder, 0o755, exist_ok=True)
    read_only("/dev", NOSUID | NOEXEC)
    mask_proc("", "/dev/null")  # the sample's own /proc (``unshare --mount-proc``)
    for folder in spec["hide"]:
        st = modes[folder]
        owner = f",uid={st.st_uid},gid={st.st_gid}" if spec["root"] else ""
        mount("polyrl-hidden", folder, "tmpfs", NOSUID | NODEV, f"size=1m,nr_inodes=4096,mode={st.st_mode & 0o7777:o}{owner}")
    for path, fd, chain in kept:
        for folder, mode, uid, gid in chain:
            if not os.path.isdir(folder):
                os.mkdir(folder)
                os.chmod(folder, mode)
                if spec["root"]:
                    os.chown(folder, uid, gid)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            open(path, "a").close()
        mount(f"/proc/self/fd/{fd}", path, None, BIND | REC)
        read_only(path, os.fstatvfs(fd).f_flag)
        os.close(fd)
    for path in files:  # after the kept binds: a dataset file in the interpreter's venv too (``bound_files``)
        if not os.path.lexists(path):  # under the sample's own /tmp (/tmp/train.jsonl), or gone: nothing to cover
            continue
        mount("/dev/null", path, None, BIND)
        read_only(path, os.statvfs(path).f_flag)
    for folder in spec["hide"]:
        read_only(folder, NOSUID | NODEV)
    os.chdir("/tmp")
    load_filter(args[2])
except OSError as exc:
    print(f"polyrl-sandbox host view: {exc}", file=sys.stderr)
    sys.exit(126)
os.execv(program, rest)  # argv[0] as given: a venv's python finds its pyvenv.cfg from it
'''.replace("@LOAD_FILTER@", LOAD_FILTER).replace("@NO_SYSV_IPC@", NO_SYSV_IPC + UNIX_QUEUES + OWN_NAMES).replace("@DEVICES@", repr(DEVICES)).replace(
    "@MASK_PROC@", MASK_PROC)

#: Folders hidden under an empty read-only tmpfs: where unix sockets (``/run``, ``/var/run``,
#: ``/dev/shm``) and world-writable folders (``/var/tmp``, ``/run/lock``, ``/dev/mqueue``) live,
#: ``/dev/pts`` (the trainer's terminal: a non-root trainer's sample owns it), and users' homes.
#: ``/tmp`` is the sample's own tmpfs. The trainer's home and working folder are added.
HIDDEN = ("/run", "/var/run", "/var/tmp", "/var/lock", "/var/crash", "/dev/shm", "/dev/mqueue", "/dev/pts",
          "/home", "/root", "/mnt", "/media", "/srv")
#: The system a sample's interpreter needs: never hidden, nor any folder above or inside it
#: (a trainer started in ``/`` or ``/usr/lib`` must not hide the C library).
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys", "/dev", "/boot")


def under(path: str, top: str) -> bool:
    """``path`` is ``top`` or inside it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


_under = under


def hidden_folders(extra: Sequence[str] = ()) -> list[str]:
    """``HIDDEN`` and ``extra`` (the trainer's home and working folder) as real, existing folders,
    none inside another or inside ``/tmp``, none holding or inside ``SYSTEM`` (``/dev``'s own
    entries of ``HIDDEN`` excepted), never ``/``, ``/var`` or ``/opt`` whole."""
    found: list[str] = []
    for name in [*HIDDEN, *extra]:
        real = os.path.realpath(name)
        if not os.path.isdir(real) or os.path.islink(real) or _under(real, "/tmp") or real in ("/", "/var", "/opt"):
            continue
        if any(_under(system, real) for system in SYSTEM):  # it holds the system
            continue
        if name not in HIDDEN and any(_under(real, system) for system in SYSTEM):
            continue
        found.append(real)
    found = sorted(set(found))
    return [f for f in found if not any(_under(f, other) and f != other for other in found)]


def hidden_text(paths: Sequence[str], folders_are: str = "the trainer's folders {} hidden") -> str:
    """What the isolation report says of ``paths`` it hides: its folders (``folders_are``, the
    list in its ``{}``) and, apart, the run's dataset files covered one by one by an empty file.
    Why: the report called every one of them a folder hidden, a dataset file lying in
    ``/usr/local/share`` or ``/opt`` among them, whose folder stays in the sample's view."""
    folders = [p for p in paths if os.path.isdir(p)]
    files = [p for p in paths if p not in folders]
    parts = [folders_are.format(", ".join(folders))] if folders else []
    if files:
        parts.append(f"the run's dataset files {', '.join(files)} covered by an empty file each, their folders "
                     "left in view")
    return "; ".join(parts)


def trainer_folders() -> list[str]:
    """The trainer's home (from the user database and ``HOME``), working folder and the run's
    folders it registered (``polyrl.sandbox_hidden``: output_dir, the dataset's): its keys, the
    dataset and the run's config and checkpoints."""
    folders = []
    try:
        folders.append(os.getcwd())
    except OSError:  # removed under it
        pass
    try:
        folders.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    if os.environ.get("HOME"):
        folders.append(os.environ["HOME"])
    return folders + sandbox_hidden.hidden()


def setup_command(python: str, disk_mb: int, inodes: int, keep: Sequence[str],
                  hide: Sequence[str], root: bool | None = None, program: bytes | None = None) -> list[str]:
    """The setup program's command line (module docstring), to put between ``unshare`` and the
    privilege drop; ``keep`` are the interpreter's folders and files to bind back. ``root``: the
    trainer is root (default: this process's euid), so hidden folders keep their owners too;
    ``program``: the seccomp filter, loaded last (``new_root.LOAD_FILTER``)."""
    tmp = f"size={int(disk_mb) * 1024 * 1024},nr_inodes={inodes},mode=1777"
    root = os.geteuid() == 0 if root is None else root
    return [python, "-I", "-S", "-c", SETUP, tmp, "root" if root else "user", program.hex() if program else "-",
            *hide, "--", *keep, "--"]


def namespace_drop() -> list[str]:
    """A non-root trainer's sample is root of its own user namespace, with every capability
    there: it could unmount what hides the host's sockets, or remount ``/`` writable. This execs
    it with none (uid 0 with an empty bounding set gains none at exec); [] without setpriv."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"] if setpriv else []


#: What of /usr a system's programs and libraries live in: a trainer's folder holding one of them
#: is never hidden (a trainer started in /usr or /usr/local). One inside them is, unless the
#: interpreter or the dynamic linker needs it (``_needed``): a project in /usr/local/lib/proj.
USR_SYSTEM = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/libexec",
              "/usr/include", "/usr/share", "/usr/local/bin", "/usr/local/sbin", "/usr/local/lib",
              "/usr/local/lib64", "/usr/local/share", "/usr/local/include")

#: The interpreter's own folders outside a venv: its base prefix, standard library and the site
#: folders that are not the venv's (a venv's, under a hidden folder, are bound back).
_ASK = ("import json, os, site, sys, sysconfig; p = sysconfig.get_paths(); venv = sys.prefix != sys.base_prefix; "
        "sites = [d for d in site.getsitepackages() if not (venv and (d + os.sep).startswith(sys.prefix + os.sep))]; "
        "print(json.dumps({'base': sys.base_prefix, 'python': [p['stdlib'], p['platstdlib'], "
        "os.path.dirname(os.path.realpath(sys.executable))] + sites}))")


def _library_folders() -> list[str]:
    """The folders of every library in the dynamic linker's cache (``ldconfig -p``), their links
    followed (Debian's BLAS lives in /usr/lib/<triplet>/blas through /etc/alternatives)."""
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                 if os.path.exists(p)), None)
    if ldconfig is None:
        return []
    try:
        done = subprocess.run([ldconfig, "-p"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    folders = set()
    for line in done.stdout.decode(errors="replace").splitlines():
        if " => " in line:
            path = line.rsplit(" => ", 1)[1].strip()
            folders.update({os.path.dirname(path), os.path.dirname(os.path.realpath(path))})
    return sorted(folders)


def _needed(python: str) -> tuple[str, list[str], list[str]]:
    """(base prefix, the interpreter's folders it must keep whole: standard library, site folders
    and binary's folder, the library folders of ``_library_folders``)."""
    done = subprocess.run([python, "-I", "-S", "-c", _ASK], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    try:
        asked = json.loads(done.stdout.decode(errors="replace"))
        base, own = str(asked["base"]), [str(p) for p in asked["python"]]
    except (ValueError, KeyError, TypeError):
        base, own = "/usr", []
    return os.path.realpath(base or "/usr"), [os.path.realpath(p) for p in own if p], _library_folders()


def usr_hidden(python: str, folders: Sequence[str] | None = None) -> list[str]:
    """The trainer's home, working folder and run folders (``trainer_folders``) where they lie inside /usr,
    which the sample gets whole (bubblewrap's view and ``new_root``'s): a project in
    /usr/local/src showed its dataset and config to every sample, and one in /usr/local/lib or
    /usr/lib did until a folder inside ``USR_SYSTEM`` could be hidden too. Never one that holds a
    ``USR_SYSTEM`` folder or the interpreter's base installation, holds or lies in its standard
    library, site folders or binary's folder, or holds a folder the dynamic linker loads from.
    Then the run's dataset files that none of those folders holds (``in_view_files``): files, not
    folders, each to be covered by an empty file."""
    base, own, libraries = _needed(python)
    found: list[str] = []
    for folder in trainer_folders() if folders is None else folders:
        real = os.path.realpath(folder)
        if not real.startswith("/usr/") or not os.path.isdir(real) or under(base, real):
            continue
        if any(under(system, real) for system in USR_SYSTEM):
            continue
        if any(under(path, real) or under(real, path) for path in own) or any(under(lib, real) for lib in libraries):
            continue
        found.append(real)
    found = sorted(set(found))
    found = [f for f in found if not any(under(f, other) and f != other for other in found)]
    return found + in_view_files(python, found, _OWN_ROOT_VIEW)


#: What of the host a root of the sample's own shows (bubblewrap's view, ``new_root``'s) besides
#: the interpreter's folders: /usr and the merged-/usr folders of / where they are real folders.
_OWN_ROOT_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def in_view_files(python: str, hidden: Sequence[str], view: Sequence[str] = ("/",)) -> list[str]:
    """The run's registered dataset files (``sandbox_hidden.files``) inside ``view`` and outside
    every folder of ``hidden``: a file lying directly in a folder that is never hidden (a system
    folder: ``/usr/local/share/train.jsonl``; ``/opt`` or ``/etc`` in the host view) was read by
    samples. Each is covered by itself (an empty file bound over it), never the interpreter's
    own binary."""
    binary = os.path.realpath(python)
    return [f for f in sandbox_hidden.files() if f != binary and any(under(f, top) for top in view)
            and not any(under(f, folder) for folder in hidden)]


def bound_files(python: str, binds: Sequence[str], done: Sequence[str] = ()) -> list[str]:
    """Where a sample sees the run's registered dataset files (``sandbox_hidden.files``) that lie
    in a folder bound into its own root (``binds``: the interpreter's, ``isolation.interpreter_binds``),
    each as the bind's path shows it, but for those in ``done`` (already covered) and the
    interpreter's own binary. Why: a dataset file inside the interpreter's venv or prefix (a
    package's data under its ``lib``) is outside ``_OWN_ROOT_VIEW`` and no hidden folder holds it,
    so samples read it through the bind; each is covered by /dev/null after the binds."""
    binary = os.path.realpath(python)
    registered = [f for f in sandbox_hidden.files() if f != binary and f not in done]
    found: dict[str, None] = {}
    for path in binds:
        real = os.path.realpath(path)
        for f in registered:
            if under(f, real):
                found[path.rstrip("/") + f[len(real.rstrip("/")):]] = None
    return list(found)
