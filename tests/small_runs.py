"""The config table of a small training run on a tiny model: 8 counting prompts, a reward
function written next to them, 2 samples x 2 new tokens. Tests change one section at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def small_run_settings(model: str, tmp_path: Path, source: str, reward: str, *, steps: int,
                       prompts_per_step: int, **sections: Any) -> dict[str, Any]:
    """``source`` (Python defining ``reward``) becomes the run's reward file; ``sections`` update
    the table (a list value replaces the section, e.g. ``rewards=[...]``)."""
    (tmp_path / "rewards.py").write_text(source)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Count to {i}:"}) + "\n" for i in range(8)))
    data: dict[str, Any] = {
        "model": {"path": model},
        "generation": {"group_size": 2, "max_new_tokens": 2},
        "optimizer": {"lr": 1e-3},
        "data": {"path": str(prompts)},
        "rewards": [{"function": f"{tmp_path / 'rewards.py'}:{reward}"}],
        "train": {"steps": steps, "prompts_per_step": prompts_per_step, "threads": 1,
                  "output_dir": str(tmp_path / "run")},
    }
    for name, values in sections.items():
        data[name] = values if isinstance(values, list) else {**data.get(name, {}), **values}
    return data


def cli_error_line(model: str, tmp_path: Path, extra_toml: str) -> str:
    """The one ``error:`` line `polyrl train` prints for an arithmetic run on ``model`` whose
    config ends with ``extra_toml``; the exit status must be 2 and no traceback shown."""
    import subprocess
    import sys

    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{model}"\n[data]\ntask = "arithmetic"\n'
                      f'[[rewards]]\nname = "numeric_match"\n{extra_toml}')
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress"],
                            capture_output=True, text=True, timeout=120)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]
