"""A sample cannot raise its scheduling priority over the trainer's, whatever limits the trainer has.

RLIMIT_RTPRIO and RLIMIT_NICE are inherited: a trainer started with them raised (``ulimit -r 99``,
systemd's ``LimitRTPRIO=``, an audio or HPC profile) let its samples take ``SCHED_FIFO`` or
``nice -5`` and starve it on its cores. The server sets both to 0 before the solution runs.
"""

from __future__ import annotations

import ast
import resource
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


def test_the_servers_limits_zero_real_time_and_nice_priority():
    """The server's own ``_limits`` (read from its source: the sample runs it as a script) asks for
    RLIMIT_RTPRIO and RLIMIT_NICE of 0, soft and hard, as it does for the core size."""
    source = (Path(runner.__file__).parent / "server.py").read_text()
    tree = ast.parse(source)
    wanted = {"_limits", "SIGNALS_QUEUED"}
    parts = [ast.get_source_segment(source, node) for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name in wanted
             or isinstance(node, ast.Assign) and any(getattr(t, "id", None) in wanted for t in node.targets)]
    recorder = _Recording()
    namespace: dict[str, object] = {"resource": recorder}
    exec("\n".join(str(part) for part in parts), namespace)
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
    """With the trainer's RLIMIT_RTPRIO at 50 and RLIMIT_NICE at 30, a sample called
    ``sched_setscheduler(SCHED_FIFO)`` and ``os.nice(-5)`` and both worked; now both fail."""
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512))
    result = box.run(PRIORITY, parse_tests("assert raise_priority() == ([], (0, 0), (0, 0))\n"))
    assert (result.status, result.passed) == ("ok", [True]), result
