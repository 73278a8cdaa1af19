"""One step numbering and one set of evaluation names across everything a run writes.

A step is numbered by the steps taken once it is done: the first step's line in metrics.jsonl is
step 1, as the checkpoint written after it (``step-00000001``), the ``after_steps`` of an
evaluation run after it, its completions, the trackers' step and ``polyrl report``'s x axis. The
evaluations before and after training are lines of metrics.jsonl (step 0 and the last step,
marked ``phase``) under the same ``eval/...`` names as the ones during training. Runs on the numpy
toy backend, with TensorBoard read back by its own reader.
"""

from __future__ import annotations

import json
import time
import re
from pathlib import Path

import pytest

from polyrl import evaluation, metrics_file
from polyrl.config import RunConfig
from polyrl.errors import RewardError
from polyrl.report import load_run, series
from polyrl.rewards.functions import function_reward_plugin
from polyrl.tracking import completions as clog
from polyrl.trainer import Trainer

TIMING = ("time/", "perf/", "tokens_per_s", "generate_seconds", "step_time", "eval/seconds")


def toy_run(tmp_path: Path, steps: int = 4, checkpoint_every: int = 2, every: int = 3, **logging) -> dict:
    return {
        "model": {"path": "toy-model"},
        "backends": {"train": "toy"},
        "generation": {"group_size": 2, "max_new_tokens": 6},
        "optimizer": {"lr": 8.0},
        "data": {"task": "arithmetic", "options": {"count": 32}},
        "rewards": [{"name": "toy_sevens"}],
        "eval": {"count": 3, "every": every, "reward": "toy_sevens", "samples": 2, "pass_k": 2,
                 "pass_threshold": 0.1},
        "train": {"steps": steps, "prompts_per_step": 2, "checkpoint_every": checkpoint_every,
                  "keep_checkpoints": 10, "output_dir": str(tmp_path / "run")},
        "logging": {"completions_per_step": 2, **logging},
    }


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(line: dict) -> dict:
    return {k: v for k, v in line.items() if not k.startswith(TIMING) and not k.endswith("latency_s")}


def _shape(lines: list[dict]) -> list[tuple]:
    """metrics.jsonl as (step, phase) pairs: a training line has no phase."""
    return [(line["step"], line.get("phase")) for line in lines]


def _evals(line: dict) -> dict:
    return {k: v for k, v in line.items() if k.startswith("eval/")}


def _dashboard_steps(folder: Path, tag: str) -> list[int]:
    """The steps TensorBoard's dashboards show for ``tag`` (its plugins' reader, which hides an
    earlier session's points from a session start on for every kind of data, the Text tab's too:
    the older ``event_accumulator`` does so for scalars alone)."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    return [t.step for t in acc.Tensors(tag)]


def test_every_file_and_tracker_of_a_run_numbers_its_steps_alike(toy, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    summary = Trainer(RunConfig.from_dict(toy_run(tmp_path, report_to=["tensorboard"]))).run(progress=False)
    lines = _lines(out / "metrics.jsonl")
    # the evaluation before training at 0, steps 1-4 (evaluated after step 3), then after training
    assert _shape(lines) == [(0, "before"), (1, None), (2, None), (3, None), (4, None), (4, "after")]
    assert [bool(_evals(line)) for line in lines] == [True, False, False, True, False, True]
    assert summary["steps"] == 4 and [m["step"] for m in summary["history"]] == [1, 2, 3, 4]
    # one set of names: the summary's evaluations are the lines' own keys
    assert summary["eval_before"] == _evals(lines[0]) and summary["eval_after"] == _evals(lines[-1])
    assert {"eval/accuracy", "eval/count", "eval/pass@1", "eval/pass@2", "eval/sampled_reward_mean", "eval/seconds"} \
        == set(_evals(lines[0])) == set(_evals(lines[3]))

    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]
    records = _lines(out / evaluation.COMPLETIONS_FILE)
    assert sorted({(r["phase"], r["after_steps"]) for r in records}) == [("after", 4), ("before", 0), ("during", 3)]
    assert [r["step"] for r in _lines(out / clog.FILE_NAME)] == [1, 1, 2, 2, 3, 3, 4, 4]

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("reward_mean")] == [1, 2, 3, 4]
    assert [t.step for t in acc.Tensors("completions")] == [1, 2, 3, 4]
    evaluated = [line for line in lines if _evals(line)]
    for key in ("eval/accuracy", "eval/pass@2"):
        scalars = acc.Scalars(key)
        assert [e.step for e in scalars] == [line["step"] for line in evaluated] == [0, 3, 4]
        assert [e.value for e in scalars] == pytest.approx([line[key] for line in evaluated])
    assert not [tag for tag in acc.Tags()["scalars"] if tag.startswith("eval") and not tag.startswith("eval/")]

    # the terminal's step lines count the same steps
    err = capsys.readouterr().err
    logged = [re.search(r"(?<![\w/])step=(\d+)", line) for line in err.splitlines() if re.search(r"\] step\s", line)]
    assert [int(m.group(1)) for m in logged if m] == [1, 2, 3, 4], err[-2000:]

    # polyrl report draws every point where the files put it
    run = load_run(out)
    data = series(run.lines, run.records, run.evals)
    assert [x for x, _ in data["reward_mean"]] == [1.0, 2.0, 3.0, 4.0]
    assert data["eval/accuracy"] == [(float(line["step"]), line["eval/accuracy"]) for line in evaluated]
    assert run.records == [] and not run.warnings  # nothing recomputed from eval_completions.jsonl


def _stopper(holder: dict):
    """The toy's reward (share of token 7), asking the run to stop (as SIGTERM's handler does)
    while scoring step ``holder["stop_at"]``."""
    import numpy as np

    def stopper(completions, completion_ids, trainer_state, **kw):
        if trainer_state.global_step + 1 == holder.get("stop_at"):
            holder["trainer"].stop_requested = True
        return [float(np.mean(np.asarray(ids) == 7)) for ids in completion_ids]

    return function_reward_plugin(stopper)


def test_a_stopped_and_resumed_run_logs_each_step_once_where_an_unbroken_run_does(toy, tmp_path):
    holder: dict = {}
    data = toy_run(tmp_path / "whole", steps=5, every=2)
    data["rewards"] = [{"name": "stopper"}]
    Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),)).run(progress=False)
    expected = _lines(tmp_path / "whole" / "run" / "metrics.jsonl")
    assert _shape(expected) == [(0, "before"), *((s, None) for s in range(1, 6)), (5, "after")]

    data["train"]["output_dir"] = str(tmp_path / "run")
    holder["stop_at"] = 3
    holder["trainer"] = stopped = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    summary = stopped.run(progress=False)
    # stopped after step 3: its checkpoint, its last line and the evaluation after it say 3
    assert summary["stopped_early"] and summary["steps"] == 3 and summary["checkpoint"].endswith("step-00000003")
    out = tmp_path / "run"
    assert _shape(_lines(out / "metrics.jsonl")) == [(0, "before"), (1, None), (2, None), (3, None), (3, "after")]
    # a crash after the step-4 checkpoint was due left lines of a dead lineage too
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "loss": 99}\n{"step": 4, "phase": "after", "eval/accuracy": 9}\n{"step": 5, "lo')
    with open(out / clog.FILE_NAME, "a") as fh:
        fh.write('{"step": 4, "completion": "lost"}\n')

    holder.pop("stop_at")
    resumed = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    assert resumed.resume() and resumed.step == 3
    resumed.run(progress=False)
    lines = _lines(out / "metrics.jsonl")
    assert _shape(lines) == _shape(expected)  # no step twice, none missing
    assert [_untimed(x) for x in lines] == [_untimed(x) for x in expected]  # the same numbers, step for step
    assert [r["step"] for r in _lines(out / clog.FILE_NAME)] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    records = _lines(out / evaluation.COMPLETIONS_FILE)
    assert sorted({(r["phase"], r["after_steps"]) for r in records}) == [
        ("after", 5), ("before", 0), ("during", 2), ("during", 4)]



def test_a_run_killed_in_its_evaluation_after_training_keeps_its_last_steps_curves_in_tensorboard(toy, tmp_path):
    """Resumed at its last checkpoint (its last step), the run logs the evaluation after training
    first, at that step, and TensorBoard's session start there hid the step's training curves:
    loss read [1, 2, 3] where metrics.jsonl has 4 steps. Read back by TensorBoard's own reader."""
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    holder = {"fail_at": 4}

    def judge(completion_ids, trainer_state, **kw):  # the evaluation after training sees global_step 4
        if trainer_state.global_step == holder.get("fail_at"):
            raise RuntimeError("the judge is down")
        return [float(np.mean(np.asarray(ids) == 7)) for ids in completion_ids]

    data = toy_run(tmp_path, every=0, report_to=["tensorboard"])
    data["eval"]["reward"] = "judge"
    with pytest.raises(RewardError):
        Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(judge),)).run(progress=False)
    out = tmp_path / "run"
    assert _shape(_lines(out / "metrics.jsonl")) == [(0, "before"), (1, None), (2, None), (3, None), (4, None)]
    holder.pop("fail_at")
    time.sleep(1.1)  # event file names carry the second they were opened: the resume's must sort after
    resumed = Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(judge),))
    assert resumed.resume() and resumed.step == 4
    resumed.run(progress=False)
    lines = _lines(out / "metrics.jsonl")
    assert _shape(lines)[-1] == (4, "after")

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [
        (line["step"], pytest.approx(line["loss"])) for line in lines if "phase" not in line]
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3, 4]
    assert _dashboard_steps(out / "tensorboard", "completions") == [1, 2, 3, 4]
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [0, 4]

def test_a_stopped_runs_evaluation_after_training_leaves_tensorboard_with_its_resume_as_metrics_jsonl(toy, tmp_path):
    """Stopped on request after step 3 (SIGTERM's flag), the run evaluated "after training" at step 3,
    and its resume drops that line from metrics.jsonl (an unbroken run has none there); TensorBoard
    kept it: eval curves read [0, 2, 3, 4, 5] beside metrics.jsonl's [0, 2, 4, 5]. Now the resume
    hides the stopped run's step 3 and logs that step's kept line and completions again, so every
    tag reads as metrics.jsonl, step for step; a finished run resumed drew its evaluation after
    training twice at its last step. Read back by TensorBoard's own readers."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    holder: dict = {"stop_at": 3}
    data = toy_run(tmp_path, steps=5, every=2, report_to=["tensorboard"])
    data["rewards"] = [{"name": "stopper"}]
    holder["trainer"] = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    assert holder["trainer"].run(progress=False)["steps"] == 3
    out = tmp_path / "run"
    assert _shape(_lines(out / "metrics.jsonl"))[-1] == (3, "after")
    holder.pop("stop_at")
    time.sleep(1.1)  # event file names carry the second they were opened: the resume's must sort after
    resumed = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    assert resumed.resume() and resumed.step == 3
    resumed.run(progress=False)
    lines = _lines(out / "metrics.jsonl")
    assert _shape(lines) == [(0, "before"), *((s, None) for s in range(1, 6)), (5, "after")]

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    for key in ("eval/accuracy", "eval/pass@2", "loss", "reward_mean"):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [
            (line["step"], pytest.approx(line[key], rel=1e-6)) for line in lines if key in line], key
    assert _dashboard_steps(out / "tensorboard", "completions") == [1, 2, 3, 4, 5]
    assert _dashboard_steps(out / "tensorboard", "eval/accuracy") == [0, 2, 4, 5]

    # resumed once more, finished: its evaluation after training again, drawn once (it was twice)
    time.sleep(1.1)
    again = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    assert again.resume() and again.step == 5
    again.run(progress=False)
    assert _shape(_lines(out / "metrics.jsonl")) == _shape(lines)
    assert _dashboard_steps(out / "tensorboard", "eval/accuracy") == [0, 2, 4, 5]
    assert _dashboard_steps(out / "tensorboard", "loss") == [1, 2, 3, 4, 5]


def _as_written_by_zero_based_polyrl(out: Path) -> None:
    """Rewrite a run's files as polyrl before this numbering wrote them: training lines counted
    from 0, no evaluation lines (only in eval_completions.jsonl, whose after_steps did not change)."""
    lines = [line for line in _lines(out / "metrics.jsonl") if "phase" not in line]
    (out / "metrics.jsonl").write_text("".join(json.dumps({**x, "step": x["step"] - 1}) + "\n" for x in lines))
    records = _lines(out / clog.FILE_NAME)
    (out / clog.FILE_NAME).write_text("".join(json.dumps({**r, "step": r["step"] - 1}) + "\n" for r in records))


def test_a_run_written_with_steps_from_0_is_renumbered_on_resume_once(toy, tmp_path, capsys):
    data = toy_run(tmp_path, steps=3, every=0)
    Trainer(RunConfig.from_dict(data)).run(progress=False)
    out = tmp_path / "run"
    first = _lines(out / "metrics.jsonl")
    completions = _lines(out / clog.FILE_NAME)
    _as_written_by_zero_based_polyrl(out)
    capsys.readouterr()

    for _ in range(2):  # the second resume finds today's numbering and shifts nothing again
        trainer = Trainer(RunConfig.from_dict(data))
        assert trainer.resume(out / "checkpoints" / "step-00000002") and trainer.step == 2
        assert [m["step"] for m in trainer.history] == [1, 2]
        trainer.run(progress=False)
        lines = _lines(out / "metrics.jsonl")
        assert _shape(lines) == [(1, None), (2, None), (3, None), (3, "after")]
        assert lines[:2] == first[1:3]  # the kept steps: every number where the run first wrote it
        assert _untimed(lines[2]) == _untimed(first[3])
        assert [r["step"] for r in _lines(out / clog.FILE_NAME)] == [1, 1, 2, 2, 3, 3]
        assert _lines(out / clog.FILE_NAME)[:4] == completions[:4]
    err = capsys.readouterr().err
    assert err.count("metrics.jsonl numbers steps from 0") == 1

    # the report draws it in today's numbering, the evaluation before training from its records
    run = load_run(out)
    accuracy = series(run.lines, run.records, run.evals)["eval/accuracy"]
    assert accuracy == [(0.0, pytest.approx(first[0]["eval/accuracy"])), (3.0, lines[-1]["eval/accuracy"])]


def test_the_report_of_a_run_that_failed_in_its_first_step_draws_its_evaluation(toy, tmp_path, capsys):
    from polyrl.cli import main

    def broken(completions, **kw):
        raise RuntimeError("the judge is down")

    data = toy_run(tmp_path)
    data["rewards"] = [{"name": "broken"}]
    with pytest.raises(RewardError):
        Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(broken),)).run(progress=False)
    out = tmp_path / "run"
    lines = _lines(out / "metrics.jsonl")
    assert _shape(lines) == [(0, "before")] and "eval/accuracy" in lines[0]
    capsys.readouterr()
    assert main(["report", str(out), "--html", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")
    assert "before" in (tmp_path / "r.html").read_text()
    run = load_run(out)
    assert series(run.lines, run.records, run.evals)["eval/accuracy"] == [(0.0, lines[0]["eval/accuracy"])]

    # an earlier polyrl's run stopped so had no metrics.jsonl at all: its records are drawn
    (out / "metrics.jsonl").unlink()
    run = load_run(out)
    assert run.lines == [] and run.evals == [] and {r["phase"] for r in run.records} == {"before"}
    assert series(run.lines, run.records, run.evals)["eval/accuracy"] == [(0.0, pytest.approx(lines[0]["eval/accuracy"]))]


def test_a_rewards_skipped_samples_are_logged_at_the_step_metrics_jsonl_gives_them(toy, tmp_path, capsys):
    """"reward skipped samples" and "no reward scored some samples" said ``step=0`` in the first
    step, whose metrics line (with the reward's ``none_count``) is step 1: the reward's
    ``trainer_state.global_step`` (steps before this one) was logged as the step. Each now says
    the step's own number, and an evaluation's says ``after_steps``, as eval_completions.jsonl."""
    def halfnone(completions, **kw):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    data = toy_run(tmp_path)  # 4 steps, evaluated before, after step 3 and after training
    data["rewards"] = [{"name": "halfnone"}]
    data["eval"]["reward"] = "run"
    capsys.readouterr()
    Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(halfnone),)).run(progress=False)
    err = capsys.readouterr().err
    lines = _lines(tmp_path / "run" / "metrics.jsonl")
    counted = [line["step"] for line in lines if line.get("reward/halfnone/none_count")]
    assert counted == [1, 2, 3, 4]
    for event in ("reward skipped samples", "no reward scored some samples"):
        said = re.findall(rf"{event}\b.*?\b(step|after_steps)=(\d+)", err)
        assert [int(n) for k, n in said if k == "step"] == counted, (event, said)
        assert sorted({int(n) for k, n in said if k == "after_steps"}) == [0, 3, 4], (event, said)  # greedy and sampled


def test_an_evaluations_unscored_samples_are_not_said_to_be_left_out_of_training(toy, tmp_path, capsys):
    """An evaluation whose reward returned None for some samples warned "they are left out of
    training" (the training step's text) under its ``after_steps``: an evaluation trains nothing,
    and the warning did not say what they do to its numbers (left out of its means, not correct
    for pass@k)."""
    def halfnone(completions, **kw):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    data = toy_run(tmp_path, steps=1, every=0)
    data["rewards"] = [{"name": "toy_sevens"}]
    data["eval"]["reward"] = "halfnone"
    capsys.readouterr()
    Trainer(RunConfig.from_dict(data), extra_plugins=(function_reward_plugin(halfnone),)).run(progress=False)
    said = [line for line in capsys.readouterr().err.splitlines() if "no reward scored some samples" in line]
    assert said and all("after_steps=" in line for line in said)  # the training rewards scored every sample
    assert not [line for line in said if "left out of training" in line], said[0]
    assert all("count as not correct for pass@k" in line and "eval.reward" in line for line in said), said[0]


# --- the rules, on their own ---------------------------------------------------------------------


def test_rewound_keeps_the_evaluation_before_and_the_steps_taken_each_once():
    lines = [{"step": 0, "phase": "before", "eval/accuracy": 0.1}, {"step": 1, "c": "a"}, {"step": 2, "c": "dead"},
             {"step": 3, "c": "dead"}, {"step": 3, "phase": "after"}, {"step": 2, "c": "b"}, {"step": True},
             {"step": -1}, "junk"]
    assert metrics_file.rewound(lines, 2) == [lines[0], lines[1], lines[5]]
    assert metrics_file.rewound(lines, 0) == []  # a start at step 0 evaluates again
    assert not metrics_file.counted_from_zero(lines)
    old = [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 2.0, "eval/accuracy": 0.5}]
    assert metrics_file.counted_from_zero(old)
    assert metrics_file.renumbered(old) == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0, "eval/accuracy": 0.5}]


def test_completions_rewind_renumbers_a_file_counted_from_0(tmp_path):
    path = tmp_path / "completions.jsonl"
    path.write_text("".join(json.dumps({"step": s, "c": c}) + "\n" for s, c in [(0, "a"), (1, "b"), (2, "dead")]))
    assert clog.rewind(path, 2) == 2
    assert _lines(path) == [{"step": 1, "c": "a"}, {"step": 2, "c": "b"}]
    assert clog.rewind(path, 2) == 2 and _lines(path) == [{"step": 1, "c": "a"}, {"step": 2, "c": "b"}]  # once
    path.write_text(json.dumps({"step": 3, "c": "x"}) + "\n")  # its metrics.jsonl says it counted from 0
    assert clog.rewind(path, 4, from_zero=True) == 1 and _lines(path) == [{"step": 4, "c": "x"}]
