"""The toy run that backend and algorithm tests train end to end: the tiny Llama rewarded for the
share of digits in its completions (a reward it can raise within a few dozen steps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REWARD = """
def digits(prompts, completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]
"""


def digits_config(model_dir: str, tmp_path: Path, algorithm: dict[str, Any], *, train: str = "torch",
                  generate: str = "torch", steps: int = 30, prompts: int = 16, prompts_per_step: int = 4,
                  group_size: int = 8, max_new_tokens: int = 12, lr: float = 3e-3, **train_extra: Any) -> Any:
    """The run's ``RunConfig``, its reward module and ``prompts`` prompt rows written under
    ``tmp_path`` (output in ``tmp_path / "run"``); ``train_extra``: more ``[train]`` keys."""
    from polyrl.config import RunConfig

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "reward.py").write_text(REWARD)
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"Write numbers {i}:"}) + "\n" for i in range(prompts)))
    return RunConfig.from_dict({
        "model": {"path": model_dir},
        "backends": {"train": train, "generate": generate},
        "generation": {"group_size": group_size, "max_new_tokens": max_new_tokens},
        "algorithm": algorithm,
        "optimizer": {"lr": lr},
        "data": {"path": str(rows)},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": steps, "prompts_per_step": prompts_per_step, "threads": 1,
                  "output_dir": str(tmp_path / "run"), **train_extra},
    })
