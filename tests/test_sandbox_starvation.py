"""One sample must not starve the host or another sample through a limit the kernel keeps per uid
or per filesystem: ``max_processes`` (RLIMIT_NPROC, per uid), the tmpfs's inodes, and processes
that outlive the sample (a daemon holding its pipes).

Each test is a hostile sample run through a real sandbox (bubblewrap), the way ``code_tests`` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time

import attrs
import pytest
from bwrap_util import needs_bwrap

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation

pytestmark = pytest.mark.faults
SYSTEM_PYTHON = "/usr/bin/python3"
#: the off-level tests run samples as pooled uids, which only root hands out, with an interpreter any uid may run
needs_root_and_system_python = pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                                                  reason="needs root and an interpreter every uid can run")

TESTS = parse_tests("assert add(1, 2) == 3\n")
GOOD = "def add(a, b):\n    return a + b\n"

#: Holds every thread ``max_processes`` allows for 4 s, then defines ``add``.
HOG = ("import threading, time\nev = threading.Event()\nmade = 0\n"
       "for _ in range(500):\n    try:\n        threading.Thread(target=ev.wait, daemon=True).start()\n"
       "        made += 1\n    except RuntimeError:\n        break\n"
       "print('MADE', made, flush=True)\ntime.sleep(4)\n" + GOOD)
#: Starts (1.5 s in, while the hog holds its threads) four threads; ``add`` is right only if all ran.
HONEST = ("import os, threading, time\ntime.sleep(1.5)\nout = []\n"
          "workers = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(4)]\n"
          "for w in workers:\n    w.start()\nfor w in workers:\n    w.join()\n"
          "print('UID', os.getuid(), flush=True)\n"
          "def add(a, b):\n    return a + b + len(out) - 4\n")


def _together(box: Sandbox, *codes: str) -> list:
    """Run the samples at the same time (as ``max_workers`` > 1 does); their results in order."""
    results: list = [None] * len(codes)

    def one(i: int) -> None:
        results[i] = box.run(codes[i], TESTS)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(codes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@needs_bwrap
def test_a_sample_holding_every_thread_it_may_does_not_fail_a_concurrent_one():
    """RLIMIT_NPROC (``max_processes``) counts a uid's threads and processes together. All samples
    of a root trainer ran as ``nobody``: a sample holding its 16 threads made a concurrent honest
    sample's ``Thread.start()`` fail ("can't start new thread"), scoring it 0. Each sample running
    at once now has its own uid (a non-root trainer's samples each have their own user namespace,
    where the kernel counts separately)."""
    box = Sandbox(SandboxLimits(timeout_s=10, max_processes=16), isolation="auto")
    hog, honest = _together(box, HOG, HONEST)
    made = int(next(line for line in hog.output.splitlines() if line.startswith("MADE")).split()[1])
    assert made >= 12, hog.output  # it did hold (nearly) all the limit allows it
    assert honest.all_passed, (honest.status, honest.error, honest.output)
    if os.geteuid() == 0:
        from polyrl.sandbox import uids

        assert box.launch.uid_pool and "its own uid" in box.report["user"]
        uid = int(next(line for line in honest.output.splitlines() if line.startswith("UID")).split()[1])
        assert uids.FIRST <= uid < uids.FIRST + uids.SIZE
        assert uids.busy() == frozenset()  # every uid given back once its sample is gone


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the uid pool is a root trainer's")
def test_samples_running_at_once_have_different_uids_and_an_explicit_user_keeps_its_own():
    """The pool is for ``user = "auto"``; a user named in the options is that user's uid, shared."""
    box = Sandbox(SandboxLimits(timeout_s=8), isolation="auto")
    code = "import os, time\nprint('UID', os.getuid(), flush=True)\ntime.sleep(1)\n" + GOOD
    seen = {next(line for line in r.output.splitlines() if line.startswith("UID")) for r in _together(box, code, code)}
    assert len(seen) == 2, seen
    named = Sandbox(SandboxLimits(timeout_s=8), isolation="auto", user="nobody")
    assert not named.launch.uid_pool and "share" in named.report["user"]
    assert "UID 65534" in named.run(code, TESTS).output


#: Creates empty files (no blocks: the size cap never stops them) and folders until refused.
INODES = ("import os, time\nmade, err = 0, None\nend = time.monotonic() + 4\n"
          "while time.monotonic() < end and made < 60000:\n    try:\n"
          "        if made % 2:\n            os.mkdir('d%d' % made)\n"
          "        else:\n            os.close(os.open('f%d' % made, os.O_CREAT | os.O_WRONLY, 0o600))\n"
          "        made += 1\n    except OSError as e:\n        err = e.strerror\n        break\n"
          "print('MADE', made, err, flush=True)\n" + GOOD)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root trainer mounts the inode-capped tmpfs itself")
def test_empty_files_stop_at_the_tmpfs_inode_cap():
    """``disk_mb`` capped the tmpfs's blocks, not its inodes: a sample made 520 000 empty files
    (0.5 GB of kernel memory no rlimit counts) in 4 s. The tmpfs is now mounted with
    ``nr_inodes`` too (``isolation.tmpfs_inodes``: 4096 at 8 MB), in the sample's own mount
    namespace, which the host never sees."""
    box = Sandbox(SandboxLimits(timeout_s=8, disk_mb=8), isolation="auto", audit_hook=False)
    cap = 4096
    result = box.run(INODES, TESTS)
    assert result.all_passed, (result.status, result.error, result.output)
    made = next(line for line in result.output.splitlines() if line.startswith("MADE")).split(maxsplit=2)
    assert int(made[1]) < cap and made[2] == "No space left on device", result.output
    assert isolation.tmpfs_inodes(8) == cap and f"{cap} inodes" in box.report["filesystem"]
    with open("/proc/self/mountinfo") as f:
        assert "polyrl-sample" not in f.read()  # mounted in the sample's namespace only


#: The daemon tests' sample timeout: a reward that waited for the daemon's pipes (or its end) would
#: take all of it, one that returned at once takes a fraction on the slowest machine.
DAEMON_TIMEOUT_S = 60


def _daemon_outlives(box: Sandbox, program: str | None = None) -> tuple[list[str], object, float]:
    """Run a sample whose double-forked ``setsid`` daemon (a shell named by a token, ignoring
    SIGPIPE as Python left it; or ``program`` run by Python with argv ``[TOKEN, sample pid]``)
    keeps the sample's stdout/stderr open and prints on; (the host pids of the daemon still
    running after the reward returned, the result, seconds)."""
    token = f"polyrl-daemon-{os.getpid()}-{time.monotonic_ns()}"
    run = (f"os.set_inheritable(w, True)\n        os.execv(sys.executable, [sys.executable, '-c', {program!r}, "
           "TOKEN, str(server), str(w)])" if program  # it writes 'up' to fd argv[3] once it runs
           else "os.write(w, b'up')\n        os.close(w)\n"
           "        os.execv('/bin/sh', ['sh', '-c', 'while :; do echo DAEMON; sleep 0.1; done', TOKEN])")
    code = (f"import os, sys\nTOKEN = {token!r}\nserver = os.getpid()\nr, w = os.pipe()\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        {run}\n"
            "    os._exit(0)\n"
            "os.close(w)\nprint('CHILD', os.read(r, 2).decode(), flush=True)\n" + GOOD)
    started = time.monotonic()
    result = box.run(code, TESTS)
    took = time.monotonic() - started
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    left.append(pid)
        except OSError:
            pass
    for pid in left:  # the test's own cleanup, so a failure leaves nothing behind
        os.kill(int(pid), 9)
    return left, result, took


@needs_bwrap
def test_a_daemon_the_sample_leaves_dies_with_it_and_writes_nowhere_after():
    """Without the seccomp filter (no libseccomp) a sample can fork: a double-forked ``setsid``
    daemon that keeps the sample's stdout/stderr open and prints on. The reward returns at once
    (it does not wait for the pipes to close or for the timeout), the daemon is gone when it does
    (the PID namespace dies with the sample), and a later sample's output holds none of its lines."""
    box = Sandbox(SandboxLimits(timeout_s=DAEMON_TIMEOUT_S), isolation="auto", audit_hook=False)
    box.launch = attrs.evolve(box.launch, seccomp_program=None)
    left, result, took = _daemon_outlives(box)
    assert result.all_passed and "CHILD up" in result.output, (result.status, result.output)
    assert took < DAEMON_TIMEOUT_S / 2 and left == [], (took, left)
    later = box.run(GOOD, TESTS)
    assert later.all_passed and "DAEMON" not in later.output


@needs_root_and_system_python
def test_at_the_off_level_a_setsid_daemon_dies_at_sample_end():
    """``isolation = "off"`` has no PID namespace: the daemon left the sample's process group and
    outlived the reward (it still ran, holding the sample's pipes). A root trainer's sample has a
    uid of its own, and at its end every process of that uid is killed."""
    box = Sandbox(SandboxLimits(timeout_s=DAEMON_TIMEOUT_S), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    left, result, took = _daemon_outlives(box)
    assert result.all_passed and "CHILD up" in result.output, (result.status, result.output)
    assert took < DAEMON_TIMEOUT_S / 2 and left == [], (took, left)
    assert "every process of its uid is killed" in box.report["user"]


#: A daemon that stops every other process of its uid (kill(-1, SIGSTOP), as often as it can) and
#: lets its sample's server go on: the end-of-sample kill, which runs as that uid, is one of them.
STOPPER = ("import os, signal, sys, time\nserver = int(sys.argv[2])\nend = time.monotonic() + 30\n"
           "os.kill(-1, signal.SIGSTOP)\nos.kill(server, signal.SIGCONT)\nos.write(int(sys.argv[3]), b'up')\n"
           "while time.monotonic() < end:\n"
           "    for pid, sig in ((-1, signal.SIGSTOP), (server, signal.SIGCONT)):\n"
           "        try:\n            os.kill(pid, sig)\n        except OSError:\n            pass\n")


@needs_root_and_system_python
def test_at_the_off_level_a_daemon_that_stops_the_end_of_sample_kill_dies_too():
    """The end-of-sample kill ran as the sample's uid (``kill -KILL -1``), so the sample's daemon
    could signal it: sending SIGSTOP to every process of its uid in a loop, it stopped the kill
    before it ran. The trainer waited 10 s, the daemon ran on, and its uid went to the next sample
    (which it could then stop, signal or ptrace). The trainer now kills each process of the uid
    itself first, as root, which the sample cannot stop, and the pool skips a uid anything runs as."""
    from polyrl.sandbox import uids

    box = Sandbox(SandboxLimits(timeout_s=DAEMON_TIMEOUT_S), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    left, result, took = _daemon_outlives(box, STOPPER)
    assert result.all_passed and "CHILD up" in result.output, (result.status, result.output)
    assert took < DAEMON_TIMEOUT_S / 2 and left == [], (took, left)
    assert uids.busy() == frozenset()


@needs_root_and_system_python
def test_at_the_off_level_a_sample_cannot_gain_privileges_from_a_setuid_binary():
    """At the ``off`` and ``unshare`` levels the privilege drop kept the bounding set and set no
    ``no_new_privs``: a setuid-root binary (su, mount, newgrp, passwd) the sample ran got root's
    privileges (only bubblewrap's level had them off). Now no capability and no_new_privs."""
    box = Sandbox(SandboxLimits(timeout_s=8), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if box.launch.ids is None:
        pytest.skip(f"samples are not dropped to another uid here: {box.report['user']}")
    code = ("fields = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
            "print('NNP', fields['NoNewPrivs'].strip(), 'BND', fields['CapBnd'].strip(), flush=True)\n" + GOOD)
    result = box.run(code, TESTS)
    assert result.all_passed, (result.status, result.error, result.output)
    assert "NNP 1 BND 0000000000000000" in result.output, result.output
    assert "--no-new-privs" in isolation.drop_privileges((65534, 65534))  # the unshare level's drop too


#: Sample N: leaves a private file in /dev/shm and /tmp and a SysV shared memory segment holding a word.
PLANT = ("import ctypes, os\nTOKEN = {token!r}\n"
         "for folder in ('/dev/shm', '/tmp'):\n"
         "    fd = os.open(os.path.join(folder, TOKEN), os.O_CREAT | os.O_WRONLY, 0o600)\n"
         "    os.write(fd, b'ANSWER')\n    os.close(fd)\n"
         "libc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
         "sid = libc.shmget({key}, 4096, 0o1000 | 0o600)\nassert sid >= 0, ctypes.get_errno()\n"
         "ctypes.memmove(libc.shmat(sid, None, 0), b'ANSWER', 6)\n")
#: Sample N + 1 (the same uid, reused): prints what it finds of sample N's.
FIND = ("import ctypes, os\nTOKEN = {token!r}\nfound = []\n"
        "for folder in ('/dev/shm', '/tmp'):\n    try:\n"
        "        found.append(open(os.path.join(folder, TOKEN)).read())\n    except OSError:\n        pass\n"
        "libc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "sid = libc.shmget({key}, 0, 0)\n"
        "if sid >= 0:\n    found.append(ctypes.string_at(libc.shmat(sid, None, 0), 6).decode())\n"
        "print('FOUND', found, flush=True)\n")


@needs_root_and_system_python
def test_at_the_off_level_the_next_sample_with_a_reused_uid_finds_nothing_the_last_one_left():
    """Pooled uids are reused. At the ``off`` (and ``unshare``) level a sample's private files in
    the host's shared folders and its SysV IPC objects outlived it, and the next sample given the
    same uid read them: sample N could hand sample N + 1 its answers (or a planted state). What a
    pooled uid owns there is now removed at the sample's end (``polyrl.sandbox.leftovers``)."""
    from polyrl.sandbox import uids

    box = Sandbox(SandboxLimits(timeout_s=8), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    token = f"polyrl-leftover-{os.getpid()}-{time.monotonic_ns()}"
    key = 0x50000000 + os.getpid() % 0x1000000
    try:
        first = box.run(PLANT.format(token=token, key=key) + GOOD, TESTS)
        assert first.all_passed, (first.status, first.error, first.output)
        second = box.run(FIND.format(token=token, key=key) + GOOD, TESTS)
        assert second.all_passed, (second.status, second.error, second.output)
        assert "FOUND []" in second.output, second.output
        assert not os.path.exists(os.path.join("/dev/shm", token)) and uids.busy() == frozenset()
    finally:  # the test's own clean-up, so a failure leaves nothing behind
        for folder in ("/dev/shm", "/tmp"):
            try:
                os.unlink(os.path.join(folder, token))
            except OSError:
                pass
        subprocess.run(["ipcrm", "-M", str(key)], capture_output=True)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to become nobody, and an interpreter nobody can run")
def test_an_unprivileged_trainers_tmpfs_is_inode_capped_too(monkeypatch):
    """A trainer that is not root mounts the tmpfs in a user namespace of its own (where it is
    root), and bubblewrap's namespace nests in it: the command built for that case, run as
    ``nobody``, stops at the inode cap, and the sample is still the trainer's uid inside."""
    mount_dir = tempfile.mkdtemp(prefix="polyrl-test-mnt-")
    os.chown(mount_dir, 65534, 65534)
    try:
        monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
        monkeypatch.setattr(isolation.os, "getegid", lambda: 65534)
        wrapper = isolation.tmpfs_wrapper(8, mount_dir)
        prefix, drop = isolation.bwrap_prefix(SYSTEM_PYTHON, None, 8, mount_dir)
        monkeypatch.undo()
        assert "--user" in wrapper and "--unshare-user" in prefix and drop == []
        code = ("import os\nmade = 0\ntry:\n    while made < 60000:\n"
                "        os.close(os.open('/tmp/f%d' % made, os.O_CREAT | os.O_WRONLY, 0o600))\n        made += 1\n"
                "except OSError as e:\n    print(made, e.strerror, os.getuid(), flush=True)\n")
        cmd = isolation.drop_privileges((65534, 65534)) + wrapper + prefix + [SYSTEM_PYTHON, "-I", "-c", code]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        if done.returncode != 0 and "namespace" in done.stderr.lower():
            pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        made, error = done.stdout.split(maxsplit=1)
        assert int(made) < 4096 and error.strip() == "No space left on device 65534", done.stdout
    finally:
        os.rmdir(mount_dir)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another uid")
def test_leftover_removal_takes_only_the_uids_entries_and_never_follows_a_link(tmp_path):
    """``leftovers.remove_files`` removes what the uid owns at the top of a shared folder (a folder
    with all it holds) and nothing else: a link it planted there is removed, never its target."""
    from polyrl.sandbox import leftovers

    uid = 2_000_000_000 + 4242
    shared, outside = tmp_path / "shared", tmp_path / "outside"
    shared.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("host file")
    tree = shared / "tree" / "a" / "b"
    tree.mkdir(parents=True)
    (tree / "f").write_text("x")
    (shared / "file").write_text("x")
    (shared / "link").symlink_to(outside)
    (shared / "theirs").write_text("another user's")
    for path in (shared / "tree", shared / "tree" / "a", tree, tree / "f", shared / "file"):
        os.chown(path, uid, uid)
    deep = os.open(shared, os.O_RDONLY)  # nested past the recursion and descriptor limits
    os.mkdir("deep", dir_fd=deep)
    os.chown("deep", uid, uid, dir_fd=deep)
    for _ in range(3000):
        inner = os.open("deep", os.O_RDONLY, dir_fd=deep)
        os.close(deep)
        deep = inner
        os.mkdir("deep", dir_fd=deep)
    os.close(deep)
    os.lchown(shared / "link", uid, uid)
    removed, failed = leftovers.remove_files(uid, (str(shared),))
    assert failed == [] and sorted(os.path.basename(p) for p in removed) == ["deep", "file", "link", "tree"]
    assert sorted(os.listdir(shared)) == ["theirs"] and (outside / "keep").read_text() == "host file"


@needs_root_and_system_python
def test_what_a_killed_trainers_sample_left_is_gone_before_the_uid_runs_again(tmp_path, monkeypatch):
    """A trainer killed mid-sample (kill -9, OOM) cleans nothing up; at the ``unshare`` and ``off``
    levels what its sample left in the shared folders is removed before the uid runs a sample again.
    On a pool range of the test's own: with the real pool's, another run holding its first uids
    gave this sample a uid past the planted files, and the test passed without testing anything."""
    from test_sandbox_uids import _private_first

    from polyrl.sandbox import uids

    first = _private_first()
    monkeypatch.setattr(uids, "LOCKS", tmp_path)
    monkeypatch.setattr(uids, "FIRST", first)
    box = Sandbox(SandboxLimits(timeout_s=8), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    token = f"polyrl-crashed-{os.getpid()}-{time.monotonic_ns()}"
    planted = [os.path.join("/dev/shm", f"{token}-{i}") for i in range(4)]
    try:
        for i, path in enumerate(planted):  # for the first uids of the pool, whichever this sample gets
            with open(path, "w") as f:
                f.write("ANSWER")
            os.chmod(path, 0o600)
            os.chown(path, first + i, 65534)
        code = (f"import glob, os\nprint('UID', os.getuid(), flush=True)\n"
                f"print('FOUND', [open(p).read() for p in glob.glob('/dev/shm/{token}-*') "
                "if os.access(p, os.R_OK)], flush=True)\n")
        result = box.run(code + GOOD, TESTS)
        assert result.all_passed, (result.status, result.error, result.output)
        assert f"UID {first}\n" in result.output, result.output  # a uid the planted files were left for
        assert "FOUND []" in result.output, result.output
    finally:
        for path in planted:
            if os.path.exists(path):
                os.unlink(path)


#: Sample N: adds a key to its uid's user keyring (keyctl, by system call number: no libkeyutils).
KEY_PUT = ("import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "nr = {'x86_64': 248, 'aarch64': 217}[platform.machine()]\n"
           "print('PUT', libc.syscall(nr, b'user', b'polyrl-key', b'ANSWER', 6, ctypes.c_long(-4)) > 0, flush=True)\n")
#: Sample N + 1 (the same uid): searches its user keyring for that key and reads it (possessed
#: through its session keyring, whatever an earlier clean-up unlinked).
KEY_GET = ("import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "nr = {'x86_64': 250, 'aarch64': 219}[platform.machine()]\n"
           "libc.syscall(nr, 8, ctypes.c_long(-4), ctypes.c_long(-5))\n"  # link @u into @us: it holds what @u holds
           "kid = libc.syscall(nr, 10, ctypes.c_long(-4), b'user', b'polyrl-key', 0)\n"
           "buf = ctypes.create_string_buffer(16)\n"
           "n = libc.syscall(nr, 11, ctypes.c_long(kid), buf, 16) if kid > 0 else 0\n"
           "print('FOUND', buf.raw[:max(n, 0)], flush=True)\n")


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK) or
                    __import__("platform").machine() not in ("x86_64", "aarch64"),
                    reason="needs root, an interpreter every uid can run, and a known keyctl number")
def test_a_key_a_sample_leaves_in_its_uids_keyring_is_gone_for_the_next_one():
    """The kernel keeps a keyring per uid whatever the namespaces: without the seccomp filter
    (the ``unshare`` and ``off`` levels, or no libseccomp) a key sample N added to its user
    keyring was there for sample N + 1 given the same uid. The uid's keyrings are now emptied at
    the sample's end (``leftovers.clear_keys``)."""
    from polyrl.sandbox import uids

    held = uids.busy()
    box = Sandbox(SandboxLimits(timeout_s=8), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    first = box.run(KEY_PUT + GOOD, TESTS)
    assert first.all_passed and "PUT True" in first.output, (first.status, first.error, first.output)
    second = box.run(KEY_GET + GOOD, TESTS)
    assert second.all_passed, (second.status, second.error, second.output)
    assert "FOUND b''" in second.output, second.output
    assert uids.busy() == held


#: Sample A: makes a file only its group may read (mode 0770) in the host's /tmp, then waits.
GROUP_WRITER = ("import os, time\nprint('IDS', os.getuid(), os.getgid(), os.getgroups(), flush=True)\n"
                "fd = os.open(PATH, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)\nos.write(fd, b'ANSWER')\n"
                "os.fchmod(fd, 0o770)\nos.close(fd)\ntime.sleep(2.5)\n")
#: Sample B (at the same time, another pooled uid): reads and writes A's file.
GROUP_READER = ("import os, time\nprint('IDS', os.getuid(), os.getgid(), os.getgroups(), flush=True)\n"
                "time.sleep(1.2)\n"
                "try:\n    print('READ', open(PATH).read(), flush=True)\nexcept OSError as e:\n"
                "    print('READ denied', e.errno, flush=True)\n"
                "try:\n    open(PATH, 'a').write('FORGED')\n    print('WROTE', flush=True)\nexcept OSError as e:\n"
                "    print('WRITE denied', e.errno, flush=True)\n")


@needs_root_and_system_python
def test_concurrent_pooled_samples_share_no_group():
    """Pooled samples had their own uids but all nobody's gid (65534): at the ``off`` and
    ``unshare`` levels, where the host's /tmp is shared, a file one sample made with group
    permissions (0770) was read and rewritten by another sample running at the same time (its
    answers, its state). Each pooled sample's gid is now its uid's number, with no supplementary
    groups."""
    box = Sandbox(SandboxLimits(timeout_s=10), python=SYSTEM_PYTHON, isolation="off", audit_hook=False)
    if getattr(box.launch, "uid_pool", None) is False:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    path = f"/tmp/polyrl-group-{os.getpid()}-{time.monotonic_ns()}"
    head = f"PATH = {path!r}\n"
    try:
        writer, reader = _together(box, head + GROUP_WRITER + GOOD, head + GROUP_READER + GOOD)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    for result in (writer, reader):
        assert result.all_passed, (result.status, result.error, result.output)
    ids = [next(line for line in r.output.splitlines() if line.startswith("IDS")).split(maxsplit=3)
           for r in (writer, reader)]
    for _, uid, gid, groups in ids:
        assert gid == uid and groups == "[]", ids  # its own group, no other
    assert ids[0][2] != ids[1][2], ids
    assert "READ denied" in reader.output and "WRITE denied" in reader.output, reader.output
    assert "ANSWER" not in reader.output


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the uid pool is a root trainer's")
def test_a_pooled_sample_under_bubblewrap_has_its_own_gid_and_no_other_group():
    box = Sandbox(SandboxLimits(timeout_s=8), isolation="auto")
    if not box.launch.uid_pool:
        pytest.skip(f"the uid pool is refused here: {box.report['user']}")
    code = "import os\nprint('IDS', os.getuid(), os.getgid(), os.getegid(), os.getgroups(), flush=True)\n" + GOOD
    result = box.run(code, TESTS)
    assert result.all_passed, (result.status, result.error, result.output)
    _, uid, gid, egid, groups = next(line for line in result.output.splitlines()
                                     if line.startswith("IDS")).split(maxsplit=4)
    assert gid == egid == uid and groups == "[]", result.output
    assert "own uid and gid" in box.report["user"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the keyring clean-up becomes another uid: root's")
def test_the_keyring_clean_up_child_holds_none_of_the_trainers_descriptors(tmp_path, monkeypatch):
    """``leftovers.clear_keys`` forks a child that becomes the sample's uid: it kept every
    descriptor of the trainer (its checkpoint, a tracker's key file, its pipes) while it ran as
    that uid. It now closes them before it changes its ids."""
    from polyrl.sandbox import leftovers

    secret = tmp_path / "tracker.key"
    secret.write_text("TRACKER-KEY")
    held = os.open(secret, os.O_RDONLY)
    seen = tmp_path / "seen"

    def record(*ids: int) -> None:  # runs in the child (fork keeps the patch), then stops it
        numbers = sorted(os.listdir("/proc/self/fd"), key=int)
        with open(seen, "w") as f:
            f.write(" ".join(numbers))
        raise OSError("stopped by the test")

    monkeypatch.setattr(leftovers, "has_keys", lambda uid: True)
    monkeypatch.setattr(leftovers.os, "setresuid", record)
    try:
        assert leftovers.clear_keys(2_100_999_999, 2_100_999_999) is False
    finally:
        os.close(held)
    numbers = [int(n) for n in seen.read_text().split()]
    assert max(numbers) <= 3, numbers  # stdin/stdout/stderr, and the listing's own descriptor
