"""Why a step had no sample to train on: its warning names the causes that applied, and a step
no reward scored at all (every reward function returned None) is told apart from the legitimate
empty steps (groups of equal rewards under dynamic sampling), since it stops a run. So does a
step whose every completion was cut at the length limit under ``mask_truncated_completions``:
nothing trains, so the policy cannot learn to finish sooner, and (as TRL, whose loss is then 0
with no word) the run would spend every later step the same way."""

from __future__ import annotations

import numpy as np


def nothing_scored(rewards: np.ndarray) -> bool:
    """True when no reward scored any sample of the batch (every weighted total is NaN)."""
    return bool(rewards.size) and bool(np.isnan(rewards).all())


def empty_step_causes(rewards: np.ndarray, shaped: np.ndarray, untruncated: np.ndarray,
                      group_kept: np.ndarray) -> list[str]:
    """The causes, with their sample counts, that left a step nothing to train on. Each sample
    counts once, under the first of: no reward scored it, it is an episode with nothing to train
    on, it was cut under mask_truncated_completions, its group was dropped by dynamic sampling.

    All arrays are per sample over the global batch: the reward totals, the shaped rewards (NaN
    for an untrainable episode), the untruncated mask and dynamic sampling's keep mask."""
    n = int(rewards.size)
    if nothing_scored(rewards):
        return [f"no reward scored any of the {n} samples: every reward function returned None for each"]
    unscored = np.isnan(rewards)
    no_episode = ~unscored & np.isnan(shaped)
    left = ~unscored & ~no_episode
    truncated = left & ~untruncated
    equal = left & untruncated & ~group_kept
    parts = [
        (unscored, "were scored by no reward (every one returned None)"),
        (no_episode, "are episodes with nothing to train on"),
        (truncated, "were cut at the length limit under mask_truncated_completions"),
        (equal, "are in groups whose rewards were all equal (dynamic sampling dropped them)"),
    ]
    return [f"{int(mask.sum())} of {n} samples {why}" for mask, why in parts if mask.any()]


def all_cut(rewards: np.ndarray, shaped: np.ndarray, untruncated: np.ndarray) -> bool:
    """True when every sample a reward scored (an episode with something to train on) was cut at
    the length limit under ``mask_truncated_completions``, and at least one was: the step trains
    nothing because of the length limit alone."""
    left = ~np.isnan(rewards) & ~np.isnan(shaped)
    return bool(left.any()) and not bool((left & untruncated).any())


def cut_fix(max_new_tokens: int, episode_tokens: int | None = None) -> str:
    """What to change when every completion was cut: the limit (an episode's, in a multi-turn
    run: ``episode_tokens``), or the masking."""
    limit = (f"environment.max_episode_tokens (now {episode_tokens}) or generation.max_new_tokens (now "
             f"{max_new_tokens})" if episode_tokens is not None else
             f"generation.max_new_tokens (now {max_new_tokens})")
    return (f"raise {limit}, with model.max_length if the prompts are long, so completions can finish, or set "
            "algorithm.mask_truncated_completions = false to train on cut completions")
