"""Seeding of Python's and numpy's global RNGs from a run's seed, shared by every way a run starts
(``polyrl train``, ``polyrl.api.run``, ``polyrl.trl.GRPOTrainer``)."""

from __future__ import annotations

import random

import numpy as np


def seed_global_rngs(seed: int) -> None:
    """Seed Python's and numpy's global RNGs with the run's ``seed``, as transformers' ``Trainer``
    does when built (``set_seed(args.seed)``). Why: a reward or callback drawing from ``random`` or
    ``np.random`` (and TRL's completions table, whose rows ``random.sample`` picks) drew differently
    in every fresh run of the same seed, and an uninterrupted run and its crash-and-resume twin
    (which restores the states a checkpoint saved) differed, where TRL's agree. A resume restores
    the checkpoint's states after this. numpy takes the seed modulo 2**32 (its range)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
