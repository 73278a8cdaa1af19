"""A method called through the name the tests bind a solution's object to (``s = Solution()``).

Only ``Solution().f(nums)`` counted as a call of the solution's when the harness read the tests
(``vacuous_reads``), so LeetCode's own shape, ``s = Solution()`` then ``s.f(nums)`` (or
``self.sol.f(nums)`` after ``setUp``), was a call of the tests':
1. FORGERY: ``nums[:] = [0] * len(nums); return list(nums)`` passed ``assert s.sortArray(nums) ==
   sorted(nums)`` (1.0): the argument it rewrote was written back before ``sorted(nums)`` ran.
2. FALSE ZERO: a right LeetCode 26 (``del nums[k:]; return k``) failed ``k = s.removeDuplicates(nums)``
   then ``nums[:k] == [1, 2]``: its shortened argument was never written back.
Such a path is an instance now (``vacuous_reads._with_instances``).
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_FORGED = "class Solution:\n    def sortArray(self, xs):\n        xs[:] = [0] * len(xs)\n        return list(xs)\n"
_RIGHT = "class Solution:\n    def sortArray(self, xs):\n        return sorted(xs)\n"
_TESTS = {
    "module_level": "s = Solution()\nnums = [3, 1, 2]\nassert s.sortArray(nums) == sorted(nums)\n",
    "in_a_loop": "def test():\n    sol = Solution()\n    for nums in [[3, 1, 2], [2, 1]]:\n"
                 "        assert sol.sortArray(nums) == sorted(nums)\ntest()\n",
    "unittest_set_up": "import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.sol = Solution()\n"
                       "    def test_a(self):\n        nums = [3, 1, 2]\n"
                       "        self.assertEqual(self.sol.sortArray(nums), sorted(nums))\n",
}
_DEDUPE = ("class Solution:\n    def removeDuplicates(self, nums):\n        k = 0\n        for x in nums:\n"
           "            if k == 0 or nums[k - 1] != x:\n                nums[k] = x\n                k += 1\n"
           "        del nums[k:]\n        return k\n")


def test_an_argument_rewritten_through_an_instance_method_fails():
    """The forgery scored 1.0 on each; 0 now, and the right sort keeps 1.0."""
    assert _each_scored({name: (tests, _FORGED) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 0.0)
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_right_in_place_shrink_through_an_instance_method_keeps_full_marks():
    """It scored 0."""
    tests = "s = Solution()\nnums = [1, 1, 2]\nk = s.removeDuplicates(nums)\nassert k == 2 and nums[:k] == [1, 2]\n"
    assert _each_scored({"leetcode_26": (tests, _DEDUPE)}) == {"leetcode_26": 1.0}
