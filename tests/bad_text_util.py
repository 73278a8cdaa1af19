"""Shared by the tests of text a dataset must not hold (lone surrogates, NUL characters): a two-row
JSONL file whose second prompt holds it, and ``polyrl train`` run on a dataset, whose one error line
the tests read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

POLYRL = [sys.executable, "-m", "polyrl.cli"]
ENV = {**os.environ, "POLYRL_DISABLE_PLUGINS": "mlx,max"}


def two_row_jsonl(folder: Path, second_prompt: str) -> Path:
    """``folder/data.jsonl``: a plain row, then ``second_prompt`` (json.dumps writes what no file
    should hold as an escape, which json.loads decodes back)."""
    rows = [{"prompt": "What is 2 + 2?", "answer": "4"}, {"prompt": second_prompt, "answer": "6"}]
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "data.jsonl"


def train_errors(model_dir: str, data: Path, folder: Path) -> list[str]:
    """The ``error:`` lines of ``polyrl train`` for one step on ``data``, checked to exit 2 with no traceback."""
    config = folder / "run.toml"
    config.write_text(f'[model]\npath = "{model_dir}"\n[data]\npath = "{data}"\ncache_dir = "{folder / "c"}"\n'
                      '[[rewards]]\nname = "numeric_match"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
                      f'[train]\nsteps = 1\nprompts_per_step = 2\noutput_dir = "{folder / "out"}"\n')
    result = subprocess.run([*POLYRL, "train", str(config), "--no-progress"], capture_output=True, text=True,
                            timeout=120, env=ENV)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]
