"""An argument a right solution shortens in place reaches the tests, except where a loop of theirs
could hold vacuously over it.

LeetCode 26/27-style solutions remove items in place and return the count kept; those that cut
the list (``del nums[k:]``, ``nums[:] = ...``) scored 0 through the real reward path
(``code_tests``), since a shrunk argument was never written back. See
``polyrl.sandbox.vacuous_reads`` and ``polyrl.sandbox.in_place``.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

#: (tests, right solution that shortens its argument).
SHRUNK = {
    "remove_duplicates_del": ("nums = [1, 1, 2]\nk = remove_duplicates(nums)\nassert k == 2 and nums[:k] == [1, 2]",
                              "def remove_duplicates(nums):\n    k = 0\n    for x in nums:\n"
                              "        if k == 0 or nums[k - 1] != x:\n            nums[k] = x\n            k += 1\n"
                              "    del nums[k:]\n    return k\n"),
    "remove_element_slice": ("nums = [3, 2, 2, 3]\nk = remove_element(nums, 3)\nassert k == 2\n"
                             "assert sorted(nums[:k]) == [2, 2] and len(nums) >= k",
                             "def remove_element(nums, val):\n    nums[:] = [x for x in nums if x != val]\n"
                             "    return len(nums)\n"),
    "pop_returning_none": ("xs = [1, 2, 3]\ndrop_last(xs)\nassert xs == [1, 2]", "def drop_last(xs):\n    xs.pop()\n"),
    "dict_key_removed": ("d = {'a': 1, 'b': 0}\nprune(d)\nassert d == {'a': 1}",
                         "def prune(d):\n    for k in [k for k, v in d.items() if not v]:\n        del d[k]\n"),
    "case_rows": ("cases = [([1, 1, 2], [1, 2]), ([0, 0], [0])]\nfor nums, want in cases:\n"
                  "    k = remove_duplicates(nums)\n    assert nums[:k] == want\nassert cases[1][0] == [0]",
                  "def remove_duplicates(nums):\n    nums[:] = sorted(set(nums))\n    return len(nums)\n"),
    "in_a_unittest": ("import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n"
                      "        self.nums = [0, 0, 1]\n        k = remove_duplicates(self.nums)\n"
                      "        self.assertEqual(self.nums[:k], [0, 1])\n",
                      "def remove_duplicates(nums):\n    nums[:] = sorted(set(nums))\n    return len(nums)\n"),
}

#: Tests that loop over their own argument after the call: an emptied or shortened one makes them vacuous.
LOOPED = {
    "zip_pairs": "xs = [3, 1, 2]\nsort_it(xs)\nassert all(a <= b for a, b in zip(xs, xs[1:]))",
    "range_len": "xs = [3, 1, 2]\nsort_it(xs)\nfor i in range(len(xs) - 1):\n    assert xs[i] <= xs[i + 1]",
    "alias_looped": "xs = [3, 1, 2]\nsort_it(xs)\nys = xs\nassert all(a <= b for a, b in zip(ys, ys[1:]))",
    "own_helper": "def ordered(a):\n    return all(x <= y for x, y in zip(a, a[1:]))\nxs = [3, 1, 2]\nsort_it(xs)\n"
                  "assert ordered(xs)",
    "row_of_a_grid": "grid = [[3, 1, 2]]\nsort_it(grid[0])\nassert all(a <= b for r in grid for a, b in zip(r, r[1:]))",
    "while_loop": "xs = [3, 1, 2]\nsort_it(xs)\ni = 1\nwhile i < len(xs):\n    assert xs[i - 1] <= xs[i]\n    i += 1",
    "numpy_all": "import numpy as np\nxs = [3, 1, 2]\nsort_it(xs)\nassert np.all(np.diff(xs) >= 0)",
    "dict_values": "d = {'a': 2, 'b': 3}\nsort_it(d)\nassert all(v % 2 == 0 for v in d.values())",
    "sorted_itself": "xs = [3, 1, 2]\nsort_it(xs)\nassert xs == sorted(xs)",
    "no_duplicates": "xs = [2, 2, 1]\nsort_it(xs)\nassert len(set(xs[:2])) == len(xs[:2])",
    "not_in": "xs = [3, 1, 2]\nsort_it(xs)\nassert 3 not in xs[:2]",
    "subset": "xs = [5, 1, 3]\nsort_it(xs)\nassert set(xs[:2]) <= {1, 3}",
    "count_method": "xs = [2, 1, 1]\nsort_it(xs)\nassert xs[:-1].count(2) == 0",
    "unittest_self": ("import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        self.xs = [3, 1, 2]\n"
                      "        sort_it(self.xs)\n        self.assertEqual(self.xs, sorted(self.xs))\n"),
}


def test_a_right_solution_that_shortens_its_argument_in_place_passes():
    """``del nums[k:]``, ``nums[:] = [...]``, ``xs.pop()`` and ``del d[k]`` scored 0 (the tests kept
    the argument as it was); where the tests only compare it with values of their own they see it
    shortened, as in Python, and these right solutions score 1.0."""
    names = list(SHRUNK)
    rows = [{"prompt": "p", "tests": SHRUNK[n][0]} for n in names]
    scored = score([SHRUNK[n][1] for n in names], rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


@pytest.mark.slow
def test_an_argument_emptied_or_shortened_before_the_tests_loop_over_it_still_fails():
    """Where the tests loop over the argument (``zip``, ``range(len(xs))``, an alias, a helper of
    theirs, a row of a grid, ``while``, ``np.all``, a dict's values) or check a property of it
    against itself (``xs == sorted(xs)``, ``len(set(xs)) == len(xs)``, ``not in``, a subset, its
    ``count``), emptying or shortening it would make the check hold vacuously: it stays as it was
    there, so those forgeries score 0, and a right in-place sort (or a change keeping every item) 1.0."""
    names = list(LOOPED)
    rows = [{"prompt": "p", "tests": LOOPED[n]} for n in names]
    for forged in ("def sort_it(xs):\n    xs.clear()\n", "def sort_it(xs):\n    del xs[1:]\n",
                   "def sort_it(xs):\n    if isinstance(xs, dict):\n        del xs['b']\n    else:\n        del xs[1:]\n"):
        scored = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = "def sort_it(xs):\n    if isinstance(xs, dict):\n        xs.update(a=4, b=6)\n    else:\n        xs.sort()\n"
    scored = score([honest] * len(names), rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


def test_vacuous_paths_name_every_value_read_other_than_compared_whole_with_the_tests_own():
    """A name read only through slices, ``len``, ``sorted``... in an asserted ``==`` against a value
    of the tests' own, ``in`` it, ``len(x) >= k``, ``assertEqual``, ``print`` or a call of the
    solution's is safe, and so is one bound to such a name; every other read is not (a loop, a
    ``while`` test, a helper of theirs, numpy, ``!=``, a property of itself, a method of it)."""
    from polyrl.sandbox.vacuous_reads import vacuous_paths

    safe = ["nums = [1, 1, 2]\nk = f(nums)\nassert k == 2 and nums[:k] == [1, 2] and len(nums) >= k\n"
            "assert sorted(nums[:k]) == [1, 2] and 1 in nums\nprint(nums)\ngot = nums[:k]\nassert got == [1, 2]\n"
            "k = Solution().f(d)\nassert sorted(d.items()) == [(1, 2)]\n"
            "self.assertEqual(self.nums[:k], self.expected)\nassert g(self.nums) == 2"]
    found = vacuous_paths(safe)
    assert {"nums", "got", "d", "self.nums", "self.expected"} & (found.whole | found.items) == set()
    paths = vacuous_paths(["def ok(a):\n    return a\nys = xs\nassert ok(ys) and all(v for v in self.d.values())\n"
                           "while i < len(zs):\n    pass\nimport numpy as np\nnp.allclose(ws, 1)\nassert vs != [1]\n"
                           "assert us == sorted(us)\nassert ts.count(1) == 1\nassert 3 not in rs\nif len(qs) >= 2:\n    pass"])
    assert {"ys", "xs", "self", "self.d", "zs", "ws", "vs", "us", "ts", "rs", "qs"} <= paths.whole
    found = vacuous_paths(["for nums, want in cases:\n    k = f(nums)\n    assert nums[:k] == want\n"
                           "for row in grid:\n    assert all(row)\nassert all(m[0])"])
    assert "cases" in found.whole and found.items == {"grid", "m"}  # a loop over cases reads no item of theirs


#: Tests comparing the answer, under a name of theirs, with what they make of the argument after
#: the call: an emptied argument and an empty answer agree.
AGAINST_THE_ANSWER = {
    "named_answer": "xs = [3, 1, 2]\nr = my_sort(xs)\nassert r == sorted(xs)",
    "counted_and_counter": "from collections import Counter\nxs = [3, 1, 2, 9]\nr = my_sort(xs)\n"
                           "assert len(r) == len(xs) and Counter(r) == Counter(xs)",
    "assert_equal": "import unittest\nclass T(unittest.TestCase):\n    def test_sort(self):\n        xs = [3, 1, 2]\n"
                    "        r = my_sort(xs)\n        self.assertEqual(r, sorted(xs))\n",
    "unpacked": "xs = [3, 1, 2]\nn, r = my_sort_n(xs)\nassert n == len(r) and list(r) == sorted(xs)",
}


def test_an_argument_emptied_is_not_written_back_where_the_tests_compare_it_with_the_answer():
    """``xs.clear(); return []`` passed ``r = my_sort(xs)`` then ``assert r == sorted(xs)`` (1.0):
    the emptied ``xs`` was written back, since ``r`` passed for a value of the tests' own, and an
    empty answer equals what they make of an empty argument. A comparison with an answer of the
    solution's (a call of its or a name bound to one) is no safe place now; right solutions, one
    sorting in place and returning its argument too, and LeetCode 26's ``nums[:k] == expected[:k]``
    keep 1.0."""
    from polyrl.sandbox.vacuous_reads import vacuous_paths

    forged = "def my_sort(xs):\n    xs.clear()\n    return []\ndef my_sort_n(xs):\n    xs.clear()\n    return 0, []\n"
    rows = [{"prompt": "p", "tests": t} for t in AGAINST_THE_ANSWER.values()]
    got = score([forged] * len(rows), rows=rows).total
    assert dict(zip(AGAINST_THE_ANSWER, got)) == dict.fromkeys(AGAINST_THE_ANSWER, 0.0)
    for right in ("def my_sort(xs):\n    return sorted(xs)\ndef my_sort_n(xs):\n    return len(xs), sorted(xs)\n",
                  "def my_sort(xs):\n    xs.sort()\n    return xs\ndef my_sort_n(xs):\n    xs.sort()\n    return len(xs), xs\n"):
        got = score([right] * len(rows), rows=rows).total
        assert dict(zip(AGAINST_THE_ANSWER, got)) == dict.fromkeys(AGAINST_THE_ANSWER, 1.0)
    dedupe = ("nums = [1, 1, 2]\nexpected = [1, 2]\nk = remove_duplicates(nums)\n"
              "assert k == 2 and nums[:k] == expected[:k] and len(nums) >= k")
    right = "def remove_duplicates(nums):\n    nums[:] = sorted(set(nums))\n    return len(nums)\n"
    assert list(score([right], rows=[{"prompt": "p", "tests": dedupe}]).total) == [1.0]
    assert "nums" not in vacuous_paths([dedupe]).whole
