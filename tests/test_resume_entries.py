"""The early resume refusal (a checkpoint written by another model or backend) through every entry
that resumes: the Python API's Trainer(config, resume=...) and `polyrl launch --resume` (torchrun,
gloo on the CPU). Each refuses before any engine loads, as one error; a matching resume goes on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crash_util import write_config
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.trainer import Trainer


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(the config, the output_dir) of a 1-step run with its checkpoint, made once."""
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")
    tmp = tmp_path_factory.mktemp("resume")
    config = write_config(tmp, tiny_model_dir, tmp / "run", steps=1)
    assert Trainer(RunConfig.from_toml(config)).run(progress=False)["steps"] == 1
    return config, tmp / "run"


@pytest.fixture()
def run_copy(finished, tmp_path) -> tuple[Path, Path]:
    """A private copy of that run (the same config, output_dir moved), so each test may resume it."""
    config, out = finished
    mine = tmp_path / "run"
    shutil.copytree(out, mine)
    text = config.read_text().replace(f'"{out}"', f'"{mine}"')
    (tmp_path / "run.toml").write_text(text)
    return tmp_path / "run.toml", mine


@pytest.fixture()
def no_engine(monkeypatch):
    import polyrl.trainer

    def refuse(*args, **kwargs):
        raise AssertionError("an engine was loaded before the resume was checked")

    monkeypatch.setattr(polyrl.trainer, "load_engines", refuse)


@pytest.mark.parametrize("change", [["model.path=\"elsewhere\""], ["backends.train=\"mlx\""]])
def test_the_api_refuses_a_changed_resume_before_any_engine_loads(run_copy, no_engine, change):
    config_path, out = run_copy
    if change[0].startswith("model.path"):
        shutil.copytree(Path(RunConfig.from_toml(config_path).model.path), config_path.parent / "elsewhere")
        change = [f'model.path="{config_path.parent / "elsewhere"}"']
    config = RunConfig.from_toml(config_path, overrides=change)
    with pytest.raises(ConfigError, match="config changed at resume") as caught:
        Trainer(config, resume="")
    assert "\n" not in str(caught.value)
    assert (out / "checkpoints" / "step-00000001").is_dir() and not (out / "previous").exists()


def test_a_resume_called_after_construction_is_refused_before_any_engine_loads(run_copy, no_engine):
    """Trainer(config).resume() (no resume= at construction) loaded both models, then refused: the
    models of a trainer whose output_dir holds a checkpoint now load at first use, after the check."""
    config_path, out = run_copy
    shutil.copytree(Path(RunConfig.from_toml(config_path).model.path), config_path.parent / "elsewhere")
    config = RunConfig.from_toml(config_path, overrides=[f'model.path="{config_path.parent / "elsewhere"}"'])
    trainer = Trainer(config)
    try:
        with pytest.raises(ConfigError, match="config changed at resume") as caught:
            trainer.resume()
        assert caught.value.field == "model.path"
    finally:
        trainer.lock.release()
    assert (out / "checkpoints" / "step-00000001").is_dir() and not (out / "previous").exists()


def test_the_api_resumes_when_given_resume_and_run(run_copy):
    """Trainer(config, resume="").run() checked the checkpoint, then started over: the run it was
    asked to continue was moved into previous/ and step 0 trained again."""
    config_path, out = run_copy
    config = RunConfig.from_toml(config_path, overrides=["train.steps=2"])
    summary = Trainer(config, resume="").run(progress=False)
    assert summary["steps"] == 2 and [m["step"] for m in summary["history"]] == [1, 2]
    assert not (out / "previous").exists()  # nothing set aside: it continued
    assert (out / "checkpoints" / "step-00000002").is_dir()


def test_what_a_run_shows_may_change_at_resume_and_is_said(run_copy):
    """The [logging] keys change what is shown, never what is trained (the completions log draws
    with a seed of its own, a resumed tracker run is a new one): they were refused as "config changed
    at resume in a way that breaks exact resumption". Now each is applied and said."""
    from structlog.testing import capture_logs

    config_path, out = run_copy
    changes = ['logging.step_line="full"', "logging.completions_per_step=1", "logging.tracker_timeout_s=30.0",
               'logging.run_name="renamed"']
    config = RunConfig.from_toml(config_path, overrides=["train.steps=2", *changes])
    with capture_logs() as logs:
        summary = Trainer(config, resume="").run(progress=False)
    assert [m["step"] for m in summary["history"]] == [1, 2]
    said = " ".join(e["event"] for e in logs if "config changed at resume" in e["event"])
    for change in ["logging.step_line 'short' -> 'full'", "logging.completions_per_step 4 -> 1",
                   "logging.tracker_timeout_s 60.0 -> 30.0", "logging.run_name None -> 'renamed'"]:
        assert change in said, said
    logged = [json.loads(line)["step"] for line in (out / "completions.jsonl").read_text().splitlines()]
    assert logged.count(1) == 4 and logged.count(2) == 1  # the new count from the resumed step on


def _launch(config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", str(config), "--nproc-per-node", "1",
                           "--resume", *extra], capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("change", ['backends.train="mlx"', 'model.max_length=512'])
def test_launch_refuses_a_changed_resume_as_one_line_before_torchrun(run_copy, change):
    """Each rank refused it (before its engines loaded), then torchrun printed its ChildFailedError
    traceback: now the launcher refuses once and starts no rank."""
    config_path, out = run_copy
    result = _launch(config_path, "--set", change)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "ChildFailedError" not in result.stderr, result.stderr[-2000:]
    assert len(errors) == 1 and "config changed at resume" in errors[0] and change.split("=")[0] in errors[0]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000001"]


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_launch_resumes_a_matching_run(run_copy):
    config_path, out = run_copy
    result = _launch(config_path, "--steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "checkpoints" / "step-00000002").is_dir() and not (out / "previous").exists()


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_launch_logs_each_applied_change_once(run_copy):
    """The launcher's early check and the rank's trainer both logged "config changed at resume:
    ... applied": every change showed twice. The launcher now refuses only; the rank says it."""
    config_path, out = run_copy
    result = _launch(config_path, "--set", "train.steps=2")
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line.split("config changed at resume: ", 1)[1] for line in result.stderr.splitlines()
            if "config changed at resume: " in line]
    assert any(c.startswith("train.steps 1 -> 2") for c in said), result.stderr[-3000:]
    assert len(said) == len(set(said)), said  # each once
    assert (out / "checkpoints" / "step-00000002").is_dir()


@pytest.mark.slow
def test_launch_passes_resume_weights_only_to_every_rank(run_copy):
    """The refusal's fix names --resume-weights-only, which `polyrl launch` did not take: it is
    checked by the launcher as a weights-only resume (a change a full resume refuses is applied)
    and handed to the ranks."""
    config_path, _ = run_copy
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", str(config_path), "--nproc-per-node", "1",
                             "--resume-weights-only", "--set", "model.max_length=512", "--dry-run"],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    command = result.stdout.strip().splitlines()[-1]
    assert "--resume-weights-only" in command.split() and "polyrl.cli train" in command
