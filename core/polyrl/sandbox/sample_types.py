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
from collections.abc import Callable, Mapping
from typing import Any

from polyrl.sandbox.pairing import STAND_INS, _Watched
from polyrl.sandbox.remote import Remote


def tests_type(type_of: Callable[[Remote, Any], Any], stand_ins: Mapping[type, Any] | None = None) -> type:
    """A ``type`` for the tests' builtins: ``type_of(value, frame)`` answers ``type(value)`` of a
    sample's value asked in the tests' ``frame``; every other use is Python's own ``type``. A subclass of ``type`` (not a
    function), so ``isinstance(C, type)``, ``issubclass(M, type)`` and ``class M(type)`` still
    work in the tests. ``stand_ins``: Python's classes whose name the tests' builtins bind to a
    stand-in (``zip``, ``map``, ``filter``, ``enumerate``: ``pairing``), and the harness's own
    subclasses of them, each -> that stand-in, which ``type`` of such a value gives, so ``type(r)
    is map`` holds for the sample's ``map`` object (and the tests' own) as in Python; it compared
    Python's ``map`` with the tests' stand-in, and a right solution failed."""
    known = dict(stand_ins or {})
    by_name = {kind.__qualname__: stand_in for kind, stand_in in known.items() if kind.__module__ == "builtins"}

    def as_tests_see(kind: Any) -> Any:
        if type(kind) is Remote and kind._kind == "callable" and by_name:  # a class in the sample: Python's, by name
            return by_name.get(kind.__qualname__, kind)
        return known.get(kind, kind) if isinstance(kind, builtins.type) else kind

    class _Calls(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls is not made:  # ``class C(metaclass=M)`` of the tests' ``class M(type)``
                return super().__call__(*args, **kwargs)
            if len(args) == 1 and not kwargs:
                value = args[0]
                kind = type_of(value, sys._getframe(1)) if isinstance(value, Remote) else builtins.type(value)
                if kind is _Watched:  # the tests' zip or map watching an operand: the one it is
                    kind = builtins.type(value._inner)
                return as_tests_see(kind)
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


def _python_class(name: Any) -> type | None:
    """One of ``_PYTHONS`` by name, or numpy's ``ndarray`` where the tests' process has numpy loaded
    (an array the solution returns stays in the sample, judged as one by its type's name: ``Remote._type``).
    Why: ``isinstance(f(3), np.ndarray)`` was False for a right array, which failed it."""
    if name == "ndarray":
        numpy = sys.modules.get("numpy")
        return getattr(numpy, "ndarray", None) if numpy is not None else None
    return _PYTHONS.get(name) if type(name) is str else None


def real_classes(classes: Any, depth: int = 0) -> Any:
    """``isinstance``'s and ``issubclass``'s classes with the tests' stand-ins of Python's classes
    (``zip``, ``map``, ``filter``, ``enumerate``: functions of ``pairing``) as those classes. Why: a
    function is no class, so ``isinstance(r, (filter, map))`` raised TypeError in the tests, for the
    sample's ``filter`` object and the tests' own alike, and a right solution failed it."""
    if type(classes) is tuple and depth < 16:
        return tuple(real_classes(c, depth + 1) for c in classes)
    if type(classes) is types.FunctionType:
        kind = getattr(builtins, STAND_INS.get(classes.__code__, ""), None)
        if isinstance(kind, builtins.type):
            return kind
    return classes


def tests_issubclass(cls: Any, classes: Any, /) -> bool:
    """``issubclass`` for the tests' builtins: Python's, with their stand-ins of Python's classes as
    those classes on either side (``real_classes``: ``issubclass(type(r), map)``)."""
    return builtins.issubclass(real_classes(cls), real_classes(classes))


tests_issubclass.__name__ = tests_issubclass.__qualname__ = "issubclass"
tests_issubclass.__doc__ = builtins.issubclass.__doc__


def tests_isinstance(type_of: Callable[[Remote, Any], Any]) -> Callable[[Any, Any], bool]:
    """An ``isinstance`` for the tests' builtins: a sample's value against Python's own classes
    (``types.GeneratorType``, ``collections.abc.Generator``, ``types.FunctionType``) is judged by
    its real type as the tests' ``type`` reads it, where that is one of Python's classes. Why: a
    sample's generator is a stand-in here, so ``isinstance(gen(3), types.GeneratorType)`` was
    False and a right generator failed it. A class of the sample's (a stand-in) or a value of the
    trainer's is Python's ``isinstance`` as before; so is a class of the solution's asked about,
    which answers from the sample's real MRO (``Remote.__instancecheck__``)."""

    def isinstance_(obj: Any, classes: Any, /) -> bool:
        classes = real_classes(classes)
        kinds = classes if type(classes) is tuple else (classes,)
        if (type(obj) is Remote and kinds and all(builtins.isinstance(k, builtins.type) for k in kinds)
                and not builtins.isinstance(obj, classes)):
            real = type_of(obj, sys._getframe(1))
            if type(real) is Remote:  # a class in the sample: one of Python's own, by its name
                real = _python_class(real.__qualname__) if real._kind == "callable" else None
            if builtins.isinstance(real, builtins.type) and not builtins.issubclass(real, Remote):
                return builtins.issubclass(real, kinds)
        return builtins.isinstance(obj, classes)

    isinstance_.__name__ = isinstance_.__qualname__ = "isinstance"
    isinstance_.__doc__ = builtins.isinstance.__doc__
    return isinstance_
