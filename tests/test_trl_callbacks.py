"""transformers' ``TrainerCallback``s on ``polyrl.trl.GRPOTrainer``: a TRL script's logging and
early-stopping callbacks run unchanged, called with transformers' own ``TrainerState`` and
``TrainerControl`` in transformers' order; ``should_training_stop`` ends the run cleanly, and a
callback that raises is one error naming it and the event."""

from __future__ import annotations

import functools
import json
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback, TrainerControl, TrainerState  # noqa: E402

from polyrl.errors import CallbackError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402


_args = functools.partial(grpo_args, max_steps=2, max_completion_length=4)


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


class Recorder(TrainerCallback):
    """Records each event with what transformers passes: the state's step, the logs, the kwargs."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []
        self.logs: list[dict] = []
        self.evaluations: list[dict] = []
        self.seen: dict = {}

    def _note(self, event, args, state, control, **kwargs):
        assert isinstance(state, TrainerState) and isinstance(control, TrainerControl)
        self.events.append((event, state.global_step))
        self.seen = {"args": args, "state": state, **kwargs}

    def on_init_end(self, args, state, control, **kwargs):
        self._note("on_init_end", args, state, control, **kwargs)

    def on_train_begin(self, args, state, control, **kwargs):
        self._note("on_train_begin", args, state, control, **kwargs)

    def on_step_begin(self, args, state, control, **kwargs):
        self._note("on_step_begin", args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        self._note("on_step_end", args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._note("on_log", args, state, control, **kwargs)
        self.logs.append(dict(logs))
        assert state.log_history[-1] == {**logs, "step": state.global_step}  # kept current, as transformers does

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self._note("on_evaluate", args, state, control, **kwargs)
        self.evaluations.append(dict(metrics))

    def on_save(self, args, state, control, **kwargs):
        self._note("on_save", args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        self._note("on_train_end", args, state, control, **kwargs)


def test_a_trainer_callback_sees_transformers_events_in_order_with_trls_logs(tiny_model_dir, tmp_path):
    recorder = Recorder()
    args = _args(tmp_path)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(),
                          callbacks=[recorder])
    assert recorder.events == [("on_init_end", 0)]
    out = trainer.train()
    step = ["on_step_begin", "on_step_end", "on_log"]
    assert [e for e, _ in recorder.events] == ["on_init_end", "on_train_begin", *step, *step, "on_save",
                                               "on_log", "on_train_end"]  # a TRL config checkpoints at the end only
    assert [s for e, s in recorder.events if e == "on_step_end"] == [1, 2]
    assert out.global_step == 2
    # on_log gets each step's metrics under TRL's names, as trainer.state.log_history has them, then
    # transformers' end-of-training summary
    assert [{**logs, "step": s} for logs, s in zip(recorder.logs, (1, 2, 2))] == trainer.state.log_history
    assert {"reward", "rewards/short/mean", "loss", "learning_rate", "epoch"} <= set(recorder.logs[1])
    assert recorder.logs[-1] == out.metrics
    state = recorder.seen["state"]
    assert state.max_steps == 2 and state.global_step == 2 and state.epoch == trainer.state.epoch
    assert state.is_world_process_zero and state.is_local_process_zero
    assert state.log_history == trainer.state.log_history
    assert recorder.seen["args"] is args  # the script's own GRPOConfig
    assert recorder.seen["processing_class"] is not None and recorder.seen["train_dataloader"] is None
    assert recorder.seen["lr_scheduler"] is None


def test_train_ends_with_transformers_summary_entry(tiny_model_dir, tmp_path):
    """transformers' trainer ends train() by logging its summary (log_history's last entry, on_log,
    TrainOutput.metrics: TRL 1.16's keys, samples counted as max_steps x the update's batch), so a
    script reading log_history[-1]["train_loss"] or a callback's on_log finds it."""
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), eval_dataset=_dataset(2), callbacks=[recorder])
    out = trainer.train()
    summary = trainer.state.log_history[-1]
    assert list(summary) == ["train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                             "train_loss", "epoch", "step"]  # TRL 1.16's own entry, in its order
    assert summary == {**out.metrics, "step": 2} and recorder.logs[-1] == out.metrics
    assert summary["train_samples_per_second"] == pytest.approx(2 * 4 / summary["train_runtime"], rel=0.01)
    assert summary["train_steps_per_second"] == pytest.approx(2 / summary["train_runtime"], rel=0.01)
    assert summary["total_flos"] == 0.0 and summary["train_loss"] == out.training_loss
    alone = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path / "b"),
                        train_dataset=_dataset())
    alone.train()  # no callbacks: the same entry ends log_history
    assert list(alone.state.log_history[-1])[:2] == ["train_runtime", "train_samples_per_second"]
    assert [m["step"] for m in alone.state.log_history] == [1, 2, 2]


def test_evaluate_logs_and_calls_on_evaluate_as_transformers_does(tiny_model_dir, tmp_path):
    """transformers' evaluate() logs its metrics (on_log) and calls on_evaluate: a script's
    callback (a tracker, early stopping on a manual evaluation) sees every evaluate() call."""
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), eval_dataset=_dataset(2), callbacks=[recorder])
    metrics = trainer.evaluate()
    assert [e for e, _ in recorder.events] == ["on_init_end", "on_log", "on_evaluate"]
    assert recorder.logs == [metrics] and recorder.evaluations == [metrics]
    assert trainer.state.log_history == [{**metrics, "step": 0}]

    class Failing(TrainerCallback):
        def on_evaluate(self, args, state, control, **kwargs):
            raise RuntimeError("tracker down")

    trainer.add_callback(Failing)
    with pytest.raises(CallbackError, match="Failing.*on_evaluate.*tracker down"):
        trainer.evaluate()


def test_trainer_log_reaches_log_history_and_on_log_as_transformers_does(tiny_model_dir, tmp_path):
    """TRL's example scripts call trainer.log(metrics) before and after train() (an AttributeError
    here before): the entry, with the state's epoch, is appended at the current step and on_log gets it."""
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                          callbacks=[recorder])
    metrics = {"tool_eval_before/accuracy": 0.25}
    trainer.log(metrics)
    assert metrics == {"tool_eval_before/accuracy": 0.25, "epoch": 0}  # transformers adds it in place
    assert trainer.state.log_history == [{**metrics, "step": 0}] and recorder.logs == [metrics]
    assert [e for e, _ in recorder.events] == ["on_init_end", "on_log"]
    assert trainer.is_local_process_zero() and trainer.is_world_process_zero()
    alone = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset())
    alone.log({"x": 1.0})
    assert alone.state.log_history == [{"x": 1.0, "epoch": 0, "step": 0}]


class LogsEachStep(TrainerCallback):
    """A TRL user's callback logging a metric of its own through the trainer after each step."""

    def __init__(self):
        self.trainer = None

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.log({"custom/steps_seen": float(state.global_step)})


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files under ``folder``, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _tensorboard_dir(output_dir: Path) -> Path:
    """The one folder a TRL run's TensorBoard tracker wrote, as transformers' TensorBoardCallback
    names it: ``output_dir/runs/<date>_<host>``."""
    (folder,) = (output_dir / "runs").iterdir()
    return folder


def test_a_trl_runs_tensorboard_files_are_where_transformers_writes_them(tiny_model_dir, tmp_path, monkeypatch):
    """transformers' TensorBoardCallback writes to $TENSORBOARD_LOGGING_DIR, else to
    output_dir/runs/<Mon DD_HH-MM-SS>_<host> (its logging_dir field is deprecated and unread). polyrl's
    TRL run wrote output_dir/tensorboard, so `tensorboard --logdir OUTPUT_DIR/runs` (or the variable's
    folder) showed nothing. Now the event files are where transformers' own callback puts them."""
    pytest.importorskip("tensorboard")
    from datetime import datetime
    from types import SimpleNamespace

    from transformers.integrations.integration_utils import TensorBoardCallback

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    args = _args(tmp_path, report_to="tensorboard")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), args=args)
    trainer.train()
    assert not (tmp_path / "run" / "tensorboard").exists()
    ours = _tensorboard_dir(tmp_path / "run")
    theirs = TensorBoardCallback()
    theirs.tb_writer = SimpleNamespace(add_text=lambda *a, **k: None)  # its folder only: no writer of its own
    theirs.on_train_begin(args, TrainerState(is_world_process_zero=True), TrainerControl())
    theirs_dir = Path(theirs.logging_dir)
    assert ours.parent == theirs_dir.parent == tmp_path / "run" / "runs"
    (ours_time, ours_host), (theirs_time, theirs_host) = (
        (datetime.strptime("_".join(name.split("_", 2)[:2]), "%b%d_%H-%M-%S"), name.split("_", 2)[2])
        for name in (ours.name, theirs_dir.name))
    assert ours_host == theirs_host  # the same name, at the start of training
    assert 0 <= (theirs_time - ours_time).total_seconds() < 600, (ours, theirs_dir)
    assert [step for step, _ in _scalars(ours)["train/loss"]] == [1, 2]

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "chosen"))
    args = _args(tmp_path, output_dir=str(tmp_path / "again"), report_to="tensorboard")
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), args=args).train()
    assert TensorBoardCallback().logging_dir == str(tmp_path / "chosen")
    assert [step for step, _ in _scalars(tmp_path / "chosen")["train/loss"]] == [1, 2]
    assert not (tmp_path / "again" / "runs").exists() and not (tmp_path / "again" / "tensorboard").exists()


class _WandbRun:
    """A W&B run object that records its init arguments, step-axis definitions, history and summary."""

    def __init__(self, **init):
        self.init, self.defined, self.logged, self.summary = init, [], [], {}

    def define_metric(self, name, **kwargs):
        self.defined.append((name, kwargs))

    def log(self, data, step=None):
        self.logged.append(dict(data))

    def finish(self, exit_code=None):
        pass


def test_a_trl_runs_wandb_run_has_transformers_step_axis_summary_and_project(tiny_model_dir, tmp_path, monkeypatch):
    """transformers' WandbCallback plots every metric against train/global_step (logged with each
    entry), keeps train_runtime, train_loss... in the run summary and names the project $WANDB_PROJECT
    (default "huggingface"); polyrl's TRL run logged no train/global_step, put those numbers in the
    history and named the project "polyrl". The callback's own calls are compared in test_trl_tags."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    runs: list[_WandbRun] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: runs.append(_WandbRun(**kwargs)) or runs[-1])
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, report_to="wandb", num_iterations=2, max_steps=4))
    output = trainer.train()
    (run,) = runs
    assert run.defined == [("train/global_step", {}), ("*", {"step_metric": "train/global_step", "step_sync": True})]
    assert run.init["project"] == "huggingface"
    assert run.summary == {k: v for k, v in output.metrics.items() if k != "epoch"}
    entries = [entry for entry in run.logged if "completions" not in entry]  # TRL logs its table bare too
    assert [entry["train/global_step"] for entry in entries] == [2, 4, 4]  # num_iterations updates a step
    assert entries[0]["train/loss"] == trainer.state.log_history[0]["loss"]
    assert entries[-1] == {"train/epoch": output.metrics["epoch"], "train/global_step": 4}  # the rest: summary


class _TheirWandb:
    """The ``wandb`` module as transformers' WandbCallback calls it: records init and config."""

    def __init__(self):
        self.run, self.config, self.init_kwargs = None, {}, None

    def init(self, **kwargs):
        self.init_kwargs = kwargs
        self.run = type("Run", (), {"_label": lambda self, **k: None})()
        self.config = type("Config", (dict,), {"update": lambda self, d, allow_val_change=False: dict.update(self, d)})()
        return self.run

    def define_metric(self, *args, **kwargs):
        pass

    def termwarn(self, *args, **kwargs):
        pass


class _TheirTrackio(_TheirWandb):
    """The ``trackio`` module as transformers' TrackioCallback calls it: records init and config."""

    def __init__(self):
        super().__init__()
        from types import SimpleNamespace

        self.context_vars = SimpleNamespace(current_space_id=SimpleNamespace(get=lambda: None))
        self.config = type("Config", (dict,), {"update": lambda self, d, allow_val_change=False: dict.update(self, d)})()

    def init(self, **kwargs):
        self.init_kwargs = kwargs


def _texts(folder: Path) -> dict[str, list[tuple[int, str]]]:
    """Every text summary of the TensorBoard event files under ``folder``: tag -> (step, text)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if tag.endswith("/text_summary")}


@pytest.mark.parametrize("run_name", [None, "lr-1e-4"])
def test_a_trl_runs_wandb_trackio_names_configs_and_tensorboard_texts_are_transformers_callbacks(tiny_model_dir, tmp_path,
                                                                                       monkeypatch, run_name):
    """transformers' WandbCallback names the W&B run args.run_name (None, its default, leaves the name
    to W&B) and logs the model config, args.to_dict() over it and model/num_parameters as the run's
    config; its TensorBoardCallback writes args.to_json_string() and the model config's JSON as the
    text summaries "args" and "model_config". polyrl named a TRL script's W&B run after its
    output_dir, logged polyrl's own config (no learning_rate, beta... under TRL's names) and wrote no
    text; its trackio run (TrackioCallback: project args.project, default "huggingface", the same
    name and config) went to project "polyrl" under polyrl's names. Now all are what transformers' own
    callbacks write for TRL's own trainer of the same script (its callbacks run here on TRL's
    GRPOTrainer, a real SummaryWriter, a recording W&B and trackio)."""
    wandb = pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations.integration_utils import TensorBoardCallback, TrackioCallback, WandbCallback

    trackio = pytest.importorskip("trackio")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    inits: list[dict] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: inits.append(kwargs) or _WandbRun(**kwargs))
    trackio_inits: list[dict] = []
    monkeypatch.setattr(trackio, "init", lambda **kwargs: trackio_inits.append(kwargs) or _WandbRun(**kwargs))
    args = _args(tmp_path, report_to=["wandb", "tensorboard", "trackio"], run_name=run_name, max_steps=1)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), args=args).train()

    state = TrainerState(is_world_process_zero=True)
    theirs_trainer = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                                     args=_args(tmp_path, output_dir=str(tmp_path / "run"), run_name=run_name,
                                                max_steps=1))
    their_wandb = WandbCallback()
    their_wandb._wandb = recorded = _TheirWandb()
    their_wandb.setup(args, state, theirs_trainer.model)
    their_trackio = TrackioCallback()
    their_trackio._trackio = recorded_trackio = _TheirTrackio()
    their_trackio.setup(args, state, theirs_trainer.model)
    their_board = TensorBoardCallback(SummaryWriter(log_dir=str(tmp_path / "theirs")))
    their_board.on_train_begin(args, state, TrainerControl(), model=theirs_trainer.model)
    their_board.on_train_end(args, state, TrainerControl())

    (ours,) = inits
    assert ours["name"] == recorded.init_kwargs.get("name") == run_name
    config = {k: v for k, v in ours["config"].items() if k != "polyrl"}  # polyrl's own config, beside
    assert config == dict(recorded.config)
    assert config["learning_rate"] == 1e-4 and config["model/num_parameters"] > 0 and "vocab_size" in config
    assert ours["config"]["polyrl"]["train"]["output_dir"] == str(tmp_path / "run")
    (our_trackio,) = trackio_inits  # trackio's project is args.project, its config as W&B's
    assert (our_trackio["project"], our_trackio["name"]) == (recorded_trackio.init_kwargs["project"], run_name) \
        == ("huggingface", run_name)
    assert {k: v for k, v in our_trackio["config"].items() if k != "polyrl"} == dict(recorded_trackio.config)
    texts = _texts(_tensorboard_dir(tmp_path / "run"))
    assert texts == _texts(tmp_path / "theirs")
    assert set(texts) == {"args/text_summary", "model_config/text_summary"}
    assert json.loads(texts["args/text_summary"][0][1])["run_name"] == run_name


def test_trainer_log_during_training_reaches_the_report_to_trackers_and_stays_in_log_history(tiny_model_dir,
                                                                                             tmp_path):
    """transformers hands every Trainer.log to each report_to integration. TRL's report_to was ignored
    (a report_to="tensorboard" script wrote no event file at all), a callback's trainer.log(...) during
    train() reached no tracker, and train() rebuilt log_history at its end without those entries. Now the
    run's trackers get the steps and the callback's logs; after train() they are closed (a warning)."""
    pytest.importorskip("tensorboard")
    from structlog.testing import capture_logs

    logger = LogsEachStep()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), callbacks=[logger],
                          args=_args(tmp_path, report_to="tensorboard"))
    logger.trainer = trainer
    trainer.train()
    scalars = _scalars(_tensorboard_dir(tmp_path / "run"))
    assert scalars["train/custom/steps_seen"] == [(1, 1.0), (2, 2.0)]  # transformers' rewrite_logs tags
    assert [step for step, _ in scalars["train/loss"]] == [1, 2]  # the steps' own metrics, under TRL's tags too
    logged = [(h["step"], h["custom/steps_seen"]) for h in trainer.state.log_history if "custom/steps_seen" in h]
    assert logged == [(1, 1.0), (2, 2.0)]
    with capture_logs() as logs:
        trainer.log({"after_training": 1.0})
    assert trainer.state.log_history[-1]["after_training"] == 1.0
    assert any("outside train()" in e["event"] and e["report_to"] == ["tensorboard"] for e in logs), logs
    assert not any("after_training" in tag for tag in _scalars(_tensorboard_dir(tmp_path / "run")))


def test_the_end_of_training_metrics_reach_the_report_to_trackers_as_transformers_logs_them(tiny_model_dir,
                                                                                              tmp_path):
    """transformers' train() ends with one log of train_runtime, train_samples_per_second,
    train_steps_per_second, total_flos, train_loss and epoch, which every report_to integration gets.
    polyrl returned them (TrainOutput.metrics, log_history's last entry) but sent them to no tracker:
    a report_to="tensorboard" script's event file had none of them. Now they reach the trackers at the
    last step taken, with the values train() returns."""
    pytest.importorskip("tensorboard")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, report_to="tensorboard"))
    output = trainer.train()
    scalars = _scalars(_tensorboard_dir(tmp_path / "run"))
    for key in ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"):
        assert scalars.get(f"train/{key}") == [(2, pytest.approx(output.metrics[key], rel=1e-6))], (key, sorted(scalars))
    assert trainer.state.log_history[-1]["train_loss"] == output.training_loss == output.metrics["train_loss"]


def test_a_trl_runs_tensorboard_tags_are_transformers_rewrite_logs_tags(tiny_model_dir, tmp_path):
    """transformers' TensorBoardCallback (and WandbCallback...) tags each log key with rewrite_logs:
    eval_x is eval/x, anything else train/x. polyrl's TRL run wrote the bare keys (loss, reward,
    completions/mean_length, eval_ names never), so a TRL user's panels on train/loss or eval/reward
    stayed empty, and at polyrl's step where transformers logs at global_step (optimizer updates). Now
    every scalar of a TRL run is under train/ or eval/, with TRL's metric names, at log_history's
    steps and values; polyrl's own runs keep their names and steps (test_tracking)."""
    pytest.importorskip("tensorboard")
    from transformers.integrations.integration_utils import rewrite_logs

    eval_rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 2?"} for i in range(2)])
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), eval_dataset=eval_rows,
                          args=_args(tmp_path, report_to="tensorboard", eval_strategy="steps", eval_steps=2,
                                     per_device_eval_batch_size=2, max_steps=4, num_iterations=2))
    trainer.train()
    scalars = _scalars(_tensorboard_dir(tmp_path / "run"))
    assert {"train/loss", "train/reward", "train/reward_std", "train/completions/mean_length", "train/learning_rate",
            "train/rewards/short/mean", "train/entropy", "train/train_loss", "eval/loss", "eval/reward",
            "eval/completions/mean_length"} <= set(scalars), sorted(scalars)
    assert all(tag.startswith(("train/", "eval/")) for tag in scalars), sorted(scalars)
    for entry in trainer.state.log_history:  # each TRL log entry's numbers, at transformers' tags
        for tag, value in rewrite_logs({k: v for k, v in entry.items() if k != "step"}).items():
            if isinstance(value, float) and value == value and tag in scalars and entry["step"] in dict(scalars[tag]):
                assert dict(scalars[tag])[entry["step"]] == pytest.approx(value, rel=1e-5), tag
    # at transformers' global_step: optimizer updates, num_iterations (2) of them per polyrl step
    assert [step for step, _ in scalars["train/reward"]] == [2, 4] == [step for step, _ in scalars["eval/reward"]]
    assert [step for step, _ in scalars["train/train_loss"]] == [trainer.state.global_step] == [4]


class WeightNorms(TrainerCallback):
    """A TRL user's callback reading the model it is given: its weight norm after each step."""

    def __init__(self):
        self.norms: list[float] = []
        self.given: list[tuple] = []

    def on_init_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.given.append(("on_init_end", model, optimizer))

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch

        self.given.append(("on_step_end", model, optimizer))
        with torch.no_grad():
            self.norms.append(float(sum(p.float().norm() ** 2 for p in model.parameters() if p.requires_grad)))

    def on_train_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.given.append(("on_train_end", model, optimizer))


def test_callbacks_get_the_live_torch_model_and_optimizer_as_transformers_passes_them(tiny_model_dir, tmp_path):
    """transformers hands every event model= and optimizer=; TRL users' callbacks log weight norms or
    save with them. On the torch backend they are the training engine's own module and AdamW (they
    were None): the norm read after each step moves as the run trains, and after train() the
    handler holds neither."""
    import torch
    from transformers import PreTrainedModel

    norms = WeightNorms()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, learning_rate=1e-2),
                          train_dataset=_dataset(), callbacks=[norms])
    trainer.train()
    assert [e for e, _, _ in norms.given] == ["on_init_end", "on_step_end", "on_step_end", "on_train_end"]
    assert norms.given[0][1:] == (None, None)  # no engine before train(), as no model is loaded yet
    models = {id(m) for _, m, _ in norms.given[1:]}
    model, optimizer = norms.given[1][1:]
    assert len(models) == 1 and isinstance(model, PreTrainedModel)
    assert isinstance(optimizer, torch.optim.Optimizer) and optimizer.param_groups[0]["lr"] > 0
    assert len(norms.norms) == 2 and norms.norms[0] != norms.norms[1]  # the live weights, trained between
    assert trainer.callback_handler.model is None and trainer.callback_handler.optimizer is None


def test_on_evaluate_gets_trls_eval_names_after_the_steps_log(tiny_model_dir, tmp_path):
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          eval_dataset=_dataset(2), callbacks=[Recorder],
                          args=_args(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1,
                                     eval_on_start=True))
    trainer.pop_callback(Recorder)
    trainer.add_callback(recorder)
    trainer.train()
    assert [e for e, _ in recorder.events] == [
        "on_train_begin", "on_log", "on_evaluate",  # eval_on_start
        "on_step_begin", "on_step_end", "on_log", "on_log", "on_evaluate", "on_save",
        "on_log", "on_train_end"]  # the last on_log: transformers' train summary
    assert [sorted(m) for m in recorder.evaluations] == [sorted({**e, "epoch": 0}) for e in recorder.logs[::2]]
    assert all("eval_reward" in m for m in recorder.evaluations) and "loss" in recorder.logs[1]
    assert recorder.seen["state"].log_history == trainer.state.log_history


class StopAfterFirstStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            control.should_training_stop = True
        return control


def test_should_training_stop_ends_the_run_after_that_step_saved_and_exported(tiny_model_dir, tmp_path, monkeypatch):
    script = tmp_path / "train.py"  # as if run as python train.py (pytest's own __main__ differs by launcher)
    script.write_text("")
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None, __file__=str(script)))
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                          train_dataset=_dataset(), callbacks=[StopAfterFirstStep(), recorder])
    out = trainer.train()
    assert out.global_step == 1 and trainer.state.global_step == 1
    assert [m["step"] for m in trainer.state.log_history] == [1, 1]  # the step, then the train summary
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-00000001"]
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    # a stop before max_steps asks no save on TRL's trainer (DefaultFlowCallback asks one at max_steps
    # only): polyrl's own last checkpoint above is written with no on_save, as there
    assert [e for e, _ in recorder.events][-4:] == ["on_step_end", "on_log", "on_log", "on_train_end"]
    assert "on_save" not in [e for e, _ in recorder.events]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]
    from polyrl.report import load_run  # named as stopped by its code, not as a Ctrl-C or a crash

    said = load_run(tmp_path / "run").unfinished
    assert said == (
        "the run logged 1 of its 3 steps (train.steps): its own code asked it to stop after step 1 (a callback "
        "set control.should_training_stop); trainer.train(resume_from_checkpoint=True) in the TRL script, run "
        f"again (python {script.resolve()}) trains the rest"), said  # no config for polyrl train CONFIG --resume


STOPPED_SCRIPT = """
import datasets, trl
from transformers import TrainerCallback
from polyrl.trl import GRPOTrainer

class StopAfterFirstStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == 1

def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]

args = trl.GRPOConfig(output_dir={out!r}, max_steps=3, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=4, learning_rate=1e-4, use_cpu=True, report_to="none",
                      disable_tqdm=True, bf16=False)
rows = datasets.Dataset.from_list([{{"prompt": f"What is {{i}} + 1?"}} for i in range(4)])
GRPOTrainer(model={model!r}, reward_funcs=[short], args=args, train_dataset=rows,
            callbacks=[StopAfterFirstStep()]).train(resume_from_checkpoint={resume})
"""


@pytest.mark.slow
def test_polyrl_report_tells_a_trl_script_run_to_resume_with_its_script(tiny_model_dir, tmp_path):
    """``polyrl report`` on a run a TRL script stopped short: before, its advice was ``polyrl train
    CONFIG --resume``, a config such a run never had; now it names the script and
    ``train(resume_from_checkpoint=True)``, which (tested) trains the rest."""
    import subprocess
    import sys

    out, script = tmp_path / "run", tmp_path / "train_grpo.py"

    def run(*command: str) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    script.write_text(STOPPED_SCRIPT.format(out=str(out), model=tiny_model_dir, resume=False))
    run(sys.executable, str(script))
    report = run(sys.executable, "-m", "polyrl.cli", "report", str(out), "--output", str(tmp_path / "report.png"))
    assert ("its own code asked it to stop after step 1 (a callback set control.should_training_stop); "
            "trainer.train(resume_from_checkpoint=True) in the TRL script, run again "
            f"(python {script}) trains the rest") in report, report
    assert "polyrl train CONFIG" not in report
    script.write_text(STOPPED_SCRIPT.format(out=str(out), model=tiny_model_dir, resume=True))  # as advised
    run(sys.executable, str(script))
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3], steps


class SaveAtFirstStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_save = state.global_step == 1


def test_should_save_checkpoints_that_step(tiny_model_dir, tmp_path):
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[SaveAtFirstStep, recorder])
    trainer.train()
    # asked at 1; the last one, its should_save cleared, polyrl writes with no on_save, as TRL writes none
    assert [s for e, s in recorder.events if e == "on_save"] == [1]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000001", "step-00000002"]


class StopWhenSaved(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        control.should_training_stop = True


def test_should_training_stop_set_in_on_save_ends_the_run_after_that_step(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                          train_dataset=_dataset(), callbacks=[StopWhenSaved()])
    assert trainer.train().global_step == 1


class Broken(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            raise ValueError("no such metric")


def test_a_callback_that_raises_is_one_error_naming_it_and_the_event(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                          train_dataset=_dataset(), callbacks=[SaveAtFirstStep(), Broken()])
    with pytest.raises(CallbackError) as err:
        trainer.train()
    text = str(err.value)
    assert "\n" not in text and "Broken.on_step_end" in text and "ValueError: no such metric" in text
    assert "test_trl_callbacks.py:" in text and "Fix:" in text and "checkpointed" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__
    # step 2 trained and was recorded before on_step_end raised: its line and checkpoint are kept
    # (it was lost, the run rewound to step 1); a resume without the callback goes on from there
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000001",
                                                                                   "step-00000002"]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    again = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                        train_dataset=_dataset())
    assert again.train(resume_from_checkpoint=True).global_step == 3


class BrokenAt(TrainerCallback):
    """Raises in ``event`` at step ``step``."""

    def __init__(self, event: str, step: int = 0):
        self.event, self.step = event, step

    def _maybe(self, event, state):
        if event == self.event and state.global_step == self.step:
            raise RuntimeError(f"broken in {event}")

    def on_train_begin(self, args, state, control, **kwargs):
        self._maybe("on_train_begin", state)

    def on_step_begin(self, args, state, control, **kwargs):
        self._maybe("on_step_begin", state)

    def on_train_end(self, args, state, control, **kwargs):
        self._maybe("on_train_end", state)


@pytest.mark.parametrize(("event", "step", "saved", "says"), [
    ("on_step_begin", 1, ["step-00000001"], "checkpointed"),  # before step 2: step 1 trained, no checkpoint yet
    ("on_train_begin", 0, [], "before its first step"),
    ("on_train_end", 2, ["step-00000002"], "after the run ended"),
])
def test_a_callback_raising_outside_a_steps_end_keeps_the_trained_steps_and_says_what_became_of_the_run(
        tiny_model_dir, tmp_path, event, step, saved, says):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[BrokenAt(event, step)])
    with pytest.raises(CallbackError) as err:
        trainer.train()
    assert f"BrokenAt.{event}" in str(err.value) and says in str(err.value) and "\n" not in str(err.value)
    folder = tmp_path / "run" / "checkpoints"
    assert (sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []) == saved


def test_a_train_again_after_a_callback_failed_calls_the_callbacks_anew(tiny_model_dir, tmp_path):
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                          train_dataset=_dataset(), callbacks=[Broken(), recorder])
    with pytest.raises(CallbackError):
        trainer.train()
    trainer.remove_callback(Broken)
    recorder.events.clear()
    assert trainer.train(resume_from_checkpoint=True).global_step == 3
    # the failure was not remembered: every event reached the recorder (none did before)
    assert [e for e, _ in recorder.events] == ["on_train_begin", "on_step_begin", "on_step_end", "on_log",
                                               "on_save", "on_log", "on_train_end"]


class EvaluateAtFirstStep(TrainerCallback):
    """Asks an evaluation at step 1 and leaves the flag alone elsewhere (setting it False at step 3
    would cancel DefaultFlowCallback's eval_steps evaluation there, as on TRL's trainer)."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            control.should_evaluate = True


def test_should_evaluate_evaluates_that_step_on_the_eval_dataset(tiny_model_dir, tmp_path):
    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          eval_dataset=_dataset(2), callbacks=[EvaluateAtFirstStep(), recorder],
                          args=_args(tmp_path, max_steps=3, eval_strategy="steps", eval_steps=3))
    trainer.train()
    # asked at step 1, scheduled at step 3; on_log and on_evaluate after on_step_end, as transformers calls them
    assert [s for e, s in recorder.events if e == "on_evaluate"] == [1, 3]
    assert [e for e, _ in recorder.events][:7] == ["on_init_end", "on_train_begin", "on_step_begin", "on_step_end",
                                                   "on_log", "on_log", "on_evaluate"]
    assert [m["step"] for m in trainer.state.log_history if "eval_reward" in m] == [1, 3]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "eval/sampled_reward_mean" in m] == [1, 3]  # on the step's own line


def test_should_evaluate_under_eval_strategy_no_evaluates_on_the_eval_dataset_given(tiny_model_dir, tmp_path):
    """transformers' _maybe_log_save_evaluate evaluates whenever control.should_evaluate is set,
    whatever the eval_strategy: with "no" and an eval_dataset the step a callback asks for is
    evaluated (on_log and on_evaluate follow), without a warning, and nothing else is (no
    evaluation at the end, as TRL runs none). It was a warning and no evaluation."""
    from structlog.testing import capture_logs

    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=3),
                          train_dataset=_dataset(), eval_dataset=_dataset(2),
                          callbacks=[EvaluateAtFirstStep(), recorder])
    with capture_logs() as logs:
        assert trainer.train().global_step == 3
    assert not [e for e in logs if "should_evaluate" in e["event"]]
    assert [s for e, s in recorder.events if e == "on_evaluate"] == [1]
    assert "eval_reward" in recorder.evaluations[0]
    assert [m["step"] for m in trainer.state.log_history if "eval_reward" in m] == [1]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "eval/sampled_reward_mean" in m] == [1]
    assert not [m for m in lines if m.get("phase")]  # no evaluation before or after training


def test_should_evaluate_in_a_run_without_an_eval_dataset_warns_once_and_trains_on(tiny_model_dir, tmp_path):
    from structlog.testing import capture_logs

    class EvaluateEveryStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_evaluate = True

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[EvaluateEveryStep()])
    with capture_logs() as logs:
        assert trainer.train().global_step == 2
    said = [e for e in logs if "should_evaluate" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "warning" and "eval_dataset" in said[0]["event"]
    assert not any("eval_reward" in m for m in trainer.state.log_history)


def test_a_progress_callback_given_draws_the_only_bar(tiny_model_dir, tmp_path, monkeypatch):
    from transformers import ProgressCallback

    from polyrl.trainer import Trainer

    shown: list[bool] = []
    run = Trainer.run
    monkeypatch.setattr(Trainer, "run", lambda self, progress=True: shown.append(progress) or run(self, progress))
    for given in ([ProgressCallback], [Recorder()]):
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1, disable_tqdm=False),
                    train_dataset=_dataset(), callbacks=given).train()
    assert shown == [False, True]  # polyrl's own bar beside transformers' tqdm bar: two bars


def test_callbacks_are_added_popped_and_removed_as_transformers_does(tiny_model_dir, tmp_path):
    first, second = Recorder(), StopAfterFirstStep()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[first])
    trainer.add_callback(second)
    trainer.add_callback(SaveAtFirstStep)  # a class is made with no arguments
    assert [type(c) for c in trainer.callback_handler.callbacks] == [Recorder, StopAfterFirstStep, SaveAtFirstStep]
    assert trainer.pop_callback(StopAfterFirstStep) is second
    assert trainer.pop_callback(StopAfterFirstStep) is None
    trainer.remove_callback(first)
    trainer.remove_callback(SaveAtFirstStep)
    assert trainer.callback_handler.callbacks == []
    with pytest.raises(Exception) as err:  # noqa: PT011 - transformers' own: list.remove's ValueError
        trainer.remove_callback(first)
    assert isinstance(err.value, ValueError)


def test_a_callback_without_the_events_is_refused_by_name(tiny_model_dir, tmp_path):
    from polyrl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                    callbacks=[Recorder(), object()])
    assert err.value.field == "callbacks[1]" and "TrainerCallback" in err.value.fix


def _on_two_ranks(script: str, tiny_model_dir: str, tmp_path: Path) -> None:
    """``tests/distributed/<script>`` under torchrun on two ranks (the model folder and ``tmp_path``
    its arguments), checked to succeed; skipped on a one-CPU machine."""
    import os
    import shutil
    import subprocess
    import sys

    from polyrl.launch import cpu_count

    if cpu_count() < 2:
        pytest.skip("two ranks need two CPUs")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    done = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2",
                           str(Path(__file__).parent / "distributed" / script), tiny_model_dir, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow  # two launched ranks: 20-40 s
def test_under_torchrun_every_rank_calls_its_callbacks_and_a_stop_on_rank_zero_stops_both(tiny_model_dir, tmp_path):
    _on_two_ranks("trl_callbacks_two_ranks.py", tiny_model_dir, tmp_path)
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"events-{rank}.json").read_text())
        assert seen["global_step"] == 1  # rank 0 asked; both stopped after step 1
        assert seen["events"] == [["on_train_begin", 0, rank == 0], ["on_step_end", 1, rank == 0],
                                  ["on_train_end", 1, rank == 0]]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]


@pytest.mark.slow  # two launched ranks: 20-40 s
def test_under_torchrun_an_evaluation_is_cancelled_only_where_every_rank_clears_should_evaluate(tiny_model_dir,
                                                                                                 tmp_path):
    """eval_steps 1 of 2 steps on 2 ranks: cleared in on_step_end on rank 0 alone (step 1), the
    evaluation runs on both (it is collective, and the other rank asks it); cleared on both (step 2,
    the last), neither evaluates it, nor after training."""
    _on_two_ranks("trl_eval_cancel_two_ranks.py", tiny_model_dir, tmp_path)
    assert [json.loads((tmp_path / f"evaluated-{rank}.json").read_text()) for rank in (0, 1)] == [[1], [1]]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m.get("phase")) for m in lines if "eval/sampled_reward_mean" in m] == [(1, None)]


def test_a_callback_class_that_needs_arguments_is_one_error_naming_it(tiny_model_dir, tmp_path):
    """transformers makes a class given with no arguments; one that needs some raised a bare
    TypeError out of GRPOTrainer()."""
    from transformers import EarlyStoppingCallback

    from polyrl.errors import ConfigError

    class Needs(TrainerCallback):
        def __init__(self, patience):
            self.patience = patience

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset())
    with pytest.raises(ConfigError) as err:
        trainer.add_callback(Needs)
    assert err.value.field == "callback" and "Needs" in str(err.value) and "TypeError" in str(err.value)
    assert "Needs(...)" in err.value.fix and trainer.callback_handler.callbacks == []
    trainer.add_callback(EarlyStoppingCallback)  # its arguments have defaults: made, as transformers makes it
    assert [type(c) for c in trainer.callback_handler.callbacks] == [EarlyStoppingCallback]


def test_early_stopping_on_the_eval_reward_stops_when_it_stops_improving(tiny_model_dir, tmp_path):
    """transformers' EarlyStoppingCallback with TRL's metric_for_best_model: the trainer keeps
    state.best_metric after each step's evaluation (after on_evaluate, as transformers), the
    callback counts evaluations that do not beat it by the threshold and stops the run. Both
    fields were refused (one ConfigError), so the callback could not run."""
    from transformers import EarlyStoppingCallback

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(8),
                          eval_dataset=_dataset(2),
                          callbacks=[EarlyStoppingCallback(early_stopping_patience=1, early_stopping_threshold=10.0)],
                          args=_args(tmp_path, max_steps=6, eval_strategy="steps", eval_steps=1,
                                     metric_for_best_model="reward"))
    trainer.train()
    evals = [entry for entry in trainer.state.log_history if "eval_reward" in entry]
    # step 1 sets the best; step 2 cannot beat it by 10 (rewards are -len/10): patience 1 is spent
    assert trainer.state.global_step == 2 and [e["step"] for e in evals] == [1, 2]
    assert trainer.state.best_metric == max(e["eval_reward"] for e in evals)
    assert trainer.state.best_global_step == max(evals, key=lambda e: e["eval_reward"])["step"]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_a_metric_for_best_model_the_evaluation_does_not_log_stops_with_its_names(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          eval_dataset=_dataset(2),
                          args=_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1,
                                     metric_for_best_model="accuracy"))
    with pytest.raises(CallbackError) as err:
        trainer.train()
    text = str(err.value)
    assert "metric_for_best_model = 'accuracy'" in text and "'eval_accuracy'" in text
    assert "eval_reward" in text and "after step 1" in text
    assert (tmp_path / "run" / "checkpoints" / "step-00000001" / "COMPLETE").exists()


class EndEpochAtFirstStep(TrainerCallback):
    """Ends the epoch at step 1 (and, with ``stop``, the run there: its checkpoint is resumed)."""

    def __init__(self, stop: bool = False):
        self.stop = stop

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            control.should_epoch_stop = True
            control.should_training_stop = self.stop


def _prompts_per_step(model: str, out: Path, steps: int, callbacks=(), resume: bool = False,
                      epochs: list | None = None, rows: int = 4) -> list[list[str]]:
    """The prompts each step's reward saw, over a 4-row dataset (``rows``) at 2 prompts a step (2
    steps an epoch; ``steps`` 0: ``num_train_epochs`` 2); ``epochs`` gets each logged step's
    ``epoch``."""
    seen: list[list[str]] = []

    def record(completions, prompts, **kwargs):
        seen.append(list(dict.fromkeys(prompts)))
        return [0.0] * len(completions)

    sized = {"max_steps": steps} if steps else {"max_steps": -1, "num_train_epochs": 2}
    trainer = GRPOTrainer(model=model, reward_funcs=[record], args=_args(out, **sized),
                          train_dataset=_dataset(rows), callbacks=list(callbacks))
    trainer.train(resume_from_checkpoint=resume or None)
    if epochs is not None:
        epochs.extend(entry["epoch"] for entry in trainer.state.log_history if "train_runtime" not in entry)
    return seen


def test_should_epoch_stop_starts_the_next_epoch_and_a_resume_continues_there(tiny_model_dir, tmp_path):
    """transformers breaks out of the epoch's loop and goes on with the next epoch: the next step's
    prompts are the next epoch's first batch (it was ignored: the epoch's second batch), and the
    checkpoint written at that step resumes there."""
    plain = _prompts_per_step(tiny_model_dir, tmp_path / "plain", 4)  # epoch 0: steps 1-2; epoch 1: steps 3-4
    assert sorted(plain[0] + plain[1]) == sorted(plain[2] + plain[3])  # each epoch every row once
    epochs: list[float] = []
    ended = _prompts_per_step(tiny_model_dir, tmp_path / "ended", 2, [EndEpochAtFirstStep()], epochs=epochs)
    assert ended == [plain[0], plain[2]]
    assert epochs == [0.5, 1.5]  # transformers' state.epoch: epoch 1 begun, half of it done
    stopped = _prompts_per_step(tiny_model_dir, tmp_path / "stopped", 1, [EndEpochAtFirstStep(stop=True)])
    resumed = _prompts_per_step(tiny_model_dir, tmp_path / "stopped", 3, resume=True)  # no callback: the checkpoint holds the order
    assert stopped + resumed == [plain[0], plain[2], plain[3]]
    # num_train_epochs = 2 (4 steps): epoch 0 ended after its first step, epoch 1 whole, then the end
    assert _prompts_per_step(tiny_model_dir, tmp_path / "epochs", 0, [EndEpochAtFirstStep()]) == \
        [plain[0], plain[2], plain[3]]


class EndEpochOnSaveAtFirstStep(TrainerCallback):
    """Checkpoints step 1 and ends the epoch from that checkpoint's on_save."""

    def on_step_end(self, args, state, control, **kwargs):
        control.should_save = state.global_step == 1

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 1:
            control.should_epoch_stop = True


def test_should_epoch_stop_set_in_on_save_ends_the_epoch_at_that_step(tiny_model_dir, tmp_path):
    """transformers' loop reads should_epoch_stop right after _maybe_log_save_evaluate, on_save
    included: the next step starts the next epoch. polyrl read it one step later (step 2 still
    took the epoch's second batch, at epoch 1.0)."""
    plain = _prompts_per_step(tiny_model_dir, tmp_path / "plain", 4)
    epochs: list[float] = []
    ended = _prompts_per_step(tiny_model_dir, tmp_path / "ended", 2, [EndEpochOnSaveAtFirstStep()], epochs=epochs)
    assert ended == [plain[0], plain[2]]
    assert epochs == [0.5, 1.5]


def test_an_epoch_stop_ends_a_num_train_epochs_run_early_when_rows_are_not_whole_batches(tiny_model_dir, tmp_path):
    """5 rows at 2 prompts a step: TRL's sampler keeps 2 whole batches an epoch, so num_train_epochs
    = 2 is 4 steps. An epoch stop after step 1 leaves epoch 0 there; transformers' epoch 1 is
    steps 2-3 (epoch 1.5, 2.0) and the run ends after them. polyrl counted epochs by steps alone
    there (steps / 2: 1.0 after step 2), so it ran all 4 steps."""
    epochs: list[float] = []
    seen = _prompts_per_step(tiny_model_dir, tmp_path / "epochs", 0, [EndEpochAtFirstStep()], epochs=epochs, rows=5)
    assert epochs == [0.5, 1.5, 2.0] and len(seen) == 3


class StopAtStep(TrainerCallback):
    """A crash stand-in: the run ends after ``step`` (checkpointed), as a kill after its save would."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == self.step


class SeenAtStart(TrainerCallback):
    """The state's best fields as on_train_begin sees them (after a resume restored them)."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.best = (state.best_metric, state.best_global_step)


def _early_stopping_run(tiny_model_dir, tmp_path, callbacks, **kwargs):
    """Early stopping that cannot improve (a threshold of 10 on rewards within 1): patience 2 is
    spent by the third evaluation, one a step."""
    from transformers import EarlyStoppingCallback

    return GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(8),
                       eval_dataset=_dataset(2),
                       callbacks=[EarlyStoppingCallback(early_stopping_patience=2, early_stopping_threshold=10.0),
                                  *callbacks],
                       args=_args(tmp_path, max_steps=6, eval_strategy="steps", eval_steps=1,
                                  metric_for_best_model="reward", **kwargs))


@pytest.mark.parametrize("restore_callbacks", [True, False])
def test_early_stopping_goes_on_after_a_resume_as_transformers_restores_it(tiny_model_dir, tmp_path,
                                                                           restore_callbacks):
    """A run stopped after one non-improving evaluation (patience count 1 of 2), then resumed:
    best_metric and best_global_step are the pre-crash ones (the checkpoint keeps them, as
    transformers' trainer_state.json), and with restore_callback_states_from_checkpoint the
    EarlyStoppingCallback's count too, so one more non-improving evaluation stops it (step 3);
    without it (transformers' default) the count starts afresh against the kept best (step 4).
    Both were lost: the count and best_metric started afresh (a stop at step 5)."""
    from transformers import EarlyStoppingCallback

    first = _early_stopping_run(tiny_model_dir, tmp_path, [StopAtStep(2)],
                                restore_callback_states_from_checkpoint=restore_callbacks)
    assert first.train().global_step == 2
    before = (first.state.best_metric, first.state.best_global_step)
    best = max((e for e in first.state.log_history if "eval_reward" in e), key=lambda e: e["eval_reward"])
    assert before == (best["eval_reward"], best["step"])

    seen = SeenAtStart()
    resumed = _early_stopping_run(tiny_model_dir, tmp_path, [seen],
                                  restore_callback_states_from_checkpoint=restore_callbacks)
    out = resumed.train(resume_from_checkpoint=True)
    assert seen.best == before
    assert out.global_step == (3 if restore_callbacks else 4)
    evals = [e["step"] for e in resumed.state.log_history if "eval_reward" in e]
    assert evals == ([1, 2, 3] if restore_callbacks else [1, 2, 3, 4])
    stopper = [c for c in resumed.callback_handler.callbacks if isinstance(c, EarlyStoppingCallback)]
    assert len(stopper) == 1 and stopper[0].early_stopping_patience_counter == 2
    if restore_callbacks:  # transformers' _load_callback_state: rebuilt from the checkpoint, moved last
        assert [type(c) for c in resumed.callback_handler.callbacks] == [SeenAtStart, EarlyStoppingCallback]
    last = tmp_path / "run" / "checkpoints" / f"step-{out.global_step:08d}"
    saved = json.loads((last / "trainer_state.json").read_text())
    assert saved["observers"]["trl"]["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"] == {
        "early_stopping_patience_counter": 2}


class Counting(TrainerCallback, transformers.trainer_callback.ExportableState):
    """A stateful callback of the script's own: ``seen`` is its state."""

    def __init__(self, label: str = ""):
        self.label, self.seen = label, 0

    def state(self) -> dict:
        return {"args": {"label": self.label}, "attributes": {"seen": self.seen}}


def test_restore_follows_transformers_load_callback_state_when_the_callbacks_differ(tmp_path):
    """transformers' _load_callback_state: a callback class the checkpoint holds is rebuilt from
    its saved args and attributes (several of a class in order), moved last; a class held but not
    given is ignored with a warning; a given callback the checkpoint does not name keeps its state;
    the best fields are restored whatever the flag. A malformed field is one ConfigError."""
    from types import SimpleNamespace

    from structlog.testing import capture_logs
    from transformers import EarlyStoppingCallback

    from polyrl.errors import ConfigError
    from polyrl.trl_callbacks import TrlCallbacks, restore

    before = TrlCallbacks([Counting("a"), Counting("b"), EarlyStoppingCallback(3)], SimpleNamespace(),
                          lambda: None, rank=0, local_rank=0)
    before.callbacks[0].seen, before.callbacks[1].seen = 5, 7
    before.callbacks[2].early_stopping_patience_counter = 2
    before.state.best_metric, before.state.best_global_step = 0.5, 4
    kept = json.loads(json.dumps(before.checkpoint_state()))  # as a checkpoint holds it
    assert before.state.stateful_callbacks["Counting"] == [Counting("a").state() | {"attributes": {"seen": 5}},
                                                           Counting("b").state() | {"attributes": {"seen": 7}}]

    recorder, given = Recorder(), Counting("new")
    after = TrlCallbacks([given, recorder, Counting("other")],
                         SimpleNamespace(restore_callback_states_from_checkpoint=True), lambda: None, rank=0,
                         local_rank=0)
    with capture_logs() as logs:
        restore(after, after.state, kept, after.args, tmp_path)
    assert (after.state.best_metric, after.state.best_global_step) == (0.5, 4)
    assert [type(c) for c in after.callbacks] == [Recorder, Counting, Counting]
    assert [(c.label, c.seen) for c in after.callbacks[1:]] == [("a", 5), ("b", 7)]
    assert after.callbacks[0] is recorder and given not in after.callbacks
    ignored = [e for e in logs if "not given" in e["event"]]  # held, not given: ignored with a warning
    assert len(ignored) == 1 and "EarlyStoppingCallback" in ignored[0]["event"]

    off = TrlCallbacks([given], SimpleNamespace(), lambda: None, rank=0, local_rank=0)
    restore(off, off.state, kept, off.args, tmp_path)  # transformers' default: the callbacks keep their state
    assert off.callbacks == [given] and off.state.best_metric == 0.5

    # a run stopped by a callback, resumed with its control restored but no callbacks: the saved
    # should_training_stop / should_save are cleared by the events as transformers' handler clears them
    stopped = TrlCallbacks([Counting("a")], SimpleNamespace(), lambda: None, rank=0, local_rank=0)
    stopped.control.should_training_stop = stopped.control.should_save = True
    held = json.loads(json.dumps(stopped.checkpoint_state()))
    bare = TrlCallbacks([], SimpleNamespace(restore_callback_states_from_checkpoint=True), lambda: None, rank=0,
                        local_rank=0)
    restore(bare, bare.state, held, bare.args, tmp_path)
    assert bare.control.should_training_stop and bare.control.should_save  # as the checkpoint held them
    bare.event("on_train_begin")
    bare.event("on_step_begin")
    assert not bare.control.should_training_stop and not bare.control.should_save

    bad = {"trl": {**kept["trl"], "best_global_step": "4"}}
    with pytest.raises(ConfigError) as err:
        restore(off, off.state, bad, off.args, tmp_path)
    assert "observers.trl.best_global_step is '4'" in str(err.value) and "trainer_state.json" in str(err.value)
    # the steps whose evaluation TRL's log_history lacks (a resumed run's too): a list of steps, else named
    assert kept["trl"]["untold_evaluations"] == []
    with pytest.raises(ConfigError) as err:
        restore(off, off.state, {"trl": {**kept["trl"], "untold_evaluations": "2"}}, off.args, tmp_path)
    assert "observers.trl.untold_evaluations is '2', not a list of steps" in str(err.value)
    # the steps the run logged at, which a resume rebuilds log_history from: a list of steps, else named
    assert kept["trl"]["logged_steps"] == []
    with pytest.raises(ConfigError) as err:
        restore(off, off.state, {"trl": {**kept["trl"], "logged_steps": [1, -2]}}, off.args, tmp_path)
    assert "observers.trl.logged_steps is [1, -2], not a list of steps" in str(err.value)


@pytest.mark.parametrize("metric, evaluations", [("reward", [float("nan"), 0.5, float("nan"), 0.7, 0.6]),
                                                 ("loss", [float("nan"), 0.5, 0.2, float("nan"), 0.3])])
def test_best_metric_follows_transformers_determine_best_metric_and_survives_a_resume(tmp_path, metric,
                                                                                      evaluations):
    """transformers' _determine_best_metric starts an unset best at -inf (inf for a loss), so a NaN
    evaluation never becomes the best and the next number beats it; trainer_state.json keeps the
    infinity and a resume restores it. polyrl took the NaN as the best, where it stayed for the whole
    run (no number beats NaN), and its strict JSON saved the infinity as null, so after a resume a
    NaN evaluation reset EarlyStoppingCallback's patience where transformers counts it."""
    from types import SimpleNamespace

    from transformers import EarlyStoppingCallback, Trainer

    from polyrl import strict_json
    from polyrl.trl_callbacks import TrlCallbacks, restore

    args = _args(tmp_path, metric_for_best_model=metric)
    ours = TrlCallbacks([], args, lambda: None, rank=0, local_rank=0)
    theirs = SimpleNamespace(args=args, state=TrainerState())  # transformers' own code on its own state
    ours_key = {"reward": "eval/sampled_reward_mean", "loss": "eval/loss"}[metric]

    def evaluated(handler: TrlCallbacks, step: int, value: float) -> None:
        """A step and its evaluation, as polyrl's trainer tells the handler."""
        line = {"step": step, ours_key: value, "eval/sampled_reward_std": 0.1}
        handler.step_trained(line)
        handler.step_end(line)

    for step, value in enumerate(evaluations, start=1):
        evaluated(ours, step, value)
        theirs.state.global_step = step
        Trainer._determine_best_metric(theirs, {f"eval_{metric}": value}, None)
        assert (ours.state.best_metric, ours.state.best_global_step) == \
            (theirs.state.best_metric, theirs.state.best_global_step), step
    assert ours.state.best_metric == (0.7 if metric == "reward" else 0.2)

    first = TrlCallbacks([], args, lambda: None, rank=0, local_rank=0)
    evaluated(first, 1, float("nan"))
    assert first.state.best_metric == (float("-inf") if metric == "reward" else float("inf"))
    kept = json.loads(strict_json.dumps(first.checkpoint_state()))  # as trainer_state.json holds it
    stopper = EarlyStoppingCallback(early_stopping_patience=3)
    resumed = TrlCallbacks([stopper], args, lambda: None, rank=0, local_rank=0)
    restore(resumed, resumed.state, kept, args, tmp_path)
    assert resumed.state.best_metric == first.state.best_metric  # transformers' load_from_json: the infinity
    evaluated(resumed, 2, float("nan"))
    assert stopper.early_stopping_patience_counter == 1  # a NaN does not beat the infinity: counted


def peak_at_update_2(completions, trainer_state, **kwargs):
    """Highest when scored at optimizer update 2 (training and evaluation alike): the evaluation
    after step 2 is the run's best, whatever the model samples."""
    return [-10.0 * abs(trainer_state.global_step - 2) for _ in completions]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_load_best_model_at_end_saves_the_best_evaluated_steps_weights(tiny_model_dir, tmp_path):
    """TRL's load_best_model_at_end (was refused): a checkpoint every save_steps, the best
    evaluated one kept from pruning (save_total_limit's count, transformers' rotate_checkpoints),
    and at the end output_dir/model, save_model and trainer.model are that step's weights, not
    the last step's; the last checkpoint stays for a resume."""
    import torch

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short, peak_at_update_2], train_dataset=_dataset(8),
                          eval_dataset=_dataset(2),
                          args=_args(tmp_path, max_steps=4, eval_strategy="steps", eval_steps=1, save_steps=1,
                                     metric_for_best_model="reward", load_best_model_at_end=True, save_total_limit=2))
    trainer.train()
    checkpoints = tmp_path / "run" / "checkpoints"
    assert trainer.state.best_global_step == 2
    assert trainer.state.best_model_checkpoint == str(checkpoints / "step-00000002")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000004"]  # keep 2: best, last
    best, last = _weights(checkpoints / "step-00000002" / "model"), _weights(checkpoints / "step-00000004" / "model")
    assert any(not torch.equal(best[k], last[k]) for k in best)  # the steps trained: other weights
    trainer.save_model(str(tmp_path / "saved"))
    for folder in (tmp_path / "run" / "model", tmp_path / "saved"):
        saved = _weights(folder)
        assert saved.keys() == best.keys() and all(torch.equal(saved[k], best[k]) for k in best), folder
    model = trainer.model.state_dict()
    assert all(torch.equal(model[k].to(best[k].dtype), best[k]) for k in best if k in model)


def test_load_best_model_at_end_after_a_resume_loads_the_best_step_before_the_crash(tiny_model_dir, tmp_path):
    """The best step (2) was before the crash (after step 3): the resumed run keeps its
    checkpoint from pruning and ends with its weights (best_global_step came back with the state)."""
    import torch

    def trainer(callbacks):
        return GRPOTrainer(model=tiny_model_dir, reward_funcs=[short, peak_at_update_2], train_dataset=_dataset(8),
                           eval_dataset=_dataset(2), callbacks=callbacks,
                           args=_args(tmp_path, max_steps=4, eval_strategy="steps", eval_steps=1, save_steps=1,
                                      metric_for_best_model="reward", load_best_model_at_end=True, save_total_limit=2))

    assert trainer([StopAtStep(3)]).train().global_step == 3
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000003"]
    resumed = trainer([])
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.best_global_step == 2
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000004"]
    best, saved = _weights(checkpoints / "step-00000002" / "model"), _weights(tmp_path / "run" / "model")
    assert all(torch.equal(saved[k], best[k]) for k in best)


def test_a_state_that_is_not_json_is_left_out_of_the_checkpoint_with_one_warning():
    """transformers' save_to_json would fail the checkpoint on it; here the checkpoint is written,
    that callback alone starting afresh on resume."""
    from types import SimpleNamespace

    from structlog.testing import capture_logs

    from polyrl.trl_callbacks import TrlCallbacks

    class Opaque(Counting):
        def state(self) -> dict:
            return {"args": {}, "attributes": {"seen": object()}}

    handler = TrlCallbacks([Opaque(), Counting("kept")], SimpleNamespace(), lambda: None, rank=0, local_rank=0)
    with capture_logs() as logs:
        for _ in range(2):
            kept = handler.checkpoint_state()["trl"]["stateful_callbacks"]
    assert set(kept) == {"Counting", "TrainerControl"}
    said = [e for e in logs if e["log_level"] == "warning"]
    assert len(said) == 1 and "Opaque.state()" in said[0]["event"] and "TypeError" in said[0]["event"]


@pytest.mark.parametrize("launched", [False, True, "2"])
def test_the_resume_advice_of_a_trl_script_names_the_launcher_that_started_its_ranks(tmp_path, monkeypatch, launched):
    """A TRL script that torchrun (or accelerate launch through it) started resumes under it again:
    ``python train.py`` would start one rank of a multi-rank run. "2": another launcher's 2 ranks
    (the deepspeed launcher, mpirun: WORLD_SIZE without torchrun's TORCHELASTIC_RUN_ID), which
    were advised python train.py."""
    from polyrl import run_plan

    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None, __file__=str(script)))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    if launched is True:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    elif launched:
        monkeypatch.setenv("WORLD_SIZE", launched)
    (tmp_path / "run").mkdir()
    run_plan.write(tmp_path / "run", 3, started=run_plan.trl_script())
    said = run_plan.resume_command(run_plan.started_by(tmp_path / "run"))
    launcher = "with the launcher as before: torchrun or accelerate launch ..." if launched else "python"
    assert said == f"trainer.train(resume_from_checkpoint=True) in the TRL script, run again ({launcher} {script.resolve()})"


class EditsArgs(TrainerCallback):
    """Sets ``args.<field> = value`` in on_step_end of step 1, as a schedule-tweaking callback does."""

    def __init__(self, field, value):
        self.field, self.value = field, value

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            setattr(args, self.field, self.value)


def test_a_callback_changing_args_trl_reads_as_it_trains_is_one_error_naming_it(tiny_model_dir, tmp_path):
    """transformers reads ``max_grad_norm`` again at every step (and DefaultFlowCallback the
    strategies, GRPOTrainer its loss terms): a callback's change there changes TRL's run. polyrl read
    the GRPOConfig once and trained on without it, without a word; now the run stops after the step,
    checkpointed, naming the callback, the event and the field."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[EditsArgs("max_grad_norm", 0.1)])
    with pytest.raises(CallbackError) as err:
        trainer.train()
    text = str(err.value)
    assert "EditsArgs.on_step_end changed args.max_grad_norm to 0.1 (it was 1.0)" in text and "Fix:" in text
    assert "\n" not in text and err.value.__cause__ is None
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-00000001"]


def test_a_callback_changing_args_trl_does_not_read_again_is_warned_and_the_run_goes_on(tiny_model_dir, tmp_path):
    """``learning_rate``: TRL built its optimizer and schedule when train() began, so a callback's
    change has no effect there; polyrl's run goes on as TRL's does, and says so once."""
    from structlog.testing import capture_logs

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[EditsArgs("learning_rate", 1.0)])
    with capture_logs() as logs:
        assert trainer.train().global_step == 2
    told = [e for e in logs if "changed args.learning_rate" in e["event"]]
    assert len(told) == 1 and told[0]["now"] == "1.0" and "no effect" in told[0]["event"]


class EditsState(TrainerCallback):
    """Sets ``state.save_steps = 1`` in on_train_begin: transformers' DefaultFlowCallback then saves every step."""

    def on_train_begin(self, args, state, control, **kwargs):
        state.save_steps = 1


def test_a_callback_changing_the_states_save_steps_is_one_error_naming_it(tiny_model_dir, tmp_path):
    """transformers' DefaultFlowCallback reads ``state.save_steps`` (and ``eval_steps``) at each
    step; polyrl's checkpoints kept their own interval without a word."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), callbacks=[EditsState()])
    with pytest.raises(CallbackError) as err:
        trainer.train()
    assert "EditsState.on_train_begin changed state.save_steps to 1" in str(err.value)
    assert "before its first step" in str(err.value) and "set save_steps in the trl.GRPOConfig" in str(err.value)
