"""A correct prefix of the answer never passes the tests' zip or map against the value they wrote
for it, while the shapes where the tests mean zip to truncate still pass a right answer.

Each forged completion below is a WRONG solution that scored 1.0 through the real reward path
(``code_tests``): zip stops at its shorter operand, so an answer that drops its last item passed
``all(a == b for a, b in zip(f(3), [1, 2, 3]))``. See ``polyrl.sandbox.prefix_sites`` and
``pairing._check_prefix``.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

#: Tests pairing f(3)'s answer with the three items the tests wrote for it, in the shapes tests use.
PREFIXED = {
    "literal": "assert all(a == b for a, b in zip(f(3), [1, 2, 3]))",
    "expected_first": "expected = (1, 2, 3)\nassert sum(a != b for a, b in zip(expected, f(3))) == 0",
    "named_answer": "r = f(3)\nexpected = [1, 2, 3]\nfor a, b in zip(r, expected):\n    assert a == b",
    "map_operator": "import operator\nassert all(map(operator.eq, f(3), [1, 2, 3]))",
    "helper": "def close(got, want):\n    return all(abs(a - b) < 1e-9 for a, b in zip(got, want))\nassert close(f(3), [1, 2, 3])",
    "case_rows": "for n, want in [(3, [1, 2, 3]), (2, [1, 2])]:\n    assert all(a == b for a, b in zip(f(n), want))",
    "unittest": ("import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.r = f(3)\n"
                 "    def test_value(self):\n        for a, b in zip(self.r, [1, 2, 3]):\n            self.assertEqual(a, b)\n"),
    "iterators": "assert all(a == b for a, b in zip(iter(f(3)), reversed([3, 2, 1])))",
    "converted": "assert all(a == b for a, b in zip(map(float, sorted(f(3))), [1.0, 2.0, 3.0]))",
    "generator_expression": "assert all(a == b for a, b in zip((x for x in f(3)), [1, 2, 3]))",
    "reassigned_expected": ("expected = [1]\nassert all(a == b for a, b in zip(f(1), expected))\nexpected = [1, 2, 3]\n"
                            "assert all(a == b for a, b in zip(f(3), expected))"),
    "method": ("assert all(a == b for a, b in zip(Solution().f(3), [1, 2, 3]))"),
    # a name bound to about as many items as asked is the expected value, not a reference table
    "named_expected_of_the_asked_size": "EXPECTED = [1, 2, 3]\nassert all(a == b for a, b in zip(f(3), EXPECTED))",
}
RIGHT = "def f(n):\n    return list(range(1, n + 1))\n"
METHOD = "class Solution:\n    def f(self, n):\n        return f(n)\n"


@pytest.mark.slow
def test_a_correct_prefix_of_the_answer_never_passes_zip_or_map():
    """An answer missing its last item, as a list, a generator or an object of the sample's
    yielding its items, scored 1.0 on every one of these; it scores 0 now, and the right
    answer keeps 1.0."""
    names = list(PREFIXED)
    rows = [{"prompt": "p", "tests": PREFIXED[n]} for n in names]
    for forged in ("def f(n):\n    return list(range(1, n))\n",
                   "def f(n):\n    return (i for i in range(1, n))\n",
                   "class Some:\n    def __init__(self, n):\n        self.n = n\n    def __iter__(self):\n"
                   "        return iter(range(1, self.n))\ndef f(n):\n    return Some(n)\n"):
        scored = score([forged + METHOD] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = score([RIGHT + METHOD] * len(names), rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: Right answers in shapes where the tests mean zip to stop at the shorter operand (or cannot be
#: told from such): each must keep 1.0.
TRUNCATING = {
    "pairwise": "r = f(4)\nassert all(a < b for a, b in zip(r, r[1:]))\nassert all(a < b < c for a, b, c in zip(r, r[1:], r[2:]))",
    "input_beside_a_shorter_answer": ("xs = [1, 4, 9, 16]\nassert all(x + d == y for d, x, y in zip(diffs(xs), xs, xs[1:]))\n"
                                      "assert all(d > 0 for d, x in zip(diffs(xs), xs))"),
    "range_counter": "assert [i for i, _ in zip(range(100), f(3))] == [0, 1, 2]",
    "endless_counter": "import itertools\nassert list(zip(itertools.count(), f(2))) == [(0, 1), (1, 2)]",
    "reference_table_in_a_loop": ("FIRST = [1, 2, 3, 4, 5, 6]\nfor n in range(1, 5):\n"
                                  "    assert all(a == b for a, b in zip(f(n), FIRST))"),
    "reference_table_twice": ("FIRST = [1, 2, 3, 4, 5, 6]\nassert all(a == b for a, b in zip(f(2), FIRST))\n"
                              "assert all(a == b for a, b in zip(f(4), FIRST))"),
    "pytest_parameter": ("import pytest\nFIRST = [1, 2, 3, 4, 5, 6]\n@pytest.mark.parametrize('n', [2, 3])\n"
                         "def test_prefix(n):\n    assert all(a == b for a, b in zip(f(n), FIRST))\n"),
    "reference_table_once": ("FIRST_20 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]\n"
                             "assert all(a == b for a, b in zip(f(5), FIRST_20))"),
    "reference_table_once_by_a_method": ("FIB = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)\n"
                                         "assert all(a == b for a, b in zip(Solution().f(3), FIB))"),
    "longer_answer": "assert all(a == b for a, b in zip(f(5), [1, 2]))",
    "answer_cut_by_the_tests": "assert all(a == b for a, b in zip(f(5)[:2], [1, 2, 3, 4, 5, 6]))",
    "two_answers": "assert all(a == b for a, b in zip(f(2), f(4)))\nassert all(a <= b for a, b in zip(f(2), g(4)))",
    "filtered_answer": "assert all(a == b for a, b in zip(filter(lambda x: x % 2, f(4)), [1, 3, 5]))",
    "strict": "assert list(zip(f(2), [1, 2], strict=True)) == [(1, 1), (2, 2)]",
}
TRUNCATING_SOLUTION = RIGHT + METHOD + ("def diffs(xs):\n    return [b - a for a, b in zip(xs, xs[1:])]\n"
                               "def g(n):\n    return list(range(1, n + 1))\n")


def test_where_the_tests_mean_zip_to_truncate_a_right_answer_still_passes():
    """The pairwise idiom, an answer beside its own (longer) input, a ``range`` or endless counter,
    a reference table read in a loop, twice, per pytest case or once where it holds far more items
    than the call asks for (``zip(f(5), FIRST_20)`` scored 0), an answer longer than the expected
    value, two answers of the solution's, a filtered answer and ``strict=True`` behave as Python's zip."""
    names = list(TRUNCATING)
    rows = [{"prompt": "p", "tests": TRUNCATING[n]} for n in names]
    scored = score([TRUNCATING_SOLUTION] * len(names), rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


def test_operand_roles_name_the_answer_and_only_the_values_the_tests_wrote_for_it():
    """The answer (followed through names, copies, items, conversions, methods of the solution's
    objects) and an expected value that touches nothing of the solution's, not the answer's own
    input and no reference table; anything else is neither."""
    from polyrl.sandbox.prefix_sites import ANSWER, EXPECTED, NEITHER, operand_roles

    def roles(source):
        return list(operand_roles([("<test>", source)]).values())

    A, E, N = ANSWER, EXPECTED, NEITHER
    assert roles("r = f(2)\nexpected = [1, 2]\nzip(sorted(r), expected)") == [(A, E)]
    assert roles("for x, want in cases:\n    zip(map(float, f(x)), want)\ncases = [(1, [1])]") == [(A, E)]
    assert roles("def ref(n):\n    return list(range(n))\nzip(f(3), ref(3))") == [(A, E)]
    assert roles("def ref(n):\n    return f(n)\nzip(g(3), ref(3))") == [(A, N)]  # a helper that calls the solution
    assert roles("zip(f(xs), xs, sorted(xs))\nxs = [1]") == [(A, N, N)]  # the answer's own input
    assert roles("zip(f(2), set(f(2)), str(f(2)), filter(None, f(2)), f(2)[:1])") == [(A, N, N, N, N)]  # other counts
    assert roles("def t(n, want):\n    zip(f(n), want)") == [(A, N)]  # a parameter no call gives
    assert roles("zip(f(2), np.array([1, 2]))") == [(A, N)]  # a name the tests never bind may be the solution's
    assert roles("zip(WORDS, [1, 2])") == [(A, N)]  # a value of the solution's, no call: nothing to compare
    table = "[" + ", ".join(map(str, range(20))) + "]"
    assert roles(f"FIRST_20 = {table}\nzip(primes(5), FIRST_20)") == [(A, N)]  # a table read once, far longer
    assert roles(f"zip(primes(5), {table})\nEXPECTED = [1, 2, 3]\nzip(f(3), EXPECTED)") == [(A, E), (A, E)]
    assert roles(f"FIRST_20 = {table}\nzip(primes(n), FIRST_20)\nn = 5") == [(A, E)]  # no literal argument
