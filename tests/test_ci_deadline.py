"""``POLYRL_TESTS_DEADLINE`` (tests/conftest.py, set by ``.ci/run`` for ``make test-slow``): past it no test
starts, each left one skipped saying why, so a slow machine ends CI's 90 minutes reported, not cut off; a
value that is no Unix time stops pytest at once with one line naming the variable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ONE_TEST = "tests/test_config_reference.py"


def _pytest(deadline: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POLYRL_TESTS_DEADLINE": deadline}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", ONE_TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("offset", "ran"), [(-1, False), (3600, True)])
def test_tests_past_the_deadline_are_skipped_saying_why_and_the_rest_run(offset, ran):
    out = _pytest(str(time.time() + offset))
    assert out.returncode == 0, out.stdout + out.stderr
    passed, skipped = (re.search(rf"\b\d+ {word}\b", out.stdout) for word in ("passed", "skipped"))
    if ran:
        assert passed and not skipped, out.stdout
    else:
        assert skipped and not passed and "POLYRL_TESTS_DEADLINE passed: CI's time budget" in out.stdout, out.stdout


def test_a_deadline_that_is_no_time_stops_the_run_with_one_line():
    out = _pytest("tomorrow")
    assert out.returncode != 0
    assert "POLYRL_TESTS_DEADLINE='tomorrow' is not a Unix time in seconds" in out.stdout + out.stderr
