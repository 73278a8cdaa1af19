"""A sample cannot run above normal priority, whatever the trainer's priority and limits are.

RLIMIT_RTPRIO and RLIMIT_NICE are inherited: a trainer started with them raised (``ulimit -r 99``,
systemd's ``LimitRTPRIO=``, an audio or HPC profile) let its samples take ``SCHED_FIFO`` or
``nice -5`` and starve it on its cores. So were its scheduling policy and nice value (``chrt -f``,
``nice -n -10``). The server sets both limits to 0 and goes back to SCHED_OTHER at nice 0 or above
before the solution runs.
"""

from __future__ import annotations

import ast
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bwrap_util import needs_bwrap

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, runner


class _Recording:
    """Stands in for the ``resource`` module inside the server's ``_limits``: records each setrlimit."""

    def __init__(self) -> None:
        self.set: dict[str, tuple[int, int]] = {}
        for name in dir(resource):
            if name.startswith("RLIMIT_"):
                setattr(self, name, name)

    def setrlimit(self, which: str, limits: tuple[int, int]) -> None:
        self.set[which] = limits


def _server_limits() -> str:
    """The server's ``_limits`` and what it uses at module level, from its source (the sample runs
    the server as a script, so it cannot be imported)."""
    source = (Path(runner.__file__).parent / "server.py").read_text()
    parts = []
    for node in ast.parse(source).body:
        names = {node.name} if isinstance(node, ast.FunctionDef) else {
            getattr(t, "id", None) for t in node.targets} if isinstance(node, ast.Assign) else set()
        if names & {"_limits", "_normal_priority", "SIGNALS_QUEUED", "_SHARED_POLICIES"}:
            parts.append(str(ast.get_source_segment(source, node)))
    return "\n".join(parts)


def test_the_servers_limits_zero_real_time_and_nice_priority():
    """The server's own ``_limits`` asks for RLIMIT_RTPRIO and RLIMIT_NICE of 0, soft and hard, as
    it does for the core size."""
    recorder = _Recording()
    namespace: dict[str, object] = {"resource": recorder, "os": os}
    exec(_server_limits(), namespace)
    namespace["_normal_priority"] = lambda: None  # this process's own priority stays as it is
    limits = SandboxLimits().for_server()
    namespace["_limits"](limits)  # type: ignore[operator]
    assert recorder.set.get("RLIMIT_CORE") == (0, 0), recorder.set  # the recorder sees the calls at all
    if hasattr(resource, "RLIMIT_RTPRIO"):
        assert recorder.set.get("RLIMIT_RTPRIO") == (0, 0), recorder.set
    if hasattr(resource, "RLIMIT_NICE"):
        assert recorder.set.get("RLIMIT_NICE") == (0, 0), recorder.set


@pytest.fixture
def raised_priority_limits():
    """The trainer's RLIMIT_RTPRIO and RLIMIT_NICE raised (as ``ulimit -r 50 -e 30`` would), restored after."""
    if not (hasattr(resource, "RLIMIT_RTPRIO") and hasattr(resource, "RLIMIT_NICE")):
        pytest.skip("this platform has no RLIMIT_RTPRIO / RLIMIT_NICE")
    before = {which: resource.getrlimit(which) for which in (resource.RLIMIT_RTPRIO, resource.RLIMIT_NICE)}
    try:
        resource.setrlimit(resource.RLIMIT_RTPRIO, (50, 50))
        resource.setrlimit(resource.RLIMIT_NICE, (30, 30))
    except (ValueError, OSError) as exc:
        for which, limits in before.items():
            resource.setrlimit(which, (min(limits[0], limits[1]), limits[1]))
        pytest.skip(f"the test process cannot raise its RLIMIT_RTPRIO/RLIMIT_NICE (no CAP_SYS_RESOURCE): {exc}")
    yield
    for which, limits in before.items():
        resource.setrlimit(which, limits)


#: Tries SCHED_FIFO and a negative nice past the audit hook (neither call is audited).
PRIORITY = (
    "import os, resource\n"
    "def raise_priority():\n"
    "    got = []\n"
    "    try:\n"
    "        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))\n"
    "        got.append('fifo')\n"
    "    except OSError:\n"
    "        pass\n"
    "    try:\n"
    "        os.nice(-5)\n"
    "        got.append('nice')\n"
    "    except OSError:\n"
    "        pass\n"
    "    return got, resource.getrlimit(resource.RLIMIT_RTPRIO), resource.getrlimit(resource.RLIMIT_NICE)\n"
)


@needs_bwrap
def test_a_sample_takes_no_real_time_or_higher_priority_from_a_trainer_allowed_them(raised_priority_limits):
    """With the trainer's RLIMIT_RTPRIO at 50 and RLIMIT_NICE at 30, a sample inherited them, and
    the kernel lets an unprivileged process ``sched_setscheduler(SCHED_FIFO)`` and ``os.nice(-5)``
    within them; now both fail. (Skipped where the test cannot raise its own limits.)"""
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512))
    result = box.run(PRIORITY, parse_tests("assert raise_priority() == ([], (0, 0), (0, 0))\n"))
    assert (result.status, result.passed) == ("ok", [True]), result


#: Runs the server's ``_limits`` and prints the scheduling policy and nice value it leaves.
AFTER_LIMITS = "import os, resource, sys\n{limits}\n_limits({args!r})\nprint(os.sched_getscheduler(0), os.nice(0))\n"


def test_a_sample_started_at_real_time_priority_goes_back_to_normal():
    """A trainer under ``chrt --fifo 1`` and ``nice -n -5`` (root may) passed both to the sample,
    which then ran at real-time priority; the server's ``_limits`` now leaves it SCHED_OTHER
    at nice 0. A short process of its own runs at that priority here, never the test's."""
    chrt, nice = shutil.which("chrt"), shutil.which("nice")
    if chrt is None or nice is None or not hasattr(os, "SCHED_FIFO"):
        pytest.skip("needs util-linux chrt, coreutils nice and SCHED_FIFO")
    code = AFTER_LIMITS.format(limits=_server_limits(), args=SandboxLimits().for_server())
    start = [chrt, "--fifo", "1", nice, "-n", "-5", sys.executable, "-I", "-c"]
    refused = subprocess.run([*start, "import os; print(os.sched_getscheduler(0), os.nice(0))"],
                             capture_output=True, text=True, timeout=60)
    if refused.returncode != 0 or refused.stdout.split() != [str(os.SCHED_FIFO), "-5"]:
        pytest.skip(f"this process cannot start one at SCHED_FIFO and nice -5 (needs CAP_SYS_NICE): "
                    f"{(refused.stderr or refused.stdout).strip()[-200:]}")
    done = subprocess.run([*start, code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(os.SCHED_OTHER), "0"], done.stdout


#: ``ioprio_get`` and ``ioprio_set`` by architecture (no Python binding; libc has no wrapper).
IOPRIO_NR = {"x86_64": (252, 251), "aarch64": (31, 30)}
IOPRIO_CLASS_SHIFT = 13


def _ioprio(value: int | None = None) -> int:
    """This thread's I/O priority (``ioprio_get``), after setting it to ``value`` when given."""
    import ctypes
    import platform

    get, put = IOPRIO_NR[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    if value is not None and libc.syscall(put, 1, 0, value) != 0:  # IOPRIO_WHO_PROCESS, this thread
        raise OSError(ctypes.get_errno(), "ioprio_set")
    return int(libc.syscall(get, 1, 0))


@pytest.fixture
def raised_io_priority():
    """This thread (the one that starts the sample) at real-time I/O priority where it may (root),
    else best-effort level 0 (any process may take it); restored after. Yields the class set."""
    import platform

    if platform.machine() not in IOPRIO_NR or not sys.platform.startswith("linux"):
        pytest.skip(f"ioprio_get/ioprio_set numbers are known here for {sorted(IOPRIO_NR)} on Linux only")
    before = _ioprio()
    for klass in (1, 2):  # real-time, best-effort; level 0, the highest
        try:
            _ioprio(klass << IOPRIO_CLASS_SHIFT)
        except OSError:
            continue
        break
    else:
        pytest.skip("this process cannot raise its own I/O priority")
    try:
        yield klass
    finally:
        _ioprio(before)


#: The sample's I/O priority (class, level) as it starts, and whether it can raise it to best-effort 0
#: past the audit hook (``ioprio_set``: the result and errno).
IO_PRIORITY = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def io_priority(get, put):\n"
    "    got = libc.syscall(get, 1, 0)\n"
    "    raised = libc.syscall(put, 1, 0, 2 << 13)\n"
    "    return got >> 13, got & 0xff, raised, ctypes.get_errno()\n"
)


@needs_bwrap
@pytest.mark.skipif(shutil.which("ionice") is None, reason="util-linux ionice is not installed")
def test_a_sample_runs_at_the_lowest_best_effort_io_priority_whatever_the_trainers(raised_io_priority):
    """The I/O class is inherited: a trainer under ``ionice -c 1`` (or ``-c 2 -n 0``) passed it to
    every sample, whose reads and writes went before the trainer's. The sample now starts under
    ``ionice -c 2 -n 7`` and the seccomp filter refuses ``ioprio_set``, so it cannot raise it."""
    import errno
    import platform

    get, put = IOPRIO_NR[platform.machine()]
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512), isolation="require", audit_hook=False)
    tests = f"assert io_priority({get}, {put}) == (2, 7, -1, {errno.EPERM})\n"
    result = box.run(IO_PRIORITY, parse_tests(tests))
    assert (result.status, result.passed) == ("ok", [True]), result
    assert "ionice -c 2 -n 7" in box.report["rlimits"]
