"""A sample reads no name of the trainer's kernel keys in ``/proc/keys``, nor the host kernel's command line.

The seccomp filter refuses ``keyctl``, so no sample reads a key's payload; but ``/proc/keys`` lists
every key the reader may view, by description and payload length, and a sample possesses the keys
of the session keyring it inherits from the trainer: a key named ``trainer-token-name`` added
there was listed in every sample under bubblewrap and at the ``unshare`` level, pool uid or root
(``user = "none"``, which also saw root's own keyrings; ``/proc/key-users`` listed every uid's key
counts); and ``/proc/cmdline`` showed every sample the host's boot line (where a host boots from the
network, the credentials of its root: dracut's ``netroot=iscsi:user:password@...``). Now these files
are /dev/null in the sample's own ``/proc``. Replayed from a trainer in a
session keyring of its own (a child process: pytest's own keyring is untouched), with the filter on
where libseccomp is here (the audit hook off: it does not guard reads)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.faults

TRAINER = """
import ctypes, json, os, platform, sys, traceback
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, leftovers, new_root, runner

levels, no_bwrap_path = json.loads(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
assert libc.syscall(leftovers.KEYCTL_NR[platform.machine()], 1, b"polyrl-trainer-session") > 0  # JOIN_SESSION_KEYRING
key = libc.syscall(248 if platform.machine() == "x86_64" else 217, b"user", b"trainer-token-name", b"SECRET", 6,
                   ctypes.c_long(-3))  # add_key(..., KEY_SPEC_SESSION_KEYRING)
assert key > 0, ctypes.get_errno()
probe = ("def listed():\\n    out = {}\\n    for path in ('/proc/keys', '/proc/key-users', '/proc/cmdline'):\\n"
         "        try:\\n"
         "            out[path] = open(path).read()\\n        except OSError as exc:\\n"
         "            out[path] = exc.strerror\\n    return out\\n"
         "def lines():\\n    return sum(len(text.splitlines()) for text in listed().values() if text != 'Permission denied')\\n")
got = {level: {} for level in levels}
users = ["auto", "none"] if os.geteuid() == 0 else ["auto"]
for level in levels:  # bwrap first: then bubblewrap off the PATH, as at the weak level's unshare
    if level == "unshare":
        os.environ["PATH"] = no_bwrap_path
        runner._launches.clear()
        isolation._probes.clear()
    for user, view in [(u, "own root") for u in users] + ([(users[-1], "host view")] if level == "unshare" else []):
        if view == "host view":  # as where pivot_root is refused: the unshare level's read-only view of the host
            new_root.pivot_root_number = lambda: None
            runner._launches.clear()
            isolation._probes.clear()
        python = sys.executable if user == "none" or not os.path.exists("/usr/bin/python3") else "/usr/bin/python3"
        try:
            box = Sandbox(SandboxLimits(timeout_s=20), audit_hook=False, user=user, python=python,
                          isolation={"bwrap": "auto", "unshare": "weak"}[level])
            result = box.run(probe + "print('LISTED', listed())\\n", parse_tests("assert lines() == 0\\n"))
            got[level][f"{user}, {view}"] = {"level": box.level, "filesystem": box.report["filesystem"],
                                             "status": result.status, "passed": result.passed, "output": result.output}
        except Exception:
            got[level][f"{user}, {view}"] = {"error": traceback.format_exc()}
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory) -> subprocess.CompletedProcess:
    """One trainer for both levels (bubblewrap's where it is installed, then ``unshare`` with
    bubblewrap off its PATH): its results by level and case, so the levels share its start
    (the interpreter, polyrl's import, the keyring) and are still told apart."""
    folder = tmp_path_factory.mktemp("proc-keys")
    bin_dir = folder / "bin"  # bubblewrap off the PATH: the weak level's unshare
    bin_dir.mkdir()
    for tool in ("unshare", "setpriv", "choom", "mount", "sh"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    (folder / "trainer.py").write_text(TRAINER)
    levels = (["bwrap"] if shutil.which("bwrap") else []) + ["unshare"]
    return subprocess.run([sys.executable, str(folder / "trainer.py"), json.dumps(levels), str(bin_dir)],
                          capture_output=True, text=True, timeout=240, cwd=str(folder))


@pytest.mark.parametrize("level", ["bwrap", "unshare"])
def test_a_sample_lists_no_key_of_the_trainer(trainer_run, level):
    """Each user a sample may run as here (pool uid; root, ``user = "none"``, for a root trainer),
    and at ``unshare`` its read-only view of the host too (where ``pivot_root`` is refused): the
    trainer's key name was listed in ``/proc/keys``, and ``/proc/cmdline`` held the host's boot
    line; now none of the three files shows a line."""
    import platform

    from polyrl.sandbox import leftovers

    if platform.machine() not in leftovers.KEYCTL_NR or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("keyctl's and add_key's numbers are known here for x86_64 and aarch64 only")
    if not os.path.exists("/proc/keys"):
        pytest.skip("this kernel has no /proc/keys")
    if level == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    done = trainer_run
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])[level]
    errors = [got["error"] for got in cases.values() if "error" in got]
    if errors and level == "unshare" and "unshare" in errors[0]:
        pytest.skip(f"unshare cannot make namespaces here: {errors[0].strip().splitlines()[-1][:200]}")
    assert errors == [], errors
    views = [got["filesystem"] for case, got in cases.items() if case.endswith("host view")]
    assert views == ([] if level == "bwrap" else [views[0]]) and all("host files read-only" in v for v in views), cases
    for user, got in cases.items():
        assert got["level"] == level and got["status"] == "ok", (user, got)
        assert "LISTED" in got["output"] and "trainer-token-name" not in got["output"], (user, got["output"])
        assert got["passed"] == [True], (user, got)  # the files read as nothing (or not at all)
