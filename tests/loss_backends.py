"""The torch and MLX training losses checked against the numpy reference (``polyrl.algorithms.reference``):
one check for every objective the loss tests build (clipped, soft, sequence-level)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad

MISMATCH_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_corrected")
EXTREME_KEYS = ("clip_low_min", "clip_high_max")  # one completion's extreme clipped share



def random_logprobs(rng: np.random.Generator, lengths: Sequence[int]) -> tuple[list[np.ndarray], ...]:
    """Made-up (current, old, ref, sampler) log-probs of sequences of ``lengths`` tokens: old and
    ref off the current ones, the sampler off the old ones, by noise of 0.3 nats."""
    logp = [-rng.uniform(0.1, 3.0, n) for n in lengths]
    old = [lp + rng.normal(0, 0.3, len(lp)) for lp in logp]
    ref = [lp + rng.normal(0, 0.3, len(lp)) for lp in logp]
    sampler = [o + rng.normal(0, 0.3, len(o)) for o in old]
    return logp, old, ref, sampler


def torch_equals_reference(logp: Sequence[np.ndarray], adv: np.ndarray, obj: Objective, old: Sequence[np.ndarray],
                           ref: Sequence[np.ndarray], sampler: Sequence[np.ndarray]) -> None:
    """``polyrl_torch.training.objective_loss``: the reference's loss, gradient and metrics, with the
    old log-probs given and without them (old == current)."""
    torch = pytest.importorskip("torch")
    from polyrl_torch.training import objective_loss

    for old_in in (old, None):
        expected, metrics = policy_loss(logp, adv, obj, old_in, ref, sampler)
        grads = policy_loss_grad(logp, adv, obj, old_in, ref, sampler)
        lp_t = [torch.tensor(x, requires_grad=True) for x in logp]
        loss, stats = objective_loss(lp_t, torch.tensor(adv), obj,
                                     None if old_in is None else [torch.tensor(x) for x in old_in],
                                     [torch.tensor(x) for x in ref], sampler_logp=[torch.tensor(x) for x in sampler])
        loss.backward()
        assert float(loss.detach()) == pytest.approx(expected, rel=1e-10, abs=1e-12)
        for g, t in zip(grads, lp_t):
            np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-9, atol=1e-12)
        tokens = int(stats["tokens"])
        assert float(stats["clip_sum"]) / tokens == pytest.approx(metrics["clip_fraction"])
        for key in MISMATCH_KEYS:
            assert float(stats[f"{key}_sum"]) / tokens == pytest.approx(metrics[key], rel=1e-10, abs=1e-12), key
        for key in EXTREME_KEYS:
            assert float(stats[key]) == pytest.approx(metrics[key]), key


def mlx_flat_inputs(lengths: Sequence[int], adv: Sequence[float], obj: Objective,
                    old: Sequence[np.ndarray], ref: Sequence[np.ndarray] | None,
                    sampler: Sequence[np.ndarray] | None) -> tuple[Any, ...]:
    """What ``polyrl_mlx.training.objective_loss`` takes besides the log-probs, flat and float64:
    token weights, per-token advantages, old / ref / sampler log-probs (None stays None) and each
    token's sequence index. Call it inside the test's ``mx.stream``."""
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import token_weights

    f64 = mx.float64
    w = mx.array(token_weights(lengths, obj, len(lengths), sum(lengths)), dtype=f64)
    a = mx.array(np.repeat(adv, lengths), dtype=f64)
    o, r, s = (None if x is None else mx.array(np.concatenate(x), dtype=f64) for x in (old, ref, sampler))
    segments = mx.array(np.repeat(np.arange(len(lengths)), lengths))
    return w, a, o, r, s, segments


def require_mlx() -> None:
    """Skips the test where the MLX backend is not usable."""
    from polyrl.registry import get_registry

    status = get_registry().status("mlx")
    if not status.available:
        pytest.skip(f"mlx not usable here: {status.reason}")


def mlx_loss(lengths: Sequence[int], logp: Sequence[np.ndarray], adv: Sequence[float], obj: Objective,
             old: Sequence[np.ndarray], ref: Sequence[np.ndarray] | None,
             sampler: Sequence[np.ndarray] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``polyrl_mlx.training.objective_loss`` on the CPU in float64: (loss, clip sum, the flat
    gradient wrt the log-probs, its stats), as numpy."""
    from polyrl_mlx._mx import mx
    from polyrl_mlx.training import objective_loss

    with mx.stream(mx.cpu):
        w, a, o, r, s, segments = mlx_flat_inputs(lengths, adv, obj, old, ref, sampler)
        stats: dict = {}

        def f(x):
            return objective_loss(x, a, w, obj, o, r, sampler_logp=s, segments=segments, stats=stats)

        (loss, _, clip_sum), grad = mx.value_and_grad(f)(mx.array(np.concatenate(logp), dtype=mx.float64))
        return np.array(loss), np.array(clip_sum), np.array(grad), {k: np.array(v) for k, v in stats.items()}


def mlx_equals_reference(lengths: Sequence[int], logp: Sequence[np.ndarray], adv: np.ndarray, obj: Objective,
                         old: Sequence[np.ndarray], ref: Sequence[np.ndarray], sampler: Sequence[np.ndarray]) -> None:
    """``polyrl_mlx.training.objective_loss`` on the CPU in float64: the reference's loss, gradient
    and metrics (skipped where MLX is not usable)."""
    require_mlx()
    expected, metrics = policy_loss(logp, adv, obj, old, ref, sampler)
    expected_grad = np.concatenate(policy_loss_grad(logp, adv, obj, old, ref, sampler))
    loss, clip_sum, grad, stats = mlx_loss(lengths, logp, adv, obj, old, ref, sampler)
    # MLX's CPU exp is float32-accurate even on float64 inputs; the loss sums O(1) terms that
    # can nearly cancel, so its tolerance is absolute at that scale
    assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-6, atol=1e-8)
    tokens = sum(lengths)
    assert clip_sum.item() / tokens == pytest.approx(metrics["clip_fraction"], abs=1e-12)
    for key in MISMATCH_KEYS:
        assert stats[key].item() / tokens == pytest.approx(metrics[key], rel=1e-6, abs=1e-9), key
    for key in EXTREME_KEYS:
        assert stats[key].item() == pytest.approx(metrics[key]), key
