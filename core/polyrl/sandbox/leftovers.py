"""What a pooled sample's uid left on the host besides processes, removed at the sample's end.

Why: at the ``unshare`` and ``off`` levels a sample sees the host's shared folders and IPC
namespace, and its uid (``polyrl.sandbox.uids``) is reused by a later sample. A file it left
there (``/dev/shm/x``, mode 0600) or a SysV shared memory segment, message queue or semaphore set
it made was readable and writable by the next sample with that uid: one sample could hand a later
one its answers, or leave it a planted state, and so move that sample's reward. At the ``bwrap``
level none of these is shared (a private tmpfs, /dev and IPC namespace) and nothing is done.

The uid's kernel keyrings (its user, user-session and persistent keyring) are per uid whatever
the namespaces, so at every level without the seccomp filter (which refuses ``keyctl``) a key
sample N added was there for sample N + 1 (``clear_keys``).

Not covered (the README says so): folders elsewhere on the host that every user may write.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import signal
import stat
import subprocess
import tempfile
import time

#: The host's folders every user may write (sticky), where a sample's files outlive it.
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")
#: How deep a folder tree is removed in-process (a descriptor held per level); deeper, ``rm -rf``.
IN_PROCESS_LEVELS = 32
#: /proc/sysvipc table -> ipcrm's option for removing one of its ids.
SYSV = (("shm", "-m"), ("msg", "-q"), ("sem", "-s"))


def remove_files(uid: int, folders: tuple[str, ...] | None = None) -> tuple[list[str], list[str]]:
    """Remove every entry ``uid`` owns at the top of the shared folders (a folder with all it
    holds); (the paths removed, those that could not be). Through the folder's descriptor and
    without following links, so a link planted there never sends the removal elsewhere; the uid's
    processes are gone, and in a sticky folder no other user can rename its entries in between."""
    removed: list[str] = []
    failed: list[str] = []
    rm = shutil.which("rm", path="/usr/bin:/bin")
    for folder in dict.fromkeys(folders if folders is not None else (*SHARED_DIRS, tempfile.gettempdir())):
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            with os.scandir(fd) as entries:
                owned = [e for e in entries if _owner(e) == uid]
            for entry in owned:
                path = os.path.join(folder, entry.name)
                try:
                    _remove_entry(fd, entry.name, rm)
                except (OSError, RecursionError, subprocess.SubprocessError):
                    failed.append(path)
                    continue
                removed.append(path)
        finally:
            os.close(fd)
    return removed, failed


def remove_tree(path: str) -> bool:
    """Remove ``path`` with all it holds; whether it is gone. Never through a link (its parent is
    opened with ``O_NOFOLLOW``, the entry taken from that descriptor) and never opening what is not
    a folder: a FIFO, device or link in its place is unlinked (``polyrl.sandbox.scratch``)."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return not os.path.lexists(path)
    try:
        _remove_entry(fd, name, shutil.which("rm", path="/usr/bin:/bin"))
    except (OSError, RecursionError, subprocess.SubprocessError):
        return False
    finally:
        os.close(fd)
    return True


def _remove_entry(parent: int, name: str, rm: str | None) -> None:
    """Remove the entry ``name`` of the folder ``parent`` (a descriptor), a folder with all it holds:
    here (``_remove_dir``: no process started for the usual small tree), else, past the recursion
    or descriptor limits (a sample nests folders), by ``rm -rf`` run in that very folder (its
    descriptor's /proc link: no path is looked up again). Raises OSError (or RecursionError
    without rm) where something is left; an entry already gone is no error."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return  # gone already
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    try:
        _remove_dir(parent, name, IN_PROCESS_LEVELS if rm is not None else None)
        return
    except (OSError, RecursionError):
        if rm is None or not os.path.isdir(f"/proc/self/fd/{parent}"):  # no /proc: no path-free way to name it
            raise
    # never through a link: rm walks with descriptors and the last part is no link (lstat above)
    done = subprocess.run([rm, "-rf", "--one-file-system", "--", f"./{name}"], capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60, cwd=f"/proc/self/fd/{parent}", pass_fds=(parent,))
    if done.returncode != 0 or _exists(parent, name):
        raise OSError(done.stderr.decode(errors="replace").strip()[-200:] or f"rm left {name}")


def _exists(parent: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove_dir(parent: int, name: str, levels: int | None = None) -> None:
    """``shutil.rmtree`` of ``name`` in the folder ``parent`` (its ``dir_fd`` argument is 3.11+),
    never opening what is not a folder (``O_DIRECTORY``: a FIFO swapped in is refused, never
    waited on); a tree nested deeper than ``levels`` (or the recursion limit) raises
    RecursionError. Why ``levels``: each level holds a descriptor of the trainer's while it is
    removed, so a sample's tree 900 deep took 900 at once, and another thread's ``open`` (a
    checkpoint, the next sample's pipes) failed with EMFILE under a 1024 limit."""
    if levels is not None and levels <= 0:
        raise RecursionError(f"{name} is nested deeper than polyrl removes in-process")
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in children:
            if is_dir:
                _remove_dir(fd, child, None if levels is None else levels - 1)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _owner(entry: os.DirEntry) -> int | None:
    try:
        return entry.stat(follow_symlinks=False).st_uid
    except OSError:
        return None


def remove_ipc(uid: int) -> tuple[list[str], list[str]]:
    """Remove the SysV IPC objects (of this IPC namespace) ``uid`` owns or made; (removed, failed),
    as "shm 123", ..."""
    ipcrm = shutil.which("ipcrm", path="/usr/bin:/bin")
    removed: list[str] = []
    failed: list[str] = []
    for table, option in SYSV:
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        head = lines[0].split()
        try:
            at = [head.index(name) for name in ("uid", "cuid")]
        except ValueError:
            continue
        for line in lines[1:]:
            fields = line.split()
            if len(fields) > max(at) and any(fields[i] == str(uid) for i in at):
                name = f"{table} {fields[1]}"
                done = subprocess.run([ipcrm, option, fields[1]], stdin=subprocess.DEVNULL, capture_output=True,
                                      timeout=10, env={"PATH": "/usr/bin:/bin"}, cwd="/") if ipcrm else None
                (removed if done is not None and done.returncode == 0 else failed).append(name)
    return removed, failed


#: keyctl's system call number per machine (Python has no keyctl; libkeyutils may be missing).
KEYCTL_NR = {"x86_64": 250, "aarch64": 219, "arm64": 219, "riscv64": 219, "loongarch64": 219, "ppc64le": 271,
             "ppc64": 271, "s390x": 280, "i686": 288, "i386": 288, "armv7l": 311}
KEYCTL_CLEAR, KEYCTL_GET_PERSISTENT = 7, 22
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5


def has_keys(uid: int) -> bool:
    """Whether the kernel keeps keys for ``uid`` (/proc/key-users: a line per uid that has any)."""
    try:
        with open("/proc/key-users") as f:
            return any(line.split(":", 1)[0].strip() == str(uid) for line in f)
    except OSError:
        return False


def keyctl_number() -> int | None:
    """keyctl's system call number on this machine, or None where it is not known here."""
    return KEYCTL_NR.get(platform.machine())


def clear_keys(uid: int, gid: int) -> bool:
    """Empty ``uid``'s user, user-session and persistent keyrings (only that uid can: a forked
    child becomes it, without exec, so nothing of the sample's can trace it); whether that was
    done or nothing was there. Call once the uid's processes are gone. The child closes every
    descriptor it inherited before it becomes the uid: a process of the sample's uid never holds
    the trainer's files, pipes or sockets (where ``fs.suid_dumpable`` is set, another process of
    that uid could read them through its ``/proc/<pid>/fd``)."""
    if not has_keys(uid):
        return True
    number = KEYCTL_NR.get(platform.machine())
    if number is None or os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: system calls only, then _exit
        code = 1
        try:
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # close_range(2) where the kernel has it
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            persistent = libc.syscall(number, KEYCTL_GET_PERSISTENT, ctypes.c_long(-1),
                                      ctypes.c_long(KEY_SPEC_USER_KEYRING))
            if persistent > 0:
                libc.syscall(number, KEYCTL_CLEAR, ctypes.c_long(persistent))
            done = [libc.syscall(number, KEYCTL_CLEAR, ctypes.c_long(ring))
                    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING)]
            code = 0 if all(r == 0 for r in done) else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 5
    while True:
        waited, status = os.waitpid(pid, os.WNOHANG)
        if waited:
            return os.waitstatus_to_exitcode(status) == 0
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.001)


def remove(uid: int) -> tuple[list[str], list[str]]:
    """Both: what ``uid`` left in the shared folders and in SysV IPC (see the module docstring);
    (removed, failed: then the uid must not go to another sample)."""
    files, ipc = remove_files(uid), remove_ipc(uid)
    return files[0] + ipc[0], files[1] + ipc[1]
