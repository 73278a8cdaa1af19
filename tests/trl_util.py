"""The small ``trl.GRPOConfig`` the ``polyrl.trl`` tests train the tiny model with."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def grpo_args(tmp_path: Path, **kwargs: Any) -> Any:
    """One step on the CPU of 2 prompts x 2 completions of at most 6 tokens into ``tmp_path/run``,
    no trackers, float32 (TRL's bf16 default is bfloat16 autocast: test_trl_trainer checks it),
    every update logged (``logging_steps=1``: TRL's default 10 is test_trl_log_steps');
    ``kwargs`` are GRPOConfig fields over these."""
    import trl

    values = dict(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=2, per_device_train_batch_size=4,
                  max_completion_length=6, learning_rate=1e-4, use_cpu=True, report_to="none", disable_tqdm=True,
                  bf16=False, logging_steps=1)
    return trl.GRPOConfig(**{**values, **kwargs})


def prompts_dataset(n: int = 4) -> Any:
    """``n`` rows of a plain-text prompt and its answer column, as a 🤗 Dataset."""
    import datasets

    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)])


def short(completions: list, answer: list, **kwargs: Any) -> list[float]:
    """A TRL-style reward: keyword columns, one float per completion (logged as ``rewards/short``)."""
    assert len(answer) == len(completions)
    return [-len(c) / 10 for c in completions]


def captured_trainer_config(monkeypatch: Any) -> dict[str, Any]:
    """Swaps ``polyrl.trainer.Trainer`` for one that trains nothing and keeps the RunConfig it was
    built with under ``"config"`` of the dict returned, so a test reads what ``api.run`` built."""
    import polyrl.trainer

    built: dict[str, Any] = {}

    class Captured:
        def __init__(self, config: Any, extra_plugins: Any = ()) -> None:
            built["config"] = config

        def run(self, progress: bool = True) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(polyrl.trainer, "Trainer", Captured)
    return built
