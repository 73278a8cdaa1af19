"""Reward functions that change what the whole process shares cannot move, crash or silence the run.

A reward function is user Python run on a thread of the trainer's process (``rewards.guard``): the
working folder and ``sys.stdout``/``sys.stderr`` it changes are every thread's, and a child it
forks is a copy of the trainer. Each end-to-end test runs ``polyrl train`` in a subprocess (the
process is the point) from its own folder with the default kind of ``train.output_dir``, a relative
one, and a reward that misbehaves at step 2 of 3: the run must finish with its files where it
started, every later line of its output shown, and no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from polyrl.rewards import guard

pytestmark = pytest.mark.faults

REWARD = """
import contextlib, io, os, sys
from pathlib import Path

ELSEWHERE = Path(__file__).parent / "elsewhere"

def digits(completions, trainer_state, **kwargs):
    if trainer_state.global_step == 2:
BODY
    return [float(len(c[0]["content"]) % 3) for c in completions]
"""

HOSTILE = {
    "chdir": "os.chdir(ELSEWHERE)",
    # left open: every later line of the run went into the buffers, never shown
    "redirect": "contextlib.redirect_stdout(io.StringIO()).__enter__(); contextlib.redirect_stderr(io.StringIO()).__enter__()",
    "close_stderr": "sys.stderr.close()",  # "lost sys.stderr", exit 1, the rest of the run unsaid
    # `polyrl train` prints to stderr while it trains (sys.stdout is sys.stderr): the same stream, and
    # the progress bar's console kept the closed one (a traceback as the bar ended)
    "close_stdout": "sys.stdout.close()",
    # the descriptors themselves: exit code 1 and not a word (os.close(2)), or every later line lost
    "close_fd2": "os.close(2)",
    "close_fd1": "os.close(1)",  # the summary's
    "devnull_fd2": "os.dup2(os.open(os.devnull, os.O_WRONLY), 2)",
    # a child returning onto the reward's thread: "Fatal Python error: init_threadstate" and a stack dump
    "fork_returns": "pid = os.fork()\n        if pid == 0: return [0.0] * len(completions)\n        os.waitpid(pid, 0)",
    "fork_exits": "pid = os.fork()\n        if pid == 0: sys.exit(0)\n        os.waitpid(pid, 0)",
}


def run_with(tmp_path: Path, model: str, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "reward.py").write_text(REWARD.replace("BODY", "        " + body))
    (tmp_path / "run.toml").write_text(
        f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 6\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nfunction = "reward.py:digits"\n'
        '[train]\nsteps = 3\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 1\noutput_dir = "out"\n')
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "train", "run.toml"], cwd=tmp_path,  # the bar shown
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("how", sorted(HOSTILE))
@pytest.mark.slow
def test_a_reward_changing_the_process_leaves_the_run_whole(tiny_model_dir, tmp_path, how):
    proc = run_with(tmp_path, tiny_model_dir, HOSTILE[how])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Fatal Python error" not in proc.stderr, proc.stderr[-3000:]
    out = tmp_path / "out"
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert (out / "checkpoints" / "step-00000003" / "COMPLETE").exists()
    assert not (tmp_path / "elsewhere" / "out").exists()
    assert "final model written" in proc.stderr, proc.stderr[-3000:]  # said after the reward's change
    assert json.loads(proc.stdout)["steps"] == 3  # the summary, on stdout
    warned = proc.stderr.count("which the whole process shares; set back")
    assert warned == (0 if how.startswith("fork") else 1), proc.stderr[-3000:]


def test_a_reward_moving_the_folder_then_hanging_has_it_set_back_when_abandoned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    release = threading.Event()

    def stuck() -> None:
        os.chdir(tmp_path / "elsewhere")
        release.wait(60)

    try:
        with pytest.raises(guard.RewardTimedOut):
            guard.call_guarded(stuck, label="stuck", timeout_s=0.3)
        assert Path.cwd() == tmp_path
    finally:
        release.set()


def test_a_reward_replacing_stdout_has_it_set_back_as_the_call_returns(monkeypatch):
    import contextlib
    import io

    kept = sys.stdout
    guard.call_guarded(lambda: contextlib.redirect_stdout(io.StringIO()).__enter__(), label="r", timeout_s=60)
    assert sys.stdout is kept
