"""Ints past Python's 4300-digit ``str`` limit, returned by a solution or handed to it.

Such an int crossed as no plain value at all (``values.encode`` gave up on ``str``), so a right
``power(2, 100000)`` failed ``% 1000 == 376`` and a right ``succ(3 ** 20000)`` failed its call
(large-int tasks: factorials, Fibonacci, big powers). They cross in hex now; a wrong answer of that
size still fails. Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_SOLUTION = ("import math\ndef power(a, b):\n    return a ** b\ndef succ(n):\n    return n + 1\n"
             "def digits(n):\n    return [math.factorial(n), n]\n")
_TESTS = {
    "returned": "assert power(2, 100000) % 1000 == 376\nassert power(-2, 100001) == -(2 ** 100001)\n",
    "handed": "assert succ(3 ** 20000) == 3 ** 20000 + 1\n",
    "in_a_list": "import math\nassert digits(5000) == [math.factorial(5000), 5000]\n",
}


def test_a_solution_with_huge_ints_passes():
    """Each scored 0 on main (the int crossed as no value)."""
    assert _each_scored({name: (tests, _SOLUTION) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_huge_int_still_fails():
    wrong = {"off_by_one": (_TESTS["returned"], _SOLUTION.replace("return a ** b", "return a ** b + 1")),
             "handed_back": (_TESTS["handed"], _SOLUTION.replace("return n + 1", "return n"))}
    assert _each_scored(wrong) == dict.fromkeys(wrong, 0.0)
