"""What a reward function's code changes that outlives one call (``isolation.kept_state``).

Why: in a forked child (``isolation = "process"``, the default for math-verify rewards) every such
change is made in the child's copy of the process and lost when the call returns, so a counter,
a curriculum or a cache filled as it goes silently never moves, where TRL, calling the reward on
its main thread, keeps every change. The trainer says so once (``FunctionReward._warn_lost_state``).

The function's source is read (``ast``): a change is an assignment, augmented assignment or
``del`` whose target is rooted at something that outlives the call, or a call of a method that
changes its object (``append``, ``update``, ``setdefault``...) or of a function that changes its
first argument (``heapq.heappush``, ``random.shuffle``, ``bisect.insort``, ``next``, ``setattr``).
What outlives the call: a module-level name (``STATE["n"] += 1``, ``CACHE[key] = v``,
``SEEN.append(x)``, ``NS.count += 1``, ``globals()[k] = v``), a global assigned under ``global``,
a variable of the function around it (a closure's ``cache[key] = v``, ``nonlocal n``), and, for a
callable object or a method, its object (``self.level += 1``, ``self.cache[key] = v``,
``type(self).count += 1``), and a mutable default argument (``def f(completions, seen=set())``).
A local name bound to one of those (``cache = self.cache``) stands for it. A draw from a random
generator that outlives the call (``np.random.rand()``, ``RNG.integers(...)``, ``self.rng.random()``
on a ``random.Random(seed)``) changes it too: each child starts from the trainer's unmoved
generator, so every call draws the same numbers, where TRL's draws move on (the ``random``
module's own generator is not: CPython reseeds it in every forked child). The functions of the
reward's own module it calls (``remember(x)``) and its object's methods (``self._remember(x)``)
are read too. Why the source and not the bytecode alone: the bytecode of
``STATE["n"] += 1`` or ``self.cache[key] = v`` keeps the container several instructions (and
``COPY``/``SWAP`` shuffles) away from the store, and its opcodes change with every Python version.
Without source (a function made by ``exec``), the bytecode is read for what it shows plainly.

Not state: a local container (``seen = []`` made in the call), a cell of a function the call
itself defines, a module's attributes (``np.random.seed``), a ``functools.lru_cache`` (losing it
costs time, not behaviour), and code of other modules (a library keeping its own cache).
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from types import CodeType, ModuleType
from typing import Any

#: methods that change the container they are called on (a list, dict, set, deque or counter kept across calls)
MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove",
                      "discard", "clear", "appendleft", "extendleft", "sort", "reverse", "rotate", "move_to_end",
                      "difference_update", "intersection_update", "symmetric_difference_update", "subtract",
                      "put", "put_nowait", "__setitem__", "__delitem__", "__iadd__", "__ior__"})
#: functions that change their first argument (heapq's, bisect's, random.shuffle; next advances an iterator)
_CHANGES_FIRST_ARGUMENT = frozenset({"heappush", "heappop", "heapify", "heapreplace", "heappushpop", "shuffle",
                                     "insort", "insort_left", "insort_right", "next", "setattr", "delattr"})
#: how many functions (the reward and the helpers it calls) are read at most
_MOST_FUNCTIONS = 32
#: what a draw from a generator the child copies does: the same numbers at every call
_REPEATS = ", whose state every call's child copies unmoved (each call draws the same numbers)"
#: a random generator's methods that do not draw (what a child may call without losing anything)
_NOT_DRAWS = frozenset({"seed", "getstate", "setstate", "__getstate__", "__setstate__", "__reduce__", "bit_generator"})


def _is_generator(value: Any) -> bool:
    """Whether ``value`` is a random generator whose draws move its state and that a forked child
    copies unmoved (``random.Random``, numpy's ``Generator`` and ``RandomState``). Not the ``random``
    module's own generator: CPython reseeds it in every forked child (``os.register_at_fork``)."""
    import random

    if isinstance(value, random.Random):
        return value is not getattr(random, "_inst", None)
    numpy_random = sys.modules.get("numpy.random")
    kinds = tuple(getattr(numpy_random, k) for k in ("Generator", "RandomState") if hasattr(numpy_random, k))
    return bool(kinds) and isinstance(value, kinds)


def _mutable(value: Any) -> bool:
    """Whether a default argument's value is a container a call can change (a list, dict, set...)."""
    if value is None or isinstance(value, (str, bytes, int, float, complex, bool, tuple, frozenset, range, type)) \
            or callable(value) or isinstance(value, ModuleType):
        return False
    return any(callable(getattr(value, name, None)) for name in ("__setitem__", "append", "add", "update"))


def kept_state(fn: Any, python_function: Callable[[Any], Any]) -> str | None:
    """What ``fn``'s own code changes that outlives a call (a phrase: "changes the module-level
    'CACHE' (item assignment)"), or None. ``python_function``: the function whose code ``fn``
    runs (``isolation._python_function``)."""
    function = python_function(fn)
    if function is None:
        return None
    method_like = inspect.ismethod(fn) or not inspect.isfunction(fn) and not isinstance(fn, functools.partial)
    owner_class: type | None = None
    owner: Any = None
    if inspect.ismethod(fn):
        owner = fn.__self__
        owner_class = owner if isinstance(owner, type) else type(owner)
    elif method_like:
        owner, owner_class = fn, type(fn)
    pending: list[tuple[Any, bool, str]] = [(function, method_like, "")]
    seen: set[Any] = set()
    while pending and len(seen) < _MOST_FUNCTIONS:
        function, has_owner, via = pending.pop(0)
        if function in seen:
            continue
        seen.add(function)
        scan = _Scan(function, has_owner, owner_class, owner)
        found = scan.run()
        if found is not None:
            return found + via
        for helper, helper_owner in scan.helpers:
            name = getattr(helper, "__qualname__", getattr(helper, "__name__", "?"))
            pending.append((helper, helper_owner, via or f" (in {name}, which it calls)"))
    return None


def _owner_name(code: CodeType, has_owner: bool) -> str | None:
    return code.co_varnames[0] if has_owner and code.co_argcount else None


def _function_node(function: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    """The syntax tree of ``function`` from its source, or None when there is none to read."""
    try:
        lines, _ = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    text = "".join(lines)
    if text[:1] in (" ", "\t"):  # a method or a nested function: indented as a block
        text = "if True:\n" + text
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # a lambda cut out of a longer expression
        return None
    code = function.__code__
    names = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name or \
                isinstance(node, ast.Lambda) and code.co_name == "<lambda>":
            args = node.args
            if [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)] == names:
                return node
    return None


def _codes(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if inspect.iscode(const):
            yield from _codes(const)


class _Scan:
    """One function's changes to state (``run``) and the helpers it calls (``helpers``)."""

    def __init__(self, function: Any, has_owner: bool, owner_class: type | None, owner_object: Any = None) -> None:
        self.function = function
        self.code: CodeType = function.__code__
        self.owner = _owner_name(self.code, has_owner)
        self.owner_class = owner_class
        self.owner_object = owner_object  # the object itself where known (a callable object, a bound method's)
        self.globals: dict[str, Any] = function.__globals__
        #: names local to the function or to code nested in it (a comprehension's, a nested function's)
        self.locals = {name for code in _codes(self.code) for name in (*code.co_varnames, *code.co_cellvars)}
        self.free = set(self.code.co_freevars)  # variables of the function around it
        defaults = dict(zip(reversed(self.code.co_varnames[:self.code.co_argcount]),
                            reversed(function.__defaults__ or ())))
        defaults.update(function.__kwdefaults__ or {})
        #: parameters whose default is a container a call can change: it is made once, kept by the function
        self.kept_defaults = {name for name, value in defaults.items() if _mutable(value)}
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()
        self.aliases: dict[str, str] = {}  # a local name -> the state it was bound to
        self.helpers: list[tuple[Any, bool]] = []

    def run(self) -> str | None:
        node = _function_node(self.function)
        if node is None:
            return _bytecode_state(self.code, self.owner, set(self.code.co_freevars))
        body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
        inside = [sub for statement in body for sub in ast.walk(statement)]  # not the decorators or defaults
        for sub in inside:
            if isinstance(sub, ast.Global):
                self.declared_global.update(sub.names)
            elif isinstance(sub, ast.Nonlocal):
                self.declared_nonlocal.update(sub.names)
        for _ in range(3):  # an alias of an alias
            for sub in inside:
                self._alias(sub)
        for sub in inside:
            found = self._change(sub)
            if found is not None:
                return found
        return None

    # --- what a name or an expression stands for -------------------------------------------

    def _root(self, expr: ast.AST) -> tuple[str | None, list[str]]:
        """What ``expr`` is part of that outlives the call ("the module-level 'X'", "self.cache"),
        or None; and the attribute names on the way from it (outermost first)."""
        attrs: list[str] = []
        while True:
            if isinstance(expr, ast.Attribute):
                attrs.append(expr.attr)
                expr = expr.value
            elif isinstance(expr, ast.Subscript):
                attrs.clear()  # self.cache[k].x: the state is self.cache
                expr = expr.value
            elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
                attrs.clear()  # STATE.setdefault(k, []).append: what the method returns is STATE's
                expr = expr.func.value
            elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and not expr.args and \
                    expr.func.id == "globals" and self._is_builtin("globals"):
                return "the module's globals()", []
            elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and len(expr.args) == 1 and \
                    expr.func.id in ("type", "vars") and self._is_builtin(expr.func.id):
                expr = expr.args[0]  # type(self).count, vars(self)[k]
                attrs.clear()
            else:
                break
        attrs.reverse()
        if not isinstance(expr, ast.Name):
            return None, []
        return self._name_state(expr.id, attrs), attrs

    def _is_builtin(self, name: str) -> bool:
        return name not in self.locals and name not in self.free and name not in self.globals and \
            hasattr(builtins, name)

    def _name_state(self, name: str, attrs: list[str]) -> str | None:
        if name == self.owner:
            return f"{name}.{attrs[0]}" if attrs else name
        if name in self.aliases:
            return self.aliases[name]
        if name in self.declared_global:
            return f"the module-level {name!r}"
        if name in self.kept_defaults:
            return f"its default argument {name!r}"
        if name in self.locals:
            return None
        if name in self.free:
            return f"{name!r} of the function around it"
        if name not in self.globals:
            return None  # a builtin (print, len) or a name not defined yet
        value = self.globals[name]
        if isinstance(value, ModuleType) or inspect.isfunction(value) or inspect.isbuiltin(value):
            return None  # a module's attributes, a function called: not the reward's own state
        return f"the module-level {name!r}"

    def _alias(self, node: ast.AST) -> None:
        """``x = self.cache`` (or ``x = CACHE["a"]``, ``for row in self.rows``): x stands for that state."""
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.iter
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        else:
            return
        if target == self.owner or target in self.declared_global or not isinstance(
                value, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            return
        if isinstance(value, ast.Call) and not (isinstance(value.func, ast.Attribute)
                                                and value.func.attr in ("setdefault", "get")):
            return  # what a call returns is a new object, but a container's own item
        state, _ = self._root(value)
        if state is not None:
            self.aliases.setdefault(target, state)

    # --- what changes it -----------------------------------------------------------------

    def _change(self, node: ast.AST) -> str | None:
        if isinstance(node, (ast.Assign, ast.Delete)):
            for target in node.targets:
                found = self._target(target, deleted=isinstance(node, ast.Delete))
                if found is not None:
                    return found
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and (isinstance(node, ast.AugAssign)
                                                                  or node.value is not None):
            return self._target(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.withitem, ast.comprehension)):
            bound: ast.expr | None = node.optional_vars if isinstance(node, ast.withitem) else node.target
            return None if bound is None or isinstance(bound, ast.Name) else self._target(bound)
        elif isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _target(self, target: ast.AST, deleted: bool = False) -> str | None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                found = self._target(element, deleted)
                if found is not None:
                    return found
            return None
        if isinstance(target, ast.Starred):
            return self._target(target.value, deleted)
        if isinstance(target, ast.Name):
            if target.id in self.declared_global:
                return f"assigns the global {target.id!r}"
            if target.id in self.free and target.id in self.declared_nonlocal:
                return f"assigns {target.id!r} of the function around it (nonlocal)"
            return None
        if isinstance(target, ast.Attribute):
            state, attrs = self._root(target.value)
            if state is None:
                return None
            if isinstance(target.value, ast.Name) and target.value.id == self.owner:
                return f"{'deletes' if deleted else 'sets'} {self.owner}.{target.attr}"
            return f"changes {state} ({'deletes' if deleted else 'sets'} .{target.attr})"
        if isinstance(target, ast.Subscript):
            state, _ = self._root(target.value)
            if state is None:
                return None
            return f"changes {state} ({'del' if deleted else 'item assignment'})"
        return None

    def _call(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            state, _ = self._root(func.value)
            if state is not None:
                return f"changes {state} ({func.attr})"
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in _CHANGES_FIRST_ARGUMENT and call.args and not (isinstance(func, ast.Name) and name in self.locals):
            state, _ = self._root(call.args[0])
            if state is not None:
                return f"changes {state} ({name})"
        drawn = self._draw(func)
        if drawn is not None:
            return drawn
        self._helper(func)
        return None

    def _value(self, expr: ast.AST) -> Any:
        """The object ``expr`` (a name, or attributes of one) stands for where it outlives the call
        (a module-level name, a closure's, the object's own attribute); None where unknown."""
        if isinstance(expr, ast.Attribute):
            base = self._value(expr.value)
            if base is None:
                return None
            if isinstance(base, ModuleType) or base is self.owner_object:
                try:
                    return inspect.getattr_static(base, expr.attr)
                except AttributeError:
                    return None
            return None
        if not isinstance(expr, ast.Name):
            return None
        if expr.id == self.owner and self.owner_object is not None:
            return self.owner_object
        if expr.id in self.locals:
            return None
        if expr.id in self.free:
            try:
                return (self.function.__closure__ or ())[self.code.co_freevars.index(expr.id)].cell_contents
            except (IndexError, ValueError):
                return None
        return self.globals.get(expr.id)

    def _draw(self, func: ast.AST) -> str | None:
        """A call that draws from a random generator outliving the call: ``random.random()``,
        ``choice(...)`` imported from random, ``np.random.rand()``, ``RNG.integers(...)``, ``self.rng.random()``."""
        if isinstance(func, ast.Attribute) and func.attr not in _NOT_DRAWS:
            generator = self._value(func.value)
            if _is_generator(generator):
                return f"draws from the random generator {ast.unparse(func.value)} ({func.attr}){_REPEATS}"
        target = self._value(func)
        holder = getattr(target, "__self__", None)
        if holder is not None and _is_generator(holder) and getattr(target, "__name__", "") not in _NOT_DRAWS:
            return f"draws from a module-level random generator ({ast.unparse(func)}){_REPEATS}"
        return None

    def _helper(self, func: ast.AST) -> None:
        """Remember a function of the reward's own module (or its object's method) that it calls."""
        value: Any = None
        has_owner = False
        if isinstance(func, ast.Name) and func.id not in self.locals:
            if func.id in self.free:
                index = self.code.co_freevars.index(func.id)
                try:
                    value = (self.function.__closure__ or ())[index].cell_contents
                except (IndexError, ValueError):
                    value = None
            else:
                value = self.globals.get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == self.owner \
                and self.owner_class is not None:
            value = inspect.getattr_static(self.owner_class, func.attr, None)
            if isinstance(value, (staticmethod, classmethod)):
                has_owner = isinstance(value, classmethod)
                value = value.__func__
            else:
                has_owner = True
        if inspect.isfunction(value):
            value = inspect.unwrap(value)
            if inspect.isfunction(value) and value.__globals__ is self.globals:
                self.helpers.append((value, has_owner))


def _bytecode_state(code: CodeType, owner: str | None, free: set[str]) -> str | None:
    """``kept_state`` for code without source, from its bytecode: a global assigned, a nonlocal
    assigned, an attribute of the object set, a mutating method called on a module-level name or
    on an attribute of the object (what the instructions show next to each other)."""
    previous: list[Any] = []
    for ins in dis.get_instructions(code):
        if ins.opname == "STORE_GLOBAL":
            return f"assigns the global {ins.argval!r}"
        if ins.opname == "STORE_DEREF" and ins.argval in free:
            return f"assigns {ins.argval!r} of the function around it (nonlocal)"
        if owner is not None and ins.opname == "STORE_ATTR":
            return f"sets {owner}.{ins.argval}"
        if ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval in MUTATORS and previous:
            before = previous[-1]
            if before.opname == "LOAD_GLOBAL":
                return f"changes the module-level {before.argval!r} ({ins.argval})"
            if owner is not None and before.opname == "LOAD_ATTR" and len(previous) > 1 and \
                    previous[-2].opname == "LOAD_FAST" and previous[-2].argval == owner:
                return f"changes {owner}.{before.argval} ({ins.argval})"
        previous = (previous + [ins])[-2:]
    for const in code.co_consts:
        if inspect.iscode(const):
            found = _bytecode_state(const, None, free & set(const.co_freevars))  # a cell of its own call is no state
            if found is not None:
                return found
    return None
