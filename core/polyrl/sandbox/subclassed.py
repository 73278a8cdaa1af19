"""A class of the tests' that subclasses one of the solution's (``class T(Solution)``).

Why: the solution's class is a stand-in (``Remote``) here, not a type, so Python made the class
by calling it as a metaclass, which raised TypeError, and a right solution failed every test of
such a cell. A ``Remote`` used as a base gives instead a local class (``sample_base``) whose
instance holds an instance of the sample's class, made when the tests' ``__init__`` reaches
``super().__init__(...)`` (or at the first use of the sample's part): its methods and attributes
are that instance's, read through it as any use of a sample's value is (``super().push(x)`` as
well as ``t.twoSum(...)``). What the tests define on their class is theirs and runs here; the
sample's own methods still call its own methods (the sample never calls back into the tests).
Nothing the sample says is taken here but the names of its class's methods, each of which only
reads the sample's instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polyrl.sandbox.remote import Remote

#: At most this many of the sample's class's names become methods of the local base.
MAX_NAMES = 1000
#: Where the tests' instance keeps the sample's instance.
_PART = "_polyrl_sample_part"


class _SampleAttribute:
    """A name of the sample's class on the local base: read on an instance, the sample's
    instance's attribute (so ``super().push`` finds it, as it finds a base's method)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            raise AttributeError(f"{self.name!r} of the solution's class is read on an instance only here")
        return getattr(_part(instance), self.name)


def _part(instance: Any) -> Remote:
    """The sample's instance held by the tests' ``instance``: made without arguments where the
    tests' ``__init__`` never called the base's."""
    held = instance.__dict__.get(_PART)
    if held is None:
        held = type(instance).__polyrl_sample_class__()
        instance.__dict__[_PART] = held
    return held


def sample_base(cls: Remote) -> type:
    """The local base a tests' ``class T(cls)`` derives from, for the sample's class ``cls``."""
    names = cls._session.ask("dir", False, ref=cls._ref)
    if type(names) is not list:
        raise TypeError("the solution's class listed no names")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self.__dict__[_PART] = cls(*args, **kwargs)

    def __getattr__(self: Any, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(_part(self), name)

    body: dict[str, Any] = {name: _SampleAttribute(name) for name in names[:MAX_NAMES]
                            if type(name) is str and name.isidentifier() and not name.startswith("__")}
    body.update(__init__=__init__, __getattr__=__getattr__, __polyrl_sample_class__=cls,
                __doc__=f"The solution's {cls._type[:100]!r}, as a base of a class of the tests'.")
    name = cls._origin if cls._origin is not None else "SampleClass"
    return type(name, (), body)
