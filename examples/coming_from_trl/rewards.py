"""Reward functions written for TRL's GRPOTrainer. polyrl calls them the same way, so this file
is used unchanged by train_trl.py (TRL) and run.toml (polyrl)."""

import re


def correct_answer(completions, answer, **kwargs):
    """1.0 when the reply's last number is the row's ``answer``."""
    rewards = []
    for completion, expected in zip(completions, answer):
        numbers = re.findall(r"-?\d+", completion[0]["content"])  # chat prompts: one assistant message
        rewards.append(1.0 if numbers and numbers[-1] == expected else 0.0)
    return rewards


def brevity(completion_ids, trainer_state, **kwargs):
    """A penalty for replies over 16 tokens, phased in over the first half of training."""
    ramp = min(1.0, 2 * trainer_state.global_step / max(trainer_state.max_steps, 1))
    return [-ramp * max(0, len(ids) - 16) / 16 for ids in completion_ids]
