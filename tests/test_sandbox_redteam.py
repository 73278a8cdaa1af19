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

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import isolation_report
from polyrl.rewards.combine import RewardComputer
from polyrl.sandbox import Sandbox, SandboxLimits
from polyrl.types import Completion, RewardContext

pytestmark = pytest.mark.faults


def _bwrap_works() -> str | None:
    try:
        Sandbox(SandboxLimits(timeout_s=5), isolation="require")
    except RewardError as exc:
        return str(exc)
    return None


WHY_NOT = _bwrap_works()
needs_bwrap = pytest.mark.skipif(WHY_NOT is not None, reason=f"bubblewrap does not work here: {WHY_NOT}")


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
