"""``is`` between two of the sample's values as the tests see it: one object there, one answer here.

Why: every reach of a sample's value is a stand-in of its own (``Remote``: each keeps what the
harness knows of that reach, whether the tests expect data from it, its family...), so ``Color(1) is
Color.RED``, ``Color['RED'] is Color.RED`` and ``get() is get()`` of a singleton compared two
stand-ins and were False: a right solution scored 0. ``is`` cannot be overloaded, and one stand-in
shared by every reach would carry a lenient reach's state into a strict one. So the stand-ins stay
apart and the tests' ``a is b`` (and ``is not``) of two non-literal operands is compiled as
``SAME(a, b)``, which holds for two stand-ins routed to the same handle.

Why that is sound: the sample's server names, with each new handle, the first handle it gave the
same object (``server._Session.out``), and a stand-in sends every request to that first handle
(``Remote._ref``; its own state stays under its own, ``Remote._key``). A server that claims a
value is one it is not therefore gets that other object's answers for it from then on: the claim
is made when the value arrives, before the tests compare anything, and what it buys is exactly
what a solution really returning that object would, never an answer only a forged server gives.

The same holds for ``unittest``'s ``self.assertIs(a, b)`` and ``assertIsNot`` (their own ``is``, in
unittest's code: ``assertIs(Color(1), Color.RED)`` failed a right solution and ``assertIsNot(s.copy(),
s)`` passed a ``copy`` returning ``s``), compiled as ``IS_ARGS(self.assertIs, a, b)``: the method is
called with ``a`` twice where the two are one object, as it would be in one process; and for a chain
of ``is``/``is not`` (``a is b is c``), compiled as ``CHAIN(a) == CHAIN(b) == CHAIN(c)`` (``is not``:
``!=``), so each operand is still evaluated once and the chain stops at its first False, as Python's.
A chain mixing other comparisons (``0 < x is y``) stays Python's.
"""

from __future__ import annotations

import ast
from typing import Any

from polyrl.sandbox.reader import Reader
from polyrl.sandbox.remote import Remote

#: The tests' global the rewritten ``is`` calls (as ``program_cases.PROGRAM``).
SAME = "__polyrl_same__"
#: The tests' globals a rewritten ``assertIs``/``assertIsNot`` and ``is`` chain call (module doc).
IS_ARGS = "__polyrl_is_args__"
CHAIN = "__polyrl_same_chain__"
#: The methods whose two first arguments are compared by ``is`` (``unittest.TestCase``'s).
_IS_CHECKS = frozenset({"assertIs", "assertIsNot"})


def same(a: Any, b: Any) -> bool:
    """``a is b``, or both stand-ins of one object of the same sample (module doc). ``type``, not
    ``isinstance``: a tests' object's own ``__class__`` is never asked."""
    if a is b:
        return True
    if type(a) is Reader or type(b) is Reader:  # ``iter(g) is g``: the reader of a value its own iterator
        reader, other = (a, b) if type(a) is Reader else (b, a)
        return reader.own and type(other) is Remote and other._session is reader._session and other._ref == reader._ref
    return type(a) is Remote and type(b) is Remote and a._session is b._session and a._ref == b._ref


def is_args(check: Any, first: Any, second: Any, *rest: Any, **options: Any) -> Any:
    """``check(first, second, ...)`` (an ``assertIs``), ``first`` passed twice where ``same`` holds."""
    return check(first, first if same(first, second) else second, *rest, **options)


class Chained:
    """One operand of a chain of ``is``/``is not``: ``==`` is ``same``, ``!=`` its negation."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is Chained and same(self.value, other.value)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def _global_call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


class _Rewrite(ast.NodeTransformer):
    """``a is b`` -> ``SAME(a, b)``, ``a is not b`` -> ``not SAME(a, b)``, where neither side is a
    literal (``x is None`` stays Python's: no stand-in is ever None, True or a literal)."""

    found = False

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 - ast's visitor name
        """``x.assertIs(a, b, ...)`` -> ``IS_ARGS(x.assertIs, a, b, ...)`` (two positional first)."""
        self.generic_visit(node)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else ""
        if name not in _IS_CHECKS or len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args[:2]):
            return node
        self.found = True
        call = ast.Call(func=ast.Name(id=IS_ARGS, ctx=ast.Load()), args=[node.func, *node.args], keywords=node.keywords)
        return ast.fix_missing_locations(ast.copy_location(call, node))

    def visit_Compare(self, node: ast.Compare) -> ast.AST:  # noqa: N802 - ast's visitor name
        self.generic_visit(node)
        if len(node.ops) > 1 and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            self.found = True
            chain = ast.Compare(left=_global_call(CHAIN, [node.left]),
                                ops=[ast.Eq() if isinstance(op, ast.Is) else ast.NotEq() for op in node.ops],
                                comparators=[_global_call(CHAIN, [c]) for c in node.comparators])
            return ast.fix_missing_locations(ast.copy_location(chain, node))
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            return node
        if isinstance(node.left, ast.Constant) or isinstance(node.comparators[0], ast.Constant):
            return node
        self.found = True
        call: ast.expr = ast.Call(func=ast.Name(id=SAME, ctx=ast.Load()), args=[node.left, node.comparators[0]],
                                  keywords=[])
        if isinstance(node.ops[0], ast.IsNot):
            call = ast.UnaryOp(op=ast.Not(), operand=call)
        return ast.fix_missing_locations(ast.copy_location(call, node))


def compiled(source: str, file: str, flags: int = 0) -> Any:
    """The tests' ``source`` compiled as ``compile`` would (asserts kept, no inherited futures),
    its ``is`` between non-literals asking ``SAME`` (``assertIs`` and chains as the module doc says); unchanged where it has none, or cannot be parsed
    (``compile`` then raises its own SyntaxError)."""
    try:
        tree = ast.parse(source, file)
    except (SyntaxError, ValueError):
        return compile(source, file, "exec", flags=flags, dont_inherit=True, optimize=0)
    rewrite = _Rewrite()
    tree = rewrite.visit(tree)
    if not rewrite.found:
        return compile(source, file, "exec", flags=flags, dont_inherit=True, optimize=0)
    return compile(tree, file, "exec", flags=flags, dont_inherit=True, optimize=0)
