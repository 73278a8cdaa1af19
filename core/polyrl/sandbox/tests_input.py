"""The tests' patched ``input``, called for the sample's ``input()`` (``server._TestsInput``).

Why: KodCode-style tests give a solution its input with ``mock.patch('builtins.input', ...)`` or
``monkeypatch.setattr('builtins.input', ...)``. That patches the trainer's ``input``, while the
sample's ``input()`` ran in its own process on an empty stdin (EOFError), so a right solution
scored 0. Now a call the tests make while their ``input`` is patched lets the sample ask for it:
each ``input(prompt)`` there sends the prompt, the tests' function is called here with it, and
what it returns (plain data only) or raises goes back. The sample reaches nothing else this way:
only the function the tests installed, only with a str, only during a call they made."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

from polyrl.sandbox.values import encode

#: The trainer's own ``input``, as this module was imported: any other is the tests' patch.
ORIGINAL_INPUT = builtins.input
#: Most characters of a prompt the sample may send (``server.MAX_PROMPT``).
MAX_PROMPT = 4096


def patched_input(written: Mapping[str, Any]) -> Callable[..., Any] | None:
    """The tests' ``input`` where they replaced it, else None: in their ``builtins`` view
    (``builtins.input = f``, ``monkeypatch.setattr(builtins, 'input', f)``: ``written``) or in the
    real module (``mock.patch('builtins.input')``, ``monkeypatch.setattr('builtins.input', f)``)."""
    current = written.get("input", builtins.input)
    return None if current is ORIGINAL_INPUT else current


def well_formed(message: object) -> bool:
    """Whether the sample's ``{"input": ...}`` is what ``server._TestsInput`` sends: no argument or
    one str prompt."""
    return (isinstance(message, list) and len(message) <= 1
            and all(type(p) is str and len(p) <= MAX_PROMPT for p in message))


def reply(tests_input: Callable[..., Any], prompt: list[str]) -> dict[str, Any]:
    """The tests' ``input`` called as the sample called its own: ``{"v": value}`` (plain data) or
    ``{"e": [name, text]}``, raised there as the builtin exception of that name."""
    try:
        value = tests_input(*prompt)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the tests' input raising (a side_effect list run out),
        # ``SystemExit`` too: raised in the sample, it ends the call as it would have here, and the
        # sample, waiting for this reply, never reads the next request as one
        return {"e": [type(exc).__name__, str(exc)[:300]]}
    data = encode(value)
    if data is None:
        return {"e": ["TypeError", f"the tests' input returned a {type(value).__name__}, not plain data"]}
    return {"v": data}
