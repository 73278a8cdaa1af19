"""Which operands of the tests' ``zip`` and ``map`` calls come from one value, found statically.

Why: ``all(abs(a - b) < 1e-9 for a, b in zip(f(2), [1.0]))`` holds vacuously when ``f`` returns
``[]``, so a wrong solution passed it (``pairing.tests_pairing`` fails an empty operand beside one with
items). A one-item operand beside an empty one is also the pairwise idiom on a right one-item
answer, ``zip(r, r[1:])``, where the emptiness is the test's own (the property holds for any answer
that short) and must pass. The two differ in where the operands come from: the pairwise ones are
read from one value (``r`` and a slice of it), the forged check pairs the answer with values of
another origin (a literal, an ``expected`` name, another call). So each call site gets, per operand,
the group of operands it shares an origin with; the harness finds the site of a running call from
the caller's frame and fails an empty operand only beside one with items of another group.

Origins follow the tests' own names through every binding they make anywhere (assignments, loop
and comprehension targets, ``with``, a helper's parameters from its calls and defaults), a slice or
``list``/``sorted``/... of a value is that value, and an item of it (``grid[i]``, a loop target) an
item of it; ``map``/``filter``/``enumerate`` over one value is from that value too
(``zip(map(float, r[1:]), r)``). The answers of one function of the solution's are one origin too: ``zip(primes(2),
primes(10))`` checks the solution against itself, and right answers may differ in length there.
Merging scopes errs towards "one origin", where nothing more than Python's zip applies.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator

from polyrl.sandbox.object_use import attribute_path
from polyrl.sandbox.standard_names import SOLUTION_MODULE

#: (function name, filename, lineno, end_lineno, col_offset, end_col_offset): a call's place as a
#: code object's ``co_positions`` gives it for the call instruction.
Site = tuple[str, str, int, int, int, int]
#: Functions whose operands are paired item by item: name -> index of the first operand.
PAIRING = {"zip": 0, "map": 1}
#: Builtins whose one argument's items they keep (a copy, a view or a reordering of the value).
_SAME_ITEMS = frozenset({"list", "tuple", "sorted", "reversed", "iter", "set", "frozenset", "str", "bytes"})
#: Builtins whose items are made from each item of one argument (name -> its index), one for one or fewer.
_EACH_ITEM = {"map": 1, "filter": 1, "enumerate": 0}
#: ``itertools`` functions (called by name or as ``itertools.islice``) whose items are taken from
#: their arguments': ``zip(r, islice(r, 1, None))`` is the pairwise idiom.
_ITERATOR_TOOLS = frozenset({"islice", "chain", "from_iterable", "takewhile", "dropwhile", "filterfalse",
                             "compress", "accumulate", "pairwise", "starmap", "cycle", "tee"})
_ITEM = "item of "
_BUILTINS = frozenset(dir(builtins))
#: A binding: the expression and how many item levels below it the name sits.
_Binding = tuple[ast.expr, int]


def operand_groups(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[int, ...]]:
    """For each ``zip``/``map`` call in ``sources`` (filename, text) with two or more operands and
    no ``*`` among them, each operand's group: the lowest index of the operands it shares an
    origin with. A place two calls share with different groups is left out (the harness then
    applies its rule for unknown places), and so is every place of tests nested too deep to follow."""
    try:
        return _operand_groups(sources)
    except RecursionError:
        return {}


def _operand_groups(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[int, ...]]:
    trees, values, theirs = _read(sources)
    sites: dict[Site, tuple[int, ...]] = {}
    clashes: set[Site] = set()
    for site, operands in pairing_calls(trees, values):
        groups = _groups([_origins(a, values, theirs, set()) for a in operands])
        if sites.setdefault(site, groups) != groups:
            clashes.add(site)
    for site in clashes:
        del sites[site]
    return sites


def pairing_calls(trees: list[tuple[str, ast.Module]],
                  values: dict[str, list[_Binding]]) -> Iterator[tuple[Site, list[ast.expr]]]:
    """Each ``zip``/``map`` call of the tests (however they named it) with two or more operands and
    no ``*`` among them: its place and its operands."""
    aliases = _aliases(values) | _imported_aliases([tree for _, tree in trees], values)
    for filename, tree in trees:
        for node in ast.walk(tree):
            name = _pairing_name(node, aliases)
            if name is None:
                continue
            assert isinstance(node, ast.Call)
            operands = _spelled_out(node.args)[PAIRING[name]:]
            if len(operands) < 2 or any(isinstance(a, ast.Starred) for a in operands):
                continue
            yield (name, filename, node.lineno, node.end_lineno or node.lineno, node.col_offset,
                   node.end_col_offset if node.end_col_offset is not None else -1), operands


def _spelled_out(args: list[ast.expr]) -> list[ast.expr]:
    """A call's arguments with ``*[a, b]`` (a literal list or tuple) spelled out as ``a, b``."""
    spelled: list[ast.expr] = []
    for arg in args:
        if isinstance(arg, ast.Starred) and isinstance(arg.value, (ast.List, ast.Tuple)):
            spelled.extend(arg.value.elts)
        else:
            spelled.append(arg)
    return spelled


def _aliases(values: dict[str, list[_Binding]]) -> dict[str, str]:
    """The tests' names bound only to ``zip`` or ``map`` themselves (``z = zip``)."""
    found: dict[str, str] = {}
    for key, bindings in values.items():
        names = {v.id if isinstance(v, ast.Name) and depth == 0 else None for v, depth in bindings}
        if len(names) == 1 and (name := names.pop()) in PAIRING:
            found[key] = name
    return found


def _imported_aliases(trees: list[ast.Module], values: dict[str, list[_Binding]]) -> dict[str, str]:
    """The tests' names for ``zip`` or ``map`` imported under another (``from builtins import zip
    as z``, the tests' own zip through ``BuiltinsView``) and bound nowhere else."""
    return {alias.asname: alias.name for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "builtins" and node.level == 0
            for alias in node.names if alias.asname and alias.name in PAIRING and alias.asname not in values}


def _pairing_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``zip`` or ``map`` where ``node`` calls it: by name, through an alias of the tests'
    (``z = zip``), as an attribute (``builtins.zip``, whose view gives the tests' own), an item
    (``__builtins__['zip']``) or ``getattr(__builtins__, 'zip')``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id if func.id in PAIRING else aliases.get(func.id)
    if isinstance(func, ast.Attribute):
        return func.attr if func.attr in PAIRING else None
    if isinstance(func, ast.Subscript):
        named = func.slice
    elif isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" \
            and len(func.args) == 2 and not func.keywords:
        named = func.args[1]
    else:
        return None
    return named.value if isinstance(named, ast.Constant) and named.value in PAIRING else None


def _read(sources: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, ast.Module]], dict[str, list[_Binding]],
                                                      frozenset[str]]:
    """The sources' parsed trees (those that parse) by filename, each name's bindings, and the
    names the tests themselves define or take from builtins."""
    trees = [(filename, tree) for filename, tree in ((f, _parse(s)) for f, s in sources) if tree is not None]
    values: dict[str, list[_Binding]] = {}
    _bind_all([tree for _, tree in trees], values)
    return trees, values, defined_names([tree for _, tree in trees]) | _BUILTINS


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # not Python: fails when run, pairing nothing
        return None


def _groups(origins: list[set[str]]) -> tuple[int, ...]:
    """Each operand's group: operands sharing an origin, directly or through another, are one."""
    group = list(range(len(origins)))
    for i in range(len(origins)):
        for j in range(i):
            if origins[i] & origins[j]:
                old, new = max(group[i], group[j]), min(group[i], group[j])
                group = [new if g == old else g for g in group]
    return tuple(group)


def _origins(node: ast.expr, values: dict[str, list[_Binding]], theirs: frozenset[str], seen: set[str]) -> set[str]:
    """Where ``node``'s items come from, as comparable strings (see the module doc); a call of a
    name that is not the tests' (``theirs``) is the solution's, and its answers for any arguments
    are one origin besides (``zip(primes(2), primes(3))`` compares the solution with itself)."""
    if isinstance(node, ast.Subscript):
        inner = _origins(node.value, values, theirs, seen)
        return inner if isinstance(node.slice, ast.Slice) else {_ITEM + o for o in inner}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SAME_ITEMS \
            and len(node.args) == 1 and not isinstance(node.args[0], ast.Starred):
        return _origins(node.args[0], values, theirs, seen)
    if isinstance(node, ast.Starred):
        return _origins(node.value, values, theirs, seen)
    if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):  # ``(round(x) for x in r[1:])``
        return {ast.dump(node)}.union(*[_origins(g.iter, values, theirs, seen) for g in node.generators])
    if isinstance(node, ast.Call) and _called_name(node.func) in _ITERATOR_TOOLS:  # ``islice(r, 1, None)``
        return {ast.dump(node)}.union(*[_origins(a, values, theirs, seen) for a in node.args])
    key = attribute_path(node)
    if key is None:
        found = {ast.dump(node)}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in theirs:
            found.add(f"answers of {node.func.id}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _EACH_ITEM \
                and len(node.args) in ((1, 2) if node.func.id == "enumerate" else (2,)) \
                and not any(isinstance(a, ast.Starred) for a in node.args):
            found |= _origins(node.args[_EACH_ITEM[node.func.id]], values, theirs, seen)  # ``map(float, r[1:])``
        return found
    found = {key}
    if key not in seen:
        seen.add(key)
        for value, depth in values.get(key, ()):
            found |= {_ITEM * depth + o for o in _origins(value, values, theirs, seen)}
    return found


def _called_name(func: ast.expr) -> str | None:
    """The name a call's function is spelled with: ``islice`` or ``itertools.islice``."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def defined_names(trees: list[ast.Module]) -> frozenset[str]:
    """Every name the tests bind anywhere: assigned, imported, defined, a parameter."""
    names: set[str] = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ImportFrom) and node.module == SOLUTION_MODULE and node.level == 0:
            continue  # the solution's own names, by their names
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return frozenset(names)


def _bind_all(trees: list[ast.Module], values: dict[str, list[_Binding]]) -> None:
    """Every binding in ``trees``, whatever its scope (a helper one step defines is called in others)."""
    nodes = [node for tree in trees for node in ast.walk(tree)]
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                _bind(target, node.value, 0, values)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            _bind(node.target, node.iter, 1, values)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            _bind(node.optional_vars, node.context_expr, 0, values)
    calls: dict[str, list[ast.Call]] = {}
    for call in nodes:
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)):
            calls.setdefault(call.func.id if isinstance(call.func, ast.Name) else call.func.attr, []).append(call)
    for name, arguments, method in _functions(nodes):
        params = [*arguments.posonlyargs, *arguments.args]
        for param, default in zip(reversed(params), reversed(arguments.defaults)):
            values.setdefault(param.arg, []).append((default, 0))
        for call in calls.get(name, ()):
            passed = params[1:] if method and isinstance(call.func, ast.Attribute) else params
            for param, arg in zip(passed, call.args):
                if isinstance(arg, ast.Starred):
                    break
                values.setdefault(param.arg, []).append((arg, 0))
            for keyword in call.keywords:
                if keyword.arg is not None:
                    values.setdefault(keyword.arg, []).append((keyword.value, 0))


def _functions(nodes: list[ast.AST]) -> Iterator[tuple[str, ast.arguments, bool]]:
    """(name, parameters, whether a method) of each function the tests define, lambdas bound to a
    name among them."""
    methods = {id(item) for node in nodes if isinstance(node, ast.ClassDef) for item in node.body}
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.args, id(node) in methods and not any(
                isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value.args, False


def _bind(target: ast.expr, value: ast.expr, depth: int, values: dict[str, list[_Binding]]) -> None:
    """``target`` now holds ``value`` (``depth`` item levels below it): a tuple target's elements
    hold the matching operand of a literal tuple or of a ``zip``/``enumerate`` looped over, else
    an item of the value."""
    if isinstance(target, ast.Starred):
        _bind(target.value, value, depth, values)
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        elements = target.elts
        if depth == 0 and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elements) \
                and not any(isinstance(e, ast.Starred) for e in [*elements, *value.elts]):
            for element, part in zip(elements, value.elts):
                _bind(element, part, 0, values)
            return
        if depth == 1 and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and not value.keywords:
            args = value.args
            if value.func.id == "zip" and len(args) == len(elements) and not any(
                    isinstance(e, ast.Starred) for e in [*elements, *args]):
                for element, arg in zip(elements, args):
                    _bind(element, arg, 1, values)
                return
            if value.func.id == "enumerate" and len(args) == 1 and len(elements) == 2:
                _bind(elements[1], args[0], 1, values)
                return
        for element in elements:
            _bind(element, value, depth + 1, values)
        return
    key = attribute_path(target)
    if key is not None:
        values.setdefault(key, []).append((value, depth))


def indexed_sites(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[str, ...]]:
    """For each ``enumerate`` of an answer or a value of the solution's that a loop or comprehension numbers
    (``for i, x in enumerate(f(2))``), and each ``len`` of one whose ``range`` it counts over
    (``for i in range(len(r))``), the tests' values of another origin that its body indexes by
    that number (``expected`` in ``expected[i]``), as attribute paths. Why: ``all(x == expected[i]
    for i, x in enumerate(f(2)))`` is zip's pairing written by hand, and held for ``return []``;
    the harness fails an empty answer there where such a value has items, as zip does."""
    try:
        return _indexed_sites(sources)
    except RecursionError:
        return {}


def _indexed_sites(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[str, ...]]:
    trees, values, theirs = _read(sources)
    sites: dict[Site, tuple[str, ...]] = {}
    for filename, tree in trees:
        for target, numbered, body in _numbered_loops(tree):
            answer = _origins(numbered.args[0], values, theirs, set())
            if not any(_solutions(origin, theirs) for origin in answer):
                continue  # the tests' own values: nothing of the solution's to measure
            paths = {key for node in body for sub in ast.walk(node)
                     if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name) and sub.slice.id == target
                     and (key := _indexed_path(sub.value)) is not None
                     and not _origins(sub.value, values, theirs, set()) & answer}
            if paths:
                site = (_called_name(numbered.func) or "", filename, numbered.lineno, numbered.end_lineno or numbered.lineno,
                        numbered.col_offset, numbered.end_col_offset if numbered.end_col_offset is not None else -1)
                sites[site] = tuple(sorted({*sites.get(site, ()), *paths}))
    return sites


def _indexed_path(node: ast.expr) -> str | None:
    """``expected``, ``self.exp`` or ``e[i]`` (a row of a value by a name's index) as a key."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name):
        inner = _indexed_path(node.value)
        return None if inner is None else f"{inner}[{node.slice.id}]"
    return attribute_path(node)


def _solutions(origin: str, theirs: frozenset[str]) -> bool:
    """Whether ``origin`` is an answer of the solution's, a value of its (a name the tests do not
    bind) or an item of one (``m[i]`` of ``m = f(3)``)."""
    while origin.startswith(_ITEM):
        origin = origin[len(_ITEM):]
    return origin.startswith("answers of ") or (origin.isidentifier() and origin not in theirs)


def _numbered_loops(tree: ast.Module) -> Iterator[tuple[str, ast.Call, list[ast.AST]]]:
    """(count's name, the ``enumerate(x)`` or ``len(x)`` call, what runs per item) of each loop and
    comprehension over ``enumerate`` of one operand whose target is ``i, x``, or over
    ``range(len(x))`` (``range(0, len(x))``) whose target is ``i``."""
    for node in ast.walk(tree):
        loops: list[tuple[ast.expr, ast.expr, list[ast.AST]]]
        if isinstance(node, (ast.For, ast.AsyncFor)):
            loops = [(node.target, node.iter, [*node.body])]
        elif isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            results: list[ast.AST] = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            loops = [(g.target, g.iter, [*results, *g.ifs, *node.generators[k + 1:]])
                     for k, g in enumerate(node.generators)]
        else:
            continue
        for target, numbered, body in loops:
            if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[0], ast.Name) \
                    and isinstance(numbered, ast.Call) and isinstance(numbered.func, ast.Name) \
                    and numbered.func.id == "enumerate" and len(numbered.args) == 1 and not numbered.keywords \
                    and not isinstance(numbered.args[0], ast.Starred):
                yield target.elts[0].id, numbered, body
            elif isinstance(target, ast.Name) and (counted := _range_of_len(numbered)) is not None:
                yield target.id, counted, body


def _range_of_len(node: ast.expr) -> ast.Call | None:
    """The ``len(x)`` call of ``range(len(x))`` or ``range(0, len(x))`` (``builtins.len(x)`` too)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
            and not node.keywords and len(node.args) in (1, 2)):
        return None
    if len(node.args) == 2 and not (isinstance(node.args[0], ast.Constant) and node.args[0].value == 0):
        return None
    counted = node.args[-1]
    if isinstance(counted, ast.Call) and _called_name(counted.func) == "len" \
            and len(counted.args) == 1 and not counted.keywords and not isinstance(counted.args[0], ast.Starred):
        return counted
    return None
