"""The terminal's step line: the watched numbers by default, every metric on request."""

from __future__ import annotations

import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.step_line import SHORT_KEYS, step_line_fields

METRICS = {"step": 3, "loss": 0.5, "reward_mean": 0.25, "reward_std": 0.1, "grad_norm": 1.5, "lr": 1e-5,
           "clip_ratio/low_mean": 0.0, "perf/peak_rss_mb": 2000.0, "completions/mean_length": 14.0,
           "completion_len_mean": 14.0, "time/step": 4.5, "time/generate": 2.0, "reward/numeric_match/mean": 0.25,
           "rewards/numeric_match/mean": 0.25,
           "skipped": False, "eval/accuracy": 0.75}


def test_short_line_keeps_the_watched_numbers_in_order():
    fields = step_line_fields(METRICS)
    assert list(fields) == ["step", "loss", "reward_mean", "reward_std", "grad_norm", "lr", "completions/mean_length",
                            "time/step", "eval/accuracy"]
    assert set(fields) - {"eval/accuracy"} <= set(SHORT_KEYS)


def test_skipped_step_says_so_on_a_short_line():
    assert step_line_fields({**METRICS, "skipped": True})["skipped"] is True


def test_full_line_has_every_metric_but_per_reward_columns():
    """TRL's per-reward names (rewards/<f>/...) are per-reward columns too."""
    fields = step_line_fields(METRICS, "full")
    assert set(fields) == set(METRICS) - {"reward/numeric_match/mean", "rewards/numeric_match/mean"}


def test_step_line_value_is_checked():
    config = RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"},
                                  "rewards": [{"name": "numeric_match"}], "logging": {"step_line": "full"}})
    assert config.logging.step_line == "full"
    with pytest.raises(ConfigError, match="logging.step_line"):
        RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"},
                             "rewards": [{"name": "numeric_match"}], "logging": {"step_line": "long"}})
