"""How ``code_tests`` reads a dataset's tests cell: which of its statements are tests.

Why a module of its own: a cell whose checks never run passes every completion, an empty one
included, and nothing in the logs looks wrong (``pass_rate`` 1.0). Datasets are written to be run
as a script or by a test runner, so the checks hide in shapes a plain top-to-bottom run skips: an
``if __name__ == "__main__":`` block, pytest functions and classes nothing calls, ``unittest``
test cases handed to ``unittest.main()``, HumanEval's ``check(candidate)`` that its harness calls
with the row's ``entry_point``. Each of those is turned into the tests a script run or a test runner
would execute; a cell that would still run no check is an error naming the fix, and whatever is
left (a check that never asks the sample anything) is caught when it runs (``harness.run_tests``).
"""

from __future__ import annotations

import ast
from typing import Any

from polyrl.errors import RewardError

NAME = "code_tests"
#: test-runner plumbing: run here it would look for tests in the trainer's own ``__main__`` (or
#: parse the trainer's ``sys.argv``); the cell's test cases run as steps instead
_RUNNER_ATTRS = {("unittest", "main"), ("pytest", "main")}
_RUNNER_NAMES = {"TextTestRunner", "TestLoader", "TestSuite", "makeSuite", "defaultTestLoader"}
_UNITTEST_BASES = {"TestCase", "IsolatedAsyncioTestCase"}


def parse_tests(tests: Any, where: str = "", entry_point: str | None = None) -> list[tuple[str, bool]]:
    """Steps ``(source, is_test)`` from a tests cell (see ``code_tests``' ``column`` option);
    ``entry_point`` names the solution's function for a HumanEval-style ``check(candidate)``."""
    if isinstance(tests, str):
        try:
            tree = ast.parse(tests)
        except SyntaxError as exc:
            raise RewardError(f"{NAME}: the tests{where} are not valid Python ({exc.msg}, line {exc.lineno}). "
                              "Fix: correct the dataset's tests column") from None
        body = _as_script(tree.body)
        checkers = _checkers(body)
        steps = [(ast.unparse(node), _is_test(node, checkers)) for node in body]
        steps += _discovered(body, checkers, where, entry_point)
        if steps and not any(is_test for _, is_test in steps):
            return [(ast.unparse(ast.Module(body=body, type_ignores=[])), True)]  # no assert: one test
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
                      "Fix: store tests as a string of asserts or a list of strings")


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
        if isinstance(inner, (ast.Name, ast.Attribute)) and _name_of(inner) in _RUNNER_NAMES:
            return True
    return False


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _holds_assert(node: ast.AST) -> bool:
    return any(isinstance(inner, ast.Assert) for inner in ast.walk(node))


def _is_test(node: ast.stmt, checkers: set[str]) -> bool:
    """Whether a top-level statement is a test: an ``assert``, a statement that runs asserts of its
    own (``for x in cases: assert f(x) == ...``, ``if``/``with``/``try`` around one), or a call of a
    function of the tests that asserts (``check(candidate)``). Why: such a statement was a helper
    step, whose failure counted nowhere, so a solution passing only the top-level asserts scored 1."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        return False
    return _holds_assert(node) or bool(_called_names(node) & checkers)


def _called_names(node: ast.AST) -> set[str]:
    return {inner.func.id for inner in ast.walk(node) if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)}


def _used_names(node: ast.AST) -> set[str]:
    return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)}


def _functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {node.name: node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _checkers(body: list[ast.stmt]) -> set[str]:
    """The tests' top-level functions that assert, themselves or through another such function
    (``def run_all(): check(f)`` calls ``check``, which asserts)."""
    functions = _functions(body)
    checkers = {name for name, node in functions.items() if _holds_assert(node)}
    while True:
        more = {name for name, node in functions.items() if name not in checkers and _called_names(node) & checkers}
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
    tests = [t for node in body if isinstance(node, ast.ClassDef) for t in _class_tests(node, body)]
    reached = _reached(body, _names_in(tests))
    tests += [_call(node, f"{name}()") for name, node in _functions(body).items()
              if name.startswith("test") and name not in reached]
    reached = _reached(body, _names_in(tests))
    has_tests = bool(tests) or any(_is_test(node, checkers) for node in body)
    if "check" in checkers and "check" not in reached:
        if entry_point is not None:
            tests.append(f"check({entry_point})")
            reached, has_tests = reached | {"check"}, True
        elif not has_tests:
            raise RewardError(f"{NAME}: the tests{where} define check(candidate), which asserts, but nothing calls it, "
                              "so every completion would pass. Fix: give the dataset an entry_point column naming the "
                              "solution's function (HumanEval's; option entry_point_column), or end the tests with "
                              "check(<function>)")
    idle = sorted(name for name in checkers if name not in reached)
    if idle and not has_tests:
        them = "it" if len(idle) == 1 else "them"
        raise RewardError(f"{NAME}: the tests{where} define {', '.join(f'{n}()' for n in idle)}, which "
                          f"assert{'s' if len(idle) == 1 else ''}, but nothing calls {them}, so every completion would "
                          f"pass. Fix: call {them} in the tests, or name {them} test_* (run as pytest would)")
    return [(t, True) for t in tests]


def _names_in(sources: list[str]) -> set[str]:
    return set().union(*(_used_names(ast.parse(source)) for source in sources))


def _class_tests(node: ast.ClassDef, body: list[ast.stmt]) -> list[str]:
    """``Case("test_x").debug()`` for a ``unittest.TestCase`` subclass (setUp, the test, tearDown;
    a failure raises), ``Case().test_x()`` for a pytest ``Test*`` class."""
    methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")]
    if _is_unittest_case(node, body):
        return [f"{node.name}({m.name!r}).debug()" for m in methods]
    if node.name.startswith("Test"):
        return [_call(m, f"{node.name}().{m.name}()") for m in methods]
    return []


def _is_unittest_case(node: ast.ClassDef, body: list[ast.stmt], depth: int = 0) -> bool:
    classes = {c.name: c for c in body if isinstance(c, ast.ClassDef)}
    for base in node.bases:
        name = _name_of(base)
        if name in _UNITTEST_BASES:
            return True
        if name in classes and name != node.name and depth < 20 and _is_unittest_case(classes[name], body, depth + 1):
            return True
    return False


def _call(node: ast.stmt, call: str) -> str:
    """``call`` as a statement; a coroutine function's is run to its end, as pytest-asyncio would."""
    return f"__import__('asyncio').run({call})" if isinstance(node, ast.AsyncFunctionDef) else call
