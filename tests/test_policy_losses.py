"""GSPO, CISPO and sampler-trainer mismatch correction: the numpy reference against hand
computation and central differences, and the torch and MLX losses against the reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.algorithms.reference import mismatch_metrics, policy_loss, policy_loss_grad
from polyrl.errors import ConfigError

from loss_backends import (mlx_equals_reference, mlx_flat_inputs, random_logprobs, require_mlx,
                           torch_equals_reference)

#: (policy_loss, importance_sampling_level, mismatch_correction, mismatch_level[, kl_bias_correction])
VARIANTS = [
    ("ppo", "sequence", "none", "token"),
    ("cispo", "token", "none", "token"),
    ("ppo", "token", "tis", "token"),
    ("ppo", "token", "mis", "token"),
    ("ppo", "sequence", "tis", "sequence"),
    ("cispo", "token", "mis", "sequence"),
    ("ppo", "token", "none", "token"),
    ("ppo", "token", "none", "token", True),
    ("ppo", "sequence", "none", "token", True),
    ("cispo", "token", "tis", "token", True),
]
AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
CASES = [(i, v, agg) for i, (v, agg) in enumerate(itertools.product(VARIANTS, AGGREGATIONS))]


def _objective(variant, aggregation) -> Objective:
    loss, level, correction, mlevel, *bias = variant
    eps_high = 4.0 if loss == "cispo" else 0.28
    return Objective(clip_eps_low=0.2, clip_eps_high=eps_high, beta=0.05, loss_aggregation=aggregation,
                     max_completion_length=8, policy_loss=loss, importance_sampling_level=level,
                     mismatch_correction=correction, mismatch_level=mlevel, mismatch_cap=1.5,
                     kl_bias_correction=bool(bias and bias[0]))


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    lengths = [3, 6, 1, 4]
    logp, old, ref, sampler = random_logprobs(rng, lengths)
    adv = np.array([1.3, -0.7, -2.0, 0.4])
    return lengths, logp, old, ref, sampler, adv


# --- the reference, by hand ------------------------------------------------------------------------


def test_gspo_ratio_is_the_length_normalised_sequence_ratio():
    obj = Objective(clip_eps_low=0.5, clip_eps_high=0.5, importance_sampling_level="sequence")
    logp, old = [np.array([-1.0, -2.0, -0.5])], [np.array([-1.2, -1.9, -0.6])]
    s = np.exp(np.mean(logp[0] - old[0]))
    loss, _ = policy_loss(logp, [2.0], obj, old)
    assert loss == pytest.approx(-2.0 * s)  # token mean of a constant per-token loss
    grad = policy_loss_grad(logp, [2.0], obj, old)[0]
    # loss = -2 s (every token shares it) and ds/dlogp_t = s/3
    np.testing.assert_allclose(grad, np.full(3, -2.0 * s / 3))


def test_gspo_clips_the_whole_sequence():
    obj = Objective(clip_eps_low=3e-4, clip_eps_high=4e-4, importance_sampling_level="sequence")
    logp, old = [np.array([-1.0, -2.0])], [np.array([-1.1, -2.0])]  # s = exp(0.05) > 1 + 4e-4
    loss, metrics = policy_loss(logp, [1.0], obj, old)
    assert loss == pytest.approx(-(1 + 4e-4))
    assert metrics["clip_fraction"] == 1.0
    np.testing.assert_array_equal(policy_loss_grad(logp, [1.0], obj, old)[0], [0.0, 0.0])


def test_clip_extremes_are_one_completions_clipped_share():
    """TRL's clip_ratio/low_min and high_max (1.9): the smallest per-completion share of tokens
    clipped low and the largest clipped high, not the batch's token means."""
    obj = Objective(clip_eps_low=0.2, clip_eps_high=0.2)
    # ratios: completion 0 (adv < 0) 0.5, 1.0, 0.5, 1.0 -> 2 of 4 low; completion 1 (adv < 0) none low;
    # completion 2 (adv > 0) 2.0, 1.0 -> 1 of 2 high; completion 3 (adv > 0) 2.0, 2.0, 2.0 -> all high
    r = np.log
    old = [np.zeros(4), np.zeros(2), np.zeros(2), np.zeros(3)]
    logp = [np.array([r(0.5), 0.0, r(0.5), 0.0]), np.zeros(2), np.array([r(2.0), 0.0]), np.full(3, r(2.0))]
    _, metrics = policy_loss(logp, [-1.0, -1.0, 1.0, 1.0], obj, old)
    assert metrics["clip_low_min"] == 0.0 and metrics["clip_high_max"] == 1.0
    assert metrics["clip_low_fraction"] == pytest.approx(2 / 11)
    _, metrics = policy_loss(logp[:1], [-1.0], obj, old[:1])
    assert metrics["clip_low_min"] == 0.5 and metrics["clip_high_max"] == 0.0


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    obj = Objective(clip_eps_high=0.2, policy_loss="cispo", loss_aggregation="token_mean")
    logp, old = [np.array([-1.0, -1.0])], [np.array([-1.5, -1.0])]  # ratios e^0.5 (clipped) and 1
    loss, metrics = policy_loss(logp, [2.0], obj, old)
    assert loss == pytest.approx((-2.0 * 1.2 * -1.0 + -2.0 * 1.0 * -1.0) / 2)
    np.testing.assert_allclose(policy_loss_grad(logp, [2.0], obj, old)[0], [-2.0 * 1.2 / 2, -2.0 / 2])
    assert metrics["clip_fraction"] == 0.5


def test_cispo_without_old_logprobs_is_reinforce():
    obj = Objective(policy_loss="cispo", loss_aggregation="token_mean")
    logp = [np.array([-1.0, -0.5])]
    assert policy_loss(logp, [1.0], obj)[0] == pytest.approx(0.75)
    np.testing.assert_allclose(policy_loss_grad(logp, [1.0], obj)[0], [-0.5, -0.5])


@pytest.mark.parametrize(("mode", "weights"), [("tis", [np.exp(0.2), 1.5]), ("mis", [np.exp(0.2), 0.0])])
def test_token_mismatch_correction_truncates_or_masks(mode, weights):
    obj = Objective(mismatch_correction=mode, mismatch_cap=1.5, loss_aggregation="token_mean")
    logp = [np.array([-1.0, -1.0])]
    sampler = [np.array([-1.2, -2.0])]  # trainer/sampler = e^0.2 and e^1 (> cap)
    loss, metrics = policy_loss(logp, [1.0], obj, sampler_logprobs=sampler)
    assert loss == pytest.approx(-(weights[0] + weights[1]) / 2)
    np.testing.assert_allclose(policy_loss_grad(logp, [1.0], obj, sampler_logprobs=sampler)[0],
                               -np.array(weights) / 2)
    assert metrics["mismatch_abs"] == pytest.approx(0.6)
    assert metrics["mismatch_over"] == 1.0
    assert metrics["mismatch_corrected"] == 0.5
    assert metrics["mismatch_kl"] == pytest.approx(np.mean(np.exp([0.2, 1.0]) - [0.2, 1.0] - 1))


def test_sequence_mismatch_correction_uses_the_sequence_product():
    obj = Objective(mismatch_correction="mis", mismatch_level="sequence", mismatch_cap=1.5)
    logp = [np.array([-1.0, -1.0]), np.array([-1.0])]
    sampler = [np.array([-1.3, -1.3]), np.array([-1.1])]  # products e^0.6 (> cap, masked) and e^0.1
    loss, _ = policy_loss(logp, [1.0, 1.0], obj, sampler_logprobs=sampler)
    assert loss == pytest.approx(-np.exp(0.1) / 2)


def test_no_correction_still_measures():
    logp, sampler = [np.array([-1.0])], [np.array([-1.0])]
    _, metrics = policy_loss(logp, [1.0], Objective(), sampler_logprobs=sampler)
    assert metrics["mismatch_abs"] == 0.0 and metrics["mismatch_kl"] == 0.0
    assert mismatch_metrics([np.array([-1.0, -2.0])], [np.array([-1.05, -2.5])], Objective())["mismatch_over"] == 0.5


def test_correction_without_sampler_logprobs_is_an_error():
    with pytest.raises(ValueError, match="sampler"):
        policy_loss([np.array([-1.0])], [1.0], Objective(mismatch_correction="tis"))


@pytest.mark.parametrize(("case", "variant", "aggregation"), CASES)
def test_reference_grad_matches_central_differences(case, variant, aggregation):
    obj = _objective(variant, aggregation)
    _, logp, old, ref, sampler, adv = _inputs(case)
    grads = policy_loss_grad(logp, adv, obj, old, ref, sampler)
    h = 1e-6
    for i, lp in enumerate(logp):
        for t in range(len(lp)):
            plus, minus = [x.copy() for x in logp], [x.copy() for x in logp]
            plus[i][t] += h
            minus[i][t] -= h
            numeric = (policy_loss(plus, adv, obj, old, ref, sampler)[0]
                       - policy_loss(minus, adv, obj, old, ref, sampler)[0]) / (2 * h)
            if obj.policy_loss == "cispo":  # the weight is detached: its slope is not in the gradient
                continue
            assert grads[i][t] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (i, t)


# --- presets and validation ------------------------------------------------------------------------


def test_presets_name_their_objectives():
    gspo = AlgorithmConfig.preset("gspo").objective(16)
    assert gspo.importance_sampling_level == "sequence" and gspo.clip_eps_high == pytest.approx(4e-4)
    cispo = AlgorithmConfig.preset("cispo").objective(16)
    assert cispo.policy_loss == "cispo" and cispo.clip_eps_high == 4.0
    tis = AlgorithmConfig.preset("grpo", mismatch_correction="tis", mismatch_cap=3.0).objective(16)
    assert (tis.mismatch_correction, tis.mismatch_cap) == ("tis", 3.0)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"mismatch_correction": "truncate"}, "algorithm.mismatch_correction"),
    ({"mismatch_level": "batch"}, "algorithm.mismatch_level"),
    ({"mismatch_cap": 1.0}, "algorithm.mismatch_cap"),
    ({"mismatch_cap": float("nan")}, "algorithm.mismatch_cap"),
    ({"policy_loss": "sapo_v2"}, "algorithm.policy_loss"),
    ({"policy_loss": "cispo", "importance_sampling_level": "sequence"}, "algorithm.importance_sampling_level"),
])
def test_bad_settings_name_the_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", **overrides)
    assert err.value.field == field


# --- the backends against the reference ------------------------------------------------------------


@pytest.mark.parametrize(("case", "variant", "aggregation"), CASES)
def test_torch_loss_equals_reference(case, variant, aggregation):
    _, logp, old, ref, sampler, adv = _inputs(case)
    torch_equals_reference(logp, adv, _objective(variant, aggregation), old, ref, sampler)


@pytest.mark.parametrize(("case", "variant", "aggregation"), CASES)
def test_mlx_loss_equals_reference(case, variant, aggregation):
    lengths, logp, old, ref, sampler, adv = _inputs(case)
    mlx_equals_reference(lengths, logp, adv, _objective(variant, aggregation), old, ref, sampler)


# --- entropy: bonus and high-entropy token selection -----------------------------------------------

ENTROPY_CASES = [(0.0, 0.5, "ppo"), (0.01, 1.0, "ppo"), (0.02, 0.3, "cispo"), (0.01, 0.5, "ppo")]


def _entropy_objective(coef, quantile, loss) -> Objective:
    return Objective(clip_eps_high=4.0 if loss == "cispo" else 0.28, policy_loss=loss, beta=0.05,
                     loss_aggregation="token_mean", entropy_coef=coef, top_entropy_quantile=quantile)


def test_top_entropy_quantile_keeps_the_high_entropy_tokens():
    obj = Objective(top_entropy_quantile=0.5, loss_aggregation="token_mean")
    logp = [np.array([-1.0, -1.0, -1.0, -1.0])]
    ent = [np.array([0.1, 2.0, 0.5, 3.0])]  # median (linear) 1.25: tokens 1 and 3 stay
    loss, metrics = policy_loss(logp, [1.0], obj, entropies=ent)
    assert loss == pytest.approx(-2 / 4)
    np.testing.assert_allclose(policy_loss_grad(logp, [1.0], obj, entropies=ent)[0], [0, -0.25, 0, -0.25])
    assert metrics["entropy"] == pytest.approx(5.6 / 4) and metrics["entropy_selected"] == 0.5


def test_entropy_bonus_lowers_the_loss_by_coef_times_mean_entropy():
    obj = Objective(entropy_coef=0.1, loss_aggregation="token_mean")
    logp, ent = [np.array([-1.0, -2.0])], [np.array([1.0, 3.0])]
    assert policy_loss(logp, [0.0], obj, entropies=ent)[0] == pytest.approx(-0.1 * 2.0)


def test_entropy_settings_are_validated():
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", top_entropy_quantile=0.0)
    assert err.value.field == "algorithm.top_entropy_quantile"
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", entropy_coef=-1.0)
    assert err.value.field == "algorithm.entropy_coef"


@pytest.mark.parametrize(("case", "setting"), list(enumerate(ENTROPY_CASES)))
def test_torch_entropy_terms_equal_reference(case, setting):
    torch = pytest.importorskip("torch")
    from polyrl.algorithms.reference import entropy_grad
    from polyrl_torch.training import objective_loss

    obj = _entropy_objective(*setting)
    lengths, logp, old, ref, sampler, adv = _inputs(100 + case)
    ent = [np.random.default_rng(case).uniform(0.1, 4.0, n) for n in lengths]
    expected, metrics = policy_loss(logp, adv, obj, old, ref, sampler, ent)
    grads = policy_loss_grad(logp, adv, obj, old, ref, sampler, ent)
    lp_t = [torch.tensor(x, requires_grad=True) for x in logp]
    ent_t = [torch.tensor(x, requires_grad=True) for x in ent]
    loss, stats = objective_loss(lp_t, torch.tensor(adv), obj, [torch.tensor(x) for x in old],
                                 [torch.tensor(x) for x in ref], sampler_logp=[torch.tensor(x) for x in sampler],
                                 entropy=ent_t)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-10, abs=1e-12)
    for g, t in zip(grads, lp_t):
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-9, atol=1e-12)
    for g, t in zip(entropy_grad(lengths, obj), ent_t):  # no bonus: entropy only selects, no gradient
        np.testing.assert_allclose(np.zeros(len(g)) if t.grad is None else t.grad.numpy(), g, rtol=1e-9, atol=1e-12)
    tokens = int(stats["tokens"])
    assert float(stats["entropy_sum"]) / tokens == pytest.approx(metrics["entropy"])
    assert float(stats["entropy_selected_sum"]) / tokens == pytest.approx(metrics["entropy_selected"])


@pytest.mark.parametrize(("case", "setting"), list(enumerate(ENTROPY_CASES)))
def test_mlx_entropy_terms_equal_reference(case, setting):
    from polyrl.algorithms.reference import entropy_grad

    require_mlx()
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import objective_loss

    obj = _entropy_objective(*setting)
    lengths, logp, old, ref, sampler, adv = _inputs(100 + case)
    ent = [np.random.default_rng(case).uniform(0.1, 4.0, n) for n in lengths]
    expected, metrics = policy_loss(logp, adv, obj, old, ref, sampler, ent)
    expected_grad = np.concatenate(policy_loss_grad(logp, adv, obj, old, ref, sampler, ent))
    with mx.stream(mx.cpu):
        f64 = mx.float64
        w, a, o, r, s, segments = mlx_flat_inputs(lengths, adv, obj, old, ref, sampler)
        stats: dict = {}

        def f(x, e):
            return objective_loss(x, a, w, obj, o, r, sampler_logp=s, segments=segments, stats=stats, entropy=e)

        (loss, _, _), (grad, egrad) = mx.value_and_grad(f, argnums=(0, 1))(
            mx.array(np.concatenate(logp), dtype=f64), mx.array(np.concatenate(ent), dtype=f64))
        assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-7)
        np.testing.assert_allclose(np.array(grad), expected_grad, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(np.array(egrad), np.concatenate(entropy_grad(lengths, obj)), rtol=1e-6, atol=1e-12)
        tokens = sum(lengths)
        assert stats["entropy"].item() / tokens == pytest.approx(metrics["entropy"], rel=1e-9)
        assert stats["entropy_selected"].item() / tokens == pytest.approx(metrics["entropy_selected"])


# --- through the CLI: one error line naming the field ---------------------------------------------

CLI_BAD = {
    "correction": ('mismatch_correction = "truncate"', "algorithm.mismatch_correction"),
    "cap": ("mismatch_cap = 0.5", "algorithm.mismatch_cap"),
    "quantile": ("top_entropy_quantile = 1.5", "algorithm.top_entropy_quantile"),
    "cispo_sequence": ('name = "cispo"\nimportance_sampling_level = "sequence"', "algorithm.importance_sampling_level"),
    "sapo_temperature": ('name = "sapo"\nsapo_temperature_neg = 0', "algorithm.sapo_temperature_neg"),
    "kl_in_reward_no_beta": ("kl_in_reward = true", "algorithm.kl_in_reward"),
}


@pytest.mark.faults
@pytest.mark.parametrize("name", sorted(CLI_BAD))
def test_bad_algorithm_settings_are_one_error_line_from_the_cli(tmp_path, name):
    import os
    import subprocess
    import sys
    from pathlib import Path

    body, field = CLI_BAD[name]
    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\n'
                    f'name = "numeric_match"\n[algorithm]\n{body}\n')
    core = Path(__file__).resolve().parents[1] / "core"
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(core), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True,
                            text=True, timeout=120, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], result.stderr
    assert "Traceback" not in result.stderr


# --- loss masks (multi-turn episodes) --------------------------------------------------------------


@pytest.mark.parametrize("objective", [Objective(beta=0.1), Objective(importance_sampling_level="sequence"),
                                       Objective(loss_aggregation="token_mean", top_entropy_quantile=0.5)],
                         ids=["grpo_kl", "gspo", "entropy_quantile"])
def test_masked_tokens_are_left_out_as_if_absent(objective):
    """A mask restricts every rule to the sampled tokens: the masked loss equals the loss of the
    shortened sequences, and the inserted tokens get exactly zero gradient."""
    rng = np.random.default_rng(5)
    lengths = [7, 4, 9]
    logp = [rng.normal(-2, 0.5, n) for n in lengths]
    old = [x + rng.normal(0, 0.2, len(x)) for x in logp]
    ref = [x + rng.normal(0, 0.2, len(x)) for x in logp]
    ent = [rng.random(n) for n in lengths]
    masks = [rng.random(n) < 0.5 for n in lengths]
    for m in masks:
        m[0] = True
    adv = [1.0, -0.5, 0.3]
    cut = lambda xs: [x[m] for x, m in zip(xs, masks)]  # noqa: E731
    loss, metrics = policy_loss(logp, adv, objective, old, ref, entropies=ent, masks=masks)
    short_loss, short_metrics = policy_loss(cut(logp), adv, objective, cut(old), cut(ref), entropies=cut(ent))
    assert loss == pytest.approx(short_loss, rel=1e-12)
    assert metrics == pytest.approx(short_metrics)
    assert metrics["tokens"] == sum(int(m.sum()) for m in masks)
    grads = policy_loss_grad(logp, adv, objective, old, ref, entropies=ent, masks=masks)
    short = policy_loss_grad(cut(logp), adv, objective, cut(old), cut(ref), entropies=cut(ent))
    for g, s, m, n in zip(grads, short, masks, lengths):
        assert len(g) == n and np.all(g[~m] == 0.0)
        np.testing.assert_allclose(g[m], s, rtol=1e-12)


# --- TRL's use_bias_correction_kl ------------------------------------------------------------------


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_kl_bias_correction_is_trls_kl_times_the_importance_ratio(level):
    """TRL 1.16's ``_compute_loss`` with ``use_bias_correction_kl`` (its default): ``per_token_kl
    * coef_1``, the ratio not detached (token or sequence level), the logged ``kl`` the weighted one.
    Written out here from TRL's arithmetic for one micro-batch, ``loss_type = "grpo"``."""
    torch = pytest.importorskip("torch")
    obj = Objective(beta=0.1, importance_sampling_level=level, kl_bias_correction=True)
    _, logp, old, ref, _, adv = _inputs(3)
    leaves = [torch.tensor(x, requires_grad=True) for x in logp]
    b, t = len(logp), max(len(x) for x in logp)
    lp, old_t, ref_t, mask = (torch.zeros(b, t, dtype=torch.float64) for _ in range(4))
    for i, x in enumerate(leaves):
        lp = lp.index_put((torch.tensor([i]), torch.arange(len(x))), x)
        old_t[i, :len(x)], ref_t[i, :len(x)], mask[i, :len(x)] = torch.tensor(old[i]), torch.tensor(ref[i]), 1.0
    log_ratio = lp - old_t
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_ratio)
    per_token_kl = (torch.exp(ref_t - lp) - (ref_t - lp) - 1) * coef_1
    a = torch.tensor(adv)[:, None]
    per_token_loss = -torch.min(coef_1 * a, torch.clamp(coef_1, 0.8, 1.2) * a) + 0.1 * per_token_kl
    expected = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    expected.backward()
    trl_kl = float(((per_token_kl * mask).sum() / mask.sum()).detach())

    loss, metrics = policy_loss(logp, adv, obj, old, ref)
    grads = policy_loss_grad(logp, adv, obj, old, ref)
    assert loss == pytest.approx(float(expected.detach()), rel=1e-12)
    assert metrics["kl"] == pytest.approx(trl_kl, rel=1e-12)
    for g, leaf in zip(grads, leaves):
        np.testing.assert_allclose(g, leaf.grad.numpy(), rtol=1e-10, atol=1e-15)
    plain = policy_loss_grad(logp, adv, Objective(beta=0.1, importance_sampling_level=level), old, ref)
    assert max(abs(p - g).max() for p, g in zip(plain, grads)) > 1e-4  # the weight changes the step


def test_kl_bias_correction_is_refused_where_nothing_reads_it(tmp_path):
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", kl_bias_correction="yes")
    assert err.value.field == "algorithm.kl_bias_correction"
    for overrides, why in (({}, "beta = 0 has no KL term"),
                           ({"beta": 0.1, "kl_in_reward": True}, "kl_in_reward puts the KL in the reward")):
        with pytest.raises(ConfigError, match=why) as err:
            AlgorithmConfig.preset("grpo", kl_bias_correction=True, **overrides)
        assert err.value.field == "algorithm.kl_bias_correction"
    assert AlgorithmConfig.preset("grpo", beta=0.1, kl_bias_correction=True).objective(8).kl_bias_correction


def test_an_epsilon_of_one_or_more_leaves_the_low_side_unclipped_as_trls_does():
    """TRL's DeepSeek-R1 recipe (its paper index) writes epsilon=10: the bound 1 - epsilon <= 0
    clips no ratio, so a negative advantage's token below 0.8 keeps its gradient -A * r. polyrl
    refused it (epsilon must be in [0, 1)); the reference and the torch loss now train it so."""
    torch = pytest.importorskip("torch")
    from polyrl_torch.training import objective_loss

    logp, old, adv = [np.array([np.log(0.5) - 1.0])], [np.array([-1.0])], [-0.7]  # ratio 0.5
    usual = AlgorithmConfig.preset("grpo", epsilon=0.2, beta=0.0).objective()
    wide = AlgorithmConfig.preset("grpo", epsilon=10.0, beta=0.0).objective()
    assert policy_loss_grad(logp, adv, usual, old)[0][0] == 0.0  # clipped at 0.8: no gradient
    assert policy_loss_grad(logp, adv, wide, old)[0][0] == pytest.approx(0.7 * 0.5)
    lp = [torch.tensor(logp[0], requires_grad=True)]
    loss, stats = objective_loss(lp, torch.tensor(adv), wide, [torch.tensor(old[0])])
    loss.backward()
    assert float(lp[0].grad[0]) == pytest.approx(0.7 * 0.5) and float(stats["clip_sum"]) == 0.0
