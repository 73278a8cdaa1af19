"""LeetCode-style solutions reading the tests' preamble: ``ListNode``, ``TreeNode``, ``Optional``.

LeetCode's judge runs a solution after its preamble, so a right solution builds ``ListNode()``
and annotates ``Optional[ListNode]`` without defining or importing either. Where a dataset keeps
that preamble in its tests cell, the solution ran without it (the tests run in another process)
and every right solution scored 0 (NameError). The sample now runs the part of the preamble it
reads (``polyrl.sandbox.tests_header``); a tests' class that could tell it a wanted value (one
computing from their globals, a method or class attribute of theirs, a default that is no blank)
is never copied. Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored
from test_sandbox_verdict import score

from polyrl.rewards.test_cells import parse_tests

pytestmark = pytest.mark.faults

_PRE = "from typing import List, Optional\nimport collections\n"
_LIST_NODE = ("class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val = val\n        self.next = next\n"
              "def build(xs):\n    d = c = ListNode()\n    for x in xs:\n        c.next = ListNode(x)\n        c = c.next\n"
              "    return d.next\ndef to_list(h):\n    out = []\n    while h:\n        out.append(h.val)\n        h = h.next\n"
              "    return out\n")
_TREE_NODE = ("class TreeNode:\n    def __init__(self, val: int = 0, left: Optional['TreeNode'] = None, right=None):\n"
              "        self.val = val\n        self.left = left\n        self.right = right\n"
              "def inorder(t):\n    return inorder(t.left) + [t.val] + inorder(t.right) if t else []\n")
#: LeetCode 2 (Add Two Numbers) as LeetCode shows it: the node's definition a comment.
_ADD_TWO = ("# Definition for singly-linked list.\n# class ListNode:\n#     def __init__(self, val=0, next=None):\n"
            "#         self.val = val\n#         self.next = next\nclass Solution:\n"
            "    def addTwoNumbers(self, l1: Optional[ListNode], l2: Optional[ListNode]) -> Optional[ListNode]:\n"
            "        dummy = cur = ListNode()\n        carry = 0\n        while l1 or l2 or carry:\n"
            "            v = carry + (l1.val if l1 else 0) + (l2.val if l2 else 0)\n            carry, v = divmod(v, 10)\n"
            "            cur.next = ListNode(v)\n            cur = cur.next\n"
            "            l1 = l1.next if l1 else None\n            l2 = l2.next if l2 else None\n        return dummy.next\n")
#: LeetCode 108 (sorted array to BST) and 102 (level order), reading ``List`` and ``collections`` too.
_TREES = ("class Solution:\n    def sortedArrayToBST(self, nums: List[int]) -> Optional[TreeNode]:\n        if not nums:\n"
          "            return None\n        m = len(nums) // 2\n"
          "        return TreeNode(nums[m], self.sortedArrayToBST(nums[:m]), self.sortedArrayToBST(nums[m + 1:]))\n"
          "    def levelOrder(self, root: Optional[TreeNode]) -> List[List[int]]:\n        out, q = [], collections.deque([root] if root else [])\n"
          "        while q:\n            out.append([n.val for n in q])\n"
          "            q = collections.deque(k for n in q for k in (n.left, n.right) if k)\n        return out\n")
_ADD_TESTS = "assert to_list(Solution().addTwoNumbers(build([2, 4, 3]), build([5, 6, 4]))) == [7, 0, 8]\n"
_RIGHT = {
    "assert": (_PRE + _LIST_NODE + _ADD_TESTS, _ADD_TWO),
    "unittest": (_PRE + _LIST_NODE + "import unittest\nclass T(unittest.TestCase):\n    def test_carry(self):\n"
                 "        self.assertEqual(to_list(Solution().addTwoNumbers(build([9, 9]), build([1]))), [0, 0, 1])\n"
                 "if __name__ == '__main__':\n    unittest.main()\n", _ADD_TWO),
    "check_candidate": (_PRE + _LIST_NODE + "def check(candidate):\n    assert to_list(candidate(build([5]), build([5]))) == [0, 1]\n"
                        "check(Solution().addTwoNumbers)\n", _ADD_TWO),
    "star_imports_trees": ("from typing import *\nfrom collections import *\nimport collections\n" + _TREE_NODE
                           + "assert inorder(Solution().sortedArrayToBST([1, 2, 3, 4])) == [1, 2, 3, 4]\n"
                           "assert Solution().levelOrder(TreeNode(3, TreeNode(9), TreeNode(20))) == [[3], [9, 20]]\n",
                           _TREES),
}
#: Wrong solutions reaching the tests' values through the preamble: a class computing from their
#: globals, one defaulting to the wanted value, a method and a class attribute of theirs; and a wrong ``addTwoNumbers`` (no carry) that now runs.
_WANT = "def f():\n    return Exp().v\n"
_FORGED = {
    "class_reading_globals": ("WANT = 7\nclass Exp:\n    def __init__(self, v=None):\n        self.v = WANT\n"
                              "assert f() == WANT\n", _WANT),
    "wanted_default": ("class Exp:\n    def __init__(self, v=7):\n        self.v = v\nassert f() == 7\n", _WANT),
    "method": ("class Exp:\n    def __init__(self, v=0):\n        self.v = v\n    def want(self):\n        return 7\n"
               "assert f() == 7\n", "def f():\n    return Exp().want()\n"),
    "class_attribute": ("class Exp:\n    want = 7\n    def __init__(self, v=0):\n        self.v = v\nassert f() == 7\n",
                        "def f():\n    return Exp.want\n"),
    "no_carry": (_PRE + _LIST_NODE + _ADD_TESTS, _ADD_TWO.replace("carry, v = divmod(v, 10)", "carry, v = 0, v % 10")),
}


def test_a_leetcode_solution_reading_the_tests_node_class_passes():
    """Each scored 0 on main: NameError for ``Optional``/``ListNode``/``TreeNode`` in the sample."""
    assert _each_scored(_RIGHT) == dict.fromkeys(_RIGHT, 1.0)


def test_the_preamble_tells_a_wrong_solution_nothing():
    assert _each_scored(_FORGED) == dict.fromkeys(_FORGED, 0.0)


def test_only_what_the_solution_reads_and_python_lacks_is_copied():
    """A builtin's name stays Python's (``from math import *``'s ``pow`` is never copied over
    ``pow``), names the solution never reads are left out, and a class with more than data is not
    copied whatever the solution reads."""
    from polyrl.sandbox import tests_header  # here: the scoring tests above run on main's code too
    steps = parse_tests("from math import *\nimport numpy as np\nfrom solution import f\nclass Exp:\n"
                        "    def __init__(self):\n        self.v = 1\n    def __eq__(self, o):\n        return True\n"
                        "class Node:\n    def __init__(self, val=0, kids=None):\n        self.val, self.kids = val, kids or []\n"
                        "assert f(2) == 3\n")
    text = tests_header.header(steps, "def f(x):\n    return pow(x, 2, 5) + sqrt(x) + np.x + Exp().v + Node(x).val\n")
    assert "sqrt" in text and "class Node" in text
    assert "pow" not in text and "numpy" not in text and "Exp" not in text and "import f" not in text
    assert tests_header.header(steps, "def f(x):\n    return x + 1\n") == ""


#: LeetCodeDataset's row shape: the preamble (star imports, ``inf``, the node classes and their
#: helpers) before ``check(candidate)``, the entry point ``Solution().reverseList``.
_LEETCODE_DATASET = ("import collections\nfrom typing import *\nfrom collections import *\nfrom itertools import *\n"
                     "from math import *\ninf = float('inf')\n" + _LIST_NODE.replace("def build", "def list_node")
                     + "def is_same_list(p, q):\n    return to_list(p) == to_list(q)\n"
                     "def check(candidate):\n    assert is_same_list(candidate(head=list_node([1, 2, 3])), list_node([3, 2, 1]))\n"
                     "    assert candidate(head=None) is None\n")
_REVERSE = ("class Solution:\n    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n"
            "        dummy = ListNode()\n        while head:\n            nxt = head.next\n"
            "            head.next = dummy.next\n            dummy.next = head\n            head = nxt\n        return dummy.next\n")


def test_a_leetcode_dataset_row_scores_through_its_entry_point():
    """``Solution().reverseList`` as the entry point was an ``error:`` at setup ("not a function
    name"); with it, the right solution scored 0 (NameError: ``Optional``) on main's sandbox."""
    row = {"prompt": "p", "tests": _LEETCODE_DATASET, "entry_point": "Solution().reverseList"}
    wrong = _REVERSE.replace("return dummy.next", "return head")
    assert list(score([_REVERSE, wrong], rows=[row, row]).total) == [1.0, 0.0]
    from polyrl.errors import RewardError
    from polyrl.rewards.code import _entry_point
    for bad in ("Solution().f()", "Solution(1).f", "Solution().f.g", "__import__('os').f", "().f"):
        with pytest.raises(RewardError, match="not a function name"):
            _entry_point({"entry_point": bad}, "entry_point", 0)


def test_a_copied_class_keeps_none_of_the_tests_docstrings():
    """A node class's docstring is the tests' text (it may show an example's wanted output): the
    sample's copy has the class's data shape only."""
    from polyrl.sandbox import tests_header
    steps = parse_tests('class ListNode:\n    """reverse([1, 2]) == [2, 1]"""\n    def __init__(self, val=0, next=None):\n'
                        '        """wanted: 42"""\n        self.val, self.next = val, next\nfrom solution import f\n'
                        "assert f(ListNode(1)) == 1\n")
    text = tests_header.header(steps, "def f(node: ListNode):\n    return node.val\n")
    assert "class ListNode" in text and "self.val" in text
    assert "reverse" not in text and "42" not in text
