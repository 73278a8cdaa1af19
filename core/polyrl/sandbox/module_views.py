"""Modules as the tests see them: read-only for a solution's import, or with names of the tests' own.

Why a module of its own: the views (``ModuleView``, ``BuiltinsView``, ``BuiltinsLayer``,
``ModuleWithViews``, ``ModulesView``) only route attribute reads and writes; which module a name stands for is
``tests_modules``', and numpy's checks are ``numpy_checks``'.
"""

from __future__ import annotations

import builtins
import collections
import functools
import sys
import types
from collections.abc import Iterator, MutableMapping
from typing import Any

class ModuleView:
    """A trainer's module as the tests see it for a solution's import: attributes read through,
    no change (the module is shared with every later sample, and the sample chose the name)."""

    __slots__ = ("_module",)

    def __init__(self, module: Any) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__name__", "__all__"):
            raise AttributeError(name)  # ``__dict__`` would be a way to change the module
        return getattr(self._module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"module {self._module.__name__!r} cannot be changed through the solution's import")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"module {self._module.__name__!r} cannot be changed through the solution's import")

    def __dir__(self) -> list[str]:
        return dir(self._module)

    def __repr__(self) -> str:
        return f"<module {self._module.__name__!r} (read-only)>"


class BuiltinsView:
    """The ``builtins`` module as the tests' ``import builtins`` gives it: the real module, but
    their own ``zip``/``map``/``filter``/``enumerate``/``len`` (``tests_pairing``). Why: ``builtins.zip(f(2), [1.0])``
    was Python's zip, vacuous on ``return []``. Setting an attribute sets it in the tests'
    ``__builtins__`` (``BuiltinsLayer``, once one is made over this view), so ``builtins.x = 1``
    makes a name ``x`` as in a script (it raised NameError) and leaves the trainer's builtins as
    they are; without one it sets the real module's. Either way it reads back from then on."""

    __slots__ = ("_own", "_layer")

    def __init__(self, own: dict[str, Any]) -> None:
        object.__setattr__(self, "_own", own)
        object.__setattr__(self, "_layer", None)

    def __getattr__(self, name: str) -> Any:
        own = object.__getattribute__(self, "_own")
        layer = object.__getattribute__(self, "_layer")
        if layer is not None and name in layer._written:
            return layer._written[name]
        if name == "__dict__":  # ``builtins.__dict__['zip']``: theirs too, what they write read back here
            return collections.ChainMap(own, vars(builtins))
        return own[name] if name in own else getattr(builtins, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        layer = object.__getattribute__(self, "_layer")
        if layer is not None:
            layer[name] = value
        else:
            setattr(builtins, name, value)

    def __delattr__(self, name: str) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        layer = object.__getattribute__(self, "_layer")
        if layer is None:
            delattr(builtins, name)
        elif name in layer:
            del layer[name]
        else:
            raise AttributeError(name)

    def __dir__(self) -> list[str]:
        return dir(builtins)

    def __repr__(self) -> str:
        return "<module 'builtins' (built-in)>"


#: Builtin functions that read their caller's frame (``globals()``, ``eval(s)``, ``dir()``, a class
#: statement's ``__build_class__``...): a function of ours in between would answer for its own
#: frame, so these stay Python's, and their ``__self__`` the real ``builtins`` module.
FRAME_READERS = frozenset({"globals", "locals", "vars", "dir", "eval", "exec", "compile", "breakpoint",
                           "__build_class__", "__import__"})


def _bound(function: Any, view: Any) -> Any:
    """``function`` (a builtin) as the tests see it: a function calling it whose ``__self__`` is
    ``view``, the tests' ``builtins`` (``bound_builtins``)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    functools.update_wrapper(call, function)  # its name, doc and module; ``__wrapped__``: the builtin
    call.__self__ = view  # type: ignore[attr-defined]
    BOUND_CODE.add(call.__code__)
    return call


#: The code of ``_bound``'s functions, which stand for the builtin in their ``__wrapped__``.
BOUND_CODE: set[Any] = set()


def bound_builtins(view: Any, names: dict[str, Any]) -> dict[str, Any]:
    """The builtin functions among ``names`` whose ``__self__`` is the ``builtins`` module, as
    ``_bound`` functions whose ``__self__`` is the tests' ``view``; those reading their caller's
    frame (``FRAME_READERS``) are left out. Why: ``print.__self__.zip`` reached Python's own zip
    through the module a builtin function is bound to, which held vacuously for ``return []``
    (``len.__self__`` was the view already)."""
    return {name: _bound(value, view) for name, value in names.items()
            if type(value) is types.BuiltinFunctionType and value.__self__ is builtins and name not in FRAME_READERS}


class BuiltinsLayer(dict[str, Any]):
    """``__builtins__`` in the tests' globals: the mapping Python looks their builtins up in (the
    tests' ``zip``/``map``/..., the solution's names below theirs: ``harness`` module doc), which
    also reads as the ``builtins`` module through ``view``. Why: a script run as ``__main__`` gets
    the module there and an imported one (pytest's) its dict, so tests use both forms
    (``__builtins__.zip(...)``, ``getattr(__builtins__, 'len')``, ``__builtins__['zip']``); with a
    plain dict the attribute forms raised and right solutions failed. What the tests write here
    (either form) is kept when the harness refills the mapping (``refill``)."""

    __slots__ = ("_view", "_written")

    def __init__(self, view: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_view", view)
        object.__setattr__(self, "_written", {})
        if isinstance(view, BuiltinsView):
            object.__setattr__(view, "_layer", self)

    def refill(self, *parts: dict[str, Any]) -> None:
        """The mapping's names anew: ``parts`` in order, then what the tests wrote."""
        dict.clear(self)
        for part in (*parts, self._written):
            dict.update(self, part)

    def __getattr__(self, name: str) -> Any:
        written = object.__getattribute__(self, "_written")
        return written[name] if name in written else getattr(object.__getattribute__(self, "_view"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        if name not in self._written:
            raise AttributeError(name)
        del self[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._written[name] = value
        dict.__setitem__(self, name, value)

    def __delitem__(self, name: str) -> None:
        self._written.pop(name, None)
        dict.__delitem__(self, name)

    def __dir__(self) -> list[str]:
        return dir(builtins)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)  # an imported module's ``copy.copy(__builtins__)``: a dict (it raised)


class ModuleWithViews:
    """A module as the tests see it: the real one, read and written through, but for some names
    of their own (``tests_view``)."""

    __slots__ = ("_module", "_own")

    def __init__(self, module: Any, own: dict[str, Any]) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_own", own)

    def __getattr__(self, name: str) -> Any:
        own = object.__getattribute__(self, "_own")
        return own[name] if name in own else getattr(object.__getattribute__(self, "_module"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        setattr(object.__getattribute__(self, "_module"), name, value)

    def __delattr__(self, name: str) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        delattr(object.__getattribute__(self, "_module"), name)

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_module"))

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_module"))


class ModulesView(MutableMapping[str, Any]):
    """``sys.modules`` as the tests see it: the real mapping, but for the views named (``tests_view``)."""

    def __init__(self, views: dict[str, Any]) -> None:
        self._views = views

    def __getitem__(self, name: str) -> Any:
        return self._views[name] if name in self._views else sys.modules[name]

    def __setitem__(self, name: str, module: Any) -> None:
        self._views.pop(name, None)
        sys.modules[name] = module

    def __delitem__(self, name: str) -> None:
        self._views.pop(name, None)
        del sys.modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(sys.modules))

    def __len__(self) -> int:
        return len(sys.modules)

    def copy(self) -> dict[str, Any]:
        """A dict of the modules, as ``sys.modules.copy()`` gives (tests snapshot it: it raised)."""
        return dict(self.items())
