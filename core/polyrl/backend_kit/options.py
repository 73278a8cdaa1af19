"""Reading a backend's own switches from ``[backends.options]`` (``EngineConfig.options``).

Why typed readers: the table is free-form (each backend owns its keys), so nothing upstream checks
a value; a backend reading ``options.get(...)`` raw would take ``"no"`` as true or fail deep inside
a train step on ``"abc"``. Each reader names ``backends.options.<key>`` and the fix instead.
``check_option_keys`` refuses keys no backend of the run reads (the core calls it before loading).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError


def _field(name: str) -> str:
    return f"backends.options.{name}"


def bool_option(options: Mapping[str, Any], name: str, default: bool, fix: str) -> bool:
    """``backends.options.<name>`` (``default`` when absent); anything but a boolean is a
    ConfigError naming the field, so ``"no"`` is never read as true."""
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"backends.options.{name} must be true or false, not {value!r}",
                          field=_field(name), fix=fix)
    return value


def int_option(options: Mapping[str, Any], name: str, default: int, minimum: int, fix: str) -> int:
    """``backends.options.<name>``: a whole number >= ``minimum`` (``default`` when absent).
    ``2.0`` and ``"5"`` are refused too: a config that means a count writes an integer."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"backends.options.{name} must be an integer >= {minimum}, not {value!r}",
                          field=_field(name), fix=fix)
    return value


def float_option(options: Mapping[str, Any], name: str, default: float, minimum: float, fix: str) -> float:
    """``backends.options.<name>``: a finite number >= ``minimum`` (``default`` when absent)."""
    value = options.get(name, default)
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < minimum):
        raise ConfigError(f"backends.options.{name} must be a finite number >= {minimum}, not {value!r}",
                          field=_field(name), fix=fix)
    return float(value)


def text_option(options: Mapping[str, Any], name: str, default: str | None, fix: str) -> str | None:
    """``backends.options.<name>``: a non-empty string (``default``, possibly None, when absent)."""
    if name not in options:
        return default
    value = options[name]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"backends.options.{name} must be a non-empty string, not {value!r}",
                          field=_field(name), fix=fix)
    return value


def choice_option(options: Mapping[str, Any], name: str, default: str, choices: tuple[str, ...], fix: str) -> str:
    """``backends.options.<name>``: one of ``choices`` (``default`` when absent)."""
    value = options.get(name, default)
    if not isinstance(value, str) or value not in choices:
        allowed = ", ".join(f'"{c}"' for c in choices)
        raise ConfigError(f"backends.options.{name} must be one of {allowed}, not {value!r}",
                          field=_field(name), fix=fix)
    return value


def table_option(options: Mapping[str, Any], name: str, fix: str) -> dict[str, Any]:
    """``backends.options.<name>``: a TOML table with string keys (``{}`` when absent), for a
    backend that passes a library's own settings through; a string or list is refused, never
    splatted into the library's keyword arguments."""
    value = options.get(name, {})
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ConfigError(f"backends.options.{name} must be a table of settings, not {value!r}",
                          field=_field(name), fix=fix)
    return dict(value)


#: Tokens (padded rows x width) per no-grad forward when a backend scores many sequences.
SCORE_BATCH_TOKENS = 8192
#: The keys ``scoring_options`` reads: every backend with the shared-prompt scorer declares them.
SCORING_KEYS = ("bucket_call_tokens", "score_batch_tokens", "shared_prompt_forward")


def scoring_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The switches of the scoring built on ``polyrl.backend_kit.batching`` (torch and MLX read the
    same three), checked: ``shared_prompt_forward``, ``bucket_call_tokens``, ``score_batch_tokens``."""
    from polyrl.backend_kit.batching import BUCKET_CALL_TOKENS

    return {
        "shared_prompt_forward": bool_option(options, "shared_prompt_forward", True,
                                             fix="write shared_prompt_forward = false (or remove it)"),
        "bucket_call_tokens": int_option(options, "bucket_call_tokens", BUCKET_CALL_TOKENS, minimum=0,
                                         fix=f"give the tokens one extra forward costs (default {BUCKET_CALL_TOKENS})"),
        "score_batch_tokens": int_option(options, "score_batch_tokens", SCORE_BATCH_TOKENS, minimum=1,
                                         fix=f"give tokens per scoring forward (default {SCORE_BATCH_TOKENS})"),
    }


def check_option_keys(options: Mapping[str, Any], known: Mapping[str, tuple[str, ...]]) -> None:
    """Refuse a key of ``options`` that none of ``known`` (backend name -> the keys it reads)
    reads: a typo would otherwise be silently ignored. Names the closest key, else all of them."""
    every = sorted({key for keys in known.values() for key in keys})
    unknown = sorted(set(options) - set(every))
    if not unknown:
        return
    key = unknown[0]
    backends = ", ".join(sorted(known))
    close = difflib.get_close_matches(key, every, n=1)
    fix = (f"did you mean {close[0]!r}?" if close
           else f"remove it; the keys {backends} read: {', '.join(every) or 'none'}")
    raise ConfigError(f"unknown option {key!r}: no backend of this run ({backends}) reads it",
                      field=_field(key), fix=fix)
