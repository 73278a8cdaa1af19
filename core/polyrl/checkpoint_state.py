"""Is a checkpoint's ``trainer_state.json`` what polyrl writes? Read and checked before a resume.

Why: the file is plain JSON a user can edit (or a download can hold), and the resume used its
fields as they came: a list for the whole file or a string for the sampler's seed was a
``TypeError`` traceback after the models loaded, a step of ``2.7`` or ``"5"`` silently became 2
or 5, a NaN step a ``ValueError``, an RNG state with a float for a key was truncated into another
stream, and a 2 GB file was parsed whole. Each field is checked here with no engine loaded, and
the first problem is one ``ConfigError`` naming the file and the field (``sampler.position``),
with the way past it: ``--resume-weights-only`` where that resume does not read the field (the
RNG states, the saved config), else another checkpoint. A full resume needs a saved config that
is not empty: ``{}`` (or none) resumed with no check of what changed (``polyrl.resume_config``).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import checkpoint as ckpt
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.rollout_state import PENDING_FIX, pending_rollout_problem

#: Room for everything but a pending rollout (config, RNG states, sampler), generously.
_BASE_BYTES = 256 << 20
#: Bytes one token of a pending rollout may take as polyrl writes it (indented ids, log-prob, mask,
#: text escaped as \\uXXXX, its copy in ``messages``): a bound, several times the usual size.
_BYTES_PER_TOKEN = 256
_UINT32_MAX = (1 << 32) - 1
#: Words of a Mersenne Twister state (numpy's legacy ``keys``).
_MT_WORDS = 624
#: The fields a full resume needs; a weights-only resume continues without them.
REQUIRED = ("step", "sampler", "python_random", "numpy_random")
#: The keys ``PromptSampler.state`` writes (``shuffle`` and ``version`` may be absent in older ones).
SAMPLER_KEYS = ("seed", "epoch", "position", "size", "fingerprint")

OTHER_CHECKPOINT_FIX = ("restore trainer_state.json as polyrl wrote it, or resume from another checkpoint "
                        "(--resume PATH)")
WEIGHTS_ONLY_FIX = ("restore trainer_state.json as polyrl wrote it, resume from another checkpoint (--resume "
                    "PATH), or resume with --resume-weights-only (weights alone; fresh optimizer and RNG)")


def max_bytes(config: RunConfig) -> int:
    """The largest ``trainer_state.json`` this run could have written: its pending rollout holds at
    most every sample of a step, each at most ``model.max_length`` tokens."""
    samples = config.train.prompts_per_step * config.generation.group_size
    return _BASE_BYTES + samples * config.model.max_length * _BYTES_PER_TOKEN


def _count(value: Any) -> bool:
    """A JSON integer (not a bool: ``true`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (polyrl writes a missing number as null)")


def read(found: Path, config: RunConfig, weights_only: bool) -> dict[str, Any]:
    """``found``'s trainer_state.json, every field the resume uses checked (``problem``); a
    ``ConfigError`` naming the file and the field otherwise."""
    file = found / ckpt.STATE_FILE

    def refuse(problem: str, fix: str = OTHER_CHECKPOINT_FIX) -> ConfigError:
        return ConfigError(f"{file}: {problem}", field="--resume", fix=fix)

    if not (file.is_file() and not file.is_symlink()):  # a FIFO would block the read
        raise refuse("is not a regular file")
    size, limit = file.stat().st_size, max_bytes(config)
    if size > limit:
        raise refuse(f"is {size} bytes, more than this run's config lets polyrl write ({limit})")
    try:
        state = json.loads(file.read_bytes().decode("utf-8"), parse_constant=_reject_constant)
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise refuse(f"is not readable JSON ({str(exc).splitlines()[0][:200]})") from None
    why = problem(state, _folder_step(found), weights_only, config.train.prompts_per_step)
    if why is not None:
        raise refuse(*why)
    return state


def _folder_step(found: Path) -> int | None:
    """The step the checkpoint's folder (``step-NNNNNNNN``, which its marker matches) names."""
    digits = found.name.removeprefix("step-")
    return int(digits) if digits.isdigit() else None


def problem(state: Any, step: int | None, weights_only: bool, prompts: int) -> tuple[str, str] | None:
    """(what is wrong, how to get past it) for the first malformed field of a parsed
    trainer_state.json, or None. ``step``: the checkpoint's own step (its folder's)."""
    if not isinstance(state, Mapping):
        return f"is {_kind(state)}, not an object", OTHER_CHECKPOINT_FIX
    missing = [k for k in REQUIRED if k not in state]
    if missing and not weights_only:
        return f"lacks {', '.join(missing)}", WEIGHTS_ONLY_FIX
    if "step" in state and (not _count(state["step"]) or (step is not None and state["step"] != step)):
        return f"step is {state['step']!r}, not the checkpoint's step {step}", OTHER_CHECKPOINT_FIX
    if "sampler" in state and (why := sampler_problem(state["sampler"])) is not None:
        return f"sampler{why}", OTHER_CHECKPOINT_FIX
    if not weights_only:  # the RNG states are restored by a full resume only
        for key, check in (("python_random", _python_random_problem), ("numpy_random", _numpy_random_problem)):
            if (why := check(state[key])) is not None:
                return f"{key}{why}", WEIGHTS_ONLY_FIX
    kl = state.get("kl_coef", 0.0)
    if not (isinstance(kl, (int, float)) and not isinstance(kl, bool) and math.isfinite(kl) and kl >= 0):
        return f"kl_coef is {kl!r}, not a finite number >= 0", OTHER_CHECKPOINT_FIX
    for key in ("num_tokens", "updates_applied", "epoch_steps_skipped"):
        count = state.get(key, 0)
        if not (_count(count) and count >= 0):
            return f"{key} is {count!r}, not an integer >= 0", OTHER_CHECKPOINT_FIX
    in_a_row = state.get("in_a_row", {})
    if not isinstance(in_a_row, Mapping) or not all(_count(v) and v >= 0 for v in in_a_row.values()):
        return f"in_a_row is {in_a_row!r}, not an object of integers >= 0", OTHER_CHECKPOINT_FIX
    observers = state.get("observers", {})
    if not weights_only and not (isinstance(observers, Mapping)  # read by a full resume only
                                 and all(isinstance(v, Mapping) for v in observers.values())):
        return f"observers is {_kind(observers)}, not an object of objects", WEIGHTS_ONLY_FIX
    saved = state.get("config")
    if saved is not None and not isinstance(saved, Mapping):
        return f"config is {_kind(saved)}, not an object", WEIGHTS_ONLY_FIX
    pending = state.get("pending_rollout")
    why = pending_rollout_problem(pending, state.get("step"), prompts=None if weights_only else prompts)
    if why is None and isinstance(pending, Mapping):  # the data position a resume draws its rows from
        bad = sampler_problem(pending["sampler_before"])
        why = None if bad is None else f"pending_rollout.sampler_before{bad}"
    if why is not None:
        return why, PENDING_FIX
    if not saved and not weights_only:  # a full resume refuses changed settings by this saved config
        what = "lacks config" if saved is None else "config is empty"
        return (f"{what}: the run's saved settings, which a resume compares with this config to refuse "
                "changes that break exact resumption, are gone", WEIGHTS_ONLY_FIX)
    return None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def sampler_problem(value: Any) -> str | None:
    """What is wrong with a ``PromptSampler.state`` (as ``.key problem``), or None."""
    if not isinstance(value, Mapping):
        return f" is {_kind(value)}, not an object"
    missing = [k for k in SAMPLER_KEYS if k not in value]
    if missing:
        return f" lacks {', '.join(missing)}"
    for key in ("seed", "epoch", "position", "size"):
        if not _count(value[key]) or value[key] < 0:
            return f".{key} is {value[key]!r}, not an integer >= 0"
    if value["position"] >= max(1, value["size"]):
        return f".position is {value['position']}, past its size {value['size']}"
    if not isinstance(value["fingerprint"], str):
        return f".fingerprint is {_kind(value['fingerprint'])}, not a string"
    if not isinstance(value.get("shuffle", True), bool):
        return f".shuffle is {value['shuffle']!r}, not true or false"
    return None


def _python_random_problem(value: Any) -> str | None:
    """Whether ``random.setstate`` takes it, tried on a private generator (the global one is untouched)."""
    if not isinstance(value, Mapping) or not {"version", "internal", "gauss"} <= set(value):
        return " is not an object with version, internal and gauss"
    internal, gauss = value["internal"], value["gauss"]
    if not isinstance(internal, list) or not all(_count(v) and 0 <= v <= _UINT32_MAX for v in internal):
        return ".internal is not a list of 32-bit unsigned integers"
    if gauss is not None and (isinstance(gauss, bool) or not isinstance(gauss, (int, float))):
        return f".gauss is {gauss!r}, not a number or null"
    try:
        random.Random().setstate((value["version"], tuple(internal), gauss))
    except (TypeError, ValueError, OverflowError) as exc:
        return f" is refused by random.setstate ({exc})"
    return None


def _numpy_random_problem(value: Any) -> str | None:
    """Whether ``numpy.random.set_state`` takes it, tried on a private generator."""
    keys = ("name", "keys", "pos", "has_gauss", "cached_gaussian")
    if not isinstance(value, Mapping) or not set(keys) <= set(value):
        return f" is not an object with {', '.join(keys)}"
    words = value["keys"]
    if not isinstance(words, list) or len(words) != _MT_WORDS or not all(
            _count(v) and 0 <= v <= _UINT32_MAX for v in words):
        return f".keys is not a list of {_MT_WORDS} 32-bit unsigned integers"
    # numpy takes any pos and has_gauss as they come (a pos past the key reads beyond it)
    for key, top in (("pos", _MT_WORDS), ("has_gauss", 1)):
        if not _count(value[key]) or not 0 <= value[key] <= top:
            return f".{key} is {value[key]!r}, not an integer from 0 to {top}"
    cached = value["cached_gaussian"]
    if isinstance(cached, bool) or not isinstance(cached, (int, float)):
        return f".cached_gaussian is {cached!r}, not a number"
    try:
        np.random.RandomState().set_state((value["name"], np.asarray(value["keys"], dtype=np.uint32),
                                           value["pos"], value["has_gauss"], cached))
    except (TypeError, ValueError, OverflowError, IndexError) as exc:
        return f" is refused by numpy.random.set_state ({exc})"
    return None
