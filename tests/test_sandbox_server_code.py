"""The sample's server program is compiled once per interpreter, not by every sample (``polyrl.sandbox.server_code``).

Every sample's interpreter compiled the same 47 KB of server source from its ``-c`` argument
(about 20 ms of CPU each, half a trivial sample's start-up). Now the trainer sends the compiled
code down stdin and the command line carries a short ``BOOTSTRAP``.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from polyrl.sandbox.runner import SERVER_SOURCE, Sandbox, SandboxLimits


def test_a_sample_starts_from_the_compiled_server_not_its_source():
    """The sample's own command line is short (it held the whole source, over 40 KB), and the
    server still runs the sample and its tests; a wrong answer still fails."""
    box = Sandbox(SandboxLimits(timeout_s=30))
    code = ("def cmdline_length():\n    with open('/proc/self/cmdline', 'rb') as f:\n        return len(f.read())\n"
            "def add(a, b):\n    return a + b\n")
    steps = [("assert cmdline_length() < 4000", True), ("assert add(2, 3) == 5", True)]
    result = box.run(code, steps)
    assert (result.status, result.passed) == ("ok", [True, True]), result
    assert box.run(code.replace("a + b", "a - b"), steps).passed == [True, False]


def test_the_framed_code_is_what_bootstrap_reads_and_runs():
    from polyrl.sandbox import server_code

    framed = server_code.framed(sys.executable, "import sys\nsys.stdout.write('ran ' + __name__)\n")
    assert framed is not None and int.from_bytes(framed[:8], "big") == len(framed) - 8
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", server_code.BOOTSTRAP], input=framed + b"rest",
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, b"ran __main__"), done.stderr
    assert server_code.framed(sys.executable, SERVER_SOURCE) is server_code.framed(sys.executable, SERVER_SOURCE)


def test_another_interpreter_compiles_its_own_and_a_missing_one_gets_the_source():
    """A marshalled code object is good for one Python version only: a sample interpreter other
    than the trainer's compiles the server itself; one that cannot be run gives None (the caller
    then passes the source with ``-c``, as before)."""
    from polyrl.sandbox import server_code

    assert server_code.framed("/nonexistent/python3", "x = 1\n") is None
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.1[123]*/bin/python3")) + ["/usr/bin/python3"]
    other = next((p for p in candidates if os.path.exists(p) and subprocess.run(
        [p, "-c", f"import sys; assert sys.version_info[:2] != {tuple(sys.version_info[:2])}"],
        capture_output=True, timeout=60).returncode == 0), None)
    if other is None:
        pytest.skip("needs a Python 3 of another minor version than the trainer's")
    framed = server_code.framed(other, "import sys\nprint(sys.version_info[:2])\n")
    assert framed is not None
    done = subprocess.run([other, "-I", "-S", "-B", "-c", server_code.BOOTSTRAP], input=framed,
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() not in (b"", str(sys.version_info[:2]).encode()), done
