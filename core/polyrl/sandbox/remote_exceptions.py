"""Exceptions the sample raised, as the tests here get them: the trainer's own types, plain data only.

Why a module of its own: which exception types may cross (never control flow: StopIteration; the
sample's SystemExit as ``SampleExit``), and how their arguments and attributes are read back bounded, is one rule set that
``runner`` and the harness both use, apart from the running of the tests.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from polyrl.sandbox.values import ProtocolError, decode

#: Most classes an exception class's lineage may name, and most stand-ins one sample may have made.
MAX_LINEAGE = 32
MAX_STAND_INS = 512
#: Most plain-data attributes of one exception the sample raised that the tests see (``exception_state``).
MAX_EXCEPTION_ATTRS = 32
#: Built-in exceptions a sample's call may raise here as themselves. Not StopIteration and
#: StopAsyncIteration: they are control flow (out of a call they end the tests' ``map`` early,
#: and ``all(map(f, xs))`` holds for any ``f``).
EXCEPTIONS = {name: kind for name, kind in vars(builtins).items()
              if isinstance(kind, type) and issubclass(kind, Exception)
              and not issubclass(kind, (StopIteration, StopAsyncIteration))}


class RemoteError(Exception):
    """An exception raised inside the sample whose type has no built-in counterpart here."""


class SampleExit(SystemExit):
    """The sample's own ``sys.exit(code)`` (or ``exit()``, ``raise SystemExit``) out of a call of the
    tests'. Why a ``SystemExit``: the tests' ``pytest.raises(SystemExit)``, ``assertRaises(SystemExit)``,
    ``contextlib.suppress(SystemExit)`` and ``except SystemExit`` around a right command-line
    ``main([])`` exiting 2 caught nothing (it came as a ``RemoteError``), so it scored 0. Why its own
    class: the tests' own ``sys.exit(0)`` ends a script run as a success, the sample's never does
    (``harness._run_steps``: one they leave uncaught fails the test, whatever its code)."""


#: The sample's control-flow exceptions the tests get as a class of their own (not ``EXCEPTIONS``).
CONTROL = {"SystemExit": SampleExit}


class IteratorEnd(RemoteError):
    """Python's own StopIteration raised inside the sample (an iterator of its ended): an error
    here, as every RemoteError, never control flow (``EXCEPTIONS``), except to the tests' ``next``
    given a default (``remote.tests_next``), which ends there as Python's does."""


def remote_exception(exc: Any, classes: Callable[[Any], type[BaseException] | None] | None = None) -> BaseException:
    """The exception the sample raised: an instance of the stand-in ``classes`` gives for its
    class's lineage (``Session.exception_class``), else of the built-in type of its name when
    there is one (so ``except ValueError`` in a test works; ``SampleExit`` for ``SystemExit``), else
    ``RemoteError``; never a type that stops the trainer or steers the tests' control flow (see
    ``EXCEPTIONS``, ``SampleExit``). It carries
    the plain data the sample sent of it (``exception_state``)."""
    name, message = exception_parts(exc)
    kind = classes(exc[2]) if classes is not None and isinstance(exc, list) and len(exc) >= 3 else None
    if kind is None or kind is RemoteError:
        kind = EXCEPTIONS.get(name) or CONTROL.get(name)
    if kind is not None:
        args, attrs = exception_state(exc)
        made = _exception_of(kind, message, args)
        if made is not None:
            for attr, value in attrs.items():
                if not hasattr(kind, attr):  # never over the class's own (``args``, ``with_traceback``)
                    setattr(made, attr, value)
            return made
    if name == "StopIteration":  # Python's own: a class of the sample's derived from it got a stand-in above
        return IteratorEnd(f"{name}: {message}")
    return RemoteError(f"{name}: {message}")


def _exception_of(kind: type[BaseException], message: str, args: tuple[Any, ...] | None) -> BaseException | None:
    """``kind(*args)`` when its text is the sample's message (so ``e.args == (404, 'gone')`` and a
    KeyError's text hold as in the sample), else ``kind(message)``, else None."""
    if args is not None:
        try:
            made = kind(*args)
            if str(made) == message:
                return made
        except Exception:  # noqa: BLE001 - arguments this class does not take: the message then
            pass
    try:
        return kind(message)
    except Exception:  # noqa: BLE001 - a built-in exception needing other arguments
        return None


def exception_state(exc: Any) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
    """(``args``, instance attributes) of an exception the sample described, as plain data
    (``values.decode``: exact built-in types only; anything malformed is left out). Why: only the
    message crossed, so a right solution failed ``with pytest.raises(AppError) as e: ...; assert
    e.value.code == 404``. Never a pickle, never an object of the sample's."""
    state = exc[3] if isinstance(exc, list) and len(exc) == 4 and isinstance(exc[3], dict) else {}
    args: tuple[Any, ...] | None = None
    attrs: dict[str, Any] = {}
    try:
        decoded = decode(state["args"]) if state.get("args") is not None else None
        args = decoded if type(decoded) is tuple else None
    except ProtocolError:
        pass
    pairs = state.get("attrs")
    for pair in pairs[:MAX_EXCEPTION_ATTRS] if isinstance(pairs, list) else ():
        if isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is str and len(pair[0]) <= 100 \
                and pair[0].isidentifier() and not pair[0].startswith("__"):
            try:
                attrs[pair[0]] = decode(pair[1])
            except ProtocolError:
                continue
    return args, attrs


def exception_parts(exc: Any) -> tuple[str, str]:
    """(type name, message) of an exception the sample described as ``[name, message, ...]``
    (``server._describe``), bounded; anything else in that place is described, never converted
    (``str`` of a deep list raises)."""
    if isinstance(exc, list) and len(exc) in (2, 3, 4) and type(exc[0]) is str and type(exc[1]) is str:
        return exc[0][:100], exc[1][:300]
    return "RemoteError", "the sample described its exception in a malformed way"


def exception_text(exc: BaseException) -> str:
    """``Type: message`` of an exception raised here, bounded, even when its ``str`` fails."""
    try:
        text = str(exc)[:200]
    except BaseException:  # noqa: BLE001 - an exception whose str() fails
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
