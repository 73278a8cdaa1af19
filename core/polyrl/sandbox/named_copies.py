"""A copy or view of a value bound to a name whose later checks all hold over no items, found statically.

Why: ``subset_reads`` and ``zipped_views`` read ``set(r) <= allowed`` and ``zip(d.keys(),
d.values())`` as the tests' loop over ``r`` or ``d``, but only where the check takes the set or
view straight. A forged ``primes`` emptied by ``show(r)`` (or a forged ``Mapping`` emptied by
``d.reset()``) passed ``len(r) == 3`` and then ``s = set(r); assert s <= {2, 3, 5, 7}`` (or ``v =
d.keys(); assert all(d[k] == k * k for k in v)``), 1.0: the copy was taken at the assignment, a
whole reading, and the check that holds over none of its items came a statement later.

``vacuously_read(value, parents)``: ``value`` is the whole right side of an assignment to one plain
name (``s = set(r)``; one element of ``a, b = d.keys(), d.values()`` too), and that name, read
after it in the same scope, is checked at least once where no items pass (a subset check, ``s <=
a``, ``s.issubset(a)``, ``a.issuperset(s)``, ``isdisjoint``, ``x not in s``; a loop over it whose body or item
looks at its items; ``all``/``any``/``sum`` of it; ``zip``/``map``/``enumerate``/``sorted`` of it so
looped over) and never read whole (``s == {2, 3}``, ``s != t``, ``len(s)``, ``not s``, ``assert s``):
a value whose copy the tests compare or count is seen, as ``len(r) == 0`` sees it.
"""

from __future__ import annotations

import ast

#: Calls whose answer passes the items of their operand on (looped over, it is a loop over that operand).
PASSING = frozenset({"zip", "map", "filter", "enumerate", "reversed", "sorted"})
#: Calls that check each item of their one operand, as a loop does.
CHECKS = frozenset({"all", "any", "sum"})
#: Set methods that hold over no items of their receiver, and of their argument.
_RECEIVER_CHECKS = frozenset({"issubset", "isdisjoint"})
_ARGUMENT_CHECKS = frozenset({"issuperset", "isdisjoint"})
_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def vacuously_read(value: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """Whether ``value`` is bound to a name whose later checks hold over no items and which the
    tests never read whole (module doc)."""
    name = _bound_name(value, parents)
    if name is None:
        return False
    target, statement = name
    after = (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)
    return name_read_vacuously(_scope(statement, parents), target, after, parents)


def name_read_vacuously(scope: ast.AST, target: str, after: tuple[int, int], parents: dict[int, ast.AST]) -> bool:
    """Whether plain name ``target``, read in ``scope`` at or after (line, column) ``after``, is
    checked there at least once where no items pass and never read whole (module doc); also what
    ``helper_reads`` asks of a helper's parameter."""
    vacuous = False
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == target and isinstance(node.ctx, ast.Load) \
                and (node.lineno, node.col_offset) >= after:
            use = _use(node, parents)
            if use == "whole":
                return False
            vacuous = vacuous or use == "vacuous"
    return vacuous


def _bound_name(value: ast.expr, parents: dict[int, ast.AST]) -> tuple[str, ast.stmt] | None:
    """The one plain name ``value`` is assigned to, and the assignment; None otherwise."""
    parent = parents.get(id(value))
    if isinstance(parent, ast.Tuple):  # ``a, b = d.keys(), d.values()``
        statement = parents.get(id(parent))
        if not (isinstance(statement, ast.Assign) and statement.value is parent and len(statement.targets) == 1):
            return None
        targets = statement.targets[0]
        if not (isinstance(targets, ast.Tuple) and len(targets.elts) == len(parent.elts)):
            return None
        target = targets.elts[[id(e) for e in parent.elts].index(id(value))]
        return (target.id, statement) if isinstance(target, ast.Name) else None
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is value:
        bound = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(bound) == 1 and isinstance(bound[0], ast.Name):
            return bound[0].id, parent
    return None


def _scope(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    """The function, class or module ``node`` is in."""
    above = parents.get(id(node))
    while above is not None and not isinstance(above, _SCOPES):
        above = parents.get(id(above))
    return above if above is not None else node


def _use(name: ast.Name, parents: dict[int, ast.AST]) -> str:
    """How the tests read ``name`` there: "vacuous" (a check over its items that holds over none),
    "whole" (compared, counted or asked its truth) or "other"."""
    parent = parents.get(id(name))
    if isinstance(parent, ast.Compare):
        if any(isinstance(op, (ast.Eq, ast.NotEq)) for op in parent.ops):
            return "whole"
        if len(parent.ops) == 1 and isinstance(parent.ops[0], ast.NotIn):
            return "vacuous" if parent.comparators[0] is name else "other"  # ``x not in h``
        if len(parent.ops) == 1:
            smaller = (ast.LtE, ast.Lt) if parent.left is name else (ast.GtE, ast.Gt)
            return "vacuous" if isinstance(parent.ops[0], smaller) else "other"
        return "other"
    if isinstance(parent, (ast.Assert, ast.If, ast.While, ast.IfExp)) and parent.test is name \
            or isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not) \
            or isinstance(parent, ast.BoolOp):
        return "whole"
    if isinstance(parent, ast.Attribute) and parent.attr in _RECEIVER_CHECKS:
        call = parents.get(id(parent))
        return "vacuous" if isinstance(call, ast.Call) and call.func is parent else "other"
    if isinstance(parent, ast.Call) and any(arg is name for arg in parent.args):
        func = parent.func
        if isinstance(func, ast.Attribute) and func.attr in _ARGUMENT_CHECKS:
            return "vacuous"
        called = func.id if isinstance(func, ast.Name) else None
        if called == "len":
            return "whole"
        if called in CHECKS and parent.args[0] is name:
            return "vacuous"
        if called in PASSING:
            return "vacuous" if checked_loop(parents.get(id(parent)), parent, parents) else "other"
        return "other"
    return "vacuous" if checked_loop(parent, name, parents) else "other"


def checked_loop(loop: ast.AST | None, iterable: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """Whether ``loop`` goes over ``iterable`` and looks at its items: a ``for`` or a comprehension
    whose body or item reads a target name (or calls or compares anything, ``assert d[0] == 0``
    once per item), or ``all``/``any``/``sum`` of it. A loop that only counts (``n += 1``, ``sum(1
    for _ in v)``) or fails on any item (``raise AssertionError``) reads it whole, as
    ``item_free_loops`` says of the bytecode."""
    if isinstance(loop, (ast.For, ast.AsyncFor)) and loop.iter is iterable:
        return not _checks_nothing(loop.target, loop.body)
    if isinstance(loop, ast.comprehension) and loop.iter is iterable:
        owner = parents.get(id(loop))
        if not isinstance(owner, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return True
        items = [owner.key, owner.value] if isinstance(owner, ast.DictComp) else [owner.elt]
        return bool(loop.ifs) or len(owner.generators) > 1 \
            or not _checks_nothing(loop.target, [ast.Expr(value=item) for item in items])
    return isinstance(loop, ast.Call) and isinstance(loop.func, ast.Name) and loop.func.id in CHECKS \
        and bool(loop.args) and loop.args[0] is iterable


def _checks_nothing(target: ast.expr, body: list[ast.stmt]) -> bool:
    """A body that never reads ``target``'s names, calls or compares nothing and branches nowhere
    (``n += 1``), or whose first statement raises (``raise AssertionError('left')``)."""
    if body and isinstance(body[0], ast.Raise):
        return True
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    for statement in body:
        if not isinstance(statement, (ast.AugAssign, ast.Assign, ast.Pass, ast.Expr)):
            return False
        for node in ast.walk(statement):
            if isinstance(node, (ast.Call, ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)) \
                    or isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
                return False
    return True
