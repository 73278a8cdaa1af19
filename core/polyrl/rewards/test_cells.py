"""How ``code_tests`` reads a dataset's tests cell: which of its statements are tests.

Why a module of its own: a cell whose checks never run passes every completion, an empty one
included, and nothing in the logs looks wrong (``pass_rate`` 1.0). Datasets are written to be run
as a script or by a test runner, so the checks hide in shapes a plain top-to-bottom run skips: an
``if __name__ == "__main__":`` block, pytest functions and classes nothing calls, ``unittest``
test cases handed to ``unittest.main()``, HumanEval's ``check(candidate)`` that its harness calls
with the row's ``entry_point``. Each of those is turned into the tests a script run or a test runner
would execute; a cell that would still run no check is an error naming the fix, and whatever is
left (a check that never asks the sample anything) is caught when it runs (``harness.run_tests``).

What a test is: a top-level statement that checks something (an ``assert``, a ``raise``, an
``exit``, a library assertion such as ``np.testing.assert_allclose`` or ``tc.assertEqual``, a
``pytest.raises`` block) or that uses the cell's own checking function or class. Every other
statement is a step between tests; when one of those raises, the harness fails it and every test
after it (a script run stops there), as it does after a failed test that leaves state a later step
reads (``polyrl.sandbox.step_state``), so how a statement is classified decides partial credit,
never whether a failure counts.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import textwrap
from typing import Any

from polyrl.errors import RewardError
from polyrl.logs import get_logger
from polyrl.rewards.test_calls import Scope, around_class, calls, hooks_of, module_setup, name_of, own_fixtures
from polyrl.rewards.test_runs import drive, expects_failure, yields
from polyrl.sandbox import call_cases, program_cases
from polyrl.sandbox.step_lines import at_line

NAME = "code_tests"
#: test-runner plumbing: run here it would look for tests in the trainer's own ``__main__`` (or
#: parse the trainer's ``sys.argv``); the cell's test cases run as steps instead
_RUNNER_ATTRS = {("unittest", "main"), ("pytest", "main")}
_RUNNER_NAMES = {"TextTestRunner", "TestLoader", "TestSuite", "makeSuite", "defaultTestLoader"}
_UNITTEST_BASES = {"TestCase", "IsolatedAsyncioTestCase"}
#: calls that check: a failing one raises (``pytest.raises``/``warns`` blocks, ``pytest.fail``,
#: ``self.fail``), besides every callee named ``assert*`` (``assert_allclose``, ``assertEqual``)
_CHECK_CALLS = {"raises", "warns", "fail"}
#: calls that end a script run with a failure when a check fails (``exit(1)``, ``sys.exit(1)``)
_EXIT_CALLS = {"exit", "quit", "_exit"}
log = get_logger("polyrl.rewards.test_cells")
_warned_unchecked = False
_warned_missing = False


def parse_tests(tests: Any, where: str = "", entry_point: str | None = None) -> list[tuple[str, bool]]:
    """Steps ``(source, is_test)`` from a tests cell (see ``code_tests``' ``column`` option);
    ``entry_point`` names the solution's function for a HumanEval-style ``check(candidate)``;
    stdin/stdout cases (APPS, CodeContests) are one step each (``program_cases``), as are APPS's
    call-based cases (``call_cases``)."""
    cases = program_cases.decoded(tests)  # once: a CodeContests row's JSON is megabytes
    calls = call_cases.steps(cases, where)
    if calls is not None:
        return [(source, True) for source in calls]
    io_cases = program_cases.cases(cases, where)
    if io_cases is not None:
        return [(program_cases.step(stdin, stdout), True) for stdin, stdout in io_cases]
    if isinstance(tests, str):
        try:
            tree = ast.parse(tests)
        except SyntaxError as exc:
            raise RewardError(f"{NAME}: the tests{where} are not valid Python ({exc.msg}, line {exc.lineno}). "
                              "Fix: correct the dataset's tests column") from None
        body = _as_script(tree.body)
        _warn_missing_imports(body, where)
        checkers = _checkers(body)
        steps = [(_at_its_line(node), _is_test(node, checkers)) for node in body]
        steps += _discovered(body, checkers, where, entry_point)
        if steps and not any(is_test for _, is_test in steps):
            _warn_unchecked(where)
            return [(ast.unparse(ast.Module(body=body, type_ignores=[])), True)]  # no check: one test
        return steps
    if isinstance(tests, (list, tuple)):
        out = []
        for i, item in enumerate(tests):
            if not isinstance(item, str):
                raise RewardError(f"{NAME}: test {i}{where} is {type(item).__name__}, not Python source. "
                                  "Fix: store tests as a string of asserts or a list of strings")
            try:
                ast.parse(item)
            except SyntaxError as exc:
                raise RewardError(f"{NAME}: test {i}{where} is not valid Python ({exc.msg}). "
                                  "Fix: correct the dataset's tests column") from None
            out.append((item, True))
        return out
    raise RewardError(f"{NAME}: the tests{where} are a {type(tests).__name__}. "
                      "Fix: store tests as a string of asserts, a list of strings, or stdin/stdout cases "
                      "({'inputs': [...], 'outputs': [...]})")


def _at_its_line(node: ast.stmt) -> str:
    """A statement's source, starting on its line of the cell (blank lines before it). Why: each step
    is compiled on its own, and numbered from 1 every step's code shared places (line, column) with
    the others': the harness keys what a check reads by place (``polyrl.sandbox.source_sites``), so a
    check in one step was judged by another's (``harness.laid_out`` keeps them apart). Real lines
    also make a traceback point at the cell's own line (``step_lines.at_line``: within its window)."""
    return at_line(ast.unparse(node), node.lineno)


def _as_script(body: list[ast.stmt]) -> list[ast.stmt]:
    """The top-level statements as ``python cell.py`` runs them: the body of an ``if __name__ ==
    "__main__":`` block in its place (here ``__name__`` is not ``"__main__"``, so the block ran
    nothing), test-runner calls (``unittest.main()``, ``pytest.main()``) left out."""
    out: list[ast.stmt] = []
    for node in body:
        if _is_main_guard(node):
            assert isinstance(node, ast.If)
            out += _as_script(node.body)
        elif not _is_runner(node):
            out.append(node)
    return out


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return (len(sides) == 2 and isinstance(node.test.ops[0], ast.Eq)
            and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def _is_runner(node: ast.stmt) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) \
                and (inner.value.id, inner.attr) in _RUNNER_ATTRS:
            return True
        if isinstance(inner, (ast.Name, ast.Attribute)) and name_of(inner) in _RUNNER_NAMES:
            return True
    return False


def _warn_unchecked(where: str) -> None:
    """Once a run: a cell with no check at all (it only prints, or only calls) is one test that
    any completion running without an exception passes, so its reward says nothing. Said because
    it is the dataset's to fix; the cell still runs that way (a crash fails it)."""
    global _warned_unchecked
    if _warned_unchecked:
        return
    _warned_unchecked = True
    log.warning(f"{NAME}: the tests{where} check nothing (no assert, raise or assert* call): any completion "
                "that runs without an exception passes them", where=where.strip() or "a tests cell",
                fix="turn the cell's prints into asserts (print(f(1) == 2) -> assert f(1) == 2)")


def _warn_missing_imports(body: list[ast.stmt], where: str) -> None:
    """Once a run: a top-level import of the tests that the trainer (where the tests run) cannot
    make. A statement that raises fails every test after it, so such a row scores 0 for every
    completion, a right one too: said because the fix is the trainer's environment (``pip
    install pytest``) or the dataset, never the policy."""
    global _warned_missing
    if _warned_missing:
        return
    for node in body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
        missing = [n for n in names if n.partition(".")[0] != "solution" and not _importable(n.partition(".")[0])]
        if missing:
            _warned_missing = True
            log.warning(f"{NAME}: the tests{where} import {missing[0]}, which the trainer cannot import, so every "
                        "completion fails them", where=where.strip() or "a tests cell",
                        fix=f"install {missing[0].partition('.')[0]} where the trainer runs, or correct the "
                            "dataset's import")
            return


@functools.lru_cache(maxsize=512)
def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _holds_check(node: ast.AST, top: bool = False) -> bool:
    """Whether ``node`` holds a check: an ``assert``, a call of an ``assert*`` function or method
    (numpy's, pandas', unittest's), ``pytest.raises``/``warns``/``fail``; at the top level also any
    ``raise`` and ``exit``/``sys.exit`` (``if f(x) != y: raise ...``). In a function only ``raise
    AssertionError`` counts: a helper raising ``ValueError`` on bad input is no checker."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Assert):
            return True
        if isinstance(inner, ast.Call):
            name = name_of(inner.func) or ""
            if name.startswith("assert") or name in _CHECK_CALLS or (top and name in _EXIT_CALLS and _fails(inner)):
                return True
        if isinstance(inner, ast.Raise) and inner.exc is not None and (top or _raises_assertion(inner)):
            return True  # a bare ``raise`` passes an error on (``except ImportError: raise``): no check
    return False


def _fails(exit_call: ast.Call) -> bool:
    """Whether an ``exit(...)`` may end the run as a failure: ``exit()``/``exit(0)`` never does."""
    args = exit_call.args
    return bool(args) and not (isinstance(args[0], ast.Constant) and args[0].value in (None, 0))


def _raises_assertion(node: ast.Raise) -> bool:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc is not None and name_of(exc) == "AssertionError"


def _is_test(node: ast.stmt, checkers: set[str]) -> bool:
    """Whether a top-level statement is a test: one that checks (``_holds_check``: an ``assert``, a
    loop or ``if`` around one, ``np.testing.assert_allclose(...)``, ``if f(x) != y: raise ...``) or
    uses a function or class of the tests that checks (``check(candidate)``, ``for t in (test_a,
    test_b): t()``, ``Checker().run()``). Why: such a statement was a step whose failure counted
    nowhere, so a solution passing only the top-level asserts scored 1."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        return False
    return _holds_check(node, top=True) or bool(_used_names(node) & checkers)


def _used_names(node: ast.AST) -> set[str]:
    return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)}


def _functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {node.name: node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _checkers(body: list[ast.stmt]) -> set[str]:
    """The tests' top-level functions and classes that check (``_holds_check``), themselves or
    through another such one (``def run_all(): check(f)`` uses ``check``, which asserts)."""
    defined = {node.name: node for node in body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    checkers = {name for name, node in defined.items() if _holds_check(node)}
    while True:
        more = {name for name, node in defined.items() if name not in checkers and _used_names(node) & checkers}
        if not more:
            return checkers
        checkers |= more


def _reached(body: list[ast.stmt], roots: set[str]) -> set[str]:
    """Names the top-level statements (and ``roots``) use, and every name the functions they use
    use in turn: a function outside this set is never run by the cell."""
    functions = _functions(body)
    reached = set(roots).union(*(_used_names(node) for node in body if not isinstance(node, (
        ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))))
    todo = [name for name in reached if name in functions]
    while todo:
        for name in _used_names(functions[todo.pop()]) - reached:
            reached.add(name)
            if name in functions:
                todo.append(name)
    return reached


def _discovered(body: list[ast.stmt], checkers: set[str], where: str, entry_point: str | None) -> list[tuple[str, bool]]:
    """The tests a test runner (or HumanEval's harness) would run that no statement of the cell
    calls: pytest ``test*`` functions (async ones through ``asyncio.run``), the ``test*`` methods
    of ``unittest.TestCase`` subclasses and of pytest's ``Test*`` classes, and ``check(<entry
    point>)``. A function that asserts which nothing runs, in a cell with no other test, is an
    error: every completion would pass it."""
    literals = _literal_lists(body)
    hooks = hooks_of(body)
    scope = Scope(own_fixtures(body, where, literals), hooks=hooks)
    tests = [t for node in body if isinstance(node, ast.ClassDef) for t in _class_tests(node, body, where, literals, scope)]
    reached = _reached(body, _names_in(tests))
    tests += [t for name, node in _functions(body).items() if name.startswith("test") and name not in reached
              and not expects_failure(node) for t in calls(node, where, literals, scope)]
    setup, teardown = module_setup(hooks) if tests else (None, None)
    steps = [(t, True) for t in tests]
    if setup is not None:  # no test: when it raises, every test after it fails (pytest errors them all)
        steps.insert(0, (setup, False))
    reached = _reached(body, _names_in(tests + [s for s in (setup, teardown) if s is not None]))
    has_tests = bool(tests) or any(_is_test(node, checkers) for node in body)
    if "check" in checkers and "check" not in reached:
        if entry_point is not None:
            steps.append((f"check({entry_point})", True))
            reached, has_tests = reached | {"check"}, True
        elif not has_tests:
            raise RewardError(f"{NAME}: the tests{where} define check(candidate), which asserts, but nothing calls it, "
                              "so every completion would pass. Fix: give the dataset an entry_point column naming the "
                              "solution's function (HumanEval's; option entry_point_column), or end the tests with "
                              "check(<function>)")
    idle = sorted(name for name in checkers if name not in reached)
    caseless = [name for name in idle if _runs_no_case(name, body, where, literals, scope)]
    if caseless and not has_tests and all(name in caseless or _marked_to_fail(name, body) for name in idle):
        raise RewardError(f"{NAME}: the tests{where} define {', '.join(f'{n}()' for n in caseless)}, whose every "
                          "parametrize case or fixture param is marked skip or xfail (pytest.param(..., marks=...)) "
                          "or none is written; a runner runs no case of those, and no other test is left: every "
                          "completion would pass. Fix: give the tests a case the solution must pass, or leave the row out")
    if idle and not has_tests and all(_marked_to_fail(name, body) for name in idle):
        raise RewardError(f"{NAME}: the tests{where} mark every test ({', '.join(f'{n}()' for n in idle)}) to fail "
                          "(pytest.mark.xfail or unittest.expectedFailure); a runner counts no pass from those, so "
                          "they are left out and no test is left: every completion would pass. Fix: drop the mark "
                          "from the tests the solution must pass, or leave the row out")
    if idle and not has_tests:
        them = "it" if len(idle) == 1 else "them"
        raise RewardError(f"{NAME}: the tests{where} define {', '.join(f'{n}()' for n in idle)}, which "
                          f"assert{'s' if len(idle) == 1 else ''}, but nothing calls {them}, so every completion would "
                          f"pass. Fix: call {them} in the tests, or name {them} test_* (run as pytest would)")
    return steps + ([(teardown, False)] if teardown is not None else [])


def _marked_to_fail(name: str, body: list[ast.stmt]) -> bool:
    """Whether ``name`` is a test a runner would find that is marked to fail (``expects_failure``):
    a ``test*`` function, or a class whose every ``test*`` method is (or which is itself). Why:
    ``_discovered`` leaves such tests out, and a cell of only those said "asserts, but nothing
    calls it", which sent the user looking for a missing call."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return name.startswith("test") and expects_failure(node)
        if isinstance(node, ast.ClassDef) and node.name == name:
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and m.name.startswith("test")]
            return bool(methods) and (expects_failure(node) or all(expects_failure(m) for m in methods))
    return False


def _runs_no_case(name: str, body: list[ast.stmt], where: str, literals: dict[str, ast.expr], scope: Scope) -> bool:
    """Whether ``name`` is a test a runner would find that it calls with no case: every case of its
    ``parametrize`` (or every param of a fixture it needs) marked skip or xfail, or none written;
    for a class, every test method. Why: such a test, in a cell of no other, was refused as
    needing "fixture x, which code_tests does not give" or as one "nothing calls"."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return name.startswith("test") and not expects_failure(node) and not calls(node, where, literals, scope)
        if isinstance(node, ast.ClassDef) and node.name == name:  # a pytest class's (a TestCase has no cases)
            if not name.startswith("Test") or expects_failure(node) or _is_unittest_case(node, body):
                return False
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and m.name.startswith("test") and not expects_failure(m)]
            return bool(methods) and not _class_tests(node, body, where, literals, scope)
    return False


def _names_in(sources: list[str]) -> set[str]:
    return set().union(*(_used_names(ast.parse(source)) for source in sources))


def _class_tests(node: ast.ClassDef, body: list[ast.stmt], where: str, literals: dict[str, ast.expr],
                 scope: Scope) -> list[str]:
    """``Case("test_x").debug()`` for a ``unittest.TestCase`` subclass (setUp, the test, tearDown;
    a failure raises), ``Case().test_x(...)`` for a pytest ``Test*`` class, with its fixtures and
    setups (``test_calls``: its own fixture methods over the module's, ``setup_method``,
    ``setup_class`` once before its first test); none marked to fail (``test_runs.expects_failure``)."""
    if expects_failure(node):
        return []
    methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
               and m.name.startswith("test") and not expects_failure(m)]
    if _is_unittest_case(node, body):
        tests = [f"{node.name}({m.name!r}).debug()" if not yields(m) else  # as debug() runs it; a name no other step reads
                 f"{(case := f'_polyrl_{node.name}_{m.name}')} = {node.name}({m.name!r})\n{case}.setUp()\n"
                 f"{drive(f'{case}.{m.name}()')}\n{case}.tearDown()\n{case}.doCleanups()" for m in methods]
        if tests and _class_fixtures(body):  # as a runner: once before the class's first test, once after its last
            # (whether or not the last passed: after it, a failure had left what the class set up in place)
            tests[-1] = f"try:\n{textwrap.indent(tests[-1], '    ')}\nfinally:\n    {node.name}.tearDownClass()"
            tests[0] = f"{node.name}.setUpClass()\n{tests[0]}"
        return tests
    if node.name.startswith("Test"):
        hooks = hooks_of(node.body)
        inner = Scope(scope.fixtures.below(own_fixtures(node.body, where, literals, in_class=True)), node, hooks)
        tests = [t for m in methods for t in calls(m, where, literals, inner)]
        run = "__import__('polyrl.sandbox.fixtures', fromlist=['own']).xunit"
        return around_class(tests, node.name, f"{run}({node.name}.setup_class, {node.name})" if "setup_class" in hooks
                            else None, f"{run}({node.name}.teardown_class, {node.name})" if "teardown_class" in hooks
                            else None)
    return []


def _class_fixtures(body: list[ast.stmt]) -> bool:
    """Whether a class of the cell defines ``setUpClass`` or ``tearDownClass``. Why: ``debug()``
    runs setUp, the test and tearDown only, so a test reading ``self.s`` that ``setUpClass`` set
    (``cls.s = Stack()``) raised AttributeError and every completion failed it."""
    return any(isinstance(node, ast.ClassDef) and any(isinstance(m, ast.FunctionDef) and m.name in
                                                      ("setUpClass", "tearDownClass") for m in node.body)
               for node in body)


def _literal_lists(body: list[ast.stmt]) -> dict[str, ast.expr]:
    """Top-level names bound once, to a list or tuple written out (``CASES = [(1, 2), ...]``):
    the cases a ``parametrize`` may name."""
    counts: dict[str, int] = {}
    found: dict[str, ast.expr] = {}
    for node in body:
        for name in _bound_here(node):
            counts[name] = counts.get(name, 0) + 1
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            found[node.targets[0].id] = node.value
    return {name: value for name, value in found.items() if counts.get(name) == 1}


def _bound_here(node: ast.stmt) -> set[str]:
    return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}


def _is_unittest_case(node: ast.ClassDef, body: list[ast.stmt], depth: int = 0) -> bool:
    classes = {c.name: c for c in body if isinstance(c, ast.ClassDef)}
    for base in node.bases:
        name = name_of(base)
        if name in _UNITTEST_BASES:
            return True
        if name in classes and name != node.name and depth < 20 and _is_unittest_case(classes[name], body, depth + 1):
            return True
    return False
