"""``AlgorithmConfig.loss_selection``: which completions a step's loss (and the eval loss) trains,
row by row, against what TRL 1.16's GRPOTrainer does with each.

TRL keeps every row of its batch in the loss: a row no reward scored gets advantage 0
(``nan_to_num``), so its policy term is 0 and only the KL term (``beta`` > 0) and the entropy bonus
(``entropy_coef`` > 0) train it; a row cut under ``mask_truncated_completions`` has no loss token
at all. polyrl leaves out what no term would train: an unscored row without a KL term in the loss,
a bonus or a MoE model's router term, a cut row, and a group dynamic sampling (DAPO's, not TRL's)
drops. Episodes follow the same rule (TRL's multi-turn rows are rows), except those ``barred``:
ended by an environment error or with nothing to train (``step_gather.out_of_loss``; TRL's run
stops on an environment error).
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.step_gather import Shard, out_of_loss

NAN = float("nan")
#: three groups of three: g0 varies with one unscored row (2); g1's scored rows are equal, with
#: one unscored row (5); g2 varies, its unscored row (7) and a scored one (8) cut at the length limit
SCORES = np.array([1.0, 0.0, NAN, 1.0, 1.0, NAN, 0.5, NAN, 0.0])
UNTRUNCATED = np.array([True] * 7 + [False, False])
BARRED = np.array([False] * 5 + [True] + [False] * 3)  # row 5: an episode its environment ended

T, F = True, False
CASES = [
    # name, [algorithm] settings, barred, the rows kept
    ("policy term alone: unscored rows out", {}, None, [T, T, F, T, T, F, T, F, F]),
    ("KL term: unscored rows in at advantage 0", {"beta": 0.04}, None, [T, T, T, T, T, T, T, F, F]),
    ("entropy bonus: unscored rows in at advantage 0", {"entropy_coef": 0.01}, None, [T, T, T, T, T, T, T, F, F]),
    ("both terms", {"beta": 0.04, "entropy_coef": 0.01}, None, [T, T, T, T, T, T, T, F, F]),
    ("KL in the reward is no loss term", {"beta": 0.04, "kl_in_reward": True}, None, [T, T, F, T, T, F, T, F, F]),
    ("KL in the reward with a bonus", {"beta": 0.04, "kl_in_reward": True, "entropy_coef": 0.01}, None,
     [T, T, T, T, T, T, T, F, F]),
    ("episodes: an unscored one stays in as TRL's multi-turn row", {"entropy_coef": 0.01}, np.zeros(9, bool),
     [T, T, T, T, T, T, T, F, F]),
    ("episodes: one ended by its environment stays out", {"entropy_coef": 0.01, "beta": 0.04}, BARRED,
     [T, T, T, T, T, F, T, F, F]),
    ("episodes without a KL term or bonus", {}, BARRED, [T, T, F, T, T, F, T, F, F]),
    ("dynamic sampling drops g1 whole", {"dynamic_sampling": True}, None, [T, T, F, F, F, F, T, F, F]),
    ("dynamic sampling drops g1 whole, KL term too", {"dynamic_sampling": True, "beta": 0.04}, None,
     [T, T, T, F, F, F, T, F, F]),
]


@pytest.mark.parametrize(("settings", "barred", "kept"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_rows_kept_are_the_rows_trls_loss_trains(settings, barred, kept):
    algo = AlgorithmConfig(**settings)
    keep, advantages, group_kept = algo.loss_selection(SCORES, SCORES.copy(), UNTRUNCATED, 3, None, [1.0], barred)
    assert keep.tolist() == kept
    assert np.isfinite(advantages).all() and (advantages[np.isnan(SCORES)] == 0).all()  # TRL's nan_to_num
    # the divisors count every row of a kept group, cut or unscored (TRL's batch holds them), but
    # not a barred one: an episode its environment ended has no trained token (TRL's run stops)
    counted = np.array([T, T, T, F, F, F, T, T, T] if settings.get("dynamic_sampling") else [T] * 9)
    assert group_kept.tolist() == (counted if barred is None else counted & ~barred).tolist()


def test_the_router_term_keeps_unscored_rows_as_a_loss_term_does():
    """A MoE model's router term (``router=True``) is a loss term over every row of TRL's batch:
    an unscored row stays in at advantage 0 (its prompt and completion count in it), a cut one
    stays out of the policy rows (the trainer adds its prompt alone, ``polyrl.router_rows``)."""
    keep, advantages, _ = AlgorithmConfig().loss_selection(SCORES, SCORES.copy(), UNTRUNCATED, 3, None, [1.0],
                                                           router=True)
    assert keep.tolist() == [T, T, T, T, T, T, T, F, F]
    assert (advantages[np.isnan(SCORES)] == 0).all()


def test_gdpo_keeps_the_same_rows():
    """GDPO (each reward normalized in its group): a row neither reward scored is unscored too."""
    per_reward = np.column_stack([SCORES, np.where(np.isnan(SCORES), NAN, 1.0 - SCORES)])
    algo = AlgorithmConfig(multi_objective_aggregation="normalize_then_sum", entropy_coef=0.01)
    keep, advantages, _ = algo.loss_selection(SCORES, SCORES.copy(), UNTRUNCATED, 3, per_reward, [1.0, 1.0], BARRED)
    assert keep.tolist() == [T, T, T, T, T, F, T, F, F]
    assert (advantages[np.isnan(SCORES)] == 0).all()
    plain = AlgorithmConfig(multi_objective_aggregation="normalize_then_sum")
    assert plain.loss_selection(SCORES, SCORES.copy(), UNTRUNCATED, 3, per_reward, [1.0, 1.0])[0].tolist() == \
        [T, T, F, T, T, F, T, F, F]


def test_an_untrainable_episode_with_a_score_stays_out():
    """The trainer marks an episode with nothing to train NaN in ``shaped`` though its rewards
    scored it: no term trains it, whatever the loss holds."""
    shaped = SCORES.copy()
    shaped[0] = NAN
    barred = np.zeros(9, bool)
    barred[0] = True
    keep, _, _ = AlgorithmConfig(beta=0.04).loss_selection(SCORES, shaped, UNTRUNCATED, 3, None, [1.0], barred)
    assert keep.tolist() == [F, T, T, T, T, T, T, F, F]


def _shard(env_error, episode, lengths) -> Shard:
    flags = np.asarray
    return Shard(completion_len=flags(lengths), sequence_len=flags(lengths) + 3, sampled_len=flags(lengths),
                 clipped=np.zeros(len(lengths), bool), episode=flags(episode), env_error=flags(env_error))


def test_out_of_loss_marks_failed_and_empty_episodes_only():
    """An environment error or an episode with no token is out; an unscored finished episode and a
    single-turn row are not; a step whose every episode failed is out whole."""
    shard = _shard([F, T, F, F], [T, T, T, F], [5, 4, 0, 0])
    assert out_of_loss(shard).tolist() == [F, T, T, F]
    assert out_of_loss(_shard([T, T], [T, T], [3, 4])).tolist() == [T, T]
