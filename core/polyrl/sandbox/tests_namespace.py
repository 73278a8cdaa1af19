"""The tests' module: the ``from __future__`` imports a cell makes, and its entry in ``sys.modules``.

Why a module of its own: the harness runs a cell's statements one at a time (``run_tests``), so
what Python does once for a file (a future import applying to what follows; the file being a
module others can look up) is done here, apart from the running of the steps.
"""

from __future__ import annotations

import __future__
import ast
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
#: name -> the tests' modules registered under it, oldest first, and what held the name before.
_HELD: dict[str, tuple[list[types.ModuleType], object]] = {}
_ABSENT = object()


def future_flags(sources: Iterable[str]) -> int:
    """The compiler flags of the ``from __future__`` imports among the statements ``sources``.
    Why: each statement is compiled alone, so ``from __future__ import annotations`` applied to
    itself only, and a tests' class annotated with its own name (``nxt: Node | None``) raised
    NameError where ``python tests.py`` runs it, failing every completion."""
    flags = 0
    for source in sources:
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for alias in node.names:
                    feature = getattr(__future__, alias.name, None)
                    flags |= getattr(feature, "compiler_flag", 0)
    return flags


@contextmanager
def registered(module: types.ModuleType) -> Iterator[None]:
    """``module`` in ``sys.modules`` under its name while the tests run, as a script's
    ``__main__`` is: ``dataclasses`` looks a class's module up there to read its string
    annotations (``from __future__ import annotations``), and a tests' ``@dataclass`` raised
    "'NoneType' object has no attribute '__dict__'". Runs at once on worker threads
    (``tests_in = "trainer"``) each keep one there until the last ends; what held the name before
    is put back then."""
    name = module.__name__
    with _LOCK:
        held = _HELD.setdefault(name, ([], sys.modules.get(name, _ABSENT)))
        held[0].append(module)
        sys.modules[name] = module
    try:
        yield
    finally:
        with _LOCK:
            modules, before = _HELD[name]
            modules.remove(module)
            if modules:
                sys.modules[name] = modules[-1]
            else:
                del _HELD[name]
                if before is _ABSENT:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = before  # type: ignore[assignment]
