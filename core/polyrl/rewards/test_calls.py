"""How pytest calls one test function it found: its cases, its fixtures, its setup and teardown.

Why a module of its own: ``test_cells`` decides which statements of a cell are tests; a pytest
``test_*`` function is then called as pytest would call it, and each part of that was a shape
whose test raised TypeError or AttributeError for every completion, a right one too (or ran one
case of many): ``@pytest.mark.parametrize`` cases (stacked ones multiply; ``indirect`` ones go
to the fixture of that name as ``request.param``), the cell's own ``@pytest.fixture`` functions
(at the top or in the test's class, ``name=`` renamed, ``autouse``, yielding, depending on each
other, parametrized with ``params=[...]``: one call per param, each reading ``request.param``),
pytest's ``capsys``/``capfd``/``monkeypatch`` (``polyrl.sandbox.fixtures``), and the xunit-style
``setup_function``/``teardown_function``, ``setup_method``/``teardown_method`` (one instance of
the class for the fixtures, the setup and the test, as pytest has), ``setup_class``/
``teardown_class`` and ``setup_module``/``teardown_module``. A test naming a fixture none of
these gives (``tmp_path``, ``tmpdir``, ``tmp_path_factory``, ``caplog``, ``request`` itself, a
plugin's ``mocker``) is an error naming it: called without it, it failed every completion, and
``tmp_path``'s files could not be given at all (the tests run in the trainer, the solution in its
sandbox: no file the one writes is the other's, and the tests' copy may write none).
"""

from __future__ import annotations

import ast
import itertools
import textwrap

from polyrl.errors import RewardError
from polyrl.sandbox.fixtures import FIXTURES

NAME = "code_tests"
#: The prefix of the name a fixture of the tests' own is bound to while a test runs (``_with_own``).
_OWN_NAME = "_polyrl_fixture_"
#: The prefix of the name a test's fixture is bound to while it runs, its maker's name after it (``_with_fixtures``).
_FIXTURE_NAME = "_polyrl_"
#: How generated steps reach ``polyrl.sandbox.fixtures`` (the tests' own ``__import__``).
_FIXTURES_MODULE = "__import__('polyrl.sandbox.fixtures', fromlist=['own'])"
#: The most cases a ``range(...)`` of ``parametrize`` or ``params`` expands to.
MAX_RANGE_CASES = 1000
#: xunit-style setup and teardown a module, a function test, a class and a method test get (pytest's names; a
#: module's unittest-style ``setUpModule``/``tearDownModule`` too, which pytest and unittest call alike).
MODULE_SETUPS = ("setup_module", "setUpModule")
MODULE_TEARDOWNS = ("teardown_module", "tearDownModule")


class Fixtures(dict[str, list[str]]):
    """Fixtures of the cell's own by name, each with the parameters it names. ``autouse``: those
    made for every test (``@pytest.fixture(autouse=True)``), named by it or not; ``params``: a
    parametrized one's cases, each param's source; ``functions``: the name its function is bound
    to, where ``name=`` names the fixture otherwise; ``methods``: one of the test's class -> the
    parameter its instance is given as (``self``)."""

    def __init__(self, found: dict[str, list[str]] | None = None, autouse: set[str] | None = None,
                 params: dict[str, list[str]] | None = None, functions: dict[str, str] | None = None,
                 methods: dict[str, str] | None = None) -> None:
        super().__init__(found or {})
        self.autouse = frozenset(autouse or ())
        self.params = dict(params or {})
        self.functions = dict(functions or {})
        self.methods = dict(methods or {})

    def below(self, closer: Fixtures) -> Fixtures:
        """These with ``closer``'s (a class's own) over them, as pytest lets the closer scope's win."""
        def merged(mine: dict, theirs: dict) -> dict:
            return {**{k: v for k, v in mine.items() if k not in closer}, **theirs}
        return Fixtures(merged(self, closer), {n for n in self.autouse if n not in closer} | set(closer.autouse),
                        merged(self.params, closer.params), merged(self.functions, closer.functions),
                        merged(self.methods, closer.methods))


class Scope:
    """Where a test function sits: ``cls`` (its ``Test*`` class, or None for one at the top),
    the fixtures it may name, and the xunit setup and teardown the module or class defines."""

    def __init__(self, fixtures: Fixtures, cls: ast.ClassDef | None = None, hooks: frozenset[str] = frozenset()) -> None:
        self.fixtures = fixtures
        self.cls = cls
        self.hooks = hooks


def hooks_of(body: list[ast.stmt]) -> frozenset[str]:
    """The names of the functions (or methods) a body defines."""
    return frozenset(node.name for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def name_of(node: ast.AST) -> str | None:
    """The name a ``Name`` or an ``Attribute`` ends in (``patch``, ``mock.patch``); None for others."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [p.arg for p in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]


def _is_static(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(name_of(d) == "staticmethod" for d in node.decorator_list)


def _required(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    """The parameters a call must fill (those without a default), less a method's instance and the
    mocks its ``@patch`` decorators pass first (``_patched``), as pytest's ``getfuncargnames``."""
    positional = [*node.args.posonlyargs, *node.args.args]
    required = [p.arg for p in positional[:len(positional) - len(node.args.defaults)]]
    if method and required:
        required = required[1:]
    required = required[_patched(node):]
    return required + [p.arg for p, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is None]


def _patched(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many mocks ``unittest.mock``'s decorators hand the test as its first arguments: one per
    ``@patch(target)`` and ``@patch.object(target, name)`` given no ``new``."""
    count = 0
    for d in node.decorator_list:
        if not isinstance(d, ast.Call):
            continue
        func = d.func
        if name_of(func) == "patch":
            count += len(d.args) < 2 and not any(k.arg == "new" for k in d.keywords)
        elif isinstance(func, ast.Attribute) and func.attr == "object" and name_of(func.value) == "patch":
            count += len(d.args) < 3 and not any(k.arg == "new" for k in d.keywords)
    return count


def own_fixtures(body: list[ast.stmt], where: str = "", literals: dict[str, ast.expr] | None = None,
                 in_class: bool = False) -> Fixtures:
    """The pytest fixtures a body defines (``@pytest.fixture``, ``@fixture``, ``@pytest.fixture(scope=...,
    params=..., name=..., autouse=...)``; ``in_class``: a ``Test*`` class's methods, made from its
    instance), each with the parameters it names. ``params`` must be written out (or be a list bound
    once at the top, or a ``range`` of constants), else the cell is an error, as a ``parametrize``'s."""
    found: dict[str, list[str]] = {}
    autouse: set[str] = set()
    params: dict[str, list[str]] = {}
    functions: dict[str, str] = {}
    methods: dict[str, str] = {}
    for node in body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for d in node.decorator_list:
            call = d if isinstance(d, ast.Call) else None
            if name_of(call.func if call else d) != "fixture":
                continue
            keywords = {k.arg: k.value for k in call.keywords if k.arg} if call else {}
            renamed = keywords.get("name")
            name = renamed.value if isinstance(renamed, ast.Constant) and isinstance(renamed.value, str) else node.name
            names = _parameters(node)
            if in_class and not _is_static(node) and names:
                methods[name] = names[0]
                names = names[1:]
            found[name] = names
            functions[name] = node.name
            flag = keywords.get("autouse")
            if isinstance(flag, ast.Constant) and flag.value is True:
                autouse.add(name)  # made for every test of the cell (or class), named or not
            if "params" in keywords:
                params[name] = _fixture_params(keywords["params"], name, where, literals or {})
    return Fixtures(found, autouse, params, functions, methods)


def _refused(where: str, why: str, fix: str) -> RewardError:
    return RewardError(f"{NAME}: the tests{where} {why}, which code_tests cannot expand. Fix: {fix}")


def _values(node: ast.expr, literals: dict[str, ast.expr]) -> list[ast.expr] | None:
    """The cases a ``parametrize``'s ``argvalues`` or a fixture's ``params`` write out: a list or
    tuple, one bound once at the top (``CASES = [...]``), or a ``range`` of int constants (at
    most ``MAX_RANGE_CASES``); None for anything computed at run time."""
    if isinstance(node, ast.Name) and node.id in literals:
        node = literals[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, ast.Call) and name_of(node.func) == "range" and isinstance(node.func, ast.Name) \
            and not node.keywords and 1 <= len(node.args) <= 3:
        bounds = [_int(a) for a in node.args]
        if all(b is not None for b in bounds) and (len(bounds) < 3 or bounds[2] != 0):
            cases = range(*bounds)  # type: ignore[arg-type]
            if len(cases) <= MAX_RANGE_CASES:
                return [ast.Constant(i) for i in cases]
    return None


def _int(node: ast.expr) -> int | None:
    """An int constant written out (``3``, ``-1``), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    return sign * node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _skipped(value: ast.expr) -> bool:
    """Whether a case is a ``pytest.param(..., marks=skip/skipif/xfail)``, which the runner expects no pass from."""
    if not (isinstance(value, ast.Call) and name_of(value.func) == "param"):
        return False
    marks = next((k.value for k in value.keywords if k.arg == "marks"), None)
    return marks is not None and any(name_of(m) in ("skip", "skipif", "xfail") for m in ast.walk(marks))


def _fixture_params(node: ast.expr, name: str, where: str, literals: dict[str, ast.expr]) -> list[str]:
    """Each param of ``@pytest.fixture(params=...)`` as source, those marked skip or xfail left out."""
    values = _values(node, literals)
    fix = "write the params out in the decorator (@pytest.fixture(params=[1, 2, 3]))"
    if values is None:
        raise _refused(where, f"give fixture {name}() params computed at run time ({ast.unparse(node)[:60]})", fix)
    cases = []
    for value in values:
        if _skipped(value):
            continue
        if isinstance(value, ast.Call) and name_of(value.func) == "param":
            if len(value.args) != 1 or isinstance(value.args[0], ast.Starred):
                raise _refused(where, f"give fixture {name}() a param of {len(value.args)} values "
                                            f"({ast.unparse(value)[:60]})", fix)
            value = value.args[0]
        if isinstance(value, ast.Starred):
            raise _refused(where, f"give fixture {name}() a starred param ({ast.unparse(value)[:60]})", fix)
        cases.append(ast.unparse(value))
    return cases


class Cases:
    """One ``parametrize``'s cases, each as ``name=value`` arguments, and which names are ``indirect``."""

    def __init__(self, cases: list[list[str]], indirect: frozenset[str]) -> None:
        self.cases = cases
        self.indirect = indirect


def parametrize_cases(decorator: ast.Call, target: str, where: str, literals: dict[str, ast.expr]) -> Cases:
    """Each case of one ``parametrize(argnames, argvalues)`` as ``name=value`` arguments; a
    ``pytest.param`` marked skip or xfail is left out (the runner expects no pass from it)."""
    fix = ("write the argument names as a string and the cases as a list of tuples in the decorator "
           "(@pytest.mark.parametrize(\"x, want\", [(1, 2), (5, 10)]))")

    def refuse(why: str) -> RewardError:
        return _refused(where, f"parametrize {target}() with {why}", fix)
    given = {k.arg: k.value for k in decorator.keywords if k.arg}
    args = [*decorator.args, *(given[k] for k in ("argnames", "argvalues") if k in given)]
    if len(args) != 2 or set(given) - {"argnames", "argvalues", "ids", "scope", "indirect"}:
        raise refuse("arguments other than argnames, argvalues, ids and indirect")
    names_node, values_node = args
    if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
        names = [n.strip() for n in names_node.value.split(",") if n.strip()]
    elif isinstance(names_node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts):
        names = [str(e.value).strip() for e in names_node.elts if isinstance(e, ast.Constant)]
    else:
        raise refuse("argument names that are not written out")
    if not names or not all(n.isidentifier() for n in names):
        raise refuse(f"argument names {ast.unparse(names_node)}")
    indirect = _indirect(given.get("indirect"), names)
    if indirect is None:
        raise refuse(f"indirect={ast.unparse(given['indirect'])[:60]}, not True, False or a list of its names")
    values = _values(values_node, literals)
    if values is None:
        raise refuse(f"cases computed at run time ({ast.unparse(values_node)[:60]})")
    cases: list[list[str]] = []
    for value in values:
        if _skipped(value):
            continue
        if isinstance(value, ast.Call) and name_of(value.func) == "param":
            items = list(value.args)
        elif len(names) == 1:
            items = [value]
        elif isinstance(value, (ast.List, ast.Tuple)):
            items = list(value.elts)
        else:
            raise refuse(f"a case that is not a tuple ({ast.unparse(value)[:60]})")
        if len(items) != len(names) or any(isinstance(i, ast.Starred) for i in items):
            raise refuse(f"a case of {len(items)} values for {len(names)} names ({ast.unparse(value)[:60]})")
        cases.append([f"{n}={ast.unparse(i)}" for n, i in zip(names, items)])
    return Cases(cases, indirect)


def _indirect(node: ast.expr | None, names: list[str]) -> frozenset[str] | None:
    """The argument names ``indirect=`` sends to their fixture (True: all; a list: those), or None
    where that is not written out."""
    if node is None or (isinstance(node, ast.Constant) and node.value is False):
        return frozenset()
    if isinstance(node, ast.Constant) and node.value is True:
        return frozenset(names)
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in names for e in node.elts):
        return frozenset(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return None


def builtin_fixtures(own: Fixtures) -> dict[str, str]:
    """The pytest built-in fixtures given here (``FIXTURES``) less those the cell defines itself: as
    in pytest, a module's own ``capsys`` or ``monkeypatch`` overrides the built-in. Why: read as both,
    ``test_a(capsys)`` was called ``test_a(capsys=..., capsys=...)`` (a SyntaxError) and a fixture
    naming the cell's ``monkeypatch`` read a name never bound (a NameError): every completion failed."""
    return {name: maker for name, maker in FIXTURES.items() if name not in own}


def _split(args: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in args)


def _needed(node: ast.FunctionDef | ast.AsyncFunctionDef, given: set[str], indirect: set[str],
            own: Fixtures) -> tuple[list[str], str | None]:
    """The tests' own fixtures a test needs (its ``autouse`` ones first, as pytest makes them, then
    those it names), each after those it names in turn; and the first name one of them (or an
    ``indirect`` case) needs that nothing here gives, as "``x``, which fixture ``f()`` names"."""
    order: list[str] = []
    builtin = builtin_fixtures(own)
    missing: list[str] = []

    def need(name: str, path: tuple[str, ...]) -> bool:
        if name in order:
            return True
        if name in path or name not in own:
            missing.append(f"{name}, which fixture {path[-1]}() names" if path else name)
            return False
        for p in own[name]:
            # a parametrize case fills it for the fixtures too, as pytest's; ``request`` is made for each
            if p in builtin or p in given or (p == "request" and "request" not in own):
                continue
            if not need(p, (*path, name)):
                return False
        order.append(name)
        return True

    wanted = [name for name in own if name in own.autouse and name not in given]
    wanted += [p for p in _parameters(node) if p in own and p not in given and p not in wanted]
    wanted += [p for p in sorted(indirect) if p not in wanted]
    for name in wanted:
        if not need(name, ()):
            return order, missing[0]
    return order, None


def calls(node: ast.FunctionDef | ast.AsyncFunctionDef, where: str, literals: dict[str, ast.expr],
          scope: Scope) -> list[str]:
    """The calls a test runner makes of a test function: one per case of its
    ``@pytest.mark.parametrize`` decorators (their product when stacked) and per param of each
    parametrized fixture it needs (their product too), else one; each inside its fixtures and its
    xunit setup and teardown (module doc). Cases and params must be written out, since they are
    the tests and must be counted before they run; a fixture nothing here gives is an error."""
    cls = scope.cls
    target = f"{cls.name}().{node.name}" if cls is not None else node.name
    grids = [parametrize_cases(d, target, where, literals) for d in node.decorator_list
             if isinstance(d, ast.Call) and name_of(d.func) == "parametrize"]
    if any(not g.cases for g in grids):
        # every case marked skip or xfail (or none written): a runner calls it with none, so its
        # arguments are no fixtures to look for ("fixture x, which code_tests does not give" said
        # so); with no other test, ``test_cells`` says no case runs
        return []
    indirect = set().union(*(g.indirect for g in grids))
    combos = itertools.product(*(g.cases for g in grids)) if grids else [()]
    cases = [[arg for case in combo for arg in case] for combo in combos]
    given = {name for args in cases for name in _split(args)} - indirect
    own = scope.fixtures
    builtin = builtin_fixtures(own)
    mine, missing = _needed(node, given, indirect, own)
    method = cls is not None and not _is_static(node)
    if missing is None:
        missing = next((p for p in _required(node, method) if p not in given and p not in builtin and p not in own
                        and p not in indirect), None)
    if missing is None:
        missing = next((p for p in sorted(indirect) if p not in own), None)
    if missing is not None:
        raise RewardError(
            f"{NAME}: the tests{where} call {target}() with fixture {missing}, which code_tests does not give (it "
            f"gives the cell's own fixtures and {', '.join(sorted(FIXTURES))}; a file fixture such as tmp_path cannot "
            "be: the tests run in the trainer and the solution in its sandbox, so no file one writes is the other's). "
            "Fix: rewrite that test without it, or leave the row out")
    fixtures = sorted({p for p in _parameters(node) if p in builtin and p not in given}
                      | {p for f in mine for p in own[f] if p in builtin})
    named = [f"{p}={_FIXTURE_NAME}{builtin[p]}" for p in _parameters(node) if p in builtin and p not in given]
    named += [f"{p}={_OWN_NAME}{p}" for p in _parameters(node) if p in mine and p not in given]
    parametrized = [f for f in mine if f in own.params and f not in indirect]
    hooks = scope.hooks
    instance_needed = cls is not None and (any(f in own.methods for f in mine)
                                           or bool(hooks & {"setup_method", "teardown_method"}))
    out = []
    for index, (args, picks) in enumerate(itertools.product(
            cases, itertools.product(*(range(len(own.params[f])) for f in parametrized)))):
        case = _split(args)
        direct = [arg for arg in args if arg.split("=", 1)[0] not in indirect]
        chosen = {f: (own.params[f][i], i) for f, i in zip(parametrized, picks)}
        chosen |= {name: (case[name], 0) for name in indirect}
        instance = f"_polyrl_{cls.name}_{node.name}_{index}" if instance_needed and cls is not None else None
        test = f"{instance}.{node.name}" if instance else target
        call = _call(node, f"{test}({', '.join(direct + named)})")
        call = _with_own(call, mine, own, chosen, case, instance, cls.name if cls is not None else None)
        call = _with_fixtures(call, fixtures)
        out.append(_with_xunit(call, node, test, instance, cls, hooks))
    return out


def _with_xunit(call: str, node: ast.FunctionDef | ast.AsyncFunctionDef, test: str, instance: str | None,
                cls: ast.ClassDef | None, hooks: frozenset[str]) -> str:
    """``call`` after its xunit setup and before its teardown (``setup_function(test_x)``,
    ``self.setup_method(self.test_x)``): a teardown runs however the test ended, once its setup ran,
    as pytest's. A method test's instance is made first, once for its fixtures, setup and test."""
    run = f"{_FIXTURES_MODULE}.xunit"
    if cls is None:
        setup, teardown = [f"{run}({h}, {node.name})" for h in ("setup_function", "teardown_function")]
        has_setup, has_teardown = "setup_function" in hooks, "teardown_function" in hooks
    else:
        owner = instance or f"{cls.name}()"
        setup, teardown = [f"{run}({owner}.{h}, {test})" for h in ("setup_method", "teardown_method")]
        has_setup, has_teardown = "setup_method" in hooks, "teardown_method" in hooks
    if has_teardown:
        call = f"try:\n{textwrap.indent(call, '    ')}\nfinally:\n    {teardown}"
    if has_setup:
        call = f"{setup}\n{call}"
    if instance is not None and cls is not None:
        call = f"{instance} = {cls.name}()\n{call}"
    return call


def _with_own(call: str, mine: list[str], own: Fixtures, chosen: dict[str, tuple[str, int]],
              case: dict[str, str], instance: str | None, cls: str | None) -> str:
    """``call`` inside a ``with`` per fixture of the tests' own it needs (``fixtures.own``), the
    first made outermost, so each is made once per test and undone after it; each is given what
    it names: a parametrize case's value, another of the tests' fixtures, a built-in one, or a
    ``request`` whose ``param`` is its chosen param (``chosen``: fixture -> (its source, index))."""
    for name in reversed(mine):
        parts = []
        if name in own.methods:
            parts.append(f"{own.methods[name]}={instance or f'{cls}()'}")
        for p in own[name]:
            if p in case and p not in chosen:
                parts.append(f"{p}={case[p]}")
            elif p in own:
                parts.append(f"{p}={_OWN_NAME}{p}")
            elif p in FIXTURES:
                parts.append(f"{p}={_FIXTURE_NAME}{FIXTURES[p]}")
            elif p == "request":
                param = chosen.get(name)
                parts.append(f"request={_FIXTURES_MODULE}.Request({name!r}" + (
                    f", {param[0]}, {param[1]})" if param is not None else ")"))
        function = own.functions.get(name, name)
        fixture = f"{cls}.{function}" if name in own.methods else function
        call = (f"with {_FIXTURES_MODULE}.own({', '.join([fixture, *parts])}) as {_OWN_NAME}{name}:\n"
                + textwrap.indent(call, "    "))
    return call


def _with_fixtures(call: str, fixtures: list[str]) -> str:
    """``call`` run inside each of its fixtures' makers (``fixtures.capture``, ``fixtures.patching``),
    which undo what they did when it ends, however it ends."""
    for maker in sorted({FIXTURES[f] for f in fixtures}):
        call = (f"with __import__('polyrl.sandbox.fixtures', fromlist=[{maker!r}]).{maker}() as {_FIXTURE_NAME}{maker}:\n"
                + textwrap.indent(call, "    "))
    return call


def around_class(tests: list[str], cls: str, setup: str | None, teardown: str | None) -> list[str]:
    """A class's tests with its class setup before its first and its teardown after its last
    (whether or not that one passed: a failure had left what the class set up in place)."""
    if not tests:
        return tests
    tests = list(tests)
    if teardown is not None:
        tests[-1] = f"try:\n{textwrap.indent(tests[-1], '    ')}\nfinally:\n    {teardown}"
    if setup is not None:
        tests[0] = f"{setup}\n{tests[0]}"
    return tests


def module_setup(hooks: frozenset[str]) -> tuple[str | None, str | None]:
    """The steps that run a module's xunit setup before its first test and its teardown after its
    last (``setup_module(module)``/``setUpModule()``), or None for either the module lacks. The
    setup is a step of its own, no test: when it raises every test after it fails, as pytest
    errors them all."""
    run = f"{_FIXTURES_MODULE}.xunit_module"
    setup = next((f"{run}({h}, __name__)" for h in MODULE_SETUPS if h in hooks), None)
    teardown = next((f"{run}({h}, __name__)" for h in MODULE_TEARDOWNS if h in hooks), None)
    return setup, teardown


def _call(node: ast.stmt, call: str) -> str:
    """``call`` as a statement; a coroutine function's is run to its end, as pytest-asyncio would,
    and a generator function's as nose ran one (``test_runs.drive``)."""
    from polyrl.rewards.test_runs import drive, yields
    if isinstance(node, ast.AsyncFunctionDef):
        return f"__import__('asyncio').run({call})"
    return drive(call) if yields(node) else call
