"""SAPO, VESPO and LUSPO (TRL 1.16's ``loss_type`` values of those names).

The numpy reference is checked against TRL's own ``GRPOTrainer._compute_loss`` run on the same
inputs (value and autograd gradient, loss masks as TRL's ``tool_mask``, the mismatch weights as
its ``importance_sampling_ratio``), against central differences, and the torch and MLX losses
against the reference.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.algorithms.reference import mismatch_weights, policy_loss, policy_loss_grad, vespo_weight
from polyrl.errors import ConfigError

from loss_backends import mlx_equals_reference, random_logprobs, require_mlx, torch_equals_reference

#: name -> (TRL loss_type, polyrl Objective); each pairing is what the preset of that name builds.
#: SAPO's temperatures are exact in float32: TRL's ``torch.where(adv > 0, pos, neg)`` on two Python
#: floats makes a float32 tensor, which would round 1.05 (TRL's default) in the float64 comparison.
CASES = {
    "sapo": ("sapo", Objective(policy_loss="sapo", sapo_temperature_pos=1.25, sapo_temperature_neg=0.75)),
    "sapo_sequence_kl": ("sapo", Objective(policy_loss="sapo", importance_sampling_level="sequence", beta=0.05,
                                           sapo_temperature_neg=1.0625)),
    "sapo_tis": ("sapo", Objective(policy_loss="sapo", mismatch_correction="tis", mismatch_cap=1.5,
                                   sapo_temperature_neg=1.0625)),
    "vespo": ("vespo", Objective(policy_loss="vespo", loss_aggregation="token_mean")),
    "vespo_kl_params": ("vespo", Objective(policy_loss="vespo", loss_aggregation="token_mean", beta=0.05,
                                           vespo_k_pos=1.5, vespo_lambda_pos=2.5, vespo_k_neg=2.0,
                                           vespo_lambda_neg=1.0)),
    "vespo_mis": ("vespo", Objective(policy_loss="vespo", loss_aggregation="token_mean",
                                     mismatch_correction="mis", mismatch_cap=1.5)),
    "luspo": ("luspo", Objective(importance_sampling_level="sequence", loss_aggregation="seq_mean_token_sum",
                                 clip_eps_low=0.05, clip_eps_high=0.08)),
    "luspo_kl_token": ("luspo", Objective(loss_aggregation="seq_mean_token_sum", beta=0.05)),
}


def _inputs(seed: int, masked: bool = False):
    rng = np.random.default_rng(seed)
    lengths = [3, 6, 1, 5]
    logp, old, ref, sampler = random_logprobs(rng, lengths)
    adv = np.array([1.3, -0.7, -2.0, 0.0])
    masks = None
    if masked:
        masks = [rng.random(n) < 0.6 for n in lengths]
        for m in masks:
            m[0] = True
    return lengths, logp, old, ref, sampler, adv, masks


@pytest.fixture(scope="module")
def trl_compute_loss():
    """TRL's ``GRPOTrainer._compute_loss``, called on a stand-in for the trainer's state (one
    process, no accumulation, training mode) whose forward returns the given log-probs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer

    def run(loss_type: str, obj: Objective, logp, old, ref, adv, masks=None, is_ratio=None):
        lengths = [len(x) for x in logp]
        width = max(lengths)

        def padded(values, fill=0.0):
            out = torch.full((len(values), width), fill, dtype=torch.float64)
            for i, v in enumerate(values):
                out[i, : len(v)] = torch.as_tensor(v, dtype=torch.float64)
            return out

        completion_mask = padded([np.ones(n) for n in lengths]).long()
        lp = padded(logp).requires_grad_(True)
        identity = SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x,
                                   reduce=lambda x, reduction="sum": x, num_processes=1, sync_gradients=True)
        args = SimpleNamespace(
            use_bias_correction_kl=False, delta=None, steps_per_generation=1,
            sapo_temperature_pos=obj.sapo_temperature_pos, sapo_temperature_neg=obj.sapo_temperature_neg,
            vespo_k_pos=obj.vespo_k_pos, vespo_lambda_pos=obj.vespo_lambda_pos,
            vespo_k_neg=obj.vespo_k_neg, vespo_lambda_neg=obj.vespo_lambda_neg)
        state = SimpleNamespace(
            args=args, loss_type=loss_type, beta=obj.beta, epsilon_low=obj.clip_eps_low,
            epsilon_high=obj.clip_eps_high, importance_sampling_level=obj.importance_sampling_level,
            top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=is_ratio is not None,
            vllm_importance_sampling_correction=is_ratio is not None, model=SimpleNamespace(training=True),
            current_gradient_accumulation_steps=1, accelerator=identity, _entropy_bonus_enabled=False,
            aux_loss_enabled=False, _metrics={"train": defaultdict(list)},
            get_gamma_weights=GRPOTrainer.get_gamma_weights,
            _get_per_token_logps_and_entropies=lambda *a, **k: (lp, torch.zeros_like(lp), None),
        )
        inputs = {
            "prompt_ids": torch.zeros((len(logp), 1), dtype=torch.long),
            "prompt_mask": torch.ones((len(logp), 1), dtype=torch.long),
            "completion_ids": torch.zeros((len(logp), width), dtype=torch.long),
            "completion_mask": completion_mask,
            "advantages": torch.as_tensor(adv, dtype=torch.float64),
            "old_per_token_logps": padded(old),
            "ref_per_token_logps": padded(ref),
            # the number of loss tokens in the batch (TRL's "dapo"/"vespo" normaliser)
            "num_items_in_batch": torch.tensor(float(sum(int(np.sum(m)) for m in masks) if masks else sum(lengths))),
        }
        if masks is not None:
            inputs["tool_mask"] = padded([np.asarray(m, np.float64) for m in masks]).long()
        if is_ratio is not None:
            inputs["importance_sampling_ratio"] = padded(is_ratio, fill=1.0)
        loss = GRPOTrainer._compute_loss(state, None, inputs)
        loss.backward()
        grads = [lp.grad[i, :n].numpy().copy() for i, n in enumerate(lengths)]
        return float(loss.detach()), grads

    return run


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_equals_trl_compute_loss(trl_compute_loss, name, masked):
    loss_type, obj = CASES[name]
    _, logp, old, ref, sampler, adv, masks = _inputs(len(name), masked)
    is_ratio = None
    if obj.corrects_mismatch:  # TRL's importance_sampling_ratio is this correction weight per token
        is_ratio = [mismatch_weights(o, s, obj)[0] for o, s in zip(old, sampler)]
        if masks is not None:  # TRL zeroes the log-gap of tool_mask tokens: their weight is 1
            is_ratio = [np.where(m, w, 1.0) for w, m in zip(is_ratio, masks)]
    expected, expected_grads = trl_compute_loss(loss_type, obj, logp, old, ref, adv, masks, is_ratio)
    ref_in = ref if obj.beta else None
    loss, _ = policy_loss(logp, adv, obj, old, ref_in, sampler, masks=masks)
    grads = policy_loss_grad(logp, adv, obj, old, ref_in, sampler, masks=masks)
    assert loss == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_grad_matches_central_differences(name):
    """SAPO and LUSPO differentiate through the ratio: plain central differences. VESPO's weight is
    detached by design, so the difference moves each token's old (and sampler) log-prob along
    with it: the ratio, and with it the weight, stays put while the REINFORCE and KL terms move."""
    _, obj = CASES[name]
    _, logp, old, ref, sampler, adv, _ = _inputs(len(name) + 7)
    ref_in = ref if obj.beta else None
    grads = policy_loss_grad(logp, adv, obj, old, ref_in, sampler)
    h = 1e-6
    for i, lp in enumerate(logp):
        for t in range(len(lp)):
            values = []
            for sign in (1.0, -1.0):
                moved = [x.copy() for x in logp]
                moved[i][t] += sign * h
                o, s = old, sampler
                if obj.policy_loss == "vespo":
                    o, s = [x.copy() for x in old], [x.copy() for x in sampler]
                    o[i][t] += sign * h
                    s[i][t] += sign * h
                values.append(policy_loss(moved, adv, obj, o, ref_in, s)[0])
            numeric = (values[0] - values[1]) / (2 * h)
            assert grads[i][t] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (i, t)


# --- by hand ---------------------------------------------------------------------------------------


def test_sapo_slope_at_ratio_one_is_the_policy_gradient():
    """At r = 1 the gate's slope 4 sigma (1 - sigma) is 1: SAPO starts exactly where PPO does."""
    obj = Objective(policy_loss="sapo", loss_aggregation="token_mean")
    logp = [np.array([-1.0, -2.0]), np.array([-0.5])]
    ppo = Objective(loss_aggregation="token_mean")
    np.testing.assert_allclose(np.concatenate(policy_loss_grad(logp, [2.0, -1.0], obj)),
                               np.concatenate(policy_loss_grad(logp, [2.0, -1.0], ppo)))
    loss, metrics = policy_loss(logp, [2.0, -1.0], obj)
    assert loss == pytest.approx((-2.0 * 2 * 2.0 / 1.0 + 1.0 * 2 / 1.05) / 3)  # -A * 4/tau * 1/2 per token
    assert metrics["clip_fraction"] == 0.0


def test_sapo_fades_the_slope_instead_of_cutting_it():
    """Past PPO's clip edge PPO's slope is 0; SAPO's is not, and it decays as the ratio runs off."""
    sapo, ppo = Objective(policy_loss="sapo"), Objective()
    old = [np.array([-1.0])]
    log_ratios = (0.5, 1.0, 2.0, 3.0)  # ratios 1.65 .. 20, all beyond 1 + 0.2
    slopes = [policy_loss_grad([np.array([-1.0 + d])], [1.0], sapo, old)[0][0] for d in log_ratios]
    assert all(policy_loss_grad([np.array([-1.0 + d])], [1.0], ppo, old)[0][0] == 0.0 for d in log_ratios)
    assert all(s < 0 for s in slopes) and all(abs(b) < abs(a) for a, b in zip(slopes, slopes[1:]))


def test_vespo_weight_is_one_on_policy_and_a_gamma_shape_off_it():
    obj = Objective(policy_loss="vespo")
    lp = np.array([-1.0, -2.0])
    assert vespo_weight(lp, lp, None, 1.0, obj) == pytest.approx(1.0)
    old = lp - np.array([0.1, 0.2])  # log w = 0.3
    w = np.exp(0.3)
    assert vespo_weight(lp, old, None, 1.0, obj) == pytest.approx(np.exp(3.0 + 2.0 * 0.3 - 3.0 * w))
    assert vespo_weight(lp, old, None, -1.0, obj) == pytest.approx(np.exp(2.0 + 3.0 * 0.3 - 2.0 * w))
    far = lp + 40.0  # clamped at log w = 20: exp(-lambda e^20) underflows to 0
    assert vespo_weight(far, lp, None, 1.0, obj) == 0.0


def test_torch_reports_vespos_weight_sum_as_the_reference_computes_it():
    """TRL logs ``vespo/phi_seq_mean`` (its weight's mean over the sequences); the torch backend's
    sum of it off policy is the reference's, sequence by sequence, and the trainer names it so."""
    torch = pytest.importorskip("torch")
    from polyrl.step_metrics import clip_region_metrics
    from polyrl_torch.training import objective_loss

    obj = Objective(policy_loss="vespo")
    logp = [np.array([-1.0, -2.0, -0.5]), np.array([-0.3])]
    old = [x - d for x, d in zip(logp, (np.array([0.1, 0.2, -0.05]), np.array([-0.4])))]
    adv = [1.0, -0.5]
    _, stats = objective_loss([torch.tensor(x, dtype=torch.float64) for x in logp], torch.tensor(adv), obj,
                              [torch.tensor(x, dtype=torch.float64) for x in old])
    want = sum(vespo_weight(lp, o, None, a, obj) for lp, o, a in zip(logp, old, adv))
    assert float(stats["vespo_phi_sum"]) == pytest.approx(want, rel=1e-9) and want != pytest.approx(2.0)
    assert clip_region_metrics({"vespo_phi_seq_mean": want / 2}, "vespo") == {"vespo/phi_seq_mean": want / 2}
    assert clip_region_metrics({"vespo_phi_seq_mean": want / 2}, "ppo") == {}


def test_luspo_weighs_a_sequence_by_its_length():
    obj = Objective(loss_aggregation="seq_mean_token_sum")
    logp = [np.full(4, -1.0), np.full(1, -1.0)]
    loss, _ = policy_loss(logp, [1.0, 1.0], obj)
    assert loss == pytest.approx(-(4 + 1) / 2)
    np.testing.assert_allclose(policy_loss_grad(logp, [1.0, 1.0], obj)[0], np.full(4, -0.5))


# --- the backends against the reference ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_loss_equals_reference(name):
    _, logp, old, ref, sampler, adv, _ = _inputs(len(name) + 3)
    torch_equals_reference(logp, adv, CASES[name][1], old, ref, sampler)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mlx_loss_equals_reference(name):
    lengths, logp, old, ref, sampler, adv, _ = _inputs(len(name) + 3)
    mlx_equals_reference(lengths, logp, adv, CASES[name][1], old, ref, sampler)


# --- presets and validation ------------------------------------------------------------------------


def test_presets_build_their_objectives():
    sapo = AlgorithmConfig.preset("sapo").objective(16)
    assert (sapo.policy_loss, sapo.sapo_temperature_pos, sapo.sapo_temperature_neg) == ("sapo", 1.0, 1.05)
    assert sapo.loss_aggregation == "seq_mean_token_mean"
    vespo = AlgorithmConfig.preset("vespo", vespo_k_pos=1.5).objective(16)
    assert (vespo.policy_loss, vespo.loss_aggregation, vespo.vespo_k_pos) == ("vespo", "token_mean", 1.5)
    assert (vespo.vespo_lambda_pos, vespo.vespo_k_neg, vespo.vespo_lambda_neg) == (3.0, 3.0, 2.0)
    luspo = AlgorithmConfig.preset("luspo").objective(16)
    assert (luspo.importance_sampling_level, luspo.loss_aggregation) == ("sequence", "seq_mean_token_sum")


@pytest.mark.parametrize(("name", "overrides", "field"), [
    ("sapo", {"sapo_temperature_pos": 0.0}, "algorithm.sapo_temperature_pos"),
    ("sapo", {"sapo_temperature_neg": float("inf")}, "algorithm.sapo_temperature_neg"),
    ("vespo", {"vespo_lambda_neg": -1.0}, "algorithm.vespo_lambda_neg"),
    ("vespo", {"vespo_k_pos": -0.5}, "algorithm.vespo_k_pos"),
    ("vespo", {"vespo_k_neg": "3"}, "algorithm.vespo_k_neg"),
    ("vespo", {"importance_sampling_level": "sequence"}, "algorithm.importance_sampling_level"),
    ("vespo", {"mismatch_correction": "tis", "mismatch_level": "sequence"}, "algorithm.mismatch_level"),
    ("luspo", {"loss_aggregation": "seq_sum"}, "algorithm.loss_aggregation"),
    ("grpo", {"kl_in_reward": True}, "algorithm.kl_in_reward"),
    ("grpo", {"kl_in_reward": "yes", "beta": 0.1}, "algorithm.kl_in_reward"),
])
def test_bad_settings_name_the_field(name, overrides, field):
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset(name, **overrides)
    assert err.value.field == field


def test_toml_values_are_checked_by_the_config_loader():
    from polyrl.config import RunConfig

    base = {"model": {"path": "tiny"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict({**base, "algorithm": {"name": "vespo", "vespo_lambda_pos": 0}})
    assert err.value.field == "algorithm.vespo_lambda_pos" and err.value.fix
    config = RunConfig.from_dict({**base, "algorithm": {"name": "sapo", "sapo_temperature_neg": 2.0}})
    assert config.algorithm.objective(8).sapo_temperature_neg == 2.0


def test_mlx_reports_vespos_weight_sum_as_the_reference_computes_it():
    """The MLX backend reported no ``vespo_phi_seq_mean``, so an MLX vespo run logged no TRL
    ``vespo/phi_seq_mean``; its per-token layout now sums one weight per sequence, the reference's."""
    require_mlx()
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import objective_loss

    obj = Objective(policy_loss="vespo")
    logp = [np.array([-1.0, -2.0, -0.5]), np.array([-0.3])]
    old = [x - d for x, d in zip(logp, (np.array([0.1, 0.2, -0.05]), np.array([-0.4])))]
    adv = [1.0, -0.5]
    lengths = [len(x) for x in logp]
    want = sum(vespo_weight(lp, o, None, a, obj) for lp, o, a in zip(logp, old, adv))
    with mx.stream(mx.cpu):
        f64 = mx.float64
        stats: dict = {}
        objective_loss(mx.array(np.concatenate(logp), dtype=f64), mx.array(np.repeat(adv, lengths), dtype=f64),
                       mx.ones(sum(lengths), dtype=f64), obj, mx.array(np.concatenate(old), dtype=f64),
                       segments=mx.array(np.repeat(np.arange(len(lengths)), lengths)), stats=stats)
        assert stats["vespo_phi_sum"].item() == pytest.approx(want, rel=1e-6) and want != pytest.approx(2.0)
