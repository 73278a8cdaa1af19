"""``output_dir/run_plan.json``: the steps a run means to take, written when it starts.

Why a file of its own: ``metrics.jsonl`` does not say how many steps the run meant to take, and the
only other record, a checkpoint's state, exists only once a checkpoint is written (with the
default ``train.checkpoint_every = 0``, at the end). A run killed before then (SIGKILL, the OOM
killer, a lost node) left ``polyrl report`` drawing its few steps as a whole run. Each start
(fresh or resumed) rewrites it, so it holds the newest ``train.steps``.

A run a TRL script started records so (``STARTED_KEY``): it resumes with the script's
``trainer.train(resume_from_checkpoint=True)``, not ``polyrl train CONFIG --resume`` (it has no
config file), and the report's advice said the latter.

It also says how the run ended (``ENDED_KEY``), written as the run returns or raises: null from
the start until then, so a run killed (SIGKILL, the OOM killer) or still running keeps null. Why:
the report named a run stopped by its own code (an observer, a TRL callback setting
``control.should_training_stop``, early stopping) as one stopped by Ctrl-C, crashed or running.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final, Literal

from polyrl import metrics_file, strict_json
from polyrl.logs import get_logger

FILE_NAME = "run_plan.json"
#: what ``planned_steps`` reads at most (a hand-made huge file is not parsed)
MAX_BYTES = 64 * 1024
STEPS_KEY = "train.steps"  # as a checkpoint's state records it (``resume_config.snapshot``)
#: how the run ended: null (not yet, or killed), else {"how": one of ``ENDINGS``, "step": the last
#: step trained, "by": who asked (``ASKED``), "error": the error's type and message (``FAILED``)}
ENDED_KEY = "ended"
FINISHED, ASKED, SIGNAL, FAILED = "finished", "stopped by its code", "stopped by a signal", "failed"
ENDINGS = (FINISHED, ASKED, SIGNAL, FAILED)
#: who started the run, where not ``polyrl train``: {"by": ``TRL``, "script": the script's path or
#: absent, "launcher": ``LAUNCHED`` or absent}
STARTED_KEY = "started_by"
TRL = "trl"
#: ``started_by``'s "launcher" of a script whose ranks a launcher started (its resume runs it so again)
LAUNCHED = "torchrun"
#: what of a "by" or "error" text is kept (a long error message is the log's to hold)
_TEXT_CHARS = 300


def ending(how: str, step: int, text: str = "") -> dict[str, Any]:
    """The ``ENDED_KEY`` record of a run that ended ``how`` after ``step``; ``text``: who asked
    (``ASKED``) or the error (``FAILED``)."""
    record: dict[str, Any] = {"how": how, "step": step}
    if how in (ASKED, FAILED):
        record["by" if how == ASKED else "error"] = (text.splitlines() or [""])[0][:_TEXT_CHARS]
    return record


def trl_script() -> dict[str, str]:
    """The ``STARTED_KEY`` record of a run a TRL script started, with how the script was run:
    ``python -m MODULE``, or the ``__main__`` file's path where it is a ``.py`` file (``python
    train.py``); neither in a notebook or an interactive session. "launcher" where torchrun (or
    ``accelerate launch`` through it) started the ranks, or another launcher started more than one
    (``WORLD_SIZE``: the deepspeed launcher, mpirun, srun with the rank variables set, which
    polyrl's ranks join as torchrun's): ``python train.py`` would resume one rank."""
    import sys

    main = sys.modules.get("__main__")
    spec, file = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    found = {"by": TRL}
    if "TORCHELASTIC_RUN_ID" in os.environ or _world_size() > 1:  # torchrun's ranks (accelerate launch's too)
        found["launcher"] = LAUNCHED
    if spec is not None and isinstance(getattr(spec, "name", None), str) and spec.name:
        found["script"] = f"-m {spec.name.removesuffix('.__main__')}"
    elif isinstance(file, str) and file.endswith(".py") and Path(file).is_file():
        found["script"] = str(Path(file).resolve())
    return found


def _world_size() -> int:
    """``WORLD_SIZE`` as the ranks read it; 1 where unset or not a number (the run refuses that itself)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 1


def write(output_dir: Path, steps: int, ended: dict[str, Any] | None = None,
          started: dict[str, str] | None = None) -> None:
    """Record ``steps``, how the run ended (``ending``; None while it runs) and who started it
    (``started``: ``trl_script()``; None for ``polyrl train``) atomically; a failed write is a
    warning (the report then cannot say whether a killed run finished), never the end of the run."""
    record: dict[str, Any] = {STEPS_KEY: steps, ENDED_KEY: ended}
    if started is not None:
        record[STARTED_KEY] = started
    try:
        strict_json.rewrite_lines(Path(output_dir) / FILE_NAME, [json.dumps(record)])
    except OSError as exc:
        get_logger("polyrl.run_plan").warning(
            f"{FILE_NAME} could not be written: polyrl report cannot tell a run killed before its last step "
            "from a finished one", path=str(Path(output_dir) / FILE_NAME), error=f"{type(exc).__name__}: {exc}")


def _read(output_dir: Path) -> dict[str, Any] | None:
    path = Path(output_dir) / FILE_NAME
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def planned_steps(output_dir: Path) -> int | None:
    """The recorded ``train.steps``, or None (no file: a run of an earlier polyrl; unreadable or odd)."""
    steps = (_read(output_dir) or {}).get(STEPS_KEY)
    return steps if metrics_file.is_step_number(steps) else None


#: what ``ended`` says of a run that recorded its start and no end
NOT_ENDED: Final = "not ended"


def ended(output_dir: Path) -> dict[str, Any] | Literal["not ended"] | None:
    """How the run ended as ``write`` recorded it (an ``ending`` record); ``NOT_ENDED`` when it
    recorded no end (killed, crashed past Python, or still running); None when nothing says (no
    file, a file of a polyrl before the record, an unreadable or odd one)."""
    data = _read(output_dir)
    if data is None or ENDED_KEY not in data:
        return None
    record = data[ENDED_KEY]
    if record is None:
        return NOT_ENDED
    if not (isinstance(record, dict) and record.get("how") in ENDINGS
            and metrics_file.is_step_number(record.get("step"))
            and all(isinstance(record.get(k, ""), str) for k in ("by", "error"))):
        return None
    return record


def started_by(output_dir: Path) -> dict[str, str] | None:
    """Who started the run as ``write`` recorded it (``trl_script``'s record), None for
    ``polyrl train`` (or nothing readable: the CLI's advice stands)."""
    record = (_read(output_dir) or {}).get(STARTED_KEY)
    if not (isinstance(record, dict) and record.get("by") == TRL
            and all(isinstance(record.get(key, ""), str) for key in ("script", "launcher"))):
        return None
    return record


def resume_command(started: dict[str, str] | None, quote: str = "") -> str:
    """How a run is continued, in words: ``polyrl train CONFIG --resume``, or for one a TRL script
    started (``started``: ``trl_script``'s record) the script's own resume (it has no config file).
    ``quote`` marks the code (a backtick in the trainer's messages; none in the report's)."""
    if started is None or started.get("by") != TRL:
        return f"{quote}polyrl train CONFIG --resume{quote}"
    if started.get("launcher") == LAUNCHED:
        script = f"with the launcher as before: torchrun or accelerate launch ... {started.get('script') or 'the script'}"
    else:
        script = f"python {started['script']}" if started.get("script") else "its script"
    return f"{quote}trainer.train(resume_from_checkpoint=True){quote} in the TRL script, run again ({script})"
