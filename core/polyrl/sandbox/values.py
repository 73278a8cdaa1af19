"""Strictly typed values that cross between a sample and the harness.

Why strict: the verdict is computed outside the sample, on values the sample sends back. A value
is rebuilt here only from exact built-in types (``type(x) is int``, never a subclass), so nothing
the sample defines (an ``__eq__`` that always says yes, a ``str`` subclass) reaches a comparison.
Anything else stays in the sample and is referred to by a handle.

The sample's program is this file followed by ``server.py`` (run alone under ``python -I -S``), so
both sides share one encoder; nothing here imports more than ``math`` because every import in the
sample's program is paid again for every sample.
"""

from __future__ import annotations

import math

#: Deepest container nesting accepted (the sample could send a list nested a million deep).
MAX_DEPTH = 64
#: Most distinct values of one container that may share a hash. Int, float and tuple hashes are
#: not randomised, so a sample can send values built to collide (multiples of 2**61 - 1): a set,
#: a dict, or a test's ``set(result)`` of n of them costs n**2 comparisons in the trainer, holding
#: the GIL long past the sample's timeout. Honest data has one or two values per hash.
MAX_SAME_HASH = 16
#: Most items the sample sends for one iteration of a value of its (``server``: more is an
#: OverflowError; ``remote.Remote._check_count`` reads that as more items than a smaller ``len``).
MAX_ITEMS = 100_000


class ProtocolError(Exception):
    """A message that is not a well-formed encoded value (the sample broke the protocol)."""


def encode(value: object, depth: int = 0) -> list | None:
    """``value`` as a tagged JSON list, or None when it is not plain data."""
    if depth > MAX_DEPTH:
        return None
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        try:
            return ["i", str(value)]
        except ValueError:  # more digits than sys.get_int_max_str_digits(): hex has no such limit,
            return ["h", format(value, "x")]  # and a right ``2 ** 100000`` crossed as no value at all
    if kind is float:
        return ["f", repr(value)]
    if kind is complex:
        return ["c", repr(value.real), repr(value.imag)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if kind in (list, tuple, set, frozenset):
        items = [encode(item, depth + 1) for item in value]
        if any(item is None for item in items):
            return None
        return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[kind], items]
    if kind is dict:
        pairs = [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return ["d", pairs]
    return None


def item_key(item: object) -> str:
    """What two readings of one value share for the same item, the one rule of "the same item"
    (``reader.same_items`` of two readings, ``shrinking``'s multisets of lost and gained items):
    plain data exactly (``encode``: ``nan`` is itself, ``1`` is not ``True``, ``-0.0`` is not
    ``0.0``); an object of the sample's (``LIVES_IN_SAMPLE``) by its type's name, as each reading
    is a new handle to it; another object by its type's name."""
    if getattr(type(item), "LIVES_IN_SAMPLE", False):
        return "object " + str(getattr(item, "_type", ""))
    encoded = encode(item)
    return repr(encoded) if encoded is not None else "type " + type(item).__name__


def spread(items: list) -> list:
    """``items``, unless more than ``MAX_SAME_HASH`` distinct ones share a hash (``ProtocolError``).
    Equal values (``[0] * 1000``) are one value; the cost is at most ``MAX_SAME_HASH`` comparisons
    per item."""
    if len(items) <= MAX_SAME_HASH:
        return items
    classes: dict = {}
    for item in items:
        same_hash(classes, item)
    return items


def same_hash(classes: dict, item: object) -> None:
    """Add ``item`` to ``classes`` (hash -> its distinct values so far): ``spread``'s check, one
    item at a time (``reader.Reader`` checks a value read in parts)."""
    if getattr(type(item), "LIVES_IN_SAMPLE", False):  # a ``Remote``: its hash is a request to the sample
        return
    try:
        key = hash(item)
    except TypeError:  # a list or dict: never a set member or a dict key
        return
    same = classes.get(key)
    if same is None:
        classes[key] = [item]
        return
    for other in same:
        if item is other or item == other:
            return
    same.append(item)
    if len(same) > MAX_SAME_HASH:
        raise ProtocolError("values built to collide in hash tables")


def _float(text: object) -> float:
    if not isinstance(text, str) or len(text) > 40:
        raise ProtocolError("bad float")
    value = float(text)
    if not (math.isfinite(value) or text in ("inf", "-inf", "nan")):
        raise ProtocolError("bad float")
    return value


def decode(data: object, depth: int = 0) -> object:
    """The value ``encode`` described; ``ProtocolError`` for anything malformed."""
    if depth > MAX_DEPTH:
        raise ProtocolError("nested too deep")
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ProtocolError(f"not an encoded value: {str(data)[:80]}")
    tag, rest = data[0], data[1:]
    try:
        if tag == "n" and not rest:
            return None
        if tag == "b" and len(rest) == 1 and type(rest[0]) is bool:
            return rest[0]
        if tag == "i" and len(rest) == 1 and isinstance(rest[0], str):
            return int(rest[0])
        if tag == "h" and len(rest) == 1 and type(rest[0]) is str and rest[0].lstrip("-").isalnum():
            return int(rest[0], 16)
        if tag == "f" and len(rest) == 1:
            return _float(rest[0])
        if tag == "c" and len(rest) == 2:
            return complex(_float(rest[0]), _float(rest[1]))
        if tag == "s" and len(rest) == 1 and type(rest[0]) is str:
            return rest[0]
        if tag == "y" and len(rest) == 1 and isinstance(rest[0], str):
            return bytes.fromhex(rest[0])
        if tag in ("l", "t", "S", "F") and len(rest) == 1 and isinstance(rest[0], list):
            items = spread([decode(item, depth + 1) for item in rest[0]])
            return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
            for pair in rest[0]:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ProtocolError("bad dict item")
            keys = spread([decode(pair[0], depth + 1) for pair in rest[0]])
            values = spread([decode(pair[1], depth + 1) for pair in rest[0]])
            return dict(zip(keys, values))
    except ProtocolError:
        raise
    except (ValueError, TypeError) as exc:  # int('x'), unhashable set items, ...
        raise ProtocolError(f"bad {tag!r} value: {exc}") from None
    raise ProtocolError(f"unknown value tag {tag!r}")
