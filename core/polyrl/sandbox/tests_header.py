"""The tests' preamble a LeetCode-style solution relies on: their node classes and stdlib imports.

Why: LeetCode's judge runs a solution after its own preamble, so a right solution names
``ListNode``/``TreeNode`` (its definition left as a comment) and ``List``/``Optional`` without
defining or importing them. A dataset keeping that preamble in its tests cell ran the solution
without it (the tests run in another process): ``NameError`` at the solution's definition or
call, and every right solution scored 0. The sample now runs, before its setup and its code, the
part of that preamble it reads and does not define, and nothing else:

- a top-level import of a standard-library module (``from typing import List``,
  ``import collections``; a star import of one of ``_STAR_MODULES``), never a name shadowing a
  builtin (``from math import *``'s ``pow``): such an import the sample could make itself;
- a top-level class that only holds data given to it (``_plain_data_class``): no base, decorator
  or method but an ``__init__`` setting ``self.x`` from its parameters or a blank default
  (None, 0, '', False, ``[]``). Its code reads nothing of the tests' (a class computing from
  their values, ``self.want = WANT``, or with a method of theirs, stays theirs alone), so copying
  it tells the sample nothing it could use to forge an answer.

The sample's objects of such a class are the sample's own, as if it had defined the class: the
tests read them as they read any sample's object.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: Modules whose ``from m import *`` is followed (LeetCode's preamble star-imports these); their
#: names are read from the trainer's copy, so only modules imported without side effects.
_STAR_MODULES = frozenset({"typing", "collections", "itertools", "functools", "heapq", "bisect", "math",
                           "string", "operator"})
#: Constants a plain data class may default to or set: blanks, never a value a test may want.
_BLANKS = (None, 0, "", False, True)


def statements(steps: Sequence[tuple[str, bool]]) -> list[tuple[str, str]]:
    """(name, the statement binding it alone) for each name ``steps``' preamble offers. The sample
    runs those its compiled code reads (``server._names_read``): the solution is compiled only
    there, in the sandbox, never in the trainer (hostile nesting exhausts a parser)."""
    return list(_offered(tuple(source for source, _ in steps)))


def header(steps: Sequence[tuple[str, bool]], code: str) -> str:
    """The statements of ``statements(steps)`` the solution ``code`` reads, chosen by the server's
    own ``_names_read`` (run here from its source): for tests of that choice."""
    read = _server_names_read()(compile(code, "<solution>", "exec", dont_inherit=True))
    return "".join(text for name, text in statements(steps) if name in read)


def _server_names_read() -> Callable[[types.CodeType], set[str]]:
    """The sandbox server's ``_names_read`` (its module runs only in the sample: taken from its source)."""
    source = (Path(__file__).with_name("server.py")).read_text()
    found = next(node for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef) and node.name == "_names_read")
    namespace: dict[str, Any] = {"_BUILTINS": builtins}
    exec(compile(ast.Module([found], []), "server.py", "exec"), namespace)
    return namespace["_names_read"]


@functools.lru_cache(maxsize=256)
def _offered(sources: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(name, the statement binding it alone) for each name the tests' top level offers, in order."""
    out: list[tuple[str, str]] = []
    for source in sources:
        try:
            body = ast.parse(source).body
        except (SyntaxError, ValueError):
            continue
        for node in body:
            if isinstance(node, ast.Import):
                out += [(alias.asname or alias.name.partition(".")[0], _tried(ast.Import(names=[alias])))
                        for alias in node.names if _stdlib(alias.name)]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _stdlib(node.module):
                for alias in node.names:
                    names = _star_names(node.module) if alias.name == "*" else [alias.asname or alias.name]
                    for name in names:
                        if not hasattr(builtins, name):
                            original = alias.name if alias.name != "*" else name
                            bound = ast.alias(original, None if name == original else name)
                            out.append((name, _tried(ast.ImportFrom(node.module, [bound], 0))))
            elif isinstance(node, ast.ClassDef) and _plain_data_class(node):
                out.append((node.name, ast.unparse(_unannotated(node)) + "\n"))
    return tuple(out)


def _tried(node: ast.stmt) -> str:
    """An import that may fail in the sample (a module the audit hook refuses) without failing
    it: the solution reading that name then fails as it did without the preamble."""
    return f"try:\n    {ast.unparse(node)}\nexcept Exception:\n    pass\n"


def _unannotated(node: ast.ClassDef) -> ast.ClassDef:
    """The class without its annotations and docstrings. Annotations name the tests' types
    (``Optional['ListNode']``), which the sample may lack, and a class that fails to be made would
    fail a right solution; docstrings are the tests' words, which may show a wanted output."""
    copy = ast.parse(ast.unparse(node)).body[0]
    assert isinstance(copy, ast.ClassDef)
    for item in ast.walk(copy):
        if isinstance(item, ast.arg):
            item.annotation = None
        if isinstance(item, ast.FunctionDef):
            item.returns = None
        if isinstance(item, (ast.FunctionDef, ast.ClassDef)):
            for i, stmt in enumerate(item.body):
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                    item.body[i] = ast.Assign([stmt.target], stmt.value, lineno=stmt.lineno)
            # docstrings left out: the tests' words (an example's wanted output) are not the sample's to read
            item.body = [stmt for stmt in item.body if not (isinstance(stmt, ast.Expr) and isinstance(
                stmt.value, ast.Constant) and isinstance(stmt.value.value, str))] or [ast.Pass()]
    return copy


def _stdlib(module: str) -> bool:
    top = module.partition(".")[0]
    return top in sys.stdlib_module_names and top not in {"__future__", "solution"}


def _star_names(module: str) -> list[str]:
    if module not in _STAR_MODULES:
        return []
    found = importlib.import_module(module)
    names = getattr(found, "__all__", None)
    return [n for n in (names if names is not None else vars(found)) if isinstance(n, str) and not n.startswith("_")]


def _plain_data_class(node: ast.ClassDef) -> bool:
    """A class holding only the data handed to it: ``class ListNode: def __init__(self, val=0,
    next=None): self.val = val; self.next = next`` (a docstring, ``__slots__`` and blank class
    defaults allowed). Anything else may compute from the tests' values, so it is not copied."""
    if node.decorator_list or node.keywords or any(not (isinstance(b, ast.Name) and b.id == "object")
                                                   for b in node.bases):
        return False
    inits = 0
    for item in node.body:
        if isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str):
            continue
        if isinstance(item, ast.Assign) and all(isinstance(t, ast.Name) for t in item.targets):
            slots = all(isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets)
            if _blank(item.value) or (slots and isinstance(item.value, (ast.Tuple, ast.List)) and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in item.value.elts)):
                continue
            return False
        if isinstance(item, ast.FunctionDef) and item.name == "__init__" and _plain_init(item):
            inits += 1
            continue
        return False
    return inits <= 1


def _plain_init(init: ast.FunctionDef) -> bool:
    args = init.args
    if init.decorator_list or args.vararg or args.kwarg or not args.args:
        return False
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if not all(_blank(d) for d in (*args.defaults, *(d for d in args.kw_defaults if d is not None))):
        return False
    own = set(params[1:])
    for stmt in init.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else None
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if targets is None or value is None:
            return False
        for target in targets:
            fields = target.elts if isinstance(target, ast.Tuple) else [target]
            if not all(isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == params[0]
                       and not f.attr.startswith("__") for f in fields):
                return False
        values = value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(_given(v, own) for v in values):
            return False
    return True


def _given(value: ast.expr, params: set[str]) -> bool:
    """A parameter, a blank, or one of them chosen by ``p if p is not None else []`` / ``p or []``."""
    if isinstance(value, ast.Name):
        return value.id in params
    if isinstance(value, ast.BoolOp):
        return all(_given(v, params) for v in value.values)
    if isinstance(value, ast.IfExp):
        test = value.test
        plain_test = _given(test, params) or (isinstance(test, ast.Compare) and _given(test.left, params) and all(
            isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in test.ops)
            and all(_given(c, params) for c in test.comparators))
        return plain_test and _given(value.body, params) and _given(value.orelse, params)
    return _blank(value)


def _blank(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return any(value.value is b or (type(value.value) is type(b) and value.value == b) for b in _BLANKS)
    return isinstance(value, (ast.List, ast.Dict)) and not (value.elts if isinstance(value, ast.List) else value.keys)

