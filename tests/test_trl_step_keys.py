"""TRL's GRPOTrainer metric names in polyrl's step metrics (metrics.jsonl and the trackers), each
with TRL's meaning, checked against values computed here from the step's own completions."""

from __future__ import annotations

import json
import math

import attrs
import numpy as np
import pytest

from polyrl import step_gather
from polyrl.config import RunConfig
from polyrl.step_metrics import step_tokens, terminated_length_metrics, trl_aliases, trl_epoch
from polyrl.trainer import Trainer
from polyrl.types import Completion

from test_trainer_toy import toy_config


def _completion(prompt: int, completion: int, reason: str, mask: list[bool] | None = None) -> Completion:
    info = {} if mask is None else {"turns": 2, "tool_calls": 1, "tool_errors": 0, "format_errors": 0}
    return Completion(0, list(range(prompt)), list(range(completion)), np.zeros(completion), text="x",
                      finish_reason=reason, mask=None if mask is None else np.asarray(mask), info=info)


def test_terminated_lengths_leave_out_the_completions_cut_at_the_limit():
    shard = step_gather.Shard.of([_completion(3, 5, "stop"), _completion(3, 8, "length"), _completion(3, 2, "stop")])
    assert terminated_length_metrics(shard) == {"completions/mean_terminated_length": 3.5,
                                                "completions/min_terminated_length": 2.0,
                                                "completions/max_terminated_length": 5.0}
    cut = step_gather.Shard.of([_completion(3, 8, "length")])
    assert set(terminated_length_metrics(cut).values()) == {0.0}  # none ended on its own: 0, as TRL logs


def test_step_tokens_count_prompts_and_sampled_tokens():
    # an episode's inserted tokens (mask False) were never sampled: TRL leaves tool tokens out
    shard = step_gather.Shard.of([_completion(4, 6, "stop"), _completion(2, 5, "stop", [True, False, False, True, True])])
    assert step_tokens(shard) == (4 + 6) + (2 + 3)


def test_epoch_counts_whole_batches_as_trl_and_epoch_steps_do():
    from polyrl.api import epoch_steps

    assert trl_epoch(3, 4, 10) == 1.5  # 2 whole batches of 4 in 10 rows
    assert trl_epoch(epoch_steps(3, 10, 4), 4, 10) == 3.0  # num_train_epochs = 3 ends at epoch 3
    assert trl_epoch(2, 8, 4) == 4.0  # fewer rows than a batch: rows drawn over rows


def test_aliases_name_polyrls_values_as_trl_does():
    metrics = {"reward_mean": 0.5, "lr": 1e-5, "reward/acc/mean": 0.25, "reward/acc/std": 0.1,
               "reward/acc/latency_s": 0.2, "reward_std": 0.3}
    assert trl_aliases(metrics) == {"reward": 0.5, "learning_rate": 1e-5, "rewards/acc/mean": 0.25,
                                    "rewards/acc/std": 0.1}


def _recording(monkeypatch) -> list[list[Completion]]:
    """Every training rollout's completions, in step order (no overlap: one per step)."""
    seen: list[list[Completion]] = []
    original = Trainer._sample

    def sample(self, rows, sampling, training=True):
        out = original(self, rows, sampling, training)
        if training:
            seen.append(out)
        return out

    monkeypatch.setattr(Trainer, "_sample", sample)
    return seen


def test_toy_run_logs_trls_keys_with_trls_meaning(toy, tmp_path, monkeypatch):
    seen = _recording(monkeypatch)
    data = toy_config(tmp_path, steps=6, prompts_per_step=4)
    data["data"]["options"]["count"] = 10
    data["rewards"] = [{"name": "toy_sevens", "weight": 2.0}]
    data["algorithm"] = {"name": "grpo", "num_iterations": 3, "epsilon": 0.05}
    Trainer(RunConfig.from_dict(data)).run(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == len(seen) == 6
    total = 0
    for n, (line, completions) in enumerate(zip(lines, seen)):
        total += sum(len(c.prompt_ids) + len(c.completion_ids) for c in completions)
        assert line["num_tokens"] == total  # cumulative over the run
        assert line["epoch"] == pytest.approx((n + 1) / 2)  # 10 rows: 2 whole batches of 4
        ended = [len(c.completion_ids) for c in completions if c.finish_reason != "length"] or [0]
        assert line["completions/mean_terminated_length"] == pytest.approx(np.mean(ended))
        assert line["completions/min_terminated_length"] == min(ended)
        assert line["completions/max_terminated_length"] == max(ended)
        assert line["learning_rate"] == 8.0  # the constant schedule's lr
        # rewards/<f>/mean is the function's raw score: the logged reward weighs it by 2
        assert line["reward"] == pytest.approx(2.0 * line["rewards/toy_sevens/mean"])
        assert line["rewards/toy_sevens/std"] == pytest.approx(line["reward_std"] / 2.0)
        assert 0.0 <= line["clip_ratio/low_min"] <= line["clip_ratio/low_mean"]
        assert line["clip_ratio/high_mean"] <= line["clip_ratio/high_max"] <= 1.0
        # TRL's step_time is one optimizer update's seconds: the step's 3 updates share its time
        assert line["step_time"] == pytest.approx(line["time/step"] / 3, abs=1e-4)
    assert any(line["clip_ratio/high_max"] > line["clip_ratio/high_mean"] for line in lines)


def test_resume_keeps_num_tokens_cumulative(toy, tmp_path):
    full = Trainer(RunConfig.from_dict(toy_config(tmp_path / "a", steps=6)))
    expected = [m["num_tokens"] for m in full.run(progress=False)["history"]]
    assert expected == sorted(set(expected))  # grows every step

    Trainer(RunConfig.from_dict(toy_config(tmp_path / "b", steps=4, checkpoint_every=2))).run(progress=False)
    resumed = Trainer(RunConfig.from_dict(toy_config(tmp_path / "b", steps=6, checkpoint_every=2)))
    assert resumed.resume()
    assert resumed.num_tokens == expected[3]  # from the checkpoint, not 0
    resumed.run(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["num_tokens"] for line in lines] == expected


FLAT_ON_STEPS_2_AND_3 = """
calls = []

def varied(prompts, completions, **kwargs):
    calls.append(1)
    if len(calls) in (2, 3):  # every group flat: dynamic sampling drops them all, the step is skipped
        return [0.0] * len(completions)
    return [float(i % 4) for i in range(len(completions))]
"""


def test_skipped_steps_log_the_schedules_learning_rate(toy, tmp_path):
    """Once: a step with nothing to train on (every group flat) had no ``lr``/``learning_rate`` in
    metrics.jsonl or the trackers, where TRL logs learning_rate every step. It is the schedule's
    value at the step's own place: such a step still takes the optimizer's step (on a zero
    gradient, as TRL's), so the schedule advances as TRL's does (it once stayed where the skip
    left it, shifting every later lr)."""
    from polyrl.schedules import lr_at
    from test_tracking import Recorder

    reward = tmp_path / "reward.py"
    reward.write_text(FLAT_ON_STEPS_2_AND_3)
    data = toy_config(tmp_path, steps=6)
    data["rewards"] = [{"function": f"{reward}:varied"}]
    data["algorithm"] = {"name": "grpo", "dynamic_sampling": True}
    data["optimizer"] = {"lr": 1.0, "schedule": "linear", "warmup_steps": 2}
    data["logging"] = {"report_to": ["recorder"]}
    recorder = Recorder("recorder")
    trainer = Trainer(RunConfig.from_dict(data), extra_plugins=(recorder,))
    trainer.run(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [bool(line.get("skipped")) for line in lines] == [False, True, True, False, False, False]
    optimizer = attrs.evolve(trainer.config.optimizer, total_steps=6)
    expected = [lr_at(optimizer, n) for n in range(6)]  # updates applied before each step
    assert [line["learning_rate"] for line in lines] == pytest.approx(expected)
    assert [line["lr"] for line in lines] == pytest.approx(expected)
    assert [m.get("learning_rate") for _, m in recorder.metrics] == pytest.approx(expected)
    assert trainer.updates_applied == 6


def test_resume_continues_the_count_of_applied_updates(toy, tmp_path, monkeypatch):
    """The lr of a skipped step after a resume is where the schedule is: the checkpoint's count of
    applied updates (an older checkpoint without it: its kept step lines' count; weights only: 0,
    the optimizer starts fresh)."""
    def config(name: str, steps: int) -> RunConfig:
        reward = tmp_path / f"reward_{name}.py"  # its own count of calls
        reward.write_text(FLAT_ON_STEPS_2_AND_3)
        data = toy_config(tmp_path / name, steps=steps, checkpoint_every=3)
        data["rewards"] = [{"function": f"{reward}:varied"}]
        data["algorithm"] = {"name": "grpo", "dynamic_sampling": True, "num_iterations": 2}
        return RunConfig.from_dict(data)

    Trainer(config("new", 3)).run(progress=False)  # steps 2 and 3: nothing trained, 2 optimizer steps each
    state_file = tmp_path / "new" / "run" / "checkpoints" / "step-00000003" / "trainer_state.json"
    assert json.loads(state_file.read_text())["updates_applied"] == 6
    resumed = Trainer(config("new", 6))
    assert resumed.resume() and resumed.updates_applied == 6
    fresh_optimizer = Trainer(config("new", 6))
    assert fresh_optimizer.resume(weights_only=True) and fresh_optimizer.updates_applied == 0

    state = Trainer._state
    monkeypatch.setattr(Trainer, "_state", lambda self: {k: v for k, v in state(self).items()
                                                         if k != "updates_applied"})  # as an older polyrl saved
    monkeypatch.setattr(Trainer, "_idle_updates", lambda *args, **kwargs: {})  # and stepped
    Trainer(config("old", 3)).run(progress=False)
    monkeypatch.undo()
    older = Trainer(config("old", 6))
    assert older.resume() and older.updates_applied == 2


def test_the_epoch_after_an_epoch_stop_counts_the_epochs_begun():
    """Read from where the step's prompts started when every epoch is whole batches: the same as
    the step count without an epoch stop, transformers' count after one (it kept counting steps)."""
    starts = [divmod(2 * (s - 1), 6) for s in range(1, 8)]  # no epoch stop: step s starts at row 2(s-1)
    assert [trl_epoch(s, 2, 6, start) for s, start in zip(range(1, 8), starts)] == \
        [trl_epoch(s, 2, 6) for s in range(1, 8)]
    assert trl_epoch(2, 2, 6, (1, 0)) == pytest.approx(1 + 1 / 3)  # step 2 starts epoch 1 (epoch stop at 1)
    assert trl_epoch(3, 4, 10, (1, 2)) == 1.5  # batches across epochs: TRL's whole-batch count stays


def _trls_frac_reward_zero_std(rewards: np.ndarray, group_size: int, scale_rewards: str,
                               per_reward: np.ndarray | None, weights: list[float]) -> float:
    """TRL 1.16's frac_reward_zero_std for these scores, from its own ``nanstd`` (the steps of
    ``GRPOTrainer._generate_and_score_completions``): the std its advantage divides by, compared
    with 0 by ``torch.isclose``."""
    torch = pytest.importorskip("torch")
    from trl.trainer.utils import nanstd

    if per_reward is not None:  # normalize_then_sum
        scores = torch.tensor(per_reward, dtype=torch.float32)
        grouped = scores.view(-1, group_size, scores.shape[1])
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        std = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
        summed = (((grouped - mean) / (std + 1e-4)).view(-1, scores.shape[1]) * torch.tensor(weights)).nansum(dim=1)
        summed[torch.isnan(scores).all(dim=1)] = torch.nan
        spread = nanstd(summed).expand_as(summed)
    else:
        r = torch.tensor(rewards, dtype=torch.float32)
        spread = (nanstd(r.view(-1, group_size), dim=1).repeat_interleave(group_size) if scale_rewards != "batch"
                  else nanstd(r).expand_as(r))
    return torch.isclose(spread, torch.zeros_like(spread)).float().mean().item()


NAN = float("nan")


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("rewards", [
    [NAN] * 8,  # no reward scored: TRL's std is NaN, not 0 (polyrl logged 1.0)
    [1.0, NAN, NAN, NAN, 0.5, 0.5, 0.5, 0.5],  # one score in a group: NaN too
    [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0],  # each group flat, the batch not
    [1.0, 1.0 + 1e-12, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0],  # flat within isclose's tolerance
    [3.0, 3.0, NAN, 3.0, 3.0, 3.0, 3.0, 3.0],
])
def test_frac_reward_zero_std_is_trls_for_the_same_rewards(rewards, scale_rewards):
    """TRL counts a completion whose reward std (over its group, or the batch under "batch") is
    close to 0, a std of fewer than two scores being NaN: a step no reward scored logs 0.0 there."""
    from polyrl.step_metrics import frac_reward_zero_std

    r = np.array(rewards)
    ours = frac_reward_zero_std(r, 4) if scale_rewards == "group" else frac_reward_zero_std(r, 4, scale_rewards)
    assert ours == pytest.approx(
        _trls_frac_reward_zero_std(r, 4, scale_rewards, None, []))


@pytest.mark.parametrize("matrix", [
    [[NAN, NAN]] * 4,
    [[1.0, 0.0], [1.0, 1.0], [1.0, NAN], [1.0, 0.0]],
    [[1.0, 2.0], [1.0, 2.0], [0.0, 1.0], [0.0, 1.0]],
    [[1.0, NAN], [1.0, NAN], [1.0, NAN], [1.0, NAN]],
])
def test_frac_reward_zero_std_under_normalize_then_sum_is_trls(matrix):
    """GDPO (TRL's normalize_then_sum): the batch std of the weighted sum of each reward
    normalized in its group."""
    from polyrl.step_metrics import frac_reward_zero_std

    m = np.array(matrix)
    total = np.where(np.isnan(m).all(axis=1), np.nan, np.nansum(m * [1.0, 0.5], axis=1))
    assert frac_reward_zero_std(total, 2, "group", m, [1.0, 0.5]) == pytest.approx(
        _trls_frac_reward_zero_std(total, 2, "group", m, [1.0, 0.5]))


def _trls_log_entry(logs: dict, metrics: dict, mode: str) -> dict:
    """The ``log_history`` entry TRL 1.16's own ``GRPOTrainer.log`` writes for transformers' ``logs``
    (``loss``, ``grad_norm``, ``eval_loss``) and the GRPOTrainer ``metrics`` it averaged, on a bare
    trainer holding just what ``log`` reads."""
    from collections import defaultdict
    from types import SimpleNamespace

    trl = pytest.importorskip("trl")
    from transformers import TrainerState

    trainer = trl.GRPOTrainer.__new__(trl.GRPOTrainer)
    trainer.model = SimpleNamespace(training=mode == "train")
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    for key, value in metrics.items():
        trainer._metrics[mode][key].append(value)
    trainer.state, trainer.control = TrainerState(), None
    trainer.args = SimpleNamespace(include_num_input_tokens_seen="no")
    trainer.callback_handler = SimpleNamespace(on_log=lambda *args: None)
    trainer.accelerator, trainer.log_completions = SimpleNamespace(is_main_process=False), False
    trl.GRPOTrainer.log(trainer, dict(logs))
    return trainer.state.log_history[-1]


def _shown(entry: dict, keys) -> dict:
    """NaN as the string "nan" (NaN != NaN), None and numbers as they are."""
    return {key: "nan" if isinstance(entry[key], float) and math.isnan(entry[key]) else entry[key] for key in keys}


def test_a_steps_nan_is_none_or_nan_where_trls_log_writes_so():
    """TRL's log writes a GRPOTrainer metric with no valid value (NaN) as None, and leaves the NaN
    of a key transformers' Trainer writes itself (loss, grad_norm) a NaN float: a callback written
    for TRL compares logs["loss"] as a float. polyrl wrote None for a NaN loss and grad_norm."""
    from polyrl.rewards.trl_compat import with_trl_names

    nan = float("nan")
    ours = with_trl_names({"step": 1, "loss": nan, "grad_norm": nan, "lr": 1e-6, "reward_mean": nan,
                           "reward_std": nan, "entropy": nan, "frac_reward_zero_std": 0.0, "reward/f/mean": nan,
                           "reward/f/std": nan})
    theirs = _trls_log_entry({"loss": nan, "grad_norm": nan, "learning_rate": 1e-6},
                             {"reward": nan, "reward_std": nan, "entropy": nan, "frac_reward_zero_std": 0.0,
                              "rewards/f/mean": nan, "rewards/f/std": nan}, "train")
    keys = ("loss", "grad_norm", "learning_rate", "reward", "reward_std", "entropy", "frac_reward_zero_std",
            "rewards/f/mean", "rewards/f/std")
    assert _shown(ours, keys) == _shown(theirs, keys)
    assert _shown(ours, ["loss", "reward"]) == {"loss": "nan", "reward": None}  # the premise: both kinds seen


def test_cispo_clip_ratio_is_trls_for_the_same_tokens():
    """TRL 1.16 logs ``cispo_clip_ratio`` for loss_type "cispo": the masked mean over the loss tokens
    of ``(coef_1 > epsilon_high) & (advantages > 0)`` (its cap is polyrl's 1 + epsilon_high). polyrl
    logged no such key; its ``clip_ratio/high_mean`` counts a capped token whatever its advantage."""
    torch = pytest.importorskip("torch")
    training = pytest.importorskip("polyrl_torch.training")
    from polyrl.algorithms.objective import Objective
    from polyrl.step_metrics import clip_region_metrics

    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 5, generator=gen, dtype=torch.float64) * 0.5 - 2.0
    old = logp - torch.randn(4, 5, generator=gen, dtype=torch.float64).abs() * 0.8  # ratios above 1
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    obj = Objective(policy_loss="cispo", clip_eps_high=0.3, loss_aggregation="token_mean")
    _, stats = training.objective_loss(logp, adv, obj, old_logp=old, mask=mask)
    ours = float(stats["cispo_clip_sum"]) / float(stats["tokens"])
    # TRL's own lines (grpo_trainer.py, _compute_loss), epsilon_high = its cap = 1.3
    coef_1 = torch.exp(logp - old)
    is_cispo_clipped = (coef_1 > 1.3) & (adv[:, None] > 0)
    theirs = float((is_cispo_clipped.float() * mask).sum() / mask.sum().clamp(min=1.0))
    assert 0.0 < theirs < float(stats["clip_high_sum"]) / float(stats["tokens"])  # the premise: the sign matters
    assert ours == pytest.approx(theirs)
    assert clip_region_metrics({"cispo_clip_fraction": ours}, "cispo")["cispo_clip_ratio"] == ours


def test_a_cispo_step_with_nothing_to_train_logs_trls_cispo_clip_ratio_zero():
    """A step TRL trains with every advantage 0 (no reward scored) or over no loss token (every
    completion cut under mask_truncated_completions) logs cispo_clip_ratio 0.0 with loss_type
    "cispo" (no token is capped with a positive advantage; a mean over no token divides by 1)."""
    from polyrl.algorithms.objective import Objective
    from polyrl.step_metrics import no_loss_token_metrics, nothing_scored_metrics

    cispo = Objective(policy_loss="cispo", clip_eps_high=4.0, loss_aggregation="token_mean")
    assert nothing_scored_metrics(cispo)["cispo_clip_ratio"] == 0.0
    assert no_loss_token_metrics(False, cispo)["cispo_clip_ratio"] == 0.0
    assert "cispo_clip_ratio" not in nothing_scored_metrics(Objective())
    assert "cispo_clip_ratio" not in no_loss_token_metrics(False, Objective())


def test_a_vespo_step_over_no_loss_token_logs_trls_phi_seq_mean_one():
    """Every completion cut under mask_truncated_completions: TRL's vespo weight sums no token's
    log-ratio, so each row's is exp(lambda - lambda) = 1 and it logs vespo/phi_seq_mean 1.0."""
    from polyrl.algorithms.objective import Objective
    from polyrl.step_metrics import no_loss_token_metrics

    assert no_loss_token_metrics(False, Objective(policy_loss="vespo"))["vespo/phi_seq_mean"] == 1.0
    assert "vespo/phi_seq_mean" not in no_loss_token_metrics(False, Objective())
