"""Escapes a hostile tester used against the Python-level guard, replayed against the OS layers.

Every sample here runs with the audit hook OFF (``audit_hook=False``): what stops it is the
kernel (bubblewrap namespaces, an unprivileged uid, no capabilities, seccomp, which also refuses new
processes, a private tmpfs).
As root (this machine's default) the suite runs twice, parametrized on the sandbox's ``user``
option: "auto" (the sample runs as ``nobody``) and "none" (the sample keeps uid 0 but has no
capabilities and sees only the read-only tree bwrap builds). The trainer itself running
unprivileged is ``test_unprivileged_trainer_bwrap_layout``: the bwrap command built for a non-root
caller, run under ``setpriv`` as ``nobody``.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import socket
import subprocess
import sys

import pytest
from bwrap_util import WHY_NOT, needs_bwrap
from sandbox_attacks import run_lingering

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, uids

pytestmark = pytest.mark.faults

TESTS = parse_tests("assert add(1, 2) == 3\n")
GOOD = "def add(a, b):\n    return a + b\n"


USERS = ["auto", "none"] if os.geteuid() == 0 else ["auto"]


@pytest.fixture(params=USERS)
def box(request) -> Sandbox:
    if WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    limits = SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8, max_output_bytes=200_000, max_processes=64)
    return Sandbox(limits, isolation="require", user=request.param, audit_hook=False)


def run(box: Sandbox, code: str):
    """Run the attack then a correct ``add``; the attack's prints are in ``result.output``."""
    result = box.run(code + "\n" + GOOD, TESTS)
    assert result.status in ("ok", "error"), (result.status, result.error, result.output[-500:])
    return result


def test_the_report_names_the_full_level(box):
    report = box.report
    assert box.level == "bwrap"
    assert report["isolation"].startswith("bwrap")
    assert "tmpfs" in report["filesystem"]


def test_no_inherited_descriptors_and_no_write_through_them(box, tmp_path):
    """Descriptors the trainer holds (even inheritable ones) never reach the sample."""
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    leaked = os.open(victim, os.O_RDWR)
    os.set_inheritable(leaked, True)
    try:
        code = ("import os\nfor fd in range(3, 256):\n    for attack in (lambda: os.ftruncate(fd, 0), "
                "lambda: os.write(fd, b'pwned'), lambda: os.pwrite(fd, b'pwned', 0)):\n"
                "        try:\n            attack()\n            print('WROTE', fd, flush=True)\n"
                "        except OSError:\n            pass\n")
        assert run(box, "").inherited_fds == []
        result = box.run(code + GOOD, TESTS)  # writing on its own answer channel breaks it: fine
    finally:
        os.close(leaked)
    assert result.fraction == 0.0 or result.status == "ok"
    assert victim.read_text() == "intact"
    # the sample's own channel descriptors are the only ones it can write to; they are not files
    assert all(int(line.split()[1]) < 10 for line in result.output.splitlines() if line.startswith("WROTE"))


def test_host_files_are_not_there_and_the_tree_is_read_only(box, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    code = (f"import os\nfor p in ({str(victim)!r}, '/work/main/README.md', '/root/.bashrc', '/etc/shadow',\n"
            f"          '/usr/bin/python3', {sys.base_prefix + '/bin/python3'!r}):\n"
            "    try:\n        open(p, 'a').write('pwned')\n        print('WROTE', p, flush=True)\n"
            "    except OSError as e:\n        print('DENIED', p, e.errno, flush=True)\n"
            "print('ROOT', sorted(os.listdir('/')), flush=True)\n"
            "print('WORK', os.listdir('/work/main') if os.path.isdir('/work/main') else [], flush=True)\n"
            "for d in ('/', '/dev', '/work', '/root', '/proc'):\n"
            "    try:\n        open(d + '/new-file', 'w').write('x')\n        print('WROTE', d, flush=True)\n"
            "    except OSError as e:\n        print('DENIED', d, e.errno, flush=True)\n")
    result = run(box, code)
    assert "WROTE" not in result.output, result.output
    assert victim.read_text() == "intact"
    root_line = next(line for line in result.output.splitlines() if line.startswith("ROOT"))
    for absent in ("'etc'", "'home'", "'var'", "'opt'"):
        assert absent not in root_line, root_line
    work_line = next(line for line in result.output.splitlines() if line.startswith("WORK"))
    assert work_line in ("WORK []", "WORK ['.venv']"), work_line  # only the interpreter's folders


def test_subinterpreter_os_system_runs_as_nobody_inside(box, tmp_path):
    """The sub-interpreter trick escapes an audit hook; here there is no hook to escape. With the
    seccomp filter no shell starts at all (new processes are refused); without it, what it runs
    is still inside the namespaces, without capabilities."""
    marker = tmp_path / "pwned"
    inner = (f"import os; os.system('id -u; touch {marker} 2>&1; touch /root/pwned-by-sample 2>&1; "
             "cat /proc/1/environ 2>&1 | head -c 100; echo')")
    code = ("import _xxsubinterpreters as interp\n"
            f"interp.run_string(interp.create(), {inner!r})\n")
    result = run(box, code)
    assert not marker.exists()
    assert not os.path.exists("/root/pwned-by-sample")
    if box.launch.seccomp_program is not None:
        assert not any(line.strip().isdigit() for line in result.output.splitlines()), result.output
        return
    uid = result.output.strip().splitlines()[0]
    if box.launch.uid_pool:  # a uid of its own (polyrl.sandbox.uids), unprivileged like nobody
        assert uids.FIRST <= int(uid) < uids.FIRST + uids.SIZE, result.output
    else:
        assert uid == ("65534" if box.launch.ids else "0"), result.output
    if box.launch.ids is None:  # uid 0 in there: still no capability to do anything with it
        result = run(box, "import os\nos.system('mount -t tmpfs x /tmp 2>&1; echo rc=$?')\n")
        assert "rc=0" not in result.output, result.output


def test_no_way_into_the_host_network_namespace(box):
    """A 127.0.0.1 listener of the trainer's namespace: the sample's namespace has its own loopback,
    no host process is visible to nsenter into, and setns/unshare are refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    code = (
        "import os, socket, ctypes\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print('PIDS', pids, flush=True)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for pid in pids + [os.getppid()]:\n"
        "    try:\n        fd = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY)\n"
        "    except OSError as e:\n        print('OPEN', pid, e, flush=True)\n        continue\n"
        "    print('SETNS', pid, libc.setns(fd, 0), ctypes.get_errno(), flush=True)\n"
        "print('UNSHARE', libc.unshare(0x10000000 | 0x40000000), ctypes.get_errno(), flush=True)\n"
        f"os.system('nsenter -t 1 -n true 2>&1; unshare -U -r -n true 2>&1')\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    print('CONNECTED', flush=True)\n"
        "except OSError as e:\n    print('NOCONNECT', e, flush=True)\n"
    )
    try:
        result = run(box, code)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert "CONNECTED" not in result.output and "NOCONNECT" in result.output, result.output
    pids = eval(next(line for line in result.output.splitlines() if line.startswith("PIDS"))[5:])  # noqa: S307
    assert max(pids) < 50, pids  # its own PID namespace: a handful of small pids, no host process
    for line in result.output.splitlines():
        if line.startswith(("SETNS", "UNSHARE")):
            assert line.split()[-2] == "-1", line  # refused (EPERM by seccomp, or no capability)


def test_secrets_of_the_trainer_and_root_only_files_stay_unread(box, tmp_path):
    secret = "polyrl-test-secret-7d1f"
    os.environ["POLYRL_TEST_SECRET"] = secret
    private = tmp_path / "root-only.txt"
    private.write_text(secret)
    private.chmod(0o600)
    code = (
        "import os, glob\nseen = [repr(dict(os.environ))]\n"
        f"for path in glob.glob('/proc/*/environ') + ['/proc/{os.getpid()}/environ', {str(private)!r},"
        " '/root/.bash_history', '/etc/shadow']:\n"
        "    try:\n        seen.append(open(path, 'rb').read().decode('latin-1'))\n"
        "    except OSError as e:\n        seen.append(f'{path}: {e.strerror}')\n"
        "print('\\n'.join(seen), flush=True)\n")
    try:
        result = run(box, code)
    finally:
        del os.environ["POLYRL_TEST_SECRET"]
    assert secret not in result.output
    assert "POLYRL_TEST_SECRET" not in result.output


def test_filling_the_disk_stops_at_the_cap(box):
    """Many files, each under the per-file limit: the private tmpfs (``disk_mb`` = 8) is full first."""
    code = ("import os\nwritten = 0\ntry:\n    for i in range(1000):\n"
            "        with open(f'fill{i}', 'wb') as f:\n            f.write(b'x' * 2 ** 20)\n"
            "        written += 2 ** 20\nexcept OSError as e:\n    print('STOPPED', e.strerror, flush=True)\n"
            "print('WRITTEN', written, flush=True)\n")
    free_before = shutil.disk_usage("/tmp").free
    result = run(box, code)
    written = int(next(line for line in result.output.splitlines() if line.startswith("WRITTEN")).split()[1])
    assert "No space left on device" in result.output
    assert written <= 8 * 2 ** 20
    assert shutil.disk_usage("/tmp").free > free_before - 4 * 2 ** 20  # the host's /tmp took none of it


def test_fork_is_refused_and_processes_die_with_the_sample(box):
    """With the seccomp filter a sample cannot fork, hook or not (one process: ``memory_mb`` bounds
    it in all); without it (no libseccomp) its ``setsid`` children die with the PID namespace."""
    code = ("import os, time\nforked = 0\nfor _ in range(4):\n    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        print('REFUSED', e.errno, flush=True)\n        continue\n"
            "    if pid == 0:\n        os.setsid()\n        time.sleep(60)\n        os._exit(0)\n"
            "    forked += 1\nprint('FORKED', forked, flush=True)\n")
    result = run(box, code)
    assert result.passed == [True]
    if box.launch.seccomp_program is not None:
        assert "FORKED 0" in result.output and f"REFUSED {errno.EPERM}" in result.output, result.output
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep(60)" not in out  # nothing of the sample survives it (PID namespace torn down)


def test_memory_outside_the_address_space_limit_is_refused(box):
    """SysV shared memory and message queues outlive the calls that made them in the sample's IPC
    namespace (no size limit there), and a memfd is filled with write(2), never mapped: each held
    host memory far past ``memory_mb`` (300 MB at memory_mb = 128). The seccomp filter refuses them."""
    if box.launch.seccomp_program is None:
        pytest.skip("no libseccomp here: the seccomp layer is off")
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "shm = libc.shmget(0, 64 << 20, 0o1600)\nprint('SHM', shm, ctypes.get_errno(), flush=True)\n"
            "msg = libc.msgget(0, 0o1600)\nprint('MSG', msg, ctypes.get_errno(), flush=True)\n"
            "try:\n    os.memfd_create('x')\n    print('MEMFD made', flush=True)\n"
            "except OSError as e:\n    print('MEMFD', e.errno, flush=True)\n")
    result = run(box, code)
    assert result.passed == [True]
    for line in (f"SHM -1 {errno.EPERM}", f"MSG -1 {errno.EPERM}", f"MEMFD {errno.EPERM}"):
        assert line in result.output, result.output


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_unprivileged_trainer_bwrap_layout(monkeypatch, tmp_path):
    """A trainer that is not root: bwrap adds a user namespace. The command built for that case,
    run as ``nobody`` with the system interpreter, keeps the same walls."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no /usr/bin/python3")
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
    prefix, drop = isolation.bwrap_prefix(python, None, 4)
    monkeypatch.undo()
    assert "--unshare-user" in prefix and drop == []
    secret = tmp_path / "secret"
    secret.write_text("root-only")
    secret.chmod(0o600)
    probe = ("import os\nprint(os.getuid(), sorted(os.listdir('/')), flush=True)\n"
             f"for p in ('/proc/1/environ', {str(secret)!r}, '/tmp/x'):\n"
             "    try:\n        print(p, open(p, 'a' if p == '/tmp/x' else 'r').write('y') if p == '/tmp/x' "
             "else open(p).read()[:20])\n    except OSError as e:\n        print(p, 'DENIED', e.strerror)\n"
             "print('UNSHARE', os.system('unshare -n true 2>/dev/null'))\n")
    cmd = isolation.drop_privileges((65534, 65534)) + prefix + [python, "-I", "-c", probe]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    if done.returncode != 0 and "namespace" in done.stderr.lower():
        pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "root-only" not in out
    assert "'work'" not in out and "'root'" not in out
    assert "/tmp/x 1" in out  # its own tmpfs is writable


#: Walks /proc/self/fd and the trainer's /proc/<ppid>/fd for regular files (never blocking on a
#: pipe), reads and appends to each, then tries every descriptor number by number.
FD_WALK = ("import os, stat\nfor d in ('/proc/self/fd', f'/proc/{os.getppid()}/fd'):\n"
           "    try:\n        names = os.listdir(d)\n    except OSError as e:\n"
           "        print('LIST denied', d, e.errno, flush=True)\n        continue\n"
           "    for n in names:\n        p = d + '/' + n\n        try:\n"
           "            if not stat.S_ISREG(os.stat(p).st_mode):\n                continue\n"
           "            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
           "            print('READ', p, os.read(fd, 64), flush=True)\n            os.close(fd)\n"
           "            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)\n"
           "            os.write(fd, b'FORGED')\n            print('WROTE', p, flush=True)\n"
           "        except OSError:\n            pass\n"
           "for fd in range(3, 256):\n    try:\n        print('FD', fd, os.pread(fd, 64, 0), flush=True)\n"
           "    except OSError:\n        pass\n    try:\n        os.pwrite(fd, b'FORGED', 0)\n"
           "        print('WROTE', fd, flush=True)\n    except OSError:\n        pass\n")


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root (samples dropped to another uid) and an interpreter every uid can run")
@pytest.mark.parametrize("user", ["auto", "none"])
def test_at_the_off_level_the_trainers_open_files_stay_unread(user, tmp_path):
    """Without bubblewrap (``isolation = "off"``, the weakest level a root trainer's sample gets)
    the sample is still started with no descriptor but stdin/stdout/stderr (``close_fds``), and
    the trainer's own ``/proc/<pid>/fd`` is closed to it: a pooled uid is another user, and
    ``user = "none"`` (uid 0) has no capability, so it cannot trace root that has them. A secret
    file and a log the trainer holds open (inheritable, one deleted: reachable only through the
    descriptor) are neither read nor written."""
    secret = tmp_path / "tracker.key"
    secret.write_text("TRACKER-KEY")
    log = tmp_path / "metrics.jsonl"
    log.write_text("intact")
    held = [os.open(secret, os.O_RDONLY), os.open(log, os.O_RDWR)]
    secret.unlink()
    for fd in held:
        os.set_inheritable(fd, True)
    try:
        box = Sandbox(SandboxLimits(timeout_s=8), python="/usr/bin/python3", isolation="off", user=user,
                      audit_hook=False)
        result = box.run(FD_WALK + GOOD, TESTS)
    finally:
        for fd in held:
            os.close(fd)
    assert result.status in ("ok", "error"), (result.status, result.error, result.output[-500:])
    assert "TRACKER-KEY" not in result.output and log.read_text() == "intact", result.output
    assert not any(line.startswith("READ /proc/") for line in result.output.splitlines()
                   if "/proc/self/" not in line), result.output  # nothing of the trainer's opened
    # its own channel (pipes, its output) is all it may write to
    assert all(int(line.split()[1]) < 10 for line in result.output.splitlines()
               if line.startswith("WROTE") and line.split()[1].isdigit()), result.output



OFF_LEVEL = pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                               reason="needs root (samples dropped to a pooled uid) and an interpreter every uid can run")

#: Renames the sample's own folder away (as its owner, in the sticky /tmp) and plants a FIFO under
#: its name, then says where in ``{drop}``: the trainer removing "its" folder then opened the FIFO.
PLANT_FIFO = """
import os
home = os.getcwd()
try:
    os.rename(home, home + "-moved")
    os.mkfifo(home, 0o666)
    print("PLANTED", home, flush=True)
except OSError as exc:
    print("REFUSED", exc.errno, flush=True)
with open({drop!r}, "w") as f:
    f.write(home)
"""


@OFF_LEVEL
def test_at_the_off_level_a_fifo_planted_for_the_sample_folder_is_never_opened_by_the_trainer():
    """The sample's folder (cwd, HOME) at the levels without a private /tmp was the sample's own in
    the host's sticky /tmp: it renamed it away and left a FIFO under its name, and the root trainer
    removing the folder (``shutil.rmtree``) opened that FIFO and blocked for good. Here the test
    opens the FIFO's other end where the trainer waits in it (so on the old code the run ends);
    now the folder's entry is the trainer's (``sandbox.scratch``): the rename is refused."""
    import tempfile
    import threading

    shared = tempfile.mkdtemp(prefix="polyrl-test-drop-")
    os.chmod(shared, 0o1777)
    drop = os.path.join(shared, "where")
    try:
        box = Sandbox(SandboxLimits(timeout_s=8), python="/usr/bin/python3", isolation="off", audit_hook=False)
        done: dict = {}
        runner = threading.Thread(target=lambda: done.setdefault("result", box.run(
            PLANT_FIFO.format(drop=drop) + GOOD, TESTS)))
        runner.start()
        opened = False
        while runner.is_alive():
            try:
                with open(drop) as f:
                    fifo = f.read()
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO unless a reader waits in open
                opened = True
            except OSError:
                pass
            runner.join(0.01)
        result = done["result"]
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert not opened, "the trainer opened the FIFO the sample planted in place of its folder"
    assert "PLANTED" not in result.output and "REFUSED" in result.output, result.output
    assert uids.busy() == frozenset()


#: Nests folders in its own folder past Python's recursion limit (by relative paths of up to 3000
#: characters: ``chdir`` is refused at the off level, ``memfd_filter``).
DEEP_TREE = """
import os
print("HOME", os.getcwd(), flush=True)
path = "d"
for _ in range(1500):
    os.mkdir(path)
    path += "/d"
"""


@OFF_LEVEL
def test_at_the_off_level_a_deep_tree_in_the_sample_folder_is_removed_and_the_uid_released():
    """``shutil.rmtree`` of the sample's folder recursed once per level: a tree 1500 folders deep
    made ``Sandbox.run`` raise RecursionError, past the uid's clean-up and release (that uid was
    lost to the pool, and at the off level what the sample left running ran on). Now the folder
    is removed whole at any depth and the sample scores as it should."""
    box = Sandbox(SandboxLimits(timeout_s=20), python="/usr/bin/python3", isolation="off", audit_hook=False)
    result = box.run(DEEP_TREE + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result.status, result.error, result.output[-300:])
    home = next(line.split(" ", 1)[1] for line in result.output.splitlines() if line.startswith("HOME "))
    assert not any(os.path.lexists(path) for path in (home, os.path.dirname(home))
                   if path == home or os.path.basename(path).startswith("polyrl-sandbox-")), home
    assert uids.busy() == frozenset()

@needs_bwrap
def test_a_venv_in_the_project_folder_shows_the_sample_only_its_bin_and_lib(tmp_path):
    """The interpreter's prefix was bound whole: with a venv made in the project's own folder
    (``python -m venv .``) the sample read the dataset with its expected answers and the run's
    config beside it. Now only the prefix's bin, lib and pyvenv.cfg are there; a right solution
    still scores."""
    project = tmp_path / "project"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project)], check=True, timeout=120)
    (project / "data.jsonl").write_text('{"tests": "assert add(1, 2) == 3"}\n')
    (project / "runs").mkdir()
    (project / "runs" / "config.toml").write_text('api_key = "sk-secret"\n')
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=str(project / "bin" / "python"),
                  isolation="auto", audit_hook=False)
    probe = (f"import os\nfor p in ({str(project / 'data.jsonl')!r}, {str(project / 'runs' / 'config.toml')!r}):\n"
             "    try:\n        print('READ', open(p).read())\n    except OSError as e:\n        print('DENIED', e.strerror)\n"
             f"print('SEES', sorted(os.listdir({str(project)!r})))\n")
    result = run(box, probe)
    assert result.passed == [True]
    assert "READ" not in result.output and "sk-secret" not in result.output, result.output
    assert "SEES ['bin', 'lib'" in result.output, result.output
    assert "bin and lib" in box.report["filesystem"]


@needs_bwrap
def test_an_interpreter_that_starts_only_with_its_whole_prefix_gets_it_and_the_report_says_so(monkeypatch, tmp_path):
    """A layout the narrow binds cannot start (here: pretend only ``pyvenv.cfg`` is taken, so the
    venv's own ``bin/python`` is missing) falls back to the whole folders, never to a refusal, and
    ``isolation_report()`` names what the sample can then read."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    monkeypatch.setattr(isolation, "PREFIX_ENTRIES", ("pyvenv.cfg",))
    launch = isolation.choose("auto", "auto", str(venv / "bin" / "python"), 8)
    assert launch.level == "bwrap"
    assert "bound whole" in launch.report["filesystem"] and str(venv) in launch.report["filesystem"]


@needs_bwrap
def test_a_venv_in_the_project_folder_hides_the_projects_own_lib_and_bin(tmp_path):
    """With ``python -m venv .`` in the project's folder, the venv's ``bin`` and ``lib`` are the
    project's too: its own ``lib/`` (data, answers) and ``bin/`` (scripts with tokens) were bound
    with them and the sample read them. Now a venv gets only its interpreter entries of ``bin``
    and its ``lib/pythonX.Y``; a right solution still scores."""
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "bin").mkdir()
    (project / "lib" / "answers.jsonl").write_text('{"expected": 42}\n')
    (project / "bin" / "deploy.sh").write_text("TOKEN=sk-deploy\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project)], check=True, timeout=120)
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=str(project / "bin" / "python"),
                  isolation="require", audit_hook=False)
    probe = (f"import os\nfor p in ({str(project / 'lib' / 'answers.jsonl')!r}, {str(project / 'bin' / 'deploy.sh')!r}):\n"
             "    try:\n        print('READ', open(p).read())\n    except OSError as e:\n        print('DENIED', e.strerror)\n"
             f"print('LIB', sorted(os.listdir({str(project / 'lib')!r})))\n"
             f"print('BIN', sorted(os.listdir({str(project / 'bin')!r})))\n")
    result = run(box, probe)
    assert result.passed == [True], result
    assert "READ" not in result.output and "sk-deploy" not in result.output, result.output
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"LIB ['{version}']" in result.output, result.output
    shown = eval(result.output.split("BIN ", 1)[1].splitlines()[0])  # noqa: S307 - a list the sample printed
    assert shown and all(name.startswith("python") for name in shown), result.output


def test_interpreter_binds_takes_what_a_prefix_reads_at_run_time_and_nothing_beside(tmp_path):
    """A conda-style prefix reads ``ssl/`` (OpenSSL's certificates and openssl.cnf) and ``share/``
    (terminfo, Tcl/Tk data) at run time: they were left out, so its ``ssl`` found no certificates
    in the sandbox. Bound now; its ``conda-meta``, ``pkgs`` and a note beside them are not. A venv
    (``pyvenv.cfg``) gets only its python entries and ``lib/pythonX.Y``."""
    conda = tmp_path / "conda"
    for folder in ("bin", "lib/python3.11", "share/terminfo", "ssl", "conda-meta", "pkgs"):
        (conda / folder).mkdir(parents=True)
    (conda / "bin" / "python3.11").symlink_to(os.path.realpath(sys.executable))
    (conda / "ssl" / "cacert.pem").write_text("cert")
    (conda / "notes.txt").write_text("beside")
    binds = isolation.interpreter_binds([str(conda)])
    assert sorted(os.path.relpath(b, conda) for b in binds) == ["bin", "lib", "share", "ssl"], binds
    venv = tmp_path / "venv"
    for folder in ("bin", "lib/python3.11/site-packages", "lib/data", "share/jupyter"):
        (venv / folder).mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "lib64").symlink_to("lib")
    for name in ("python", "python3", "python3.11", "activate", "deploy.sh", "mypython"):
        (venv / "bin" / name).write_text("")
    binds = isolation.interpreter_binds([str(venv)], str(venv / "bin" / "mypython"))
    assert sorted(os.path.relpath(b, venv) for b in binds) == [
        "bin/mypython", "bin/python", "bin/python3", "bin/python3.11", "lib/python3.11", "pyvenv.cfg"], binds


PTY_ATTACK = """
import errno, fcntl, os, termios
def code(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno))
print("TTYS", [os.isatty(fd) for fd in (0, 1, 2)])
try:
    os.open("/dev/tty", os.O_RDWR)
    print("DEVTTY opened")
except OSError as exc:
    print("DEVTTY", code(exc))
try:
    fd = os.open({host!r}, os.O_WRONLY | os.O_NOCTTY)
    os.write(fd, b"PWNED")
    print("HOST terminal written")
except OSError as exc:
    print("HOST", code(exc))
print("PTS before", sorted(os.listdir("/dev/pts")))
try:
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    fcntl.ioctl(master, 0x40045431, b"\\0\\0\\0\\0")  # TIOCSPTLCK: unlock
    number = int.from_bytes(fcntl.ioctl(master, 0x80045430, b"\\0\\0\\0\\0"), "little")  # TIOCGPTN
    print("PTS after", sorted(os.listdir("/dev/pts")), number)
    slave = os.open(f"/dev/pts/{{number}}", os.O_RDWR | os.O_NOCTTY)
    try:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        fcntl.ioctl(slave, termios.TIOCSTI, b"x")
        print("TIOCSTI own", "done")
    except OSError as exc:
        print("TIOCSTI own", code(exc))
except OSError as exc:
    print("PTMX", code(exc))
"""


def test_a_sample_reaches_no_terminal_but_a_pty_of_its_own(box):
    """/dev/ptmx opens under bubblewrap (``--dev`` gives a private devpts instance): does that
    reach the trainer's terminal? No. The sample has no terminal on stdin/stdout/stderr, no
    controlling terminal (``/dev/tty``: ENXIO), and its /dev/pts holds only ``ptmx`` and the pty it
    opened itself, never the host's (the trainer's terminal, here a pty the test opens as root's,
    which uid 0 without capabilities could otherwise write: ENOENT). TIOCSTI, typing into a
    terminal, would reach only its own pty, and the seccomp filter refuses it there too."""
    master, slave = os.openpty()
    host = os.ttyname(slave)
    try:
        result = run(box, PTY_ATTACK.format(host=host))
        ready = select.select([master], [], [], 0.5)[0]
        written = os.read(master, 100) if ready else b""
    finally:
        os.close(master)
        os.close(slave)
    lines = result.output.splitlines()
    assert "TTYS [False, False, False]" in lines and "DEVTTY ENXIO" in lines, result.output
    assert b"PWNED" not in written and "HOST ENOENT" in lines, (result.output, written)
    assert "PTS before ['ptmx']" in lines, result.output
    after = next(line for line in lines if line.startswith("PTS after "))  # ptmx opens: its own instance
    shown, number = after.removeprefix("PTS after ").rsplit(" ", 1)
    assert shown == str(sorted([number, "ptmx"])), result.output
    if box.launch.seccomp_program is not None:
        assert "TIOCSTI own EPERM" in lines, result.output


def _without_bwrap(monkeypatch, bin_dir: str) -> None:
    """PATH is ``bin_dir`` with the util-linux tools but not bwrap: the ``unshare`` level."""
    from polyrl.sandbox import runner

    os.makedirs(bin_dir)
    for tool in ("unshare", "setpriv", "choom", "mount"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), f"{bin_dir}/{tool}")
    monkeypatch.setenv("PATH", bin_dir)
    monkeypatch.setattr(runner, "_launches", {})


@pytest.mark.parametrize("top", ["/usr/local/src", "/usr/local/lib", "/usr/lib"])
@pytest.mark.parametrize("isolation_option", ["require", "weak"])
def test_a_project_folder_inside_usr_is_hidden(isolation_option, top, monkeypatch):
    """The sample gets /usr whole (bubblewrap's view, and the unshare level's root of its own): a
    trainer started in a project under /usr/local/src (a system image's layout) showed every
    sample the dataset with its expected answers beside it, and inside a system folder
    (/usr/local/lib/proj, /usr/lib/proj) it still did. Now the trainer's folders inside /usr are
    an empty read-only tmpfs there, with the venv made in the project (``python -m venv .``)
    bound back so it still starts; a right solution still scores, and the sample still loads
    the interpreter's C extensions and their system libraries (ssl, sqlite3, ctypes)."""
    if os.geteuid() != 0 or not os.path.isdir(top):
        pytest.skip(f"needs root to make a project folder in {top}")
    if isolation_option == "require" and WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    project = f"{top}/polyrl-escape-{os.getpid()}-{isolation_option}"
    os.makedirs(project)
    try:
        with open(f"{project}/answers.jsonl", "w") as out:
            out.write('{"expected": 42}\n')
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", project], check=True, timeout=120)
        monkeypatch.chdir(project)
        if isolation_option == "weak":
            _without_bwrap(monkeypatch, f"{project}-bin")
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=f"{project}/bin/python",
                      isolation=isolation_option, audit_hook=False)
        assert box.level == ("bwrap" if isolation_option == "require" else "unshare"), box.report
        probe = (f"import os, ssl, sqlite3, ctypes\nprint('LIBS', sqlite3.sqlite_version, ctypes.CDLL(None) is not None)\n"
                 f"try:\n    print('READ', open({project + '/answers.jsonl'!r}).read())\n"
                 "except OSError as e:\n    print('DENIED', e.strerror)\n"
                 f"print('SEES', sorted(os.listdir({project!r})))\n")
        result = run(box, probe)
        assert result.passed == [True], result
        assert "READ" not in result.output and '"expected"' not in result.output, result.output
        assert "SEES ['bin', 'lib'" in result.output and "answers.jsonl" not in result.output, result.output
        assert "LIBS 3." in result.output, result.output
        assert f"trainer's folders {project} hidden" in box.report["filesystem"], box.report
    finally:
        shutil.rmtree(project, ignore_errors=True)
        shutil.rmtree(f"{project}-bin", ignore_errors=True)


CONDA_READ = """
import os, sys
for name in ("ssl/cacert.pem", "share/terminfo/x/xterm", "conda-meta/history", "notes.txt"):
    try:
        print("READ", name, open(os.path.join(sys.prefix, name)).read())
    except OSError as e:
        print("DENIED", name, e.strerror)
"""


@pytest.mark.parametrize("isolation_option", ["require", "weak"])
def test_a_conda_style_prefix_reads_its_ssl_and_share_at_run_time_and_nothing_beside(isolation_option, tmp_path,
                                                                                     monkeypatch):
    """A conda-style prefix (no ``pyvenv.cfg``; its OpenSSL reads ``<prefix>/ssl``, its ncurses
    ``<prefix>/share/terminfo`` at run time) was checked only by the list ``interpreter_binds``
    returns. Here a real one runs samples: the system's Python binary and standard library
    (hard links) in a prefix of its own with ``ssl/``, ``share/``, ``conda-meta/`` and a note. The
    sample reads ``ssl`` and ``share`` where the prefix's libraries would, not ``conda-meta`` or
    the note beside them."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = f"/usr/bin/{version}"
    if not os.path.exists(f"/usr/lib/{version}/os.py") or not os.path.exists(system):
        pytest.skip(f"needs the system's {version} and its standard library in /usr/lib")
    if isolation_option == "require" and WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    prefix = tmp_path / "conda"
    (prefix / "bin").mkdir(parents=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copy2(src, dst)

    link(system, str(prefix / "bin" / version))
    shutil.copytree(f"/usr/lib/{version}", prefix / "lib" / version, copy_function=link, symlinks=True,
                    ignore=shutil.ignore_patterns("test", "dist-packages", "site-packages", "__pycache__", "idlelib",
                                                  "tkinter", "turtledemo", "ensurepip"))
    for name, text in (("ssl/cacert.pem", "CERT"), ("share/terminfo/x/xterm", "TERMINFO"),
                       ("conda-meta/history", "SECRET-HISTORY"), ("notes.txt", "SECRET-NOTE")):
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).write_text(text)
    python = str(prefix / "bin" / version)
    asked = subprocess.run([python, "-I", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    if asked.stdout.strip() != str(prefix):
        pytest.skip(f"the system's Python does not take its copy's folder as its prefix ({asked.stdout.strip()!r})")
    if isolation_option == "weak":
        _without_bwrap(monkeypatch, str(tmp_path / "bin"))
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=python,
                  isolation=isolation_option, audit_hook=False)
    assert box.level == ("bwrap" if isolation_option == "require" else "unshare"), box.report
    result = run(box, CONDA_READ)
    assert result.passed == [True], result
    assert "READ ssl/cacert.pem CERT" in result.output and "READ share/terminfo/x/xterm TERMINFO" in result.output, \
        result.output
    assert "SECRET" not in result.output and "DENIED conda-meta/history" in result.output, result.output
    assert "DENIED notes.txt" in result.output, result.output


@needs_bwrap
@pytest.mark.parametrize("user", USERS)
def test_a_sample_that_leaves_its_process_group_dies_with_its_pid_namespace(user):
    """The trainer ends a bubblewrap sample with its process group only (no /proc scan, as at the
    ``unshare`` level): bubblewrap's PID 1 stays in that group, so a sample that left it
    (``setsid``) and dropped its parent-death signal still dies with its PID namespace."""
    box = Sandbox(SandboxLimits(timeout_s=2, memory_mb=512, disk_mb=8), isolation="require", user=user,
                  audit_hook=False)
    result, survivors = run_lingering(box, TESTS)
    assert result.status == "timeout" and "LEFT THE GROUP" in result.output, (result, result.output)
    assert survivors == [], survivors
