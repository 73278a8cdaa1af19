"""How a run ended, recorded in ``output_dir/run_plan.json`` and said by ``polyrl report``:
finished, stopped by its own code (an observer, a TRL callback's should_training_stop), stopped
by a signal, or failed. Before, every run short of its train.steps was named "stopped (Ctrl-C,
SIGTERM), crashed, or still running", a run early stopping ended as asked included. Real runs of
the toy backend."""

from __future__ import annotations

import json

import pytest
from observer_util import AskAfterStep

from polyrl import run_plan
from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import RewardError
from polyrl.rewards.functions import function_reward_plugin
from polyrl.run_observer import StepAsk
from polyrl.trainer import Trainer
from test_step_numbering import _stopper, toy_run


def _said(out, tmp_path, capsys) -> str:
    capsys.readouterr()
    assert main(["report", str(out), "--output", str(tmp_path / "report.png")]) == 0
    return capsys.readouterr().out


def _recorded(out) -> dict:
    return json.loads((out / run_plan.FILE_NAME).read_text())


def test_a_finished_run_records_it_and_the_report_names_nothing_unfinished(toy, tmp_path, capsys):
    Trainer(RunConfig.from_dict(toy_run(tmp_path, steps=2, checkpoint_every=0))).run(progress=False)
    out = tmp_path / "run"
    assert _recorded(out) == {"train.steps": 2, "ended": {"how": "finished", "step": 2}}
    assert "not finished" not in _said(out, tmp_path, capsys)


def test_a_run_its_own_code_stopped_is_named_as_such_not_as_a_ctrl_c(toy, tmp_path, capsys):
    trainer = Trainer(RunConfig.from_dict(toy_run(tmp_path, steps=5, checkpoint_every=0)))
    trainer.observers.append(AskAfterStep(2, StepAsk(stop=True, why="early stopping: no better for 2 evaluations")))
    assert trainer.run(progress=False)["stopped_early"]
    out = tmp_path / "run"
    said = _said(out, tmp_path, capsys)
    assert ("not finished: the run logged 2 of its 5 steps (train.steps): its own code asked it to stop after "
            "step 2 (early stopping: no better for 2 evaluations)") in said, said
    assert "Ctrl-C" not in said and "crashed" not in said
    assert _recorded(out)["ended"] == {"how": "stopped by its code", "step": 2,
                                       "by": "early stopping: no better for 2 evaluations"}


def test_a_run_stopped_by_a_signal_is_named_as_such(toy, tmp_path, capsys):
    holder: dict = {"stop_at": 2}
    data = toy_run(tmp_path, steps=5, checkpoint_every=0)
    data["rewards"] = [{"name": "stopper"}]
    holder["trainer"] = trainer = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    assert trainer.run(progress=False)["stopped_early"]
    out = tmp_path / "run"
    assert _recorded(out)["ended"] == {"how": "stopped by a signal", "step": 2}
    said = _said(out, tmp_path, capsys)
    assert ("not finished: the run logged 2 of its 5 steps (train.steps): it was stopped by a signal "
            "(Ctrl-C, SIGTERM) after step 2; continue it with polyrl train CONFIG --resume") in said, said


def test_a_run_that_failed_names_its_error(toy, tmp_path, capsys):
    def failing(completions, completion_ids, trainer_state, **kw):
        if trainer_state.global_step + 1 == 2:
            raise ValueError("the grader's service is down")
        return [0.5 + 0.1 * i for i in range(len(completions))]

    data = toy_run(tmp_path, steps=5, checkpoint_every=0)
    data["rewards"] = [{"name": "failing"}]
    data["eval"] = {"count": 0}
    with pytest.raises(RewardError):
        Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(failing),)).run(progress=False)
    out = tmp_path / "run"
    ended = _recorded(out)["ended"]
    assert ended["how"] == "failed" and ended["step"] == 1 and ended["error"].startswith("RewardError: ")
    said = _said(out, tmp_path, capsys)
    assert ("not finished: the run logged 1 of its 5 steps (train.steps): it stopped with an error after step 1 "
            "(RewardError: ") in said and "the grader's service is down" in said, said
    assert "Ctrl-C" not in said


def test_a_record_of_another_stretch_of_the_run_or_none_keeps_the_general_sentence(tmp_path):
    from polyrl.report import unfinished

    (tmp_path / "run_plan.json").write_text(json.dumps(
        {"train.steps": 5, "ended": {"how": "stopped by its code", "step": 3, "by": "x"}}))
    assert unfinished(tmp_path, 2).endswith("stopped (Ctrl-C, SIGTERM), crashed, or is still running; continue "
                                            "it with polyrl train CONFIG --resume")
    (tmp_path / "run_plan.json").write_text(json.dumps({"train.steps": 5, "ended": {"how": "odd", "step": 2}}))
    assert "Ctrl-C, SIGTERM), crashed, or is still running" in unfinished(tmp_path, 2)
    (tmp_path / "run_plan.json").write_text(json.dumps({"train.steps": 5, "ended": None}))
    assert "it was killed (SIGKILL, the OOM killer, a lost machine), crashed, or is still running" in unfinished(
        tmp_path, 2)


def test_a_run_set_aside_by_a_fresh_start_keeps_its_record_and_the_report_there_says_how_it_ended(toy, tmp_path,
                                                                                                 capsys):
    """A fresh start in the output_dir moves the earlier run into previous/<time>/. Its run_plan.json
    stayed behind (and was overwritten by the new run's), so a report of the folder set aside read
    the steps from its checkpoint and named an early-stopped run as stopped by Ctrl-C or crashed."""
    first = Trainer(RunConfig.from_dict(toy_run(tmp_path, steps=5, checkpoint_every=0)))
    first.observers.append(AskAfterStep(2, StepAsk(stop=True, why="early stopping: no better for 2 evaluations")))
    assert first.run(progress=False)["stopped_early"]
    Trainer(RunConfig.from_dict(toy_run(tmp_path, steps=3, checkpoint_every=0))).run(progress=False)
    out = tmp_path / "run"
    (aside,) = (out / "previous").iterdir()
    assert _recorded(aside) == {"train.steps": 5, "ended": {"how": "stopped by its code", "step": 2,
                                                          "by": "early stopping: no better for 2 evaluations"}}
    assert _recorded(out) == {"train.steps": 3, "ended": {"how": "finished", "step": 3}}
    said = _said(aside, tmp_path, capsys)
    assert "its own code asked it to stop after step 2 (early stopping" in said, said
    assert "Ctrl-C" not in said
