"""Validation of a reward's ``options`` table, shared by every reward that takes options.

Why one helper: each message has the same shape (the reward, the option, what is wrong, the fix),
and a user who mistypes an option in any reward should read the same kind of error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from polyrl.errors import RewardError


def merged(name: str, given: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``given``; an option the reward does not have is an error."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise RewardError(f"reward {name!r} has no option {unknown[0]!r}. Fix: use only "
                          f"{', '.join(sorted(defaults)) or 'no options'} in this reward's options")
    return {**defaults, **given}


def required_text(name: str, opts: Mapping[str, Any], key: str, example: str) -> str:
    """A non-empty string option with no usable default."""
    value = opts.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RewardError(f"reward {name!r} needs option {key!r}. Fix: set options.{key} = {example}")
    return value


def whole_number(name: str, opts: Mapping[str, Any], key: str, example: Any, minimum: int = 1) -> int:
    """An int option (not a bool) of at least ``minimum``."""
    value = opts[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RewardError(f"{name}: {key} must be a whole number >= {minimum}, got {value!r}. "
                          f"Fix: e.g. {key} = {example}")
    return value


def true_or_false(name: str, opts: Mapping[str, Any], key: str, fix: str) -> bool:
    """A boolean option: "no" would be truthy and 0 a silent reading, so anything but true or false
    is an error ending in ``fix``."""
    value = opts[key]
    if not isinstance(value, bool):
        raise RewardError(f"{name}: {key} must be true or false, got {value!r}. Fix: {fix}")
    return value


def positive_number(name: str, opts: Mapping[str, Any], key: str, example: Any, *,
                    integer: bool = False, zero: bool = False) -> float | int:
    """A finite number > 0 (>= 0 with ``zero``), optionally whole."""
    value = opts[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if ok:
        ok = value >= 0 if zero else value > 0
    if not ok:
        kind = "a whole number" if integer else "a number"
        raise RewardError(f"{name}: option {key} must be {kind} {'>= 0' if zero else '> 0'}, got {value!r}. "
                          f"Fix: e.g. {key} = {example}")
    return int(value) if integer else float(value)


def template_kwargs(name: str, opts: dict[str, Any]) -> dict[str, Any]:
    """A reward model's ``chat_template_kwargs`` option: extra variables for its own chat template
    (``polyrl.chat_kwargs.checked``'s rules; none by default), stored back in ``opts`` as a plain
    dict. Its own key, not ``model.chat_template_kwargs``: the reward model may be another family,
    whose template reads other variables (the TRL route fills it with TRL's, ``api.run_config``)."""
    from polyrl.chat_kwargs import checked
    from polyrl.errors import ConfigError

    try:
        opts["chat_template_kwargs"] = checked(opts["chat_template_kwargs"], "chat_template_kwargs",
                                               example="e.g. options.chat_template_kwargs = {enable_thinking = false}")
    except ConfigError as exc:
        raise RewardError(f"{name}: option {exc.field}: {exc.message}. Fix: {exc.fix}") from None
    return opts["chat_template_kwargs"]


def chat_template_choice(name: str, opts: Mapping[str, Any]) -> bool | str:
    """A reward model's ``chat_template`` option: "auto" (TRL's rule: the template for chat prompts
    only), true (every prompt through it) or false (never)."""
    value = opts["chat_template"]
    if not (isinstance(value, bool) or value == "auto"):
        raise RewardError(f"{name}: chat_template must be \"auto\", true or false, got {value!r}. "
                          'Fix: write chat_template = "auto" (the template for chat prompts only, as TRL), '
                          "true or false")
    return value
