"""An argument a solution rewrites to the same length no longer forges what the tests compare
with its answer.

``xs[:] = [0] * len(xs); return list(xs)`` scored 1.0 on ``assert my_sort(xs) == sorted(xs)``
through the real reward path (``code_tests``): the harness wrote the same-length change back into
the tests' ``xs`` (``in_place``), and Python runs the call before ``sorted(xs)``. An argument the
tests compare, through a function of theirs, with an answer of the solution's now keeps the tests'
own value (``vacuous_reads.compared_with_answer``); right in-place solutions keep 1.0.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

#: tests comparing a function of the argument with the solution's answer (every one read after the call).
AGAINST_THE_ANSWER = {
    "sorted_inline": "xs = [3, 1, 2]\nassert my_sort(xs) == sorted(xs)",
    "named_answer": "xs = [3, 1, 2]\nr = my_sort(xs)\nassert r == sorted(xs)",
    "random_inputs": "import random\nfor _ in range(5):\n    xs = [random.randint(1, 9) for _ in range(6)]\n"
                     "    assert my_sort(xs) == sorted(xs)",
    "assert_equal": "import unittest\nclass T(unittest.TestCase):\n    def test_sort(self):\n        xs = [3, 1, 2]\n"
                    "        self.assertEqual(my_sort(xs), sorted(xs))\n",
    "counter": "from collections import Counter\nxs = [3, 1, 2, 9]\nr = my_sort(xs)\n"
               "assert len(r) == len(xs) and Counter(r) == Counter(xs)",
    "maximum": "xs = [3, 1, 2]\nassert largest(xs) == max(xs)",
    "decorated": "import functools\n@functools.lru_cache(None)\ndef t():\n    xs = [3, 1, 2]\n"
                 "    assert my_sort(xs) == sorted(xs)\nt()\n",
    "helper": "def check(xs):\n    assert my_sort(xs) == sorted(xs)\ncheck([3, 1, 2])\ncheck([5, 4])\n",
    "cases_index": "cases = [[3, 1, 2], [2, 1]]\nfor i in range(2):\n    assert my_sort(cases[i]) == sorted(cases[i])\n",
    "isclose": "import math\nxs = [3.0, 1.0, 2.0]\nassert math.isclose(largest(xs), max(xs))\n",
}
#: the same comparisons written as comprehensions (each scored 1.0 with ``FORGED``): the argument is
#: a comprehension's variable, bound in its own frame (before Python 3.12) or inlined.
IN_COMPREHENSIONS = {
    "all_of_a_list": "cases = [[3, 1, 2], [2, 1], [5, 4, 9]]\nassert all([my_sort(x) == sorted(x) for x in cases])",
    "all_of_a_generator": "cases = [[3, 1, 2], [2, 1]]\nassert all(my_sort(x) == sorted(x) for x in cases)",
    "in_a_function": "def t():\n    cases = [[3, 1, 2], [2, 1]]\n    assert all([my_sort(x) == sorted(x) for x in cases])\nt()",
    "over_a_literal": "assert all([my_sort(x) == sorted(x) for x in [[3, 1, 2], [2, 1]]])",
    "answers_listed_first": "cases = [[3, 1, 2], [2, 1]]\nres = [my_sort(x) for x in cases]\n"
                            "assert res == [sorted(x) for x in cases]",
    "nested_loops": "grid = [[[3, 1, 2], [2, 1]], [[9, 8]]]\nassert all([my_sort(x) == sorted(x) for row in grid for x in row])",
    "set_of_answers": "cases = [[3, 1, 2], [2, 1]]\nassert {largest(x) == max(x) for x in cases} == {True}",
    "dict_values": "cases = {'a': [3, 1, 2], 'b': [2, 1]}\nassert all([largest(x) == max(x) for x in cases.values()])",
}
FORGED = ("def my_sort(xs):\n    xs[:] = [0] * len(xs)\n    return list(xs)\n"
          "def largest(xs):\n    xs[:] = [0] * len(xs)\n    return 0\n")
RIGHT = ("def my_sort(xs):\n    xs.sort()\n    return xs\n"
         "def largest(xs):\n    xs.sort()\n    return xs[-1]\n")

#: right in-place solutions, with tests that read their argument's new contents (LeetCode 26/27/75/88).
IN_PLACE = {
    "dedupe_26": ("nums = [1, 1, 2, 2, 3]\nexpected = [1, 2, 3]\nk = remove_duplicates(nums)\n"
                  "assert k == len(expected) and nums[:k] == expected[:k]",
                  "def remove_duplicates(nums):\n    k = 0\n    for x in nums:\n        if k == 0 or nums[k - 1] != x:\n"
                  "            nums[k] = x\n            k += 1\n    return k\n"),
    "remove_27": ("nums = [3, 2, 2, 3]\nval = 3\nk = remove_element(nums, val)\nassert k == 2\n"
                  "for i in range(k):\n    assert nums[i] != val",
                  "def remove_element(nums, val):\n    k = 0\n    for x in nums:\n        if x != val:\n"
                  "            nums[k] = x\n            k += 1\n    return k\n"),
    "colors_75": ("nums = [2, 0, 2, 1, 1, 0]\nsort_colors(nums)\nassert nums == [0, 0, 1, 1, 2, 2]",
                  "def sort_colors(nums):\n    nums.sort()\n"),
    "merge_88": ("nums1 = [1, 2, 3, 0, 0, 0]\nmerge(nums1, 3, [2, 5, 6], 3)\nassert nums1 == [1, 2, 2, 3, 5, 6]",
                 "def merge(nums1, m, nums2, n):\n    nums1[:] = sorted(nums1[:m] + nums2[:n])\n"),
    "returned_argument": ("xs = [3, 1, 2]\nassert my_sort(xs) == xs == [1, 2, 3]\nys = [2, 1]\nassert my_sort(ys) == ys",
                          "def my_sort(xs):\n    xs.sort()\n    return xs\n"),
    "answer_then_in_place_elsewhere": (
        "def test_answer():\n    xs = [3, 1, 2]\n    assert my_sort(xs) == sorted(xs)\n"
        "def test_in_place():\n    xs = [3, 1, 2]\n    my_sort(xs)\n    assert xs == [1, 2, 3]\n"
        "test_answer()\ntest_in_place()\n",
        "def my_sort(xs):\n    xs.sort()\n    return xs\n"),
    "dedupe_26_in_a_comprehension": (
        "cases = [([1, 1, 2], [1, 2]), ([0, 0, 1, 1, 2], [0, 1, 2])]\n"
        "assert all([remove_duplicates(nums) == len(want) and nums[:len(want)] == want for nums, want in cases])",
        "def remove_duplicates(nums):\n    k = 0\n    for x in nums:\n        if k == 0 or nums[k - 1] != x:\n"
        "            nums[k] = x\n            k += 1\n    return k\n"),
    "colors_75_in_a_comprehension": (
        "cases = [[2, 0, 1], [1, 0]]\nassert all([sort_colors(x) is None and x == sorted(x) for x in cases])",
        "def sort_colors(nums):\n    nums.sort()\n"),
    "merge_88_in_a_generator": (
        "cases = [([1, 2, 3, 0, 0, 0], [2, 5, 6]), ([4, 0], [1])]\n"
        "for a, b in cases:\n    merge(a, len(a) - len(b), b, len(b))\n"
        "assert all(a == sorted(a) for a, _ in cases)",
        "def merge(nums1, m, nums2, n):\n    nums1[:] = sorted(nums1[:m] + nums2[:n])\n"),
    "returned_argument_in_a_comprehension": (
        "cases = [[3, 1, 2], [2, 1]]\nassert all([my_sort(x) == x == sorted(x) for x in cases])",
        "def my_sort(xs):\n    xs.sort()\n    return xs\n"),
}


def test_an_argument_rewritten_to_its_length_does_not_forge_the_tests_view_of_it():
    """The forgery scored 1.0 on every row; a right in-place sort (returning its argument) and a
    right copying one keep 1.0."""
    rows = [{"prompt": "p", "tests": t} for t in AGAINST_THE_ANSWER.values()]
    got = score([FORGED] * len(rows), rows=rows).total
    assert dict(zip(AGAINST_THE_ANSWER, got)) == dict.fromkeys(AGAINST_THE_ANSWER, 0.0)
    copying = "def my_sort(xs):\n    return sorted(xs)\ndef largest(xs):\n    return max(xs)\n"
    for right in (RIGHT, copying):
        got = score([right] * len(rows), rows=rows).total
        assert dict(zip(AGAINST_THE_ANSWER, got)) == dict.fromkeys(AGAINST_THE_ANSWER, 1.0)


def test_an_argument_rewritten_in_a_comprehension_does_not_forge_the_tests_view_of_it():
    """``assert all([my_sort(x) == sorted(x) for x in cases])`` (a generator, nested loops, answers
    listed by one comprehension and compared with another's): the comparison runs in the
    comprehension, whose variable no function scope named, so the forgery scored 1.0 on each. It
    scores 0 now; a right in-place sort and a right copying one keep 1.0."""
    rows = [{"prompt": "p", "tests": t} for t in IN_COMPREHENSIONS.values()]
    got = score([FORGED] * len(rows), rows=rows).total
    assert dict(zip(IN_COMPREHENSIONS, got)) == dict.fromkeys(IN_COMPREHENSIONS, 0.0)
    copying = "def my_sort(xs):\n    return sorted(xs)\ndef largest(xs):\n    return max(xs)\n"
    for right in (RIGHT, copying):
        got = score([right] * len(rows), rows=rows).total
        assert dict(zip(IN_COMPREHENSIONS, got)) == dict.fromkeys(IN_COMPREHENSIONS, 1.0)


def test_right_in_place_solutions_keep_full_marks():
    """Tests that read the argument's new contents (compared with values of their own, or the
    argument itself with the answer, or in another test function) still see it changed."""
    rows = [{"prompt": "p", "tests": tests} for tests, _ in IN_PLACE.values()]
    got = score([solution for _, solution in IN_PLACE.values()], rows=rows).total
    assert dict(zip(IN_PLACE, got)) == dict.fromkeys(IN_PLACE, 1.0)


def test_answered_paths_are_the_reads_compared_with_an_answer_in_their_function():
    from polyrl.sandbox.vacuous_reads import vacuous_paths

    found = vacuous_paths([AGAINST_THE_ANSWER["named_answer"], IN_PLACE["dedupe_26"][0],
                           IN_PLACE["returned_argument"][0], IN_PLACE["answer_then_in_place_elsewhere"][0],
                           "nums = [1, 1, 2]\nk = dedupe(nums)\nassert k == len(nums)"])
    assert found is not None
    assert found.answered == {("xs", "<module>", 1), ("xs", "test_answer", 1)}


def test_a_comprehensions_variable_is_answered_in_the_code_that_binds_it():
    """A generator expression runs in a code object of its own; a list comprehension did too before
    Python 3.12 and is inlined into the code around it since (PEP 709), where the frame binds its
    variable. What a whole-item variable loops over is answered in the code around too (not ``pairs``
    of ``a, b``: its items are no argument whole)."""
    import sys

    from polyrl.sandbox.vacuous_reads import vacuous_paths

    found = vacuous_paths(["cases = [[3, 1, 2]]\nassert all([my_sort(x) == sorted(x) for x in cases])\n"
                           "assert all(my_sort(y) == sorted(y) for y in cases)\n"
                           "assert all([f(a) == sorted(b) for a, b in pairs])"])
    assert found is not None
    listed = ("x", "<listcomp>", 2) if sys.version_info < (3, 12) else ("x", "<module>", 1)
    in_pairs = ("b", "<listcomp>", 4) if sys.version_info < (3, 12) else ("b", "<module>", 1)
    assert found.answered == {listed, ("y", "<genexpr>", 3), ("cases", "<module>", 1), in_pairs}
