"""TRL's GRPO documentation examples (docs/source/grpo_trainer.md, TRL 1.16) run through
``polyrl.trl.GRPOTrainer`` as the docs write them, with what they log checked against the meaning
TRL's "Logged metrics" section gives it."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402


_args = grpo_args


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"Problem {i}:", "ground_truth": str(i)} for i in range(n)])


def spread(completions, **kwargs):
    """A reward with a spread in every group, so the step trains (not TRL's idle zero-advantage step)."""
    draw = random.Random(len(completions))
    return [draw.random() for _ in completions]


def test_an_entropy_bonus_logs_trls_policy_loss_and_entropy_coef(tiny_model_dir, tmp_path):
    """The docs' "Static entropy" example, GRPOConfig(entropy_coef=0.05): TRL logs ``policy_loss``
    (the loss before the bonus) and ``entropy_coef`` beside ``loss``, which holds the bonus; with
    TRL's token-mean loss the two losses differ by exactly coef x the mean token entropy."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=spread, train_dataset=_dataset(),
                          args=_args(tmp_path, entropy_coef=0.05))
    trainer.train()
    step = trainer.state.log_history[0]
    assert step["entropy_coef"] == 0.05
    assert step["entropy"] > 0
    assert step["policy_loss"] == pytest.approx(step["loss"] + 0.05 * step["entropy"], rel=1e-5, abs=1e-7)
    assert step["policy_loss"] != pytest.approx(step["loss"])


def test_without_an_entropy_bonus_neither_key_is_logged(tiny_model_dir, tmp_path):
    """TRL logs ``policy_loss`` and ``entropy_coef`` only when ``entropy_coef`` is nonzero."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=spread, train_dataset=_dataset(), args=_args(tmp_path))
    trainer.train()
    step = trainer.state.log_history[0]
    assert "policy_loss" not in step and "entropy_coef" not in step and "loss" in step


def math_reward_func(prompts, completions, task, **kwargs):
    """The docs' Example 4 (multi-task): a score for its own task's rows, None for the others."""
    return [float(len(c)) if t == "math" else None for c, t in zip(completions, task)]


def test_with_an_entropy_bonus_rows_no_reward_scored_stay_in_the_loss_as_trls_do(tiny_model_dir, tmp_path):
    """Example 4's mixed dataset (a "code" row no reward scores) with the static entropy bonus: TRL
    keeps the unscored rows in its loss at advantage 0 (``nan_to_num``), so the bonus covers their
    tokens too; polyrl left them out, training the bonus over the scored rows only."""
    rows = [{"prompt": "What is 2+2?", "task": "math"},
            {"prompt": "Write a function that returns the sum of two numbers.", "task": "code"}]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[math_reward_func],
                          train_dataset=datasets.Dataset.from_list(rows),
                          args=_args(tmp_path, entropy_coef=0.05, temperature=1.5))
    trainer.train()
    step = trainer.state.log_history[0]
    assert step["samples_kept"] == 4  # both groups' completions, the unscored "code" pair included
    assert step["reward"] == step["rewards/math_reward_func/mean"]  # the unscored rows stay out of the means
    assert step["policy_loss"] == pytest.approx(step["loss"] + 0.05 * step["entropy"], rel=1e-5, abs=1e-7)


class _Desk:
    """A TRL environment with no tool (``environment_factory``): each rollout is a polyrl episode."""

    def reset(self, **kwargs):
        return " Answer briefly."


@pytest.mark.parametrize("term", [{"entropy_coef": 0.05}, {"beta": 0.04}])
def test_episodes_no_reward_scored_stay_in_the_loss_for_the_bonus_or_kl_term_as_trls_do(tiny_model_dir, tmp_path,
                                                                                       term):
    """Example 4's mixed dataset run as environment_factory episodes, with an entropy bonus or a KL
    term: TRL keeps a multi-turn row no reward scored in its loss at advantage 0 as it keeps a
    single-turn one (``nan_to_num``, then the bonus and KL over its model tokens); polyrl left every
    unscored episode out, so the bonus and KL covered the scored episodes only."""
    rows = [{"prompt": [{"role": "user", "content": "What is 2+2?"}], "task": "math"},
            {"prompt": [{"role": "user", "content": "Write a function that adds."}], "task": "code"}]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[math_reward_func],
                          train_dataset=datasets.Dataset.from_list(rows),
                          args=_args(tmp_path, temperature=1.5, **term), environment_factory=_Desk)
    trainer.train()
    step = trainer.state.log_history[0]
    assert step["samples_kept"] == 4  # both groups' episodes, the unscored "code" pair included
    assert step["reward"] == step["rewards/math_reward_func/mean"]
    if "entropy_coef" in term:
        assert step["policy_loss"] == pytest.approx(step["loss"] + 0.05 * step["entropy"], rel=1e-5, abs=1e-7)


def format_rate(completions, log_metric, **kwargs):
    """A format reward logging its rate as TRL's docs show ``log_metric``."""
    scores = [float(c.strip().startswith("<think>")) for c in completions]
    log_metric("rate", sum(scores) / len(scores))
    return scores


def length_rate(completion_ids, log_metric, **kwargs):
    """A second reward logging under the same name, once per completion."""
    for ids in completion_ids:
        log_metric("rate", float(len(ids)))
    return [float(len(ids)) for ids in completion_ids]


def test_a_metric_name_two_rewards_log_is_trls_one_mean_in_log_history(tiny_model_dir, tmp_path):
    """TRL 1.16's ``log_metric`` appends to one list per name for the step, whatever reward calls
    it, and logs its sum over its count; polyrl logged the first reward's mean under the name."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[format_rate, length_rate],
                          train_dataset=_dataset(), args=_args(tmp_path))
    trainer.train()
    step = trainer.state.log_history[0]
    rate, lengths = step["reward/format_rate/rate"], step["reward/length_rate/rate"]
    assert lengths == step["rewards/length_rate/mean"] > 1  # one value per completion: their mean
    assert step["rate"] == pytest.approx((rate + 4 * lengths) / 5)  # 1 value + 4 values, pooled


def always_right(completions, log_metric, **kwargs):
    log_metric("acc", 1.0)
    return [1.0] * len(completions)


def wrong_at_first(completions, log_metric, trainer_state, **kwargs):
    """Logs ``acc`` (three values) in the first step only, as a reward logging what it found does."""
    if trainer_state.global_step == 0:
        for _ in range(3):
            log_metric("acc", 0.0)
    return [0.0] * len(completions)


def test_a_logging_window_averages_each_steps_pooled_metric_as_trl_does(tiny_model_dir, tmp_path):
    """``logging_steps=2``: TRL logs ``acc`` as the mean over the window's steps of each step's one
    pooled value: (1 + 3 x 0) / 4 in the first, 1.0 in the second (only one reward logged it), 0.625."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[always_right, wrong_at_first],
                          train_dataset=_dataset(), args=_args(tmp_path, max_steps=2, logging_steps=2))
    trainer.train()
    step = trainer.state.log_history[0]
    assert step["step"] == 2
    assert step["acc"] == pytest.approx((0.25 + 1.0) / 2)


def prefilled_length(prompts, completions, **kwargs):
    """Records the prompts it is given: TRL passes the dataset's, prefill included."""
    prefilled_length.seen = [p[-1]["content"] for p in prompts]
    return [float(len(c[0]["content"])) for c in completions]


def test_a_prompt_ending_with_an_assistant_message_trains_as_trl_renders_it(tiny_model_dir, tmp_path):
    """TRL 1.16's GRPOTrainer trains a chat prompt ending with an assistant message, rendered by
    ``apply_chat_template(add_generation_prompt=True)``: that message closed and a new assistant
    turn opened. polyrl refused the dataset; its engine renders the prompt to TRL's ids."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig
    from transformers import AutoTokenizer

    prompt = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "The answer is"}]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=prefilled_length,
                          train_dataset=datasets.Dataset.from_list([{"prompt": prompt}] * 2), args=_args(tmp_path))
    trainer.train()
    assert trainer.state.global_step == 1 and prefilled_length.seen == ["The answer is"] * 4
    trl_ids = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="generate", threads=1))
    assert engine.raw.encode_prompt(prompt) == trl_ids


def test_an_evaluation_logs_a_rewards_metric_as_trls_eval_name_over_its_batches(tiny_model_dir, tmp_path):
    """TRL scores each eval batch on its own and logs a reward's ``log_metric(name, ...)`` as
    ``eval_<name>``, the mean of the batches' values: 3 eval prompts x 2 completions in batches of
    4 and 2 (``per_device_eval_batch_size=4``) log ``eval_seen`` = (4 + 2) / 2 = 3.0, in the run's
    eval entry and from ``evaluate()``. polyrl scored the evaluation in one call and left it out."""
    from trl_util import prompts_dataset

    calls = []

    def seen(completions, log_metric, **kwargs):
        calls.append(len(completions))
        log_metric("seen", float(len(completions)))
        return [float(i % 2) for i in range(len(completions))]

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[seen], train_dataset=prompts_dataset(),
                          eval_dataset=prompts_dataset(3),
                          args=_args(tmp_path, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4))
    trainer.train()
    assert calls == [4, 4, 2]  # the step's 2 prompts x 2, then TRL's two eval batches
    evaluation = [h for h in trainer.state.log_history if "eval_reward" in h]
    assert len(evaluation) == 1 and evaluation[0]["eval_seen"] == 3.0
    assert trainer.evaluate()["eval_seen"] == 3.0 and calls[3:] == [4, 2]


def logs_over_builtin_keys(completions, log_metric, **kwargs):
    """Logs under names the run logs itself (transformers' ``loss``, GRPOTrainer's ``reward`` and
    ``completions/mean_length``, polyrl's per-reward ``mean``) and one of its own."""
    for name in ("loss", "reward", "completions/mean_length", "mean", "mine"):
        log_metric(name, 1000.0)
    return [float(len(c)) for c in completions]


def test_a_log_metric_named_as_a_builtin_key_keeps_the_runs_value_and_is_said_once(tiny_model_dir, tmp_path):
    """TRL 1.16 replaces ``loss`` with a reward's ``log_metric("loss", ...)`` and averages its own
    ``reward`` with the reward's value; polyrl kept its own values without a word (and dropped a
    ``log_metric("mean", ...)``, its per-reward mean's name). Now the run's numbers stay, the
    reward's are under ``log_metric/<name>``, and a warning per name, once a run, says so and how
    to rename it."""
    from structlog.testing import capture_logs

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=logs_over_builtin_keys, train_dataset=_dataset(),
                          args=_args(tmp_path, max_steps=2))
    with capture_logs() as logs:
        trainer.train()
    for step in trainer.state.log_history[:2]:
        assert step["loss"] != 1000.0 and step["reward"] == step["rewards/logs_over_builtin_keys/mean"] != 1000.0
        assert step["completions/mean_length"] != 1000.0 and step["mine"] == 1000.0
        assert step["log_metric/loss"] == step["log_metric/reward"] == 1000.0
    said = [e["event"] for e in logs if "log_metric(" in e["event"] and e.get("log_level") == "warning"]
    for name in ("loss", "reward", "completions/mean_length", "mean"):
        told = [line for line in said if f"log_metric({name!r}, ...)" in line]
        assert len(told) == 1 and "'logs_over_builtin_keys'" in told[0], said
    assert not [line for line in said if "'mine'" in line]
    fixes = [e.get("fix", "") for e in logs if "log_metric(" in e["event"]]
    assert "log_metric('logs_over_builtin_keys/loss', ...)" in " ".join(fixes)
