"""Which steps of a tests cell leave state that a later step reads.

Why: the harness keeps running the tests after a failed one (per-test partial credit), but a
test that fails part way through building something (``results.append(f(x))`` in a loop that
also asserts) leaves it half built, and a later ``assert all(results)`` then holds for a solution
that only raised. Found statically, from the steps' source: a name counts as written when a step
binds it (not as a loop variable, which each loop sets afresh) or changes a value the tests bound
through a method call or an item or attribute assignment, itself or through the cell's functions
and classes it uses (their ``global`` names and the tests' values they change). The estimate errs
towards "leaves state": that only stops the tests after a failure, as a script run would.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def leaves_state(sources: Sequence[str]) -> list[bool]:
    """Per step: whether it writes a name that a later step, or a function it uses, reads."""
    trees = [_parse(source) for source in sources]
    defs: dict[str, _Scope] = {node.name: node for tree in trees for node in tree.body
                               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    data = {node.id for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    scopes = {name: _scope_effects(node, data) for name, node in defs.items()}
    later: set[str] = set()
    out: list[bool] = []
    for tree in reversed(trees):
        writes = _written(tree, data)
        reads = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        for name in _reached(reads, scopes):
            writes |= scopes[name][0]
            reads |= scopes[name][1]
        out.append(bool(writes & later))
        later |= reads
    return out[::-1]


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError:  # it fails when run, binding nothing
        return ast.Module(body=[], type_ignores=[])


def _reached(names: set[str], scopes: dict[str, tuple[set[str], set[str]]]) -> set[str]:
    """The cell's functions and classes these names use, and those they use in turn."""
    reached: set[str] = set()
    todo = [name for name in names if name in scopes]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [n for n in scopes[name][1] if n in scopes and n not in reached]
    return reached


def _scope_effects(node: _Scope, data: set[str]) -> tuple[set[str], set[str]]:
    """(globals written, globals read) of a function or class of the cell: its own names
    (parameters, locals, unless declared ``global``) are left out."""
    declared = {name for inner in ast.walk(node) if isinstance(inner, ast.Global) for name in inner.names}
    stored = {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}
    params = {arg.arg for inner in ast.walk(node) if isinstance(inner, ast.arguments)
              for arg in [*inner.posonlyargs, *inner.args, *inner.kwonlyargs, inner.vararg, inner.kwarg] if arg}
    own = (stored | params) - declared
    writes = (stored & declared) | (_mutated(node, data) - own)
    reads = {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load)}
    return writes, reads - own


def _written(tree: ast.AST, data: set[str]) -> set[str]:
    loop_vars = {id(name) for node in ast.walk(tree) if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension))
                 for name in ast.walk(node.target)}
    bound = {node.id for node in ast.walk(tree)
             if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in loop_vars}
    return bound | _mutated(tree, data)


def _mutated(tree: ast.AST, data: set[str]) -> set[str]:
    """Names of the tests' values changed in place: ``results.append(...)``, ``seen[x] = ...``,
    ``box.count = ...``; an ``assert*`` method (``tc.assertEqual``) checks, it changes nothing."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.func.attr.startswith("assert"):
            base: ast.AST = node.func.value
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
        else:
            continue
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        if isinstance(base, ast.Name) and base.id in data:
            names.add(base.id)
    return names
