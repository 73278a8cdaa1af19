"""JSON strings that 🤗 datasets reads as other values: refused, naming the line, column and value.

Why: a JSON column whose rows hold more than one type (``"007"`` in one row, ``5`` in another)
is one pyarrow cannot read, and datasets falls back to pandas, which turns every string that looks
like a number, a boolean or a missing value into one: ``"007"`` is ``7``, ``"1.50"`` is ``1.5``,
``"true"`` is ``True``, ``"NaN"`` and ``"null"`` are None, at any depth. polyrl types JSON rows as
datasets does (``data_sources.typed_as_datasets``), so a reward comparing answers got the number,
silently, as TRL's would; the file says a string, so no reading of it is right but the user's.
A column of dates or times (``"2024-01-05"``) is another matter: pyarrow reads such strings as
timestamps whatever the other rows hold, as it does for every datasets user, so they are left as
datasets gives them (refusing them refused a column of one type, calling it mixed).

An integer is refused the same way when datasets does not hold its value: one past int64 (a
factorial, a big id) is read as a float64 of 16 digits, or wrapped modulo 2**64 in a .json array
(``123456789012345678901`` read as ``1.277632457008837e+19``), and one past 2**53 in a column
that also holds a fraction loses its last digits; the answer a reward compared was another number.
(``5`` read as ``5.0`` beside ``5.5`` is the same value and stays as datasets gives it.)
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from polyrl.errors import ConfigError


#: what pyarrow makes of a date or time string in any JSON column (not pandas' guess): kept
_TIMES = (datetime.date, datetime.time)


def _kept(typed: Any) -> bool:
    """Whether ``typed`` (datasets' value for a string of the file) is a reading left alone."""
    return type(typed) is str or isinstance(typed, _TIMES)


def _same_number(raw: int, typed: Any) -> bool:
    """Whether ``typed`` (datasets' value for the JSON integer ``raw``) is that number (``5.0`` for ``5``)."""
    return isinstance(typed, (int, float)) and not isinstance(typed, bool) and typed == raw


def _walk(raw: Any, typed: Any, path: str) -> tuple[str, str | int, Any] | None:
    """(where, the string or integer, what it became) for the first string of ``raw`` that ``typed``
    does not hold as a string (nor as a date or time), or integer it does not hold as that number;
    None when every one is kept."""
    if type(raw) is str:
        return None if _kept(typed) else (path, raw, typed)
    if type(raw) is int:
        return None if _same_number(raw, typed) else (path, raw, typed)
    if isinstance(raw, dict) and isinstance(typed, dict):
        for key, value in raw.items():
            if (found := _walk(value, typed.get(key), f"{path}.{key}")) is not None:
                return found
    elif isinstance(raw, list) and isinstance(typed, list) and len(raw) == len(typed):
        for i, (value, kept) in enumerate(zip(raw, typed)):
            if (found := _walk(value, kept, f"{path}[{i}]")) is not None:
                return found
    return None


def first_coerced(raw_rows: Sequence[Any], typed_rows: Sequence[Any]) -> tuple[int, str, str, str | int, Any] | None:
    """(row, column, where in it, the string or integer, what datasets made of it) for the first
    string in ``raw_rows`` (Python's parse) that ``typed_rows`` (datasets') does not hold as that
    string, or integer it does not hold as that number."""
    for i, (raw, typed) in enumerate(zip(raw_rows, typed_rows)):
        for column, value in raw.items():
            kind = type(value)
            if kind is str:
                if not _kept(typed.get(column)):
                    return i, column, "", value, typed.get(column)
            elif kind is int:
                if not _same_number(value, typed.get(column)):
                    return i, column, "", value, typed.get(column)
            elif kind is dict or kind is list:
                found = _walk(value, typed.get(column), "")
                if found is not None:
                    return i, column, found[0], found[1], found[2]
    return None


def refuse_coerced(raw_rows: Sequence[Any], typed_rows: Sequence[Any], where: Any, field: str) -> None:
    """Raise naming the first string datasets reads as another value; ``where(row)`` says where
    a row is (``data/x.jsonl line 7 (row 5)``)."""
    found = first_coerced(raw_rows, typed_rows)
    if found is None:
        return
    row, column, inner, text, value = found
    at = f" (at {column}{inner})" if inner else ""
    if isinstance(text, int):
        digits = str(text) if len(str(text)) <= 40 else str(text)[:40] + "..."
        raise ConfigError(
            f"{where(row)}: column {column!r}{at} holds the integer {digits}, which 🤗 datasets (and so TRL) "
            f"reads as {value!r}, another number ({_why_other(text)})",
            field=field, fix=f"quote {column + inner!r} as a string in every row (\"{digits}\"), so its digits "
                             "reach the rewards as written")
    became = "null (a missing value)" if value is None else f"{value!r} ({type(value).__name__})"
    shown = text if len(text) <= 40 else text[:40] + "..."
    raise ConfigError(
        f"{where(row)}: column {column!r}{at} holds the string {shown!r}, which 🤗 datasets (and so TRL) reads as "
        f"{became}, since that column holds other types in other rows", field=field,
        fix=f"give {column + inner!r} one JSON type in every row: quote every value as a string, or write every "
            f"one as {_unquoted(value)} without quotes")


def _why_other(number: int) -> str:
    """Why datasets changed the integer ``number``, for the error."""
    if -(2**63) <= number < 2**63:
        return "its column holds fractions too, and a float64 keeps about 16 digits"
    return "pyarrow holds integers up to int64: past it a float64 of about 16 digits, or wrapped"


def _unquoted(value: Any) -> str:
    """What the other rows' values are, for the fix."""
    if value is None:
        return "an unquoted value (null where a row has none)"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "a JSON object or array"
