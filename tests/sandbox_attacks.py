"""Hostile sample code shared by the sandbox tests of several levels."""

import os

from polyrl.sandbox import runner

#: Holds SysV shared memory past ``memory_mb`` (segments written through a mapping, then detached)
#: and makes a message queue; prints how many MB it held and what ``msgget`` answered.
SYSV_ATTACK = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
for _ in range(6):  # each segment written through a mapping, then detached: RLIMIT_AS no longer counts it
    segment = libc.shmget(0, 64 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        print("SHMGET", os.strerror(ctypes.get_errno()))
        break
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, 64 << 20)
    libc.shmdt(ctypes.c_void_p(address))
    held += 64
print("SHM_HELD_MB", held)
queue = libc.msgget(0, 0o1600)
print("MSGGET", queue, os.strerror(ctypes.get_errno()) if queue < 0 else "")
"""

#: Leaves the trainer's process group (which the trainer kills at the sample's end), asks for no
#: signal when its parent dies, then holds the tests past timeout_s.
LINGER = """
import ctypes, os, time
os.setsid()
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0
print("LEFT THE GROUP", flush=True)
def add(a, b):
    time.sleep(600)
"""


#: Sample code the buffer fillers below start with: ``held_kb_until_out_of_fds(open_one)`` calls
#: ``open_one(closers)`` until it runs out of descriptors; each call opens a pair of ends, adds
#: their closers and returns the non-blocking ``send`` of one, which is then sent 64 KB at a time
#: until the kernel would block. Returns the KB sent and never read; closes every end last.
_FILL_UNREAD = """
def held_kb_until_out_of_fds(open_one):
    closers, held = [], 0
    try:
        while True:
            send = open_one(closers)
            try:
                while True:
                    held += send(b"x" * 65536)
            except BlockingIOError:
                pass
    except OSError:  # out of descriptors
        pass
    for close in closers:
        close()
    return held >> 10
"""


#: Fills unix socket pairs (as many as ``max_open_files`` allows) with bytes it never reads, each
#: pair first asked for a 64 MB send buffer when ``big``; returns the KB the kernel held for it.
#: A pair is a connection to a listener of its own (``socketpair`` is refused by the filters).
SOCKET_BUFFERS = _FILL_UNREAD + """
import socket
def unix_pair():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("")  # an abstract name the kernel picks, in the sample's network namespace
        listener.listen(1)
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sender.connect(listener.getsockname())
        return sender, listener.accept()[0]
    finally:
        listener.close()
def held_kb(big):
    def open_one(closers):
        sender, receiver = unix_pair()
        closers += [sender.close, receiver.close]
        if big:
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
        sender.setblocking(False)
        return sender.send
    return held_kb_until_out_of_fds(open_one)
"""

#: ``SOCKET_BUFFERS``' pairs asking for a 64 MB send buffer through the raw ``setsockopt`` call
#: (number ``nr``) with bits above the 32nd set in its level and option: the kernel reads both as
#: ints (SOL_SOCKET, SO_SNDBUF), a filter comparing whole registers saw other values.
SOCKET_BUFFERS_WIDE = SOCKET_BUFFERS + """
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
def held_kb_wide(nr):
    def open_one(closers):
        sender, receiver = unix_pair()
        closers += [sender.close, receiver.close]
        size = ctypes.c_int(64 << 20)
        _libc.syscall(ctypes.c_long(nr), ctypes.c_long(sender.fileno()), ctypes.c_long(socket.SOL_SOCKET | 1 << 32),
                      ctypes.c_long(socket.SO_SNDBUF | 1 << 32), ctypes.byref(size), ctypes.c_long(4))
        sender.setblocking(False)
        return sender.send
    return held_kb_until_out_of_fds(open_one)
"""


#: Fills loopback TCP connections it never reads until it runs out of descriptors; returns the KB
#: sent and not read (held in kernel memory: TCP grows each send buffer up to ``tcp_wmem``'s max).
TCP_BUFFERS = _FILL_UNREAD + """
import socket
def tcp_held_kb():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    def open_one(closers):
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
        closers += [sender.close, receiver.close]
        sender.setblocking(False)
        return sender.send
    held = held_kb_until_out_of_fds(open_one)
    server.close()
    return held
"""

#: How many inotify instances and (unprivileged) fanotify groups the sample can make, each with
#: the errno that stopped it; they count against the uid above the sample's user namespace.
NOTIFY_GROUPS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def notify_groups():
    out = []
    for make in (lambda: libc.inotify_init1(0), lambda: libc.fanotify_init(0x200, 0)):  # FAN_REPORT_FID
        fds = []
        while (fd := make()) >= 0:
            fds.append(fd)
        out.append((len(fds), ctypes.get_errno()))
        for fd in fds:
            os.close(fd)
    return out
"""

#: Connects ``n`` times to each of ``listeners`` listening sockets it never accepts on, sends 64 KB
#: on each connection and closes it (an orphan with data unsent); returns how many it made. Those
#: need no descriptor of the sample's, so only the accept queue's length bounds them.
ORPHANS = """
import socket
def queued(listeners, n):
    servers, made = [], 0
    for _ in range(listeners):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4096)
        servers.append(server)
        for _ in range(n):
            client = socket.socket()
            client.settimeout(0.05)
            try:
                client.connect(server.getsockname())
                client.setblocking(False)
                client.send(b"x" * 65536)
            except OSError:
                break
            finally:
                client.close()
            made += 1
    for server in servers:
        server.close()
    return made
"""

#: Fills pipes it never reads until it runs out of descriptors, each first grown to 1 MB with
#: F_SETPIPE_SZ when ``big``; returns the KB written and not read (kernel memory no rlimit counts).
PIPE_BUFFERS = _FILL_UNREAD + """
import fcntl, os
def pipe_held_kb(big):
    def open_one(closers):
        r, w = os.pipe()
        closers += [lambda: os.close(r), lambda: os.close(w)]
        if big:
            try:
                fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
            except OSError:
                pass
        os.set_blocking(w, False)
        return lambda data: os.write(w, data)
    return held_kb_until_out_of_fds(open_one)
"""

def marked() -> list[int]:
    """Live processes of this trainer's samples (their environment holds its marker)."""
    mark = f"{runner.MARKER_ENV}={os.getpid()}".encode()
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    found.append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def run_lingering(box, tests: str) -> tuple:
    """``box`` runs ``LINGER`` against ``tests``: (its result, the sample's processes still alive
    after it ended); whatever survived is killed here, so no test leaves one behind."""
    try:
        result = box.run(LINGER, tests)
        survivors = marked()
    finally:
        for pid in marked():
            os.kill(pid, 9)
    return result, survivors


#: Tries to make its real uid root again past the audit hook (raw setuid calls, each asking for
#: uid 0), then starts up to ``cap`` threads with small stacks, each waiting on one event; returns
#: how many started.
ROOT_THREADS = (
    "import ctypes, threading\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def back_to_root(numbers):\n"
    "    out = {}\n"
    "    for name, nr in numbers.items():\n"
    "        out[name] = (libc.syscall(nr, 0, 0, 0), ctypes.get_errno())\n"
    "    return out\n"
    "def threads(cap):\n"
    "    threading.stack_size(32768)\n"
    "    stop, started = threading.Event(), 0\n"
    "    try:\n"
    "        for _ in range(cap):\n"
    "            threading.Thread(target=stop.wait, daemon=True).start()\n"
    "            started += 1\n"
    "    except RuntimeError:\n"
    "        pass\n"
    "    stop.set()\n"
    "    return started\n"
)


#: ``root_only_read()``: the kernel's mode-0400 ``/proc`` files (``new_root.ROOT_ONLY_PROC``: physical
#: page flags, the kernel heap's caches, timers) it opened and read bytes of, by libc's ``open`` past
#: the audit hook: {path: bytes read}; a file refused or read empty is left out.
ROOT_ONLY_PROC = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "PATHS = ('/proc/kpageflags', '/proc/kpagecount', '/proc/kpagecgroup', '/proc/slabinfo',\n"
    "         '/proc/vmallocinfo', '/proc/pagetypeinfo', '/proc/timer_list')\n"
    "def root_only_read():\n"
    "    got = {}\n"
    "    for path in PATHS:\n"
    "        fd = libc.open(path.encode(), os.O_RDONLY)\n"
    "        if fd >= 0:\n"
    "            data = os.pread(fd, 64, 0)\n"
    "            os.close(fd)\n"
    "            if data:\n"
    "                got[path] = len(data)\n"
    "    return got\n"
)
