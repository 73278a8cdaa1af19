"""Tests cells in the shapes datasets ship them: each must run its checks, so a right solution
scores 1 and a wrong or empty one 0. Before, a cell whose checks hid in an ``if __name__ ==
"__main__":`` block, a ``unittest.TestCase``, a pytest class, an async test, HumanEval's uncalled
``check(candidate)`` passed every completion (an empty one too), KodCode's ``from solution import
add`` failed every one, and a task named like a builtin (``pow``) passed every one. The reward runs
for real: the sandbox, the harness, the forked copy of the trainer."""

from __future__ import annotations

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
    "unittest_runner": "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def test_pairs(self):\n"
                       "        self.assertEqual(add(2, 2), 4)\n\nsuite = unittest.TestLoader().loadTestsFromTestCase(TestAdd)\n"
                       "unittest.TextTestRunner().run(suite)\n",
    "pytest_class": "class TestAdd:\n    def test_small(self):\n        assert add(1, 2) == 3\n\n"
                    "    def test_same(self):\n        assert add(2, 2) == 4\n",
    "async_test": "async def test_add():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n",
    "from_solution": "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n",
    "import_solution": "import solution\n\nassert solution.add(1, 2) == 3\nassert solution.add(2, 2) == 4\n",
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
