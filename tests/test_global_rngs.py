"""Python's and numpy's global RNGs are seeded from the run's seed by every way a run starts
(``polyrl train``, ``polyrl.api.run``), as ``polyrl.trl.GRPOTrainer`` and transformers' Trainer do:
a reward drawing from ``random`` draws the same in two fresh runs of one seed."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polyrl import api, cli
from polyrl.config import RunConfig


def _drawing_trainer(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """Swaps ``polyrl.trainer.Trainer`` for one that trains nothing and, when built, draws once from
    ``random`` and ``np.random`` (as a reward called in its run would): the draws, one per trainer."""
    import polyrl.trainer

    draws: list[tuple[float, float]] = []

    class Drawing:
        rank = 0

        def __init__(self, config: Any, extra_plugins: Any = (), **kwargs: Any) -> None:
            draws.append((random.random(), float(np.random.random())))

        def run(self, progress: bool = True) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(polyrl.trainer, "Trainer", Drawing)
    return draws


def _expected(seed: int) -> tuple[float, float]:
    return random.Random(seed).random(), float(np.random.RandomState(seed).random_sample())


def test_api_run_seeds_global_rngs(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = _drawing_trainer(monkeypatch)
    for disturbed in (1, 2):  # whatever the script drew before, each run draws the same
        random.seed(disturbed)
        np.random.seed(disturbed)
        api.run(api.grpo, policy=api.Agent("x"), prompts=["hi"] * 4, progress=False,
                rewards=[lambda completions, **kwargs: [0.0] * len(completions)],
                grpo_config=api.GRPOConfig(seed=7))
    assert draws == [_expected(7), _expected(7)]


def test_cli_train_seeds_global_rngs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    draws = _drawing_trainer(monkeypatch)
    config = RunConfig.from_dict({"model": {"path": "x"}, "data": {"path": str(tmp_path / "rows.jsonl")},
                                  "rewards": [{"name": "numeric_match"}],
                                  "train": {"seed": 11, "output_dir": str(tmp_path / "run")}})
    args = argparse.Namespace(resume=None, resume_weights_only=False, no_progress=True)
    for disturbed in (1, 2):
        random.seed(disturbed)
        np.random.seed(disturbed)
        cli._train(config, args, False, tmp_path / "run", False)
    assert draws == [_expected(11), _expected(11)]
