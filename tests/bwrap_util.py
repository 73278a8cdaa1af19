"""Whether bubblewrap isolation works on this machine, for the sandbox tests that need it."""

from __future__ import annotations

import pytest

from polyrl.errors import RewardError
from polyrl.sandbox import Sandbox, SandboxLimits


def _bwrap_works() -> str | None:
    """None when a "require" sandbox starts here, else why not."""
    try:
        Sandbox(SandboxLimits(timeout_s=5), isolation="require")
    except RewardError as exc:
        return str(exc)
    return None


WHY_NOT = _bwrap_works()
needs_bwrap = pytest.mark.skipif(WHY_NOT is not None, reason=f"bubblewrap does not work here: {WHY_NOT}")
