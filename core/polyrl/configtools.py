"""Build attrs records from TOML tables with errors that name the field and the fix.

A typo in a config key should not be silently ignored and a string where a number belongs should
not fail deep inside a backend, so every table is checked against its attrs class: unknown keys
(with a "did you mean"), wrong types, and the class's own validators, all reported as
``ConfigError`` with the dotted path (``generation.temperature``).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from polyrl.errors import ConfigError
from polyrl.trl_names import trl_fix, trl_value_fix
from polyrl.validators import PAIR_RULES, RULES, check_pair, rule_key, shown

T = TypeVar("T", bound=attrs.AttrsInstance)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is not None:  # tuple[float, float], not just "tuple"
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any or tp is typing.Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (tuple, list, typing.Sequence) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if not args:
            return True
        if origin is tuple and len(args) > 1 and Ellipsis not in typing.get_args(tp):
            return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args))
        return all(_matches(v, args[0]) for v in value)
    if origin in (dict, Mapping) or tp in (dict, Mapping) or origin is typing.Mapping:
        return isinstance(value, Mapping)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # a type we do not check (e.g. Literal handled by validators)


def _type_fix(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (list, tuple) or tp in (list, tuple):
        return "write an array, e.g. [...]"
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return "write a table, e.g. { key = value }"
    args = set(typing.get_args(tp)) or {tp}
    if args & {int, float}:
        kind = "a number (no quotes)" if float in args else "a whole number (no quotes, no decimal point)"
        return f"write {kind}" + (", or remove the key" if type(None) in args else "")
    if bool in args:
        return "write true or false without quotes"
    if str in args:
        return 'write a quoted string, e.g. "..."'
    return f"write a {_type_name(tp)}"


def unknown_key_fix(key: str, value: Any, valid: list[str], hints: Mapping[str, str] | None = None,
                    other_tables: bool = True) -> str:
    """The fix for an unknown key: the section's own hint (e.g. peft's names under [lora]), then
    where TRL's ``GRPOConfig`` name lives in polyrl, then (``other_tables``) the TOML table that
    has a key of that name, then a close valid key, then the valid keys."""
    if hints and key in hints:
        return hints[key]
    trl = trl_fix(key, value)
    if trl is not None:
        return trl
    from polyrl.config import key_owners  # the sections' classes import this module

    owners = key_owners(key) if other_tables else []
    if owners:  # a key of another table (`[train] lr`)
        table, _, name = owners[0].rpartition(".")
        return f"{name} belongs to another table: {' or '.join(owners)} (write it under [{table}])"
    close = difflib.get_close_matches(key, valid, n=1)
    return f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(sorted(valid))}"


def build(cls: type[T], data: Any, path: str) -> T:
    """Construct ``cls`` from a TOML table, validating keys and types."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a table, got {type(data).__name__}", field=path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = unknown[0]
        fix = unknown_key_fix(key, data[key], list(fields), getattr(cls, "KEY_HINTS", None))
        raise ConfigError(f"unknown key {key!r}", field=f"{path}.{key}", fix=fix)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = hints.get(name, Any)
        field = f"{path}.{name}"
        if not _matches(value, tp):
            raise ConfigError(f"expected {_type_name(tp)}, got {type(value).__name__} {shown(value)}",
                              field=field, fix=trl_value_fix(field, value) or _type_fix(tp))
        key = rule_key(field)  # the range rules first: their messages carry the fix
        if key in RULES:
            RULES[key].check(value, field)
        elif key in PAIR_RULES:
            check_pair(PAIR_RULES[key], value, field)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise exc.under(path) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc), field=path) from exc
