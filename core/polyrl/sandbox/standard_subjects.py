"""Which standard names in the tests only the solution can be meant by, never a standard helper.

Why a module of its own: ``standard_names`` groups the tests' statements and takes one standard
name per group as the task's, the others as the trainer's helpers; the shapes read here mark
further ones whose every use meets nothing of the sample's but the call itself, where the
trainer's copy failed a right solution or passed a wrong one.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable


def task_calls(nodes: list[ast.stmt], name: str, classes: Collection[str], objects_against_data: bool = True) -> bool:
    """Whether every use of ``name`` in these statements (one group) is a call compared by ``==``
    or ``!=`` with nothing the sample computes but that call, so the name is the task's:

    - on data written out, against data written out (``assert add(2, 3) == 5 and sub(5, 3) ==
      2``: ``sub`` was the trainer's ``operator.sub``, so a wrong ``sub``, or none, scored 1.0);
    - on objects the tests make of the solution's classes (``classes``: its names spelled like a
      class, ``Frac(1, 2)``, or a name bound to one, ``v = Vec(1, 2)``), against such objects or
      data written out (``assert add(Frac(1, 2), Frac(1, 2)) == Frac(1, 1)``, ``assert add(Num(1),
      Num(2)) == 3``: ``operator.add``, which no object of the sample's answers without an
      ``__add__``, failed a right solution).

    Sound: everything on the call's side is the sample's (its function, its objects), the other
    side is the tests' data or the sample's objects, so what passes is what the solution's own
    call answers, as for ``add(2, 3) == 5``: data meets it only through ``Remote._equals_plain``
    (the sample's own conversion, made without seeing the data), objects through the sample's own
    ``==`` (``remote.Remote._compare``). A solution whose ``add`` returns 3 passes ``add(Num(1),
    Num(2)) == 3`` as one returning 5 passes ``add(2, 3) == 5``: one case, answered. A
    standard name that builds or checks an answer of the sample's (``== list(permutations(xs))``,
    ``isclose(area(2), 12.57)``, ``sqrt(side(4)) == 2``, ``== Frac(1, 2).double()``) is no such use.
    ``objects_against_data=False``: the second shape against objects only (``fallback_calls``)."""
    made = _made_by_call(nodes)

    def made_here(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in classes
        return isinstance(node, ast.Name) and made.get(node.id) in classes

    parents: dict[int, ast.AST] = {}
    for node in nodes:
        for parent in ast.walk(node):
            for child in ast.iter_child_nodes(parent):
                parents[id(child)] = parent
    uses = 0
    for node in nodes:
        for inner in ast.walk(node):
            if not (isinstance(inner, ast.Name) and inner.id == name):
                continue
            call = parents.get(id(inner))
            compare = parents.get(id(call)) if call is not None else None
            if not (isinstance(call, ast.Call) and call.func is inner and not call.keywords
                    and isinstance(compare, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in compare.ops)):
                return False
            others = [side for side in (compare.left, *compare.comparators) if side is not call]
            on_data = all(_data(a) for a in call.args) and all(_data(side) for side in others)
            on_objects = (any(made_here(a) for a in call.args) and all(_data(a) or made_here(a) for a in call.args)
                          and all((objects_against_data and _data(side)) or made_here(side) for side in others))
            if not (on_data or on_objects):
                return False
            uses += 1
    return uses > 0


def fallback_calls(nodes: list[ast.stmt], name: str, classes: Collection[str]) -> bool:
    """Whether ``name`` is the task's (``task_calls``) only through a call on the solution's
    objects compared with data (``add(Num(1), Num(2)) == 3``), where the trainer's helper was taken
    before: the solution's ``add`` where it defines one, else the trainer's (``operator.add``,
    which adds the sample's objects by their own ``__add__``). Why the fallback: a right solution
    whose ``Num`` has ``__add__`` and no ``add`` of its own passed there, and still does. Sound:
    either way the call's side is the sample's values and what it computes with them."""
    return task_calls(nodes, name, classes) and not task_calls(nodes, name, classes, objects_against_data=False)


def _data(node: ast.AST) -> bool:
    """Data written out: a literal (never a bool or None), or a list/tuple/set/dict of them."""
    if isinstance(node, ast.Constant):
        return not isinstance(node.value, bool) and node.value is not None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _data(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_data(item) for item in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _data(k) and _data(v) for k, v in zip(node.keys, node.values))
    return False


def _made_by_call(nodes: Iterable[ast.stmt]) -> dict[str, str]:
    """Names the statements bind only by plain assignments from a call of one name: name -> that
    name (``v = Vec(1, 2)``); a name bound otherwise too is left out."""
    made: dict[str, str] = {}
    plain: set[int] = set()  # the targets of those assignments
    other: set[str] = set()
    for node in nodes:
        for inner in ast.walk(node):
            if (isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name)
                    and isinstance(inner.value, ast.Call) and isinstance(inner.value.func, ast.Name)):
                target = inner.targets[0].id
                if made.setdefault(target, inner.value.func.id) != inner.value.func.id:
                    other.add(target)
                plain.add(id(inner.targets[0]))
            elif isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)) and id(inner) not in plain:
                other.add(inner.id)
    return {name: callee for name, callee in made.items() if name not in other}
