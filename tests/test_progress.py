"""The training progress bar: time left and seconds per step a person can read."""

from __future__ import annotations

import re

import pytest

from polyrl.progress import step_progress


def _terminal(monkeypatch) -> None:
    """stderr taken for a terminal by rich (its own ``TTY_COMPATIBLE`` switch), as in a shell."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")


def _no_terminal(monkeypatch) -> None:
    """stderr a file or a pipe, as under ``nohup`` or a batch job (rich's switches unset)."""
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def test_the_bar_shows_time_left_and_short_steps_in_milliseconds(capsys, monkeypatch):
    _terminal(monkeypatch)
    with step_progress(total=4, start=1) as advance:
        for _ in range(3):
            advance({"reward_mean": 0.5, "time/step": 0.0042})
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", capsys.readouterr().err)
    assert "4/4" in err and "s/step=0.0042" in err  # it read "s/step=0.0"
    assert re.search(r"left\s+\d+:\d\d:\d\d", err), err  # the estimated time left beside the elapsed time


def test_the_time_left_shows_for_steps_longer_than_half_a_minute(capsys, monkeypatch):
    """Once: rich estimates speed from the last 30 s of progress by default, so with steps of a
    minute (an RL step on a real model: sampling, scoring, the update) no two steps fell in that
    window and the bar's time left read ``-:--:--`` for the whole run. Here a run resumed after
    3 of 10 steps takes two 60 s steps: 5 steps are left, 5 minutes at that pace."""
    import rich.console

    _terminal(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(rich.console, "monotonic", lambda: clock[0])  # the console's (and bar's) clock
    with step_progress(total=10, start=3) as advance:
        for _ in range(2):
            clock[0] += 60.0
            advance({"reward_mean": 0.5, "time/step": 60.0})
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", capsys.readouterr().err)
    assert "5/10" in err and re.search(r"left\s+0:05:00", err), err


def test_no_bar_when_not_wanted(capsys):
    with step_progress(total=2, enabled=False) as advance:
        advance({"reward_mean": 1.0})
    assert capsys.readouterr().err == ""


def test_no_bar_in_a_log_file(capsys, monkeypatch):
    """stderr a file (nohup, a batch job's log): rich drew nothing while the run went and the whole
    bar once at its end, a line the log's reader had no use for; the step lines say it instead."""
    _no_terminal(monkeypatch)
    with step_progress(total=2) as advance:
        advance({"reward_mean": 1.0, "time/step": 0.5})
    assert capsys.readouterr().err == ""


def test_the_clock_says_steps_of_the_run_and_seconds_left_at_this_processs_pace():
    from polyrl.progress import StepClock

    now = [100.0]
    clock = StepClock(total=10, start=4, began=100.0, now=lambda: now[0])  # resumed at step 4
    assert clock.fields(4) == {"of": 10}  # no step of this process yet: no pace to go by
    now[0] = 130.0
    assert clock.fields(6) == {"of": 10, "eta_s": 60}  # 15 s a step, 4 steps left
    now[0] = 190.0
    assert clock.fields(10) == {"of": 10, "eta_s": 0}


@pytest.mark.parametrize(("progress", "json_logs", "terminal", "told"), [
    (False, False, True, True), (True, True, True, True), (True, False, True, False), (True, False, False, True)])
def test_step_lines_without_the_bar_say_how_far_the_run_is(toy, tmp_path, monkeypatch, progress, json_logs,
                                                           terminal, told):
    """--no-progress and --log-json print no bar: their step lines said neither the steps in all
    nor the time left. With the bar they say nothing more (the bar shows both). stderr no terminal
    (a log file under nohup or a batch job) shows no bar while the run goes (rich draws it once,
    at the end), and its step lines said neither either."""
    from structlog.testing import capture_logs

    from polyrl import progress as progress_module
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer
    from test_trainer_toy import toy_config

    monkeypatch.setattr(progress_module, "json_mode", lambda: json_logs)
    (_terminal if terminal else _no_terminal)(monkeypatch)
    trainer = Trainer(RunConfig.from_dict(toy_config(tmp_path, steps=3)))
    with capture_logs() as logs:
        trainer.run(progress=progress)
    steps = [e for e in logs if e["event"] == "step"]
    assert len(steps) == 3
    if not told:
        assert not any("of" in e or "eta_s" in e for e in steps), steps
        return
    assert [e["of"] for e in steps] == [3, 3, 3]
    assert all(isinstance(e["eta_s"], int) and e["eta_s"] >= 0 for e in steps) and steps[-1]["eta_s"] == 0
    assert list(steps[0])[:3] == ["step", "of", "eta_s"]  # read as "step 2 of 3, 40 s left"


def test_the_terminals_step_line_reads_step_of_eta_in_that_order():
    """The console renderer sorted each line's keys, so the step line read ``eta_s=12 loss=0.5
    of=50 step=3`` (step last), not the README's ``step=3 of=50 eta_s=...``; every line now keeps
    the order it was logged in."""
    import os
    import subprocess
    import sys

    code = ("from polyrl.logs import configure, get_logger\nconfigure(json=False)\n"
            "get_logger('polyrl.trainer').info('step', step=3, of=50, eta_s=12, loss=0.5, grad_norm=1.5)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("POLYRL_LOG_JSON", "POLYRL_LOG_LEVEL")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if "[info" in line]
    assert line.split("]", 1)[1].split() == ["step", "step=3", "of=50", "eta_s=12", "loss=0.5", "grad_norm=1.5"], line


@pytest.mark.parametrize("ends", ["inside", "after"])
def test_a_plugin_call_across_the_bars_end_leaves_the_streams_the_trainer_uses(monkeypatch, ends):
    """In a terminal rich wraps sys.stdout/stderr in a ``FileProxy`` while the bar is drawn. A tool
    call (on a real ``threads.Worker``) that began under the bar and ended after it set back those
    retired proxies: every later line of stdout (the run's summary) went to the bar's console, on
    stderr, with a warning blaming the plugin. Ending under the bar, it leaves the bar's own."""
    import asyncio
    import os
    import pty
    import sys
    import threading

    from rich.file_proxy import FileProxy

    from polyrl.agents.threads import Worker

    reader, writer = pty.openpty()
    terminal = open(writer, "w")  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stderr", terminal)  # the bar's console is a terminal: rich wraps the streams
    kept = sys.stdout
    started, release = threading.Event(), threading.Event()

    def tool() -> str:
        started.set()
        release.wait(60)
        return "done"

    answer: dict[str, str] = {}
    caller = threading.Thread(target=lambda: answer.update(value=asyncio.run(Worker("test-tool").call(tool, 120))))
    try:
        with step_progress(total=2) as advance:
            assert isinstance(sys.stdout, FileProxy) and isinstance(sys.stderr, FileProxy)
            drawn = (sys.stdout, sys.stderr)
            caller.start()
            assert started.wait(60)
            advance({"reward_mean": 1.0})
            if ends == "inside":
                release.set()
                caller.join(60)
                assert (sys.stdout, sys.stderr) == drawn  # the bar's own, still drawing
        release.set()
        caller.join(60)
        assert answer == {"value": "done"}
        assert sys.stdout is kept and sys.stderr is terminal
    finally:
        release.set()
        terminal.close()
        os.close(reader)


def test_a_long_step_is_said_to_be_still_running_each_heartbeat_of_it(capsys):
    """Without the bar a log got a line only as a step ended: a step of many minutes read as a hung
    run. Each ``every`` seconds of one step now says it still runs; nothing once its line is out."""
    from structlog.testing import capture_logs

    from polyrl.progress import StepHeartbeat

    now = [0.0]
    heartbeat = StepHeartbeat(total=50, every=60.0, now=lambda: now[0])
    with capture_logs() as logs:
        assert not heartbeat.beat()  # no step yet
        heartbeat.begin(3)
        now[0] = 59.0
        assert not heartbeat.beat()
        now[0] = 60.0
        assert heartbeat.beat()
        now[0] = 119.0
        assert not heartbeat.beat()  # said at 60: next at 120
        now[0] = 125.0
        assert heartbeat.beat()
        heartbeat.end()
        now[0] = 1000.0
        assert not heartbeat.beat()
    assert [(e["event"], e["step"], e["of"], e["running_s"]) for e in logs] == [
        ("step still running", 3, 50, 60), ("step still running", 3, 50, 125)]


@pytest.mark.parametrize("terminal", [False, True])
def test_a_run_without_the_bar_says_a_slow_step_still_runs_before_its_line(toy, tmp_path, monkeypatch, terminal):
    """The run's heartbeat (its interval shortened here) says step 1 still runs while it does, before
    step 1's line; with the bar (a terminal), whose clock ticks, it says nothing. The step waits for
    the heartbeat (up to a minute), not for a time: no assert on how long anything took."""
    import threading

    from structlog.testing import capture_logs

    from polyrl import progress as progress_module
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer
    from test_trainer_toy import toy_config

    (_terminal if terminal else _no_terminal)(monkeypatch)
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.05)
    beat, said = progress_module.StepHeartbeat.beat, threading.Event()

    def beat_told(self):
        told = beat(self)
        if told:
            said.set()
        return told

    monkeypatch.setattr(progress_module.StepHeartbeat, "beat", beat_told)
    trainer = Trainer(RunConfig.from_dict(toy_config(tmp_path, steps=1)))
    step = trainer.train_one_step

    def slow_step():
        out = step()
        said.wait(60 if not terminal else 0.5)
        return out

    monkeypatch.setattr(trainer, "train_one_step", slow_step)
    with capture_logs() as logs:
        trainer.run(progress=True)
    events = [(e["event"], e.get("step")) for e in logs if e["event"] in ("step", "step still running")]
    if terminal:
        assert events == [("step", 1)]
        return
    assert events[0] == ("step still running", 1) and events[-1] == ("step", 1), events
