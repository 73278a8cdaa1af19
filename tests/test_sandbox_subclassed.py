"""A tests' class deriving from a solution's class (``class T(Solution)``): a false zero on main.

The solution's class is a stand-in (``Remote``) in the tests, so Python called it as the new
class's metaclass and the class statement raised TypeError ("Remote.__init__() missing 1 required
positional argument"): every test of such a cell failed a right solution. The stand-in now gives
a local base whose instances hold an instance of the sample's class, its methods read through it
(``polyrl.sandbox.subclassed``). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_RIGHT_CODE = ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
               "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
               "                return [seen[target - x], i]\n            seen[x] = i\n"
               "class Stack:\n    def __init__(self, cap=10):\n        self.xs = []\n        self.cap = cap\n"
               "    def push(self, x):\n        self.xs.append(x)\n    def pop(self):\n        return self.xs.pop()\n")
_TESTS = {
    "plain_subclass": "class T(Solution):\n    pass\nassert T().twoSum([2, 7, 11, 15], 9) == [0, 1]\n",
    "super_calls": ("class Logged(Stack):\n    def __init__(self):\n        super().__init__(cap=3)\n        self.log = []\n"
                    "    def push(self, x):\n        self.log.append(x)\n        super().push(x)\n"
                    "s = Logged()\ns.push(1)\ns.push(2)\n"
                    "assert s.log == [1, 2] and s.pop() == 2 and s.xs == [1] and s.cap == 3\n"),
    "isinstance": ("class T(Stack):\n    pass\nt = T()\nassert isinstance(t, Stack) and isinstance(t, T)\n"
                   "assert not isinstance(t, Solution)\nt.push(5)\nassert t.pop() == 5\n"),
    "unittest": ("import unittest\nclass Helper(Solution):\n    def solve(self, nums, target):\n"
                 "        return self.twoSum(nums, target)\nclass TestTwo(unittest.TestCase):\n"
                 "    def test_it(self):\n        self.assertEqual(Helper().solve([3, 3], 6), [0, 1])\n"),
}
#: Wrong twoSums, each against ``plain_subclass``: an answer equal to anything, one claiming to be
#: what the tests expect through the class's names, and ones ending the sample with success.
_FORGED = {
    "equal_to_anything": ("class Any:\n    def __eq__(self, other):\n        return True\n"
                          "class Solution:\n    def twoSum(self, nums, target):\n        return Any()\n"),
    "names_as_answers": ("class Solution:\n    __polyrl_sample_class__ = [0, 1]\n    _polyrl_sample_part = [0, 1]\n"
                         "    def twoSum(self, nums, target):\n        return [1, 0]\n"),
    "getattr_any": ("class Solution:\n    def __getattr__(self, name):\n        return lambda *a: [0, 1] if a[1] == 0 else None\n"),
    "exit_zero": "import sys\nclass Solution:\n    def twoSum(self, nums, target):\n        sys.exit(0)\n",
    "os_exit_zero": "import os\nclass Solution:\n    def twoSum(self, nums, target):\n        os._exit(0)\n",
}


def test_a_tests_class_deriving_from_a_solutions_class_passes():
    """Each scored 0 on main (TypeError: the stand-in was called as a metaclass)."""
    assert _each_scored({name: (tests, _RIGHT_CODE) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_under_a_tests_subclass_scores_zero():
    tests = _TESTS["plain_subclass"]
    assert _each_scored({name: (tests, code) for name, code in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)
