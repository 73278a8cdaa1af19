"""A sample reads no name of the trainer's kernel keys in ``/proc/keys``.

The seccomp filter refuses ``keyctl``, so no sample reads a key's payload; but ``/proc/keys`` lists
every key the reader may view, by description and payload length, and a sample possesses the keys
of the session keyring it inherits from the trainer: a key named ``trainer-token-name`` added
there was listed in every sample under bubblewrap and at the ``unshare`` level, pool uid or root
(``user = "none"``, which also saw root's own keyrings; ``/proc/key-users`` listed every uid's key
counts). Now both files are /dev/null in the sample's own ``/proc``. Replayed from a trainer in a
session keyring of its own (a child process: pytest's own keyring is untouched), with the filter on
where libseccomp is here (the audit hook off: it does not guard reads)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

TRAINER = """
import ctypes, json, os, platform, sys
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, leftovers, new_root, runner

level = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
assert libc.syscall(leftovers.KEYCTL_NR[platform.machine()], 1, b"polyrl-trainer-session") > 0  # JOIN_SESSION_KEYRING
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", b"trainer-token-name", b"SECRET", 6,
                   ctypes.c_long(-3))  # add_key(..., KEY_SPEC_SESSION_KEYRING)
assert key > 0, ctypes.get_errno()
probe = ("def listed():\\n    out = {}\\n    for path in ('/proc/keys', '/proc/key-users'):\\n        try:\\n"
         "            out[path] = open(path).read()\\n        except OSError as exc:\\n"
         "            out[path] = exc.strerror\\n    return out\\n"
         "def lines():\\n    return sum(len(text.splitlines()) for text in listed().values() if text != 'Permission denied')\\n")
got = {}
users = ["auto", "none"] if os.geteuid() == 0 else ["auto"]
for user, view in [(u, "own root") for u in users] + ([(users[-1], "host view")] if level == "unshare" else []):
    if view == "host view":  # as where pivot_root is refused: the unshare level's read-only view of the host
        new_root.pivot_root_number = lambda: None
        runner._launches.clear()
        isolation._probes.clear()
    python = sys.executable if user == "none" or not os.path.exists("/usr/bin/python3") else "/usr/bin/python3"
    box = Sandbox(SandboxLimits(timeout_s=20), audit_hook=False, user=user, python=python,
                  isolation={"bwrap": "auto", "unshare": "weak"}[level])
    result = box.run(probe + "print('LISTED', listed())\\n", parse_tests("assert lines() == 0\\n"))
    got[f"{user}, {view}"] = {"level": box.level, "filesystem": box.report["filesystem"], "status": result.status,
                              "passed": result.passed, "output": result.output}
print(json.dumps(got))
"""


@pytest.mark.parametrize("level", ["bwrap", "unshare"])
def test_a_sample_lists_no_key_of_the_trainer(tmp_path, level):
    """Each user a sample may run as here (pool uid; root, ``user = "none"``, for a root trainer),
    and at ``unshare`` its read-only view of the host too (where ``pivot_root`` is refused): the
    trainer's key name was listed in ``/proc/keys``; now neither file shows a line."""
    import platform

    from polyrl.sandbox import leftovers

    if platform.machine() not in leftovers.KEYCTL_NR or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("keyctl's and add_key's numbers are known here for x86_64 and aarch64 only")
    if not os.path.exists("/proc/keys"):
        pytest.skip("this kernel has no /proc/keys")
    env = {**os.environ}
    if level == "unshare":  # bubblewrap off the PATH: the weak level's unshare
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("unshare", "setpriv", "choom", "mount", "sh"):
            if shutil.which(tool):
                (bin_dir / tool).symlink_to(shutil.which(tool))
        env["PATH"] = str(bin_dir)
    elif shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    script = Path(tmp_path) / "trainer.py"
    script.write_text(TRAINER)
    done = subprocess.run([sys.executable, str(script), level], capture_output=True, text=True, timeout=120,
                          env=env, cwd=str(tmp_path))
    if done.returncode != 0 and level == "unshare" and "unshare" in done.stderr:
        pytest.skip(f"unshare cannot make namespaces here: {done.stderr.strip().splitlines()[-1][:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    views = [got["filesystem"] for case, got in cases.items() if case.endswith("host view")]
    assert views == ([] if level == "bwrap" else [views[0]]) and all("host files read-only" in v for v in views), cases
    for user, got in cases.items():
        assert got["level"] == level and got["status"] == "ok", (user, got)
        assert "LISTED" in got["output"] and "trainer-token-name" not in got["output"], (user, got["output"])
        assert got["passed"] == [True], (user, got)  # both files read as nothing (or not at all)
