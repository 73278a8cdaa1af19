"""The sampling defaults a model folder's ``generation_config.json`` suggests, which a run does not use.

Why: Qwen3, Llama 3 and others ship ``temperature`` / ``top_p`` / ``top_k`` there, and
``model.generate`` applies them when a call says nothing. polyrl samples with ``[generation]``
alone, as TRL's GRPOTrainer does (its ``GRPOConfig`` passes temperature 1.0, top_p 1.0, top_k 0,
min_p None and repetition_penalty 1.0 over them), so a user who expected the file's values got
others without a word. Where the file's values differ from the run's, one warning names both.
Its stop ids (``eos_token_id``, one or a list) are used by every backend, as in TRL.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

#: ``generation_config.json`` key -> the value that samples as if it were absent (what TRL passes)
SAMPLING_KEYS: dict[str, float] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                                          "repetition_penalty": 1.0}


def _number(value: Any) -> float | None:
    """A finite number as a float, else None. Why finite: Python's ``json`` reads ``NaN`` and
    ``Infinity``, which are no sampling value to suggest (and a NaN one ended the load with a
    ValueError as the warning printed it)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def file_sampling(model_path: str | None) -> dict[str, float]:
    """The sampling values ``<model_path>/generation_config.json`` sets other than the neutral ones
    (numbers only); empty for a file that is absent, unreadable, or samples greedily (``do_sample``
    false: its knobs are not a sampling suggestion)."""
    file = os.path.join(model_path, "generation_config.json") if model_path else ""
    if not (file and os.path.isfile(file)):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("do_sample") is False:
        return {}
    found: dict[str, float] = {}
    for key in SAMPLING_KEYS:
        number = _number(data.get(key))  # top_k / min_p null: off, as the neutral value
        if number is not None and number != SAMPLING_KEYS[key]:  # temperature 1.0 suggests nothing
            found[key] = number
    return found


def unused_sampling(model_path: str | None, generation: Any) -> dict[str, tuple[float, float]]:
    """``key -> (the file's value, the run's)`` for each sampling value of the model's
    ``generation_config.json`` that ``generation`` (``[generation]``) samples otherwise."""
    out: dict[str, tuple[float, float]] = {}
    for key, value in file_sampling(model_path).items():
        run = _number(getattr(generation, key, None))
        if run is None:  # a generation section without the key samples as TRL's default
            run = SAMPLING_KEYS[key]
        if value != run:
            out[key] = (value, run)
    return out


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)


def warn_unused_sampling(model_path: str | None, generation: Any, log: Any) -> None:
    """One warning naming the model's suggested sampling values the run does not use, and the
    ``[generation]`` keys that would."""
    unused = unused_sampling(model_path, generation)
    if not unused:
        return
    file_text = ", ".join(f"{k}={_shown(v[0])}" for k, v in unused.items())
    run_text = ", ".join(f"{k}={_shown(v[1])}" for k, v in unused.items())
    log.warning(f"the model's generation_config.json suggests {file_text}; this run samples with [generation]'s "
                f"{run_text} (as TRL's GRPOConfig overrides them)",
                fix="set " + ", ".join(f"generation.{k} = {_shown(v[0])}" for k, v in unused.items())
                + " to sample as the model's file suggests, or keep [generation]'s and ignore this")
