"""Ranks of a launched run agree on a reward failure and on what they loaded (no process group here:
the gathered values are given as a gather returns them, in rank order)."""

from __future__ import annotations

import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.rank_fingerprint import check_same, fingerprint, reward_code
from polyrl.reward_agreement import agreed_reward_failure, reward_outcome
from polyrl.rewards.guard import RewardCancelled


def test_every_rank_raises_the_failing_ranks_error_and_an_error_beats_a_cancellation():
    outcomes = [None, reward_outcome(RewardCancelled("stop")), reward_outcome(RewardError("grader down"))]
    for rank in range(3):
        failed = agreed_reward_failure(outcomes, rank)
        assert isinstance(failed, RewardError) and str(failed).startswith("on rank 2 of 3")
        assert "grader down" in str(failed)
    cancelled = agreed_reward_failure([None, reward_outcome(RewardCancelled("stop"))], 0)
    assert isinstance(cancelled, RewardCancelled) and "on rank 1 of 2" in str(cancelled)
    assert agreed_reward_failure([None, None], 1) is None


def _score_one(prompts, completions, **kw):
    return [1.0] * len(completions)


def _score_zero(prompts, completions, **kw):
    return [0.0] * len(completions)


def test_a_rank_with_other_reward_code_or_rows_is_named_in_one_config_error():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    same = fingerprint({"train.steps": 3}, [reward_code(_score_one)], rows, None)
    assert fingerprint({"train.steps": 3}, [reward_code(_score_one)], list(rows), None) == same
    check_same([same, dict(same)])
    for other, part in [
        (fingerprint({"train.steps": 3}, [reward_code(_score_zero)], rows, None), "reward code"),
        (fingerprint({"train.steps": 3}, [reward_code(_score_one)], rows[:1], None), "train data"),
        (fingerprint({"train.steps": 4}, [reward_code(_score_one)], rows, None), "config"),
    ]:
        with pytest.raises(ConfigError) as refused:
            check_same([same, same, other])
        assert f"rank(s) 2 loaded another {part} than rank 0 (of 3 ranks)" in str(refused.value)
