"""How ``polyrl bench`` runs each side in a child process of its own and reads its result.

Why children: each side's peak RSS, thread count and imports are its own (TRL's and polyrl's
models never share a process), and a side that crashes, runs out of memory or hangs is recorded
as that side's ``error`` while the bench goes on. A child prints one JSON object as its last
stdout line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

#: Lines of a failed child's stderr kept in its result (``stderr_tail``): its traceback.
STDERR_TAIL_LINES = 40


def child_argv(module: str, args: Any) -> list[str]:
    """``python -m module JSON-ARGS``: how every bench child is started."""
    return [sys.executable, "-m", module, json.dumps(args)]


def run_child(argv: list[str], name: str, timeout: float | None = None) -> dict[str, Any]:
    """Run a bench child and parse its last stdout line (a JSON object; its own process and RSS).
    A child past ``timeout`` seconds is killed and recorded as timed out; a crash (signal, OOM,
    traceback) is recorded as an ``error``: one point's failure never ends a bench."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"backend": name, "error": f"timed out after {timeout:g} s", "timed_out": True}
    return parse_child_output(name, done.returncode, done.stdout, done.stderr)


def _child(module: str, args: Any, name: str, timeout: float | None = None) -> dict[str, Any]:
    """``child_argv`` run as a bench child (see ``run_child``)."""
    return run_child(child_argv(module, args), name, timeout)


def parse_child_output(name: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """A finished child's result: its last stdout line (a JSON object), or an ``error`` saying what
    it died of (``child_failure``) with its stderr's tail."""
    if returncode != 0:
        return {"backend": name, "error": child_failure(returncode, stderr), "returncode": returncode,
                "stderr_tail": "\n".join(stderr.strip().splitlines()[-STDERR_TAIL_LINES:])}
    try:
        return dict(json.loads(stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, TypeError):
        return {"backend": name, "error": f"no result line on stdout: {stdout[-200:]!r}"}


def _last_line(stderr: str) -> str:
    """A traceback's last line, the exception, with its module path cut
    (``polyrl.errors.ConfigError: ...`` -> ``ConfigError: ...``)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return re.sub(r"^(?:\w+\.)+(\w+: )", r"\1", lines[-1]) if lines else ""


def child_failure(returncode: int, stderr: str) -> str:
    """What a failed child died of, in one line: the signal (SIGKILL is how the kernel's OOM
    killer ends a process), a Python MemoryError, or the exception it raised (its traceback goes
    to the result's ``stderr_tail``, not here: this is what the table shows)."""
    import signal

    last = _last_line(stderr)
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        oom = " (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"killed by {name}{oom}" + (f": {last}" if last else "")
    if "MemoryError" in stderr or "out of memory" in stderr.lower():
        return f"out of memory: {last}"
    return last or f"exit {returncode}"
