"""Tests cells in the shapes datasets ship them: each must run its checks, so a right solution
scores 1 and a wrong or empty one 0. Before, a cell whose checks hid in an ``if __name__ ==
"__main__":`` block, a ``unittest.TestCase``, a pytest class, an async test, HumanEval's uncalled
``check(candidate)`` passed every completion (an empty one too), KodCode's ``from solution import
add`` failed every one, and a task named like a builtin (``pow``) passed every one. The reward runs
for real: the sandbox, the harness, the forked copy of the trainer."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import parse_tests
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext

pytestmark = pytest.mark.faults

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a + b + 1\n"
EMPTY = ""

CELLS = {
    "main_guard": 'def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n\n'
                  'if __name__ == "__main__":\n    check(add)\n',
    "unittest_main": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def setUp(self):\n        self.pairs = "
                     "[(1, 2, 3), (2, 2, 4)]\n\n    def test_pairs(self):\n        for a, b, want in self.pairs:\n"
                     "            self.assertEqual(add(a, b), want)\n\n    def test_zero(self):\n"
                     "        self.assertEqual(add(0, 0), 0)\n\nif __name__ == '__main__':\n    unittest.main()\n",
    # setUpClass/tearDownClass: debug() runs neither, so every completion failed (AttributeError)
    "unittest_class_fixture": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    @classmethod\n"
                              "    def setUpClass(cls):\n        cls.pairs = [(1, 2, 3), (2, 2, 4)]\n\n    @classmethod\n"
                              "    def tearDownClass(cls):\n        del cls.pairs\n\n    def test_pairs(self):\n"
                              "        for a, b, want in self.pairs:\n            self.assertEqual(add(a, b), want)\n\n"
                              "    def test_zero(self):\n        self.assertEqual(add(0, len(self.pairs)), 2)\n",
    # the cell's own pytest fixtures (plain, yielding, depending on another, a class's test): the test
    # was called with no argument (TypeError), so every completion failed
    "own_fixtures": "import pytest\n\n@pytest.fixture\ndef pairs():\n    return [(1, 2, 3), (2, 2, 4)]\n\n"
                    "@pytest.fixture(scope='module')\ndef log(pairs):\n    seen = []\n    yield seen\n"
                    "    assert len(seen) <= len(pairs)\n\ndef test_pairs(pairs, log):\n    for a, b, want in pairs:\n"
                    "        assert add(a, b) == want\n        log.append(a)\n\nclass TestZero:\n"
                    "    def test_zero(self, pairs):\n        assert add(0, len(pairs)) == 2\n",
    # an autouse fixture resetting what each test reads: never made, so the second test saw the first's
    "autouse_fixture": "import pytest\n\nseen = []\n\n@pytest.fixture(autouse=True)\ndef fresh():\n    seen.clear()\n"
                       "    yield\n    seen.clear()\n\ndef test_a():\n    seen.append(add(1, 2))\n    assert seen == [3]\n\n"
                       "def test_b():\n    seen.append(add(2, 2))\n    assert seen == [4]\n",
    # fixtures of the cell's own named like pytest's built-ins (a module fixture overrides those): the
    # test was called as test_a(capsys=..., capsys=...), a SyntaxError, and data(monkeypatch) read a
    # name never bound, a NameError, so every completion failed
    "own_fixture_named_like_builtin": "import pytest\n\n@pytest.fixture\ndef capsys():\n    return [(1, 2, 3)]\n\n"
                                      "@pytest.fixture\ndef monkeypatch():\n    return {'pairs': [(2, 2, 4)]}\n\n"
                                      "@pytest.fixture\ndef data(monkeypatch):\n    return monkeypatch['pairs']\n\n"
                                      "def test_a(capsys):\n    for a, b, want in capsys:\n        assert add(a, b) == want\n\n"
                                      "def test_b(data):\n    for a, b, want in data:\n        assert add(a, b) == want\n",
    "unittest_runner": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def test_pairs(self):\n"
                       "        self.assertEqual(add(2, 2), 4)\n\nsuite = unittest.TestLoader().loadTestsFromTestCase(TestAdd)\n"
                       "unittest.TextTestRunner().run(suite)\n",
    "pytest_class": "class TestAdd:\n    def test_small(self):\n        assert add(1, 2) == 3\n\n"
                    "    def test_same(self):\n        assert add(2, 2) == 4\n",
    "async_test": "async def test_add():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n",
    "from_solution": "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n",
    "import_solution": "import solution\n\nassert solution.add(1, 2) == 3\nassert solution.add(2, 2) == 4\n",
    # generator tests: calling one ran none of its body, so every completion passed it (a cell of
    # them alone asked the sample nothing: "unconsulted", 0 for a right one too)
    "nose_yield": "def check_add(a, b, want):\n    assert add(a, b) == want\n\ndef test_add():\n"
                  "    for a, b, want in [(1, 2, 3), (2, 2, 4)]:\n        yield check_add, a, b, want\n",
    "yield_beside_assert": "def test_small():\n    assert add(1, 2) == 3\n\nclass TestAdd:\n    def test_same(self):\n"
                           "        assert add(2, 2) == 4\n        yield\n",
    "unittest_yield": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def setUp(self):\n        self.want = 4\n\n"
                      "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n\n    def test_same(self):\n"
                      "        self.assertEqual(add(2, 2), self.want)\n        yield\n",
    # tests marked to fail (a known bug): a right solution failed them and a wrong one passed them
    "xfail": "import pytest\n\ndef test_small():\n    assert add(1, 2) == 3\n\n@pytest.mark.xfail(reason='off by one')\n"
             "def test_known_bug():\n    assert add(1, 2) == 4\n\n@pytest.mark.xfail\nclass TestBugs:\n"
             "    def test_same(self):\n        assert add(2, 2) == 5\n",
    "expected_failure": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def test_small(self):\n"
                        "        self.assertEqual(add(1, 2), 3)\n\n    @unittest.expectedFailure\n"
                        "    def test_known_bug(self):\n        self.assertEqual(add(1, 2), 4)\n",
}


def score(tests: str, completions: list[str], tests_in: str = "process", **row) -> tuple[list[float], dict]:
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, {"tests_in": tests_in})])
    rows = [{"prompt": "write add", "tests": tests, **row} for _ in completions]
    result = computer([r["prompt"] for r in rows], [Completion(0, [1], [2], [0.0], text=t) for t in completions],
                      RewardContext(rows=rows, wanted=("code_tests",)))
    return list(result.per_reward["code_tests"]), result.metrics["code_tests"]


@pytest.mark.parametrize("shape", list(CELLS))
def test_every_shape_runs_its_checks(shape):
    scores, metrics = score(CELLS[shape], [RIGHT, WRONG, EMPTY])
    assert scores == [1.0, 0.0, 0.0], scores
    assert metrics["unconsulted"] == 0


def test_tear_down_class_runs_when_the_classs_last_test_fails():
    """tearDownClass ran after the class's last test only when that test passed: a failure there
    left what setUpClass set (here an environment variable) for the tests after it, so a solution
    failing one test failed the next as well (0 of 2, not 1 of 2)."""
    cell = ("import os\nimport unittest\n\nclass TestAdd(unittest.TestCase):\n    @classmethod\n"
            "    def setUpClass(cls):\n        os.environ['POLYRL_ADD_CASE'] = 'on'\n\n    @classmethod\n"
            "    def tearDownClass(cls):\n        del os.environ['POLYRL_ADD_CASE']\n\n    def test_same(self):\n"
            "        self.assertEqual(add(2, 2), 4)\n\ndef test_small():\n    assert 'POLYRL_ADD_CASE' not in os.environ\n"
            "    assert add(1, 2) == 3\n")
    half = "def add(a, b):\n    return 3\n"  # right for (1, 2) only
    scores, _ = score(cell, [RIGHT, half, EMPTY])
    assert scores == [1.0, 0.5, 0.0], scores


def test_a_tests_cell_scores_the_same_in_the_trainer():
    scores, _ = score(CELLS["unittest_main"], [RIGHT, WRONG, EMPTY], tests_in="trainer")
    assert scores == [1.0, 0.0, 0.0]


def test_humaneval_check_runs_on_the_rows_entry_point():
    humaneval = "METADATA = {}\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
    scores, _ = score(humaneval, [RIGHT, WRONG, EMPTY], entry_point="add")
    assert scores == [1.0, 0.0, 0.0]
    with pytest.raises(RewardError, match=r"define check\(candidate\), which asserts, but nothing calls it.*Fix: give "
                                          r"the dataset an entry_point column"):
        score(humaneval, [RIGHT])
    with pytest.raises(RewardError, match=r"column 'entry_point' of row 0 is 'add\(\)', not a function name"):
        score(humaneval, [RIGHT], entry_point="add()")


def test_a_cell_whose_every_test_is_marked_to_fail_says_so():
    """Such a cell said "asserts, but nothing calls it", though a runner finds its tests and leaves
    them out for their xfail/expectedFailure mark: the error now names that."""
    cells = ["import pytest\n@pytest.mark.xfail\ndef test_a():\n    assert add(1, 2) == 3\n",
             "import unittest\nclass T(unittest.TestCase):\n    @unittest.expectedFailure\n    def test_a(self):\n"
             "        self.assertEqual(add(1, 2), 3)\n",
             "import unittest\n@unittest.expectedFailure\nclass T(unittest.TestCase):\n    def test_a(self):\n"
             "        assert add(1, 2) == 3\n"]
    for cell in cells:
        with pytest.raises(RewardError, match=r"the tests of row 2 mark every test \((test_a|T)\(\)\) to fail "
                                              r"\(pytest.mark.xfail or unittest.expectedFailure\).*left out.*Fix: drop"):
            parse_tests(cell, " of row 2")
    # one test left unmarked: it runs, the marked one is left out
    steps = parse_tests(cells[0] + "def test_b():\n    assert add(2, 2) == 4\n")
    assert [source for source, is_test in steps if is_test] == ["test_b()"]


def test_a_check_nothing_calls_in_a_cell_with_no_other_test_is_an_error():
    with pytest.raises(RewardError, match=r"define run_all\(\), which asserts, but nothing calls it"):
        parse_tests("def run_all():\n    assert add(1, 2) == 3\n", " of row 3")
    # a helper that asserts beside real tests is just unused
    assert [t for _, t in parse_tests("def helper(x):\n    assert x\nassert add(1, 2) == 3\n")] == [False, True]


def test_runner_calls_are_left_out_and_test_cases_become_steps():
    steps = parse_tests(CELLS["unittest_main"])
    assert [s for s, t in steps if t] == ["TestAdd('test_pairs').debug()", "TestAdd('test_zero').debug()"]
    assert not any("unittest.main" in s for s, _ in steps)
    assert [s for s, t in parse_tests(CELLS["async_test"]) if t] == ["__import__('asyncio').run(test_add())"]


def test_tests_that_never_ask_the_sample_count_for_nothing():
    """``pow`` is Python's builtin for the tests whatever the sample defines (so a sample cannot
    shadow the tests' helpers): a task named like a builtin passed every completion."""
    scores, metrics = score("assert pow(2, 10) == 1024\n", ["def pow(a, b):\n    return a ** b\n", EMPTY])
    assert scores == [0.0, 0.0] and metrics["unconsulted"] == 2
    # a plain value the sample defines is read by the tests: that consults it
    scores, metrics = score("assert ANSWER == 42\n", ["ANSWER = 42\n", "ANSWER = 41\n", EMPTY])
    assert scores == [1.0, 0.0, 0.0] and metrics["unconsulted"] == 0
    assert np.isfinite(scores).all()


def test_a_tight_memory_limit_on_samples_leaves_the_datasets_own_tests_room():
    """The tests' forked copy was capped at memory_mb too: at memory_mb = 64 a reference solution's
    list of 3 M ints in the tests failed with MemoryError, and a right answer scored 0.5."""
    tests = ("def reference(n):\n    return [i * 2 for i in range(n)]\n"
             "assert add(1, 2) == 3\nassert sum(reference(3_000_000)) == add(0, 8_999_997_000_000)\n")
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, {"memory_mb": 64})])
    rows = [{"prompt": "write add", "tests": tests}]
    result = computer(["write add"], [Completion(0, [1], [2], [0.0], text=RIGHT)],
                      RewardContext(rows=rows, wanted=("code_tests",)))
    assert list(result.per_reward["code_tests"]) == [1.0]


# --- a statement that raises is never skipped --------------------------------------------------

DOUBLE = "def double(x):\n    return 2 * x\n"
ZERO = "def double(x):\n    return 0\n"
RAISES = "def double(x):\n    raise RuntimeError('no idea')\n"
#: cell -> (score of ZERO, a wrong solution that passes double(0) == 0); RAISES must score 0 on
#: each, DOUBLE 1. Before, a statement that is not a test (no assert in it) failed unnoticed, so
#: RAISES scored 1.0 on the first two and ZERO 1.0 on the next four.
FAIL_CLOSED = {
    "collect_then_assert": ("cases = [(1, 2), (2, 4), (10, 20)]\nresults = []\nfor x, want in cases:\n"
                            "    results.append(double(x) == want)\nassert all(results)\n", 0.0),
    "collect_failures": ("failures = []\nfor x, want in [(1, 2), (2, 4)]:\n    if double(x) != want:\n"
                         "        failures.append(x)\nassert not failures, failures\n", 0.0),
    "raise_and_exit": ("assert double(0) == 0\nif double(1) != 2:\n    raise AssertionError('double(1)')\n"
                       "if double(5) != 10:\n    exit(1)\n", 1 / 3),
    "tests_run_from_a_loop": ("def test_a():\n    assert double(1) == 2\ndef test_b():\n    assert double(5) == 10\n"
                              "assert double(0) == 0\nfor t in (test_a, test_b):\n    t()\n", 0.5),
    "checker_class": ("class Checker:\n    def run(self):\n        assert double(1) == 2\n        assert double(5) == 10\n"
                      "assert double(0) == 0\nChecker().run()\n", 0.5),
    "library_asserts": ("import numpy as np\nfrom numpy.testing import assert_allclose\nimport unittest\n"
                        "tc = unittest.TestCase()\nassert double(0) == 0\nassert_allclose(double(1.5), 3.0)\n"
                        "np.testing.assert_array_equal(double(4), 8)\ntc.assertEqual(double(7), 14)\n", 0.25),
    "pytest_raises": ("import pytest\nassert double(0) == 0\nwith pytest.raises(TypeError):\n    double(None)\n", 0.5),
    # a script's closing sys.exit(0) is a success, and no test
    "exit_zero": ("import sys\nassert double(1) == 2\nassert double(0) == 0\nsys.exit(0)\n", 0.5),
    # a failed test that half built a list the last assert reads stops the run too
    "state_after_a_failed_test": ("got = []\nfor x in (1, 5):\n    got.append(double(x))\n    assert got[-1] is not None\n"
                                  "assert all(g == 2 * x for g, x in zip(got, (1, 5)))\n", 0.5),
    "state_through_a_helper": ("results = []\ndef record(ok):\n    results.append(ok)\nfor x in (1, 5):\n"
                               "    record(double(x) == 2 * x)\n    assert x > 0\nassert all(results)\n", 0.5),
    # ...but a failed test that leaves nothing behind keeps the per-test partial credit
    "independent_after_a_failed_test": ("for x in (1, 5):\n    assert double(x) == 2 * x\nassert double(0) == 0\n", 0.5),
    "independent_test_functions": ("def test_a():\n    result = double(1)\n    assert result == 2\n"
                                   "def test_b():\n    result = double(0)\n    assert result == 0\n", 0.5),
}


@pytest.mark.parametrize("tests_in", ["process", "trainer"])
@pytest.mark.slow
def test_a_statement_that_raises_fails_the_tests_after_it(tests_in):
    names = sorted(FAIL_CLOSED)
    got = {}
    for name in names:
        scores, metrics = score(FAIL_CLOSED[name][0], [DOUBLE, ZERO, RAISES], tests_in=tests_in)
        got[name] = scores
    assert got == {name: [1.0, pytest.approx(FAIL_CLOSED[name][1]), 0.0] for name in names}


def test_checks_that_are_no_assert_statement_are_tests():
    steps = parse_tests(FAIL_CLOSED["library_asserts"][0])
    assert [s.lstrip("\n") for s, t in steps if t] == ["assert double(0) == 0", "assert_allclose(double(1.5), 3.0)",
                                          "np.testing.assert_array_equal(double(4), 8)", "tc.assertEqual(double(7), 14)"]
    assert [t for _, t in parse_tests(FAIL_CLOSED["raise_and_exit"][0])] == [True, True, True]
    assert [t for _, t in parse_tests(FAIL_CLOSED["checker_class"][0])] == [False, True, True]
    # a helper that raises on bad input is no checker: the statement using it is a plain step
    assert [t for _, t in parse_tests("def ref(x):\n    if x < 0:\n        raise ValueError\n    return 2 * x\n"
                                      "want = ref(3)\nassert double(3) == want\n")] == [False, False, True]
    # nor is a re-raise: counted as a test, it would pass every completion
    assert [t for _, t in parse_tests("try:\n    from solution import double\nexcept ImportError:\n    raise\n"
                                      "assert double(3) == 6\n")] == [False, True]


# --- pytest's parametrize, and cells that check nothing -----------------------------------------

PARAMETRIZED = ("import pytest\nCASES = [(2, 4), (3, 6)]\n\n@pytest.mark.parametrize('x, want', [(1, 2), (5, 10), "
                "pytest.param(7, 0, marks=pytest.mark.xfail)])\ndef test_double(x, want):\n    assert double(x) == want\n\n"
                "@pytest.mark.parametrize(('x', 'want'), CASES)\n@pytest.mark.parametrize('sign', [1, -1])\n"
                "def test_signs(x, want, sign):\n    assert double(sign * x) == sign * want\n\n"
                "class TestDouble:\n    @pytest.mark.parametrize('x', [0])\n    def test_zero(self, x):\n"
                "        assert double(x) == 0\n")


def test_a_parametrized_test_runs_once_per_case():
    """It was called with no arguments (TypeError), so a right solution failed it."""
    assert [s for s, t in parse_tests(PARAMETRIZED) if t] == [
        "TestDouble().test_zero(x=0)", "test_double(x=1, want=2)", "test_double(x=5, want=10)",
        "test_signs(x=2, want=4, sign=1)", "test_signs(x=2, want=4, sign=-1)", "test_signs(x=3, want=6, sign=1)",
        "test_signs(x=3, want=6, sign=-1)"]
    scores, _ = score(PARAMETRIZED, [DOUBLE, "def double(x):\n    return 2 * x if x < 3 else 0\n", RAISES])
    assert scores == [1.0, pytest.approx(5 / 7), 0.0]  # x=5 and x=3 (sign 1) fail


def test_a_parametrize_whose_cases_cannot_be_counted_is_an_error():
    computed = ("import pytest\n@pytest.mark.parametrize('x', [i for i in range(3)])\ndef test_double(x):\n"
                "    assert double(x) == 2 * x\n")
    with pytest.raises(RewardError, match=r"the tests of row 4 parametrize test_double\(\) with cases computed at run "
                                          r"time \(\[i for i in range\(3\)\]\).*Fix: write the argument names"):
        parse_tests(computed, " of row 4")
    with pytest.raises(RewardError, match=r"a case of 1 values for 2 names"):
        parse_tests("import pytest\n@pytest.mark.parametrize('x, y', [(1,)])\ndef test_a(x, y):\n    assert x\n")


def test_a_cell_that_checks_nothing_is_said_once(monkeypatch):
    """A cell that only prints is one test any completion that runs passes: said, naming the row."""
    from structlog.testing import capture_logs

    from polyrl.rewards import test_cells

    monkeypatch.setattr(test_cells, "_warned_unchecked", False)
    with capture_logs() as logs:
        scores, _ = score("print(double(1) == 2)\nprint(double(5) == 10)\n", [DOUBLE, ZERO])
        score("print(double(3))\n", [DOUBLE])
    warned = [e for e in logs if "check nothing" in e["event"]]
    assert len(warned) == 1 and "the tests of row 0 check nothing" in warned[0]["event"], logs
    assert scores == [1.0, 1.0]  # still run as one test: the dataset's to fix
    with capture_logs() as logs:
        parse_tests("assert double(1) == 2\nprint(double(1))\n")
    assert not [e for e in logs if "check nothing" in e["event"]]


def test_an_import_the_trainer_cannot_make_is_said_once(monkeypatch):
    from structlog.testing import capture_logs

    from polyrl.rewards import test_cells

    monkeypatch.setattr(test_cells, "_warned_missing", False)
    with capture_logs() as logs:
        parse_tests("import no_such_module_xyz\nfrom solution import add\nassert add(1, 2) == 3\n", " of row 2")
        parse_tests("import no_such_module_abc\nassert add(1, 2) == 3\n", " of row 3")
    warned = [e for e in logs if "cannot import" in e["event"]]
    assert len(warned) == 1 and "row 2 import no_such_module_xyz" in warned[0]["event"]


def test_a_conditional_xfail_runs_its_test_where_its_condition_is_false():
    """``@pytest.mark.xfail(sys.platform == "win32")``: pytest runs the test as a plain one where the
    condition is false (here) and expects it to fail only where it is true. Before: every xfail
    mark left its test out, so such tests' checks were gone (a wrong solution passed them, and a
    cell of them alone was refused as "every test marked to fail")."""
    cell = ("import sys\nimport pytest\n\n@pytest.mark.xfail(sys.platform == 'no-such-platform', reason='x')\n"
            "def test_add():\n    assert add(1, 2) == 3\n\n@pytest.mark.xfail('sys.version_info[0] < 3', reason='py2')\n"
            "def test_same():\n    assert add(2, 2) == 4\n\n@pytest.mark.xfail(condition=False)\nclass TestAdd:\n"
            "    def test_zero(self):\n        assert add(0, 0) == 0\n\n"
            "@pytest.mark.xfail(sys.version_info >= (3, 0), reason='a known bug, expected to fail here')\n"
            "def test_known_bug():\n    assert add(1, 2) == 4\n")
    scores, _ = score(cell, [RIGHT, WRONG, EMPTY])
    assert scores == [1.0, 0.0, 0.0], scores
    from polyrl.rewards.test_runs import expects_failure

    def marked(decorator: str) -> bool:
        return expects_failure(ast.parse(f"{decorator}\ndef test_x():\n    pass\n").body[0])

    assert marked("@pytest.mark.xfail(sys.platform == sys.platform)")  # true here: left out
    assert marked("@pytest.mark.xfail(HAS_BUG, reason='a name of the tests')")  # undecidable: left out
    assert marked("@pytest.mark.xfail(sys.maxsize ** sys.maxsize > 0)")  # no work done deciding
    assert not marked("@pytest.mark.xfail(platform.system() == 'no-such-system')")
