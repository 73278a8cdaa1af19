"""Which of the tests' values a check of theirs could hold vacuously over once shortened: found
statically, matched against an argument at run time.

Why: an in-place call's argument that comes back shorter (``in_place``) would make a loop over it
or a property it must have hold vacuously: ``all(a <= b for a, b in zip(xs, xs[1:]))``, ``xs ==
sorted(xs)``, ``len(set(xs)) == len(xs)``, ``3 not in xs``, ``set(xs) <= {1, 2, 3}`` of an emptied
``xs``. So the harness never wrote a shrunk argument back, and right solutions that remove items
in place (LeetCode 26/27's ``del nums[k:]`` or ``nums[:] = ...`` then ``assert nums[:k] == [1, 2]``)
scored 0. A shrunk argument is written back now where no value read so is it or is held in it,
and no value whose items are read so (``for row in grid`` where ``row`` is) holds it.

A name or attribute path (``nums``, ``self.nums``) is SAFE when every place the tests read it is one
of: an argument of a call of the solution's (``f(nums)``, ``Solution().f(nums)``); one side of an
``==`` (or ``is``) comparison, or the container of an ``in``, or the larger side of an ordering of
its ``len`` (``len(nums) >= k``), or one of two arguments of a unittest ``assert...Equal``, whose
other side does not read it and is no answer of the solution's (a call of its, or a name the tests
bind to one, read whole: ``r`` of ``r = f(xs)`` then ``r == sorted(xs)``, where ``xs`` emptied meets an
emptied ``r``); ``print``; a name bound to it (which must be safe too). Between the
name and that place only a slice or an index (``nums[:k]``), ``len``/``sorted``/``list``/``tuple``/
``set``/``frozenset``/``Counter``/``str``/``repr`` of it, or its dict views may stand. Every other read
(a loop, a comprehension, ``all``/``zip``/``np.all``, a method of it, a function of the tests',
``!=``, an ordering) may be vacuous, so its value stays unwritten, as before: erring that way costs
only a right solution that shrinks its argument there.

Apart from those, ``Vacuous.answered`` names the paths the tests compare, through some function of
theirs, with an answer of the solution's (``assert my_sort(xs) == sorted(xs)``, ``r = f(xs)`` then
``assert r == max(xs)``), each with the function that reads it. Why: Python runs the call first,
so a solution that rewrites its argument (``xs[:] = [0] * len(xs); return list(xs)``) made the
tests' ``sorted(xs)`` agree with its forged answer. Such an argument is not written back when
changed (``in_place``: ``may_change``), as if the solution had copied it: a right in-place sort
still equals ``sorted`` of the tests' own ``xs``. The argument itself compared whole with the
answer (``assert f(xs) == xs``: the answer must be the argument, changed), or its ``len`` (``k == len(nums)``
after a right ``del nums[k:]``), is no such read.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from polyrl.sandbox.object_use import attribute_path
from polyrl.sandbox.remote import DATA_PREDICATES, DATA_QUERIES, Remote
from polyrl.sandbox.source_sites import place_of
from polyrl.sandbox.tests_guard import TESTS_FILES
from polyrl.sandbox.tests_modules import TEST_MODULES
from polyrl.sandbox.zip_sites import defined_names

#: Calls whose one argument's value the comparison around them still compares whole.
_WHOLE = frozenset({"len", "sorted", "list", "tuple", "set", "frozenset", "Counter", "str", "repr"})
#: Methods of a dict whose answer is its contents as a whole.
_VIEWS = frozenset({"keys", "values", "items", "copy"})
#: unittest's assertions of equality between their first two arguments.
_EQUAL = frozenset({"assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual",
                    "assertSetEqual", "assertSequenceEqual", "assertCountEqual", "assertIs"})
_BUILTIN_NAMES = frozenset(dir(builtins))
#: Methods of a sample's value the harness answers from its items, here (``remote.Remote.__getattr__``).
_LOCAL_ANSWERS = DATA_QUERIES | DATA_PREDICATES


class Vacuous(NamedTuple):
    """What ``vacuous_paths`` found: the paths read unsafely as a whole (``whole``), and those
    whose items are (``items``: ``grid`` of ``zip(grid[0], ...)`` or of ``for row in grid`` where
    ``row`` is read unsafely); ``own``: those read unsafely themselves, not as the receiver of a
    method (``s`` of ``s.pop()`` is in ``whole``, a prefix, but not here), except a query the
    harness answers from a sample's items (``r.count(3) == 0``: ``remote.DATA_QUERIES``)."""

    whole: frozenset[str]
    items: frozenset[str]
    own: frozenset[str] = frozenset()
    #: (path, function name, its first line): read in a comparison with an answer of the solution's
    answered: frozenset[tuple[str, str, int]] = frozenset()
    #: (lineno, end_lineno, col_offset, end_col_offset) of the tests' calls that name no function whose
    #: answer ``answered``'s comparisons read (``_free_calls``: ``sort_it(cases[1])`` beside
    #: ``my_sort(x) == sorted(x)``): an argument's change there is written back as Python makes it
    free_calls: frozenset[tuple[int, int, int, int]] = frozenset()


def vacuous_paths(sources: Iterable[str]) -> Vacuous | None:
    """The names and attribute paths the tests read somewhere other than a safe place (module doc),
    each prefix of such a path too (``self`` of ``self.xs``), and those whose items they read so;
    sources that do not parse add none. A loop over a container whose items are read safely
    (``for nums, want in cases: k = f(nums); assert nums[:k] == want``) leaves its items safe.
    None for tests nested too deep to follow: no shrunk argument is written back then."""
    try:
        return _vacuous_paths(sources)
    except RecursionError:
        return None


def _vacuous_paths(sources: Iterable[str]) -> Vacuous:
    trees = [tree for tree in map(_parse, sources) if tree is not None]
    parents = {id(child): node for tree in trees for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    theirs = _with_instances(trees, _bound([tree for tree in trees]))
    answers = _answer_names(trees, theirs)
    unsafe: set[str] = set()
    items: set[str] = set()
    own: set[str] = set()
    aliases: list[tuple[str, str]] = []  # (name bound, path it is bound to)
    for node in (node for tree in trees for node in ast.walk(tree)):
        if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
            continue
        path = attribute_path(node)
        parent = parents.get(id(node))
        if path is None or isinstance(parent, ast.Attribute):
            continue  # not outermost: ``self`` of ``self.xs`` is read as ``self.xs``
        start: ast.AST = node
        if isinstance(node, ast.Attribute) and node.attr in _VIEWS and isinstance(parent, ast.Call) \
                and parent.func is node and not parent.args and not parent.keywords:
            start, path = parent, attribute_path(node.value)  # ``d.items()``: d, whole
            if path is None:
                continue
        verdict = _read_safely(start, path, parents, theirs, answers)
        if verdict is False:
            unsafe |= _prefixes(path)
            own.add(path)
            if isinstance(start, ast.Attribute) and start.attr in _LOCAL_ANSWERS:
                own.add(attribute_path(start.value) or path)  # ``r.count(3)``: r's items, read here
            above = parents.get(id(start))
            if isinstance(above, ast.Subscript) and above.value is start and not isinstance(above.slice, ast.Slice):
                items.add(path)
        elif isinstance(verdict, str):
            aliases.append((verdict, path))
    grown = True
    while grown:  # ``ys = xs`` where ys is read unsafely: so is xs
        before = len(unsafe) + len(own)
        for name, path in aliases:
            if name in unsafe:
                unsafe |= _prefixes(path)
            if name in own:
                own.add(path)
        grown = len(unsafe) + len(own) > before
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _outer_paths(node.target) & unsafe:
            items |= _outer_paths(node.iter)  # ``for row in grid`` where row is read unsafely
    grown = True
    while grown:
        before = len(items)
        for name, path in aliases:
            if name in items:
                items.add(path)
        grown = len(items) > before
    answered, functions = _answered(trees, parents, theirs, answers)
    return Vacuous(frozenset(unsafe), frozenset(items), frozenset(own), answered,
                   _free_calls(trees, functions) if answered else frozenset())


#: Calls of two arguments that check them equal, as ``==`` of the two does.
_EQUAL_CALLS = _EQUAL | {"assertAlmostEqual", "assertAlmostEquals", "isclose", "allclose", "array_equal"}
#: Calls that read their argument's value as it is for ``_answered``: ``f(xs) == list(xs)`` compares
#: the argument itself, and ``k == len(nums)`` the count a right ``del nums[k:]`` leaves.
_SAME = frozenset({"list", "tuple", "len"})


def _answered(trees: list[ast.Module], parents: dict[int, ast.AST], theirs: frozenset[str],
              answers: frozenset[str]) -> tuple[frozenset[tuple[str, str, int]], frozenset[str]]:
    """The paths read in one side of an ``==``/``is`` (or an ``_EQUAL_CALLS`` call) whose other
    side is an answer of the solution's (``_answer_value``), where that side is some function of
    the path, not the path itself or its ``len`` (module doc); each with the code that binds it
    (``_scoped``); and the solution's functions whose answers those other sides are (``_answer_functions``)."""
    found: set[tuple[str, str, int]] = set()
    functions: set[str] = set()
    bindings = _bindings(trees)
    for node in (node for tree in trees for node in ast.walk(tree)):
        if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load) \
                or isinstance(parents.get(id(node)), ast.Attribute) or _called(node, parents):
            continue
        path = attribute_path(node)
        if path is None:
            continue
        current: ast.AST = node
        parent = parents.get(id(current))
        while isinstance(parent, ast.expr) and not _equality(parent):
            current, parent = parent, parents.get(id(parent))
        if isinstance(parent, ast.Compare):
            sides = [parent.left, *parent.comparators]
        elif isinstance(parent, ast.Call) and _equality(parent):
            sides = parent.args[:2]
        else:
            continue
        others = [side for side in sides if side is not current]
        if len(others) == 1 and current in sides and _answer_value(others[0], theirs, answers) \
                and not _answer_value(current, theirs, answers) and _bare(current) is not node:
            found |= _scoped(path, node, parents)
            functions |= _answer_functions(others[0], theirs, bindings)
    return frozenset(found), frozenset(functions)


def _bindings(trees: list[ast.Module]) -> dict[str, list[ast.expr]]:
    """Each name the tests bind -> the expressions bound to it (an assignment's value, what a loop
    or comprehension goes over), scopes merged."""
    found: dict[str, list[ast.expr]] = {}
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            value, targets = node.value, (node.targets if isinstance(node, ast.Assign) else [node.target])
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            value, targets = node.iter, [node.target]
        else:
            continue
        for name in {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}:
            found.setdefault(name, []).append(value)
    return found


def _answer_functions(side: ast.expr, theirs: frozenset[str], bindings: dict[str, list[ast.expr]]) -> set[str]:
    """The names of the solution's functions called (or named: ``map(my_sort, cases)``) in ``side``
    or in what the names it reads are bound to, at any remove (``o`` of ``zip(outs, cases)``,
    ``outs = [my_sort(c) for c in cases]``)."""
    functions: set[str] = set()
    pending, seen = [side], set()
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Call) and _solution_call(node.func, theirs):
                func = node.func
                functions.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute)
                              else "")
            elif isinstance(node, ast.Name) and node.id not in theirs:
                functions.add(node.id)  # ``map(my_sort, cases)``: handed to a call of the tests'
            elif isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                pending.extend(bindings.get(node.id, ()))
    return functions


def _free_calls(trees: list[ast.Module], functions: frozenset[str]) -> frozenset[tuple[int, int, int, int]]:
    """The places of the tests' calls that name none of ``functions``, anywhere inside them (a call
    of another function of the solution's, ``sort_it(cases[1])``; not ``list(map(my_sort, cases))``),
    less any place a call naming one has in another source. Why: ``compared_with_answer`` kept the
    tests' value of every argument held in ``cases`` wherever called in that scope, so a right
    in-place ``sort_it(cases[1])`` beside ``all([my_sort(x) == sorted(x) for x in cases])`` left
    ``cases[1]`` unsorted and failed ``cases[1] == [1, 2]``; what made that rule is a call whose
    answer is compared with a function of its own argument, and a warm-up ``my_sort(x)`` before
    such a comparison names one too, so it keeps the tests' ``x`` as before."""
    free: set[tuple[int, int, int, int]] = set()
    named: set[tuple[int, int, int, int]] = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if not isinstance(node, ast.Call) or node.end_lineno is None or node.end_col_offset is None:
            continue
        place = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)
        names = any(isinstance(n, ast.Name) and n.id in functions or isinstance(n, ast.Attribute) and n.attr in functions
                    for n in ast.walk(node))
        (named if names or "" in functions else free).add(place)
    return frozenset(free - named)


def _called(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether ``node`` is the function of a call (``sorted`` of ``sorted(xs)``)."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Call) and parent.func is node


def _equality(node: ast.AST) -> bool:
    """Whether ``node`` checks two values equal: ``a == b``, ``a is b``, ``assertEqual(a, b)``..."""
    if isinstance(node, ast.Compare):
        return len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.Is))
    if isinstance(node, ast.Call) and len(node.args) >= 2:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        return name in _EQUAL_CALLS
    return False


def _bare(node: ast.AST) -> ast.AST:
    """``node`` with ``list(...)``/``tuple(...)``/``len(...)`` and whole slices (``xs[:]``) taken off."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SAME \
                and len(node.args) == 1 and not node.keywords:
            node = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) \
                and node.slice.lower is node.slice.upper is node.slice.step is None:
            node = node.value
        else:
            return node


def _answer_value(node: ast.AST, theirs: frozenset[str], answers: frozenset[str]) -> bool:
    """``_answer``, through an index or a builtin of one argument too (``f(xs)[0]``, ``sum(r)``);
    ``expected[:k]`` is still none."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _BUILTIN_NAMES \
            and len(node.args) == 1 and not _solution_call(node.func, theirs):
        node = node.args[0]
    return _answer(node, theirs, answers)


#: Comprehensions that run in a code object of their own, by that code's name: a generator
#: expression always, a list, set or dict comprehension before Python 3.12 (inlined since: PEP 709).
_OWN_CODE: dict[type[ast.AST], str] = {ast.GeneratorExp: "<genexpr>"} | ({
    ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>"}
    if sys.version_info < (3, 12) else {})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _scoped(path: str, node: ast.AST, parents: dict[int, ast.AST]) -> set[tuple[str, str, int]]:
    """``path`` read at ``node`` as (path, name and first line of the code object that binds it):
    its innermost function or class (its first decorator's line, as Python counts it), else the
    module. Where ``path`` is a comprehension's loop variable (``[f(x) == sorted(x) for x in
    cases]``), the comprehension's own code binds it (``_OWN_CODE``; else the code around it), and
    where it is the item whole, what it loops over (``cases``, whose items the arguments are) is
    read so too, in the code around (``res = [f(x) for x in cases]`` runs in another comprehension),
    and so, for a ``for`` statement's variable or a part of the tests' ``zip``/``enumerate``
    (``c`` of ``for o, c in zip(outs, cases)``), is what it takes items of (``_whole_items_of``).
    Why: only functions were scopes here, so the tests' ``x`` of such a comprehension was never
    found, and ``xs[:] = [0] * len(xs); return list(xs)`` passed ``assert all([my_sort(x) ==
    sorted(x) for x in cases])`` (1.0)."""
    found: set[tuple[str, str, int]] = set()
    paths = {path}
    child, above = node, parents.get(id(node))
    while above is not None:
        if isinstance(above, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([above.lineno, *(d.lineno for d in above.decorator_list)])
            return found | {(p, above.name, first) for p in paths}
        if isinstance(above, ast.Lambda):
            return found | {(p, "<lambda>", above.lineno) for p in paths}
        if isinstance(above, _COMPREHENSIONS) and child is not above.generators[0].iter:
            own = _OWN_CODE.get(type(above))
            for loop in reversed(above.generators):  # a later loop may go over an earlier one's variable
                names = {p.split(".")[0] for p in _outer_paths(loop.target)}
                looped = {p for p in paths if p.split(".")[0] in names}
                if looped:
                    if own is not None:
                        found |= {(p, own, above.lineno) for p in looped}
                        paths -= looped
                    paths |= _whole_items_of(loop.target, loop.iter, looped)
        elif isinstance(above, (ast.For, ast.AsyncFor)) and child is not above.iter and child is not above.target:
            paths |= _whole_items_of(above.target, above.iter, paths)  # ``for o, c in zip(outs, cases)``
        child, above = above, parents.get(id(above))
    return found | {(p, "<module>", 1) for p in paths}


def _whole_items_of(target: ast.expr, iterable: ast.expr, paths: set[str]) -> set[str]:
    """The paths whose items those of ``paths`` a loop's ``target`` binds are, whole
    (``_item_sources``): ``cases`` for ``x`` of ``for x in cases`` or ``c`` of ``for o, c in
    zip(outs, cases)``; none for ``want`` of ``for nums, want in cases`` (a part of an item)."""
    sources = _item_sources(target, iterable) or {}
    found: set[str] = set()
    for p in paths:
        source = sources.get(p.split(".")[0])
        if source is not None:
            found |= _looped_paths(source)
    return found


def compared_with_answer(value: Any, vacuous: Vacuous) -> bool:
    """Whether a path of ``vacuous.answered``, as the tests' frame of its function binds it now,
    is ``value``, holds it or is held in it (module doc); never where the tests' call passing it
    names no function whose answer such a comparison reads (``Vacuous.free_calls``)."""
    inside = {id(v) for v in _containers(value)}
    frame: types.FrameType | None = sys._getframe(1)
    caller = frame
    while caller is not None and caller.f_code.co_filename not in TESTS_FILES:
        caller = caller.f_back
    if caller is not None and vacuous.free_calls:
        place = place_of(caller.f_code, caller.f_lasti)
        if place is not None and place[1:] in vacuous.free_calls:
            return False
    while frame is not None:
        code = frame.f_code
        if code.co_filename in TESTS_FILES:
            for path, name, line in vacuous.answered:
                if (name, line) != (code.co_name, code.co_firstlineno):
                    continue
                for found in _bound_in(frame, path):
                    if id(found) in inside or any(v is value for v in _containers(found)):
                        return True
        frame = frame.f_back
    return False


def _looped_paths(node: ast.expr) -> set[str]:
    """The paths whose items a loop over ``node`` takes: those of ``d.values()`` are ``d``'s."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS \
            and not node.args and not node.keywords:
        node = node.func.value
    return _outer_paths(node)


def _outer_paths(node: ast.AST) -> set[str]:
    """The outermost names and attribute paths under ``node``."""
    found = attribute_path(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if found is not None:
        return {found}
    return set().union(*[_outer_paths(child) for child in ast.iter_child_nodes(node)])


def _read_safely(node: ast.AST, path: str, parents: dict[int, ast.AST], theirs: frozenset[str],
                 answers: frozenset[str] = frozenset()) -> bool | str:
    """Whether the read of ``path`` at ``node`` is a safe place (module doc); the name it is bound
    to where it is the whole value of a plain assignment (``ys = xs``: safe as ys is); ``answers``:
    the names bound to an answer of the solution's (``_answer_names``)."""
    current = node
    parent = parents.get(id(current))
    while (isinstance(parent, ast.Subscript) and parent.value is current) or (
            isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _WHOLE
            and len(parent.args) == 1 and parent.args[0] is current and not parent.keywords):
        current, parent = parent, parents.get(id(parent))  # through what keeps its value whole
    if isinstance(parent, ast.Compare):
        return _compared_safely(current, parent, path) and _asserted(parent, parents) \
            and not (isinstance(parent.ops[0], (ast.Eq, ast.Is)) and any(
                _answer(side, theirs, answers) for side in (parent.left, *parent.comparators) if side is not current))
    if isinstance(parent, ast.Call) and any(a is current for a in parent.args):
        if _solution_call(parent.func, theirs) or (isinstance(parent.func, ast.Name) and parent.func.id == "print"):
            return True
        if isinstance(parent.func, ast.Attribute) and parent.func.attr in _EQUAL and len(parent.args) == 2:
            other = parent.args[1] if parent.args[0] is current else parent.args[0]
            return not _reads(other, path) and not _answer(other, theirs, answers)
        return False
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is current:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = [attribute_path(t) for t in targets]
        if len(names) == 1 and names[0] is not None:
            return names[0]
    return isinstance(parent, ast.Expr)  # a bare ``nums``: nothing is checked


def _asserted(compare: ast.Compare, parents: dict[int, ast.AST]) -> bool:
    """Whether the comparison is what an ``assert`` (or ``assertTrue``) checks, alone or in an
    ``and``: in a loop's or an ``if``'s test, a shorter value changes what runs, not a verdict."""
    current: ast.AST = compare
    parent = parents.get(id(current))
    while isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
        current, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.Assert):
        return parent.test is current
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
        and parent.func.attr == "assertTrue" and bool(parent.args) and parent.args[0] is current


def _compared_safely(side: ast.AST, compare: ast.Compare, path: str) -> bool:
    """``==``/``is`` against a value that does not read ``path``; the container of ``in``; the
    larger side of an ordering of its ``len`` (shrinking it can only fail there)."""
    operands = [compare.left, *compare.comparators]
    if len(operands) != 2:
        return False
    mine = 0 if operands[0] is side else 1
    other = operands[1 - mine]
    op = type(compare.ops[0])
    if _reads(other, path):
        return False
    is_len = isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id == "len"
    larger = {0: (ast.Gt, ast.GtE), 1: (ast.Lt, ast.LtE)}[mine]
    return op in (ast.Eq, ast.Is) or (op is ast.In and mine == 1) or (is_len and op in larger)


class _Theirs(frozenset[str]):
    """The names the tests bind (``_bound``), with ``instances``: the paths they bind to what a
    call of the solution's made (``s`` of ``s = Solution()``, ``self.sol`` in ``setUp``)."""

    instances: frozenset[str] = frozenset()


def _with_instances(trees: list[ast.Module], theirs: frozenset[str]) -> _Theirs:
    """``theirs`` with the paths the tests bind to an object a call of the solution's made. Why:
    only ``Solution().f(nums)`` was a call of the solution's, so ``s = Solution()`` then ``assert
    s.sortArray(nums) == sorted(nums)`` (LeetCode's shape) compared no answer, and ``nums[:] = [0] *
    len(nums); return list(nums)`` passed it (1.0)."""
    found = _Theirs(theirs)
    paths: set[str] = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _solution_call(node.value.func, found):
            paths.update(p for p in (attribute_path(t) for t in node.targets) if p is not None)
    found.instances = frozenset(paths)
    return found


def _solution_call(func: ast.expr, theirs: frozenset[str]) -> bool:
    """Whether ``func`` is a function of the solution's: a name the tests never bind, or a method
    of an object one of its classes makes (``Solution().f``), also through a name the tests bind
    it to (``s.f`` of ``s = Solution()``: ``_Theirs.instances``)."""
    if isinstance(func, ast.Name):
        return func.id not in theirs
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        return _solution_call(func.value.func, theirs)
    if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
        return attribute_path(func.value) in getattr(theirs, "instances", ())
    return False


def _calls_solution(call: ast.Call, theirs: frozenset[str]) -> bool:
    """Whether ``call`` calls a function of the solution's, itself or handed as an argument
    (``map(my_sort, cases)``). Why the latter: ``outs = list(map(my_sort, cases))`` bound no
    answer, so ``xs[:] = [0] * len(xs); return list(xs)`` passed ``for o, c in zip(outs, cases):
    assert o == sorted(c)`` (1.0), as it did through a comprehension before."""
    return _solution_call(call.func, theirs) or any(
        isinstance(arg, ast.Name) and arg.id not in theirs for arg in (*call.args, *(k.value for k in call.keywords)))


def _answer_names(trees: list[ast.Module], theirs: frozenset[str]) -> frozenset[str]:
    """The names the tests bind to what holds an answer of the solution's (``r = f(xs)``,
    ``k, r = f(xs)``, ``for r in f(xs)``), and a loop's over those (``o`` of ``for o, c in
    zip(outs, cases)`` where ``outs = [f(c) for c in cases]``: ``_item_sources``, so ``c`` is none)."""
    names: set[str] = set()
    loops: list[dict[str, ast.expr]] = []
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            value, targets = node.value, (node.targets if isinstance(node, ast.Assign) else [node.target])
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            value, targets = node.iter, [node.target]
            sources = _item_sources(node.target, node.iter)
            if sources is not None:
                loops.append(sources)
                continue
        else:
            continue
        if any(isinstance(call, ast.Call) and _calls_solution(call, theirs) for call in ast.walk(value)):
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    grown = True
    while grown:  # ``outs`` holds answers, so does ``o`` of a loop over it, and what loops over ``o``
        before = len(names)
        for sources in loops:
            names.update(name for name, source in sources.items() if name not in names and any(
                isinstance(n, ast.Name) and n.id in names or isinstance(n, ast.Call) and _calls_solution(n, theirs)
                for n in ast.walk(source)))
        grown = len(names) > before
    return frozenset(names)


def _item_sources(target: ast.expr, iterable: ast.expr) -> dict[str, ast.expr] | None:
    """Each name a loop's ``target`` binds, with what it takes items of, where that is plain:
    ``for x in xs`` (x: xs), ``for o, c in zip(outs, cases)`` (o: outs, c: cases), ``for i, x in
    enumerate(xs)`` (x: xs; i none), nested (``for i, (o, c) in enumerate(zip(outs, cases))``);
    None where it is not (``for a, b in pairs``: a and b are parts of one item). Why: a loop over
    the tests' ``zip`` pairs each answer with the argument it came from, so ``xs[:] = [0] *
    len(xs); return list(xs)`` passed ``for o, c in zip(outs, cases): assert o == sorted(c)``."""
    if isinstance(target, ast.Name):
        return {target.id: iterable}
    if not isinstance(target, (ast.Tuple, ast.List)) or not isinstance(iterable, ast.Call) \
            or not isinstance(iterable.func, ast.Name) or any(isinstance(a, ast.Starred) for a in iterable.args):
        return None
    if iterable.func.id == "zip" and len(iterable.args) == len(target.elts) \
            and all(k.arg == "strict" for k in iterable.keywords):
        pairs = list(zip(target.elts, iterable.args))
    elif iterable.func.id == "enumerate" and len(iterable.args) == 1 and len(target.elts) == 2 \
            and all(k.arg == "start" for k in iterable.keywords):
        pairs = [(target.elts[1], iterable.args[0])]
    else:
        return None
    found: dict[str, ast.expr] = {}
    for part, source in pairs:
        inner = _item_sources(part, source)
        if inner is None:
            return None
        found.update(inner)
    return found


def _answer(node: ast.AST, theirs: frozenset[str], answers: frozenset[str]) -> bool:
    """Whether ``node`` is, read whole (through a slice, an index or ``_WHOLE``), an answer of the
    solution's: a call of its or a name of ``answers``. ``expected[:k]`` is not, though ``k`` is one."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WHOLE \
                and len(node.args) == 1 and not node.keywords:
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Call):
        return _solution_call(node.func, theirs)
    return isinstance(node, ast.Name) and node.id in answers


def _reads(node: ast.AST, path: str) -> bool:
    """Whether ``node`` reads ``path``, a path under it or one it is under (outermost paths only:
    ``self.expected`` reads no ``self.nums``)."""
    found = attribute_path(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if found is not None:
        return found == path or found.startswith(path + ".") or path.startswith(found + ".")
    return any(_reads(child, path) for child in ast.iter_child_nodes(node))


def _bound(trees: list[ast.Module]) -> frozenset[str]:
    """Every name the tests bind (``zip_sites``' reading), the builtins and the well-known module
    names they may use unimported (``np``)."""
    return defined_names(trees) | _BUILTIN_NAMES | frozenset(TEST_MODULES)


def _prefixes(path: str) -> set[str]:
    parts = path.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts) + 1)}


def reached(value: Any, vacuous: Vacuous) -> bool:
    """Whether a path of ``vacuous``, as the running tests' frames (every one of theirs on the
    stack, and their globals) bind it now, is ``value`` or held anywhere in it (``whole``), or
    holds it at any depth (``items``)."""
    inside = {id(v) for v in _containers(value)}
    for path in vacuous.whole | vacuous.items:
        for found in _resolved(path):
            if id(found) in inside:
                return True
            if path in vacuous.items and any(id(v) == id(value) for v in _containers(found)):
                return True
    return False


def read_vacuously(value: Remote, vacuous: Vacuous) -> bool:
    """Whether a path of ``vacuous.own``, as the running tests' frames bind it now, is ``value``, a
    sample's value, or one of ``vacuous.items`` holds it at any depth. Why not ``reached``: a
    method of a sample's value runs there (``s.pop()`` reads no items here), so a stack whose
    ``pop`` the tests call is read vacuously only where they loop over it (``Remote._shrunk_softly``)."""
    for path in vacuous.own | vacuous.items:
        for found in _resolved(path):
            if found is value and path in vacuous.own:
                return True
            if path in vacuous.items and any(item is value for container in _containers(found)
                                             for item in _held(container)):
                return True
    return False


def _containers(value: Any) -> Iterator[Any]:
    """``value`` and every list, dict, set and tuple in it, at any depth."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen or not (type(item) in (list, set, tuple) or isinstance(item, dict)):
            continue  # a dict subclass too: a defaultdict or Counter argument takes its contents (``in_place``)
        seen.add(id(item))
        yield item
        stack.extend(_held(item))


def _held(container: Any) -> list[Any]:
    """What a container of ``_containers`` holds: a dict's keys and values, whatever its class.
    Why both: ``d[k]`` reads a value and ``for k in d`` a key; and one reading for ``_containers``
    and ``read_vacuously`` (a ``Counter`` or ``defaultdict`` was iterated by its keys there only,
    so a sample's value held as ``d['a']`` and looped over passed as not read vacuously)."""
    if isinstance(container, dict):
        return [*container.keys(), *container.values()]
    return list(container)


def _resolved(path: str) -> Iterator[Any]:
    """What ``path`` (``xs``, ``self.xs``) is in each of the tests' frames on the stack that binds
    it; an attribute of a sample's value or of a module is never read."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in TESTS_FILES:
            yield from _bound_in(frame, path)
        frame = frame.f_back


def _bound_in(frame: types.FrameType, path: str) -> Iterator[Any]:
    """What ``path`` is in ``frame`` (its locals, else its globals), if it binds it."""
    first, *attrs = path.split(".")
    for scope in (frame.f_locals, frame.f_globals):
        if first in scope:
            value = scope[first]
            for attr in attrs:
                if isinstance(value, (Remote, types.ModuleType)):
                    value = None
                    break
                value = getattr(value, "__dict__", {}).get(attr)
            if value is not None:
                yield value
            return


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None

