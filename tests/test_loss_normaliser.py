"""The loss divides by what TRL's GRPOTrainer divides by, not by the rows polyrl trains on.

TRL keeps a completion cut at the length limit (``mask_truncated_completions``: its loss mask
zeroed) and an unscorable one (every reward None: advantage 0) in its batch, so ``grpo``/``sapo``
(mean over B rows), ``dr_grpo`` (B * max_completion_length) and ``luspo`` (mean over B) count them
as sequences, and the token means (``dapo``) count the unscorable rows' tokens. polyrl's trainer
leaves both out of the ``TrainBatch``; it now tells the backend the counts TRL uses
(``TrainBatch.normaliser_sequences``/``normaliser_tokens``), where it used to divide by the kept
rows and so scale the step by B / B_kept (2x with half the completions cut).
"""

from __future__ import annotations

import json

import attrs
import numpy as np
import pytest
import torch

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.config import RunConfig
from polyrl.trainer import Trainer
from polyrl.types import TokenSequence, TrainBatch

# id -> (polyrl objective, TRL loss_type)
OBJECTIVES = {
    "grpo": (Objective(), "grpo"),
    "sapo": (Objective(policy_loss="sapo"), "sapo"),
    "dr_grpo": (Objective(loss_aggregation="seq_mean_token_sum_norm", max_completion_length=20), "dr_grpo"),
    "luspo": (Objective(loss_aggregation="seq_mean_token_sum"), "luspo"),
    "dapo": (Objective(loss_aggregation="token_mean", clip_eps_high=0.28), "dapo"),
}
# four rows TRL keeps: 0 and 2 trained, 1 cut at the length limit, 3 unscorable (advantage 0)
LENGTHS, TRUNCATED, UNSCORABLE = [5, 8, 12, 20], [False, True, False, False], [False, False, False, True]
KEPT = [0, 2]


def trl_loss(logp: list[torch.Tensor], old: list[np.ndarray], adv: np.ndarray, objective: Objective,
             loss_type: str) -> torch.Tensor:
    """TRL's ``_compute_loss`` arithmetic (one process, one micro-batch, token-level ratio) on the
    padded batch of every row, truncated ones masked out, unscorable ones at advantage 0."""
    b, t = len(logp), max(len(x) for x in logp)
    lp = torch.zeros(b, t, dtype=torch.float64)
    old_t = torch.zeros(b, t, dtype=torch.float64)
    mask = torch.zeros(b, t, dtype=torch.float64)
    for i, x in enumerate(logp):
        lp[i, :len(x)] = x
        old_t[i, :len(x)] = torch.as_tensor(old[i])
        mask[i, :len(x)] = 0.0 if TRUNCATED[i] else 1.0
    a = torch.as_tensor(np.where(UNSCORABLE, 0.0, adv), dtype=torch.float64)[:, None]
    coef_1 = torch.exp(lp - old_t)
    if loss_type == "sapo":
        tau = torch.where(a > 0, torch.tensor(objective.sapo_temperature_pos, dtype=torch.float64),
                          torch.tensor(objective.sapo_temperature_neg, dtype=torch.float64))
        per_tok = -torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau * a
    else:
        coef_2 = torch.clamp(coef_1, 1 - objective.clip_eps_low, 1 + objective.clip_eps_high)
        per_tok = -torch.min(coef_1 * a, coef_2 * a)
    if loss_type in ("grpo", "sapo"):
        return ((per_tok * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dr_grpo":
        return (per_tok * mask).sum() / (b * objective.max_completion_length)
    if loss_type == "luspo":
        return (per_tok * mask).sum(-1).mean()
    return (per_tok * mask).sum() / mask.sum().clamp(min=1.0)  # dapo


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    logp = [-rng.random(n) for n in LENGTHS]
    old = [x + rng.normal(0, 0.1, len(x)) for x in logp]
    adv = np.array([1.0, -0.5, -1.0, 0.7])
    return logp, old, adv


def _trl_counts() -> tuple[int, int]:
    """What TRL divides by: every row; every token but the truncated rows'."""
    return len(LENGTHS), sum(n for n, cut in zip(LENGTHS, TRUNCATED) if not cut)


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_reference_with_the_counts_is_trls_loss_and_gradient(name):
    objective, loss_type = OBJECTIVES[name]
    logp, old, adv = _inputs()
    leaves = [torch.tensor(x, requires_grad=True) for x in logp]
    expected = trl_loss(leaves, old, adv, objective, loss_type)
    expected.backward()
    n_seq, n_tok = _trl_counts()
    kept = ([logp[i] for i in KEPT], adv[KEPT], objective, [old[i] for i in KEPT])
    loss, _ = policy_loss(*kept, num_sequences=n_seq, num_tokens=n_tok)
    grads = policy_loss_grad(*kept, num_sequences=n_seq, num_tokens=n_tok)
    assert loss == pytest.approx(float(expected.detach()), rel=1e-12, abs=1e-15)
    for i, g in zip(KEPT, grads):
        np.testing.assert_allclose(g, leaves[i].grad.numpy(), rtol=1e-10, atol=1e-15)
    for i in set(range(len(LENGTHS))) - set(KEPT):  # TRL trains nothing on them either (beta = 0)
        assert not leaves[i].grad.abs().any()
    # the kept rows' own counts are the old, larger step
    own = policy_loss_grad(*kept)
    assert abs(own[0][0]) > abs(grads[0][0]) * 1.3


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_torch_objective_loss_with_the_counts_is_trls(name):
    from polyrl_torch.training import objective_loss

    objective, loss_type = OBJECTIVES[name]
    logp, old, adv = _inputs(1)
    everyone = [torch.tensor(x, requires_grad=True) for x in logp]
    expected = trl_loss(everyone, old, adv, objective, loss_type)
    expected.backward()
    n_seq, n_tok = _trl_counts()
    kept = [torch.tensor(logp[i], requires_grad=True) for i in KEPT]
    got, _ = objective_loss(kept, torch.as_tensor(adv[KEPT]), objective, [torch.as_tensor(old[i]) for i in KEPT],
                            num_sequences=n_seq, num_tokens=n_tok)
    got.backward()
    assert float(got.detach()) == pytest.approx(float(expected.detach()), rel=1e-10, abs=1e-15)
    for i, leaf in zip(KEPT, kept):
        torch.testing.assert_close(leaf.grad, everyone[i].grad, rtol=1e-9, atol=1e-15)


def test_train_batch_counts_default_to_its_own_and_refuse_fewer_sequences_or_no_tokens():
    seqs = [TokenSequence(np.array([1, 2]), np.array([3, 4, 5])), TokenSequence(np.array([1]), np.array([6]))]
    batch = TrainBatch(seqs, np.array([1.0, -1.0]))
    assert batch.loss_counts == (2, 4)
    assert attrs.evolve(batch, normaliser_sequences=5, normaliser_tokens=9).loss_counts == (5, 9)
    with pytest.raises(ValueError, match="normaliser_sequences"):
        attrs.evolve(batch, normaliser_sequences=1)
    # a mini-batch's share of its step's tokens: fractional, and may be fewer than it holds
    assert attrs.evolve(batch, normaliser_tokens=2.5).loss_counts == (2, 2.5)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="normaliser_tokens"):
            attrs.evolve(batch, normaliser_tokens=bad)


def _backend_engine(name: str, model_dir: str, lr: float = 1e-2):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig

    reg = get_registry()
    try:
        status = reg.status(name)
    except Exception as exc:  # noqa: BLE001 - the plugin is not installed here
        pytest.skip(f"backend {name!r} not installed: {exc}")
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")
    return Engine(reg, name, EngineConfig(model=model_dir, role="train", threads=1, max_length=256,
                                          optimizer=OptimizerConfig(lr=lr)))


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "luspo", "dapo"])
def test_backend_step_with_truncated_and_unscorable_rows_is_trls(backend, name, tiny_model_dir):
    """A real model's step: two trained rows, the trainer's counts saying one truncated and one
    unscorable row were left out. The loss is TRL's on all four rows (the truncated one masked,
    the unscorable one at advantage 0) and the gradient is the kept rows' one scaled by
    kept / counted (its norm, from the same weights)."""
    from polyrl.types import SamplingParams

    objective, loss_type = OBJECTIVES[name]
    engine = _backend_engine(backend, tiny_model_dir)
    out = engine.generate([[{"role": "user", "content": "Count: 1 2 3"}]],
                          SamplingParams(max_new_tokens=6, n=4, seed=3))
    seqs = [TokenSequence.of(c) for c in out]
    current = [np.asarray(x, np.float64) for x in engine.logprobs(seqs, 1.0)]
    rng = np.random.default_rng(2)
    old = [x + rng.normal(0, 0.1, len(x)) for x in current]
    adv = np.array([1.0, -0.5, -1.0, 0.7])
    global LENGTHS  # the rows' lengths are the model's: TRL's arithmetic pads by them
    saved, LENGTHS = LENGTHS, [len(s.completion_ids) for s in seqs]
    try:
        expected = float(trl_loss([torch.as_tensor(x) for x in current], old, adv, objective, loss_type))
        n_seq, n_tok = _trl_counts()
    finally:
        LENGTHS = saved
    kept = TrainBatch([seqs[i] for i in KEPT], adv[KEPT], [old[i].astype(np.float32) for i in KEPT])
    counted = attrs.evolve(kept, normaliser_sequences=n_seq, normaliser_tokens=n_tok)
    reference, _ = policy_loss([current[i] for i in KEPT], adv[KEPT], objective, [old[i] for i in KEPT],
                               num_sequences=n_seq, num_tokens=n_tok)
    assert reference == pytest.approx(expected, rel=1e-9)
    own = _backend_engine(backend, tiny_model_dir).train_step(kept, objective)
    got = engine.train_step(counted, objective)
    assert not got.skipped and not own.skipped
    assert got.loss == pytest.approx(expected, rel=2e-3, abs=1e-6)
    factor = kept.num_tokens / n_tok if objective.loss_aggregation == "token_mean" else len(KEPT) / n_seq
    assert got.grad_norm == pytest.approx(own.grad_norm * factor, rel=1e-3)
    assert got.tokens == own.tokens == kept.num_tokens  # metrics: the tokens trained on


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_backend_step_divides_a_token_mean_by_a_fractional_share(backend, tiny_model_dir):
    """A mini-batch's token mean divides by its step's tokens / the updates (TRL's "dapo"): a
    fractional count below the batch's own. The loss is the reference's with that divisor and the
    gradient the batch's own scaled by own tokens / share; an ``int()`` of it was off by the
    fraction."""
    from polyrl.types import SamplingParams

    objective, _ = OBJECTIVES["dapo"]
    engine = _backend_engine(backend, tiny_model_dir)
    out = engine.generate([[{"role": "user", "content": "Count: 1 2 3"}]],
                          SamplingParams(max_new_tokens=6, n=2, seed=3))
    seqs = [TokenSequence.of(c) for c in out]
    current = [np.asarray(x, np.float64) for x in engine.logprobs(seqs, 1.0)]
    old = [x + np.random.default_rng(2).normal(0, 0.1, len(x)) for x in current]
    own = TrainBatch(seqs, np.array([1.0, -0.5]), [x.astype(np.float32) for x in old])
    share = own.num_tokens / 2 + 0.25  # never a whole number
    expected, _ = policy_loss(current, own.advantages, objective, old, num_tokens=share)
    plain = _backend_engine(backend, tiny_model_dir).train_step(own, objective)
    got = engine.train_step(attrs.evolve(own, normaliser_tokens=share), objective)
    assert not got.skipped and not plain.skipped
    assert got.loss == pytest.approx(expected, rel=2e-3, abs=1e-6)
    assert got.grad_norm == pytest.approx(plain.grad_norm * own.num_tokens / share, rel=1e-3)


REWARD = """
def sevens_or_none(prompts, completions, **kwargs):
    # a completion opening with t5 is unscorable (None); the others score their sevens
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [None if t.startswith("t5 ") else t.split().count("t7") / 8 for t in texts]
"""


@pytest.mark.parametrize("algorithm", [{"name": "grpo", "mask_truncated_completions": True},
                                       {"name": "grpo", "dynamic_sampling": True, "mask_truncated_completions": True,
                                        "loss_aggregation": "token_mean"},
                                       {"name": "grpo", "beta": 0.04, "mask_truncated_completions": True}])
def test_trainer_counts_truncated_and_unscorable_rows_but_not_dropped_groups(toy, tmp_path, algorithm):
    (tmp_path / "reward.py").write_text(REWARD)
    data = {
        "model": {"path": "toy-model"},
        "backends": {"train": "toy"},
        "generation": {"group_size": 4, "max_new_tokens": 8},
        "algorithm": algorithm,
        "optimizer": {"lr": 1.0},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:sevens_or_none"}],
        "train": {"steps": 6, "prompts_per_step": 4, "output_dir": str(tmp_path / "run")},
    }
    config = RunConfig.from_dict(data)
    trainer = Trainer(config)
    seen: list[tuple] = []
    score, step = trainer._score, trainer.train_engine.train_step

    def record_score(rows, completions):
        scored = score(rows, completions)
        seen.append((completions, np.asarray(scored.total, dtype=np.float64)))
        return scored

    def record_step(batch, objective):
        seen[-1] = (*seen[-1][:2], batch)
        return step(batch, objective)

    trainer._score, trainer.train_engine.train_step = record_score, record_step
    # a step with nothing to train: its optimizer step on a zero gradient is not this test's
    # (tests/test_skipped_step_updates.py); at the toy's lr 1.0 its momentum would change the run
    trainer._idle_updates = lambda *args, **kwargs: {}  # type: ignore[method-assign]
    trainer.run(progress=False)
    algo, trained, kl_trained = config.algorithm, 0, 0
    for completions, rewards, *batch in seen:
        if not batch:
            continue
        batch = batch[0]
        counted = algo.keep_mask(rewards, 4)  # dynamic sampling's dropped groups do not count
        cut = algo.untruncated_mask([c.finish_reason for c in completions]) == False  # noqa: E712
        # with a KL term in the loss an unscorable row trains at advantage 0, as TRL's: the KL pulls it
        unscorable = ~np.isfinite(rewards) & (algo.beta > 0)
        trains = counted & ~cut & (np.isfinite(rewards) | unscorable)
        assert len(batch.sequences) == int(trains.sum())
        assert all(a == 0 for a, u in zip(batch.advantages, unscorable[trains]) if u)
        kl_trained += int(unscorable[trains].any())
        assert batch.normaliser_sequences == int(counted.sum())
        assert batch.normaliser_tokens == sum(len(c.completion_ids) for c, k, x in zip(completions, counted, cut)
                                              if k and not x)
        trained += int(batch.normaliser_sequences > len(batch.sequences))
    assert trained, "no step had a truncated or unscorable row to count"
    assert bool(kl_trained) == (algo.beta > 0), "an unscorable row trains exactly when the KL term is in the loss"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 6
