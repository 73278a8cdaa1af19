"""Is a checkpoint's ``pending_rollout`` what ``Rollout.as_state`` writes?

Why: a resumed overlap run trains on exactly the completions the interrupted run sampled ahead, read
back from ``trainer_state.json``. That file is plain JSON a user can edit (or a download can hold):
a completion with a string for a token id, fewer log-probs than ids or a log-prob of 1e400 was a
``TypeError`` traceback deep in the resume, or worse, trained on values polyrl never sampled. Every
field is checked here first, and the first problem is named by its path in the file
(``pending_rollout.completions[3].logprobs``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: The keys ``Rollout.as_state`` writes, and those each completion has (mask to prompt_messages: episodes).
ROLLOUT_KEYS = ("step", "policy_version", "seconds", "sampler_before", "completions")
REQUIRED_COMPLETION_KEYS = ("prompt_index", "prompt_ids", "completion_ids", "logprobs")
COMPLETION_KEYS = (*REQUIRED_COMPLETION_KEYS, "text", "finish_reason", "mask", "messages", "info",
                   "prompt_messages", "reasoning_open")
FINISH_REASONS = ("stop", "length")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT64_MAX = int(np.iinfo(np.int64).max)


def _count(value: Any) -> bool:
    """A JSON integer (not a bool: ``true`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _ids_problem(value: Any) -> str | None:
    if not isinstance(value, list):
        return f"is {type(value).__name__}, not a list of token ids"
    bad = next((i for i, v in enumerate(value) if not _count(v) or not 0 <= v <= _INT64_MAX), None)
    return None if bad is None else f"[{bad}] is {value[bad]!r}, not a token id (an integer >= 0)"


def _logprobs_problem(value: Any) -> str | None:
    """A list of numbers a float32 holds; ``null`` is allowed: polyrl writes a NaN as null."""
    if not isinstance(value, list):
        return f"is {type(value).__name__}, not a list of log-probs"
    for i, v in enumerate(value):
        if v is None:
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return f"[{i}] is {v!r}, not a number"
        if not (math.isfinite(v) and abs(v) <= _FLOAT32_MAX):
            return f"[{i}] is {v!r}, not a finite float32 number"
    return None


def _completion_problem(c: Any, prompts: int | None) -> str | None:
    """What is wrong with one completion, as ``.field problem``, or None."""
    if not isinstance(c, Mapping):
        return f" is {type(c).__name__}, not an object"
    unknown = sorted(str(k) for k in c if k not in COMPLETION_KEYS)
    if unknown:
        return f" has an unknown key {unknown[0]!r}"
    absent = [k for k in REQUIRED_COMPLETION_KEYS if k not in c]
    if absent:
        return f" lacks {', '.join(absent)}"
    index = c["prompt_index"]
    if not _count(index) or index < 0 or (prompts is not None and index >= prompts):
        bound = f" below {prompts} (train.prompts_per_step)" if prompts is not None else ""
        return f".prompt_index is {index!r}, not an integer >= 0{bound}"
    for key in ("prompt_ids", "completion_ids"):
        if (why := _ids_problem(c[key])) is not None:
            return f".{key}{why if why.startswith('[') else ' ' + why}"
    if (why := _logprobs_problem(c["logprobs"])) is not None:
        return f".logprobs{why if why.startswith('[') else ' ' + why}"
    n = len(c["completion_ids"])
    if len(c["logprobs"]) != n:
        return f".logprobs has {len(c['logprobs'])} values for {n} completion_ids"
    if not isinstance(c.get("text", ""), str):
        return f".text is {type(c['text']).__name__}, not a string"
    if c.get("finish_reason", "length") not in FINISH_REASONS:
        return f".finish_reason is {c['finish_reason']!r}, not one of {', '.join(FINISH_REASONS)}"
    mask = c.get("mask")
    if mask is not None:
        if not isinstance(mask, list) or any(not _count(v) or v not in (0, 1) for v in mask):
            return ".mask is not a list of 0s and 1s"
        if len(mask) != n:
            return f".mask has {len(mask)} values for {n} completion_ids"
    for key in ("messages", "prompt_messages"):
        messages = c.get(key)
        if messages is not None and (not isinstance(messages, list)
                                     or not all(isinstance(m, Mapping) for m in messages)):
            return f".{key} is not a list of message objects"
    if not isinstance(c.get("reasoning_open", False), bool):
        return f".reasoning_open is {c['reasoning_open']!r}, not true or false"
    if not isinstance(c.get("info", {}), Mapping):
        return f".info is {type(c['info']).__name__}, not an object"
    return None


def pending_rollout_problem(pending: Any, step: Any = None, prompts: int | None = None) -> str | None:
    """What is wrong with a checkpoint's ``pending_rollout`` (its path in the file first), or None
    when it is null or what ``Rollout.as_state`` writes. ``step`` is the checkpoint's own step (the
    pending rollout is that step's), ``prompts`` an upper bound on its prompt indices."""
    where = "pending_rollout"
    if pending is None:
        return None
    if not isinstance(pending, Mapping):
        return f"{where} is {type(pending).__name__}, not an object or null"
    absent = [k for k in ROLLOUT_KEYS if k not in pending]
    if absent:
        return f"{where} lacks {', '.join(absent)}"
    if not _count(pending["step"]) or (_count(step) and pending["step"] != step):
        return f"{where}.step is {pending['step']!r}, not the checkpoint's step {step!r}"
    version = pending["policy_version"]
    if not _count(version) or not 0 <= version <= pending["step"]:
        return f"{where}.policy_version is {version!r}, not an integer from 0 to its step {pending['step']}"
    seconds = pending["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
            math.isfinite(seconds) and seconds >= 0):
        return f"{where}.seconds is {seconds!r}, not a finite number >= 0"
    if not isinstance(pending["sampler_before"], Mapping):
        return f"{where}.sampler_before is {type(pending['sampler_before']).__name__}, not an object"
    completions = pending["completions"]
    if not isinstance(completions, list) or not completions:
        return f"{where}.completions is not a non-empty list"
    for i, c in enumerate(completions):
        if (why := _completion_problem(c, prompts)) is not None:
            return f"{where}.completions[{i}]{why}"
    return None


#: How to get past a refused ``pending_rollout``.
PENDING_FIX = ("restore trainer_state.json as polyrl wrote it, or resume from an earlier checkpoint "
               "(--resume PATH)")
