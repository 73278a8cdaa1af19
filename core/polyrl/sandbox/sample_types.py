"""``type`` and ``repr`` as the tests see them: a sample's value's class, and its own text.

Why: a value of the sample's is a ``Remote`` here, so ``type(s) is Stack`` (and ``== Stack``) was
``Remote is <the sample's Stack>``, False, ``type(s).__name__`` was ``'Remote'``, and ``repr(p)``
the harness's ``<P in the sample>``: a right solution failed each such test. The tests' ``type``
of one sample's value asks the sample for its real type (``type(obj)`` there, never a
``__class__`` it claims) and gives back the very stand-in of the solution's name bound to that
class, so ``is`` holds; a class no name of the solution's holds comes as a stand-in of its own,
which ``==`` matches to another by identity only (``server``: a metaclass's ``__eq__`` never
answers). Everything else is Python's ``type``: ``type(3)``, ``type('C', (), {})``, ``class
M(type)``, ``isinstance(C, type)``.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Callable
from typing import Any

from polyrl.sandbox.remote import Remote


def tests_type(type_of: Callable[[Remote, Any], Any]) -> type:
    """A ``type`` for the tests' builtins: ``type_of(value, frame)`` answers ``type(value)`` of a
    sample's value asked in the tests' ``frame``; every other use is Python's own ``type``. A subclass of ``type`` (not a
    function), so ``isinstance(C, type)``, ``issubclass(M, type)`` and ``class M(type)`` still
    work in the tests."""

    class _Calls(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls is not made:  # ``class C(metaclass=M)`` of the tests' ``class M(type)``
                return super().__call__(*args, **kwargs)
            if len(args) == 1 and not kwargs:
                value = args[0]
                return type_of(value, sys._getframe(1)) if isinstance(value, Remote) else builtins.type(value)
            return builtins.type(*args, **kwargs)

        def __instancecheck__(cls, instance: Any) -> bool:
            if cls is made:
                return isinstance(instance, builtins.type)
            return super().__instancecheck__(instance)

        def __subclasscheck__(cls, subclass: Any) -> bool:
            if cls is made:
                return isinstance(subclass, builtins.type) and issubclass(subclass, builtins.type)
            return super().__subclasscheck__(subclass)

    class made(builtins.type, metaclass=_Calls):  # noqa: N801 - it is the tests' ``type``
        pass

    made.__name__ = made.__qualname__ = "type"
    made.__module__ = "builtins"
    made.__doc__ = builtins.type.__doc__
    return made


def tests_repr(value: Any) -> str:
    """``repr`` as the tests see it: a sample's value's own ``__repr__``, as a plain str (a str
    subclass it returns is refused); every other value's Python's."""
    if isinstance(value, Remote):
        text = value._session.ask("repr", False, ref=value._ref)
        if type(text) is not str:
            raise TypeError("repr() of a sample's value is not a str")
        return text
    return repr(value)


#: Python's classes of values that stay in the sample (a generator, a function, a ``map``), by name:
#: the class ``isinstance`` judges such a value by. A class of the sample's so named gains nothing
#: by it that one of these would not (its items, calls and answers are judged as before). Never a
#: data type (``int``, ``list``...): a right one crosses as the trainer's own, so only an object
#: posing as one would be judged by its name.
_DATA = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset, range, slice, memoryview,
         BaseException)
_PYTHONS: dict[str, type] = {kind.__qualname__: kind for kind in (*vars(types).values(), *vars(builtins).values())
                             if isinstance(kind, type) and kind.__module__ == "builtins" and not issubclass(kind, _DATA)
                             and kind not in (object, type, super, property, classmethod, staticmethod, type(None))}


def tests_isinstance(type_of: Callable[[Remote, Any], Any]) -> Callable[[Any, Any], bool]:
    """An ``isinstance`` for the tests' builtins: a sample's value against Python's own classes
    (``types.GeneratorType``, ``collections.abc.Generator``, ``types.FunctionType``) is judged by
    its real type as the tests' ``type`` reads it, where that is one of Python's classes. Why: a
    sample's generator is a stand-in here, so ``isinstance(gen(3), types.GeneratorType)`` was
    False and a right generator failed it. A class of the sample's (a stand-in) or a value of the
    trainer's is Python's ``isinstance`` as before; so is a class of the solution's asked about,
    which answers from the sample's real MRO (``Remote.__instancecheck__``)."""

    def isinstance_(obj: Any, classes: Any, /) -> bool:
        kinds = classes if type(classes) is tuple else (classes,)
        if (type(obj) is Remote and kinds and all(builtins.isinstance(k, builtins.type) for k in kinds)
                and not builtins.isinstance(obj, classes)):
            real = type_of(obj, sys._getframe(1))
            if type(real) is Remote:  # a class in the sample: one of Python's own, by its name
                real = _PYTHONS.get(real.__qualname__) if real._kind == "callable" else None
            if builtins.isinstance(real, builtins.type) and not builtins.issubclass(real, Remote):
                return builtins.issubclass(real, kinds)
        return builtins.isinstance(obj, classes)

    isinstance_.__name__ = isinstance_.__qualname__ = "isinstance"
    isinstance_.__doc__ = builtins.isinstance.__doc__
    return isinstance_
