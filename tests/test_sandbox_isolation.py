"""Choosing the isolation level: refuse (default) or, when asked ("weak"), degrade with a warning when the OS
features are missing (``test_sandbox_fail_closed.py`` has the refusals)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from polyrl.errors import RewardError
from polyrl.rewards.code import _options, parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, runner

TESTS = parse_tests("assert add(1, 2) == 3\nassert add(1, 1) == 3\n")
HALF = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """A PATH where bwrap is missing but the other tools (unshare, setpriv) are not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("unshare", "setpriv"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(runner, "_launches", {})


@pytest.mark.faults
def test_require_refuses_without_bubblewrap(no_bwrap):
    with pytest.raises(RewardError, match=r"isolation = \"require\" needs bubblewrap.*bwrap not found.*Fix: install "
                                          r"bubblewrap"):
        Sandbox(SandboxLimits(timeout_s=3), isolation="require")


def _nobody_can_run(python: str) -> bool:
    """Whether user nobody starts the same ``python`` (False for a root trainer's pyenv/conda under
    /root: its venv's interpreter then runs another Python, or none), as the sandbox's probe asks."""
    from polyrl.sandbox import isolation

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return True
    ask = [python, "-I", "-c", isolation._IDENTITY]
    import subprocess

    expected = subprocess.run(ask, capture_output=True, text=True).stdout.strip()
    return isolation.probe(isolation.drop_privileges((65534, 65534)) + ask, expected) is None


@pytest.mark.faults
def test_weak_as_root_refuses_to_run_samples_as_root_when_they_cannot_be_dropped(no_bwrap, tmp_path, monkeypatch):
    """Without bubblewrap, a root trainer whose interpreter user nobody cannot run (pyenv, conda or a
    venv under /root) ran samples as root with every capability, saying so only in an info line:
    the sample read the trainer's /proc/<pid>/environ and /etc/shadow. "weak" (the old "auto") refuses,
    naming the fixes; user = "none" is the explicit way, and then the sample keeps no capability and
    sees only its own processes in /proc. With a root of its own at the ``unshare`` level
    (``new_root``: the interpreter's folders bound with 0755 folders above them, as bubblewrap
    does) nobody runs it, so the sample is an unprivileged pool uid; the refusal is where that
    root cannot be built (here: as without ``pivot_root``) and the host's own folders apply."""
    import sys

    from polyrl.sandbox import isolation as iso
    from polyrl.sandbox import new_root, runner

    if os.geteuid() != 0 or _nobody_can_run(sys.executable):
        pytest.skip("needs a root trainer whose interpreter user nobody cannot run (as on this project's VMs)")
    box = Sandbox(SandboxLimits(timeout_s=5), isolation="weak")
    assert box.level == "unshare" and box.launch.ids is not None and box.launch.ids[0] > 0, box.report
    result = box.run("import os\nUID = os.getuid()\n", parse_tests("assert UID != 0\n"))
    assert (result.status, result.passed) == ("ok", [True]), result
    monkeypatch.setattr(new_root, "pivot_root_number", lambda: None)
    monkeypatch.setattr(runner, "_launches", {})
    monkeypatch.setattr(iso, "_probes", {})
    with pytest.raises(RewardError, match=r"samples would run as root with every capability.*Fix: install "
                                          r"bubblewrap.*set user = \"none\""):
        Sandbox(SandboxLimits(timeout_s=5), isolation="weak")
    probe = ("import os\nCAPS = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
             "PIDS = [int(d) for d in os.listdir('/proc') if d.isdigit()]\n")
    tests = "assert int(CAPS, 16) == 0, CAPS\nassert max(PIDS) < 50, PIDS\n"  # its own PID namespace's few
    for isolation, level, passed in (("weak", "unshare", [True, True]), ("off", "off", [True, False])):
        box = Sandbox(SandboxLimits(timeout_s=5), isolation=isolation, user="none")
        result = box.run(probe, parse_tests(tests))  # "off" is a plain subprocess: the host's processes
        assert (box.level, result.status, result.passed) == (level, "ok", passed), result
        assert "without capabilities" in box.report["user"]


@pytest.mark.faults
def test_weak_degrades_says_so_and_still_scores(no_bwrap, capsys):
    import sys

    # an interpreter user nobody can run (a root trainer's own under /root is refused: the test above)
    python = next((p for p in (sys.executable, "/usr/bin/python3") if os.path.exists(p) and _nobody_can_run(p)), None)
    if python is None:
        pytest.skip("no interpreter that user nobody can run (this trainer's is under /root, no /usr/bin/python3)")
    box = Sandbox(SandboxLimits(timeout_s=5), isolation="weak", python=python)
    assert box.level in ("unshare", "off")
    if os.geteuid() == 0:
        assert box.report["user"].startswith(("on: samples run as nobody", "on: each sample running at once has its own uid")), box.report
    assert box.report["isolation"].startswith(("PARTIAL", "OFF")) and "bwrap not found" in box.report["isolation"]
    captured = capsys.readouterr()
    assert "without full OS isolation" in captured.out + captured.err
    result = box.run(HALF, TESTS)
    assert result.status == "ok" and result.passed == [True, False]


def test_off_is_a_plain_subprocess_and_says_so():
    box = Sandbox(SandboxLimits(timeout_s=5), isolation="off", user="none")
    assert box.level == "off" and box.report["isolation"].startswith("OFF (isolation = off)")
    assert box.run(HALF, TESTS).passed == [True, False]


def test_off_does_not_quietly_run_samples_as_root():
    """isolation = "off" asks for a plain subprocess, not for root: a root trainer whose interpreter
    user nobody cannot run fell back to root (samples read /etc/shadow) with only an info line."""
    if os.geteuid() != 0 or _nobody_can_run(sys.executable):
        pytest.skip("needs a root trainer whose interpreter user nobody cannot run (as on this project's VMs)")
    with pytest.raises(RewardError, match=r"samples would run as root.*isolation = \"off\".*set user = \"none\""):
        Sandbox(SandboxLimits(timeout_s=5), isolation="off")


@pytest.mark.parametrize("user", ["root", "0", 0])
def test_root_is_never_the_samples_user_unless_none_is_asked(user):
    """A root trainer asking user = "root" (or uid 0, or 0 read as False = "none") got samples running
    as root, reported as "on: already running as root"."""
    if os.geteuid() != 0:
        pytest.skip("needs a root trainer")
    with pytest.raises(RewardError, match="user must not be root"):
        Sandbox(SandboxLimits(timeout_s=5), user=user)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_auto_takes_bubblewrap_when_it_works():
    box = Sandbox(SandboxLimits(timeout_s=5))
    assert box.level == "bwrap", box.report
    assert box.report["seccomp"].startswith(("on", "off: no libseccomp"))
    if os.geteuid() == 0:
        # its own uid per sample running at once (polyrl.sandbox.uids), or nobody where that uid is not mapped
        assert box.report["user"].startswith(("on: each sample running at once has its own uid",
                                              "on: samples run as nobody"))


def test_options_isolation_and_its_old_name():
    assert _options({"namespaces": "off"})["isolation"] == "off"
    assert _options({})["isolation"] == "auto"
    with pytest.raises(RewardError, match="isolation must be .*Fix: isolation = \"auto\""):
        _options({"isolation": "strict"})
    with pytest.raises(RewardError, match="both isolation and namespaces"):
        _options({"isolation": "off", "namespaces": "off"})
    with pytest.raises(RewardError, match="disk_mb must be a number > 0"):
        _options({"disk_mb": 0})
    assert _options({})["tests_in"] == "process"
    with pytest.raises(RewardError, match="tests_in must be \"process\" or \"trainer\", got 'fork'. Fix"):
        _options({"tests_in": "fork"})


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_an_interpreter_under_tmp_is_bound_read_only(tmp_path):
    """A venv under /tmp (CI runners) is bound after the sample's /tmp tmpfs, so it stays visible."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    box = Sandbox(SandboxLimits(timeout_s=10), python=str(venv / "bin" / "python"), isolation="require")
    code = f"import os\nopen({str(venv / 'pyvenv.cfg')!r}, 'a').write('x')\n"
    before = (venv / "pyvenv.cfg").read_text()
    result = box.run(code, TESTS)
    assert result.status == "error" and ("Read-only file system" in result.error
                                         or "Permission denied" in result.error), result
    assert (venv / "pyvenv.cfg").read_text() == before
    assert box.run(HALF, TESTS).passed == [True, False]
