"""A sample's value left one made-up item, or emptied under ``sorted(r)`` fed to a loop: forgeries that scored 1.0.

Each forged completion is a WRONG ``primes`` whose value gives ``len`` three non-primes and then,
once a call the tests make reaches it, one prime it never held (or nothing, read through
``sorted``/``list``), so the loop after that call checks one item (or none). Each is scored
through the real reward path (``code_tests``) and must score 0, while right solutions of the same
shape (a value a removal shrinks to items it had, one the tests hand new items, one read
whole after the loop) keep 1.0. See ``Remote._emptied_unseen`` and ``shrinking.looped_here``.
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import FORGED, GRAPH_EDGES, QUEUE_CLEARED, RIGHT, _scored
from test_sandbox_forging import IS_PRIME, STACK_OF

pytestmark = pytest.mark.faults

#: ``FORGED`` (4, 4, 4) left with one prime, 2, by ``reset``, ``show`` or ``valid``.
ONE_LEFT = FORGED.replace("xs = []", "xs = [2]")
#: Tests: ``len`` reads three items, a call reaches the value, a loop checks what is left.
LEFT_ONE = {
    "own_method_as_a_statement": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
                                 "    assert all(is_prime(x) for x in r)\ntest()",
    "passed_to_a_function": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                            "    for x in r:\n        assert is_prime(x)\ntest()",
}
#: Tests whose loop goes over ``sorted(r)``, ``list(r)`` or ``set(r)`` of a value a call reached.
FED_TO_A_LOOP = {
    "sorted_in_a_for": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                       "    for x in sorted(r):\n        assert is_prime(x)\ntest()",
    "list_in_all": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
                   "    assert all(is_prime(x) for x in list(r))\ntest()",
    "set_in_a_comprehension": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                              "    assert [x for x in set(r) if not is_prime(x)] == []\ntest()",
}
BAG = ("class Bag:\n    def __init__(self, xs):\n        self.xs = list(xs)\n    def __len__(self):\n"
       "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
       "    def compact(self):\n        self.xs = [sum(self.xs)]\n    def replace(self, xs):\n        self.xs = list(xs)\n"
       "def make_bag(xs):\n    return Bag(xs)\n")
#: (tests, right solution): values the tests' calls shrink as in Python, then looped over.
SHRUNK_RIGHTLY = {
    "edges_left_after_a_removal_uncounted": ("g = make_graph([(1, 2), (2, 3), (3, 4)])\nedges = g.edges\n"
                                             "assert len(edges) == 3\ng.remove(2)\nassert all(2 not in e for e in edges)",
                                             GRAPH_EDGES),
    "replaced_by_items_handed_in": ("b = make_bag([1, 2, 3])\nassert len(b) == 3\nb.replace([9])\n"
                                    "assert all(x == 9 for x in b)", BAG),
    "one_new_item_then_counted": ("b = make_bag([1, 2, 3])\nassert len(b) == 3\nb.compact()\n"
                                  "assert all(x == 6 for x in b) and len(b) == 1", BAG),
    "one_new_item_counted_first": ("b = make_bag([1, 2, 3])\nassert len(b) == 3\nb.compact()\nassert len(b) == 1\n"
                                   "for x in b:\n    assert x == 6", BAG),
    "cleared_sorted_looped_then_counted": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nq.clear()\n"
                                           "assert all(x > 5 for x in sorted(q))\nassert len(q) == 0", QUEUE_CLEARED),
    "cleared_then_compared_sorted": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nempty(q)\n"
                                     "assert sorted(q) == []\nfor x in sorted(q):\n    assert x > 5", QUEUE_CLEARED),
    "popped_then_sorted_loop": ("s = make_stack([3, 1, 2])\nassert len(s) == 3\nassert s.pop() == 2\n"
                                "assert [x for x in sorted(s)] == [1, 3]", STACK_OF),
}


def test_a_value_left_one_item_it_never_had_fails_the_loop_over_it():
    """A forged ``primes`` whose 4, 4, 4 became ``[2]`` at ``r.reset()`` or ``show(r)`` passed
    ``len(r) == 3`` and the loop that then checked 2 alone (1.0): a loop over a value that lost
    more items than calls were made and holds one it never had, nor was handed, fails now."""
    tests = list(LEFT_ONE.values())
    assert _scored(tests, [ONE_LEFT] * len(tests)) == [0.0] * len(tests)
    assert _scored(tests, [RIGHT] * len(tests)) == [1.0] * len(tests)


def test_a_loop_over_sorted_or_list_of_an_emptied_value_fails():
    """``for x in sorted(r)`` (or ``list(r)``, ``set(r)``) read the forged value emptied by
    ``show(r)`` whole, which counted as the tests seeing it empty, so the loop after held
    vacuously (1.0): such a reading is the loop's now."""
    tests = list(FED_TO_A_LOOP.values())
    assert _scored(tests, [FORGED] * len(tests)) == [0.0] * len(tests)
    assert _scored(tests, [RIGHT] * len(tests)) == [1.0] * len(tests)


def test_values_shrunk_as_python_does_keep_their_score():
    """Edges a removal leaves (items they had), a bag given new items by the tests (``replace([9])``)
    or compacted to one new item the tests count, a queue cleared and looped over through
    ``sorted`` then seen empty, and a popped stack looped over sorted keep 1.0."""
    names = list(SHRUNK_RIGHTLY)
    got = _scored([SHRUNK_RIGHTLY[n][0] for n in names], [SHRUNK_RIGHTLY[n][1] for n in names])
    assert dict(zip(names, got)) == dict.fromkeys(names, 1.0)
