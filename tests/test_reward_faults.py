"""Rewards that hang, exit or ignore a stop request cannot hang or silently end the trainer.

Unit tests drive ``RewardComputer`` directly; the end-to-end ones run ``polyrl train`` on the tiny
model and check the exit code, the one ``error:`` line, the checkpoint of the last good state, and
that ``--resume`` continues from it: in a subprocess where the process is the point (``os._exit``,
a reward that never returns, signals), else through ``polyrl.cli.main`` in this process
(``crash_util.train_here``, sparing a fresh interpreter's torch and transformers imports).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from crash_util import signal_when_reached, train_here

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards import guard
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.types import Completion, RewardContext

pytestmark = pytest.mark.faults


#: A stuck reward below ends by itself after this, with a score: a computer that waited for it
#: returns that score instead of raising, so the raise alone shows the reward was cut at its
#: ``timeout_s`` (0.2-0.3 s) or its stop grace, ~70x sooner. Not a bound on the elapsed time (was
#: < 5 s), which measured the machine; and no reward thread outlives its test by more than this.
SELF_END_S = 20.0


@pytest.fixture
def release():
    """Set at teardown so that a reward thread the test abandoned ends instead of spinning on."""
    event = threading.Event()
    yield event
    event.set()


def call(fn, timeout_s=600.0, should_stop=None):
    plugin = function_reward_plugin(fn)
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False),
                              [(plugin.name, 1.0, {})], timeouts={plugin.name: timeout_s},
                              should_stop=should_stop)
    context = RewardContext(rows=[{"prompt": "p"}], wanted=(plugin.name,))
    return computer(["p"], [Completion(0, [1], [2], [0.0], text="a")], context)


def test_a_stuck_reward_times_out_and_is_named(release):
    def stuck(completions, **kw):
        end = time.monotonic() + SELF_END_S
        while not release.wait(0.01) and time.monotonic() < end:  # a busy loop that the fixture can end
            pass
        return [1.0]

    with pytest.raises(RewardError, match=r"reward 'stuck' from function .* did not answer within 0.3 s.*"
                                          r"Fix: .*raise timeout_s"):
        call(stuck, timeout_s=0.3)


def test_an_async_reward_awaiting_forever_times_out(release):
    async def waits(completions, **kw):
        await asyncio.sleep(3600)

    with pytest.raises(RewardError, match=r"reward 'waits' .* did not answer within 0.2 s"):
        call(waits, timeout_s=0.2)


def test_an_async_reward_blocking_its_loop_is_named(release):
    async def blocks(completions, **kw):
        release.wait(SELF_END_S)  # never yields to the event loop
        return [1.0]

    with pytest.raises(RewardError, match=r"reward 'blocks' .* did not answer"):
        call(blocks, timeout_s=0.2)


@pytest.mark.parametrize(("body", "match"), [
    ("sys.exit(3)", r"reward 'quits' from function .* raised SystemExit\(3\) \(sys.exit\).*Fix: return scores"),
    ("os._exit(0)", r"reward 'quits' from function .* called os._exit\(0\), which would have ended the trainer"),
])
def test_exiting_rewards_are_errors(body, match):
    namespace = {"sys": sys, "os": os}
    exec(f"def quits(completions, **kw):\n    {body}\n", namespace)
    with pytest.raises(RewardError, match=match):
        call(namespace["quits"])


def test_async_reward_calling_os_exit_is_an_error():
    async def quits(completions, **kw):
        os._exit(0)

    with pytest.raises(RewardError, match=r"reward 'quits' .* called os._exit\(0\)"):
        call(quits)


def test_os_exit_outside_reward_threads_still_exits():
    code = ("from polyrl.rewards import guard; import os, threading\n"
            "guard.install_exit_guard()\n"
            "t = threading.Thread(target=lambda: os._exit(5)); t.start(); t.join()\n"
            "os._exit(9)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 5


def test_a_stop_request_abandons_a_running_reward(monkeypatch, release):
    monkeypatch.setattr(guard, "STOP_GRACE_S", 0.2)
    stop = threading.Event()

    def stuck(completions, **kw):
        stop.set()
        release.wait(SELF_END_S)
        return [1.0]

    with pytest.raises(guard.RewardCancelled, match="stuck"):
        call(stuck, should_stop=stop.is_set)


def test_a_reward_finishing_within_the_grace_completes_the_step(monkeypatch):
    monkeypatch.setattr(guard, "STOP_GRACE_S", 5.0)

    def quick(completions, **kw):
        time.sleep(0.2)
        return [0.5]

    np.testing.assert_array_equal(call(quick, should_stop=lambda: True).total, [0.5])


# --- end to end: polyrl train on the tiny model ---------------------------------------------------

POLYRL = [sys.executable, "-m", "polyrl.cli"]
#: ``polyrl`` with the reward stop grace at 600 s instead of 5 s: a run that leaves at a second
#: Ctrl-C within a bound far below it did not wait the grace out (seen, not timed).
POLYRL_LONG_GRACE = [sys.executable, "-c", "import sys; from polyrl.rewards import guard; "
                     "guard.STOP_GRACE_S = 600.0; from polyrl import cli; sys.exit(cli.main())"]

#: Fails (as ``FAIL``) at step 2 unless ``ok`` exists next to it; chat completions, as TRL passes them.
REWARD = """
import os, sys, time
from pathlib import Path

HERE = Path(__file__).parent

def digits(completions, trainer_state, **kwargs):
    if trainer_state.global_step == 2 and not (HERE / "ok").exists():
        (HERE / "reached").write_text("2")
        FAIL
    return [sum(ch.isdigit() for ch in c[0]["content"]) / max(len(c[0]["content"]), 1) for c in completions]
"""

FAILURES = {
    "os_exit": "os._exit(0)",
    "sys_exit": "sys.exit(0)",
    "stuck": "while True: time.sleep(0.01)",
}


def write_run(tmp_path: Path, model: str, failure: str, timeout_s: float = 600) -> tuple[Path, Path]:
    (tmp_path / "reward.py").write_text(REWARD.replace("FAIL", FAILURES[failure]))
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 6\n'
        '[data]\ntask = "arithmetic"\n'
        f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:digits"\ntimeout_s = {timeout_s}\n'
        f'[train]\nsteps = 4\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 0\noutput_dir = "{out}"\n')
    return config, out


def train(config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*POLYRL, "train", str(config), "--no-progress", *extra],
                          capture_output=True, text=True, timeout=300)


def assert_resumes_to_the_end(tmp_path: Path, config: Path, out: Path, capfd) -> None:
    (tmp_path / "ok").write_text("")  # the reward is fixed
    done = train_here(capfd, config, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert (out / "checkpoints" / "step-00000004" / "COMPLETE").exists()


@pytest.mark.parametrize("failure", ["os_exit", "sys_exit", "stuck"])
@pytest.mark.slow
def test_a_failing_reward_stops_the_run_with_one_error_and_a_resumable_checkpoint(tiny_model_dir, tmp_path, failure,
                                                                                   capfd):
    """os._exit (which would end the process) and a reward that never returns (its thread never
    ends) run in a subprocess; sys.exit through ``main`` in this process."""
    config, out = write_run(tmp_path, tiny_model_dir, failure, timeout_s=3 if failure == "stuck" else 600)
    t0 = time.monotonic()
    proc = train_here(capfd, config) if failure == "sys_exit" else train(config)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "reward 'digits' from function" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    expected = {"os_exit": "os._exit(0)", "sys_exit": "SystemExit(0)", "stuck": "did not answer within 3 s"}
    assert expected[failure] in errors[0]
    # the line after it: where the run goes on from, and the command (only a stop said so before)
    after = proc.stderr.splitlines()[proc.stderr.splitlines().index(errors[0]) + 1]
    assert after == (f"the run's newest checkpoint is {out / 'checkpoints' / 'step-00000002'}; once the cause is "
                     f"fixed, continue with: polyrl train {config} --resume"), proc.stderr[-2000:]
    # checkpoint_every = 0: the only checkpoint is the state before the failed step, written on failure
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]
    assert (out / "checkpoints" / "step-00000002" / "COMPLETE").exists()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    if failure == "stuck":
        assert time.monotonic() - t0 < 240
    if failure == "os_exit":
        assert_resumes_to_the_end(tmp_path, config, out, capfd)


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_sigterm_while_a_reward_is_stuck_stops_and_checkpoints(tiny_model_dir, tmp_path, capfd):
    config, out = write_run(tmp_path, tiny_model_dir, "stuck")
    proc = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stderr, _ = signal_when_reached(proc, tmp_path / "reached", settle_s=0.3)
    assert proc.returncode == 0, stderr[-3000:]
    assert "stop requested while a reward ran" in stderr and "digits" in stderr, stderr[-3000:]
    assert (out / "checkpoints" / "step-00000002" / "COMPLETE").exists()
    assert_resumes_to_the_end(tmp_path, config, out, capfd)


def test_under_overlap_a_failed_step_resumes_on_exactly_its_rollout(tiny_model_dir, tmp_path):
    """generation.overlap samples step k+1 during step k: when step 2's reward fails, the rollout
    sampled ahead (step 3's) is dropped and step 2's is checkpointed, so the resumed run scores the
    very completions the failed step had."""
    from polyrl.checkpoint import read_state
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    seen: dict[int, list[str]] = {}
    broken = {"on": True}

    def texts(completions, trainer_state, **kw):
        step = trainer_state.global_step
        if step == 2 and broken["on"]:
            seen[-1] = [c[0]["content"] for c in completions]
            raise ValueError("judge unreachable")
        seen[step] = [c[0]["content"] for c in completions]
        return [float(len(c[0]["content"])) for c in completions]

    def config():
        return RunConfig.from_dict({
            "model": {"path": tiny_model_dir}, "data": {"task": "arithmetic"},
            "generation": {"group_size": 2, "max_new_tokens": 6, "overlap": True},
            "rewards": [{"name": "texts"}],
            "train": {"steps": 4, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        })

    from polyrl.rewards.functions import function_reward_plugin

    with pytest.raises(RewardError, match=r"reward 'texts' .* raised ValueError: judge unreachable"):
        Trainer(config(), extra_plugins=(function_reward_plugin(texts),)).run(progress=False)
    checkpoint = tmp_path / "run" / "checkpoints" / "step-00000002"
    state = read_state(checkpoint)
    assert state["step"] == 2 and state["pending_rollout"]["step"] == 2
    broken["on"] = False
    trainer = Trainer(config(), extra_plugins=(function_reward_plugin(texts),))
    assert trainer.resume()
    summary = trainer.run(progress=False)
    assert summary["steps"] == 4
    assert seen[2] == seen[-1]  # the resumed step scored the failed step's completions


def test_rewards_that_never_score_stop_the_cli_run_with_one_error(tiny_model_dir, tmp_path, capfd):
    """A reward returning None for every sample (a misread column, say) stops the run after
    train.max_consecutive_skips steps, checkpointed, instead of running every step training nothing."""
    (tmp_path / "reward.py").write_text("def unscored(completions, **kw):\n    return [None] * len(completions)\n")
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        f'[data]\ntask = "arithmetic"\n[[rewards]]\nfunction = "{tmp_path / "reward.py"}:unscored"\n'
        f'[train]\nsteps = 50\nprompts_per_step = 1\nthreads = 1\ncheckpoint_every = 0\n'
        f'max_consecutive_skips = 2\noutput_dir = "{out}"\n')
    proc = train_here(capfd, config)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])  # old code: 0, after 50 empty steps
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no reward scored any sample" in errors[0], proc.stderr[-3000:]
    assert "unscored" in errors[0] and "Fix:" in errors[0] and "Traceback" not in proc.stderr
    assert "no reward scored any of the 2 samples" in proc.stderr
    assert (out / "checkpoints" / "step-00000002" / "COMPLETE").exists()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("overlap", ["false", pytest.param("true", marks=pytest.mark.slow)])
def test_a_second_ctrl_c_stops_at_once_and_names_the_checkpoint_it_continues_from(tiny_model_dir, tmp_path, overlap):
    """The first Ctrl-C asks the run to finish its step; a second leaves now (a user waiting on a
    long step wants the prompt back): exit 130 at once, not after the stuck reward's stop grace
    (600 s here: ending within the 60 s bound is not waiting for it; a bound of 4 s against the 5 s
    grace measured the machine), the step not taken, one line naming the last checkpoint and the
    command to continue. Under overlap too, where the next step's rollout is sampling on a thread
    the interpreter waits for."""
    config, out = write_run(tmp_path, tiny_model_dir, "stuck")
    config.write_text(config.read_text().replace("checkpoint_every = 0", "checkpoint_every = 1"))
    proc = subprocess.Popen([*POLYRL_LONG_GRACE, "train", str(config), "--no-progress", "--set",
                             f"generation.overlap={overlap}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read_stderr() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "reached").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        # the second Ctrl-C once the first was handled (its line said so): two sent before the run's
        # handler ran (a 0.5 s pause outlived by a starved main thread) count as one press
        while not any("ctrl_c_again" in line for line in list(lines)):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)  # a bound, not a measure: the grace is 600 s
        reader.join(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = "".join(lines)
    assert proc.returncode == 130, stderr[-3000:]
    assert "ctrl_c_again" in stderr  # the first Ctrl-C's line says what a second does
    checkpoint = out / "checkpoints" / "step-00000002"  # the reward is stuck in step 3 (2 steps done)
    assert stderr.splitlines()[-1] == (f"stopped at once (Ctrl-C twice) during step 3, which is not taken; it continues "
                                       f"from checkpoint {checkpoint} with: polyrl train {config} --set "
                                       f"generation.overlap={overlap} --resume")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000001", "step-00000002"]
    assert (checkpoint / "COMPLETE").exists()
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def _signal_trainer(step: int, saved_step: int | None):
    """A Trainer holding only what its signal handling reads (no model): a one-process run at ``step``."""
    from polyrl.trainer import Trainer

    trainer = Trainer.__new__(Trainer)
    trainer.world_size, trainer.stop_requested, trainer._phase = 1, False, f"step {step + 1}"
    trainer.step, trainer._saved_step = step, saved_step
    return trainer


@pytest.mark.parametrize(("step", "saved_step"), [(4, None), (4, 2)])
def test_a_second_ctrl_c_that_would_lose_trained_steps_asks_once_more(step, saved_step):
    """With steps trained since the last checkpoint (checkpoint_every = 0, a TRL config's default,
    or not every step) a double Ctrl-C left at once and lost them all, though the first Ctrl-C said
    only "this step is not taken": the second now says so, and a third leaves."""
    from polyrl.errors import StoppedAtOnce

    trainer = _signal_trainer(step, saved_step)
    with trainer._graceful_signals(at_once=True):
        signal.raise_signal(signal.SIGINT)
        assert trainer.stop_requested
        try:
            signal.raise_signal(signal.SIGINT)  # trained steps would be lost: not yet
        except StoppedAtOnce:
            pytest.fail(f"a second Ctrl-C left at once, losing {step - (saved_step or 0)} trained steps")
        with pytest.raises(StoppedAtOnce):
            signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize(("step", "saved_step"), [(0, None), (4, 4)])
def test_a_second_ctrl_c_that_loses_only_the_step_in_progress_leaves_at_once(step, saved_step):
    from polyrl.errors import StoppedAtOnce

    trainer = _signal_trainer(step, saved_step)
    with trainer._graceful_signals(at_once=True):
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(StoppedAtOnce):
            signal.raise_signal(signal.SIGINT)
