"""How large chat messages are, counted without serialising them: the size bounds of an
episode (``EpisodeLimits.may_fit``) and of an environment's answers (``spec``) judge a 100 MB
value at the cost of their budget, never of the value."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def content_chars(messages: Sequence[Mapping[str, Any]], budget: int | None = None) -> int:
    """Characters of the messages: each one's role and text content (what a template renders of
    every message) and its other keys (``name``, ``tool_call_id``, the environment's own),
    names and values as their JSON would about spell them. Why those keys: a template may render
    them and the episode keeps them all (a rollout's checkpoint and completions.jsonl write them),
    so a 100 MB value under a key of the environment's own passed every bound. The keys' values
    are walked only until the count passes ``budget`` (None: to the end), so a value of gigabytes
    costs no more than the budget; roles and contents are counted whole (their length is known).
    Why the role: a template renders it too, and an environment's 100 MB role string was
    rendered and kept as freely as an uncounted key's value once was."""
    total = sum(len(m[key]) for m in messages for key in ("role", "content") if isinstance(m.get(key), str))
    for m in messages:
        if budget is not None and total > budget:
            break
        extra = {key: value for key, value in m.items() if key not in ("role", "content")}
        if extra:
            total += json_chars(extra, None if budget is None else budget - total)
    return total


_END = object()


def json_chars(value: Any, budget: int | None = None) -> int:
    """About the characters of ``value``'s JSON (a str's escapes aside), counted until the count
    passes ``budget`` (None: to the end). A walk with a stack of iterators: no recursion, and it
    stops within one item of the budget however large or deep ``value`` is."""
    total = 0
    stack: list[Any] = [iter((value,))]
    while stack and (budget is None or total <= budget):
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        total += 1  # its separator (a comma or a colon)
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, Mapping):
            total += 2
            stack.append(itertools.chain.from_iterable(item.items()))
        elif isinstance(item, (list, tuple)):
            total += 2
            stack.append(iter(item))
        elif isinstance(item, np.ndarray):  # written as its list: a digit and a comma an element at least
            total += 2 + 2 * int(item.size)
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2  # digits (at most), sign
        else:  # a float or a numpy number
            total += 24
    return total


__all__ = ["content_chars", "json_chars"]
