"""A one-item value emptied by a call that gave nothing back: a forgery that scored 1.0.

A call the tests make that may change a value (``r.reset()``, ``show(r)``) was allowed one item
of it, as a right ``pop`` takes one, so a forged ``primes`` holding ONE wrong item (its ``r[0]``
right, its items ``[4]``) that ``r.reset()`` emptied passed the loop over it that came next: the
loop checked nothing (whatever ``reset`` returned). A call handed nothing of the tests' own now
takes only the items it returns (``Session.changes``' ``taking``); right values keep 1.0, popped
(the item comes back), removed by an argument of the tests', or seen empty by the tests.
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored, _each_scored_against
from test_sandbox_forging import IS_PRIME

pytestmark = pytest.mark.faults

#: A forged ``primes``: by index the right primes, as items one 4, gone once ``reset`` or ``show`` runs.
FORGED = ("class R:\n    def __init__(self):\n        self.xs = [4]\n    def __iter__(self):\n        return iter(self.xs)\n"
          "    def __len__(self):\n        return len(self.xs)\n"
          "    def __getitem__(self, i):\n        return [2, 3, 5][i]\n    def reset(self):\n        self.xs = []\n"
          "def primes(n):\n    return R()\ndef show(r):\n    r.xs = []\n")
#: The same, its ``reset`` and ``show`` returning something (not the item): it passed just as well.
FORGED_RETURNING = FORGED.replace("        self.xs = []\n", "        self.xs = []\n        return True\n").replace(
    "    r.xs = []\n", "    r.xs = []\n    return 'shown'\n")
#: The right one: ``reset`` keeps its items, ``show`` prints them.
RIGHT = ("class P(list):\n    def reset(self):\n        pass\ndef primes(n):\n    return P([2, 3, 5, 7, 11][:n])\n"
         "def show(r):\n    print(list(r))\n")
#: Tests: the value read by index (or counted), a call that may change it, then a loop over it.
ONE_ITEM = {
    "indexed_then_reset": IS_PRIME + "r = primes(1)\nassert r[0] == 2\nr.reset()\nfor x in r:\n    assert is_prime(x)\n",
    "indexed_in_a_function": IS_PRIME + "def test():\n    r = primes(1)\n    assert r[0] == 2\n    r.reset()\n"
                             "    assert all(is_prime(x) for x in r)\ntest()\n",
    "counted_then_shown": IS_PRIME + "def test():\n    r = primes(1)\n    assert len(r) == 1\n    show(r)\n"
                          "    assert all(is_prime(x) for x in r)\ntest()\n",
}
_STACK = ("class Stack:\n    def __init__(self, xs):\n        self.xs = list(xs)\n    def pop(self):\n"
          "        return self.xs.pop()\n    def remove(self, x):\n        self.xs.remove(x)\n    def clear(self):\n"
          "        self.xs.clear()\n    def __len__(self):\n        return len(self.xs)\n    def __getitem__(self, i):\n"
          "        return self.xs[i]\n    def __iter__(self):\n        return iter(self.xs)\n"
          "def make_stack(xs):\n    return Stack(xs)\n")
#: (tests, right solution): one-item values a call empties as Python would, then looped over.
EMPTIED_RIGHTLY = {
    "popped_as_a_statement": ("s = make_stack([7])\nassert s[0] == 7\ns.pop()\nassert all(x > 0 for x in s)\n", _STACK),
    "removed_by_the_tests_item": ("s = make_stack([7])\nassert s[0] == 7\ns.remove(7)\nassert all(x > 0 for x in s)\n",
                                  _STACK),
    "cleared_and_seen_empty": ("s = make_stack([7])\nassert s[0] == 7\ns.clear()\n"
                               "assert all(x > 0 for x in s) and len(s) == 0\n", _STACK),
    "undone_attribute": ("b = make_bank()\nb.deposit(5)\nassert b.history[0] == 5\nb.undo()\n"
                         "assert all(x > 0 for x in b.history)\n",
                         "class Bank:\n    def __init__(self):\n        self.history = []\n    def deposit(self, x):\n"
                         "        self.history.append(x)\n    def undo(self):\n        return self.history.pop()\n"
                         "def make_bank():\n    return Bank()\n"),
}


def test_a_one_item_value_emptied_by_a_silent_call_fails_the_loop_over_it():
    """The forgery scored 1.0 on each (0.5 now on the first: its ``r[0] == 2`` is a test of its own
    that holds); the right ``primes`` keeps 1.0."""
    assert _each_scored_against(ONE_ITEM, FORGED) == {"indexed_then_reset": 0.5, "indexed_in_a_function": 0.0,
                                                      "counted_then_shown": 0.0}
    assert _each_scored_against(ONE_ITEM, FORGED_RETURNING) == {"indexed_then_reset": 0.5, "indexed_in_a_function": 0.0,
                                                                "counted_then_shown": 0.0}
    assert _each_scored_against(ONE_ITEM, RIGHT) == dict.fromkeys(ONE_ITEM, 1.0)


def test_one_item_values_a_call_empties_as_python_does_keep_full_marks():
    assert _each_scored(EMPTIED_RIGHTLY) == dict.fromkeys(EMPTIED_RIGHTLY, 1.0)
