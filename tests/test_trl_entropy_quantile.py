"""TRL's ``top_entropy_quantile < 1``: which tokens its threshold ranks. TRL 1.16's
``get_high_entropy_mask`` takes the quantile over every completion token of the micro-batch the
loss is computed on (``per_device_train_batch_size`` completions, gathered across processes),
an unscorable completion's tokens too (it stays in TRL's batch at advantage 0); polyrl ranked its
whole batch at once and without the unscored rows, so its policy term trained on other tokens,
with no word."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.errors import ConfigError

trl = pytest.importorskip("trl")


def _trl_config(tmp_path, **values):
    return trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=2,
                          num_generations=2, max_steps=1, report_to="none", **values)


def _run_config(model, config):
    from polyrl import api

    return api.run_config(api.grpo, policy=api.Agent(model), prompts=["1 + 1 ="], grpo_config=config)[0]


def test_the_threshold_ranks_trls_micro_batch(tiny_model_dir, tmp_path):
    """With gradient_accumulation_steps = 2 TRL ranks each micro-batch of 2 completions on its own;
    polyrl's threshold is over the completions of one of its micro-batches: TRL's size now."""
    ranked = _run_config(tiny_model_dir, _trl_config(tmp_path, top_entropy_quantile=0.2, gradient_accumulation_steps=2))
    assert ranked.algorithm.top_entropy_quantile == 0.2 and ranked.optimizer.micro_batch_size == 2
    every = _run_config(tiny_model_dir, _trl_config(tmp_path, gradient_accumulation_steps=2))
    assert every.optimizer.micro_batch_size is None  # every token: the loss is the same at any micro-batch


def test_unscored_completions_stay_in_the_ranked_tokens_at_advantage_zero():
    algo = AlgorithmConfig.preset("grpo", top_entropy_quantile=0.2)
    scores = np.array([1.0, 0.0, np.nan, 2.0])
    keep, advantages, _ = algo.loss_selection(scores, scores, np.ones(4, dtype=bool), 2, None, [1.0])
    assert keep.tolist() == [True, True, True, True] and advantages[2] == 0.0
    cut = np.array([True, True, True, False])  # a truncated one under mask_truncated_completions: out, as TRL's mask
    assert algo.loss_selection(scores, scores, cut, 2, None, [1.0])[0].tolist() == [True, True, True, False]
    plain = AlgorithmConfig.preset("grpo")  # every token: an unscored row adds nothing to the loss
    assert plain.loss_selection(scores, scores, np.ones(4, dtype=bool), 2, None, [1.0])[0].tolist() == \
        [True, True, False, True]
    none = np.full(4, np.nan)  # nothing scored: TRL's loss is 0 whatever it ranks (an idle step here)
    assert not algo.loss_selection(none, none, np.ones(4, dtype=bool), 2, None, [1.0])[0].any()


def test_the_threshold_is_trls_on_the_same_entropies():
    """polyrl's selection (torch backend's ``objective_loss``) against TRL's own
    ``get_high_entropy_mask`` on one micro-batch's entropies, padding masked out."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("polyrl_torch")
    from types import SimpleNamespace

    from trl.trainer.grpo_trainer import GRPOTrainer

    from polyrl_torch.training import objective_loss

    gen = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7, 1]
    entropies = torch.rand(4, 7, generator=gen, dtype=torch.float64) * 3
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths])
    stub = SimpleNamespace(accelerator=SimpleNamespace(pad_across_processes=lambda x, **kw: x, gather=lambda x: x))
    theirs = GRPOTrainer.get_high_entropy_mask(stub, entropies.float(), mask, 1 - 0.2)
    objective = AlgorithmConfig.preset("grpo", top_entropy_quantile=0.2).objective(7)
    logp = [torch.zeros(n, dtype=torch.float64, requires_grad=True) for n in lengths]
    ent = [entropies[i, :n] for i, n in enumerate(lengths)]
    _, stats = objective_loss(logp, torch.ones(4, dtype=torch.float64), objective, None, None,
                              entropy=ent)
    assert int(stats["entropy_selected_sum"]) == int(theirs.sum())


def test_ranking_across_processes_is_refused(tmp_path, monkeypatch):
    """TRL gathers every process's micro-batch entropies before taking the quantile; polyrl ranks
    each rank's own: refused on several processes (``from_trl`` runs this check), naming the field."""
    from polyrl import trl_config

    ranked, every = _trl_config(tmp_path, top_entropy_quantile=0.2), _trl_config(tmp_path)
    trl_config._refuse_entropy_ranking_across_processes(ranked)  # one process: the same tokens
    monkeypatch.setattr(trl_config, "processes", lambda config: 2)
    with pytest.raises(ConfigError, match="ranks the token entropies of every process's micro-batch together") as err:
        trl_config._refuse_entropy_ranking_across_processes(ranked)
    assert err.value.field == "grpo_config.top_entropy_quantile"
    trl_config._refuse_entropy_ranking_across_processes(every)  # every token: nothing ranked
