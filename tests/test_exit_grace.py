"""The ``polyrl`` program's exit grace (``cli._leave_past_held_threads``): it leaves past threads
plugin code left running, never past the run's own or their exit handlers.

Each case is a small program run as a subprocess (the grace ends it with ``os._exit``), with a
grace of 0.5 s instead of ``EXIT_GRACE_S``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: A program ending as ``polyrl`` does: ``record_starts`` at its start, the grace at its end.
#: ``{own}``: a writer thread the run itself started (a tracker's last upload), which finishes
#: its file after the grace; ``{left}``: an environment's call (on its worker thread) that starts a
#: thread which starts a non-daemon thread that never ends.
PROGRAM = """
import asyncio, atexit, sys, threading, time
from pathlib import Path

from polyrl import cli
from polyrl.agents.threads import Worker
try:
    from polyrl.thread_origins import record_starts
except ImportError:  # a polyrl whose grace did not tell threads apart
    record_starts = lambda: None

record_starts()
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))

def writer():  # the run's own: written in parts, done 1.5 s after the grace began
    with open(out / "metrics.jsonl", "w") as f:
        for step in range(1, 5):
            time.sleep(0.5)
            f.write('{"step": %d}\\n' % step)
            f.flush()

if {own}:
    threading.Thread(target=writer, name="tracker-upload").start()

if {left}:
    def reset():  # the environment's code, on its worker thread
        def helper():
            threading.Thread(target=threading.Event().wait, name="env-forever", daemon=False).start()
        threading.Thread(target=helper, name="env-helper", daemon=False).start()

    worker = Worker(name="polyrl-env-0")
    asyncio.run(worker.call(reset, 5.0))
    worker.close()

cli._leave_past_held_threads(3, 0.5)
sys.exit(3)
"""


def run_program(tmp_path: Path, own: bool, left: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM).replace("{own}", str(own)).replace("{left}", str(left)))
    return subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env={**os.environ})


def test_the_runs_own_thread_is_waited_for_past_the_grace_its_file_complete(tmp_path):
    """The grace left 10 s after the command whatever the threads were: a tracker still uploading
    or a writer thread of the run's own was cut mid-file (here: after the grace of 0.5 s, at
    ``{"step": 1}``). Now only plugin code's threads are left behind; the run's own end first."""
    proc = run_program(tmp_path, own=True, left=False)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == [f'{{"step": {s}}}' for s in range(1, 5)]
    assert "warning: the command ended" not in proc.stderr and (tmp_path / "atexit.txt").exists()


@pytest.mark.faults
def test_threads_an_environment_left_are_left_behind_after_the_runs_own_end_and_exit_handlers_run(tmp_path):
    """An environment's thread that never ends (started by a thread its ``reset`` started) is still
    left behind after the grace, with one warning naming it and no other thread; the run's own
    writer finishes first, and the exit handlers (``atexit``, which ``os._exit`` skips: a tracker's
    last push to the Hub) run before the program leaves."""
    proc = run_program(tmp_path, own=True, left=True)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "metrics.jsonl").read_text().count("step") == 4
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: the command ended")]
    assert len(warned) == 1 and "(env-forever)" in warned[0], proc.stderr


@pytest.mark.faults
def test_an_environments_thread_alone_is_left_behind_at_the_grace(tmp_path):
    """Seen, not timed: the thread never ends, so the program ending at all (code 3, within
    ``run_program``'s 60 s bound) is the grace leaving it (a bound of 20 s on the elapsed time,
    interpreter start included, measured the machine)."""
    proc = run_program(tmp_path, own=False, left=True)
    assert proc.returncode == 3 and "(env-forever)" in proc.stderr, proc.stderr
