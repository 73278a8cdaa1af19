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

import pytest
from sandbox_attacks import SYSV_ATTACK

pytestmark = pytest.mark.faults

TRAINER = """
import ctypes, json, os, platform, sys
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, leftovers, seccomp

level, user = sys.argv[1], sys.argv[2]
number = leftovers.KEYCTL_NR[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# user "auto": the system's Python, which user nobody runs (this one may be under /root)
assert libc.syscall(number, 1, b"polyrl-trainer-session") > 0  # KEYCTL_JOIN_SESSION_KEYRING
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", b"trainer-token", b"SECRET-TOKEN", 12,
                   ctypes.c_long(-3))  # add_key(..., KEY_SPEC_SESSION_KEYRING)
assert key > 0, ctypes.get_errno()
if level == "bwrap":  # as without libseccomp: bubblewrap runs, the filter does not
    seccomp._cache.append((None, "off: no libseccomp bindings (test)"))
box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8), audit_hook=False, user=user,
              isolation={"bwrap": "auto", "unshare": "weak", "off": "off"}[level],
              python=sys.executable if user == "none" or not os.path.exists("/usr/bin/python3") else "/usr/bin/python3")
attack = ATTACK.replace("@KEY@", str(key)).replace("@NR@", str(number))
result = box.run(attack + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
print(json.dumps({"level": box.level, "seccomp": box.report["seccomp"], "status": result.status,
                  "passed": result.passed, "output": result.output}))
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


@pytest.mark.parametrize("level,user", CASES)
def test_sample_reads_no_key_of_the_trainers_session_keyring(tmp_path, level, user):
    """The trainer's session keyring holds a token: the sample read it (``KEYCTL_READ`` of the
    key's id; possession came with the keyring it inherited). Now a sample without the seccomp
    filter starts in a session keyring of its own, empty, and the token's read is refused."""
    import platform

    from polyrl.sandbox import leftovers

    if platform.machine() not in leftovers.KEYCTL_NR or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("keyctl's and add_key's numbers are known here for x86_64 and aarch64 only")
    env = {**os.environ}
    if level != "bwrap":
        env["PATH"] = _no_bwrap_path(tmp_path)
    elif shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.replace("ATTACK.replace", json.dumps(ATTACK) + ".replace"))
    done = subprocess.run([sys.executable, str(script), level, user], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(tmp_path))
    if done.returncode != 0 and "unshare" in done.stderr and level == "unshare":
        pytest.skip(f"unshare cannot make namespaces here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
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
    script = tmp_path / "trainer.py"
    script.write_text(SYSV)
    done = subprocess.run([sys.executable, str(script), SYSV_ATTACK], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    if done.returncode != 0 and "bubblewrap" in done.stderr:
        pytest.skip(f"bubblewrap does not work here: {done.stderr.strip().splitlines()[-1][:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["level"] == "bwrap" and got["status"] == "ok" and got["passed"] == [True], got
    if not got["wrapped"]:
        pytest.skip("no tmpfs wrapper here (util-linux unshare or mount missing): the limits are not set")
    assert "SHM_HELD_MB 0" in got["output"] and "SHMGET No space left on device" in got["output"], got["output"]
    assert "MSGGET -1 No space left on device" in got["output"], got["output"]
