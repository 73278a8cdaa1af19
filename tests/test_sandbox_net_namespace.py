"""What a sample holds of the kernel through its network namespace, ptys and mount table, and what
it reads of the host through its UTS namespace.

Hostile samples through a real ``require`` sandbox (audit hook off: the kernel stops them): the
namespace wrapper without util-linux (TCP settings capped by ``python_wrapper``), TIME_WAIT
sockets (capped per namespace), ptys (bounded by ``max_open_files``, gone with the sample) and
``/proc/self/mountinfo`` (it names no host path the sample's own tree does not show).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from bwrap_util import needs_bwrap

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, new_root, runner

pytestmark = pytest.mark.faults

TESTS = parse_tests("assert add(1, 2) == 3\n")
GOOD = "def add(a, b):\n    return a + b\n"
CAP = 128 * 1024  # isolation.TCP_BUFFER_MAX
WAITING = 256  # WAITING
QUEUE = 8  # isolation.ACCEPT_QUEUE
DGRAM_QUEUE = 1  # isolation.UNIX_DGRAM_QUEUE

#: Prints its network namespace's TCP send buffer maximum, accept queue and TIME_WAIT limits.
TCP_SETTINGS = ("print('TCP', open('/proc/sys/net/ipv4/tcp_wmem').read().split()[2], "
                "open('/proc/sys/net/core/somaxconn').read().strip(), "
                "open('/proc/sys/net/ipv4/tcp_max_tw_buckets').read().strip())\n")


def box(limits: SandboxLimits | None = None) -> Sandbox:
    return Sandbox(limits or SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8, max_output_bytes=200_000),
                   isolation="require", audit_hook=False)


def run(sandbox: Sandbox, code: str) -> str:
    result = sandbox.run(code + "\n" + GOOD, TESTS)
    assert result.status == "ok", (result.status, result.error, result.output[-500:])
    return result.output


def without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """This host as one without util-linux's ``names`` (a minimal container image); launches
    are chosen afresh (``runner`` keeps them per option set) and forgotten after."""
    real = shutil.which
    monkeypatch.setattr(runner, "_launches", {})
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in names else real(name, *a, **k))


@needs_bwrap
@pytest.mark.parametrize("missing", [("unshare",), ("mount",)])
def test_without_util_linux_the_sample_still_has_capped_tcp(monkeypatch, missing):
    """The wrapper that makes the sample's network namespace and caps its TCP settings was
    util-linux ``unshare`` and ``mount`` under ``sh``; without them the sample ran in bubblewrap's
    network namespace with the host's settings (4 MB send buffers autotuned, accept queues of
    4096: about 100 MB of kernel memory no rlimit counts), only a report line saying so. Now
    ``python_wrapper`` does the same steps through ctypes."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        if int(f.read().split()[2]) <= CAP:
            pytest.skip("this host's tcp_wmem is small already")
    without(monkeypatch, *missing)
    sandbox = box()
    output = run(sandbox, TCP_SETTINGS)
    assert f"TCP {CAP} {QUEUE} {WAITING}" in output.splitlines(), output
    assert "TCP buffers at most 128 KB" in sandbox.report["isolation"], sandbox.report["isolation"]
    assert "inodes private tmpfs" in sandbox.report["filesystem"]  # the inode cap is back too


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("bwrap") is None
                    or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root to become nobody, bubblewrap and an interpreter nobody can run")
def test_the_python_wrapper_works_for_an_unprivileged_trainer(monkeypatch):
    """A non-root trainer without util-linux: the Python wrapper makes a user namespace where
    the trainer is root (mapped from its own uid), mounts the tmpfs there and caps the TCP
    settings; bubblewrap's user namespace nests in it. The command built for that case, run as
    ``nobody`` (with an interpreter nobody can run)."""
    mount_dir = tempfile.mkdtemp(prefix="polyrl-test-mnt-")  # a folder nobody reaches (not under pytest's 0700)
    os.chown(mount_dir, 65534, 65534)
    try:
        without(monkeypatch, "unshare")
        monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
        monkeypatch.setattr(isolation.os, "getegid", lambda: 65534)
        monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
        wrapper = isolation.tmpfs_wrapper(8, mount_dir)
        prefix, _ = isolation.bwrap_prefix("/usr/bin/python3", None, 8, mount_dir)
        monkeypatch.undo()
        assert wrapper[0] == "/usr/bin/python3" and wrapper[-1] == mount_dir
        sample = TCP_SETTINGS + "import os\nprint('TMP', os.statvfs('/tmp').f_files)\n"
        cmd = isolation.drop_privileges((65534, 65534)) + wrapper + prefix + ["/usr/bin/python3", "-I", "-c", sample]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
    finally:
        shutil.rmtree(mount_dir, ignore_errors=True)
    if done.returncode != 0 and "namespace" in done.stderr.lower():
        pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"TCP {min(CAP, _host_wmem())} {QUEUE} {WAITING}" in lines, done.stdout
    assert f"TMP {isolation.tmpfs_inodes(8)}" in lines, done.stdout


def _host_wmem() -> int:
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


#: Connects to its own listener and closes, again and again: each connection closed first by the
#: sample's side stays in TIME_WAIT for 60 s. Prints how many it made and how many wait.
TIME_WAIT = """
import socket, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(8)
made, start = 0, time.monotonic()
while made < 3000 and time.monotonic() - start < 4:
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    client.close()
    server.close()
    made += 1
with open("/proc/net/sockstat") as f:
    waiting = int(f.read().split(" tw ")[1].split()[0])
print("TIME_WAIT", made, waiting)
"""


@needs_bwrap
def test_time_wait_sockets_are_few():
    """Closed connections wait 60 s in TIME_WAIT, kernel memory no rlimit counts, in the host's
    shared connection table: a sample made 14 000 in 3 s (its namespace allowed 131 072). They
    went within 2 s of its end (its namespace's teardown purges them: nothing stays behind), but
    while it ran they were the host's to hold. The namespace keeps ``TIME_WAIT_MAX`` now; past
    that the kernel closes a connection at once, and the sample sees no error."""
    sandbox = box()
    if not sandbox.launch.wrapper:
        pytest.skip("no namespace wrapper here")
    line = next(x for x in run(sandbox, TIME_WAIT).splitlines() if x.startswith("TIME_WAIT "))
    made, waiting = (int(v) for v in line.split()[1:])
    assert made > 2 * WAITING, line  # enough to go past the cap
    assert waiting <= WAITING, line


#: Sends 200 KB datagrams to a unix datagram socket of its own, each from a sender closed at once,
#: until the queue is full; prints how many it queued.
UNIX_DATAGRAMS = """
import socket
receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
receiver.bind("\\0polyrl-datagrams")
queued = 0
for _ in range(20):
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sender.sendto(b"x" * 200_000, socket.MSG_DONTWAIT, "\\0polyrl-datagrams")
        queued += 1
    except BlockingIOError:
        break
    finally:
        sender.close()
print("DATAGRAMS", queued)
"""


@needs_bwrap
def test_a_unix_datagram_socket_queues_few_datagrams():
    """A datagram waits in its receiver's queue after its sender is closed, up to 208 KB each,
    kernel memory no rlimit counts: 11 a socket with the kernel's default ``max_dgram_qlen``
    (40 sockets held 86 MB). The namespace keeps ``UNIX_DGRAM_QUEUE`` now: 2 a socket."""
    sandbox = box()
    if not sandbox.launch.wrapper:
        pytest.skip("no namespace wrapper here")
    line = next(x for x in run(sandbox, UNIX_DATAGRAMS).splitlines() if x.startswith("DATAGRAMS "))
    assert int(line.split()[1]) == DGRAM_QUEUE + 1, line


#: Opens ptys (/dev/ptmx) until refused; prints how many and why it stopped.
PTYS = """
import errno, os
masters = []
try:
    while len(masters) < 5000:
        masters.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
except OSError as exc:
    print("PTYS", len(masters), errno.errorcode[exc.errno], flush=True)
for fd in masters:
    os.close(fd)
masters = [os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY) for _ in range(20)]  # held to the end
"""


@needs_bwrap
def test_ptys_are_bounded_by_open_files_and_end_with_the_sample():
    """Each pty is kernel memory (its tty and buffers), counted in the kernel's ``pty.max``
    (4096 for all but the host's initial /dev/pts). The sample's /dev/pts is its own instance
    (bubblewrap's ``--dev``); with the filter it is one process, so it opens at most
    ``max_open_files`` of them (EMFILE), and those it holds at its end are gone with it."""
    limits = SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8, max_output_bytes=200_000, max_open_files=64)
    sandbox = box(limits)
    if sandbox.launch.seccomp_program is None:
        pytest.skip("without the filter a sample forks: max_processes x max_open_files ptys")
    with open("/proc/sys/kernel/pty/nr") as f:
        before = int(f.read())
    line = next(x for x in run(sandbox, PTYS).splitlines() if x.startswith("PTYS "))
    assert line.endswith(" EMFILE") and 20 <= int(line.split()[1]) < 64, line
    with open("/proc/sys/kernel/pty/nr") as f:
        assert int(f.read()) < before + 20  # its 20 held ones closed (others' may come and go meanwhile)


#: Every mount of its table: mount point, the path of the mounted folder in its filesystem, type.
MOUNTS = r"""
import os
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    kind = fields[fields.index("-") + 1]
    print("MOUNT", fields[4], fields[3], kind, os.path.exists(fields[4]), os.path.exists(fields[3]))
"""


@needs_bwrap
def test_the_mount_table_names_no_host_path_beyond_the_samples_own_tree():
    """``/proc/self/mountinfo`` is the sample's own mount namespace's: each mount point is a path
    it sees anyway (the interpreter's folders, /usr, /tmp, /dev's few devices), and each bound
    folder of a host filesystem is bound at its own path, so naming it shows nothing new; the
    trainer's folder, the tmpfs's mount folder on the host and the run's data are not there.
    (Virtual filesystems name their own roots: bubblewrap's ``/newroot``, devtmpfs's ``/null``.)"""
    sandbox = box()
    output = run(sandbox, MOUNTS)
    mounts = [line.split()[1:] for line in output.splitlines() if line.startswith("MOUNT ")]
    assert len(mounts) > 5, output
    virtual = {"tmpfs", "proc", "devtmpfs", "devpts", "sysfs", "mqueue", "cgroup2"}
    for point, root, kind, point_seen, root_seen in mounts:
        assert point_seen == "True", (point, output)
        assert kind in virtual or root_seen == "True", (point, root, output)
    # the interpreter's own folders are bound where the sample already finds them (sys.executable):
    # a venv inside the checkout names the checkout there, and only there
    interpreter = (os.path.realpath(sys.prefix), sys.prefix, os.path.realpath(sys.base_prefix))
    rest = "\n".join(line for line in output.splitlines()
                     if not (line.startswith("MOUNT ") and line.split()[1].startswith(interpreter)))
    for host_path in (os.getcwd(), os.path.dirname(os.path.abspath(__file__)), *sandbox.launch.wrapper[-1:]):
        assert host_path not in rest, (host_path, output)


#: Every command line its /proc shows (bubblewrap's PID 1 and its own), NUL-separated.
COMMAND_LINES = r"""
import os
for pid in os.listdir("/proc"):
    if pid.isdigit():
        print("CMDLINE", pid, repr(open("/proc/%s/cmdline" % pid, "rb").read()))
"""


@needs_bwrap
def test_bubblewraps_command_line_names_no_host_path_or_trainer_pid():
    """Bubblewrap's PID 1 keeps bubblewrap's command line, and the sample read it in
    ``/proc/1/cmdline``: the tmpfs's mount folder on the host (``/run/polyrl-sandbox-tmpfs``),
    the trainer's pid, every bind and hidden path. Its options now come from a descriptor
    (``--args``); the command line is bubblewrap, that, and the sample's own command."""
    sandbox = box()
    output = run(sandbox, COMMAND_LINES)
    lines = [line for line in output.splitlines() if line.startswith("CMDLINE ")]
    assert any(line.startswith("CMDLINE 1 ") and "bwrap" in line for line in lines), output
    for line in lines:
        for leak in ("--ro-bind", "--setenv", f"\\x00{os.getpid()}\\x00", *sandbox.launch.wrapper[-1:]):
            assert leak not in line, (leak, line[:2000])


@needs_bwrap
def test_a_sample_with_the_hosts_tcp_settings_is_warned_of(monkeypatch):
    """Where no wrapper can make the sample's network namespace (the mount refused, its folder not
    the trainer's), bubblewrap's keeps the host's TCP settings: the report says so, and so does a
    warning, never silence."""
    from structlog.testing import capture_logs

    monkeypatch.setattr(runner, "_launches", {})
    monkeypatch.setattr(isolation, "tmpfs_wrapper", lambda *args: [])
    with capture_logs() as logs:
        sandbox = box()
    assert "TCP buffers not capped" in sandbox.report["isolation"]
    assert any("host's TCP settings" in entry["event"] and entry["log_level"] == "warning" for entry in logs), logs


#: The host names a sample reads: ``uname -n`` (its UTS namespace's host name) and the NIS domain name.
HOST_NAMES = ("import os\n"
              "print('NAMES', os.uname().nodename, open('/proc/sys/kernel/hostname').read().strip(), "
              "open('/proc/sys/kernel/domainname').read().strip())\n")


@needs_bwrap
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_a_sample_reads_no_host_name_of_the_machine(user):
    """A new UTS namespace starts with a copy of the host's names, so every sample read the
    machine's host name (``os.uname().nodename``, ``/proc/sys/kernel/hostname``: a cluster node's
    name, naming the site and the node). Bubblewrap now sets it (``--hostname``)."""
    sandbox = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), isolation="require",
                      audit_hook=False, user=user)
    output = run(sandbox, HOST_NAMES)
    names = next((line for line in output.splitlines() if line.startswith("NAMES ")), output)
    assert names == f"NAMES {new_root.HOSTNAME} {new_root.HOSTNAME} (none)"  # the kernel's default domain
