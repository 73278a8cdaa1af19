"""The eval loss with an entropy bonus (``algorithm.entropy_coef`` > 0): ``eval/policy_loss`` (the
loss without the bonus, TRL's ``policy_loss``) on every backend, and where the train backend gives
token entropies (``hookspecs.entropies``: torch, MLX) ``eval/entropy`` and ``eval/loss`` with the
bonus, as a training step computes them. Once: no eval loss at all in such runs."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl import eval_loss
from polyrl.algorithms import reference
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence

CHATS = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Name a colour."}]]


def _usable(name: str) -> None:
    reg = get_registry()
    status = reg.status(name) if name in reg.names() else None
    if status is None or not status.available:
        pytest.skip(f"backend {name!r} not usable here")


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_the_entropies_hook_gives_the_models_own_entropy(tiny_model_dir, backend):
    """Each completion position's entropy at the temperature, against transformers' own forward
    of the same rows."""
    _usable(backend)
    import torch
    from transformers import AutoModelForCausalLM

    engine = Engine(get_registry(), backend, EngineConfig(model=tiny_model_dir, role="train", threads=1,
                                                          optimizer=OptimizerConfig(lr=1e-2)))
    seqs = [TokenSequence.of(c) for c in engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=0))]
    got = engine.entropies(seqs, 0.7)
    assert got is not None and [len(e) for e in got] == [len(s.completion_ids) for s in seqs]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    for seq, ent in zip(seqs, got):
        ids = torch.tensor(np.concatenate([seq.prompt_ids, seq.completion_ids]))[None]
        with torch.no_grad():
            logits = model(ids).logits[0, len(seq.prompt_ids) - 1:-1].double() / 0.7
        logp = torch.log_softmax(logits, -1)
        want = -(logp.exp() * logp).sum(-1).numpy()
        np.testing.assert_allclose(ent, want, rtol=1e-3, atol=1e-4)


def _inputs():
    rng = np.random.default_rng(0)
    logprobs = [-rng.uniform(0.1, 2.0, n) for n in (3, 5, 2, 4)]
    entropies = [rng.uniform(0.5, 3.0, len(lp)) for lp in logprobs]
    return logprobs, [0.5, -0.5, 1.0, -1.0], entropies


def test_eval_metrics_with_a_bonus_are_the_training_steps_definitions():
    """Two eval batches of two: ``eval/loss`` each batch's loss with the bonus (weighted by its
    size), ``eval/policy_loss`` each one's without it and ``eval/entropy`` each one's token mean
    (averaged as equals, as TRL's per-batch metrics)."""
    algo = AlgorithmConfig.preset("grpo", entropy_coef=0.1, loss_aggregation="token_mean")
    logprobs, advantages, entropies = _inputs()
    batch_of, counts = [0, 0, 1, 1], [(2, 8), (2, 6)]
    got = eval_loss.metrics(algo, 8, logprobs, advantages, None, [None] * 4, batch_of, [2, 2], counts, entropies)
    objective = algo.objective(8)
    full, plain, ents = [], [], []
    for rows, (n, tokens) in zip(([0, 1], [2, 3]), counts):
        args = ([logprobs[i] for i in rows], [advantages[i] for i in rows])
        loss, parts = reference.policy_loss(*args, objective, entropies=[entropies[i] for i in rows],
                                            num_sequences=n, num_tokens=tokens)
        full.append(loss)
        ents.append(parts["entropy"])
        plain.append(reference.policy_loss(*args, AlgorithmConfig.preset("grpo", loss_aggregation="token_mean")
                                           .objective(8), num_sequences=n, num_tokens=tokens)[0])
    assert got["eval/loss"] == pytest.approx(np.mean(full), rel=1e-12)
    assert got["eval/policy_loss"] == pytest.approx(np.mean(plain), rel=1e-12)
    assert got["eval/entropy"] == pytest.approx(np.mean(ents), rel=1e-12)
    assert got["eval/loss"] != pytest.approx(got["eval/policy_loss"])  # the bonus is in
    # a backend without entropies: the policy loss alone, no loss missing its bonus
    alone = eval_loss.metrics(algo, 8, logprobs, advantages, None, [None] * 4, batch_of, [2, 2], counts, None)
    assert alone["eval/policy_loss"] == got["eval/policy_loss"]
    assert "eval/loss" not in alone and "eval/entropy" not in alone
    # no bonus: as before, no policy_loss nor entropy
    bare = eval_loss.metrics(AlgorithmConfig.preset("grpo", loss_aggregation="token_mean"), 8, logprobs,
                             advantages, None, [None] * 4, batch_of, [2, 2], counts)
    assert bare["eval/loss"] == pytest.approx(np.mean(plain)) and "eval/policy_loss" not in bare


def test_eval_metrics_with_a_bonus_and_no_kept_group_are_each_nan():
    """No eval batch kept a group (every group flat under dynamic sampling): each value the bonus
    adds is NaN, as eval/loss is. Before: eval/loss alone with entropies (no eval/policy_loss nor
    eval/entropy that evaluation), and eval/policy_loss alone without them."""
    algo = AlgorithmConfig.preset("grpo", entropy_coef=0.1, loss_aggregation="token_mean")
    logprobs, advantages, entropies = _inputs()
    none_kept = ([0, 0, 1, 1], [2, 2], [(0, 0), (0, 0)])
    got = eval_loss.metrics(algo, 8, logprobs, advantages, None, [None] * 4, *none_kept, entropies)
    clips = sorted(eval_loss.ratio_one_metrics(algo.objective(8), True))  # grpo's, NaN too (the next test)
    assert sorted(got) == sorted(["eval/entropy", "eval/loss", "eval/policy_loss", *clips])
    assert all(np.isnan(v) for v in got.values())
    alone = eval_loss.metrics(algo, 8, logprobs, advantages, None, [None] * 4, *none_kept, None)
    assert sorted(alone) == sorted(["eval/policy_loss", *clips]) and np.isnan(alone["eval/policy_loss"])
    bare = eval_loss.metrics(AlgorithmConfig.preset("grpo", loss_aggregation="token_mean"), 8, logprobs, advantages,
                             None, [None] * 4, *none_kept)
    assert sorted(bare) == sorted(["eval/loss", *clips]) and np.isnan(bare["eval/loss"])


def test_eval_metrics_with_no_kept_group_hold_every_key_a_kept_one_holds():
    """No eval batch kept a group: eval/kl (a KL term in the loss) and the clip ratios (grpo's ppo clipping) are NaN
    beside eval/loss, as each key an evaluation with a kept group logs. Before: eval/kl and the
    clip ratios were absent that evaluation (a hole in their series, and metric_for_best_model
    "kl" stopped the run: "the evaluation logs no 'eval_kl'")."""
    algo = AlgorithmConfig.preset("grpo", beta=0.04, loss_aggregation="token_mean")  # ppo clipping
    logprobs, advantages, _ = _inputs()
    kept = eval_loss.metrics(algo, 8, logprobs, advantages, logprobs, [None] * 4, [0, 0, 1, 1], [2, 2],
                             [(2, 8), (2, 6)])
    none_kept = eval_loss.metrics(algo, 8, [], [], [], [], [], [2, 2], [(0, 0), (0, 0)])
    assert "eval/kl" in kept and "eval/clip_ratio/region_mean" in kept
    assert sorted(none_kept) == sorted(kept) and all(np.isnan(v) for v in none_kept.values())
