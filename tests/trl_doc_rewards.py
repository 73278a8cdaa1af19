"""Reward functions in the shapes TRL's GRPOTrainer documentation shows ("Using a custom reward
function"), written as a TRL user has them; tests run them through polyrl unchanged."""

from __future__ import annotations

import asyncio
import re

from trl.rewards import get_soft_overlong_punishment


def length_reward(completion_ids, **kwargs):
    """Longer completions score higher (TRL docs: 'reward longer completions')."""
    return [float(len(ids)) for ids in completion_ids]


def format_reward_func(completions, **kwargs):
    """TRL docs: a chat completion in <think>...</think><answer>...</answer> format scores 1."""
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def accuracy_reward_func(completions, ground_truth, **kwargs):
    """TRL docs: the \\boxed{} answer of a text completion against the ground_truth column."""
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def math_reward_func(prompts, completions, task, **kwargs):
    """TRL docs, multi-task: None for the rows of other tasks (no reward for them)."""
    rewards = []
    for prompt, completion, t in zip(prompts, completions, task):
        if t == "math":
            rewards.append(1.0 if "4" in completion else 0.0)
        else:
            rewards.append(None)
    return rewards


def coding_reward_func(prompts, completions, task, **kwargs):
    rewards = []
    for prompt, completion, t in zip(prompts, completions, task):
        rewards.append(1.0 if "def" in completion else 0.0 if t == "coding" else None)
    return rewards


def curriculum(completions, trainer_state, log_metric, **kwargs):
    """Dynamic shaping from the training progress (TRL passes ``trainer_state``), logged as a metric."""
    progress = trainer_state.global_step / trainer_state.max_steps
    log_metric("progress", progress)
    return [progress] * len(completions)


async def async_judge(prompts, completions, **kwargs):
    """An async reward (TRL runs these concurrently on an event loop)."""
    await asyncio.sleep(0)
    return [0.5 for _ in completions]


#: TRL's factory, instantiated at module level so a config can point at it.
overlong = get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=4)
