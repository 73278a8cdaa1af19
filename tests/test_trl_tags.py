"""The tracker tags of a run trained through ``polyrl.trl.GRPOTrainer`` (``polyrl.trl_tags``):
transformers' ``rewrite_logs`` tags for TRL's names of the same numbers, checked against
transformers' own function; what a W&B run object gets (the real ``WandbTracker``, its run a fake
that records); the TensorBoard file of a real TRL run is read back in test_trl_callbacks."""

from __future__ import annotations

import functools

import pytest

from polyrl.tracking import TrackerSpec
from polyrl.tracking.session import RunTracking
from polyrl.trl_tags import tag, trl_tags

#: a polyrl step line with an evaluation in it, as the TRL layer's run publishes it
LINE = {"step": 3, "loss": 0.25, "reward_mean": 0.5, "reward_std": 0.1, "lr": 1e-5, "entropy": 1.5,
        "completion_len_mean": 7.0, "reward/short/mean": 0.4, "reward/short/std": 0.2, "clip_ratio/region_mean": 0.0,
        "num_tokens": 120, "epoch": 0.75, "eval/sampled_reward_mean": 0.3, "eval/sampled_reward_std": 0.05,
        "eval/loss": 0.125, "eval/completion_len_mean": 6.0, "eval/reward/short/mean": 0.3}


def test_tags_are_transformers_rewrite_logs_tags():
    rewrite_logs = pytest.importorskip("transformers.integrations.integration_utils").rewrite_logs
    keys = ["loss", "reward", "completions/mean_length", "rewards/f/mean", "train_loss", "eval_loss", "eval_reward",
            "eval_rewards/f/std", "test_accuracy", "epoch", "evaluation", "tests"]
    assert {tag(k): None for k in keys} == {k: None for k in rewrite_logs(dict.fromkeys(keys))}
    assert tag("eval/accuracy") == "eval/accuracy"  # polyrl's own evaluation keys are already eval/ tags


def test_a_step_line_is_tagged_under_trls_names_and_nothing_is_left_bare():
    tags = trl_tags(LINE, {"short": "short"})
    assert tags["train/loss"] == 0.25 and tags["train/reward"] == 0.5 and tags["train/learning_rate"] == 1e-5
    assert tags["train/completions/mean_length"] == 7.0 and tags["train/rewards/short/mean"] == 0.4
    assert tags["eval/reward"] == 0.3 and tags["eval/reward_std"] == 0.05 and tags["eval/loss"] == 0.125
    assert tags["eval/completions/mean_length"] == 6.0 and tags["eval/rewards/short/mean"] == 0.3
    assert "step" not in tags and "train/step" not in tags
    assert all(t.startswith(("train/", "eval/")) for t in tags), sorted(tags)


class _Run:
    """A W&B run object that records what ``log`` gets."""

    def __init__(self):
        self.logged: list[tuple[dict, int]] = []

    def log(self, data, step=None):
        self.logged.append((dict(data), step))

    def finish(self, exit_code=None):
        pass


def test_wandb_gets_the_trl_tags_when_the_trl_layer_renames_and_polyrls_names_otherwise(tmp_path, monkeypatch):
    """transformers' WandbCallback logs rewrite_logs(logs); the real WandbTracker under a run the TRL
    layer tags gets the same tags, one polyrl's own run keeps its keys."""
    wandb = pytest.importorskip("wandb")
    from polyrl.tracking.wandb import WandbTracker

    runs: list[_Run] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: runs.append(_Run()) or runs[-1])
    spec = TrackerSpec("wandb", create=WandbTracker)
    for rename in (functools.partial(trl_tags, names=None), None):
        tracking = RunTracking(specs=[spec], output_dir=tmp_path, completions_per_step=0, run_name="r", project="p",
                               config={}, rename=rename)
        tracking.open()
        tracking.publish(LINE)
        tracking.publish_at({"train_loss": 0.2, "my_metric": 1.0}, step=3)  # end metrics, a script's trainer.log
        tracking.close()
    (trl_step, trl_end), (own_step, _) = runs[0].logged, runs[1].logged
    assert trl_step[1] == trl_end[1] == own_step[1] == 3
    assert {"train/loss", "train/reward", "train/completions/mean_length", "eval/loss", "eval/reward"} <= set(trl_step[0])
    assert not any(k.startswith(("train/", "eval_")) for k in own_step[0]) and own_step[0]["loss"] == 0.25
    assert trl_end[0] == {"train/train_loss": 0.2, "train/my_metric": 1.0}


class _RecordingRun(_Run):
    """A W&B run object that also records its step-axis definitions and its summary."""

    def __init__(self, **init):
        super().__init__()
        self.init, self.defined, self.summary = init, [], {}

    def define_metric(self, name, **kwargs):
        self.defined.append((name, kwargs))

    def _label(self, **kwargs):
        pass


class _FakeWandb:
    """The ``wandb`` module as transformers' WandbCallback calls it, its run a ``_RecordingRun``."""

    def __init__(self):
        self.run = None
        self.config = {}

    def init(self, **kwargs):
        self.run = _RecordingRun(**kwargs)
        self.config = type("Config", (dict,), {"update": lambda self, d, allow_val_change=False: dict.update(self, d)})()
        return self.run

    def define_metric(self, name, **kwargs):
        self.run.define_metric(name, **kwargs)

    def log(self, data, step=None):
        self.run.log(data, step)

    def termwarn(self, *args, **kwargs):
        pass


#: the numbers transformers' train() logs last, as polyrl.trl's run publishes them at its end
END = {"train_runtime": 12.5, "train_samples_per_second": 3.2, "train_steps_per_second": 0.32,
       "total_flos": 0.0, "train_loss": 0.2, "epoch": 1.0}


@pytest.mark.parametrize("project", [None, "mine"])
def test_a_trl_runs_wandb_axis_summary_and_project_are_transformers_wandbcallbacks(tmp_path, monkeypatch, project):
    """transformers' WandbCallback defines train/global_step as every metric's x-axis, logs it with
    each entry, keeps train_runtime, train_loss... in the run summary (not the history) and names the
    project $WANDB_PROJECT (default "huggingface"). polyrl's W&B run of a TRL script had no
    train/global_step (a TRL user's panels plotted against it stayed empty), logged the end-of-training
    numbers as one-point curves and went to project "polyrl". Now a TRL run's W&B run is set up and fed
    as transformers' own callback does it (run here against the same recording fake)."""
    wandb = pytest.importorskip("wandb")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    trl = pytest.importorskip("trl")
    from transformers import TrainerControl, TrainerState

    from polyrl.tracking.wandb import WandbTracker

    if project is None:
        monkeypatch.delenv("WANDB_PROJECT", raising=False)
    else:
        monkeypatch.setenv("WANDB_PROJECT", project)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to="none")
    theirs = integration.WandbCallback()
    theirs._wandb = fake = _FakeWandb()
    state = TrainerState(is_world_process_zero=True, global_step=6)
    theirs.on_train_begin(args, state, TrainerControl())
    theirs.on_log(args, state, TrainerControl(), logs={"loss": 0.25, "reward": 0.5, "epoch": 0.75})
    theirs.on_log(args, state, TrainerControl(), logs=dict(END))
    their_run = fake.run

    runs: list[_RecordingRun] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: runs.append(_RecordingRun(**kwargs)) or runs[-1])
    tracking = RunTracking(specs=[TrackerSpec("wandb", create=WandbTracker)], output_dir=tmp_path, step_scale=2,
                           completions_per_step=0, run_name="r", project="polyrl", config={}, trl=True,
                           rename=functools.partial(trl_tags, names=None))
    tracking.open()
    tracking.publish({"step": 3, "loss": 0.25, "reward_mean": 0.5, "epoch": 0.75})  # global_step 6
    tracking.publish_at(dict(END), step=3)
    tracking.close()
    (ours,) = runs
    assert ours.defined == their_run.defined == [
        ("train/global_step", {}), ("*", {"step_metric": "train/global_step", "step_sync": True})]
    assert ours.init["project"] == their_run.init["project"] == (project or "huggingface")
    assert ours.summary == their_run.summary == {k: v for k, v in END.items() if k != "epoch"}
    (our_step, _), (our_end, _) = ours.logged
    (their_step, _), (their_end, _) = their_run.logged
    assert our_end == their_end == {"train/epoch": 1.0, "train/global_step": 6}
    assert {k: our_step[k] for k in their_step} == their_step  # train/loss, train/reward, train/epoch, global_step
    assert their_step["train/global_step"] == 6


def test_polyrls_own_wandb_run_keeps_its_steps_history_and_project(tmp_path, monkeypatch):
    """``polyrl train``'s W&B run is unchanged: no step axis defined, the end-of-training numbers
    stay in the history, the project is [logging] project."""
    wandb = pytest.importorskip("wandb")
    from polyrl.tracking.wandb import WandbTracker

    monkeypatch.setenv("WANDB_PROJECT", "elsewhere")
    runs: list[_RecordingRun] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: runs.append(_RecordingRun(**kwargs)) or runs[-1])
    tracking = RunTracking(specs=[TrackerSpec("wandb", create=WandbTracker)], output_dir=tmp_path,
                           completions_per_step=0, run_name="r", project="p", config={})
    tracking.open()
    tracking.publish({"step": 3, "loss": 0.25})
    tracking.publish_at({"train_loss": 0.2}, step=3)
    tracking.close()
    (ours,) = runs
    assert (ours.defined, ours.summary, ours.init["project"]) == ([], {}, "p")
    assert ours.logged == [({"loss": 0.25}, 3), ({"train_loss": 0.2}, 3)]


def test_a_trl_run_of_a_model_without_a_transformers_config_still_has_its_args(tmp_path):
    """polyrl.trl_run reads the model config from the folder; a folder transformers cannot read (a
    GGUF's, a polyrl model name) leaves the model config out instead of stopping train() before its
    first step; the args and run name are still transformers'. polyrl's own GRPOConfig has none."""
    trl = pytest.importorskip("trl")
    from polyrl.api import GRPOConfig
    from polyrl.trl_run import trl_run

    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", run_name="r1")
    (tmp_path / "model").mkdir()
    for model in (str(tmp_path / "model"), "smollm2-135m"):
        run = trl_run(args, None, model, "float32")
        assert run.run_name == "r1" and run.config == args.to_dict() and set(run.texts) == {"args"}
    assert trl_run(GRPOConfig(), None, str(tmp_path / "model"), "float32") is None


def test_a_resumed_trl_runs_tracker_runs_are_named_apart_and_an_unnamed_one_stays_the_trackers():
    """A --resume names its tracker runs <run_name>-resumed-at-step-<N>; a TRL run's own run_name
    (the one W&B and MLflow get) too, while one without a run_name is left to the tracker."""
    from polyrl.tracking import TrlRun

    for given, resumed in (("lr-1e-4", "lr-1e-4-resumed-at-step-3"), (None, None)):
        tracking = RunTracking(specs=[], output_dir=None, completions_per_step=0, run_name="out", project="p",
                               config={}, trl=True, trl_run=TrlRun(run_name=given, texts={"args": "{}"}))
        tracking.name_resumed(3)
        assert tracking.run_name == "out-resumed-at-step-3"
        assert (tracking.trl_run.run_name, tracking.trl_run.texts) == (resumed, {"args": "{}"})

