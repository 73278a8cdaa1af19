"""PPO mini-batches (``algorithm.minibatches``): a step's samples split into that many optimizer
updates per pass, in TRL's order, with the old log-probs of the weights before the first update,
each update's loss divided by its own rows (token means by the step's tokens / minibatches, as
TRL's "dapo"), the lr schedule counting every update, and a resumed
run splitting identically. Runs on the numpy toy backend (one torch run at the end)."""

from __future__ import annotations

import json
from collections import Counter

import attrs
import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.trainer import Trainer

from test_faults import toy_config


class Calls:
    """Backend "capturing": the toy backend, recording each train_step's batch, the log-probs of
    its rows under the weights it is called with, and what it reports."""

    def __init__(self) -> None:
        from polyrl_toy import ToyPlugin

        self.batches: list = []
        self.current: list[list[np.ndarray]] = []
        self.logits: list[np.ndarray] = []  # the weights each train_step is called with
        self.reported: list = []
        calls = self

        class Capturing(ToyPlugin):
            @hookimpl
            def train_step(self, engine, batch, objective):
                logp = engine.logp(batch.temperature)
                calls.logits.append(engine.logits.copy())
                calls.current.append([logp[s.completion_ids].astype(np.float32) for s in batch.sequences])
                calls.batches.append(batch)
                out = super().train_step(engine, batch, objective)
                calls.reported.append(out)
                return out

        self.plugin = Capturing("capturing")


def _rows(batch) -> Counter:
    """The batch's samples as a multiset (prompt and completion ids, advantage)."""
    return Counter((tuple(s.prompt_ids), tuple(s.completion_ids), round(float(a), 5))
                   for s, a in zip(batch.sequences, batch.advantages))


def _run(tmp_path, steps=1, rewards=None, schedule="constant", **algorithm) -> tuple[Calls, dict]:
    calls = Calls()
    config = toy_config(tmp_path, backend="capturing", steps=steps, rewards=rewards)
    config = attrs.evolve(config, algorithm=attrs.evolve(config.algorithm, **algorithm),
                          optimizer=attrs.evolve(config.optimizer, schedule=schedule))
    summary = Trainer(config, extra_plugins=(calls.plugin,)).run(progress=False)
    return calls, summary


def test_one_minibatch_is_the_whole_batch_as_before(toy, tmp_path):
    default, _ = _run(tmp_path / "a", steps=2)
    one, _ = _run(tmp_path / "b", steps=2, minibatches=1)
    assert len(default.batches) == len(one.batches) == 2
    for a, b in zip(default.batches, one.batches):
        assert [s.completion_ids.tolist() for s in a.sequences] == [s.completion_ids.tolist() for s in b.sequences]
        assert b.old_logprobs is None and b.loss_counts == a.loss_counts == (16, a.num_tokens)


def test_two_minibatches_are_disjoint_halves_of_the_step_with_the_behaviour_policys_old_logprobs(toy, tmp_path):
    whole, _ = _run(tmp_path / "a")
    halves, summary = _run(tmp_path / "b", minibatches=2)
    assert len(halves.batches) == 2  # two optimizer updates in the one step
    first, second = halves.batches
    assert len(first.sequences) == len(second.sequences) == 8
    # the same rollout (the same seed, the same weights at sampling): split, not resampled
    assert _rows(first) + _rows(second) == _rows(whole.batches[0])
    # each update divides by its own rows' sequences, and by half the step's tokens (TRL's "dapo")
    half = (first.num_tokens + second.num_tokens) / 2
    assert first.loss_counts == (8, half) and second.loss_counts == (8, half)
    # the ratio is to the weights that sampled: both halves carry the log-probs from before the
    # first update, which the second update's weights no longer give
    assert first.old_logprobs is not None and second.old_logprobs is not None
    np.testing.assert_allclose(np.concatenate(first.old_logprobs), np.concatenate(halves.current[0]), atol=1e-6)
    assert not np.allclose(np.concatenate(second.old_logprobs), np.concatenate(halves.current[1]), atol=1e-4)
    # the step's metrics: the mean over its updates, tokens summed
    line = summary["history"][0]
    reported = [r.as_dict() for r in halves.reported]
    assert line["loss"] == pytest.approx(np.mean([r["loss"] for r in reported]))
    assert line["grad_norm"] == pytest.approx(np.mean([r["grad_norm"] for r in reported]))
    assert line["tokens"] == sum(r["tokens"] for r in reported)


def _trl_dapo_update(logits: np.ndarray, batch, step_tokens: int, minibatches: int) -> tuple[float, np.ndarray]:
    """A hand reference of TRL's GRPOTrainer (loss_type="dapo") for one update of the toy model
    (softmax over ``logits``, temperature 1): the update's summed per-token loss over
    ``num_items_in_batch`` (the whole generation batch's tokens) x gradient_accumulation_steps /
    steps_per_generation = step_tokens / minibatches. Ratio 1 at the first update: the per-token
    loss is -A, its gradient -A (one-hot(token) - softmax) on the logits."""
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    divisor = step_tokens / minibatches
    loss, grad = 0.0, np.zeros_like(logits)
    for seq, adv in zip(batch.sequences, batch.advantages):
        for tok in seq.completion_ids:
            loss -= float(adv) / divisor
            grad -= float(adv) / divisor * (np.eye(len(logits))[tok] - probs)
    return loss, grad


def test_a_token_mean_update_divides_by_the_steps_tokens_over_minibatches_as_trls_dapo(toy, tmp_path):
    """Unequal token counts across parts: each update's token mean divides by the step's tokens
    / 2 (TRL's num_items_in_batch rescaled to one accumulation window), not by its own tokens."""
    calls, _ = _run(tmp_path, minibatches=2, loss_aggregation="token_mean")
    first, second = calls.batches
    step_tokens = first.num_tokens + second.num_tokens  # no truncated or unscorable rows here
    assert first.num_tokens != second.num_tokens  # the case where a part's own token mean differs
    loss, grad = _trl_dapo_update(calls.logits[0], first, step_tokens, 2)
    assert calls.reported[0].loss == pytest.approx(loss, rel=1e-6, abs=1e-9)
    assert calls.reported[0].grad_norm == pytest.approx(float(np.linalg.norm(grad)), rel=1e-6)


def test_iterations_repeat_the_same_split_in_trls_order_and_the_schedule_counts_every_update(toy, tmp_path):
    calls, summary = _run(tmp_path, steps=2, schedule="linear", minibatches=2, num_iterations=2)
    config = toy_config(tmp_path)
    assert len(calls.batches) == 8  # 2 steps x 2 iterations x 2 mini-batches
    for step in range(2):
        a, b, a_again, b_again = calls.batches[4 * step: 4 * step + 4]
        assert _rows(a) == _rows(a_again) and _rows(b) == _rows(b_again) and not _rows(a) & _rows(b)
        for batch in (a_again, b_again):  # still the behaviour policy's log-probs
            assert batch.old_logprobs is not None
    # a linear decay over 2 steps x 4 updates: each update its own lr (TRL's schedule over max_steps = 8)
    lrs = [r.extra["lr"] for r in calls.reported]
    assert lrs == pytest.approx([config.optimizer.lr * (1 - k / 8) for k in range(8)])
    assert summary["history"][-1]["lr"] == pytest.approx(lrs[-1])


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])  # token_mean: a fractional share
def test_a_resumed_run_splits_and_trains_exactly_as_an_uninterrupted_one(toy, tmp_path, aggregation):
    def config(root, steps, **train):
        base = toy_config(root, steps=steps, **train)
        return attrs.evolve(base, algorithm=attrs.evolve(base.algorithm, minibatches=3, loss_aggregation=aggregation),
                            optimizer=attrs.evolve(base.optimizer, schedule="linear", total_steps=15))

    full = Trainer(config(tmp_path / "a", 5))
    full.run(progress=False)
    Trainer(config(tmp_path / "b", 3, checkpoint_every=2)).run(progress=False)  # checkpoints at steps 2 and 3
    resumed = Trainer(config(tmp_path / "b", 5, checkpoint_every=2))
    assert resumed.resume() and resumed.step == 3
    resumed.run(progress=False)
    assert resumed.updates_applied == full.updates_applied == 15
    np.testing.assert_array_equal(resumed.train_engine.raw.logits, full.train_engine.raw.logits)


DROPS_A_GROUP = """
def first_group_equal(prompts, completions, **kwargs):
    return [1.0] * 4 + [float(i % 2) for i in range(len(completions) - 4)]
"""


def test_parts_left_empty_by_dynamic_sampling_are_skipped(toy, tmp_path):
    """16 mini-batches of a step whose dynamic sampling keeps 12 samples: the 4 parts with
    nothing to train are not stepped, the lr schedule counts only the updates made, and a token
    mean divides by the step's tokens over the 12 updates (each keeps the step's scale)."""
    (tmp_path / "r.py").write_text(DROPS_A_GROUP)
    calls, summary = _run(tmp_path, steps=2, rewards=[{"function": f"{tmp_path / 'r.py'}:first_group_equal"}],
                          minibatches=16, dynamic_sampling=True)
    assert [line["samples_kept"] for line in summary["history"]] == [12, 12]
    assert len(calls.batches) == 24 and all(len(b.sequences) == 1 for b in calls.batches)
    assert all(b.loss_counts[0] == 1 for b in calls.batches)  # a part holds one kept sample: its own divisor
    for step in (calls.batches[:12], calls.batches[12:]):  # token means: the step's tokens / the 12 updates made
        assert all(b.loss_counts[1] == pytest.approx(sum(x.num_tokens for x in step) / 12) for b in step)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and not any(line.get("skipped") for line in lines)


def test_more_minibatches_than_samples_is_one_error_naming_the_key(tmp_path):
    data = {"model": {"path": "toy-model"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}],
            "generation": {"group_size": 4}, "train": {"prompts_per_step": 2},
            "algorithm": {"name": "grpo", "minibatches": 9}}
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    assert info.value.field == "algorithm.minibatches" and "use at most 8" in str(info.value), info.value
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError) as info:
            RunConfig.from_dict({**data, "algorithm": {"name": "grpo", "minibatches": bad}})
        assert info.value.field == "algorithm.minibatches", info.value
    data["algorithm"]["minibatches"] = 8
    assert RunConfig.from_dict(data).algorithm.updates_per_step == 8


# --- TRL's steps_per_generation -------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "minibatches", "prompts_per_step", "steps"), [
    ({"steps_per_generation": 4, "max_steps": 8}, 4, 4, 2),  # 4 completions per update, 16 per rollout
    ({"steps_per_generation": 4, "gradient_accumulation_steps": 2, "max_steps": 8}, 2, 4, 4),
    ({"generation_batch_size": 32, "per_device_train_batch_size": 8, "max_steps": 12, "num_iterations": 3}, 4, 8, 1),
    ({"gradient_accumulation_steps": 2, "max_steps": 6}, 1, 2, 6),  # TRL's default: one update per rollout
])
def test_trls_steps_per_generation_is_minibatches_per_rollout(kwargs, minibatches, prompts_per_step, steps):
    """TRL makes one update per gradient_accumulation_steps of its steps_per_generation slices of a
    generation batch: steps_per_generation / gradient_accumulation_steps mini-batches, and its
    max_steps counts num_iterations x that per rollout. from_trl refused any steps_per_generation."""
    from polyrl import api

    trl = pytest.importorskip("trl")
    args = trl.GRPOConfig(use_cpu=True, per_device_train_batch_size=kwargs.pop("per_device_train_batch_size", 4),
                          num_generations=4, **kwargs)
    ours = api.GRPOConfig.from_trl(args)
    assert ours.settings.get("algorithm.minibatches", 1) == minibatches
    assert (ours.prompts_per_step, ours.steps) == (prompts_per_step, steps)
    assert ours.prompts_per_step * 4 == args.generation_batch_size


@pytest.mark.parametrize(("kwargs", "field", "text"), [
    ({"steps_per_generation": 3, "gradient_accumulation_steps": 2, "max_steps": 6}, "grpo_config.steps_per_generation",
     "steps_per_generation = 3 is not a multiple of gradient_accumulation_steps = 2"),
    ({"steps_per_generation": 4, "max_steps": 6}, "grpo_config.max_steps",
     "num_iterations x steps_per_generation / gradient_accumulation_steps = 1 x 4 = 4 updates each"),
    ({"steps_per_generation": 2, "eval_strategy": "steps", "eval_steps": 3, "max_steps": 6}, "grpo_config.eval_steps",
     "not a whole number of rollout batches of num_iterations x steps_per_generation"),
])
def test_trls_updates_that_straddle_rollouts_are_one_error(kwargs, field, text):
    from polyrl import api

    trl = pytest.importorskip("trl")
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                                               **kwargs))
    assert info.value.field == field and text in str(info.value) and "Fix:" in str(info.value), info.value


def test_a_torch_step_makes_one_update_per_minibatch(tiny_model_dir, tmp_path):
    """The tiny Llama on torch: one step of two mini-batches is two optimizer updates (torch's own
    AdamW count, which the lr schedule reads), from the behaviour policy's log-probs."""
    pytest.importorskip("polyrl_torch")
    (tmp_path / "reward.py").write_text("def digits(prompts, completions, **kw):\n"
                                        "    return [float(sum(ch.isdigit() for ch in c)) for c in completions]\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Write numbers {i}:"}) + "\n" for i in range(4)))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "backends": {"train": "torch", "generate": "torch"},
        "generation": {"group_size": 4, "max_new_tokens": 6}, "algorithm": {"name": "grpo", "minibatches": 2},
        "optimizer": {"lr": 1e-3, "schedule": "linear"}, "data": {"path": str(prompts)},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(config)
    line = trainer.run(progress=False)["history"][0]
    assert trainer.updates_applied == 2 and not line.get("skipped") and np.isfinite(line["loss"]), line
    state = trainer.train_engine.raw.optimizer.state  # torch AdamW's per-parameter step: what the schedule counts
    assert state and {int(s["step"]) for s in state.values()} == {2}
    assert line["lr"] == pytest.approx(1e-3 * 0.5)  # the second of two updates in a linear decay over 2


def test_every_rank_agrees_on_the_parts_it_steps():
    """Two ranks with uneven shards (dynamic sampling kept 3 rows on one, 6 on the other): each
    rank's parts cover its counted rows once; a part empty on one rank but not the other is live
    (the empty rank steps with an empty batch), one empty everywhere is not, and any rank
    computes the same answer from the gathered masks."""
    from polyrl import minibatches

    counted = np.array([1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], dtype=bool)  # rank 0: 8 rows, rank 1: 6
    trained = counted.copy()
    trained[[1, 9]] = False  # counted, not trained (a truncated row under mask_truncated_completions)
    sizes = [8, 6]
    splits = minibatches.rank_splits(counted, sizes, 5, seeds=[11, 12])
    assert np.array_equal(np.sort(np.concatenate(splits[0])), [0, 1, 2])
    assert np.array_equal(np.sort(np.concatenate(splits[1])), np.arange(6))
    assert [len(p) for p in splits[0]] == [1, 1, 1, 0, 0] and [len(p) for p in splits[1]] == [2, 1, 1, 1, 1]
    live = minibatches.live_parts(splits, trained, sizes)
    expected = [bool(trained[:8][p].any() or trained[8:][q].any()) for p, q in zip(*splits)]
    assert live.tolist() == expected and live[3] and live[4]  # rank 0 holds nothing there, rank 1 does
    assert minibatches.rank_splits(counted, sizes, 5, seeds=[11, 12])[1][0].tolist() == splits[1][0].tolist()
    assert minibatches.split_rows(np.arange(5), 1, seed=3)[0].tolist() == list(range(5))  # one part: the order kept


def test_a_checkpoint_from_before_minibatches_resumes_and_a_changed_count_is_refused():
    """The split is part of the experiment: a checkpoint written without the key resumes at the
    default; resuming with another count is refused, naming the key."""
    from polyrl import resume_config

    base = {"model": {"path": "tiny"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
    old = {k: v for k, v in resume_config.snapshot(RunConfig.from_dict(base)).items() if k != "algorithm.minibatches"}
    assert resume_config.check(old, RunConfig.from_dict(base), weights_only=False) == []
    split = RunConfig.from_dict({**base, "algorithm": {"name": "grpo", "minibatches": 2}})
    with pytest.raises(ConfigError) as info:
        resume_config.check(old, split, weights_only=False)
    assert info.value.field == "algorithm.minibatches", info.value
