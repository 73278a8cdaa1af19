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
