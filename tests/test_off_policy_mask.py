"""Off-policy sequence masking (DeepSeek-V3.2 eq. 9; TRL 1.16's ``off_policy_mask_threshold``).

The numpy reference is checked against TRL's own ``GRPOTrainer._compute_loss`` (value and autograd
gradient) on the same inputs: the mask multiplies the policy term only (not the KL term, not the
entropy bonus), compares the sampler's log-probs with the current ones, counts an unscorable (NaN)
token as 0 in its sequence's mean, and leaves a dropped sequence in the loss's divisors. Then the
torch and MLX losses against the reference, the ``[algorithm]`` key and ``from_trl``.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.errors import ConfigError

from loss_backends import mlx_loss, require_mlx
from trl_util import captured_trainer_config

LENGTHS = [3, 6, 1, 5, 4]
#: seq 0: A > 0 with a large gap (kept); 1: A < 0, gap ~0.9 (dropped at 0.5); 2: A < 0, gap ~0.1
#: (kept); 3: A = 0 (kept: TRL keeps A >= 0); 4: A < 0, gap ~0.8 (dropped at 0.5)
SHIFTS = [1.0, 0.9, 0.1, 0.7, 0.8]
ADVANTAGES = np.array([1.3, -0.7, -2.0, 0.0, -0.4])

#: name -> (TRL loss_type, Objective, threshold); the pairing is TRL's loss_type as polyrl spells it
CASES = {
    "grpo": ("grpo", Objective(), 0.5),
    "dapo_kl": ("dapo", Objective(loss_aggregation="token_mean", beta=0.05, kl_bias_correction=True), 0.5),
    "gspo_kl": ("grpo", Objective(importance_sampling_level="sequence", beta=0.05), 0.5),
    "cispo": ("cispo", Objective(policy_loss="cispo", clip_eps_high=4.0, loss_aggregation="token_mean"), 0.5),
    "vespo": ("vespo", Objective(policy_loss="vespo", loss_aggregation="token_mean"), 0.5),
    "luspo": ("luspo", Objective(loss_aggregation="seq_mean_token_sum", beta=0.05), 0.5),
    "bnpo_entropy": ("bnpo", Objective(loss_aggregation="token_mean", entropy_coef=0.01), 0.5),
    "high_threshold": ("grpo", Objective(), 5.0),  # nothing dropped
    "zero_threshold": ("grpo", Objective(), 0.0),  # TRL takes 0: any drift drops a negative-advantage sequence
}


def _with(obj: Objective, threshold: float) -> Objective:
    import attrs

    return attrs.evolve(obj, off_policy_mask_threshold=threshold)


def _inputs(seed: int, masked: bool = False, nan: bool = False):
    rng = np.random.default_rng(seed)
    logp = [-rng.uniform(0.1, 3.0, n) for n in LENGTHS]
    old = [lp + rng.normal(0, 0.3, len(lp)) for lp in logp]  # old != current: the mask reads the current
    ref = [lp + rng.normal(0, 0.3, len(lp)) for lp in logp]
    sampler = [lp + s + rng.normal(0, 0.02, len(lp)) for lp, s in zip(logp, SHIFTS)]
    ent = [rng.uniform(0.0, 2.0, n) for n in LENGTHS]
    if nan:  # one token of seq 4 unscorable: counted as 0 over 4 tokens, its mean is ~0.6
        sampler[4][1] = np.nan
    masks = None
    if masked:
        masks = [np.ones(n, bool) for n in LENGTHS]
        masks[1][[1, 3]] = False  # inserted (tool) tokens: a huge gap there must not count
        sampler[1][[1, 3]] = logp[1][[1, 3]] - 50.0  # would pull seq 1's mean below 0 if it counted
        masks[4][2] = False
    return logp, old, ref, sampler, ent, masks


@pytest.fixture(scope="module")
def trl_compute_loss():
    """TRL's ``GRPOTrainer._compute_loss`` on a stand-in for the trainer's state (one process, no
    accumulation, training mode) whose forward returns the given log-probs and entropies."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer

    def run(loss_type, obj, threshold, logp, old, ref, adv, sampler=None, ent=None, masks=None, is_ratio=None):
        width = max(LENGTHS)

        def padded(values, fill=0.0):
            out = torch.full((len(values), width), fill, dtype=torch.float64)
            for i, v in enumerate(values):
                out[i, : len(v)] = torch.as_tensor(v, dtype=torch.float64)
            return out

        lp = padded(logp).requires_grad_(True)
        entropies = padded(ent) if ent is not None else torch.zeros_like(lp)
        identity = SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x,
                                   reduce=lambda x, reduction="sum": x, num_processes=1, sync_gradients=True)
        args = SimpleNamespace(use_bias_correction_kl=obj.kl_bias_correction, delta=None, steps_per_generation=1,
                               vespo_k_pos=obj.vespo_k_pos, vespo_lambda_pos=obj.vespo_lambda_pos,
                               vespo_k_neg=obj.vespo_k_neg, vespo_lambda_neg=obj.vespo_lambda_neg)
        state = SimpleNamespace(
            args=args, loss_type=loss_type, beta=obj.beta, epsilon_low=obj.clip_eps_low,
            epsilon_high=1.0 + obj.clip_eps_high if loss_type == "cispo" else obj.clip_eps_high,
            importance_sampling_level=obj.importance_sampling_level, top_entropy_quantile=1.0,
            off_policy_mask_threshold=threshold, use_vllm=is_ratio is not None,
            vllm_importance_sampling_correction=is_ratio is not None,
            model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1, accelerator=identity,
            _entropy_bonus_enabled=obj.entropy_coef != 0, entropy_coef=obj.entropy_coef, use_adaptive_entropy=False,
            aux_loss_enabled=False, _metrics={"train": defaultdict(list)},
            get_off_policy_mask=GRPOTrainer.get_off_policy_mask, get_gamma_weights=GRPOTrainer.get_gamma_weights,
            _get_per_token_logps_and_entropies=lambda *a, **k: (lp, entropies, None),
        )
        mask_tokens = sum(int(np.sum(m)) for m in masks) if masks else sum(LENGTHS)
        inputs = {
            "prompt_ids": torch.zeros((len(logp), 1), dtype=torch.long),
            "prompt_mask": torch.ones((len(logp), 1), dtype=torch.long),
            "completion_ids": torch.zeros((len(logp), width), dtype=torch.long),
            "completion_mask": padded([np.ones(n) for n in LENGTHS]).long(),
            "advantages": torch.as_tensor(adv, dtype=torch.float64),
            "old_per_token_logps": padded(old),
            "ref_per_token_logps": padded(ref),
            "num_items_in_batch": torch.tensor(float(mask_tokens)),
        }
        if sampler is not None:
            inputs["sampling_per_token_logps"] = padded(sampler)
        if is_ratio is not None:  # what TRL's _generate_and_score_completions computed (trl_is_ratio)
            inputs["importance_sampling_ratio"] = padded(is_ratio, fill=1.0)  # padding: gap 0, ratio 1
        if masks is not None:
            inputs["tool_mask"] = padded([np.asarray(m, np.float64) for m in masks]).long()
        loss = GRPOTrainer._compute_loss(state, None, inputs)
        loss.backward()
        return float(loss.detach()), [lp.grad[i, :n].numpy().copy() for i, n in enumerate(LENGTHS)]

    return run


@pytest.mark.parametrize("variant", ["plain", "masked", "nan", "no_sampler"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_equals_trl_compute_loss(trl_compute_loss, name, variant):
    loss_type, base, threshold = CASES[name]
    if variant == "nan":
        threshold = 0.7 if threshold < 1 else threshold  # between seq 4's TRL mean (~0.6) and 0.8
    obj = _with(base, threshold)
    logp, old, ref, sampler, ent, masks = _inputs(len(name), masked=variant == "masked", nan=variant == "nan")
    if variant == "no_sampler":  # TRL's fallback: the old log-probs stand in for the sampler's
        sampler = None
    ent_in = ent if obj.entropy_coef else None
    expected, expected_grads = trl_compute_loss(loss_type, obj, threshold, logp, old, ref, ADVANTAGES,
                                                sampler, ent_in, masks)
    ref_in = ref if obj.beta else None
    loss, _ = policy_loss(logp, ADVANTAGES, obj, old, ref_in, sampler, ent_in, masks)
    grads = policy_loss_grad(logp, ADVANTAGES, obj, old, ref_in, sampler, ent_in, masks)
    assert loss == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-12)


def trl_is_ratio(old, sampler, obj: Objective):
    """TRL's vLLM ``importance_sampling_ratio`` by hand (its _generate_and_score_completions): the
    gap ``old - sampler`` with an unscorable (NaN) token as 0, per token or summed per sequence,
    exponentiated, then truncated at the cap (TIS) or zeroed past it (MIS), repeated per token."""
    out = []
    for o, smp in zip(old, sampler):
        diff = np.nan_to_num(np.asarray(o) - np.asarray(smp), nan=0.0)
        ratio = np.exp(np.full(len(diff), diff.sum()) if obj.mismatch_level == "sequence" else diff)
        out.append(np.minimum(ratio, obj.mismatch_cap) if obj.mismatch_correction == "tis"
                   else np.where(ratio > obj.mismatch_cap, 0.0, ratio))
    return out


MISMATCH_CASES = {  # name -> (TRL loss_type, Objective)
    "grpo_tis": ("grpo", Objective(mismatch_correction="tis", mismatch_cap=1.2)),
    "dapo_mis": ("dapo", Objective(loss_aggregation="token_mean", mismatch_correction="mis", mismatch_cap=1.2)),
    "grpo_tis_sequence": ("grpo", Objective(mismatch_correction="tis", mismatch_level="sequence", mismatch_cap=1.5)),
    "vespo_tis": ("vespo", Objective(policy_loss="vespo", loss_aggregation="token_mean", mismatch_correction="tis",
                                     mismatch_cap=1.2)),
}


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("name", sorted(MISMATCH_CASES))
def test_the_mask_with_tis_or_mis_equals_trl_compute_loss_and_a_nan_sampler_token_gets_no_correction(
        trl_compute_loss, name, nan):
    """The mask and the sampler-mismatch correction together, as TRL with vLLM: an unscorable
    sampler token counts 0 in the mask's mean and weighs 1 in the correction (NaN there used to
    make the whole loss NaN, skipping every such step)."""
    loss_type, base = MISMATCH_CASES[name]
    obj = _with(base, 0.7)
    logp, old, ref, sampler, _, _ = _inputs(len(name), nan=nan)
    expected, expected_grads = trl_compute_loss(loss_type, obj, 0.7, logp, old, ref, ADVANTAGES, sampler,
                                                is_ratio=trl_is_ratio(old, sampler, obj))
    loss, _ = policy_loss(logp, ADVANTAGES, obj, old, None, sampler)
    grads = policy_loss_grad(logp, ADVANTAGES, obj, old, None, sampler)
    assert np.isfinite(expected) and loss == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-12)


def _dropped(obj, logp, sampler, masks=None):
    """Which sequences the mask drops: a policy gradient there without the mask, none with it
    (old = current, ratio 1: no token is clipped; A = 0 has no gradient either way)."""
    def grads(threshold):
        plain = Objective(off_policy_mask_threshold=threshold)
        return policy_loss_grad(logp, ADVANTAGES, plain, None, None, sampler, masks=masks)

    return [i for i, (on, off) in enumerate(zip(grads(obj.off_policy_mask_threshold), grads(None)))
            if np.any(off) and not np.any(on)]


def test_the_mask_drops_negative_advantages_past_the_threshold_only():
    logp, _, _, sampler, _, _ = _inputs(3)
    assert _dropped(_with(Objective(), 0.5), logp, sampler) == [1, 4]
    assert _dropped(_with(Objective(), 5.0), logp, sampler) == []
    # a NaN token counts as 0 in the mean (TRL): seq 4's ~0.6 passes 0.7, where NaN would drop it
    logp, _, _, sampler, _, _ = _inputs(3, nan=True)
    assert _dropped(_with(Objective(), 0.7), logp, sampler) == [1]
    # inserted tokens (TokenSequence.mask) are out of the mean: seq 1 is still dropped
    logp, _, _, sampler, _, masks = _inputs(3, masked=True)
    assert _dropped(_with(Objective(), 0.5), logp, sampler, masks) == [1, 4]
    _, metrics = policy_loss(logp, ADVANTAGES, _with(Objective(), 0.5), sampler_logprobs=sampler, masks=masks)
    assert metrics["off_policy_masked_fraction"] == pytest.approx(2 / 5)  # TRL logs nothing; polyrl the share
    assert "off_policy_masked_fraction" not in policy_loss(logp, ADVANTAGES, Objective(), sampler_logprobs=sampler)[1]


def test_the_kl_term_and_the_entropy_bonus_stay_and_a_dropped_sequence_still_counts():
    """With every sequence dropped what is left is the KL term and the entropy bonus, divided by
    the whole batch's counts."""
    logp, old, ref, sampler, ent, _ = _inputs(4)
    adv = -np.ones(len(LENGTHS))
    far = [s + 2.0 for s in sampler]
    obj = _with(Objective(loss_aggregation="token_mean", beta=0.1, entropy_coef=0.01), 0.5)
    loss, _ = policy_loss(logp, adv, obj, old, ref, far, ent)
    kl = sum(float(np.sum(np.exp(r - lp) - (r - lp) - 1.0)) for r, lp in zip(ref, logp))
    bonus = sum(float(np.sum(e)) for e in ent)
    assert loss == pytest.approx((0.1 * kl - 0.01 * bonus) / sum(LENGTHS), rel=1e-12)
    kl_only = Objective(loss_aggregation="token_mean", beta=0.1)
    np.testing.assert_allclose(np.concatenate(policy_loss_grad(logp, adv, obj, old, ref, far)),
                               np.concatenate(policy_loss_grad(logp, np.zeros(len(LENGTHS)), kl_only, old, ref)))


# --- the backends against the reference ------------------------------------------------------------

BACKEND_CASES = ["grpo", "dapo_kl", "gspo_kl", "cispo", "vespo", "high_threshold", *sorted(MISMATCH_CASES)]


#: (case, variant) pairs the backends run: a mismatch correction (TIS/MIS) needs the sampler's
#: log-probs, so those cases have no no_sampler variant
BACKEND_PAIRS = [(name, variant) for name in BACKEND_CASES for variant in ("plain", "masked", "nan", "no_sampler")
                 if not (variant == "no_sampler" and name in MISMATCH_CASES)]


def _backend_case(name, variant):
    """(objective, logp, old, ref or None without a KL term, sampler or None, masks) of one backend case:
    the NaN variant with a threshold that binds, the no_sampler one without the sampler's log-probs."""
    _, base, threshold = CASES[name] if name in CASES else (*MISMATCH_CASES[name], 0.5)
    obj = _with(base, 0.7 if variant == "nan" else threshold)
    logp, old, ref, sampler, _, masks = _inputs(len(name), masked=variant == "masked", nan=variant == "nan")
    return obj, logp, old, ref if obj.beta else None, None if variant == "no_sampler" else sampler, masks


@pytest.mark.parametrize(("name", "variant"), BACKEND_PAIRS)
def test_torch_loss_equals_reference(name, variant):
    torch = pytest.importorskip("torch")
    from polyrl_torch.training import objective_loss

    obj, logp, old, ref_in, sampler, masks = _backend_case(name, variant)
    expected, _ = policy_loss(logp, ADVANTAGES, obj, old, ref_in, sampler, masks=masks)
    grads = policy_loss_grad(logp, ADVANTAGES, obj, old, ref_in, sampler, masks=masks)

    def kept(values):  # what train_step hands objective_loss: the masked-in tokens (masked_in)
        if values is None:
            return None
        return [torch.tensor(v if masks is None else v[m]) for v, m in zip(values, masks or [None] * len(values))]

    full = [torch.tensor(x, requires_grad=True) for x in logp]
    lp_t = full if masks is None else [x[torch.as_tensor(m)] for x, m in zip(full, masks)]
    loss, stats = objective_loss(lp_t, torch.tensor(ADVANTAGES), obj, kept(old), kept(ref_in),
                                 sampler_logp=kept(sampler))
    loss.backward()
    _, metrics = policy_loss(logp, ADVANTAGES, obj, old, ref_in, sampler, masks=masks)
    assert float(stats["off_policy_masked_sum"]) / len(LENGTHS) == metrics["off_policy_masked_fraction"]
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-10, abs=1e-12)
    for g, t in zip(grads, full):
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "variant"), BACKEND_PAIRS)
def test_mlx_loss_equals_reference(name, variant):
    require_mlx()
    obj, logp, old, ref_in, sampler, masks = _backend_case(name, variant)
    expected, metrics = policy_loss(logp, ADVANTAGES, obj, old, ref_in, sampler, masks=masks)
    expected_grad = policy_loss_grad(logp, ADVANTAGES, obj, old, ref_in, sampler, masks=masks)
    if masks is not None:  # the flat layout holds the masked-in tokens only (polyrl_mlx.training.kept_tokens)
        cut = lambda xs: None if xs is None else [x[m] for x, m in zip(xs, masks)]  # noqa: E731
        logp, old, ref_in, sampler = cut(logp), cut(old), cut(ref_in), cut(sampler)
        expected_grad = cut(expected_grad)
    loss, _, grad, stats = mlx_loss([len(x) for x in logp], logp, ADVANTAGES, obj, old, ref_in, sampler)
    assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(grad, np.concatenate(expected_grad), rtol=1e-6, atol=1e-8)
    assert stats["off_policy_masked"].item() / len(LENGTHS) == metrics["off_policy_masked_fraction"]


# --- the [algorithm] key and from_trl --------------------------------------------------------------


def test_the_algorithm_key_reaches_the_objective():
    assert AlgorithmConfig.preset("grpo").objective(8).off_policy_mask_threshold is None
    for name in ("grpo", "dapo", "gspo", "cispo", "vespo"):
        obj = AlgorithmConfig.preset(name, off_policy_mask_threshold=0.5).objective(8)
        assert obj.off_policy_mask_threshold == 0.5


@pytest.mark.parametrize("value", [-0.5, -1e-9, float("nan"), float("inf"), "0.5", True])
def test_a_bad_threshold_is_one_config_error_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", off_policy_mask_threshold=value)
    assert err.value.field == "algorithm.off_policy_mask_threshold"
    assert ">= 0" in str(err.value)
    with pytest.raises(ConfigError) as err:
        Objective(off_policy_mask_threshold=value)
    assert err.value.field == "algorithm.off_policy_mask_threshold"


@pytest.mark.faults
def test_a_bad_threshold_in_toml_is_one_error_line_from_the_cli(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\n'
                    'name = "numeric_match"\n[algorithm]\noff_policy_mask_threshold = -1\n')
    core = Path(__file__).resolve().parents[1] / "core"
    # the caller's PYTHONPATH first: the polyrl this test process imports is the one checked
    path_entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(core)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(path_entries)}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True,
                            text=True, timeout=120, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "algorithm.off_policy_mask_threshold" in lines[0]
    assert "must be a finite number >= 0" in lines[0], lines[0]  # its range, not "unknown key"


def test_a_toml_threshold_loads_into_the_run_config():
    from polyrl.config import RunConfig

    data = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}],
            "algorithm": {"name": "dapo", "off_policy_mask_threshold": 0.5}}
    assert RunConfig.from_dict(data).algorithm.objective(8).off_policy_mask_threshold == 0.5


def test_from_trl_carries_trls_threshold_to_the_objective(monkeypatch):
    trl = pytest.importorskip("trl")
    from polyrl import api

    ours = api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, max_steps=1,
                                                  off_policy_mask_threshold=0.5))
    assert ours.settings["algorithm.off_policy_mask_threshold"] == 0.5
    assert "algorithm.off_policy_mask_threshold" not in api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True)).settings

    built = captured_trainer_config(monkeypatch)
    api.run(api.grpo, policy=api.Agent("x"), prompts=["hi"] * 8, grpo_config=ours, progress=False,
            rewards=[lambda completions, **kwargs: [0.0] * len(completions)])
    algorithm = built["config"].algorithm
    assert algorithm.off_policy_mask_threshold == 0.5
    assert algorithm.objective(8).off_policy_mask_threshold == 0.5
