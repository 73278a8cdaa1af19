"""The sample's namespace wrapper without util-linux: Python's own ``unshare`` and ``mount``.

``isolation.tmpfs_wrapper`` makes the sample's mount, IPC and network namespaces with util-linux
``unshare``, ``mount`` and ``sh``, mounts its inode-capped tmpfs and caps the network namespace's
TCP buffers, accept queues and TIME_WAIT sockets. Where one of those programs is missing the
sample ran in bubblewrap's own network namespace, whose TCP settings are copied from the host's
(4 MB buffers autotuned, 4096-long accept queues): a sample held about 100 MB of kernel memory no
rlimit counts. This module does the same steps through ``ctypes`` in the trainer's interpreter,
so only Python is needed; the report says which wrapper ran, and one that fails drops the launch
to bubblewrap's own namespaces with a warning (``isolation._bwrap_launch``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: The program. argv: tmpfs options (``mount``'s, ``nosuid``/``nodev`` included), mount folder,
#: then the command to exec. Errors: one line on stderr, status 126.
_SCRIPT = r'''
import _socket, ctypes, fcntl, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def step(ok, what):
    if not ok:
        raise OSError(f"{what}: {os.strerror(ctypes.get_errno())}")
def write(path, text):
    with open(path, "w") as out:
        out.write(text)
options, where, command = sys.argv[1], sys.argv[2], sys.argv[3:]
root, uid, gid = os.geteuid() == 0, os.geteuid(), os.getegid()
try:
    # CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET, and CLONE_NEWUSER for a non-root trainer
    step(libc.unshare(0x00020000 | 0x08000000 | 0x40000000 | (0 if root else 0x10000000)) == 0, "unshare")
    if not root:  # root of its user namespace, as util-linux's --map-root-user
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            write(f"/proc/self/{name}", text)
    step(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) == 0, "private mounts")  # MS_REC | MS_PRIVATE
    flags = {"nosuid": 0x2, "nodev": 0x4}
    data = ",".join(o for o in options.split(",") if o not in flags).encode()
    bits = sum(flags[o] for o in set(options.split(",")) if o in flags)
    step(libc.mount(b"polyrl-sample", where.encode(), b"tmpfs", bits, data) == 0, "tmpfs mount")
    for name in IPC_LIMITS:  # where the kernel lets it, as the shell wrapper
        try:
            write(f"/proc/sys/{name}", "0")
        except OSError:
            pass
    for name, value in SYSCTLS:
        write(f"/proc/sys/{name}", value)
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)  # (not ``socket``: its imports cost 7 ms)
    up = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, struct.pack("16sH14x", b"lo", 0)))[1] | 1
    fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", up))  # loopback up: SIOCGIFFLAGS, | IFF_UP
    s.close()
    for name in () if root else NOTIFY_LIMITS:
        if os.path.exists(f"/proc/sys/user/{name}"):
            write(f"/proc/sys/user/{name}", "0")
except OSError as exc:
    print(f"polyrl-sandbox wrapper: {exc}", file=sys.stderr)
    sys.exit(126)
os.execv(command[0], command)
'''


def command(options: str, mount_dir: str, sysctls: Sequence[tuple[str, str]], ipc_limits: Sequence[str],
            notify_limits: Sequence[str]) -> list[str]:
    """The wrapper's command up to the one it execs: ``sysctls`` (name under /proc/sys, value) are
    written in the sample's network namespace (any refused fails it), ``ipc_limits`` set to 0
    where the kernel lets it, ``notify_limits`` to 0 for a non-root trainer (its user namespace's).
    Ends with ``mount_dir``, as the util-linux wrapper (the runner checks that folder)."""
    head = (f"IPC_LIMITS = {tuple(ipc_limits)!r}\nSYSCTLS = {tuple(sysctls)!r}\n"
            f"NOTIFY_LIMITS = {tuple(notify_limits)!r}\n")
    return [sys.executable, "-I", "-S", "-c", head + _SCRIPT, options, mount_dir]
