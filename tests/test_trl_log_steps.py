"""TRL's ``logging_steps``, ``logging_strategy`` and ``logging_first_step`` on
``polyrl.trl.GRPOTrainer``: ``on_log``, ``state.log_history`` and the ``report_to`` trackers get a
log where transformers' ``DefaultFlowCallback`` asks one, the mean of the steps since the last (as
TRL's ``GRPOTrainer.log`` averages its metrics), while metrics.jsonl keeps every step. They got every
step whatever the config said."""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback, TrainerControl, TrainerState  # noqa: E402
from transformers.trainer_callback import DefaultFlowCallback  # noqa: E402

from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(n)])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


class Logs(TrainerCallback):
    """The global step of each on_log and its logs; optionally asks one log at ``force_at``."""

    def __init__(self, force_at: int = -1):
        self.logs: list[tuple[int, dict]] = []
        self.force_at = force_at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.force_at:
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs)))


def _lines(output_dir: Path) -> list[dict]:
    path = next(iter(glob.glob(str(output_dir / "**" / "metrics.jsonl"), recursive=True)))
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("per_step", [1, 2, 3])
@pytest.mark.parametrize("fields", [dict(logging_steps=2), dict(logging_steps=3, logging_first_step=True),
                                    dict(logging_steps=1), dict(logging_strategy="no", logging_first_step=True),
                                    dict(logging_strategy="epoch"), dict(logging_steps=0.25)])
def test_a_step_logs_where_transformers_default_flow_asks_a_log_at_one_of_its_updates(tmp_path, fields, per_step):
    """polyrl's step of ``per_step`` updates (num_iterations x mini-batches) logs when
    DefaultFlowCallback.on_step_end sets should_log at any of them, as TRL's loop logs there."""
    from polyrl.trl_log_steps import flow_logs

    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=12, **fields)
    state = TrainerState(max_steps=12)
    state.compute_steps(args, 12)
    flow = DefaultFlowCallback()
    theirs, ours = [], []
    for update in range(1, 13):
        control = TrainerControl()
        state.global_step = update
        flow.on_step_end(args, state, control)
        theirs.append(control.should_log)
        if update % per_step == 0:
            ours.append(flow_logs(args, state.logging_steps, update, per_step))
    asked = [any(theirs[i:i + per_step]) for i in range(0, 12, per_step)]
    assert ours == asked


def test_the_window_mean_leaves_nans_out_but_the_loss_and_keeps_the_last_steps_state():
    """TRL's log drops a batch's NaN before averaging; transformers' loss is the window's sum over
    its updates (a NaN stays); epoch, learning rate and grad norm are the last update's. A step's
    evaluation is its own entry: only the last step's stays on the log, as on its line."""
    from polyrl.trl_log_steps import window_mean

    lines = [{"step": 1, "reward_mean": 1.0, "loss": 0.5, "lr": 1e-4, "epoch": 0.5, "kl": math.nan,
              "eval/reward_mean": 5.0},
             {"step": 2, "reward_mean": 3.0, "loss": math.nan, "lr": 5e-5, "epoch": 1.0, "kl": math.nan}]
    out = window_mean(lines)
    assert out["reward_mean"] == 2.0 and math.isnan(out["loss"]) and math.isnan(out["kl"])
    assert out["lr"] == 5e-5 and out["epoch"] == 1.0 and out["step"] == 2 and "eval/reward_mean" not in out
    assert window_mean([*lines, {"step": 3, "reward_mean": 2.0, "eval/reward_mean": 7.0}])["eval/reward_mean"] == 7.0


def test_a_resumed_runs_log_history_is_the_logs_its_steps_made_not_every_step(tmp_path):
    """A resume rebuilds log_history from metrics.jsonl: the logs the uninterrupted run's flow
    made (every 2 updates of steps of 2 updates: each step; every 4: every other step's window),
    not one entry a line; the steps after the last log wait for the next, as TRL's emptied buffer."""
    from polyrl.trl_log_steps import replayed

    history = [{"step": i, "reward_mean": float(i), "epoch": i / 2} for i in range(1, 6)]
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", logging_steps=4)
    assert [(m["step"], m["reward_mean"]) for m in replayed(history, args, 4, per_step=2)] == [(2, 1.5), (4, 3.5)]
    assert [m["step"] for m in replayed(history, args, 2, per_step=2)] == [1, 2, 3, 4, 5]
    epochs = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", logging_strategy="epoch")
    assert [(m["step"], m["epoch"]) for m in replayed(history, epochs, 500, per_step=1)] == [(2, 1.0), (4, 2.0)]


def test_logging_steps_decides_on_log_log_history_and_the_trackers_while_metrics_jsonl_keeps_every_step(
        tiny_model_dir, tmp_path):
    """logging_steps=2 over 3 steps: transformers logs at global_step 2 (the mean of steps 1 and 2),
    then its end-of-training summary at 3, to which TRL's log adds its metrics of the steps not
    logged yet (step 3's reward, not its loss or learning rate: transformers' own)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = Logs()
    args = grpo_args(tmp_path, max_steps=3, max_completion_length=4, logging_steps=2, report_to="tensorboard")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(8),
                          callbacks=[logs])
    out = trainer.train()
    assert [s for s, _ in logs.logs] == [2, 3]
    assert logs.logs[-1][1] == out.metrics  # the summary
    assert list(out.metrics)[:5] == ["train_runtime", "train_samples_per_second", "train_steps_per_second",
                                     "total_flos", "train_loss"] and list(out.metrics)[-1] == "epoch"
    assert [e["step"] for e in trainer.state.log_history] == [2, 3]
    lines = _lines(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2, 3]  # polyrl's own record: every step
    logged = trainer.state.log_history[0]
    assert logged["reward"] == pytest.approx((lines[0]["reward_mean"] + lines[1]["reward_mean"]) / 2)
    assert logged["learning_rate"] == lines[1]["lr"] and logged == {**logs.logs[0][1], "step": 2}
    assert out.metrics["reward"] == pytest.approx(lines[2]["reward_mean"])
    assert "loss" not in out.metrics and "learning_rate" not in out.metrics
    scalars = {}
    for path in glob.glob(str(tmp_path / "**" / "events.out*"), recursive=True):
        events = EventAccumulator(path)
        events.Reload()
        for tag in events.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
    assert [s for s, _ in scalars["train/reward"]] == [2, 3]  # the window's, then the summary's
    assert scalars["train/reward"][0][1] == pytest.approx(logged["reward"], rel=1e-5)
    assert [s for s, _ in scalars["train/train_loss"]] == [3]


def test_logging_strategy_epoch_logs_each_epoch_and_a_callbacks_should_log_logs_its_step(tiny_model_dir, tmp_path):
    """Under "epoch" (2 steps an epoch: 4 prompts, 2 a step) transformers logs after each
    on_epoch_end; a callback setting should_log in on_step_end logs that step too, and the next
    log averages only the steps after it."""
    logs = Logs(force_at=1)
    args = grpo_args(tmp_path, max_steps=4, max_completion_length=4, logging_strategy="epoch")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(4),
                          callbacks=[logs])
    trainer.train()
    assert [s for s, _ in logs.logs] == [1, 2, 4, 4]  # the forced one, two epochs, the summary
    lines = _lines(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    assert logs.logs[1][1]["reward"] == pytest.approx(lines[1]["reward_mean"])  # its window: step 2 alone
    assert logs.logs[2][1]["reward"] == pytest.approx((lines[2]["reward_mean"] + lines[3]["reward_mean"]) / 2)
    assert [e["step"] for e in trainer.state.log_history] == [1, 2, 4, 4]


class StopAt(TrainerCallback):
    """Ends the run after global step ``step`` (its checkpoint written), as a crash there would leave it."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_a_resumed_run_keeps_the_logs_a_callback_forced_before_its_checkpoint_and_replays_none(tiny_model_dir,
                                                                                               tmp_path):
    """transformers' resume reads log_history from the checkpoint's trainer_state.json, so a log a
    callback forced (should_log at global step 1, off logging_steps=10) is still there, and no past
    log reaches on_log again (no step is re-run). polyrl rebuilt log_history from the flow alone,
    losing that entry."""
    first = Logs(force_at=1)
    args = grpo_args(tmp_path, max_steps=4, max_completion_length=4, logging_steps=10)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(8),
                callbacks=[first, StopAt(2)]).train()
    assert [s for s, _ in first.logs] == [1, 2]  # the forced log, the summary of the stopped run
    again = Logs()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(8),
                          callbacks=[again])
    assert trainer.train(resume_from_checkpoint=True).global_step == 4
    assert [s for s, _ in again.logs] == [4]  # nothing replayed: the summary only
    assert [e["step"] for e in trainer.state.log_history] == [1, 4]
    lines = _lines(tmp_path / "run")
    assert trainer.state.log_history[0]["reward"] == pytest.approx(lines[0]["reward_mean"])
    assert trainer.state.log_history[0] == {**first.logs[0][1], "step": 1}


class ChangesIntervals(TrainerCallback):
    """At step 1: the state's logging_steps to 2 (DefaultFlowCallback reads it at each step) and
    args.logging_steps to 3 (transformers read it once, when training began)."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            state.logging_steps, args.logging_steps = 2, 3


def test_the_states_logging_steps_after_train_are_the_runs_as_a_callback_left_them(tiny_model_dir, tmp_path):
    """transformers sets the state's intervals once, when training starts: after train() they are the
    run's, a callback's change of the state's kept, one of args' with no effect. polyrl computed them
    from args again at the end (state.logging_steps was 3: args', not the run's 2)."""
    logs = Logs()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          args=grpo_args(tmp_path, max_steps=3, per_device_train_batch_size=2),
                          callbacks=[ChangesIntervals(), logs])
    trainer.train()
    assert [step for step, entry in logs.logs if "loss" in entry] == [1, 2]  # the state's 2 followed, not args' 3
    assert trainer.state.logging_steps == 2
