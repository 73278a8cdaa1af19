"""Build attrs records from TOML tables with errors that name the field and the fix.

A typo in a config key should not be silently ignored and a string where a number belongs should
not fail deep inside a backend, so every table is checked against its attrs class: unknown keys
(with a "did you mean"), wrong types, and the class's own validators, all reported as
``ConfigError`` with the dotted path (``generation.temperature``).
"""

from __future__ import annotations

import difflib
import json
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from polyrl.errors import ConfigError
from polyrl.trl_names import trl_fix, trl_value_fix
from polyrl.validators import PAIR_RULES, RULES, check_pair, rule_key, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T", bound=attrs.AttrsInstance)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is not None:  # tuple[float, float], not just "tuple"
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _is_table(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping)


def _array(tp: Any) -> tuple[list[Any], bool] | None:
    """(the item types, whether the length is fixed) when ``tp`` is an array type, else None:
    ``list[str]`` -> ([str], False), ``tuple[float, float]`` -> ([float, float], True)."""
    origin = typing.get_origin(tp)
    if not (origin in (tuple, list, typing.Sequence) or tp in (tuple, list)):
        return None
    args = [a for a in typing.get_args(tp) if a is not Ellipsis]
    return args, origin is tuple and len(args) > 1 and Ellipsis not in typing.get_args(tp)


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any or tp is typing.Any:
        return True
    if _is_union(tp):
        return any(_matches(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    array = _array(tp)
    if array is not None:
        args, fixed = array
        if not isinstance(value, (list, tuple)):
            return False
        if fixed:
            return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args))
        return not args or all(_matches(v, args[0]) for v in value)
    if _is_table(tp):
        return isinstance(value, Mapping)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # a type we do not check (e.g. Literal handled by validators)


#: How a value of each plain type is written in TOML, one and several.
_WORDS = {bool: ("true or false without quotes", "true or false values"),
          int: ("a whole number (no quotes, no decimal point)", "whole numbers (no quotes, no decimal point)"),
          float: ("a number (no quotes)", "numbers (no quotes)"),
          str: ("a quoted string", "quoted strings")}


def _written(tp: Any, plural: bool = False) -> str:
    """How a ``tp`` is written in TOML, for a fix: "a quoted string", "an array of quoted strings".
    Why by the type, items included: "write an array" answered ``report_to = [1]``, an array already."""
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if float in args:  # a number covers a whole one
            args = [a for a in args if a is not int]
        return " or ".join(_written(a, plural) for a in args)
    if tp in _WORDS:
        return _WORDS[tp][plural]
    array = _array(tp)
    if array is not None:
        args, fixed = array
        items = f" of {f'{len(args)} ' if fixed else ''}{_written(args[0], True)}" if args else ""
        return ("arrays" if plural else "an array") + items
    if _is_table(tp):
        return "tables" if plural else "a table"
    return f"a {_type_name(tp)}"


def _example(tp: Any) -> str | None:
    """A value of ``tp`` to show in its fix where the words alone leave the form open (text, arrays
    of any length, tables), else None."""
    if _is_union(tp):
        return next((e for a in typing.get_args(tp) if a is not type(None) and (e := _example(a))), None)
    if tp is str:
        return '"..."'
    array = _array(tp)
    if array is not None and not array[1]:  # a fixed length's items are the rule's (AdamW's betas)
        inner = _example(array[0][0]) if array[0] else None
        return f"[{inner}, {inner}]" if inner else "[...]"
    if _is_table(tp):
        return "{ key = value }"
    return None


def _type_fix(tp: Any) -> str:
    optional = _is_union(tp) and type(None) in typing.get_args(tp)
    example = _example(tp)
    return (f"write {_written(tp)}" + (f", e.g. {example}" if example else "")
            + (", or remove the key" if optional else ""))


def check_type(value: Any, tp: Any, field: str) -> None:
    """``value`` is a ``tp`` as TOML writes it (a bool is no number: TOML's ``true`` is not 1), else
    one ConfigError naming ``field`` with the fix the type gives (TRL's spelling of the value first).
    The one type rule of every config key: ``algorithm.name = 3`` was "must be a string", no fix."""
    if not _matches(value, tp):
        raise ConfigError(f"expected {_type_name(tp)}, got {type(value).__name__} {shown(value)}",
                          field=field, fix=trl_value_fix(field, value) or _text_fix(field, value, tp) or _type_fix(tp))


def _text_fix(field: str, value: Any, tp: Any) -> str | None:
    """The line to write for a text that holds a value of ``tp`` (``lr = "1e-5"``, ``ignore_eos =
    "true"``, ``stop = "###"`` for an array of texts), else None. Why: "write a number (no quotes)"
    left the user to find which quotes, and the array form to guess."""
    if not isinstance(value, str):
        return None
    key = field.rpartition(".")[2]
    if _matches([value], tp):
        return f"write {key} = [{json.dumps(value)}] (an array, even of one)"
    try:
        literal = tomllib.loads(f"value = {value.strip()}")["value"]
    except (tomllib.TOMLDecodeError, ValueError):  # not a TOML value; ValueError: int()'s digit limit
        return None
    if isinstance(literal, str) or (isinstance(literal, float) and not math.isfinite(literal)) or not _matches(literal, tp):
        return None
    return f"write {key} = {value.strip()} without quotes (in quotes it is text)"


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
    if close:
        return f"did you mean {close[0]!r}?"
    return _trl_typo_fix(key, value) or f"valid keys: {', '.join(sorted(valid))}"


def _trl_typo_fix(key: str, value: Any) -> str | None:
    """The fix for a misspelt ``GRPOConfig`` name (``lerning_rate``): the TRL name it is close to
    and where polyrl has it. Why: such a typo matched no key of the table, so the fix was the list
    of valid keys, where neither ``learning_rate`` nor ``lr`` looks like what was written."""
    close = trl_typo(key)
    fix = trl_fix(close, value) if close else None
    return f"did you mean TRL's {close!r}? {fix}" if close and fix else None


def trl_typo(key: str) -> str | None:
    """The ``GRPOConfig`` name ``key`` is a close misspelling of (``lerning_rate``), else None."""
    from polyrl.trl_names import TRL_NAMES

    close = difflib.get_close_matches(key, list(TRL_NAMES), n=1, cutoff=0.8)
    return close[0] if close else None


def key_typo(key: str) -> str | None:
    """The polyrl key (of any table) ``key`` is a close misspelling of (``temprature``), else None."""
    from polyrl.config import section_classes  # the sections' classes import this module

    names = {f.name for cls in section_classes().values() for f in attrs.fields(cls) if f.init}
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.8)
    return close[0] if close else None


def build(cls: type[T], data: Any, path: str) -> T:
    """Construct ``cls`` from a TOML table, validating keys and types."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a table, got {type(data).__name__}", field=path, fix=_type_fix(dict))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = unknown[0]
        fix = unknown_key_fix(key, data[key], list(fields), getattr(cls, "KEY_HINTS", None))
        raise ConfigError(f"unknown key {key!r}", field=f"{path}.{key}", fix=fix)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        field = f"{path}.{name}"
        check_type(value, hints.get(name, Any), field)
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
