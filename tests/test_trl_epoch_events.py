"""transformers' ``on_epoch_begin`` / ``on_epoch_end`` on ``polyrl.trl.GRPOTrainer``, and what a
callback asks there, as TRL's own trainer calls and reads them (they were never called: a TRL
script's per-epoch logging or saving did nothing); and TRL's ``ref_model_mixup_alpha = 0``, which
TRL trains with (the reference never moves) and polyrl refused."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset  # noqa: E402

# 4 prompts, 2 a step (4 completions / num_generations 2): TRL's epoch is 2 steps
_args = functools.partial(grpo_args, max_completion_length=4, logging_steps=1)


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


class Events(TrainerCallback):
    """Each event as (name, global_step, epoch, what the control asks), the run's order; on_log
    as "train", "eval" or "summary" (the end-of-training entry). Records what both trainers call."""

    def __init__(self):
        self.seen: list[tuple] = []

    def _record(self, name, state, control):
        epoch = round(state.epoch, 6) if state.epoch is not None else None
        self.seen.append((name, state.global_step, epoch,
                          (control.should_save, control.should_evaluate, control.should_training_stop)))

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._record("on_epoch_begin", state, control)

    def on_step_begin(self, args, state, control, **kwargs):
        self._record("on_step_begin", state, control)

    def on_step_end(self, args, state, control, **kwargs):
        self._record("on_step_end", state, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        kind = "summary" if "train_runtime" in logs else "eval" if any(k.startswith("eval_") for k in logs) else "train"
        self.seen.append(("on_log", state.global_step, kind))

    def on_evaluate(self, args, state, control, **kwargs):
        self._record("on_evaluate", state, control)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._record("on_epoch_end", state, control)

    def on_save(self, args, state, control, **kwargs):
        self._record("on_save", state, control)

    def on_train_end(self, args, state, control, **kwargs):
        self._record("on_train_end", state, control)


def _run(trainer_class, model, tmp_path, callbacks, **fields):
    trainer = trainer_class(model=model, reward_funcs=[short], args=_args(tmp_path, **fields),
                            train_dataset=prompts_dataset(4), callbacks=list(callbacks))
    trainer.train()
    return trainer


def _saved(events: Events) -> list[int]:
    return [e[1] for e in events.seen if e[0] == "on_save"]


def test_epoch_events_come_where_and_as_trls_own_trainer_calls_them(tiny_model_dir, tmp_path):
    """The same script on TRL's GRPOTrainer and polyrl's: 5 steps of epochs of 2, save_strategy
    "epoch". Both call on_epoch_begin before steps 1, 3, 5, on_epoch_end after the step's on_log
    at epochs 1.0, 2.0 and the last step's 2.5 (should_save set by DefaultFlowCallback, and
    should_training_stop at the last), then on_save, with the same states and controls."""
    theirs, ours = Events(), Events()
    _run(trl.GRPOTrainer, tiny_model_dir, tmp_path / "trl", [theirs], max_steps=5, save_strategy="epoch")
    _run(GRPOTrainer, tiny_model_dir, tmp_path / "polyrl", [ours], max_steps=5, save_strategy="epoch")
    epochs = [e[:3] for e in theirs.seen if e[0].startswith("on_epoch")]
    assert epochs == [("on_epoch_begin", 0, 0), ("on_epoch_end", 2, 1.0), ("on_epoch_begin", 2, 1.0),
                      ("on_epoch_end", 4, 2.0), ("on_epoch_begin", 4, 2.0), ("on_epoch_end", 5, 2.5)]
    assert ours.seen == theirs.seen


class ClearsTheLastSave(TrainerCallback):
    """Clears should_save in on_step_end at the run's last update (DefaultFlowCallback set it there
    under save_strategy "steps")."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == state.max_steps:
            control.should_save = False


@pytest.mark.parametrize(("fields", "clears"), [({"save_strategy": "no"}, False), ({}, True)], ids=["no", "cleared"])
def test_a_last_checkpoint_no_flag_asked_calls_no_on_save_as_on_trls_trainer(tiny_model_dir, tmp_path, fields,
                                                                             clears):
    """save_strategy "no", or a callback clearing the last step's should_save: transformers writes
    no checkpoint at the end and calls no on_save. polyrl writes its own last checkpoint (a resume,
    save_model and evaluate() read it), and called on_save for it, an event TRL's trainer never has."""
    theirs, ours = Events(), Events()
    _run(trl.GRPOTrainer, tiny_model_dir, tmp_path / "trl", [theirs, *([ClearsTheLastSave()] if clears else [])],
         max_steps=3, **fields)
    _run(GRPOTrainer, tiny_model_dir, tmp_path / "polyrl", [ours, *([ClearsTheLastSave()] if clears else [])],
         max_steps=3, **fields)
    assert _saved(theirs) == [] and not (tmp_path / "trl" / "run" / "checkpoint-3").exists()
    assert ours.seen == theirs.seen
    assert (tmp_path / "polyrl" / "run" / "checkpoints" / "step-00000003").is_dir()  # polyrl's own, kept


class ClearsTheFirstEpochsSave(TrainerCallback):
    """Clears should_save in the first epoch's on_epoch_end (what it saw there recorded)."""

    def __init__(self):
        self.asked: list[bool] = []

    def on_epoch_end(self, args, state, control, **kwargs):
        self.asked.append(control.should_save)
        if state.epoch == 1.0:
            control.should_save = False


def test_a_callback_clearing_should_save_in_on_epoch_end_cancels_the_epochs_checkpoint(tiny_model_dir, tmp_path):
    """transformers' DefaultFlowCallback (first in the list) sets should_save in on_epoch_end for
    save_strategy "epoch"; a callback after it clearing the flag cancels that checkpoint (polyrl
    saved at each epoch's end whatever the callbacks said)."""
    events, clears = Events(), ClearsTheFirstEpochsSave()
    _run(GRPOTrainer, tiny_model_dir, tmp_path, [events, clears], max_steps=5, save_strategy="epoch")
    assert clears.asked == [True, True, True]
    assert _saved(events) == [4, 5]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000004", "step-00000005"]


class SavesEachEpochStopsAfterTwo(TrainerCallback):
    """Per-epoch work a TRL script does in on_epoch_end: the epoch's logged steps counted from
    on_log, a checkpoint asked, and the run stopped after epoch 2."""

    def __init__(self):
        self.logged = 0
        self.per_epoch: list[tuple[float, int]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged += "loss" in logs

    def on_epoch_end(self, args, state, control, **kwargs):
        self.per_epoch.append((state.epoch, self.logged))
        self.logged = 0
        control.should_save = True
        control.should_training_stop = state.epoch >= 2


def test_should_save_and_should_training_stop_set_in_on_epoch_end_act_there(tiny_model_dir, tmp_path):
    """save_strategy "no": the checkpoints are the ones on_epoch_end asks, and its stop ends the run
    after epoch 2 (4 of max_steps 8), as transformers' _maybe_log_save_evaluate after on_epoch_end
    and its epoch loop do; each epoch's on_epoch_end comes after its 2 steps' on_log."""
    events, callback = Events(), SavesEachEpochStopsAfterTwo()
    trainer = _run(GRPOTrainer, tiny_model_dir, tmp_path, [events, callback], max_steps=8, save_strategy="no")
    assert trainer.state.global_step == 4
    assert callback.per_epoch == [(1.0, 2), (2.0, 2)]
    assert _saved(events) == [2, 4]


class EpochStopAtStep1(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_epoch_stop = state.global_step == 1


def test_an_epoch_stop_ends_the_epoch_with_on_epoch_end_and_the_next_begins(tiny_model_dir, tmp_path):
    """should_epoch_stop after step 1: transformers' loop breaks out to on_epoch_end (the epoch's
    checkpoint under "epoch"), and the next epoch's on_epoch_begin clears the flag."""
    events = Events()
    _run(GRPOTrainer, tiny_model_dir, tmp_path, [EpochStopAtStep1(), events], max_steps=3, save_strategy="epoch")
    assert [e[:2] for e in events.seen if e[0] in ("on_epoch_begin", "on_epoch_end", "on_save")] == [
        ("on_epoch_begin", 0), ("on_epoch_end", 1), ("on_save", 1), ("on_epoch_begin", 1), ("on_epoch_end", 3),
        ("on_save", 3)]


class StopsAtStep1(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == 1


def test_a_resumed_run_begins_its_epoch_with_on_epoch_begin(tiny_model_dir, tmp_path):
    """transformers' loop calls on_epoch_begin for the epoch a resume goes on in (mid-epoch too),
    with the restored epoch; then on as in a fresh run."""
    first = Events()
    _run(GRPOTrainer, tiny_model_dir, tmp_path, [StopsAtStep1(), first], max_steps=3)
    assert [e[:3] for e in first.seen if e[0].startswith("on_epoch")] == [("on_epoch_begin", 0, 0),
                                                                          ("on_epoch_end", 1, 0.5)]
    resumed = Events()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                          callbacks=[resumed], args=_args(tmp_path, max_steps=3))
    trainer.train(resume_from_checkpoint=True)
    assert [e[:3] for e in resumed.seen if e[0].startswith("on_epoch")] == [
        ("on_epoch_begin", 1, 0.5), ("on_epoch_end", 2, 1.0), ("on_epoch_begin", 2, 1.0), ("on_epoch_end", 3, 1.5)]


def test_eval_strategy_epoch_evaluates_after_on_epoch_end_as_trls_own_trainer(tiny_model_dir, tmp_path):
    """eval_strategy and save_strategy "epoch", 3 steps of epochs of 2: transformers calls
    on_epoch_end (should_evaluate and should_save set by DefaultFlowCallback) after the step's
    on_log, then the evaluation's on_log and on_evaluate, then on_save. polyrl evaluated the step
    before on_epoch_end, whose control said should_evaluate False."""
    theirs, ours = Events(), Events()
    for trainer_class, events, name in ((trl.GRPOTrainer, theirs, "trl"), (GRPOTrainer, ours, "polyrl")):
        trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                      eval_dataset=prompts_dataset(2), callbacks=[events],
                      args=_args(tmp_path / name, max_steps=3, eval_strategy="epoch", save_strategy="epoch")).train()
    at_2 = [e for e in theirs.seen if e[1] == 2 and e[0] != "on_step_begin"]
    assert at_2 == [("on_step_end", 2, 1.0, (False, False, False)), ("on_log", 2, "train"),
                    ("on_epoch_end", 2, 1.0, (True, True, False)), ("on_log", 2, "eval"),
                    ("on_evaluate", 2, 1.0, (True, False, False)), ("on_save", 2, 1.0, (False, False, False)),
                    ("on_epoch_begin", 2, 1.0, (False, False, False))]
    assert ours.seen == theirs.seen


def test_eval_and_save_steps_events_are_trls_own_trainers(tiny_model_dir, tmp_path):
    """eval_strategy and save_strategy "steps" every 2 updates, 4 steps of epochs of 3: as
    transformers' DefaultFlowCallback, on_step_end sees should_evaluate and should_save set at steps
    2 and 4 (should_training_stop at 4, the last); step 4 is evaluated, then saved, then its epoch
    ends. polyrl's on_step_end saw should_evaluate False, and its on_epoch_end came before on_save."""
    theirs, ours = Events(), Events()
    for trainer_class, events, name in ((trl.GRPOTrainer, theirs, "trl"), (GRPOTrainer, ours, "polyrl")):
        trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(6),
                      eval_dataset=prompts_dataset(2), callbacks=[events],
                      args=_args(tmp_path / name, max_steps=4, eval_strategy="steps", eval_steps=2,
                                 save_steps=2)).train()
    assert [e for e in theirs.seen if e[1] == 4 and e[0] != "on_step_begin"] == [
        ("on_step_end", 4, 1.333333, (True, True, True)), ("on_log", 4, "train"), ("on_log", 4, "eval"),
        ("on_evaluate", 4, 1.333333, (True, False, True)), ("on_save", 4, 1.333333, (False, False, True)),
        ("on_epoch_end", 4, 1.333333, (False, False, True)), ("on_log", 4, "summary"),
        ("on_train_end", 4, 1.333333, (False, False, True))]
    assert ours.seen == theirs.seen


def test_an_epoch_evaluation_at_a_save_step_comes_after_on_save_and_on_epoch_end_as_trls(tiny_model_dir, tmp_path):
    """eval_strategy "epoch", save_steps 2, 3 steps of epochs of 2: at step 2 (an epoch's end and a
    save step) and the last step, transformers saves the step (should_save set in on_step_end),
    then calls on_epoch_end, whose DefaultFlowCallback asks the evaluation, then evaluates. polyrl
    called on_epoch_end and the evaluation's events before on_save."""
    theirs, ours = Events(), Events()
    for trainer_class, events, name in ((trl.GRPOTrainer, theirs, "trl"), (GRPOTrainer, ours, "polyrl")):
        trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                      eval_dataset=prompts_dataset(2), callbacks=[events],
                      args=_args(tmp_path / name, max_steps=3, eval_strategy="epoch", save_steps=2)).train()
    assert [e for e in theirs.seen if e[1] >= 2 and e[0] not in ("on_step_begin", "on_step_end")] == [
        ("on_log", 2, "train"), ("on_save", 2, 1.0, (False, False, False)),
        ("on_epoch_end", 2, 1.0, (False, True, False)), ("on_log", 2, "eval"),
        ("on_evaluate", 2, 1.0, (False, False, False)), ("on_epoch_begin", 2, 1.0, (False, False, False)),
        ("on_log", 3, "train"), ("on_save", 3, 1.5, (False, False, True)),
        ("on_epoch_end", 3, 1.5, (False, True, True)), ("on_log", 3, "eval"),
        ("on_evaluate", 3, 1.5, (False, False, True)), ("on_log", 3, "summary"),
        ("on_train_end", 3, 1.5, (False, False, True))]
    assert ours.seen == theirs.seen


class ClearsTheEpochEvaluationAt2(TrainerCallback):
    """Clears should_evaluate in on_epoch_end at update 2 (DefaultFlowCallback set it for eval_strategy "epoch")."""

    def on_epoch_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            control.should_evaluate = False


def test_an_epoch_evaluation_cleared_in_on_epoch_end_after_a_save_is_not_in_log_history(tiny_model_dir, tmp_path):
    """eval_strategy "epoch", save_steps 2: transformers saves step 2, then on_epoch_end asks the
    evaluation, which a callback clears: none runs. polyrl evaluated the step before saving it and
    tells the callbacks nothing, but trainer.state.log_history after train() had its eval_ entry,
    which TRL's has not (the numbers stay on the step's line in metrics.jsonl: README)."""
    seen, history = {}, {}
    for trainer_class, name in ((trl.GRPOTrainer, "trl"), (GRPOTrainer, "polyrl")):
        events = Events()
        trainer = trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                                eval_dataset=prompts_dataset(2), callbacks=[events, ClearsTheEpochEvaluationAt2()],
                                args=_args(tmp_path / name, max_steps=3, eval_strategy="epoch", save_steps=2))
        trainer.train()
        seen[name] = events.seen
        history[name] = [(e["step"], "eval_reward" in e, "train_runtime" in e) for e in trainer.state.log_history]
    assert history["trl"] == [(1, False, False), (2, False, False), (3, False, False), (3, True, False),
                              (3, False, True)]
    assert history["polyrl"] == history["trl"]
    assert seen["polyrl"] == seen["trl"]


def _lines(run) -> dict[int, dict]:
    """metrics.jsonl's step lines by step (not the evaluation lines before or after training)."""
    lines = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return {line["step"]: line for line in lines if "phase" not in line}


def _eval_points(run) -> dict[str, list[int]]:
    """The steps of each evaluation as the trackers got it (TensorBoard's event files, read with
    its own reader) and as ``polyrl report`` draws it (``eval/sampled_reward_mean``)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from polyrl.report import load_run, series

    (folder,) = (run / "runs").iterdir()
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    data = load_run(run)
    return {"tensorboard": [e.step for e in acc.Scalars("eval/sampled_reward_mean")],
            "report": [int(x) for x, _ in series(data.lines, data.records, data.evals)["eval/sampled_reward_mean"]]}


def test_an_epoch_evaluation_cleared_in_on_epoch_end_after_a_save_never_runs(tiny_model_dir, tmp_path):
    """The run above on polyrl, with a tracker: transformers runs no evaluation of step 2 there,
    and polyrl ran it before its checkpoint and before on_epoch_end could clear it, so its numbers
    were on step 2's line in metrics.jsonl, at step 2 in TensorBoard and in ``polyrl report``,
    and its completions in eval_completions.jsonl. Now on_epoch_end is asked first: none runs."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                eval_dataset=prompts_dataset(2), callbacks=[ClearsTheEpochEvaluationAt2()],
                args=_args(tmp_path, max_steps=3, eval_strategy="epoch", save_steps=2,
                           report_to="tensorboard")).train()
    lines = _lines(run)
    assert [step for step, line in lines.items() if "eval/sampled_reward_mean" in line] == [3]
    assert _eval_points(run) == {"tensorboard": [3], "report": [3]}
    evaluated = {json.loads(r)["after_steps"] for r in (run / "eval_completions.jsonl").read_text().splitlines()}
    assert evaluated == {3}


def test_an_epoch_evaluation_after_a_save_is_on_its_steps_line_and_read_back_on_resume(tiny_model_dir, tmp_path):
    """Not cleared, the evaluation after step 2's checkpoint and on_epoch_end is on step 2's line
    (metrics.jsonl rewritten), in TensorBoard and ``polyrl report`` at step 2; a run resumed from
    checkpoint 2 keeps that line, its log_history has no entry for it (transformers wrote the
    checkpoint before the evaluation), and it evaluates step 3 as the first run did."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                        eval_dataset=prompts_dataset(2),
                        args=_args(tmp_path, max_steps=3, eval_strategy="epoch", save_steps=2, report_to="tensorboard"))
    first.train()
    assert [step for step, line in _lines(run).items() if "eval/sampled_reward_mean" in line] == [2, 3]
    assert _eval_points(run) == {"tensorboard": [2, 3], "report": [2, 3]}
    assert [(e["step"], "eval_reward" in e) for e in first.state.log_history if "train_runtime" not in e] == [
        (1, False), (2, False), (2, True), (3, False), (3, True)]
    before = _lines(run)
    resumed = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                          eval_dataset=prompts_dataset(2),
                          args=_args(tmp_path, max_steps=3, eval_strategy="epoch", save_steps=2,
                                     report_to="tensorboard"))
    resumed.train(resume_from_checkpoint=str(run / "checkpoints" / "step-00000002"))
    after = _lines(run)
    assert after[2] == before[2] and "eval/sampled_reward_mean" in after[3]
    assert [(e["step"], "eval_reward" in e) for e in resumed.state.log_history if "train_runtime" not in e] == [
        (1, False), (2, False), (3, False), (3, True)]


def test_a_failing_epoch_evaluation_after_a_save_keeps_the_step_and_its_checkpoint(tiny_model_dir, tmp_path):
    """The evaluation asked after step 2's checkpoint and on_epoch_end fails: the run stops with
    one error naming that step; step 2 stays recorded (its line without eval keys) and saved."""
    held_out = datasets.Dataset.from_list([{"prompt": "What is 98 + 1?", "answer": "99"}])
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[fails_on_held_out], train_dataset=prompts_dataset(4),
                          eval_dataset=held_out,
                          args=_args(tmp_path, max_steps=3, eval_strategy="epoch", save_steps=2))
    with pytest.raises(Exception, match="the evaluation after step 2 .*cannot score the held-out rows"):
        trainer.train()
    lines = _lines(tmp_path / "run")
    assert sorted(lines) == [1, 2] and not [k for k in lines[2] if k.startswith("eval/")]
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")] == ["step-00000002"]


class ClearsTheEvaluationAt(TrainerCallback):
    """Clears should_evaluate in on_step_end at the steps given (DefaultFlowCallback set it)."""

    def __init__(self, *steps):
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_evaluate = False


def _eval_steps_run(trainer_class, model, tmp_path, callbacks, **fields):
    return trainer_class(model=model, reward_funcs=[short], train_dataset=prompts_dataset(6),
                         eval_dataset=prompts_dataset(2), callbacks=list(callbacks),
                         args=_args(tmp_path, eval_strategy="steps", eval_steps=2, **fields)).train


def _evaluated(events: Events) -> list[int]:
    return [e[1] for e in events.seen if e[0] == "on_evaluate"]


def test_clearing_should_evaluate_in_on_step_end_cancels_the_eval_steps_evaluation(tiny_model_dir, tmp_path):
    """eval_steps 2 of 4 steps: a callback clearing should_evaluate in on_step_end at step 2 cancels
    that evaluation, as transformers evaluates only when the flag is set after the callbacks;
    polyrl's eval.every evaluated the step whatever they said."""
    theirs, ours = Events(), Events()
    _eval_steps_run(trl.GRPOTrainer, tiny_model_dir, tmp_path / "trl", [ClearsTheEvaluationAt(2), theirs],
                    max_steps=4)()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(6),
                          eval_dataset=prompts_dataset(2), callbacks=[ClearsTheEvaluationAt(2), ours],
                          args=_args(tmp_path / "polyrl", eval_strategy="steps", eval_steps=2, max_steps=4))
    trainer.train()
    assert _evaluated(theirs) == [4]
    assert ours.seen == theirs.seen
    assert [m["step"] for m in trainer.state.log_history if "eval_reward" in m] == [4]


def test_the_last_steps_evaluation_comes_before_its_save_as_on_trls_trainer(tiny_model_dir, tmp_path):
    """eval_steps and save_steps 2, 3 steps: transformers' DefaultFlowCallback sets should_evaluate
    at the last step (off the eval_steps) before on_step_end, and evaluates it before on_save and
    on_epoch_end. polyrl evaluates it after training (the model written first), and called
    on_epoch_end and on_save before that evaluation's on_log and on_evaluate."""
    theirs, ours = Events(), Events()
    _eval_steps_run(trl.GRPOTrainer, tiny_model_dir, tmp_path / "trl", [theirs], max_steps=3, save_steps=2)()
    _eval_steps_run(GRPOTrainer, tiny_model_dir, tmp_path / "polyrl", [ours], max_steps=3, save_steps=2)()
    assert [e for e in theirs.seen if e[1] == 3 and e[0] != "on_step_begin"] == [
        ("on_step_end", 3, 1.0, (True, True, True)), ("on_log", 3, "train"), ("on_log", 3, "eval"),
        ("on_evaluate", 3, 1.0, (True, False, True)), ("on_save", 3, 1.0, (False, False, True)),
        ("on_epoch_end", 3, 1.0, (False, False, True)), ("on_log", 3, "summary"),
        ("on_train_end", 3, 1.0, (False, False, True))]
    assert ours.seen == theirs.seen


def test_clearing_should_evaluate_at_the_last_step_cancels_the_evaluation_after_training(tiny_model_dir,
                                                                                        tmp_path):
    """The last step's evaluation (off the eval_steps), cleared in on_step_end: transformers does
    not evaluate it; polyrl evaluated it after training whatever the callbacks said."""
    evaluated = {}
    for trainer_class, name in ((trl.GRPOTrainer, "trl"), (GRPOTrainer, "polyrl")):
        events = Events()
        _eval_steps_run(trainer_class, tiny_model_dir, tmp_path / name, [ClearsTheEvaluationAt(3), events],
                        max_steps=3)()
        evaluated[name] = _evaluated(events)
    assert evaluated == {"trl": [2], "polyrl": [2]}
    assert not [line for line in map(json.loads, (tmp_path / "polyrl" / "run" / "metrics.jsonl").read_text().splitlines())
                if line.get("phase") == "after"]


def fails_on_held_out(completions, answer, **kwargs):
    if "99" in answer:
        raise RuntimeError("cannot score the held-out rows")
    return [0.0 for _ in completions]


def test_a_failing_last_step_evaluation_finds_the_model_saved_and_no_on_save(tiny_model_dir, tmp_path):
    """The last step's evaluation (after training in polyrl, its model written first) fails: the
    model and the checkpoint are on disk, and, as on TRL's trainer, which saves after evaluating,
    the callbacks got no on_save or on_epoch_end for that step."""
    events = Events()
    held_out = datasets.Dataset.from_list([{"prompt": "What is 98 + 1?", "answer": "99"}])
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[fails_on_held_out], train_dataset=prompts_dataset(4),
                          eval_dataset=held_out, callbacks=[events],
                          args=_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=10))
    with pytest.raises(Exception, match="cannot score the held-out rows"):
        trainer.train()
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")] == ["step-00000002"]
    assert [e[0] for e in events.seen if e[1] == 2 and e[0] != "on_step_begin"] == ["on_step_end", "on_log"]


class EvaluatesEachEpoch(TrainerCallback):
    """Asks an evaluation at each epoch's end; counts the evaluations."""

    def __init__(self):
        self.evaluated: list[int] = []

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_evaluate = True

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluated.append(state.global_step)


@pytest.mark.parametrize("strategy", ["epoch", "no"])
def test_should_evaluate_set_in_on_epoch_end_evaluates_the_step_as_on_trls_trainer(tiny_model_dir, tmp_path,
                                                                                  strategy):
    """A callback asking an evaluation in on_epoch_end gets it, after on_epoch_end, under any
    eval_strategy, as transformers' _maybe_log_save_evaluate after on_epoch_end runs it; polyrl
    had evaluated the step before on_epoch_end, so under "no" it only warned, and did not evaluate."""
    from structlog.testing import capture_logs

    evaluated = {}
    for trainer_class, name in ((trl.GRPOTrainer, "trl"), (GRPOTrainer, "polyrl")):
        callback = EvaluatesEachEpoch()
        trainer = trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                                eval_dataset=prompts_dataset(2), callbacks=[callback],
                                args=_args(tmp_path / name, max_steps=4, eval_strategy=strategy))
        with capture_logs() as logs:
            trainer.train()
        evaluated[name] = callback.evaluated
    assert evaluated == {"trl": [2, 4], "polyrl": [2, 4]}
    assert not [e for e in logs if "on_epoch_end" in e["event"]]
    assert [m["step"] for m in trainer.state.log_history if "eval_reward" in m] == [2, 4]


class EpochStopInOnLogAt1(EvaluatesEachEpoch):
    def on_log(self, args, state, control, logs=None, **kwargs):
        control.should_epoch_stop = state.global_step == 1 and "loss" in logs


def test_should_evaluate_in_the_on_epoch_end_of_an_epoch_stop_asked_in_on_log_is_one_warning(tiny_model_dir,
                                                                                           tmp_path):
    """An epoch stop asked in on_log is known after polyrl's evaluation point: the evaluation
    on_epoch_end asks there cannot be run, and one warning says so and how to get it."""
    from structlog.testing import capture_logs

    callback = EpochStopInOnLogAt1()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                          eval_dataset=prompts_dataset(2), callbacks=[callback],
                          args=_args(tmp_path, max_steps=3, eval_strategy="no"))
    with capture_logs() as logs:
        trainer.train()
    assert callback.evaluated == [3]
    said = [e for e in logs if "in on_epoch_end" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "warning" and "in on_step_end" in said[0]["event"]


def peak_at_update_2(completions, trainer_state, **kwargs):
    """The same on both trainers: highest when scored at optimizer update 2."""
    return [-10.0 * abs(trainer_state.global_step - 2) for _ in completions]


class ClearsEverySave(TrainerCallback):
    def on_evaluate(self, args, state, control, **kwargs):
        control.should_save = False

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = False


def test_save_strategy_best_checkpoints_cannot_be_cleared_as_on_trls_trainer(tiny_model_dir, tmp_path):
    """transformers sets should_save for a new best after on_evaluate and saves at once: no callback
    can cancel it (not in on_evaluate, nor in on_epoch_end, after the save); polyrl saves the
    same bests, and its own final checkpoint with no on_save (TRL writes none there)."""
    saves = {}
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        events = Events()
        trainer_class(model=tiny_model_dir, reward_funcs=[peak_at_update_2], train_dataset=prompts_dataset(4),
                      eval_dataset=prompts_dataset(2), callbacks=[ClearsEverySave(), events],
                      args=_args(tmp_path / name, max_steps=4, eval_strategy="steps", eval_steps=1,
                                 save_strategy="best", metric_for_best_model="reward")).train()
        saves[name] = _saved(events)
    assert saves == {"trl": [1, 2], "polyrl": [1, 2]}
    assert (tmp_path / "polyrl" / "run" / "checkpoints" / "step-00000004").is_dir()


class EpochStopInOnSaveAt1(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        control.should_epoch_stop = state.global_step == 1


def test_an_epoch_stop_asked_in_on_save_ends_the_epoch_with_on_epoch_end(tiny_model_dir, tmp_path):
    """transformers reads should_epoch_stop right after on_save and breaks out to on_epoch_end; the
    next epoch (steps 2 and 3) ends at the run's end."""
    events = Events()
    _run(GRPOTrainer, tiny_model_dir, tmp_path, [EpochStopInOnSaveAt1(), events], max_steps=3, save_steps=1)
    assert [e[:3] for e in events.seen if e[0].startswith("on_epoch")] == [
        ("on_epoch_begin", 0, 0), ("on_epoch_end", 1, 0.5), ("on_epoch_begin", 1, 0.5), ("on_epoch_end", 3, 2.0)]


def test_ref_model_mixup_alpha_0_trains_with_a_reference_that_never_moves(tiny_model_dir, tmp_path):
    """TRL's SyncRefModelCallback mixes 0 x policy into the reference at alpha 0, so it never moves
    and TRL trains; polyrl refused 0 (its ref_sync_alpha is in (0, 1]). Now: said in a warning, no
    syncs (the same run)."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                              args=_args(tmp_path, max_steps=2, beta=0.04, sync_ref_model=True,
                                         ref_model_sync_steps=1, ref_model_mixup_alpha=0.0))
        assert trainer.train().global_step == 2
    said = [e for e in logs if "ref_model_mixup_alpha = 0" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "warning" and "never moves" in said[0]["event"]


@pytest.mark.parametrize("alpha", [1.5, -0.1, float("nan")])
def test_ref_model_mixup_alpha_outside_0_1_is_one_error_naming_it(tiny_model_dir, tmp_path, alpha):
    """TRL extrapolates past the policy (or away from it) without a word; polyrl keeps refusing it,
    naming the script's field, and says why and the range TRL's 0 is in (polyrl's own message
    said "(0, 1]")."""
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                    args=_args(tmp_path, max_steps=1, beta=0.04, sync_ref_model=True, ref_model_sync_steps=1,
                               ref_model_mixup_alpha=alpha)).train()
    assert info.value.field == "args.ref_model_mixup_alpha", info.value
    assert f"ref_model_mixup_alpha = {alpha}" in info.value.message and "extrapolate" in info.value.message
    assert "in [0, 1]" in (info.value.fix or "")


def test_a_stop_asked_twice_in_one_step_names_its_reason_once():
    """A callback's should_training_stop read after on_step_end and again after on_epoch_end: the
    run's stop reason (``asked_by``) said it twice."""
    from polyrl.run_observer import StepAsk

    why = "a callback set control.should_training_stop"
    assert (StepAsk(stop=True, why=why) | StepAsk(stop=True, why=why)).why == why


@pytest.mark.parametrize("clears", [True, False], ids=["cleared", "told"])
def test_a_resume_from_the_held_evaluations_checkpoint_has_trls_log_history(tiny_model_dir, tmp_path, clears):
    """eval_strategy "epoch", save_steps 2, 3 steps, resumed from update 2's checkpoint: transformers
    wrote that checkpoint (its trainer_state.json) before on_epoch_end asked the epoch's evaluation,
    so a resumed TRL run's log_history has no eval_ entry at update 2, told or cleared in
    on_epoch_end. polyrl's resumed history came from the step lines, which hold the evaluation (run
    before the checkpoint), so it came back: one a callback had cleared too."""
    from polyrl.checkpoint import checkpoint_dir

    history = {}
    for trainer_class, name in ((trl.GRPOTrainer, "trl"), (GRPOTrainer, "polyrl")):
        callbacks = [ClearsTheEpochEvaluationAt2()] if clears else []

        def made(callbacks=callbacks, trainer_class=trainer_class, name=name):
            return trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                                 eval_dataset=prompts_dataset(2), callbacks=list(callbacks),
                                 args=_args(tmp_path / name, max_steps=3, eval_strategy="epoch", save_steps=2))

        first = made()
        first.train()
        out = tmp_path / name / "run"
        resumed = made()
        resumed.train(resume_from_checkpoint=str(out / "checkpoint-2" if name == "trl"
                                                 else checkpoint_dir(out / "checkpoints", 2)))
        history[name] = [(e["step"], "eval_reward" in e, "train_runtime" in e) for e in resumed.state.log_history]
    assert history["trl"] == [(1, False, False), (2, False, False), (3, False, False), (3, True, False),
                              (3, False, True)]
    assert history["polyrl"] == history["trl"]



class BreaksTheCheckpointAt2(TrainerCallback):
    """At update 2 (an epoch's end and a save step) the save raises: ``how`` "write" puts a file, in
    on_step_end, where that step's checkpoint goes (``where``: TRL's ``checkpoint-2``, polyrl's
    checkpoint root); "on_save" raises in on_save, after the checkpoint is written."""

    def __init__(self, how, where):
        self.how, self.where = how, where

    def on_step_end(self, args, state, control, **kwargs):
        import shutil

        if self.how == "write" and state.global_step == 2:
            shutil.rmtree(self.where, ignore_errors=True)
            self.where.parent.mkdir(parents=True, exist_ok=True)
            self.where.write_text("in the way")

    def on_save(self, args, state, control, **kwargs):
        if self.how == "on_save" and state.global_step == 2:
            raise RuntimeError("the save's upload failed")


@pytest.mark.parametrize("how", ["write", "on_save"])
def test_a_save_that_raises_before_an_epoch_evaluation_ends_the_run_there_as_on_trls_trainer(tiny_model_dir,
                                                                                             tmp_path, how):
    """eval_strategy "epoch", save_steps 2: transformers saves step 2 before on_epoch_end, whose
    DefaultFlowCallback asks the epoch's evaluation (``_maybe_log_save_evaluate`` after
    ``on_step_end``, then ``on_epoch_end`` and its own ``_maybe_log_save_evaluate``, in
    ``Trainer._run_epoch``; nothing there catches what the save raises). A checkpoint write or an
    ``on_save`` that raises leaves ``train()`` at once: no ``on_epoch_end``, so no evaluation is
    asked, and no ``on_train_end``. polyrl holds that evaluation until after the checkpoint and
    ends the same way: TRL's own trainer's events, step 2 recorded without eval keys."""
    seen, raised = {}, {}
    for trainer_class, name, where in ((trl.GRPOTrainer, "trl", "checkpoint-2"), (GRPOTrainer, "polyrl", "checkpoints")):
        events = Events()
        trainer = trainer_class(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(4),
                                eval_dataset=prompts_dataset(2),
                                callbacks=[events, BreaksTheCheckpointAt2(how, tmp_path / name / "run" / where)],
                                args=_args(tmp_path / name, max_steps=3, eval_strategy="epoch", save_steps=2))
        with pytest.raises(Exception) as info:
            trainer.train()
        seen[name], raised[name] = events.seen, str(info.value)
    if how == "write":
        assert "cannot write the checkpoint of step 2" in raised["polyrl"], raised
    else:
        assert raised["trl"] == "the save's upload failed" and "on_save" in raised["polyrl"], raised
        assert "the save's upload failed" in raised["polyrl"]
    saved = [("on_save", 2, 1.0, (False, False, False))] if how == "on_save" else []
    assert [e for e in seen["trl"] if e[1] >= 2] == [
        ("on_step_end", 2, 1.0, (True, False, False)), ("on_log", 2, "train"), *saved]
    assert seen["polyrl"] == seen["trl"]
    lines = _lines(tmp_path / "polyrl" / "run")
    assert sorted(lines) == [1, 2] and not [k for k in lines[2] if k.startswith("eval/")]
