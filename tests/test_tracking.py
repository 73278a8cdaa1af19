"""Trackers as plugins and the completions log: discovery, broken-plugin isolation, config errors,
a tracker failing mid-run (dropped, training goes on), completions.jsonl rewound on resume, and
small numbers such as ``lr`` kept readable in the step log lines.

The runs train the tiny llama on the torch backend; the trackers here are small recording plugins
(the real libraries are exercised in tests/test_tracking_libraries.py).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from crash_util import signal_when_reached
from toy_dist import write_dist

from polyrl import cli
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.logs import readable
from polyrl.redact import MASK
from polyrl.tracking import TrackerSpec
from polyrl.tracking import completions as clog
from polyrl.tracking.session import RunTracking, hyperparameters
from polyrl.trainer import Trainer
from polyrl.types import Completion

REWARD = """
def digits(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
"""


def config_dict(tmp_path: Path, model: str, steps: int = 2, **logging) -> dict:
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    return {
        "model": {"path": model},
        "generation": {"group_size": 4, "max_new_tokens": 6},
        "optimizer": {"lr": 1e-5},
        "data": {"task": "arithmetic", "options": {"count": 16}},
        "rewards": [{"function": f"{reward}:digits"}],
        "train": {"steps": steps, "prompts_per_step": 2, "threads": 1, "checkpoint_every": 1,
                  "keep_checkpoints": 5, "output_dir": str(tmp_path / "run")},
        "logging": logging,
    }


class Recorder:
    """A tracker plugin that keeps what it is given; ``fail_at`` makes ``log_metrics`` raise there."""

    def __init__(self, name: str, fail_at: int | None = None) -> None:
        self.name, self.fail_at = name, fail_at
        self.metrics: list[tuple[int, dict]] = []
        self.completions: list[tuple[int, list]] = []
        self.closed = False

    @hookimpl
    def polyrl_register_trackers(self, register):
        register(TrackerSpec(name=self.name, create=lambda context: self, summary="records calls"))

    def log_metrics(self, metrics, step):
        if step == self.fail_at:
            raise RuntimeError("dashboard unreachable")
        self.metrics.append((step, dict(metrics)))

    def log_completions(self, records, step):
        self.completions.append((step, list(records)))

    def close(self):
        self.closed = True


def completion(text: str) -> Completion:
    return Completion(prompt_index=0, prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5], text=text,
                      finish_reason="stop")


# --- discovery -----------------------------------------------------------------------------------


@pytest.mark.faults
def test_tracker_plugins_come_from_entry_points_and_broken_ones_are_listed(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "polyrl_tracker_good.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.tracking import TrackerSpec\n"
        "@hookimpl\n"
        "def polyrl_register_trackers(register):\n"
        "    register(TrackerSpec(name='mytracker', create=lambda ctx: None, summary='mine',\n"
        "                         probe=lambda: 'needs libmine', install_hint='pip install mine'))\n")
    (site / "polyrl_tracker_import.py").write_text("raise ImportError('no module named dashboard_sdk')\n")
    (site / "polyrl_tracker_register.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_register_trackers(register):\n"
        "    raise RuntimeError('tracker registration exploded')\n")
    write_dist(site, "polyrl-tracker-good", "1.0", {"polyrl.trackers": {"good": "polyrl_tracker_good"}})
    write_dist(site, "polyrl-tracker-import", "1.0", {"polyrl.trackers": {"badimport": "polyrl_tracker_import"}})
    write_dist(site, "polyrl-tracker-register", "1.0", {"polyrl.trackers": {"badreg": "polyrl_tracker_register"}})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr("polyrl.registry._registry", None)
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)

    assert cli.main(["trackers", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in listing["trackers"]}
    assert {"tensorboard", "wandb", "mlflow", "trackio", "mytracker"} <= set(by_name)
    mine = by_name["mytracker"]
    assert (mine["available"], mine["reason"], mine["distribution"]) == (False, "needs libmine", "polyrl-tracker-good")
    errors = {e["name"]: e["error"] for e in listing["load_errors"]}
    assert "ImportError: no module named dashboard_sdk" in errors["badimport"]
    assert "tracker registration exploded" in errors["badreg"]

    assert cli.main(["trackers"]) == 0  # the table names the broken plugins too
    table = capsys.readouterr().out
    assert "mytracker" in table and "badimport" in table and "badreg" in table


def test_unknown_or_uninstalled_tracker_is_one_error_line_before_models_load(tmp_path, monkeypatch, capsys):
    data = config_dict(tmp_path, "no-such-model-is-loaded", report_to=["tensorbored"])
    monkeypatch.setenv("POLYRL_LOAD_PLUGINS", "")
    with pytest.raises(ConfigError) as err:
        Trainer(RunConfig.from_dict(data))
    assert err.value.field == "logging.report_to" and "'tensorbored'" in str(err.value)
    assert "tensorboard" in str(err.value)  # the known ones are named

    missing = Recorder("needs_lib")
    spec_probe = TrackerSpec(name="needs_lib", create=lambda c: missing, probe=lambda: "libdash is not installed",
                             install_hint="pip install 'polyrl[dash]'")

    class Plugin:
        @hookimpl
        def polyrl_register_trackers(self, register):
            register(spec_probe)

    data["logging"] = {"report_to": ["needs_lib"]}
    with pytest.raises(ConfigError) as err:
        Trainer(RunConfig.from_dict(data), extra_plugins=(Plugin(),))
    assert "libdash is not installed" in str(err.value) and "polyrl[dash]" in str(err.value)

    config = tmp_path / "bad.toml"
    config.write_text(f'[model]\npath = "x"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\noutput_dir = "{tmp_path / "o"}"\n[logging]\nreport_to = ["nope"]\n')
    assert cli.main(["train", str(config), "--no-progress"]) != 0
    err_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err_lines) == 1 and "logging.report_to" in err_lines[0] and "'nope'" in err_lines[0]


@pytest.mark.faults
@pytest.mark.parametrize("logging, field", [
    ({"report_to": "tensorboard"}, "logging.report_to"),
    ({"report_to": ["wandb", "wandb"]}, "logging.report_to"),
    ({"completions_per_step": -1}, "logging.completions_per_step"),
    ({"completions_per_step": 1.5}, "logging.completions_per_step"),
    ({"completions_per_stpe": 2}, "logging.completions_per_stpe"),
    ({"tracker_timeout_s": 0}, "logging.tracker_timeout_s"),
    ({"tracker_timeout_s": "slow"}, "logging.tracker_timeout_s"),
    ({"table_cell_chars": -1}, "logging.table_cell_chars"),
    ({"table_cell_chars": "16k"}, "logging.table_cell_chars"),
])
def test_bad_logging_settings_name_the_field(tmp_path, logging, field):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(config_dict(tmp_path, "m", **logging))
    assert err.value.field == field


def test_the_trackers_of_a_run_a_trl_script_started_are_told_so(toy, tmp_path):
    """A tracker's own texts say how to continue a stopped run (trackio's alert): it is told who
    started the run (the trainer's ``started_by``, set by ``polyrl.trl``), so a TRL script's run is
    not sent to ``polyrl train CONFIG --resume``, a config it never had. It was told nothing."""
    from test_step_numbering import toy_run

    contexts: list = []

    class Plugin:
        @hookimpl
        def polyrl_register_trackers(self, register):
            register(TrackerSpec(name="seen", create=lambda context: contexts.append(context) or Recorder("seen")))

    started = {"by": "trl", "script": "/work/train.py"}
    for who in (None, started):
        trainer = Trainer(RunConfig.from_dict(toy_run(tmp_path / str(len(contexts)), steps=1, report_to=["seen"])),
                          extra_plugins=(Plugin(),))
        trainer.started_by = who
        trainer.run(progress=False)
    assert [context.started_by for context in contexts] == [None, started]


@pytest.mark.faults
def test_a_tracker_that_cannot_start_stops_the_run_start_and_closes_the_others(tmp_path):
    opened = Recorder("fine")

    def explode(context):
        raise OSError("disk full")

    tracking = RunTracking(specs=[TrackerSpec(name="fine", create=lambda c: opened),
                                  TrackerSpec(name="boom", create=explode)],
                           output_dir=tmp_path, completions_per_step=1, run_name="r", project="p", config={})
    with pytest.raises(ConfigError) as err:
        tracking.open()
    assert err.value.field == "logging.report_to" and "'boom'" in str(err.value) and "disk full" in str(err.value)
    assert opened.closed and tracking.trackers == {}


def test_a_tracker_folder_that_cannot_be_written_is_one_error_whose_fix_names_it(tmp_path):
    """A folder the tracker cannot write (here a file where TensorBoard's goes; a read-only folder
    or a full disk alike) stopped the run with "fix: ... raise logging.tracker_timeout_s if it is
    only slow": no help. The fix now names the path to make writable."""
    pytest.importorskip("tensorboard")
    from polyrl.registry import get_registry

    (tmp_path / "tensorboard").write_text("a file where the folder goes")
    spec = get_registry().trackers_by_name()["tensorboard"]
    tracking = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r", project="p",
                           config={})
    with pytest.raises(ConfigError) as raised:
        tracking.open()
    text = str(raised.value)
    assert text.startswith("logging.report_to: tracker 'tensorboard' failed to start: FileExistsError"), text
    assert f"make {str(tmp_path / 'tensorboard')!r} a folder the run can write" in text, text
    assert "tracker_timeout_s" not in text, text


def test_hyperparameters_mask_credentials(tmp_path):
    data = config_dict(tmp_path, "m")
    data["rewards"].append({"name": "llm_judge", "options": {"api_key": "hunter2hunter2", "model": "judge",
                                                            "url": "https://user:pw12345@host/v1"}})
    params = hyperparameters(RunConfig.from_dict(data))
    judge = params["rewards"][1]["options"]
    assert judge["api_key"] == MASK and judge["model"] == "judge" and "pw12345" not in judge["url"]
    assert params["optimizer"]["lr"] == 1e-5 and params["logging"]["completions_per_step"] == 4
    assert params["generation"]["max_new_tokens"] == 6  # a count of tokens, no credential (it was "***")
    json.dumps(params, allow_nan=False)  # plain, strict data


# --- completions log -----------------------------------------------------------------------------


def test_completion_records_are_sampled_repeatably_and_redacted():
    texts = [f"answer {i}" for i in range(7)] + ["my key is sk-abcdefghijklmnop ok"]
    comps = [completion(t) for t in texts]
    args = (3, ["Q: what is 2+2? api_key=hunter2secret"] * 8, comps, {"digits": [0.1 * i for i in range(8)]},
            [float(i) for i in range(8)], [float("nan")] + [0.5] * 7)
    first = clog.sample_records(*args, count=8, seed=11)
    assert [r["completion"] for r in first][:7] == texts[:7]
    assert first[7]["completion"] == f"my key is {MASK} ok"
    assert "hunter2secret" not in first[0]["prompt"]
    assert first[0]["advantage"] is None and first[1]["advantage"] == 0.5  # NaN is written as null
    assert first[2]["rewards"] == {"digits": pytest.approx(0.2)} and first[2]["reward"] == 2.0
    assert set(first[0]) == set(clog.COLUMNS) and first[0]["finish_reason"] == "stop"
    some = clog.sample_records(*args, count=3, seed=11)
    assert len(some) == 3 and some == clog.sample_records(*args, count=3, seed=11)


def test_rewind_keeps_earlier_steps_from_their_last_writing(tmp_path):
    path = tmp_path / "completions.jsonl"
    lines = [{"step": 1, "c": "a"}, {"step": 1, "c": "b"}, {"step": 2, "c": "dead"}, {"step": 3, "c": "dead"},
             {"step": 2, "c": "new1"}, {"step": 2, "c": "new2"}, {"step": 3, "c": "later"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 4, "c": "cut sho')
    assert clog.rewind(path, 2) == 4
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["c"] for r in kept] == ["a", "b", "new1", "new2"]


def test_readable_keeps_significant_digits_of_small_numbers():
    assert readable(1e-5) == 1e-5 and readable(3.14159e-7) == 3.142e-7
    assert readable(0.123456) == 0.1235 and readable(1234.56789) == 1234.5679 and readable(0.0) == 0.0
    assert readable(float("inf")) == float("inf") and readable(float("nan")) != readable(float("nan"))


# --- in a run --------------------------------------------------------------------------------------


@pytest.mark.faults
def test_a_tracker_failing_mid_run_is_dropped_once_and_training_continues(tmp_path, tiny_model_dir, capsys):
    good, bad = Recorder("good"), Recorder("bad", fail_at=2)
    data = config_dict(tmp_path, tiny_model_dir, steps=3, report_to=["good", "bad"], completions_per_step=3)
    summary = Trainer(RunConfig.from_dict(data), extra_plugins=(good, bad)).run(progress=False)
    assert summary["steps"] == 3
    assert [s for s, _ in good.metrics] == [1, 2, 3]
    assert [s for s, _ in bad.metrics] == [1] and [s for s, _ in bad.completions] == [1]  # then dropped
    assert bad.closed and good.closed
    assert all(m["lr"] == 1e-5 and "reward_mean" in m for _, m in good.metrics)
    assert [(s, len(r)) for s, r in good.completions] == [(1, 3), (2, 3), (3, 3)]
    err = capsys.readouterr().err
    assert err.count("tracker 'bad' failed and was dropped") == 1 and "dashboard unreachable" in err
    # said again at the end (one warning scrolls away in a long run) and in the summary
    assert "tracker 'bad' stopped receiving metrics at step 2" in err
    assert summary["trackers_dropped"]["bad"]["at_step"] == 2 and "dashboard unreachable" in \
        summary["trackers_dropped"]["bad"]["error"]
    assert "lr=1e-05" in err and "lr=0.0" not in err  # small numbers stay readable in the log lines
    records = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert records == [r for _, rs in good.completions for r in rs]
    assert all(isinstance(r["completion"], str) and r["rewards"].keys() == {"digits"} for r in records)


def test_completions_log_is_rewound_on_resume(tmp_path, tiny_model_dir):
    data = config_dict(tmp_path, tiny_model_dir, steps=2, completions_per_step=2)
    Trainer(RunConfig.from_dict(data)).run(progress=False)
    path = tmp_path / "run" / "completions.jsonl"
    before = path.read_text().splitlines()
    assert [json.loads(x)["step"] for x in before] == [1, 1, 2, 2]
    # a crash after the step-3 checkpoint was due: lines of steps 3 and 4 exist but no checkpoint
    with open(path, "a") as fh:
        fh.write('{"step": 3, "completion": "lost"}\n{"step": 4, "completion": "lost"}\n{"step": 4, "com')
    data["train"]["steps"] = 3
    trainer = Trainer(RunConfig.from_dict(data))
    assert trainer.resume()
    trainer.run(progress=False)
    after = path.read_text().splitlines()
    assert after[:4] == before
    assert [json.loads(x)["step"] for x in after] == [1, 1, 2, 2, 3, 3]
    assert "lost" not in path.read_text()


def test_completions_log_off_writes_no_file(tmp_path, tiny_model_dir):
    data = config_dict(tmp_path, tiny_model_dir, steps=1, completions_per_step=0)
    Trainer(RunConfig.from_dict(data)).run(progress=False)
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    assert not (tmp_path / "run" / "completions.jsonl").exists()


def test_registry_lists_builtin_trackers_without_importing_them():
    import subprocess
    import sys

    code = ("import sys\n"
            "from polyrl.plugins import get_plugin_manager\n"
            "from polyrl.registry import Registry\n"
            "reg = Registry(get_plugin_manager(entry_points=False))\n"
            "names = {'tensorboard', 'wandb', 'mlflow', 'trackio'}\n"
            "assert names <= set(reg.trackers_by_name()), reg.trackers_by_name()\n"
            "reg.tracker_statuses()\n"
            "assert not names & set(sys.modules), names & set(sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# --- hostile text, trackers that exit or hang ----------------------------------------------------


def test_text_written_is_valid_utf8_and_each_text_is_capped(tmp_path):
    """A lone surrogate (valid JSON from a server: "\\ud800") once crashed the run in
    completions.jsonl's writer; a 5 MB completion was written whole to every tracker."""
    from polyrl import strict_json

    huge = completion("\ud800 lone " + "x" * 200_000)
    records = clog.sample_records(0, ["Q \udfff"], [huge], {"r": [1.0]}, [1.0], [0.0], count=1, seed=0)
    text = records[0]["completion"]
    assert text.startswith("\ufffd lone ") and records[0]["prompt"] == "Q \ufffd"
    assert len(text) < clog.MAX_TEXT_CHARS + 200 and text.endswith(clog.cut_marker(200_007 - clog.MAX_TEXT_CHARS))
    path = tmp_path / "completions.jsonl"
    clog.append(path, records)
    assert json.loads(path.read_bytes().decode("utf-8"))["completion"] == text  # strict UTF-8, strict JSON

    other = tmp_path / "other.jsonl"  # the writer itself never emits a surrogate, whoever calls it
    strict_json.append_lines(other, [{"t": "a\ud800b", "\udc00k": ["\ud83d\ude00", float("nan")]}])
    assert json.loads(other.read_bytes().decode("utf-8")) == {"t": "a\ufffdb", "\ufffdk": ["\U0001f600", None]}
    assert strict_json.dumps({"t": "\ud800"}) == '{"t": "\\ufffd"}'  # not an escaped lone surrogate either


class Boom(BaseException):
    """Not an Exception: what a careless tracker library may raise."""


class Hostile(Recorder):
    """A Recorder whose ``where`` method raises ``raised`` (any BaseException) or blocks."""

    def __init__(self, name: str, where: str, raised: BaseException | None = None,
                 release: object | None = None) -> None:
        super().__init__(name)
        self.where, self.raised, self.release = where, raised, release

    def _act(self, method: str) -> None:
        if method != self.where:
            return
        if self.raised is not None:
            raise self.raised
        self.release.wait()  # blocks until the test ends

    def log_metrics(self, metrics, step):
        self._act("log_metrics")
        super().log_metrics(metrics, step)

    def log_completions(self, records, step):
        self._act("log_completions")
        super().log_completions(records, step)

    def close(self):
        self._act("close")
        super().close()


def tracking_of(tmp_path: Path, *trackers: Recorder, timeout_s: float = 60.0) -> RunTracking:
    return RunTracking(specs=[TrackerSpec(name=t.name, create=lambda c, t=t: t) for t in trackers],
                       output_dir=tmp_path, completions_per_step=1, run_name="r", project="p", config={},
                       timeout_s=timeout_s)


def publish_steps(tracking: RunTracking, steps: int) -> None:
    for step in range(steps):
        tracking.collect(step, ["q"], [completion(f"a{step}")], type("S", (), {"per_reward": {}, "total": [1.0]}),
                         [0.0], seed=step)
        tracking.publish({"step": step, "loss": 0.5})


@pytest.mark.faults
@pytest.mark.parametrize("raised", [SystemExit(4), KeyboardInterrupt(), Boom("evil base"), GeneratorExit()],
                         ids=["exit", "kbi", "base", "genexit"])
@pytest.mark.parametrize("where", ["log_metrics", "log_completions", "close"])
def test_a_tracker_raising_any_base_exception_is_dropped_once_and_the_others_go_on(tmp_path, capsys, raised,
                                                                                   where):
    """Once: SystemExit ended the run with the tracker's exit code and no message or checkpoint,
    a custom BaseException with a traceback. Tracker code runs on its own thread: whatever it
    raises there is the tracker's, never a real Ctrl-C."""
    good, bad = Recorder("good"), Hostile("bad", where, raised)
    tracking = tracking_of(tmp_path, bad, good)
    tracking.open()
    publish_steps(tracking, 3)
    tracking.close()
    assert [s for s, _ in good.metrics] == [0, 1, 2] and [s for s, _ in good.completions] == [0, 1, 2]
    assert good.closed and tracking.trackers == {}
    err = capsys.readouterr().err
    word = "failed to close" if where == "close" else "failed and was dropped"
    assert err.count(f"tracker 'bad' {word}") == 1 and type(raised).__name__ in err, err


@pytest.mark.faults
def test_a_tracker_that_exits_or_hangs_at_start_is_one_config_error(tmp_path):
    import threading

    def exits(context):
        raise SystemExit(3)

    release = threading.Event()

    def hangs(context):
        release.wait()

    opened = Recorder("fine")
    try:
        for create, timeout_s, words in ((exits, 60.0, "SystemExit(3)"), (hangs, 0.3, "did not start within 0.3 s")):
            tracking = RunTracking(specs=[TrackerSpec(name="fine", create=lambda c: opened),
                                          TrackerSpec(name="bad", create=create)],
                                   output_dir=tmp_path, completions_per_step=1, run_name="r", project="p",
                                   config={}, timeout_s=timeout_s)
            opened.closed = False
            with pytest.raises(ConfigError) as err:
                tracking.open()
            assert err.value.field == "logging.report_to" and "'bad'" in str(err.value) and words in str(err.value)
            assert opened.closed and tracking.trackers == {}
    finally:
        release.set()


@pytest.mark.faults
def test_a_tracker_that_hangs_is_dropped_at_tracker_timeout_s_and_the_others_keep_their_order(tmp_path, capsys):
    """Once: a log_metrics that never returned hung the run for good (SIGTERM could not free it).
    Seen, not timed: the hanging calls are let go only 60 s in (so a broken timeout fails instead of
    hanging the suite), and the run published and closed while they still hung (a bound of 5 s on
    the elapsed time measured the machine)."""
    import threading

    release = threading.Event()
    good, stuck, stuck_close = Recorder("good"), Hostile("stuck", "log_completions", release=release), \
        Hostile("stuck_close", "close", release=release)
    tracking = tracking_of(tmp_path, stuck, good, stuck_close, timeout_s=0.5)
    letting_go = threading.Timer(60.0, release.set)
    try:
        tracking.open()
        letting_go.start()
        publish_steps(tracking, 3)
        tracking.close()
        assert not release.is_set(), "the run waited for the hanging trackers"
    finally:
        letting_go.cancel()
        release.set()
    assert [s for s, _ in good.metrics] == [0, 1, 2] and [s for s, _ in good.completions] == [0, 1, 2]
    assert [s for s, _ in stuck.metrics] == [0] and not stuck.completions and not stuck.closed
    assert [s for s, _ in stuck_close.completions] == [0, 1, 2]
    err = capsys.readouterr().err
    assert err.count("tracker 'stuck' failed and was dropped") == 1
    assert "did not return within 0.5 s (logging.tracker_timeout_s)" in err
    assert err.count("tracker 'stuck_close' failed to close") == 1



class Slow(Recorder):
    """A Recorder whose ``log_metrics`` takes ``seconds`` each call (a dashboard far away)."""

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(name)
        self.seconds = seconds

    def log_metrics(self, metrics, step):
        import time

        time.sleep(self.seconds)
        super().log_metrics(metrics, step)


@pytest.mark.faults
def test_a_tracker_slow_but_under_tracker_timeout_s_is_said_once_and_kept(tmp_path, capsys):
    """The run waits for each tracker call: one taking seconds a step slowed every step without a
    word until it passed tracker_timeout_s. Now the first slow call is one warning naming the
    tracker; it keeps every step, and a quick tracker beside it is not named."""
    slow, quick = Slow("slow", 0.6), Recorder("quick")
    tracking = tracking_of(tmp_path, slow, quick, timeout_s=2.0)  # slow past 0.5 s, a quarter of it
    tracking.open()
    publish_steps(tracking, 3)
    tracking.close()
    assert [s for s, _ in slow.metrics] == [0, 1, 2] and slow.closed and not tracking.dropped
    err = capsys.readouterr().err
    assert err.count("tracker 'slow' is slow") == 1, err
    assert "call=log_metrics" in err and "remove 'slow' from logging.report_to" in err
    assert "'quick'" not in err

SLOW_FLUSH = """
import sys, time
from pathlib import Path
from polyrl.tracking import TrackerSpec
from polyrl.tracking.session import RunTracking

out = Path(sys.argv[1])


class SlowFlush:
    def log_metrics(self, metrics, step):
        self.last = step

    def log_completions(self, records, step):
        pass

    def close(self):  # an upload of what it kept: longer than the process lives (a 1.5 s one could
        time.sleep(60)  # end before a loaded machine's interpreter exit, and write its file)
        (out / "flushed").write_text(str(self.last))


tracking = RunTracking(specs=[TrackerSpec(name="slow", create=lambda c: SlowFlush())], output_dir=out,
                       completions_per_step=0, run_name="r", project="p", config={}, timeout_s=0.3)
tracking.open()
tracking.publish({"step": 0, "loss": 0.5})
tracking.close()
"""


@pytest.mark.faults
def test_a_tracker_close_past_tracker_timeout_s_says_what_it_had_not_written_is_lost(tmp_path):
    """A tracker's close runs on a daemon thread: one that outlives tracker_timeout_s (a slow upload)
    is killed when the process exits and its data never reaches the tracker. Once that was only
    "failed to close"; now the warning says the data is lost and how to give it the time."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", SLOW_FLUSH, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "flushed").exists()  # the flush really was cut off at exit
    line = [ln for ln in proc.stderr.splitlines() if "tracker 'slow'" in ln]
    assert len(line) == 1, proc.stderr
    assert ("failed to close within logging.tracker_timeout_s = 0.3 s: what it had not written yet" in line[0]
            and "is lost when this process exits" in line[0] and "Fix: raise logging.tracker_timeout_s" in line[0]), line


@pytest.mark.faults
def test_a_real_ctrl_c_while_waiting_for_a_tracker_is_not_taken_for_the_trackers(tmp_path):
    """SIGINT reaches the main thread only: it stops the caller and the tracker is not blamed."""
    import os
    import signal
    import threading

    release = threading.Event()
    slow = Hostile("slow", "log_metrics", release=release)
    tracking = tracking_of(tmp_path, slow, timeout_s=30)
    tracking.open()
    # Python's own Ctrl-C handler, whatever this process inherited (a job started in the background
    # by a non-interactive shell ignores SIGINT, and Python then keeps it ignored)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            publish_steps(tracking, 1)
    finally:
        release.set()
        timer.cancel()
        signal.signal(signal.SIGINT, inherited)
    assert "slow" in tracking.trackers
    tracking.close()


@pytest.mark.faults
def test_a_completions_log_that_cannot_be_written_does_not_end_the_run(tmp_path, capsys):
    good = Recorder("good")
    tracking = tracking_of(tmp_path, good)
    tracking.completions_path.mkdir()  # writing it raises IsADirectoryError
    tracking.open()
    publish_steps(tracking, 2)
    tracking.close()
    assert [s for s, _ in good.metrics] == [0, 1] and [s for s, _ in good.completions] == [0, 1]
    err = capsys.readouterr().err
    assert err.count("completions log could not be written") == 3 and "IsADirectoryError" in err  # each try, and at close


@pytest.mark.faults
def test_completions_waiting_for_a_file_that_never_takes_them_are_bounded(tmp_path, capsys):
    """The records of the last ``UNWRITTEN_STEPS`` failed steps wait; older ones are dropped, named."""
    from polyrl.tracking.session import UNWRITTEN_STEPS

    tracking = tracking_of(tmp_path)
    tracking.completions_path.mkdir()
    failed = UNWRITTEN_STEPS + 2  # steps 0 .. failed - 1
    publish_steps(tracking, failed)
    err = capsys.readouterr().err
    assert "dropped_steps=0" in err and "dropped_steps=1" in err and "dropped_steps=2" not in err
    tracking.completions_path.rmdir()  # the cause fixed: the waiting steps are written with the next
    tracking.collect(failed, ["q"], [completion("a")], type("S", (), {"per_reward": {}, "total": [1.0]}), [0.0], 0)
    tracking.publish({"step": failed, "loss": 0.5})
    steps = [json.loads(line)["step"] for line in tracking.completions_path.read_text().splitlines()]
    assert steps == list(range(2, failed + 1))


class _CutShort:
    """A file whose first write puts half its data on disk, then fails as a full disk does."""

    def __init__(self, real):
        self.real, self.failed = real, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.real.close()

    def write(self, data):
        if not self.failed:
            self.failed = True
            self.real.write(data[:len(data) // 2])
            self.real.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real.write(data)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _fail_once(monkeypatch, name: str, calls: int = 1) -> None:
    """``strict_json``'s ``open`` of ``name`` for appending cuts its write short once, at call ``calls``."""
    import builtins

    from polyrl import strict_json

    seen = []

    def flaky_open(file, mode="r", *args, **kwargs):
        real = builtins.open(file, mode, *args, **kwargs)
        if str(file).endswith(name) and "a" in mode:
            seen.append(file)
            if len(seen) == calls:
                return _CutShort(real)
        return real

    monkeypatch.setattr(strict_json, "open", flaky_open, raising=False)


@pytest.mark.faults
def test_a_completions_write_that_fails_once_loses_no_record_and_leaves_no_half_line(tmp_path, capsys,
                                                                                      monkeypatch):
    """A full disk once turned the file off for the rest of the run (every later step lost) and
    left half a line, which the next record would have been glued to. The failed step's records
    are kept and written with the next step's, with a warning."""
    good = Recorder("good")
    tracking = tracking_of(tmp_path, good)
    _fail_once(monkeypatch, clog.FILE_NAME, calls=2)
    tracking.open()
    publish_steps(tracking, 4)
    tracking.close()
    lines = tracking.completions_path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3]
    assert [json.loads(line)["completion"] for line in lines] == ["a0", "a1", "a2", "a3"]
    err = capsys.readouterr().err
    assert err.count("completions log could not be written") == 1 and "No space left on device" in err
    assert [s for s, _ in good.completions] == [0, 1, 2, 3]


@pytest.mark.faults
def test_the_last_steps_completions_whose_write_failed_are_written_at_close(tmp_path, capsys, monkeypatch):
    """The failed step's records wait for the next step's write; after the last step there is none,
    so closing the run tries once more (they were lost, the warning having said they would be written)."""
    tracking = tracking_of(tmp_path)
    _fail_once(monkeypatch, clog.FILE_NAME, calls=3)
    publish_steps(tracking, 3)
    tracking.close()
    lines = tracking.completions_path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]
    assert capsys.readouterr().err.count("completions log could not be written") == 1


@pytest.mark.faults
def test_completions_that_cannot_be_written_at_close_are_named_as_lost(tmp_path, capsys):
    tracking = tracking_of(tmp_path)
    tracking.completions_path.mkdir()
    publish_steps(tracking, 2)
    tracking.close()
    err = capsys.readouterr().err
    assert "the waiting records are lost" in err and "lost_steps=0,1" in err


def test_an_append_that_fails_part_way_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """For every JSON-lines file of a run (metrics.jsonl too): no half line stays behind."""
    from polyrl import strict_json

    path = tmp_path / "metrics.jsonl"
    strict_json.append_lines(path, [{"step": 1}])
    _fail_once(monkeypatch, "metrics.jsonl")
    with pytest.raises(OSError, match="No space left"):
        strict_json.append_lines(path, [{"step": 2, "text": "x" * 100}])
    assert path.read_text() == '{"step": 1}\n'
    strict_json.append_lines(path, [{"step": 2}])
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


# --- end to end: `polyrl train` with hostile trackers and hostile text ---------------------------

HOSTILE_TRACKERS = '''
import os, sys, threading
from pathlib import Path
from polyrl.hookspecs import hookimpl
from polyrl.tracking import TrackerSpec

class Boom(BaseException):
    pass

ACTS = {  # name: (method, what it does at step 1, the first)
    "exit_log": ("log_metrics", lambda: sys.exit(4)),
    "base_completions": ("log_completions", lambda: (_ for _ in ()).throw(Boom("evil base"))),
    "kbi_log": ("log_metrics", lambda: (_ for _ in ()).throw(KeyboardInterrupt())),
    "osexit_completions": ("log_completions", lambda: os._exit(9)),
    "exit_close": ("close", lambda: sys.exit(5)),
    "hang_log": ("log_metrics", lambda: (Path(os.environ["REACHED"]).touch(), threading.Event().wait())),
}

class Tracker:
    def __init__(self, name):
        self.method, self.act = ACTS[name]
    def _maybe(self, method, step=1):
        if method == self.method and step == 1:
            self.act()
    def log_metrics(self, metrics, step):
        self._maybe("log_metrics", step)
    def log_completions(self, records, step):
        self._maybe("log_completions", step)
    def close(self):
        self._maybe("close")

@hookimpl
def polyrl_register_trackers(register):
    for name in ACTS:
        register(TrackerSpec(name=name, create=lambda ctx, name=name: Tracker(name)))
'''


@pytest.mark.faults
@pytest.mark.slow
def test_cli_run_survives_trackers_that_exit_raise_base_exceptions_or_hang(tmp_path, tiny_model_dir):
    """Once: sys.exit in a tracker ended `polyrl train` with its code and nothing saved, and a
    tracker stuck in log_metrics hung the run even through SIGTERM. Now each is dropped with one
    warning; a real SIGTERM while one hangs stops the run, checkpointed, exit 0."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "polyrl_hostile_trackers.py").write_text(HOSTILE_TRACKERS)
    write_dist(site, "polyrl-hostile-trackers", "1.0", {"polyrl.trackers": {"hostile": "polyrl_hostile_trackers"}})
    names = ["exit_log", "base_completions", "kbi_log", "osexit_completions", "exit_close", "hang_log"]
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
        f'[train]\nsteps = 1000\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 0\noutput_dir = "{out}"\n'
        f'[logging]\nreport_to = {json.dumps(names)}\ntracker_timeout_s = 3\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "REACHED": str(tmp_path / "reached")}
    env.pop("POLYRL_LOAD_PLUGINS", None)
    env.pop("POLYRL_DISABLE_PLUGINS", None)
    proc = subprocess.Popen([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stderr, _ = signal_when_reached(proc, tmp_path / "reached", wait_s=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "error:" not in stderr, stderr[-3000:]
    assert "stop requested; finishing the current step" in stderr
    for name in names[:-2]:
        assert stderr.count(f"tracker '{name}' failed and was dropped") == 1, (name, stderr[-3000:])
    assert stderr.count("tracker 'hang_log' failed and was dropped") == 1
    assert "did not return within 3 s" in stderr and "SystemExit(4)" in stderr and "os._exit(9)" in stderr
    assert stderr.count("tracker 'exit_close' failed to close") == 1
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (out / "checkpoints" / "step-00000001" / "COMPLETE").exists() and (out / "model").is_dir()


WEIRD_BACKEND = '''
import attrs
import polyrl_toy
from polyrl.hookspecs import hookimpl

class Weird(polyrl_toy.ToyPlugin):
    """The toy backend whose completion text holds a lone surrogate and 200,000 more characters."""

    @hookimpl
    def generate(self, engine, prompts, sampling):
        out = polyrl_toy.generate(engine, prompts, sampling)
        return [attrs.evolve(c, text="\\ud800 lone " + "x" * 200_000) for c in out]

PLUGIN = Weird("weird")
'''


@pytest.mark.faults
def test_cli_run_with_a_lone_surrogate_and_a_huge_completion_text_finishes(tmp_path):
    """Once: `UnicodeEncodeError: surrogates not allowed` from completions.jsonl's writer ended
    the run with a traceback and no checkpoint; a 5 MB text was logged whole every step."""
    import os
    import subprocess
    import sys

    from toy_dist import install_toy_dists

    site = install_toy_dists(tmp_path / "site")
    (site / "polyrl_weird_backend.py").write_text(WEIRD_BACKEND)
    write_dist(site, "polyrl-weird", "1.0", {"polyrl.backends": {"weird": "polyrl_weird_backend:PLUGIN"}})
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        '[model]\npath = "toy-model"\n[backends]\ntrain = "weird"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "toy_sevens"\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\noutput_dir = "{out}"\n'
        '[logging]\nreport_to = ["tensorboard"]\ncompletions_per_step = 2\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "POLYRL_DISABLE_PLUGINS": "broken,badreg"}
    env.pop("POLYRL_LOAD_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the toy backend has no tokenizer: the one warning says control characters go unchecked
    warned = [x for x in proc.stderr.lower().splitlines() if "warning" in x and "are not checked" not in x]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr and not warned, warned
    assert (out / "checkpoints" / "step-00000002" / "COMPLETE").exists()
    lines = (out / "completions.jsonl").read_bytes().decode("utf-8").splitlines()  # strict UTF-8
    assert len(lines) == 4 and all(len(line) < clog.MAX_TEXT_CHARS + 1000 for line in lines)
    text = json.loads(lines[0])["completion"]
    assert text.startswith("\ufffd lone ") and clog.cut_marker(200_007 - clog.MAX_TEXT_CHARS) in text
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events and sum(e.stat().st_size for e in events) < 4 * clog.MAX_TEXT_CHARS + 100_000


# --- hostile metrics and trackers that edit what they get ----------------------------------------


def test_hostile_metric_values_and_names_reach_tensorboard_or_are_skipped_with_one_warning(tmp_path, capsys):
    """Once: numpy scalars (a backend's or reward's own metrics) never reached a tracker, silently,
    and an int past float range raised OverflowError out of the step. Read back with TensorBoard's
    own reader."""
    pytest.importorskip("tensorboard")
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.registry import get_registry

    registry = get_registry()
    tracking = RunTracking(specs=[registry.trackers_by_name()["tensorboard"]], output_dir=tmp_path,
                           completions_per_step=0, run_name="r", project="p", config={})
    long_name = "long/" + "n" * 300
    hostile = {"np32": np.float32(1.5), "np64": np.float64(2.5), "npint": np.int64(7), "npbool": np.bool_(True),
               "with space/and slash": 3.0, "unicode/précision ü 🚀": 4.0, long_name: 5.0, "flag": False,
               "nan": float("nan"), "inf": float("-inf"), "none": None, "text": "abc", "huge_int": 10 ** 400}
    tracking.open()
    for step in range(2):
        tracking.publish({"step": step, **hostile})
    tracking.close()
    assert tracking.trackers == {}  # closed normally, not dropped
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    want = {"np32": 1.5, "np64": 2.5, "npint": 7.0, "npbool": 1.0, "with space/and slash": 3.0,
            "unicode/précision ü 🚀": 4.0, long_name: 5.0, "flag": 0.0}
    assert got == {tag: [(0, v), (1, v)] for tag, v in want.items()}
    err = capsys.readouterr().err
    assert "dropped" not in err
    for key in ("text", "huge_int"):  # left out with one warning each, not one per step
        assert err.count(f"metric={key}") == 1, err
    assert "metric=nan" not in err and "metric=none" not in err  # a skipped step's NaN loss is routine


def test_each_tracker_gets_its_own_copy_of_the_metrics_and_records(tmp_path):
    """Once: every tracker got the same dict and records list, so one that edited them (popped a
    key, rewrote a completion) changed what the trackers after it logged."""

    class Editor(Recorder):
        def log_metrics(self, metrics, step):
            metrics.pop("loss")
            metrics["injected"] = 1.0
            super().log_metrics(metrics, step)

        def log_completions(self, records, step):
            records[0]["completion"] = "EDITED"
            records.append({"step": step})
            super().log_completions(records, step)

    editor, after = Editor("editor"), Recorder("after")
    tracking = tracking_of(tmp_path, editor, after)
    tracking.open()
    publish_steps(tracking, 2)
    tracking.close()
    assert [m for _, m in after.metrics] == [{"loss": 0.5}, {"loss": 0.5}]
    assert [[r["completion"] for r in rs] for _, rs in after.completions] == [["a0"], ["a1"]]
    lines = [json.loads(line) for line in tracking.completions_path.read_text().splitlines()]
    assert [r["completion"] for r in lines] == ["a0", "a1"]


def test_mlflow_names_are_names_mlflow_takes():
    """Once: ``eval/pass@4`` (any run with eval.samples) made MLflow refuse the whole batch and the
    tracker was dropped at its first step; so did a name past 250 characters."""
    from polyrl.tracking.mlflow import MAX_NAME_CHARS, mlflow_name

    assert mlflow_name("eval/pass@4") == "eval/pass_at_4"
    assert mlflow_name("reward/f1 (v2)/mean") == "reward/f1 _v2_/mean"
    assert mlflow_name("a//b/") == "a/b" and mlflow_name("/x/./y/..") == "x/_/y/_" and mlflow_name("..") == "_"
    assert mlflow_name("précision/ü") == "précision/ü" and mlflow_name("lr") == "lr"
    assert len(mlflow_name("x" * 300)) == MAX_NAME_CHARS and mlflow_name("@@@") == "_at__at__at_"
    validation = pytest.importorskip("mlflow.utils.validation")
    for name in ("eval/pass@4", "a//b/", "/x/./y/..", "x" * 300, "emoji 🚀", "tab\there", "x" * 249 + "/y"):
        validation._validate_metric_name(mlflow_name(name))  # MLflow's own check
        validation._validate_length_limit("Metric name", validation.MAX_ENTITY_KEY_LENGTH, mlflow_name(name))


def test_mlflow_names_of_parts_read_alike_are_told_apart_under_one_folder_each():
    """A part (``judge [gpt]``) that reads as another's under the same parent once refused characters
    are ``_`` gets its own suffix, the same for each of its metrics (one it alone logs included), and
    the first keeps the plain name; a folder clash on a file store is still left out."""
    from polyrl.tracking.mlflow import MetricNames

    names = MetricNames(file_store=True)
    assert names.name("reward/judge (gpt)/mean") == "reward/judge _gpt_/mean"
    assert names.name("reward/judge [gpt]/std") == "reward/judge _gpt__2/std"
    assert names.name("reward/judge [gpt]/mean") == "reward/judge _gpt__2/mean"
    assert names.name("reward/judge {gpt}/only_here") == "reward/judge _gpt__3/only_here"
    assert names.name("reward/judge (gpt)/std") == "reward/judge _gpt_/std"
    assert names.name("eval/pass@4") == "eval/pass_at_4" and names.name("loss") == "loss"
    assert names.name("reward") is None  # a file where reward/... needs a folder
    assert names.name("reward/judge [gpt]/mean") == "reward/judge _gpt__2/mean"  # decided once
    # a file store's folders on a disk that ignores case (macOS, Windows): Judge is judge's folder there
    stored = MetricNames(file_store=True)
    assert [stored.name(f"reward/{label}/mean") for label in ("judge", "Judge", "JUDGE", "judge")] == [
        "reward/judge/mean", "reward/Judge_2/mean", "reward/JUDGE_3/mean", "reward/judge/mean"]
    database = MetricNames(file_store=False)  # a database store tells them apart
    assert database.name("reward/judge/mean") == "reward/judge/mean" and database.name("reward/Judge/mean") == \
        "reward/Judge/mean"


def test_tensorboard_after_a_resume_shows_each_step_once_with_the_resumed_runs_values(tmp_path):
    """Once: a run killed after step 3 and resumed from its step-2 checkpoint showed steps 2 and 3
    twice in TensorBoard (the dead lineage's values beside the resumed run's)."""
    pytest.importorskip("tensorboard")
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.registry import get_registry

    spec = get_registry().trackers_by_name()["tensorboard"]
    # the crashed run (4 steps logged), then its resume after its step-2 checkpoint
    for taken, steps, loss in ((0, range(1, 5), 1.0), (2, range(3, 5), 2.0)):
        tracking = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r",
                               project="p", config={})
        tracking.open(taken)
        for step in steps:
            tracking.publish({"step": step, "loss": loss})
        tracking.close()
        time.sleep(1.1)  # event file names carry the second they were opened
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 1.0), (3, 2.0), (4, 2.0)]


def test_tensorboard_hides_the_dead_lineage_when_a_resume_ends_before_its_first_step(tmp_path):
    """Once: a resume that failed or was stopped before its first step (a reward that cannot start,
    Ctrl-C while sampling) had rewound metrics.jsonl to its checkpoint and moved the later checkpoints
    aside, but TensorBoard still drew the crashed run's steps past the checkpoint as the run's: the
    session start came only with the first event logged, and none was."""
    pytest.importorskip("tensorboard")
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.registry import get_registry

    spec = get_registry().trackers_by_name()["tensorboard"]
    for taken, steps in ((0, range(1, 5)), (2, ())):  # crashed after 4 steps; resumed at 2, ended at once
        tracking = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r",
                               project="p", config={})
        tracking.open(taken, {"step": 2, "loss": 2.0} if taken else None)
        for step in steps:
            tracking.publish({"step": step, "loss": float(step)})
        tracking.close(failed=bool(taken))
        time.sleep(1.1)  # event file names carry the second they were opened
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 2.0)]


@pytest.mark.parametrize("scale", [1, 3])
def test_tensorboard_keeps_the_resumed_steps_curves_when_the_resume_logs_that_step_first(tmp_path, scale):
    """A run killed in its evaluation after training, after its last checkpoint, resumes at that
    step and logs the evaluation there first: the session start at that step hid the step's own
    training curves in TensorBoard (read back by its own reader). ``scale``: a TRL run's updates
    per step, its trackers' step axis."""
    pytest.importorskip("tensorboard")
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.registry import get_registry

    spec = get_registry().trackers_by_name()["tensorboard"]
    crashed = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r", project="p",
                          config={}, step_scale=scale)
    crashed.open(0)
    crashed.publish_at({"eval/accuracy": 0.25}, step=0)
    for step in (1, 2, 3, 4):
        crashed.publish({"step": step, "loss": float(step)})
    crashed.publish({"step": 5, "loss": 99.0})  # a step past the last checkpoint: its lineage died
    crashed.close()
    time.sleep(1.1)  # event file names carry the second they were opened
    resumed = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r", project="p",
                          config={}, step_scale=scale)
    resumed.open(4)
    resumed.publish_at({"eval/accuracy": 0.75}, step=4)  # the evaluation after training, at step 4
    resumed.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(s * scale, float(s)) for s in (1, 2, 3, 4)]
    assert [(e.step, e.value) for e in acc.Scalars("eval/accuracy")] == [(0, 0.25), (4 * scale, 0.75)]


@pytest.mark.parametrize(("name", "fix"), [("none", "polyrl's report_to = [] (metrics.jsonl only)"),
                                           ("all", "polyrl's list of the trackers wanted")])
def test_trls_report_to_spellings_name_polyrls(name, fix):
    from polyrl.errors import ConfigError
    from polyrl.registry import get_registry
    from polyrl.tracking.session import resolve_specs

    with pytest.raises(ConfigError) as info:
        resolve_specs(get_registry(), [name])
    assert info.value.field == "logging.report_to" and f"TRL's report_to = {name!r} is {fix}" in str(info.value)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40))
def test_tensorboards_text_tab_shows_completions_as_written(text):
    """TensorBoard renders the completions table as Markdown: ``2*3*4`` showed as 2<em>3</em>4 and
    ``**24**`` in bold, so a format reward's markup could not be checked there. Rendered with
    TensorBoard's own ``markdown_to_safe_html``, each cell reads back as the text."""
    import html
    import re

    pytest.importorskip("tensorboard")
    from tensorboard import plugin_util

    from polyrl.tracking.completions import markdown_table

    for sample in (text, "What is 2*3*4? **24** `x` _i_ [a](b) # h 1. x > y \\ {k} !z"):
        record = {"step": 0, "prompt": "p", "completion": sample, "rewards": {}, "reward": 1.0, "advantage": 0.0,
                  "finish_reason": "stop"}
        rendered = plugin_util.markdown_to_safe_html(markdown_table([record]))
        cells = re.findall(r"<td>(.*?)</td>", rendered, flags=re.S)
        assert html.unescape(cells[2]).strip() == sample.strip(), rendered  # Markdown trims cells, not us


def test_tensorboards_completions_table_keeps_its_rows_through_carriage_returns_entities_and_escapes():
    """A ``\r`` in a completion (a model's ``\r\n``, a progress-bar imitation) ended the Markdown
    table row: the rest of the completion, its rewards, reward and advantage were drawn in a row
    of their own, each under the wrong column. ``&amp;`` read as ``&`` and an ANSI escape as
    ``?[31m``. Rendered with TensorBoard's own ``markdown_to_safe_html``: one row per record, each
    column where it belongs, and the completion as written (line endings as line breaks, control
    characters as their pictures)."""
    import html
    import re

    pytest.importorskip("tensorboard")
    from tensorboard import plugin_util

    from polyrl.tracking.completions import markdown_table

    samples = {"2+2=\r4\r\n|done": "2+2=\n4\n|done", "&amp; &#124; a & b": "&amp; &#124; a & b",
               "\x1b[31mred\x1b[0m\x00\x7f": "\u241b[31mred\u241b[0m\u2400\u2421", "ok": "ok",
               "<b>24</b> <i>x</i> <script>": "<b>24</b> <i>x</i> <script>"}
    records = [{"step": 3, "prompt": f"p{i}", "completion": text, "rewards": {"f": float(i)}, "reward": float(i),
                "advantage": -1.5, "finish_reason": "stop"} for i, text in enumerate(samples)]
    rendered = plugin_util.markdown_to_safe_html(markdown_table(records))
    rows = re.findall(r"<tr>(.*?)</tr>", rendered.split("<tbody>")[1], flags=re.S)
    assert len(rows) == len(records), rendered
    for i, (row, shown) in enumerate(zip(rows, samples.values())):
        cells = [html.unescape(c.strip()) for c in re.findall(r"<td>(.*?)</td>", row, flags=re.S)]
        assert cells[:2] == ["3", f"p{i}"] and cells[3:] == [str(float(i)), "-1.5", str(float(i)), "stop"], row
        assert re.sub(r"<br\s*/?>\n?", "\n", cells[2]) == shown, row
    assert "<b>" not in rendered and "<i>" not in rendered, rendered  # markup shown as text, not drawn as HTML


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # pytest's own thread hook
def test_tensorboards_writer_thread_on_a_full_disk_is_one_warning_not_a_traceback(tmp_path, capfd):
    """tensorboard's writer thread raised the disk's OSError in itself too: a 30-line traceback on
    the terminal beside the documented "tracker dropped" warning. The event file is pointed at
    /dev/full, where every write fails with ENOSPC, as on a full disk."""
    pytest.importorskip("tensorboard")
    import os
    import time

    from polyrl.registry import get_registry

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    tracking = RunTracking(specs=[get_registry().trackers_by_name()["tensorboard"]], output_dir=tmp_path,
                           completions_per_step=0, run_name="r", project="p", config={})
    tracking.open()
    tracking.publish({"step": 0, "loss": 1.0})
    events = next((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    events.unlink()
    events.symlink_to("/dev/full")
    for step in range(1, 4):
        tracking.publish({"step": step, "loss": 1.0})
        time.sleep(0.2)
    tracking.close()
    err = capfd.readouterr().err
    assert "tracker 'tensorboard' failed and was dropped" in err
    assert "No space left on device" in err
    assert "Traceback" not in err and "Exception in thread" not in err, err


def test_trackio_says_where_its_metrics_go_without_a_write_token(tmp_path, monkeypatch, capsys):
    """trackio's init sends metrics to a Space or a server when TRACKIO_SPACE_ID / TRACKIO_SERVER_URL
    is set: the start line says so rather than naming a local store it does not write; the server
    URL's query (trackio's write_token) is left out."""
    from polyrl.tracking.trackio import say_where

    monkeypatch.delenv("TRACKIO_SPACE_ID", raising=False)
    monkeypatch.setenv("TRACKIO_SERVER_URL", "https://trackio.example:8443/base?write_token=s3cr3t-token")
    say_where(tmp_path, "p")
    err = capsys.readouterr().err
    assert "TRACKIO_SERVER_URL" in err and "https://trackio.example:8443/base" in err and "s3cr3t" not in err, err
    monkeypatch.setenv("TRACKIO_SPACE_ID", "me/space")
    say_where(tmp_path, "p")
    err = capsys.readouterr().err
    assert "TRACKIO_SPACE_ID" in err and "me/space" in err and str(tmp_path) not in err, err


@pytest.mark.parametrize(("uri", "kind"), [
    ("file:///tmp/mlruns", "file"), ("/tmp/mlruns", "file"), ("./mlruns", "file"), ("C:\\runs\\mlruns", "file"),
    ("sqlite:///mlflow.db", "database"), ("postgresql+psycopg2://u@h/db", "database"), ("mysql://h/db", "database"),
    ("http://127.0.0.1:5000", "server"), ("https://mlflow.example", "server"), ("databricks", "server"),
    ("databricks://profile", "server"),
])
def test_mlflow_store_kind_of_a_tracking_uri(uri, kind):
    """Only MLflow's file store cannot hold TRL's ``reward`` beside ``reward/<f>/mean``; the
    tracking URI says which store it is, but for a tracking server only the server knows."""
    from polyrl.tracking.mlflow import store_kind

    assert store_kind(uri) == kind


@pytest.mark.parametrize(("answer", "kind"), [
    ((200, '{"store_type": "SqlStore", "workspaces_enabled": false}'), "database"),
    ((200, '{"store_type": "FileStore"}'), "file"), ((200, '{"store_type": null}'), "file"),
    ((404, "Not Found"), "file"), ((200, "<html>a proxy</html>"), "file"),
])
def test_a_tracking_servers_store_is_what_its_server_info_says(answer, kind):
    """An MLflow 3 tracking server says its store in /api/3.0/mlflow/server-info; an older server,
    a proxy's page or no answer is taken for a file store (``mlflow server`` falls back to one)."""
    import http.server
    import threading

    from polyrl.tracking.mlflow import SERVER_INFO, server_store

    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            body = answer[1].encode()
            self.send_response(answer[0])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server_store(f"http://127.0.0.1:{server.server_address[1]}/") == kind
        assert asked == [SERVER_INFO]
    finally:
        server.shutdown()
        server.server_close()
    assert server_store("http://127.0.0.1:9", timeout_s=1) == "file"  # nothing listens there


# --- an evaluation's completions in the trackers --------------------------------------------------


def _tensorboard_texts(root: Path, tag: str) -> list[tuple[int, str]]:
    """(step, text) of each text summary ``tag`` under ``root``, read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    return [(event.step, tensor_util.make_ndarray(value.tensor).item().decode("utf-8"))
            for path in sorted(root.glob("**/events.out*")) for event in EventFileLoader(str(path)).Load()
            for value in event.summary.value if value.tag == tag]


def test_an_evaluations_completions_reach_the_trackers_as_their_own_table(tmp_path):
    """Once: an evaluation's completions went to ``eval_completions.jsonl`` only, never to a tracker,
    where the training ones go. Now TensorBoard gets them as text ``eval_completions`` at the step
    evaluated (0: before training), beside the training ``completions``: a NaN reward as an empty
    cell, a lone surrogate as U+FFFD, a huge text cut as in completions.jsonl. With the completions
    log off (``completions_per_step = 0``, or TRL's ``log_completions=False``) neither table goes."""
    import numpy as np

    pytest.importorskip("tensorboard")
    from polyrl.evaluation import completion_records
    from polyrl.registry import get_registry

    records = completion_records("before", 0, ["Held 1 + 1?", "Held 2 + 2?"], ["2 \ud800", "x" * 200_000],
                                 np.array([1.0, float("nan")]), 1, True, 1.0)
    for per_step, folder in ((2, tmp_path / "on"), (0, tmp_path / "off"), (2, tmp_path / "trl_off")):
        tracking = RunTracking(specs=[get_registry().trackers_by_name()["tensorboard"]], output_dir=folder,
                               completions_per_step=per_step, run_name="r", project="p", config={})
        tracking.log_completions = folder.name != "trl_off"  # TRL's log_completions=False: no table either
        tracking.open()
        tracking.hold_evaluation(records, 0)
        tracking.publish({"step": 1, "loss": 0.5})
        tracking.close()
    assert _tensorboard_texts(tmp_path / "off", "eval_completions") == []
    assert _tensorboard_texts(tmp_path / "trl_off", "eval_completions") == []
    texts = _tensorboard_texts(tmp_path / "on", "eval_completions")
    assert [step for step, _ in texts] == [0]
    rows = texts[0][1].splitlines()
    columns = "phase | after_steps | prompt_index | sample | greedy | prompt | completion | reward | correct"
    assert rows[0].replace("\\_", "_") == f"| {columns} |" and len(rows) == 4, rows[:3]
    assert "Held 1 \\+ 1?" in rows[2] and "2 \ufffd" in rows[2] and "| True |" in rows[2]
    assert "| nan |" not in rows[3] and "| False |" in rows[3]  # the unscored sample: no reward, not correct
    # cut as in completions.jsonl, then to the table's cell size (``logging.table_cell_chars``)
    dropped = clog.MAX_TEXT_CHARS + len(clog.cut_marker(200_000 - clog.MAX_TEXT_CHARS)) - clog.TABLE_CELL_CHARS
    assert f"{dropped} more characters cut by polyrl: logging\\.table\\_cell\\_chars" in rows[3]
    assert len(rows[3]) < clog.TABLE_CELL_CHARS + 1000


def test_a_resume_at_an_evaluated_step_keeps_that_evaluations_table_in_tensorboard(tmp_path):
    """A run evaluated at step 2, killed after step 3 and resumed from its step-2 checkpoint: the
    session start at step 2 hides what the dead run logged there, so the evaluation's table at step
    2 (which the resume does not run again) is logged again from the rewound ``eval_completions.jsonl``,
    once, as the step's kept completions are. Read back with TensorBoard's own reader."""
    pytest.importorskip("tensorboard")
    import time

    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl import evaluation
    from polyrl.registry import get_registry

    spec = get_registry().trackers_by_name()["tensorboard"]
    records = evaluation.completion_records("during", 2, ["Held 1"], ["two"], np.array([1.0]), 1, True, 1.0)
    crashed = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=2, run_name="r", project="p",
                          config={})
    crashed.open(0)
    for step in (1, 2, 3):
        if step == 2:
            evaluation.append_records(tmp_path, records)
            crashed.hold_evaluation(records, 2)
        crashed.publish({"step": step, "loss": float(step)})
    crashed.close()
    time.sleep(1.1)  # event file names carry the second they were opened
    resumed = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=2, run_name="r", project="p",
                          config={})
    resumed.open(2, kept={"step": 2, "loss": 2.0})
    resumed.publish({"step": 3, "loss": 30.0})
    resumed.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    # the text plugin's reader, which purges a dead lineage's text too (the scalars' reader keeps all text)
    from tensorboard.backend.event_processing import plugin_event_accumulator

    texts = plugin_event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    texts.Reload()
    tables = texts.Tensors("eval_completions")
    assert [t.step for t in tables] == [2] and "Held 1" in tables[0].tensor_proto.string_val[0].decode()


def test_an_evaluations_table_holds_its_first_256_records_not_every_one(tmp_path):
    """An evaluation of 100 prompts x 3 samples: the trackers' table holds the first 256 records
    (every tracker gets a copy at every evaluation; ``eval_completions.jsonl`` keeps all 300)."""
    import numpy as np

    pytest.importorskip("tensorboard")
    from polyrl.evaluation import completion_records
    from polyrl.registry import get_registry

    prompts = [f"Held {i}" for i in range(100)]
    records = completion_records("during", 1, prompts, ["c"] * 300, np.ones(300), 3, False, 1.0)
    tracking = RunTracking(specs=[get_registry().trackers_by_name()["tensorboard"]], output_dir=tmp_path,
                           completions_per_step=4, run_name="r", project="p", config={})
    tracking.open()
    tracking.hold_evaluation(records, 1)
    tracking.close()
    [(step, text)] = _tensorboard_texts(tmp_path, "eval_completions")
    rows = text.splitlines()[2:]
    assert step == 1 and len(rows) == 256 and "Held 0 |" in rows[0] and "Held 85 |" in rows[-1], rows[-1][:80]


def test_tensorboard_leaves_out_values_past_float32_with_a_warning_not_inf(tmp_path, capsys):
    """A TensorBoard scalar is a float32: a finite reward mean of 1e100 (polyrl trains on any finite
    score) was written as inf and read back by TensorBoard as inf, a value no step had."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.tracking.spec import TrackerContext
    from polyrl.tracking.tensorboard import TensorBoardTracker

    tracker = TensorBoardTracker(TrackerContext(output_dir=tmp_path, run_name="r", project="p", config={}))
    tracker.log_metrics({"reward_mean": 1e100, "reward_std": -1e300, "loss": 3e38}, step=1)
    tracker.log_metrics({"reward_mean": 1e100, "reward_std": 0.5, "loss": 0.25}, step=2)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    read = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert read == {"reward_std": [(2, 0.5)], "loss": [(1, pytest.approx(3e38)), (2, 0.25)]}
    warned = [line for line in capsys.readouterr().err.splitlines() if "left out of TensorBoard" in line]
    assert len(warned) == 2 and "metric=reward_mean" in warned[0] and "metric=reward_std" in warned[1], warned
