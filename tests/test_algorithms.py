"""Advantages, shaping, presets and the numpy reference loss (the ground truth of every backend)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyrl.algorithms.advantages import (
    compute_advantages,
    group_advantages,
    reinforce_advantages,
    rloo_advantages,
)
from polyrl.algorithms.objective import KL_ESTIMATORS, LOSS_AGGREGATIONS, Objective
from polyrl.algorithms.presets import ALGORITHMS, AlgorithmConfig
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.algorithms.shaping import dynamic_sampling_mask, overlong_penalty, shape_overlong
from polyrl.errors import ConfigError

# --- the reference loss ------------------------------------------------------------------------


def _away_from_kinks(logp, old, adv, obj: Objective, margin: float = 1e-3) -> bool:
    """True when no token sits on a clip/dual-clip boundary (where the loss is not differentiable)."""
    for lp, o, a in zip(logp, old, adv):
        r = np.exp(lp - o)
        bounds = [1 - obj.clip_eps_low, 1 + obj.clip_eps_high]
        if obj.dual_clip is not None:
            bounds.append(obj.dual_clip)
        if any(np.min(np.abs(r - b)) < margin for b in bounds) or abs(a) < 1e-3:
            return False
    return True


def _random_batch(rng: np.random.Generator, obj: Objective):
    while True:
        lengths = rng.integers(1, 6, size=4)
        logp = [rng.normal(-1.5, 0.5, n) for n in lengths]
        # old log-probs spread the ratios over all regions: below, inside and above the clip range
        old = [lp + rng.normal(0.0, 0.6, len(lp)) for lp in logp]
        ref = [lp + rng.normal(0.0, 0.5, len(lp)) for lp in logp]
        adv = rng.normal(0.0, 1.0, 4)
        if _away_from_kinks(logp, old, adv, obj):
            return logp, old, ref, adv


CASES = list(itertools.product(LOSS_AGGREGATIONS, KL_ESTIMATORS, (None, 3.0)))


@pytest.mark.parametrize(("aggregation", "kl", "dual"), CASES)
def test_reference_grad_matches_central_differences(aggregation, kl, dual):
    obj = Objective(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=dual, beta=0.1, kl_estimator=kl,
                    loss_aggregation=aggregation, max_completion_length=7)
    rng = np.random.default_rng(CASES.index((aggregation, kl, dual)))
    logp, old, ref, adv = _random_batch(rng, obj)
    grads = policy_loss_grad(logp, adv, obj, old, ref)
    h = 1e-6
    for i, lp in enumerate(logp):
        for t in range(len(lp)):
            plus = [x.copy() for x in logp]
            minus = [x.copy() for x in logp]
            plus[i][t] += h
            minus[i][t] -= h
            numeric = (policy_loss(plus, adv, obj, old, ref)[0] - policy_loss(minus, adv, obj, old, ref)[0]) / (2 * h)
            assert grads[i][t] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (i, t)


def test_old_none_means_ratio_one():
    obj = Objective(beta=0.0)
    logp = [np.array([-1.0, -2.0]), np.array([-0.5])]
    adv = [1.0, -2.0]
    assert policy_loss(logp, adv, obj)[0] == pytest.approx(policy_loss(logp, adv, obj, [x.copy() for x in logp])[0])
    # ratio 1 -> loss is -mean over sequences of A (seq_mean_token_mean) and nothing is clipped
    loss, metrics = policy_loss(logp, adv, obj)
    assert loss == pytest.approx(-(1.0 - 2.0) / 2)
    assert metrics["clip_fraction"] == 0.0


def _one(logp, old, adv, **kw):
    obj = Objective(**kw)
    loss, metrics = policy_loss([np.array([logp])], [adv], obj, [np.array([old])])
    grad = policy_loss_grad([np.array([logp])], [adv], obj, [np.array([old])])[0][0]
    return loss, grad, metrics["clip_fraction"]


def test_ratio_clipping_by_hand():
    up, down = math.log(1.5), math.log(0.5)
    # A > 0, ratio 1.5 > 1.2: clipped at 1.2, no gradient
    assert _one(up, 0.0, 1.0) == pytest.approx((-1.2, 0.0, 1.0))
    # A > 0, ratio 0.5 < 0.8: the unclipped branch is the pessimistic one -> -0.5, slope -A*r
    assert _one(down, 0.0, 1.0) == pytest.approx((-0.5, -0.5, 0.0))
    # A < 0, ratio 0.5: clipped at 0.8, no gradient
    assert _one(down, 0.0, -1.0) == pytest.approx((0.8, 0.0, 1.0))
    # A < 0, ratio 1.5: unclipped 1.5 (pessimistic), slope -A*r = 1.5
    assert _one(up, 0.0, -1.0) == pytest.approx((1.5, 1.5, 0.0))
    # clip-higher: eps_high 0.6 lets ratio 1.5 through
    assert _one(up, 0.0, 1.0, clip_eps_high=0.6) == pytest.approx((-1.5, -1.5, 0.0))
    # dual clip caps the negative-advantage loss at -A * c
    assert _one(up, 0.0, -1.0, dual_clip=1.4) == pytest.approx((1.4, 0.0, 1.0))
    assert _one(up, 0.0, -1.0, dual_clip=2.0) == pytest.approx((1.5, 1.5, 0.0))


def test_clip_fraction_counts_tokens():
    obj = Objective()
    logp = [np.log(np.array([1.5, 1.0, 1.1, 0.5]))]
    loss, metrics = policy_loss(logp, [1.0], obj, [np.zeros(4)])
    assert metrics["clip_fraction"] == pytest.approx(0.25)  # only 1.5 is clipped for A > 0
    assert metrics["tokens"] == 4


def test_clip_regions_by_hand():
    """Low = A < 0 and ratio < 1 - eps_low, high = A > 0 and ratio > 1 + eps_high, token means of
    the whole batch; they add up to clip_fraction without dual clip."""
    obj = Objective()  # eps 0.2 both sides
    ratios = [np.array([1.5, 1.0, 0.5, 0.7]), np.array([1.5, 0.5, 0.9])]
    logp = [np.log(r) for r in ratios]
    old = [np.zeros(4), np.zeros(3)]
    _, m = policy_loss(logp, [1.0, -1.0], obj, old)
    # A > 0: 1.5 is high-clipped (0.5, 0.7 are not clipped: the unclipped branch wins); A < 0: 0.5 low
    assert m["clip_high_fraction"] == pytest.approx(1 / 7)
    assert m["clip_low_fraction"] == pytest.approx(1 / 7)
    assert m["clip_fraction"] == pytest.approx(m["clip_low_fraction"] + m["clip_high_fraction"])
    # CISPO caps the weight above only, whatever the advantage's sign
    _, c = policy_loss(logp, [1.0, -1.0], Objective(policy_loss="cispo"), old)
    assert c["clip_low_fraction"] == 0.0 and c["clip_high_fraction"] == pytest.approx(2 / 7)
    # masked-out tokens are not counted, in the numerator or the denominator
    masks = [np.array([True, False, False, False]), np.array([False, True, False])]
    _, mm = policy_loss(logp, [1.0, -1.0], obj, old, masks=masks)
    assert mm["clip_high_fraction"] == pytest.approx(0.5) and mm["clip_low_fraction"] == pytest.approx(0.5)


@pytest.mark.parametrize(("kl", "value", "grad"), [
    ("k1", 1.0, 1.0),
    ("k2", 0.5, 1.0),  # 0.5 * (r - l)^2 with r - l = -1; d/dl = -(r - l) = 1
    ("k3", math.exp(-1) + 1 - 1, 1 - math.exp(-1)),
])
def test_kl_estimators_by_hand(kl, value, grad):
    obj = Objective(beta=0.5, kl_estimator=kl)
    logp, ref = [np.array([-1.0])], [np.array([-2.0])]
    loss, metrics = policy_loss(logp, [0.0], obj, [np.array([-1.0])], ref)
    assert metrics["kl"] == pytest.approx(value)
    assert loss == pytest.approx(0.5 * value)
    assert policy_loss_grad(logp, [0.0], obj, [np.array([-1.0])], ref)[0][0] == pytest.approx(0.5 * grad)


def test_k3_is_zero_at_the_reference_and_positive_elsewhere():
    obj = Objective(beta=1.0, kl_estimator="k3")
    logp = [np.array([-1.0, -0.3, -2.0])]
    assert policy_loss(logp, [0.0], obj, logp, logp)[1]["kl"] == pytest.approx(0.0)
    assert policy_loss(logp, [0.0], obj, logp, [logp[0] + 0.7])[1]["kl"] > 0


@pytest.mark.parametrize(("aggregation", "expected"), [
    ("seq_mean_token_mean", -1.0),
    ("token_mean", -1.0),
    ("seq_mean_token_sum_norm", -4 / (2 * 4)),
])
def test_aggregations_by_hand(aggregation, expected):
    obj = Objective(loss_aggregation=aggregation, max_completion_length=4)
    logp = [np.zeros(1), np.zeros(3)]
    assert policy_loss(logp, [1.0, 1.0], obj)[0] == pytest.approx(expected)


def test_aggregations_weigh_lengths_differently():
    logp = [np.zeros(1), np.zeros(3)]
    adv = [1.0, -1.0]  # the short sequence is good, the long one bad
    seq = policy_loss(logp, adv, Objective(loss_aggregation="seq_mean_token_mean"))[0]
    tok = policy_loss(logp, adv, Objective(loss_aggregation="token_mean"))[0]
    assert seq == pytest.approx(0.0)  # each sequence counts once
    assert tok == pytest.approx((-1 + 3) / 4)  # each token counts once


# --- advantages --------------------------------------------------------------------------------


def test_group_advantages_by_hand():
    r = np.array([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    std = np.std([1, 0, 0, 1], ddof=1)  # sample std, as torch.std in TRL
    expected = np.array([0.5, -0.5, -0.5, 0.5]) / (std + 1e-4)
    np.testing.assert_allclose(group_advantages(r, 4)[:4], expected)
    np.testing.assert_allclose(group_advantages(r, 4)[4:], 0.0)
    np.testing.assert_allclose(group_advantages(r, 4, "none"), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    batch_std = np.std(r, ddof=1)
    np.testing.assert_allclose(group_advantages(r, 4, "batch")[:4], np.array([0.5, -0.5, -0.5, 0.5]) / (batch_std + 1e-4))


def test_rloo_and_reinforce_by_hand():
    r = np.array([3.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(rloo_advantages(r, 3), [3.0, -1.5, -1.5, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(reinforce_advantages(r, 3), r - 1.0)


def test_nan_rewards_are_excluded_and_get_zero():
    r = np.array([1.0, np.nan, 0.0, np.nan, np.nan, 2.0])
    adv = group_advantages(r, 3, "none")
    np.testing.assert_allclose(adv, [0.5, 0.0, -0.5, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(rloo_advantages(r, 3), [1.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(reinforce_advantages(r, 3), [0.0, 0.0, -1.0, 0.0, 0.0, 1.0])
    assert np.isfinite(group_advantages(r, 3)).all()
    assert (compute_advantages([np.nan] * 4, 2) == 0).all()


def test_advantage_input_errors():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(np.zeros(4), 3)
    with pytest.raises(ValueError, match="inf"):
        group_advantages(np.array([0.0, np.inf]), 2)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(np.zeros(4), 0)


rewards_strategy = st.integers(1, 5).flatmap(
    lambda groups: st.integers(2, 6).flatmap(
        lambda size: st.tuples(
            st.just(size),
            st.lists(st.floats(-100, 100, allow_nan=False), min_size=groups * size, max_size=groups * size),
        )
    )
)


@settings(max_examples=60, deadline=None)
@given(rewards_strategy, st.sampled_from(["group", "batch", "none"]))
def test_group_advantages_have_zero_mean_per_group(data, scale):
    size, rewards = data
    adv = group_advantages(np.array(rewards), size, scale).reshape(-1, size)
    np.testing.assert_allclose(adv.mean(axis=1), 0.0, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(rewards_strategy, st.data())
def test_group_advantages_invariant_to_a_constant_per_group(data, draw):
    size, rewards = data
    r = np.array(rewards)
    shifts = draw.draw(st.lists(st.floats(-50, 50), min_size=len(r) // size, max_size=len(r) // size))
    shifted = r + np.repeat(shifts, size)
    for scale in ("group", "none"):
        np.testing.assert_allclose(group_advantages(shifted, size, scale), group_advantages(r, size, scale),
                                   atol=1e-5 if scale == "none" else 1e-3)
    np.testing.assert_allclose(rloo_advantages(shifted, size), rloo_advantages(r, size), atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(rewards_strategy)
def test_rloo_equals_leave_one_out_formula(data):
    size, rewards = data
    r = np.array(rewards).reshape(-1, size)
    expected = np.array([[g[i] - np.delete(g, i).mean() for i in range(size)] for g in r]).reshape(-1)
    np.testing.assert_allclose(rloo_advantages(r.reshape(-1), size), expected, atol=1e-9)
    # and the closed form G/(G-1) * (r - mean)
    np.testing.assert_allclose(expected, (size / (size - 1)) * group_advantages(r.reshape(-1), size, "none"),
                               atol=1e-9)


# --- shaping -----------------------------------------------------------------------------------


def test_dynamic_sampling_mask():
    r = np.array([1, 1, 1, 0, 1, 0, 0.5, 0.5, np.nan, 2.0, np.nan, np.nan])
    np.testing.assert_array_equal(dynamic_sampling_mask(r, 2), [False, True, True, False, False, False])


def test_overlong_penalty_shape():
    lengths = [0, 12, 13, 14, 16, 17, 100]
    pen = overlong_penalty(lengths, max_length=16, buffer=4, penalty_factor=2.0)
    np.testing.assert_allclose(pen, [0, 0, -0.5, -1.0, -2.0, -2.0, -2.0])
    shaped = shape_overlong([1.0, np.nan], [16, 16], 16, 4)
    assert shaped[0] == 0.0 and np.isnan(shaped[1])
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty([1], 8, 9)


# --- presets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("grpo", dict(clip_eps_low=0.2, clip_eps_high=0.2, beta=0.0, loss_aggregation="seq_mean_token_mean")),
    ("dapo", dict(clip_eps_low=0.2, clip_eps_high=0.28, beta=0.0, loss_aggregation="token_mean")),
    ("dr_grpo", dict(clip_eps_high=0.2, loss_aggregation="seq_mean_token_sum_norm", max_completion_length=32)),
    ("rloo", dict(loss_aggregation="token_mean", beta=0.0)),
    ("reinforce", dict(loss_aggregation="token_mean", beta=0.0)),
])
def test_presets_produce_documented_objectives(name, expected):
    objective = AlgorithmConfig.preset(name).objective(max_completion_length=32)
    for key, value in expected.items():
        assert getattr(objective, key) == value, key


def test_preset_estimators_and_extras():
    assert AlgorithmConfig.preset("grpo").advantage == "group"
    assert AlgorithmConfig.preset("grpo").scale_rewards == "group"
    assert AlgorithmConfig.preset("dr_grpo").scale_rewards == "none"
    assert AlgorithmConfig.preset("rloo").advantage == "rloo"
    assert AlgorithmConfig.preset("reinforce").advantage == "reinforce"
    assert AlgorithmConfig.preset("reinforce").num_iterations == 1
    dapo = AlgorithmConfig.preset("dapo")
    assert dapo.dynamic_sampling and dapo.overlong_buffer == 0.2
    assert dapo.overlong_buffer_tokens(100) == 20
    r = np.array([1.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(dapo.keep_mask(r, 2), [False, False, True, True])
    np.testing.assert_array_equal(AlgorithmConfig.preset("grpo").keep_mask(r, 2), [True] * 4)
    np.testing.assert_allclose(dapo.shape_rewards(r, [10, 95, 100, 200], 100), [1.0, 0.25, -1.0, 0.0])
    np.testing.assert_array_equal(AlgorithmConfig.preset("grpo").shape_rewards(r, [10, 95, 100, 200]), r)


def test_preset_advantages_dispatch():
    r = np.array([1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(AlgorithmConfig.preset("dr_grpo").advantages(r, 2), group_advantages(r, 2, "none"))
    np.testing.assert_allclose(AlgorithmConfig.preset("grpo").advantages(r, 2), group_advantages(r, 2))
    np.testing.assert_allclose(AlgorithmConfig.preset("rloo").advantages(r, 2), rloo_advantages(r, 2))
    np.testing.assert_allclose(AlgorithmConfig.preset("reinforce").advantages(r, 2), r - 0.25)


def test_overrides_and_epsilon_high_follows_epsilon():
    cfg = AlgorithmConfig.preset("grpo", epsilon=0.1, beta=0.04, kl_estimator="k1", num_iterations=2)
    obj = cfg.objective()
    assert (obj.clip_eps_low, obj.clip_eps_high, obj.beta, obj.kl_estimator) == (0.1, 0.1, 0.04, "k1")
    assert AlgorithmConfig.preset("dapo", epsilon_high=0.3).objective(max_completion_length=8).clip_eps_high == 0.3


def test_configured_max_completion_length_wins_over_the_argument():
    assert AlgorithmConfig.preset("dr_grpo").objective(32).max_completion_length == 32
    assert AlgorithmConfig.preset("dr_grpo", max_completion_length=64).objective(32).max_completion_length == 64
    assert AlgorithmConfig.preset("dapo", max_completion_length=10).overlong_buffer_tokens(1000) == 2


def test_every_algorithm_name_has_a_preset():
    for name in ALGORITHMS:
        assert AlgorithmConfig.preset(name).name == name


@pytest.mark.parametrize(("call", "field", "hint"), [
    (lambda: AlgorithmConfig.preset("ppo2"), "algorithm.name", "grpo, dapo, dr_grpo, rloo, reinforce"),
    (lambda: AlgorithmConfig.preset("grpo", epsilom=0.1), "algorithm.epsilom", "did you mean 'epsilon'"),
    (lambda: AlgorithmConfig.preset("grpo", epsilon=-0.1), "algorithm.epsilon", ">= 0"),
    (lambda: AlgorithmConfig.preset("grpo", epsilon_high=-0.1), "algorithm.epsilon_high", ">= 0"),
    (lambda: AlgorithmConfig.preset("grpo", beta=-1.0), "algorithm.beta", ">= 0"),
    (lambda: AlgorithmConfig.preset("grpo", dual_clip=0.5), "algorithm.dual_clip", "> 1"),
    (lambda: AlgorithmConfig.preset("grpo", kl_estimator="k9"), "algorithm.kl_estimator", "k3"),
    (lambda: AlgorithmConfig.preset("grpo", loss_aggregation="sum"), "algorithm.loss_aggregation", "token_mean"),
    (lambda: AlgorithmConfig.preset("grpo", advantage="gae"), "algorithm.advantage", "rloo"),
    (lambda: AlgorithmConfig.preset("grpo", scale_rewards="std"), "algorithm.scale_rewards", "batch"),
    (lambda: AlgorithmConfig.preset("grpo", num_iterations=0), "algorithm.num_iterations", ">= 1"),
    (lambda: AlgorithmConfig.preset("grpo", num_iterations=1.5), "algorithm.num_iterations", "integer"),
    (lambda: AlgorithmConfig.preset("grpo", dynamic_sampling="yes"), "algorithm.dynamic_sampling", "true or false"),
    (lambda: AlgorithmConfig.preset("grpo", overlong_buffer=1.5), "algorithm.overlong_buffer", "fraction"),
    (lambda: AlgorithmConfig.preset("grpo", overlong_buffer=64, max_completion_length=32),
     "algorithm.overlong_buffer", "exceeds"),
    (lambda: AlgorithmConfig.preset("grpo", overlong_penalty=-1.0), "algorithm.overlong_penalty", ">= 0"),
    (lambda: AlgorithmConfig.preset("grpo", max_completion_length=0), "algorithm.max_completion_length", ">= 1"),
    (lambda: AlgorithmConfig.preset("dr_grpo").objective(), "algorithm.max_completion_length", "max_new_tokens"),
    (lambda: AlgorithmConfig.preset("dapo").shape_rewards([1.0], [3]), "algorithm.max_completion_length",
     "max_new_tokens"),
])
def test_invalid_configs_name_the_field(call, field, hint):
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.field == field
    assert field in str(info.value) and hint in str(info.value), str(info.value)


def test_config_is_frozen():
    import attrs

    cfg = AlgorithmConfig.preset("grpo")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cfg.beta = 1.0  # type: ignore[misc]
