"""``output_dir/run_plan.json``: the steps a run means to take, written when it starts.

Why a file of its own: ``metrics.jsonl`` does not say how many steps the run meant to take, and the
only other record, a checkpoint's state, exists only once a checkpoint is written (with the
default ``train.checkpoint_every = 0``, at the end). A run killed before then (SIGKILL, the OOM
killer, a lost node) left ``polyrl report`` drawing its few steps as a whole run. Each start
(fresh or resumed) rewrites it, so it holds the newest ``train.steps``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyrl import metrics_file, strict_json
from polyrl.logs import get_logger

FILE_NAME = "run_plan.json"
#: what ``planned_steps`` reads at most (a hand-made huge file is not parsed)
MAX_BYTES = 64 * 1024
STEPS_KEY = "train.steps"  # as a checkpoint's state records it (``resume_config.snapshot``)


def write(output_dir: Path, steps: int) -> None:
    """Record ``steps`` atomically; a failed write is a warning (the report then cannot say
    whether a killed run finished), never the end of the run."""
    try:
        strict_json.rewrite_lines(Path(output_dir) / FILE_NAME, [json.dumps({STEPS_KEY: steps})])
    except OSError as exc:
        get_logger("polyrl.run_plan").warning(
            f"{FILE_NAME} could not be written: polyrl report cannot tell a run killed before its last step "
            "from a finished one", path=str(Path(output_dir) / FILE_NAME), error=f"{type(exc).__name__}: {exc}")


def planned_steps(output_dir: Path) -> int | None:
    """The recorded ``train.steps``, or None (no file: a run of an earlier polyrl; unreadable or odd)."""
    path = Path(output_dir) / FILE_NAME
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    steps = data.get(STEPS_KEY) if isinstance(data, dict) else None
    return steps if metrics_file.is_step_number(steps) else None
