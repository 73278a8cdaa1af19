"""Red-team pass on the code sandbox: attacks that worked, replayed through the real reward path.

Each sample is a hostile completion scored by ``code_tests`` with a real sandbox. The attacks go
around the Python audit hook the way a policy would (``ctypes`` is allowed behind bubblewrap,
where numpy needs it), so what stops them is the kernel. Attacks that were already stopped are
covered in ``test_sandbox_verdict.py`` / ``test_sandbox_escapes.py`` / ``test_rewards_code.py``.
"""

from __future__ import annotations

import os
import shutil

import pytest
from bwrap_util import needs_bwrap
from sandbox_attacks import (
    NOTIFY_GROUPS,
    ORPHANS,
    PIPE_BUFFERS,
    ROOT_ONLY_PROC,
    ROOT_THREADS,
    SOCKET_BUFFERS,
    SOCKET_BUFFERS_WIDE,
    TCP_BUFFERS,
)

from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import isolation_report
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext

pytestmark = pytest.mark.faults


def score(text: str, tests: str, **options: object) -> float | None:
    """One completion through ``RewardComputer`` -> ``code_tests``; its reward."""
    pm = get_plugin_manager(entry_points=False)
    opts = {"timeout_s": 8, "memory_mb": 512, "extract": "raw", **options}
    computer = RewardComputer(pm, [("code_tests", 1.0, opts)])
    rows = [{"prompt": "p", "tests": tests}]
    comps = [Completion(0, [1], [2], [0.0], text=text)]
    return computer(["p"], comps, RewardContext(rows=rows, wanted=("code_tests",))).total[0]


#: Opens kernel settings for writing past the audit hook (libc's open); never writes to them.
#: Returns (how many of them exist there, the ones it could open for writing).
KERNEL_SETTINGS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "PATHS = (b'/proc/sys/kernel/core_pattern', b'/proc/sys/vm/drop_caches', b'/proc/self/oom_score_adj')\n"
    "def probe():\n"
    "    present, writable = 0, []\n"
    "    for path in PATHS:\n"
    "        present += os.path.exists(path)\n"
    "        fd = libc.open(path, os.O_WRONLY)\n"
    "        if fd >= 0:\n"
    "            writable.append(path.decode())\n"
    "            libc.close(fd)\n"
    "    return present, writable\n"
)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_root_sample_cannot_write_kernel_settings(isolation):
    """With ``user = "none"`` (or no user ``nobody``) the sample is uid 0 without capabilities;
    sysctls check only the uid, so it could open ``kernel.core_pattern`` for writing (a pipe
    there runs any program as the host's root at the next crash) through bwrap's fresh /proc."""
    assert score(KERNEL_SETTINGS, "assert probe() == (3, [])", isolation=isolation, user="none") == 1.0


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
def test_a_root_sample_reads_no_root_only_kernel_file():
    """With ``user = "none"`` the sample is uid 0 without capabilities, mapped to the host's root,
    and the kernel's mode-0400 ``/proc`` files check only the owner: it read every physical page's
    flags and use count (``/proc/kpageflags``, ``kpagecount``), the kernel heap's caches
    (``slabinfo``) and every CPU's timers. They are /dev/null in its ``/proc`` now
    (``new_root.ROOT_ONLY_PROC``); a pool uid's sample was refused them already."""
    assert score(ROOT_ONLY_PROC, "assert root_only_read() == {}", user="none", audit_hook=False) == 1.0


#: Reads its OOM score adjustment and tries to lower it to the trainer's (0) past the audit hook.
OOM_ESCAPE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def oom():\n"
    "    before = int(open('/proc/self/oom_score_adj').read())\n"
    "    fd = libc.open(b'/proc/self/oom_score_adj', os.O_WRONLY)\n"
    "    lowered = fd >= 0 and libc.write(fd, b'0', 1) == 1\n"
    "    if fd >= 0:\n"
    "        libc.close(fd)\n"
    "    return before, lowered, int(open('/proc/self/oom_score_adj').read())\n"
)


@needs_bwrap
@pytest.mark.skipif(shutil.which("choom") is None, reason="util-linux choom is not installed")
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_samples_are_the_oom_killers_first_choice_and_stay_it(isolation):
    """rlimits are per process: a sample forking ``max_processes`` children (libc's fork passes
    the audit hook) holds ``max_processes`` x ``memory_mb``; the OOM killer then took the biggest
    process, the trainer. Every sample process now has oom_score_adj 1000 and cannot lower it."""
    assert score(OOM_ESCAPE, "assert oom() == (1000, False, 1000)", isolation=isolation) == 1.0
    assert "oom_score_adj 1000" in isolation_report(isolation=isolation)["rlimits"]


def _seccomp_on(isolation: str) -> bool:
    return isolation_report(isolation=isolation)["seccomp"].startswith("on")


def _syscall_numbers(*names: str) -> dict[str, int]:
    """This architecture's numbers for ``names`` (those it has), from libseccomp."""
    import pyseccomp

    numbers = {name: pyseccomp.resolve_syscall(pyseccomp.system_arch(), name) for name in names}
    return {name: nr for name, nr in numbers.items() if nr >= 0}


USERS = ["auto", "none"] if os.geteuid() == 0 else ["auto"]

#: Starts processes past the audit hook (libc through ctypes), has each child hold ``mb`` MB, and
#: sums the memory of every process in the sample's PID namespace; a fork bomb; threads.
PROCESSES = (
    "import ctypes, os, threading, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def rss_mb(pid):\n"
    "    try:\n"
    "        for line in open(f'/proc/{pid}/status'):\n"
    "            if line.startswith('VmRSS:'):\n"
    "                return int(line.split()[1]) // 1024\n"
    "    except OSError:\n"
    "        pass\n"
    "    return 0\n"
    "def hold(n, mb):\n"
    "    children = []\n"
    "    for _ in range(n):\n"
    "        pid = libc.fork()\n"
    "        if pid == 0:\n"
    "            block = b'x' * (mb << 20)\n"
    "            libc.pause()\n"
    "            libc._exit(0)\n"
    "        if pid > 0:\n"
    "            children.append(pid)\n"
    "    end = time.monotonic() + 5\n"
    "    while time.monotonic() < end and any(rss_mb(pid) < mb for pid in children):\n"
    "        time.sleep(0.05)\n"
    "    return len(children), sum(rss_mb(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "def bomb(n):\n"
    "    made = 0\n"
    "    for _ in range(n):\n"
    "        pid = libc.fork()\n"
    "        if pid == 0:\n"
    "            libc.pause()\n"
    "            libc._exit(0)\n"
    "        made += pid > 0\n"
    "    return made\n"
    "def raw(numbers):\n"
    "    out = {}\n"
    "    for name, nr in numbers.items():\n"
    "        arg = ctypes.create_string_buffer(88) if name == 'clone3' else 17\n"
    "        pid = libc.syscall(nr, arg, 88 if name == 'clone3' else 0, 0, 0, 0)\n"
    "        if pid == 0:\n"
    "            libc._exit(0)\n"
    "        out[name] = (pid, ctypes.get_errno())\n"
    "    return out\n"
    "def shell():\n"
    "    return libc.system(b'exit 0')\n"
    "def threads():\n"
    "    out = []\n"
    "    workers = [threading.Thread(target=lambda i=i: out.append(i * i)) for i in range(4)]\n"
    "    for w in workers:\n"
    "        w.start()\n"
    "    for w in workers:\n"
    "        w.join()\n"
    "    return sorted(out)\n"
)


@needs_bwrap
@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_is_one_process_so_memory_mb_bounds_it_in_all(isolation, user):
    """libc's fork (through ctypes, past the audit hook) gave a sample ``max_processes`` processes
    of ``memory_mb`` each (4 x 200 MB held here under a 512 MB limit), and as uid 0 any number of
    them. Now seccomp refuses every new process (fork, vfork-style spawn, raw fork/clone; clone3
    is ENOSYS) and threads still start through glibc's clone fallback."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    import errno

    numbers = _syscall_numbers("fork", "clone", "clone3")
    refused = {name: (-1, errno.ENOSYS if name == "clone3" else errno.EPERM) for name in numbers}
    tests = ("forked, total_mb = hold(4, 200)\nassert (forked, total_mb < 512) == (0, True)\n"
             "assert bomb(64) == 0\n"
             f"assert raw({numbers!r}) == {refused!r}\n"
             "assert shell() != 0\n"
             "assert threads() == [0, 1, 4, 9]\n")
    assert score(PROCESSES, tests, isolation=isolation, user=user) == 1.0


#: io_uring past the audit hook: set up a ring, enter and register on a bad descriptor.
IO_URING = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def ring(setup, enter, register):\n"
    "    params = ctypes.create_string_buffer(120)\n"
    "    fd = libc.syscall(setup, 8, params)\n"
    "    answers = [(fd, ctypes.get_errno())]\n"
    "    if fd >= 0:\n"
    "        libc.close(fd)\n"
    "    for nr in (enter, register):\n"
    "        answers.append((libc.syscall(nr, -1, 0, 0, 0, 0, 0), ctypes.get_errno()))\n"
    "    return answers\n"
)


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_io_uring_is_refused(isolation):
    """io_uring (a large kernel attack surface, refused by Docker's default profile) worked in a
    sample: ``io_uring_setup`` gave a ring. Every io_uring call now fails with EPERM from the
    filter (not EBADF from the kernel for a bad descriptor)."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    import errno

    nrs = _syscall_numbers("io_uring_setup", "io_uring_enter", "io_uring_register")
    if len(nrs) != 3:
        pytest.skip("no io_uring calls on this architecture")
    call = f"ring({nrs['io_uring_setup']}, {nrs['io_uring_enter']}, {nrs['io_uring_register']})"
    assert score(IO_URING, f"assert {call} == [(-1, {errno.EPERM})] * 3\n", isolation=isolation) == 1.0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_cannot_enlarge_its_socket_buffers(isolation):
    """Bytes written to a socket and not read sit in kernel memory no rlimit counts, up to the
    socket's buffer. A sample asking for 64 MB send buffers held 228 MB in 29 unix socket pairs at
    ``memory_mb = 128`` (twice ``net.core.wmem_max`` per pair; 4 MB on that host), 6 MB with the
    default buffers. The filter answers ``SO_SNDBUF``/``SO_RCVBUF`` with success and no effect, so
    asking holds no more than not asking. (The audit hook refuses Python's ``socket``; libc's
    through ctypes passes it, so this runs the kernel layers alone.)"""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    tests = "assert held_kb(False) > 0\nassert held_kb(True) <= held_kb(False) * 1.25 + 64\n"
    assert score(SOCKET_BUFFERS, tests, isolation=isolation, memory_mb=128, audit_hook=False) == 1.0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_cannot_enlarge_its_socket_buffers_with_bits_above_an_int(isolation):
    """``setsockopt`` reads its level and option as ints, so SOL_SOCKET | 1 << 32 is SOL_SOCKET to
    the kernel; the filter's rule compared the whole 64-bit register, let that call through, and
    the pairs got 8 MB send buffers (twice ``wmem_max``) again. The rule now compares the low 32 bits."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    nr = _syscall_numbers("setsockopt").get("setsockopt")
    if nr is None:
        pytest.skip("no setsockopt call on this architecture (socketcall)")
    tests = f"assert held_kb(False) > 0\nassert held_kb_wide({nr}) <= held_kb(False) * 1.25 + 64\n"
    assert score(SOCKET_BUFFERS_WIDE, tests, isolation=isolation, memory_mb=128, audit_hook=False) == 1.0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_tcp_autotuning_holds_no_more_than_the_capped_buffers(isolation):
    """TCP grows a loopback connection's send buffer by itself up to ``net.ipv4.tcp_wmem``'s
    maximum (4 MB by default), whatever the filter does to ``SO_SNDBUF``: a sample filling the
    connections it never read held 108 MB at ``memory_mb = 128`` (32 connections with
    ``max_open_files = 64``). The sample's network namespace is made by the tmpfs wrapper, which
    caps ``tcp_wmem``/``tcp_rmem`` there at 128 KB (per namespace: the host's stay), so they hold
    at most 32 x 2 x 128 KB; loopback still connects (something was held)."""
    cap = 128 * 1024  # isolation.TCP_BUFFER_MAX
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        host = f.read()
    if int(host.split()[2]) <= 2 * cap:
        pytest.skip(f"this host's tcp_wmem is small already: {host.strip()}")
    if "TCP buffers not capped" in isolation_report(isolation=isolation)["isolation"]:
        pytest.skip("the wrapper that makes the sample's network namespace cannot run here")
    tests = ("held = tcp_held_kb()\nassert held > 0\n"
             f"assert held <= 32 * 2 * {cap // 1024}, held\n"
             f"assert wmem_max() == {cap}\n")
    sample = TCP_BUFFERS + "def wmem_max():\n    return int(open('/proc/sys/net/ipv4/tcp_wmem').read().split()[2])\n"
    assert score(sample, tests, isolation=isolation, memory_mb=128, max_open_files=64, audit_hook=False) == 1.0
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        assert f.read() == host  # the host's own setting is untouched


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="as root each sample is in a user namespace of its own")
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_takes_no_inotify_or_fanotify_instance_from_the_trainers_uid(isolation):
    """The kernel counts inotify instances and fanotify groups per uid up every user namespace,
    and in the host's against the uid that made the sample's namespace: root. A sample held 59 of
    each (its ``max_open_files``) out of root's 128, and the trainer's own ``inotify_init1`` failed
    with EMFILE while it ran; the sample's namespace allowed INT_MAX. Its namespace's limits are 0
    now: EMFILE at once (watches and fanotify marks need one of those)."""
    import errno

    if "user namespace" not in isolation_report(isolation=isolation)["isolation"]:
        pytest.skip("the kernel refuses the sample a user namespace of its own here")
    tests = f"assert notify_groups() == [(0, {errno.EMFILE}), (0, {errno.EMFILE})]\n"
    assert score(NOTIFY_GROUPS, tests, isolation=isolation, audit_hook=False) == 1.0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_closed_connections_waiting_to_be_accepted_are_few(isolation):
    """A connection in a listener's accept queue needs no descriptor of the sample's, nor does
    its client once closed with data unsent, so ``max_open_files`` did not bound them: one
    listener queued 300 such connections holding 87 MB of the host's TCP memory (the queue was
    4096 long a listener, and the host's ``tcp_mem`` limit is shared with the trainer's own
    connections). The sample's network namespace has ``somaxconn`` 8: a listener queues at most
    9, so 4 listeners asked for 40 each queue 36 at most."""
    if "TCP buffers not capped" in isolation_report(isolation=isolation)["isolation"]:
        pytest.skip("the wrapper that makes the sample's network namespace cannot run here")
    tests = "made = queued(4, 40)\nassert 4 <= made <= 4 * 9, made\n"
    assert score(ORPHANS, tests, isolation=isolation, audit_hook=False) == 1.0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_cannot_enlarge_its_pipes(isolation):
    """Bytes written to a pipe and not read are kernel memory no rlimit counts, up to the pipe's
    buffer: a sample growing each pipe to 1 MB (``F_SETPIPE_SZ``) held 29 MB at ``memory_mb = 128``,
    1.8 MB with the default 64 KB pipes. The filter refuses ``F_SETPIPE_SZ`` (EPERM, as the kernel
    answers past its own limits), so asking holds no more than not asking."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    tests = "assert pipe_held_kb(False) > 0\nassert pipe_held_kb(True) <= pipe_held_kb(False) * 1.25 + 64\n"
    assert score(PIPE_BUFFERS, tests, isolation=isolation, memory_mb=128, audit_hook=False) == 1.0


#: Opens a pty of its own past the audit hook and asks for line disciplines on it: N_NULL (27, built
#: into most kernels) and N_HDLC (13, a module); (return value, errno) of each TIOCSETD.
LINE_DISCIPLINES = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def disciplines():\n"
    "    master = libc.open(b'/dev/ptmx', os.O_RDWR | os.O_NOCTTY)\n"
    "    assert master >= 0, ctypes.get_errno()\n"
    "    answers = []\n"
    "    for disc in (27, 13):\n"
    "        ctypes.set_errno(0)\n"
    "        answers.append((libc.ioctl(master, 0x5423, ctypes.byref(ctypes.c_int(disc))), ctypes.get_errno()))\n"
    "    libc.close(master)\n"
    "    return answers\n"
)


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_sets_no_line_discipline_on_its_pty(isolation):
    """A sample opens a pty of its own (``/dev/ptmx``, its private devpts). TIOCSETD on it set
    N_NULL, and asking for a line discipline the kernel lacks makes the kernel load its module
    (``tty-ldisc-N`` with ``dev.tty.ldisc_autoload`` on, the default: n_hdlc and n_gsm were local
    root exploits); the filter refuses TIOCSETD with EPERM, whatever the discipline."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    import errno

    tests = f"assert disciplines() == [(-1, {errno.EPERM})] * 2\n"
    assert score(LINE_DISCIPLINES, tests, isolation=isolation, audit_hook=False) == 1.0


#: Makes POSIX message queues past the audit hook (libc's ``mq_open``, default sizes) and holds them
#: 4 s; returns how many it made.
MESSAGE_QUEUES = (
    "import ctypes, os, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def hold():\n"
    "    made = 0\n"
    "    for i in range(64):\n"
    "        if libc.mq_open(f'/q{i}'.encode(), os.O_CREAT | os.O_RDWR, 0o600, None) < 0:\n"
    "            break\n"
    "        made += 1\n"
    "    time.sleep(4)\n"
    "    return made\n"
)


def _trainer_mq_open() -> int:
    """0 when this process (the trainer's uid) can make a message queue of default size, else errno."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    name = f"/polyrl_test_{os.getpid()}".encode()
    fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None)
    if fd < 0:
        return ctypes.get_errno()
    libc.mq_close(fd)
    libc.mq_unlink(name)
    return 0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_takes_no_posix_message_queue_bytes_from_the_trainers_uid(isolation):
    """A queue's bytes count against RLIMIT_MSGQUEUE (800 KB) of its uid and of the uid that made
    each user namespace above it, up to the trainer's on the host: a sample holding queues made the
    trainer's own ``mq_open`` fail with EMFILE while it ran and seconds after (its IPC namespace is
    freed late). The sample's RLIMIT_MSGQUEUE is 0, so it makes none and the trainer's keep working."""
    import ctypes
    import threading
    import time

    if not hasattr(ctypes.CDLL(None), "mq_open"):
        pytest.skip("this libc has no mq_open (glibc before 2.34 keeps it in librt)")
    deadline = time.monotonic() + 15  # another test's sample may still hold some (freed late)
    while _trainer_mq_open() != 0:
        if time.monotonic() > deadline:
            pytest.skip("this process cannot make a POSIX message queue here")
        time.sleep(0.5)
    scores: list[float | None] = []
    sample = threading.Thread(target=lambda: scores.append(
        score(MESSAGE_QUEUES, "assert hold() == 0\n", isolation=isolation, audit_hook=False)))
    sample.start()
    refused = set()
    while sample.is_alive():
        refused.add(_trainer_mq_open())
        time.sleep(0.2)
    sample.join()
    assert scores == [1.0] and refused == {0}, (scores, refused)


#: Blocks SIGRTMIN and queues it to itself past the audit hook (libc's ``sigqueue``) until refused,
#: then holds them 4 s; returns how many it queued.
QUEUED_SIGNALS = (
    "import ctypes, os, signal, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def hold():\n"
    "    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
    "    queued = 0\n"
    "    while queued < 200000 and libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)) == 0:\n"
    "        queued += 1\n"
    "    time.sleep(4)\n"
    "    return queued\n"
)


def _trainer_timer_create() -> int:
    """0 when this process (the trainer's uid) can make a POSIX timer (one queued signal), else errno."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    timer = ctypes.c_void_p()
    if libc.timer_create(1, None, ctypes.byref(timer)) != 0:  # CLOCK_MONOTONIC, SIGALRM on expiry
        return ctypes.get_errno()
    libc.timer_delete(timer)
    return 0


@needs_bwrap
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_sample_takes_no_queued_signals_from_the_trainers_uid(isolation):
    """Queued real-time signals count against RLIMIT_SIGPENDING of their uid and of the uid that
    made each user namespace above it, up to the trainer's on the host: a sample queueing as many
    as its inherited limit (96 555 on the machine it was found on) made every ``timer_create`` of
    the trainer's uid fail with EAGAIN while it ran. The sample's limit is 64
    (``server.SIGNALS_QUEUED``; that module runs its server when imported)."""
    import ctypes
    import threading
    import time

    if not hasattr(ctypes.CDLL(None), "timer_create"):
        pytest.skip("this libc has no timer_create (glibc before 2.34 keeps it in librt)")
    assert _trainer_timer_create() == 0
    scores: list[float | None] = []
    sample = threading.Thread(target=lambda: scores.append(
        score(QUEUED_SIGNALS, "assert 0 < hold() <= 64\n", isolation=isolation, audit_hook=False)))
    sample.start()
    refused = set()
    while sample.is_alive():
        refused.add(_trainer_timer_create())
        time.sleep(0.2)
    sample.join()
    assert scores == [1.0] and refused == {0}, (scores, refused)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
@pytest.mark.parametrize("isolation", ["auto", "require"])
def test_a_root_samples_threads_are_capped_by_max_processes(isolation):
    """With ``user = "none"`` the sample is uid 0, which RLIMIT_NPROC never binds: a sample started
    200 threads with 32 KB stacks at ``max_processes = 16`` (600-800 in 512 MB), each a host pid
    (32768 in all on the machine it was found on) and kernel memory no rlimit counts. Its real uid is now one of the pool's (still euid 0: root's
    files as before), which the kernel counts, and the filter refuses a setuid call back to 0."""
    if not _seccomp_on(isolation):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    import errno

    numbers = _syscall_numbers("setuid", "setreuid", "setresuid")
    refused = {name: (-1, errno.EPERM) for name in numbers}
    tests = f"assert back_to_root({numbers!r}) == {refused!r}\nassert 0 < threads(200) <= 16\n"
    assert score(ROOT_THREADS, tests, isolation=isolation, user="none", max_processes=16) == 1.0
    assert "not enforced" not in isolation_report(isolation=isolation, user="none")["rlimits"]


#: What a sample reaches of bubblewrap's PID 1 past the audit hook: whether it sees it at all (its
#: status, world-readable), and which of its private files it could open (memory for writing too).
PID_ONE = (
    "import os\n"
    "def pid_one():\n"
    "    seen = 'bwrap' in open('/proc/1/status').read()\n"
    "    opened = []\n"
    "    for name, mode in (('environ', 'rb'), ('maps', 'rb'), ('auxv', 'rb'), ('mem', 'rb'), ('mem', 'r+b')):\n"
    "        try:\n"
    "            open('/proc/1/' + name, mode).close()\n"
    "            opened.append(name + ' ' + mode)\n"
    "        except OSError:\n"
    "            pass\n"
    "    for link in ('cwd', 'root', 'exe', 'fd/0'):\n"
    "        try:\n"
    "            os.readlink('/proc/1/' + link)\n"
    "            opened.append(link)\n"
    "        except OSError:\n"
    "            pass\n"
    "    return seen, opened\n"
)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
@pytest.mark.parametrize("filtered", [True, False], ids=["filter", "no-filter"])
def test_a_root_sample_cannot_read_or_write_bubblewraps_pid_1(filtered, monkeypatch):
    """bubblewrap's PID 1 in the sample's PID namespace is uid and gid 0, holds no capability and
    makes itself dumpable, so a ``user = "none"`` sample (euid 0, no capabilities) passed the
    kernel's ptrace check on it: it opened ``/proc/1/mem`` for writing (code run there has the
    trainer's rlimits, no ``memory_mb``) and read its environment, memory map and links. Its gid
    is now one of its own (``isolation.no_capabilities``), with the filter and without it."""
    from polyrl.rewards.code import parse_tests
    from polyrl.sandbox import Sandbox, SandboxLimits, runner, seccomp

    if filtered and not _seccomp_on("require"):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    if not filtered:  # as without libseccomp: bubblewrap runs, the filter does not
        monkeypatch.setattr(seccomp, "_cache", [(None, "off: no libseccomp bindings (test)")])
        monkeypatch.setattr(runner, "_launches", {})
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512), isolation="auto", user="none", audit_hook=False)
    assert (box.level, box.report["seccomp"].startswith("on")) == ("bwrap", filtered), box.report
    result = box.run(PID_ONE, parse_tests("assert pid_one() == (True, [])\n"))
    assert (result.status, result.passed) == ("ok", [True]), result


#: Makes SysV semaphore sets of 32000 semaphores (~2 MB of kernel memory each, which RLIMIT_AS
#: never counts); returns (sets made, errno of the first refusal or 0).
SEMAPHORES = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def semaphores():\n"
    "    made = 0\n"
    "    for _ in range(8):\n"
    "        if libc.semget(0, 32000, 0o1600) < 0:\n"  # IPC_PRIVATE, IPC_CREAT | 0600
    "            return made, ctypes.get_errno()\n"
    "        made += 1\n"
    "    return made, 0\n"
)


@needs_bwrap
@pytest.mark.parametrize("filtered", [True, False])
def test_a_sample_makes_no_sysv_semaphore_set(filtered, monkeypatch):
    """``shmget`` and ``msgget`` were refused, ``semget`` was not: each set of 32000 semaphores
    held 2 MB of kernel memory past ``memory_mb`` (150 sets, 300 MB, in 0.6 s at ``memory_mb =
    128``; the IPC namespace's defaults allow 32000 sets). Now the filter refuses ``semget``
    (EPERM), and without it (``filtered`` False: no libseccomp) the wrapper's ``kernel/sem``
    SEMMSL of 0 refuses every set (EINVAL)."""
    import errno
    import sys

    from polyrl.rewards.code import parse_tests
    from polyrl.sandbox import Sandbox, SandboxLimits, runner, seccomp

    if filtered and seccomp.compiled_filter()[0] is None:
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    if not filtered:
        monkeypatch.setattr(seccomp, "compiled_filter", lambda: (None, "off: test"))
        monkeypatch.setattr(runner, "_launches", {})
    box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128, disk_mb=8), python=sys.executable)
    if not filtered and not box.launch.wrapper:
        pytest.skip("no tmpfs wrapper here (util-linux unshare or mount missing): the IPC limits are not set")
    wanted = errno.EPERM if filtered else errno.EINVAL
    result = box.run(SEMAPHORES, parse_tests(f"assert semaphores() == (0, {wanted})\n"))
    assert result.status == "ok" and result.passed == [True], (result, box.report["seccomp"])


#: Asks Linux AIO for contexts (``io_setup``) until refused; returns (events taken, errno of the refusal).
AIO = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def contexts(nr):\n"
    "    taken = 0\n"
    "    for events in (32768, 32768, 1):\n"
    "        ctx = ctypes.c_ulong(0)\n"
    "        if libc.syscall(nr, events, ctypes.byref(ctx)) != 0:\n"
    "            return taken, ctypes.get_errno()\n"
    "        taken += events\n"
    "    return taken, 0\n"
)


@needs_bwrap
def test_a_sample_takes_no_aio_events_from_the_host():
    """``io_setup`` was open: AIO events count against ``fs.aio-max-nr``, one limit for the whole
    host (65536 by default) that no namespace splits, and a sample took all of it in two calls,
    so every ``io_setup`` on the host (the trainer's libaio, other samples) failed with EAGAIN
    while it ran. Now the filter refuses it (EPERM) before anything is counted."""
    import errno

    if not _seccomp_on("auto"):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    nrs = _syscall_numbers("io_setup")
    if not nrs:
        pytest.skip("no io_setup on this architecture")
    assert score(AIO, f"assert contexts({nrs['io_setup']}) == (0, {errno.EPERM})\n", isolation="auto") == 1.0


#: Kernel calls that reach past the sample (bubblewrap's pid 1, the host's mounts, its own limits);
#: returns each one's (result < 0, errno).
REACH_PAST = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def tried(nrs):\n"
    "    out = {}\n"
    "    def call(name, *args):\n"
    "        r = libc.syscall(ctypes.c_long(nrs[name]), *[ctypes.c_long(a) if type(a) is int else a for a in args])\n"
    "        out[name] = (r < 0, ctypes.get_errno() if r < 0 else 0)\n"
    "        return r\n"
    "    attr = (ctypes.c_char * 128)()\n"
    "    call('perf_event_open', attr, 0, -1, -1, 0)\n"
    "    call('open_tree', -100, b'/', 1)\n"  # OPEN_TREE_CLONE of the root: a mount to move elsewhere
    "    pidfd = call('pidfd_open', 1, 0)\n"  # bubblewrap's pid 1 (root): a descriptor of it is allowed
    "    call('pidfd_getfd', pidfd, 0, 0)\n"
    "    limit = (ctypes.c_ulong * 2)(1 << 40, 1 << 40)\n"
    "    call('prlimit64', 1, 9, limit, None)\n"  # RLIMIT_AS of pid 1
    "    out['setrlimit'] = (libc.setrlimit(9, limit) < 0, ctypes.get_errno())\n"  # its own RLIMIT_AS past the hard one
    "    call('kill', -1, 0)\n"  # every process it may signal: none in its PID namespace
    "    out['mem of pid 1'] = (libc.open(b'/proc/1/mem', os.O_RDWR) < 0, ctypes.get_errno())\n"
    "    return out\n"
)


@needs_bwrap
def test_kernel_calls_reaching_past_the_sample_fail():
    """Red-team pass at the default level, each already stopped (a guard, not a fix): a perf event,
    a clone of the mount tree, a descriptor taken from bubblewrap's pid 1 through its pidfd, pid
    1's limits, its own memory limit past the hard one, a signal to every process it can see, and
    pid 1's memory opened past the audit hook (libc's open)."""
    import errno

    if not _seccomp_on("auto"):
        pytest.skip("seccomp is off here (no pyseccomp/libseccomp)")
    names = ("perf_event_open", "open_tree", "pidfd_open", "pidfd_getfd", "prlimit64", "kill")
    nrs = _syscall_numbers(*names)
    if len(nrs) != len(names):
        pytest.skip(f"calls missing on this architecture: {sorted(set(names) - set(nrs))}")
    want = {"perf_event_open": (True, errno.EPERM), "open_tree": (True, errno.EPERM), "pidfd_open": (False, 0),
            "pidfd_getfd": (True, errno.EPERM), "prlimit64": (True, errno.EPERM), "setrlimit": (True, errno.EPERM),
            "kill": (True, errno.ESRCH), "mem of pid 1": (True, errno.EACCES)}
    assert score(REACH_PAST, f"assert tried({nrs!r}) == {want!r}\n", isolation="auto") == 1.0
