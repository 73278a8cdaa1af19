"""What a sample without the seccomp filter (bubblewrap without libseccomp, the ``unshare`` and
``off`` levels) still cannot do.

It never reads the trainer's kernel keys (its session keyring: Kerberos tickets, ecryptfs
or cloud tokens a login or ``keyctl`` put there). A process possesses its session keyring's keys
and the sample inherited it, so without the seccomp filter (which refuses ``keyctl``) a sample
read them at every level, whatever its uid. Replayed with the audit hook OFF, from a trainer in a
session keyring of its own holding a secret (a child process: pytest's own keyring is untouched)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sandbox_attacks import SYSV_ATTACK

pytestmark = pytest.mark.faults

TRAINER = """
import ctypes, json, os, platform, sys, traceback
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, leftovers, seccomp

levels, users = json.loads(sys.argv[1]), json.loads(sys.argv[2])
number = leftovers.KEYCTL_NR[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# user "auto": the system's Python, which user nobody runs (this one may be under /root)
assert libc.syscall(number, 1, b"polyrl-trainer-session") > 0  # KEYCTL_JOIN_SESSION_KEYRING
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", b"trainer-token", b"SECRET-TOKEN", 12,
                   ctypes.c_long(-3))  # add_key(..., KEY_SPEC_SESSION_KEYRING)
assert key > 0, ctypes.get_errno()
if levels == ["bwrap"]:  # as without libseccomp: bubblewrap runs, the filter does not
    seccomp._cache.append((None, "off: no libseccomp bindings (test)"))
got = {}
for level, user in [(level, user) for level in levels for user in users[level]]:  # each case's result (or error)
    try:
        box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8), audit_hook=False, user=user,
                      isolation={"bwrap": "auto", "unshare": "weak", "off": "off"}[level],
                      python=sys.executable if user == "none" or not os.path.exists("/usr/bin/python3")
                      else "/usr/bin/python3")
        attack = ATTACK.replace("@KEY@", str(key)).replace("@NR@", str(number))
        result = box.run(attack + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
        got[f"{level} {user}"] = {"level": box.level, "seccomp": box.report["seccomp"], "status": result.status,
                                  "passed": result.passed, "output": result.output}
    except Exception:
        got[f"{level} {user}"] = {"error": traceback.format_exc()}
print(json.dumps(got))
"""
ATTACK = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(256)
for name, key in (("session", -3), ("token", @KEY@)):  # KEY_SPEC_SESSION_KEYRING, the secret's own id
    got = libc.syscall(@NR@, 11, ctypes.c_long(key), buf, 256)  # KEYCTL_READ
    print("READ", name, got, buf.raw[:max(got, 0)] if name == "token" else "", ctypes.get_errno())
"""


def _no_bwrap_path(tmp_path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("unshare", "setpriv", "choom", "mount", "sh"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


CASES = [("bwrap", "auto"), ("unshare", "auto"), ("off", "auto")] + (
    [("unshare", "none"), ("off", "none")] if os.geteuid() == 0 else [])


def _keyring_case_env(tmp_path: Path, level: str) -> dict[str, str]:
    """The trainer's environment for a keyring attack at ``level`` (bubblewrap off the PATH below
    it); skips where keyctl's numbers or bubblewrap are missing."""
    import platform

    from polyrl.sandbox import leftovers

    if platform.machine() not in leftovers.KEYCTL_NR or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("keyctl's and add_key's numbers are known here for x86_64 and aarch64 only")
    env = {**os.environ}
    if level != "bwrap":
        env["PATH"] = _no_bwrap_path(tmp_path)
    elif shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    return env


def _run_trainer(tmp_path: Path, source: str, *args: str) -> dict:
    """Run ``source`` as a trainer script with ``args``; its last stdout line (JSON). Skips where
    bubblewrap itself does not work here."""
    script = tmp_path / "trainer.py"
    script.write_text(source)
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    if done.returncode != 0 and "bubblewrap" in done.stderr:
        pytest.skip(f"bubblewrap does not work here: {done.stderr.strip().splitlines()[-1][:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


#: the levels the memfd trainers run, in one process: bubblewrap's where it is installed, and off
_FILTER_LEVELS = (["bwrap"] if shutil.which("bwrap") else []) + ["off"]


def _level_result(done: subprocess.CompletedProcess, level: str) -> dict:
    """``level``'s result from a shared trainer's last line; skips where bubblewrap itself does not
    work here (as ``_run_trainer``)."""
    if done.returncode != 0 and "bubblewrap" in done.stderr:
        pytest.skip(f"bubblewrap does not work here: {done.stderr.strip().splitlines()[-1][:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])[level]
    if "error" in got and "bubblewrap" in got["error"]:
        pytest.skip(f"bubblewrap does not work here: {got['error'].strip().splitlines()[-1][:200]}")
    assert "error" not in got, got
    return got


@pytest.fixture(scope="module")
def shared_trainer(tmp_path_factory) -> Iterator[Callable[..., subprocess.CompletedProcess]]:
    """Runs a trainer script once per key for the module: each trainer runs every user a level's
    cases name, one sandbox each, and prints their results by user, so the cases of a level share
    its start (the interpreter, polyrl's import, the keyring) and are still told apart."""
    runs: dict[tuple[str, ...], subprocess.CompletedProcess] = {}

    def run(key: tuple[str, ...], source: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        if key not in runs:
            folder = tmp_path_factory.mktemp("trainer")
            (folder / "trainer.py").write_text(source)
            runs[key] = subprocess.run([sys.executable, str(folder / "trainer.py"), *args], capture_output=True,
                                       text=True, timeout=240, env=env, cwd=str(folder))
        return runs[key]

    yield run


@pytest.mark.parametrize("level,user", CASES)
def test_sample_reads_no_key_of_the_trainers_session_keyring(tmp_path, shared_trainer, level, user):
    """The trainer's session keyring holds a token: the sample read it (``KEYCTL_READ`` of the
    key's id; possession came with the keyring it inherited). Now a sample without the seccomp
    filter starts in a session keyring of its own, empty, and the token's read is refused."""
    env = _keyring_case_env(tmp_path, level)
    levels = ["bwrap"] if level == "bwrap" else ["unshare", "off"]  # those of one PATH: one trainer
    users = {lv: [u for case_level, u in CASES if case_level == lv] for lv in levels}
    done = shared_trainer(("session keyring", *levels),
                          TRAINER.replace("ATTACK.replace", json.dumps(ATTACK) + ".replace"),
                          [json.dumps(levels), json.dumps(users)], env)
    if done.returncode != 0 and "unshare" in done.stderr and level == "unshare":
        pytest.skip(f"unshare cannot make namespaces here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])[f"{level} {user}"]
    if "error" in got and "unshare" in got["error"] and level == "unshare":
        pytest.skip(f"unshare cannot make namespaces here: {got['error'].strip().splitlines()[-1]}")
    assert "error" not in got, got
    assert got["level"] == level and got["status"] == "ok" and got["passed"] == [True], got
    assert "SECRET-TOKEN" not in got["output"], got["output"]
    assert "READ token -1" in got["output"], got["output"]


SYSV = """
import ctypes, json, sys
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, seccomp

seccomp._cache.append((None, "off: no libseccomp bindings (test)"))
box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128, disk_mb=8), audit_hook=False)
result = box.run(sys.argv[1] + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
print(json.dumps({"level": box.level, "wrapped": bool(box.launch.wrapper), "status": result.status,
                  "passed": result.passed, "output": result.output}))
"""
def test_bubblewrap_without_the_filter_holds_no_sysv_memory_past_memory_mb(tmp_path):
    """Bubblewrap without libseccomp (``isolation = "auto"`` runs it, with a warning): a sample
    held 384 MB of detached SysV shared memory with ``memory_mb = 128`` (RLIMIT_AS counts only
    what is mapped; the filter refuses ``shmget``). Now the wrapper that mounts the sample's tmpfs
    makes its IPC namespace with ``shmmni`` and ``msgmni`` 0: no segment (ENOSPC)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    got = _run_trainer(tmp_path, SYSV, SYSV_ATTACK)
    assert got["level"] == "bwrap" and got["status"] == "ok" and got["passed"] == [True], got
    if not got["wrapped"]:
        pytest.skip("no tmpfs wrapper here (util-linux unshare or mount missing): the limits are not set")
    assert "SHM_HELD_MB 0" in got["output"] and "SHMGET No space left on device" in got["output"], got["output"]
    assert "MSGGET -1 No space left on device" in got["output"], got["output"]


NESTED = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("NESTED", libc.unshare(0x10000000 | 0x40000000), ctypes.get_errno(), os.getuid())  # CLONE_NEWUSER | CLONE_NEWNET
"""
SYSTEM_PYTHON = "/usr/bin/python3"


#: Counts the inotify instances and fanotify groups it can make (200 at most) and prints them with
#: its namespace's TCP send buffer maximum.
NOTIFY_AND_TCP = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = []
for make in (lambda: libc.inotify_init1(0), lambda: libc.fanotify_init(0x200, 0)):  # FAN_REPORT_FID
    fds = []
    while len(fds) < 200 and (fd := make()) >= 0:
        fds.append(fd)
    made.append(len(fds))
    for fd in fds:
        os.close(fd)
print("MADE", made, open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("bwrap") is None
                    or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to become nobody, bubblewrap and an interpreter nobody can run")
def test_an_unprivileged_trainers_sample_takes_no_notify_groups_and_has_capped_tcp_buffers(monkeypatch):
    """A non-root trainer's sample is in bubblewrap's user namespace inside the tmpfs wrapper's,
    and the kernel counts inotify instances and fanotify groups up every level, in the host's
    against the trainer's uid: the sample made 128 of each (all the trainer's) before, so the
    trainer's own failed while it ran. The wrapper sets its namespace's limits to 0 and caps the
    TCP buffers of the network namespace it makes. The command built for that case, run as
    ``nobody``, without the filter."""
    import tempfile

    from polyrl.sandbox import isolation

    mount_dir = tempfile.mkdtemp(prefix="polyrl-test-mnt-")
    os.chown(mount_dir, 65534, 65534)
    try:
        monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
        monkeypatch.setattr(isolation.os, "getegid", lambda: 65534)
        wrapper = isolation.tmpfs_wrapper(8, mount_dir)
        prefix, _ = isolation.bwrap_prefix(SYSTEM_PYTHON, None, 8, mount_dir)
        monkeypatch.undo()
        cmd = isolation.drop_privileges((65534, 65534)) + wrapper + prefix + [SYSTEM_PYTHON, "-I", "-c", NOTIFY_AND_TCP]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        if done.returncode != 0 and "namespace" in done.stderr.lower():
            pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        assert f"MADE [0, 0] {128 * 1024}" in done.stdout, done.stdout
    finally:
        shutil.rmtree(mount_dir, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("bwrap") is None
                    or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to become nobody, bubblewrap and an interpreter nobody can run")
@pytest.mark.parametrize("wrapped", [False, True])
def test_an_unprivileged_trainers_sample_nests_no_user_namespace_without_the_filter(monkeypatch, wrapped):
    """A trainer that is not root gives its sample a user namespace of its own (bubblewrap's),
    and without libseccomp nothing refused it another inside: it made one (with a network
    namespace), where it held every capability. Now bubblewrap's ``--disable-userns`` sets its
    namespace's ``user.max_user_namespaces``: ENOSPC. The command built for that case (no
    ``--seccomp``), run as ``nobody``, with and without the wrapper that mounts the capped tmpfs."""
    import tempfile

    from polyrl.sandbox import isolation

    mount_dir = tempfile.mkdtemp(prefix="polyrl-test-mnt-")
    os.chown(mount_dir, 65534, 65534)
    try:
        monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
        monkeypatch.setattr(isolation.os, "getegid", lambda: 65534)
        wrapper = isolation.tmpfs_wrapper(8, mount_dir) if wrapped else []
        prefix, drop = isolation.bwrap_prefix(SYSTEM_PYTHON, None, 8, mount_dir if wrapped else None)
        monkeypatch.undo()
        assert "--unshare-user" in prefix and "--seccomp" not in prefix and drop == []
        cmd = isolation.drop_privileges((65534, 65534)) + wrapper + prefix + [SYSTEM_PYTHON, "-I", "-c", NESTED]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        if done.returncode != 0 and "namespace" in done.stderr.lower():
            pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        assert "NESTED -1 28 65534" in done.stdout, done.stdout  # ENOSPC
    finally:
        shutil.rmtree(mount_dir, ignore_errors=True)


ROOT_TRAINER = """
import ctypes, json, os, platform, sys, traceback
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, leftovers, seccomp

seccomp._cache.append((None, "off: no libseccomp bindings (test)"))  # bubblewrap runs, the filter does not
number = leftovers.KEYCTL_NR[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
description = f"polyrl-test-{os.getpid()}"
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", description.encode(),
                   b"SECRET-USER-KEY", 15, ctypes.c_long(-4))  # add_key(..., KEY_SPEC_USER_KEYRING): root's @u
assert key > 0, ctypes.get_errno()
levels, users = json.loads(sys.argv[3]), json.loads(sys.argv[1])
try:
    got = {}
    for level, user in [(level, user) for level in levels for user in users]:  # each case's result (or error)
        if level == "view" and user == users[0]:  # as where pivot_root is refused (a root on the initramfs):
            from polyrl.sandbox import isolation, new_root, runner  # the unshare level's host view, from here on

            new_root.pivot_root_number = lambda: None
            runner._launches.clear()
            isolation._probes.clear()
        try:
            box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8), audit_hook=False, user=user,
                          isolation={"bwrap": "auto", "unshare": "weak", "view": "weak", "off": "off"}[level],
                          python=sys.executable if user == "none" else "/usr/bin/python3")
            attack = sys.argv[2].replace("@KEY@", str(key)).replace("@NR@", str(number)).replace("@DESC@", description)
            result = box.run(attack + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
            got[f"{level} {user}"] = {"level": box.level, "isolation": box.report["isolation"] + box.report["filesystem"],
                                      "status": result.status, "passed": result.passed, "output": result.output}
        except Exception:
            got[f"{level} {user}"] = {"error": traceback.format_exc()}
    print(json.dumps(got))
finally:
    libc.syscall(number, 9, ctypes.c_long(key), ctypes.c_long(-4))  # KEYCTL_UNLINK from root's @u
"""
ROOT_ATTACK = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(256)
found = libc.syscall(@NR@, 10, ctypes.c_long(-4), b"user", b"@DESC@", ctypes.c_long(-3))  # KEYCTL_SEARCH of @u,
print("FOUND", found, ctypes.get_errno())  # linking what it finds into its session keyring: then it possesses it
got = libc.syscall(@NR@, 11, ctypes.c_long(@KEY@), buf, 256)  # KEYCTL_READ of root's key, by its id
print("READ", got, buf.raw[:max(got, 0)], ctypes.get_errno())
print("NESTED", libc.unshare(0x10000000 | 0x40000000), ctypes.get_errno())  # CLONE_NEWUSER | CLONE_NEWNET
"""


ROOT_USERS = ["auto", "none"]


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="a root trainer, and an interpreter nobody can run")
@pytest.mark.parametrize("level", ["bwrap", "unshare", "view", "off"])
@pytest.mark.parametrize("user", ROOT_USERS)
def test_a_root_trainers_sample_nests_no_user_namespace_and_reads_no_user_key_without_the_filter(tmp_path, user,
                                                                                                 level, shared_trainer):
    """Without libseccomp, as root: the sample was in the host's user namespace, where it made one
    of its own (with a network namespace) and held every capability there (except chrooted, at
    the ``unshare`` level's root of its own), and with ``user = "none"`` (uid 0) it found root's
    user keyring ``@u`` by a search, linked the key into its own session keyring and read it.
    ``@u`` is per user namespace: now the sample runs in a user namespace of its own (every uid
    mapped to itself) whose ``user.max_user_namespaces`` is 0: ENOSPC, and the search finds
    nothing. ``view``: the ``unshare`` level where ``pivot_root`` is refused."""
    env = _keyring_case_env(tmp_path, level)
    levels = ["bwrap"] if level == "bwrap" else ["off", "unshare", "view"]  # those of one PATH: one trainer
    done = shared_trainer(("root", *levels), ROOT_TRAINER, [json.dumps(ROOT_USERS), ROOT_ATTACK, json.dumps(levels)], env)
    if done.returncode != 0 and ("bubblewrap" in done.stderr or "unshare" in done.stderr):
        pytest.skip(f"the level does not work here: {done.stderr.strip().splitlines()[-1][:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])[f"{level} {user}"]
    if "error" in got and ("bubblewrap" in got["error"] or "unshare" in got["error"]):
        pytest.skip(f"the level does not work here: {got['error'].strip().splitlines()[-1][:200]}")
    assert "error" not in got, got
    assert got["level"] == {"view": "unshare"}.get(level, level), got
    assert got["status"] == "ok" and got["passed"] == [True], got
    if "one of its own may nest" in got["isolation"] or "a user namespace may nest" in got["isolation"]:
        pytest.skip(f"no user namespace of the sample's own here: {got['isolation']}")
    # at off the small filter refuses unshare itself (EPERM) before the namespace's limit would (ENOSPC)
    assert "NESTED -1 28" in got["output"] or level in ("unshare", "off") and "NESTED -1 1" in got["output"], \
        got["output"]
    assert "SECRET-USER-KEY" not in got["output"] and "READ -1" in got["output"], got["output"]


NOBODY_TRAINER = """
import ctypes, json, os, platform, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
number = {"x86_64": 250, "aarch64": 219}[platform.machine()]
description = f"polyrl-test-{os.getpid()}"
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", description.encode(), b"SECRET-USER-KEY",
                   15, ctypes.c_long(-4))  # add_key(..., KEY_SPEC_USER_KEYRING): the trainer's uid's @u
assert key > 0, ctypes.get_errno()
try:
    attack = sys.argv[2].replace("@KEY@", str(key)).replace("@NR@", str(number)).replace("@DESC@", description)
    done = subprocess.run(json.loads(sys.argv[1]) + [attack], capture_output=True, text=True, timeout=60)
    print(done.stdout, done.stderr)
finally:
    libc.syscall(number, 9, ctypes.c_long(key), ctypes.c_long(-4))  # KEYCTL_UNLINK
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to become nobody, and an interpreter nobody can run")
def test_a_non_root_trainers_sample_at_off_reads_no_user_key_and_nests_no_user_namespace():
    """A non-root trainer's sample at the ``off`` level is the trainer's own uid: it found the
    uid's user keyring ``@u`` by a search (linking the key into a session keyring of its own, so
    it possessed it) and read a token the trainer kept there, read the trainer's environment
    (``/proc/<pid>/environ``), and made a user namespace with every capability. Now it starts in
    a user namespace of its own (``userns_wrapper``: its uid mapped to itself), whose ``@u`` is
    its own, where no other nests, and from which the kernel refuses it the trainer's ``/proc``
    entries (a process of another user namespace, with no capability over the trainer's). The
    command the ``off`` level builds for a non-root trainer, run by a trainer that is ``nobody``."""
    import platform

    from polyrl.sandbox import isolation

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("keyctl's and add_key's numbers are known here for x86_64 and aarch64 only")
    attack = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
              "libc.syscall(@NR@, 1, None)\n"  # KEYCTL_JOIN_SESSION_KEYRING: a new one, its own (as the server does)
              "import os\ntry:\n    print('ENVIRON', open(f'/proc/{os.getppid()}/environ').read())\n"
              "except OSError as exc:\n    print('ENVIRON', exc.strerror)\n"
              + ROOT_ATTACK.split("libc.syscall.restype = ctypes.c_long\n", 1)[1])
    sample = isolation.userns_wrapper(SYSTEM_PYTHON) + [SYSTEM_PYTHON, "-I", "-c"]
    cmd = isolation.drop_privileges((65534, 65534)) + [SYSTEM_PYTHON, "-I", "-c", NOBODY_TRAINER, json.dumps(sample),
                                                       attack]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/",
                          env={"PATH": "/usr/bin:/bin", "TRAINER_TOKEN": "SECRET-ENVIRONMENT"})
    assert done.returncode == 0, done.stderr
    if "user namespace:" in done.stdout:
        pytest.skip(f"unprivileged user namespaces are off here: {done.stdout.strip()[-200:]}")
    assert "SECRET-USER-KEY" not in done.stdout and "READ -1" in done.stdout, done.stdout
    assert "NESTED -1 28" in done.stdout, done.stdout
    assert "SECRET-ENVIRONMENT" not in done.stdout and "ENVIRON Permission denied" in done.stdout, done.stdout


MEMFD_ATTACK = """
import os
held, fds = 0, []
for _ in range(8):  # each memfd written to file_size_mb: pages no rlimit counts (RLIMIT_AS: mapped memory only)
    try:
        fd = os.memfd_create("hold")
    except OSError as exc:
        print("MEMFD", exc.errno)
        break
    block = b"x" * (1 << 20)
    for _ in range(32):
        os.write(fd, block)
    fds.append(fd)
    held += 32
print("MEMFD_HELD_MB", held)
"""


@pytest.mark.parametrize("level", ["bwrap", "off"])
def test_a_sample_without_the_filter_holds_no_memfd_memory(shared_trainer, level):
    """Without libseccomp (bubblewrap runs without the filter) and at the ``off`` level a sample
    held 256 MB in memfds with ``memory_mb = 128`` (up to ``max_open_files`` x ``file_size_mb``:
    written pages RLIMIT_AS does not count, on the kernel's internal tmpfs no size option reaches).
    Now the server loads a filter of their own first (``memfd_filter``): EPERM."""
    from polyrl.sandbox import memfd_filter

    if memfd_filter.program() is None:
        pytest.skip("memfd_create's number is known here for x86_64 and aarch64 only")
    if level == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    got = _level_result(shared_trainer(("memfd",), MEMFD, [json.dumps(_FILTER_LEVELS), MEMFD_ATTACK], dict(os.environ)),
                        level)
    assert got["level"] == level and got["status"] == "ok" and got["passed"] == [True], got
    assert "MEMFD 1\n" in got["output"] and "MEMFD_HELD_MB 0" in got["output"], got["output"]
    assert "memfd_create, memfd_secret, socketpair, pidfd_send_signal and io_setup refused" in got["seccomp"], got


MEMFD = """
import json, sys, traceback
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, seccomp

seccomp._cache.append((None, "off: no libseccomp bindings (test)"))
got = {}
for level in json.loads(sys.argv[1]):  # each level's result (or error) by its name
    try:
        box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128, disk_mb=32, file_size_mb=32), audit_hook=False,
                      isolation="auto" if level == "bwrap" else "off", user="none")
        result = box.run(sys.argv[2] + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
        got[level] = {"level": box.level, "seccomp": box.report["seccomp"], "status": result.status,
                      "passed": result.passed, "output": result.output}
    except Exception:
        got[level] = {"error": traceback.format_exc()}
print(json.dumps(got))
"""


MEMFD_REFUSED = """
import json, struct, sys, traceback
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, runner, seccomp

seccomp._cache.append((None, "off: no libseccomp bindings (test)"))
# a program the kernel refuses as one without seccomp filters does (prctl: EINVAL): an unknown opcode
runner._MEMFD_HEX = runner._OFF_HEX = (struct.pack("=HBBI", 0xFFFF, 0, 0, 0)
                                       + struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)).hex()
code = "import os\\nos.memfd_create('x')\\nprint('MEMFD made')\\ndef add(a, b):\\n    return a + b\\n"
got = {}
for level in json.loads(sys.argv[1]):  # each level's result (or error) by its name
    try:
        box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128, disk_mb=8), audit_hook=False,
                      isolation="auto" if level == "bwrap" else "off", user="none")
        result = box.run(code, parse_tests("assert add(1, 2) == 3\\n"))
        got[level] = {"level": box.level, "seccomp": box.report["seccomp"], "status": result.status,
                      "passed": result.passed, "output": result.output}
    except Exception:
        got[level] = {"error": traceback.format_exc()}
print(json.dumps(got))
"""


@pytest.mark.parametrize("level", ["bwrap", "off"])
def test_where_the_kernel_refuses_the_memfd_filter_the_report_says_it_is_off(shared_trainer, level):
    """The server runs a sample without the memfd filter where the kernel refuses it (EINVAL: a
    kernel without seccomp filters), and the report still said memfd_create was refused. Now the
    sandbox asks the kernel once, with the server's own loader, and the report says what happened
    (the refusal stood in for by a program the kernel rejects with EINVAL as such a kernel does)."""
    if level == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    got = _level_result(shared_trainer(("memfd refused",), MEMFD_REFUSED, [json.dumps(_FILTER_LEVELS)],
                                       dict(os.environ)), level)
    assert got["level"] == level and got["status"] == "ok" and got["passed"] == [True], got
    assert "MEMFD made" in got["output"], got["output"]  # the sample ran without the filter
    assert "refused all the same" not in got["seccomp"], got["seccomp"]
    assert "memfd filter OFF (the kernel refused it: prctl(PR_SET_SECCOMP) answered EINVAL" in got["seccomp"], got


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a root trainer's bubblewrap level")
def test_where_the_kernel_refuses_the_samples_user_namespace_bubblewrap_runs_and_says_so(monkeypatch):
    """A container whose /proc is partly masked refuses bubblewrap's /proc in a user namespace of
    the sample's own: there the level runs as before, in the host's user namespace, and the report
    says a namespace may nest (the refusal stood in for by a wrapper that fails as the real one does)."""
    from polyrl.rewards.code import parse_tests
    from polyrl.sandbox import Sandbox, SandboxLimits, isolation, runner

    refused = ["sh", "-c", "echo 'polyrl-sandbox user namespace: Operation not permitted' >&2; exit 126", "sh"]
    monkeypatch.setattr(isolation, "userns_wrapper", lambda python: refused)
    monkeypatch.setattr(runner, "_launches", {})
    box = Sandbox(SandboxLimits(timeout_s=20), audit_hook=False)
    if box.level != "bwrap":
        pytest.skip(f"bubblewrap does not work here: {box.report['isolation']}")
    assert box.launch.userns == () and box.launch.uid_pool, box.report
    assert "the host's user namespace (one of its own may nest without the filter: polyrl-sandbox user " \
           "namespace: Operation not permitted)" in box.report["isolation"], box.report
    result = box.run("def add(a, b):\n    return a + b\n", parse_tests("assert add(1, 2) == 3\n"))
    assert result.status == "ok" and result.passed == [True], result


def _loading_the_filter() -> str:
    """Python that loads the filter in ``sys.argv[1]`` with the server's own ``_memfd_filter`` (its
    source, read from server.py), for a process of its own."""
    import ast

    from polyrl.sandbox import runner

    source = (Path(runner.__file__).parent / "server.py").read_text()
    loader = next(node for node in ast.parse(source).body
                  if isinstance(node, ast.FunctionDef) and node.name == "_memfd_filter")
    return "import ctypes, os, sys\n" + str(ast.get_source_segment(source, loader)) + "\n_memfd_filter(sys.argv[1])\n"


def test_the_memfd_filter_refuses_memfd_and_other_abis_and_nothing_else(tmp_path):
    """``memfd_filter``'s program, loaded in a process of its own by the server's own loader:
    memfd_create, socketpair, pidfd_send_signal (to its own parent) and openat for writing relative
    to a folder's descriptor fail with EPERM, so does an x32 call (on x86_64), and ordinary calls (a
    unix socket, a pipe, a plain open for writing, reading relative to a folder's descriptor) still work."""
    import platform

    from polyrl.sandbox import memfd_filter

    program = memfd_filter.program()
    if program is None:
        pytest.skip("memfd_create's number is known here for x86_64 and aarch64 only")
    code = (_loading_the_filter() +
            "try:\n    os.memfd_create('x')\n    print('MEMFD made')\nexcept OSError as e:\n    print('MEMFD', e.errno)\n"
            "import _socket\ntry:\n    _socket.socketpair()\n    print('PAIR made')\nexcept OSError as e:\n    print('PAIR', e.errno)\n"
            "_socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM).close()\nos.close(os.pipe()[0])\n"
            "import signal\ntry:\n    signal.pidfd_send_signal(os.pidfd_open(os.getppid()), 0)\n    print('SIGNAL sent')\n"
            "except OSError as e:\n    print('SIGNAL', e.errno)\n"
            "here = os.open('.', os.O_RDONLY | os.O_DIRECTORY)\n"
            "for flags in (os.O_WRONLY | os.O_CREAT, os.O_RDWR, os.O_RDONLY | os.O_TRUNC):\n"
            "    try:\n        os.close(os.open('w.txt', flags, dir_fd=here))\n        print('AT_WRITE done')\n"
            "    except OSError as e:\n        print('AT_WRITE', e.errno)\n"
            "os.close(os.open('w.txt', os.O_WRONLY | os.O_CREAT))\n"
            "print('AT_READ', len(os.read(os.open('w.txt', os.O_RDONLY, dir_fd=here), 9)))\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            f"print('X32', libc.syscall({0x40000000 | 319}), ctypes.get_errno())\n"
            "ctx = ctypes.c_ulong(0)\n"
            f"print('AIO', libc.syscall({206 if platform.machine() == 'x86_64' else 0}, 1, ctypes.byref(ctx)), "
            "ctypes.get_errno())\n"
            "print('PID', os.getpid() > 0, open(os.devnull).read() == '')\n"
            "os.rename('w.txt', 'v.txt')\nos.chdir('.')\nprint('RENAMED')\n")  # refused at off only
    done = subprocess.run([sys.executable, "-I", "-c", code, program.hex()], capture_output=True, text=True, timeout=60,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MEMFD 1" in done.stdout and "PAIR 1" in done.stdout and "SIGNAL 1" in done.stdout, done.stdout
    assert done.stdout.count("AT_WRITE 1") == 3 and "AT_READ 0" in done.stdout, done.stdout
    assert "PID True True" in done.stdout and "RENAMED" in done.stdout, done.stdout
    assert "AIO -1 1" in done.stdout, done.stdout  # io_setup: fs.aio-max-nr is the host's
    if platform.machine() == "x86_64":
        assert "X32 -1 1" in done.stdout, done.stdout


def test_the_off_filter_lets_renames_and_chdir_through_from_the_working_folder_only(tmp_path):
    """The ``off`` level's small filter with ``renames`` (the audit hook on, judging their paths):
    ``rename``/``os.replace`` and ``chdir`` work (a natural solution's "write a temporary file,
    replace it into place" failed with EPERM at ``off`` only); ``renameat`` from or to a folder's
    descriptor (a path the hook cannot judge), ``fchdir``, ``link`` and ``symlink`` still fail
    with EPERM. Without ``renames`` the filter refuses renames and chdir whole, as before. Loaded by
    the server's own loader in a process of its own."""

    from polyrl.sandbox import memfd_filter

    hooked, whole = memfd_filter.program(paths=True, renames=True), memfd_filter.program(paths=True)
    if hooked is None or whole is None:
        pytest.skip("the small filter's numbers are known here for x86_64 and aarch64 only")
    code = (_loading_the_filter() +
            "os.mkdir('d')\nopen('w.txt', 'w').close()\nhere = os.open('.', os.O_RDONLY | os.O_DIRECTORY)\n"
            "def tried(name, act):\n    try:\n        act()\n        print(name, 'done')\n"
            "    except OSError as e:\n        print(name, e.errno)\n"
            "tried('RENAME', lambda: os.rename('w.txt', 'v.txt'))\n"
            "tried('REPLACE', lambda: os.replace('v.txt', 'd/v.txt'))\n"
            "tried('RENAMEAT', lambda: os.rename('d/v.txt', 'u.txt', src_dir_fd=here))\n"
            "tried('RENAMEAT_TO', lambda: os.rename('d/v.txt', 'u.txt', dst_dir_fd=here))\n"
            "tried('CHDIR', lambda: os.chdir('d'))\ntried('FCHDIR', lambda: os.chdir(here))\n"
            "tried('LINK', lambda: os.link('v.txt', 'l.txt'))\ntried('SYMLINK', lambda: os.symlink('v.txt', 's'))\n")
    got = {}
    for name, program in (("hooked", hooked), ("whole", whole)):
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run([sys.executable, "-I", "-c", code, program.hex()], capture_output=True, text=True,
                              timeout=60, cwd=str(folder))
        assert done.returncode == 0, done.stderr[-2000:]
        got[name] = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert got["hooked"] == {"RENAME": "done", "REPLACE": "done", "RENAMEAT": "1", "RENAMEAT_TO": "1", "CHDIR": "done",
                             "FCHDIR": "1", "LINK": "1", "SYMLINK": "1"}, got
    assert set(got["whole"].values()) == {"1"}, got


CAPABILITIES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("CAPEFF", [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0])
made = libc.mount(b"polyrl-attack", b"/tmp", b"tmpfs", 0, None)  # in its mount namespace (--mount-proc)
print("MOUNT", made, ctypes.get_errno(), os.getuid())
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None
                    or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root to become nobody, util-linux and an interpreter nobody can run")
@pytest.mark.parametrize("setpriv", [True, False])
def test_an_unprivileged_trainers_sample_has_no_capabilities_without_the_host_view(monkeypatch, setpriv):
    """``isolation = "weak"`` without bubblewrap, where the kernel refuses the ``unshare`` level's
    mounts (no root of its own, no read-only view): a non-root trainer's sample was root of its
    own user namespace (``--map-root-user``) with every capability there (CapEff
    000001ffffffffff): it mounted a tmpfs, and could configure its network namespace. Now it
    execs without them (setpriv; without setpriv it is the trainer's uid there). The launch chosen
    for that case, run as ``nobody``."""
    from polyrl.sandbox import host_view, isolation

    monkeypatch.setattr(isolation.os, "geteuid", lambda: 65534)
    monkeypatch.setattr(isolation.os, "getegid", lambda: 65534)
    monkeypatch.setattr(isolation, "_bwrap_launch", lambda *a, **k: (None, "test: no bubblewrap", {}))
    monkeypatch.setattr(isolation, "_host_view", lambda prefix, *a, **k: (prefix, "", [], "test: mounts refused"))
    if not setpriv:
        monkeypatch.setattr(host_view, "namespace_drop", lambda: [])
    launch = isolation._choose("weak", "auto", SYSTEM_PYTHON, 8)
    monkeypatch.undo()
    assert launch.level == "unshare" and not launch.private_tmp, launch
    cmd = isolation.drop_privileges((65534, 65534)) + launch.argv(["-I", "-c", CAPABILITIES], None)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
    if done.returncode != 0 and "namespace" in done.stderr.lower():
        pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    assert "CAPEFF 0000000000000000" in done.stdout, done.stdout
    assert "MOUNT -1 1 " in done.stdout, done.stdout  # EPERM
    assert "(no capabilities in its user namespace" in launch.report["isolation"], launch.report
    assert ("--map-current-user" in launch.prefix) is not setpriv, launch.prefix


FILTER_REFUSED = """
import json, struct
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, seccomp

# a program the kernel refuses as one without seccomp filters does (prctl: EINVAL): an unknown opcode
seccomp._cache.append((struct.pack("=HBBI", 0xFFFF, 0, 0, 0) + struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000), "on (test)"))
isolation._bwrap_launch = lambda *a, **k: (None, "test: no bubblewrap", {})
box = Sandbox(SandboxLimits(timeout_s=20, disk_mb=8), isolation="weak", python="/usr/bin/python3")
print(json.dumps({"level": box.level, "seccomp": box.report["seccomp"]}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="a root trainer's unshare level, with an interpreter nobody can run")
def test_where_the_kernel_refuses_the_filter_the_unshare_report_says_off_and_why(tmp_path):
    """At the ``unshare`` level the setup program loads the seccomp filter last; where the kernel
    refuses it (EINVAL without seccomp filters) the setup fails, the level runs without it, and the
    report said only "no setup program ran". Now it says the kernel's answer too."""
    script = tmp_path / "trainer.py"
    script.write_text(FILTER_REFUSED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["level"] == "unshare", got
    assert got["seccomp"].startswith("off: no setup program ran (") and "seccomp filter: Invalid argument" in \
        got["seccomp"], got


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a root trainer's bubblewrap level")
def test_a_root_sample_whose_threads_nothing_caps_is_reported_and_warned_of(monkeypatch):
    """Without the filter a root sample (``user = "none"``) could set its real uid back to 0, so it
    keeps real uid 0, which RLIMIT_NPROC never binds: only ``memory_mb`` bounds its threads. The
    report and a warning say so, never silence (libseccomp's absence stood in for by a filter
    that is not built)."""
    from structlog.testing import capture_logs

    from polyrl.sandbox import Sandbox, SandboxLimits, runner, seccomp

    monkeypatch.setattr(seccomp, "compiled_filter", lambda: (None, "off: test: no libseccomp"))
    monkeypatch.setattr(runner, "_launches", {})
    with capture_logs() as logs:
        box = Sandbox(SandboxLimits(timeout_s=20), user="none")
    if box.level != "bwrap":
        pytest.skip(f"bubblewrap does not work here: {box.report['isolation']}")
    assert not box.launch.uid_pool and "(not enforced: root)" in box.report["rlimits"], box.report
    assert "max_processes does not bind it (real uid 0: its threads are bounded by memory_mb only; no seccomp " \
           "filter" in box.report["user"], box.report
    assert any("real uid 0" in entry["event"] and entry["log_level"] == "warning" for entry in logs), logs


REACH_AROUND = """
import os, signal
def signal_trainer(pid):
    out = []
    for send in (lambda: os.kill(pid, 0), lambda: signal.pidfd_send_signal(os.pidfd_open(pid), 0)):
        try:
            send()
            out.append("sent")
        except PermissionError:
            out.append("refused")
    return out
def write_at(folder):
    at = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    out = []
    for name, write in (("os.open", lambda: os.close(os.open("planted", os.O_WRONLY | os.O_CREAT, dir_fd=at))),
                        ("opener", lambda: open("planted", "w", opener=lambda p, f: os.open(p, f, dir_fd=at)).close()),
                        ("plain", lambda: open(os.path.join(folder, "planted"), "w").close())):
        try:
            write()
            out.append("wrote")
        except PermissionError:
            out.append("refused")
    return out
"""


def test_a_sample_at_off_cannot_reach_around_the_audit_hook(tmp_path):
    """Two calls the audit hook never judged, at ``off`` (no PID or mount namespace), as a sample of
    the trainer's uid (``user = "none"`` as root, or a non-root trainer's), with the hook on:

    - ``signal.pidfd_send_signal`` raises no audit event (``os.kill`` of another process is refused):
      the sample found the trainer's pid and could SIGSTOP or SIGKILL it (signal 0 here, to this
      test's own process as the trainer);
    - the hook's ``open`` event carries no ``dir_fd``: ``os.open("planted", O_WRONLY | O_CREAT,
      dir_fd=d)`` was judged against the sample's folder and wrote in a folder of the trainer's.

    Now the server's small filter refuses both (``memfd_filter``). Through the reward path."""
    from test_sandbox_verdict import score

    from polyrl.sandbox import memfd_filter

    if memfd_filter.program() is None:
        pytest.skip("the small filter's numbers are known for x86_64 and aarch64 only")
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open in this Python")
    folder = tmp_path / "trainer-files"
    folder.mkdir()
    rows = [{"prompt": "p", "tests": f"assert signal_trainer({os.getpid()}) == ['refused', 'refused']\n"
                                     f"assert write_at({str(folder)!r}) == ['refused'] * 3\n"}]
    assert list(score([REACH_AROUND], rows=rows, isolation="off", audit_hook=True).total) == [1.0]
    assert list(folder.iterdir()) == []
