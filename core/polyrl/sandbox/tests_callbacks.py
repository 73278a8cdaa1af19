"""The tests' own functions handed to the solution (``apply(lambda x: x * 2, xs)``, ``key=...``).

Why: only data crossed to the sample, so a lambda, a ``def`` of the tests' or a bound method of
their object as an argument raised "cannot be sent" and a right ``apply``/``sort_by``/``retry``
scored 0. Now such a function (or a plain class of theirs, ``make(ListNode, xs)``: ``is_tests_class``)
crosses as an index (``["K", i]``); the sample holds a proxy that
can only be called (``server._TestsCallback``: no attributes, so no ``__globals__`` or closure of
theirs), and each call sends its arguments here, the function is called in the tests' process on
them (the sample's values as stand-ins, compared by the harness's own rules) and what it returns
goes back as any argument does (``Session.arg``). What the sample learns is only what the tests'
function answers, as it would in-process. Two things are stricter than in-process, because the
solution is the one being graded: an exception's text never goes back (an assert's message may
hold an expected value), only its class name; and an ``AssertionError`` raised in the tests'
function (or a test runner's outcome, ``pytest.fail``, or ``sys.exit(1)``: ``failed_check``)
fails the test that was running, whether or not the sample caught it.

An object of a class the tests define (a ``TreeNode`` of theirs) crosses the same way (``["O", i]``):
the sample's proxy reads its attributes back (``node.val``, ``node.left``: data, or another such
proxy; a method is a function as above) and may set new or instance attributes (``node.left =
x``), never a name with a leading ``__`` nor code its class defines (a method of the tests' replaced
by a no-op would pass their later call of it), but for a slot or property of theirs (``__slots__``)
and a plain default value of the class's (``next = None``).
``len(node)``, ``bool``, a loop over it, ``node[k]``,
``x in node``, ``hash`` and comparisons (``USES``) are Python's own operations done here on the
object (a loop's items sent at once, at most ``MAX_ITEMS``), their answers sent back as a call's
are: the tests' own ``__len__``/``__eq__``... run in the tests' process, never the sample's.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any

from polyrl.sandbox.channel import Channel, SampleStopped
from polyrl.sandbox.values import MAX_ITEMS

#: Most arguments one call back may carry.
MAX_ARGS = 256
#: The module name of what the tests define (``harness.run_tests``' module).
TESTS_MODULE = "tests"


def is_tests_object(value: Any) -> bool:
    """Whether ``value`` is an instance of a class the tests define (not an exception, not a class)."""
    return (getattr(type(value), "__module__", None) == TESTS_MODULE and not isinstance(value, (type, BaseException)))


def is_tests_class(value: Any) -> bool:
    """Whether ``value`` is a plain class the tests define (``make(ListNode, xs)``), handed to the
    solution as a function it may only call: calling it makes their object, which crosses as one
    (``["O", i]``); its class attributes and methods stay theirs. No exception class (the sample
    would need a real class to catch it) and no metaclass of theirs (its ``__call__`` is code of
    theirs the sample could not reach through a plain class either)."""
    return (type(value) is type and value.__module__ == TESTS_MODULE and not issubclass(value, BaseException))


def well_formed_attribute(message: Any, handed: list[Any], writing: bool, channel: Channel) -> tuple[int, str, Any]:
    """(index, name, encoded value) of the sample's ``{"attr": [i, name]}`` or ``{"setattr": [i, name,
    value]}`` about an object of the tests' it was handed; anything else stops it as crashed."""
    size = 3 if writing else 2
    if (isinstance(message, list) and len(message) == size and type(message[0]) is int
            and 0 <= message[0] < len(handed) and is_tests_object(handed[message[0]])
            and type(message[1]) is str and message[1].isidentifier()):
        return message[0], message[1], message[2] if writing else None
    channel.dead = SampleStopped("crashed", "the sample read an object of the tests' it was not handed")
    raise channel.dead


def attribute_reply(obj: Any, name: str, value: Any, writing: bool,
                    send: Callable[[Any], Any]) -> tuple[dict[str, Any], bool]:
    """``getattr(obj, name)`` sent back, or ``setattr(obj, name, value)`` done (module doc); what it
    refuses or raises goes back as an AttributeError (or the exception's class)."""
    if name.startswith("__") or (writing and _class_defines(obj, name)):
        return {"e": ["AttributeError"]}, False
    if writing:
        return reply(lambda: setattr(obj, name, value), [], {}, send)
    return reply(lambda: getattr(obj, name), [], {}, send)


def _items(obj: Any) -> list[Any]:
    """``obj``'s items as a loop over it reads them, refused past ``MAX_ITEMS``."""
    items = list(itertools.islice(iter(obj), MAX_ITEMS + 1))
    if len(items) > MAX_ITEMS:
        raise OverflowError(f"more than {MAX_ITEMS} items")
    return items


#: What the sample may do with an object of the tests' beyond its attributes, done here by
#: Python's own operation on it: how -> (the number of the sample's values it takes, the operation).
USES: dict[str, tuple[int, Callable[..., Any]]] = {
    "len": (0, len), "bool": (0, bool), "iter": (0, _items), "hash": (0, hash),
    "getitem": (1, operator.getitem), "contains": (1, operator.contains),
    "==": (1, operator.eq), "!=": (1, operator.ne), "<": (1, operator.lt), "<=": (1, operator.le),
    ">": (1, operator.gt), ">=": (1, operator.ge)}


def well_formed_use(message: Any, handed: list[Any], channel: Channel) -> tuple[int, str, list[Any]]:
    """(index, how, encoded values) of the sample's ``{"use": [i, how, values]}`` of an object of the
    tests' it was handed (``len(node)``, ``node[0]``, ``node == x``); anything else stops it as crashed."""
    if (isinstance(message, list) and len(message) == 3 and type(message[0]) is int
            and 0 <= message[0] < len(handed) and is_tests_object(handed[message[0]])
            and type(message[1]) is str and message[1] in USES and isinstance(message[2], list)
            and len(message[2]) == USES[message[1]][0]):
        return message[0], message[1], message[2]
    channel.dead = SampleStopped("crashed", "the sample used an object of the tests' in a way it cannot")
    raise channel.dead


def _class_defines(obj: Any, name: str) -> bool:
    """Whether ``obj``'s class defines ``name`` as code setting it would shadow (a method, a
    ``classmethod``, a nested class, any callable or other descriptor). A slot or another data
    descriptor (a ``__slots__`` field, a property with its setter) is where the instance keeps its
    own value, set as in-process (a right ``invert`` of a slotted ``Node`` setting ``n.left`` was
    refused); so is a plain value the class holds as the instances' default (``class ListNode:
    next = None``: a right ``reverse`` setting ``node.next`` was refused), which shadows nothing
    the tests run, as the instance attributes their ``__init__`` sets."""
    for kind in type(obj).__mro__:
        if name in vars(kind):
            found = vars(kind)[name]
            if hasattr(type(found), "__set__"):
                return False
            return callable(found) or hasattr(type(found), "__get__")
    return False


def failed_check(exc: BaseException) -> bool:
    """Whether ``exc``, raised in a function of the tests' the sample called back, is their check
    failing: an ``AssertionError`` (``unittest``'s too), a test runner's outcome (``pytest.fail``:
    a ``BaseException``, no ``Exception``) or an exit with a failure (``sys.exit(1)``). Why: the
    sample may catch what its call raised, and a wrong one swallowing ``pytest.fail`` passed."""
    if isinstance(exc, SystemExit):
        return exc.code not in (None, 0)
    return isinstance(exc, AssertionError) or not isinstance(exc, Exception)


def well_formed(message: Any, count: int, channel: Channel) -> tuple[int, list[Any], dict[str, Any]]:
    """(index, encoded args, encoded kwargs) of the sample's ``{"callback": [i, args, kwargs]}``;
    anything else is no answer of the protocol: the sample is stopped as crashed."""
    if (isinstance(message, list) and len(message) == 3 and type(message[0]) is int and 0 <= message[0] < count
            and isinstance(message[1], list) and isinstance(message[2], dict)
            and len(message[1]) + len(message[2]) <= MAX_ARGS and all(type(k) is str for k in message[2])):
        return message[0], message[1], message[2]
    channel.dead = SampleStopped("crashed", "the sample called back a function of the tests' it was not handed")
    raise channel.dead


def builtin_kind(exc: BaseException) -> str:
    """The name of the first built-in class of ``exc``'s (``ValueError`` for the tests' ``class
    Bad(ValueError)``, ``SystemExit`` for the sample's own exit coming back): what the sample
    raises for it. Why: only a built-in name is raised there as itself (others as RuntimeError),
    so a right solution's ``except ValueError`` missed the tests' subclass, and its own
    ``sys.exit`` through their callback came back as no SystemExit."""
    for kind in type(exc).__mro__:
        if kind.__module__ == "builtins":
            return kind.__name__
    return type(exc).__name__


def reply(function: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], send: Callable[[Any], Any],
          sample_raised: Iterable[BaseException] = (), passing: list[BaseException] | None = None,
          ) -> tuple[dict[str, Any], bool]:
    """The tests' function called as the sample called it: ``({"v": encoded}, False)``, or
    ``({"e": [class name]}, asserted)`` where it raised (or returned what cannot be sent).
    ``sample_raised``: exceptions the sample's own answers raised here. One of those passing
    through the tests' function (their callback calling the solution, which exits or asserts) is
    the sample's, not their check failing: it goes to ``passing``, and fails the test only where
    the sample then swallows it (``Session.ask``), as it would a check of theirs; where it comes
    back out to the tests it is Python's (``pytest.raises(SystemExit)`` around ``apply(cb, 1)``
    whose ``cb`` calls the solution's ``sys.exit(1)`` failed a right one)."""
    try:
        value = function(*args, **kwargs)
    except (KeyboardInterrupt, SampleStopped):
        raise
    except BaseException as exc:  # noqa: BLE001 - raised in the sample as it would have been in-process
        failed = failed_check(exc)
        if failed and passing is not None and any(exc is e for e in sample_raised):
            passing.append(exc)
            failed = False
        return {"e": [builtin_kind(exc)]}, failed
    try:
        return {"v": send(value)}, False
    except TypeError:
        return {"e": ["TypeError"]}, False
