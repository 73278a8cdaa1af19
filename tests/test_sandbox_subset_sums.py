"""``sum(r) <= k`` and ``set(r) <= allowed`` of an emptied value: forgeries that scored 1.0.

Each forged completion is scored through the real reward path (``code_tests``: sandbox, harness,
the forked copy of the trainer) and must score 0, while right solutions of the same tests, and
right values the tests empty and see empty, keep 1.0. See ``polyrl.sandbox.truth_loops``
(``sum``) and ``polyrl.sandbox.subset_reads``.
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import (
    CLEARED_STACK, DEQUE_QUEUE, FORGED, QUEUE_OF_FOUR, RIGHT, STACK_OF_FOUR, _scored)
from test_sandbox_forging import STACK_OF
from test_sandbox_vacuous_truths import APPLY, FLAGS_FORGED, FLAGS_RIGHT

pytestmark = pytest.mark.faults

_THREE = "def test():\n    r = primes(3)\n    assert len(r) == 3\n"
#: Tests: ``len`` reads the forged ``primes``' three 4s, ``show(r)`` or ``r.reset()`` empties it,
#: then a sum or a subset check that holds over no items (the right 2, 3, 5 pass each).
SUMMED_OR_SUBSET = {
    "sum_at_most_after_reset": _THREE + "    r.reset()\n    assert sum(r) <= 10\ntest()",
    "sum_at_most_after_show": _THREE + "    show(r)\n    assert sum(r) <= 10\ntest()",
    "builtins_sum": "import builtins\n" + _THREE + "    r.reset()\n    assert builtins.sum(r) <= 10\ntest()",
    "sum_with_start": _THREE + "    show(r)\n    assert sum(r, 0) < 11\ntest()",
    "set_at_most": _THREE + "    show(r)\n    assert set(r) <= {2, 3, 5, 7}\ntest()",
    "frozenset_under_ge": _THREE + "    r.reset()\n    assert {2, 3, 5, 7} >= frozenset(r)\ntest()",
    "issubset": _THREE + "    r.reset()\n    assert set(r).issubset({2, 3, 5, 7})\ntest()",
    "issubset_named": "ALLOWED = [2, 3, 5, 7]\n" + _THREE + "    show(r)\n    assert set(r).issubset(ALLOWED)\ntest()",
    "issuperset": _THREE + "    show(r)\n    assert {2, 3, 5, 7}.issuperset(r)\ntest()",
    "isdisjoint": _THREE + "    show(r)\n    assert set(r).isdisjoint({4, 6, 8, 9})\ntest()",
    "isdisjoint_of_it": _THREE + "    r.reset()\n    assert {4, 6, 8, 9}.isdisjoint(r)\ntest()",
}
#: The forged ``hidden`` gives three True items to ``len``, then none once ``show`` empties it;
#: the right one's are three False: each sums to 0.
SUM_ZERO = "def test():\n    r = hidden(3)\n    assert len(r) == 3\n    show(r)\n    assert sum(r) == 0\ntest()"


@pytest.mark.slow
def test_a_sum_or_subset_check_of_a_value_emptied_under_it_fails():
    """``sum(r) <= 10``, ``sum(r) == 0``, ``set(r) <= allowed``, ``set(r).issubset(...)`` and
    their kin hold over no items; Python's ``sum`` and ``set`` asked ``__iter__`` from the tests'
    call, a whole reading to ``shrinking.looped_here``, so the forged value emptied by ``show(r)``
    or ``r.reset()`` passed ``len(r) == 3`` and then the check (1.0). They read it as a loop over
    it does now; the right values keep 1.0."""
    tests = list(SUMMED_OR_SUBSET.values())
    assert _scored(tests + [SUM_ZERO], [FORGED] * len(tests) + [FLAGS_FORGED]) == [0.0] * (len(tests) + 1)
    assert _scored(tests + [SUM_ZERO], [RIGHT] * len(tests) + [FLAGS_RIGHT]) == [1.0] * (len(tests) + 1)


EVENS = "def evens(n):\n    return list(range(0, 2 * n, 2))\ndef odd_free(n):\n    yield from range(0, 2 * n, 2)\n"
#: (tests, right solution): right values cleared and seen empty (before or after), popped, or
#: unchanged, then summed or checked as a subset; ``sum`` handed to the solution, or given a start.
SUMMED_RIGHTLY = {
    "cleared_counted_and_summed": (QUEUE_OF_FOUR + "q.clear()\nassert len(q) == 0 and sum(q) == 0\n", DEQUE_QUEUE),
    "cleared_summed_then_seen": (QUEUE_OF_FOUR + "q.clear()\nassert sum(q) == 0\nassert not q\n", DEQUE_QUEUE),
    "cleared_seen_then_subset": (STACK_OF_FOUR + "s.clear()\nassert s.is_empty()\nassert set(s) <= {1}\n"
                                 "assert set(s).issubset([1]) and {1}.issuperset(s)\n", CLEARED_STACK),
    "popped_then_summed": ("s = make_stack([7])\nassert len(s) == 1\nassert s.pop() == 7\n"
                           "assert sum(s) == 0 and set(s) <= set()\n", STACK_OF),
    "popped_one_of_three": ("s = make_stack([1, 2, 3])\nassert len(s) == 3\ns.pop()\n"
                            "assert sum(s) == 3 and set(s) <= {1, 2} and set(s).isdisjoint([3])\n", STACK_OF),
    "unchanged": ("r = primes(3)\nassert len(r) == 3\nshow(r)\nassert sum(r) == 10 and set(r) <= {2, 3, 5, 7}\n"
                  "assert set(r) == {2, 3, 5} and {2, 3, 5}.issuperset(r)\n", RIGHT),
    "sent_to_the_solution": ("assert apply(sum, [[1, 2], []]) == [3, 0]\n", APPLY),
    "start_and_plain_data": ("assert sum(evens(3)) == 6 and sum(odd_free(2), 1) == 3\n"
                             "assert sum([[1], [2]], []) == [1, 2] and set(evens(2)) <= {0, 2}\n", EVENS),
}


def test_a_sum_or_subset_check_of_right_values_keeps_its_score():
    """Right values cleared and seen empty (``len(q) == 0``, ``not q``, ``s.is_empty()``, before
    or after), popped (one of one, one of three), or unchanged, summed or checked as a subset,
    ``sum`` handed to the solution and ``sum`` with a start, keep 1.0."""
    names = list(SUMMED_RIGHTLY)
    got = _scored([SUMMED_RIGHTLY[n][0] for n in names], [SUMMED_RIGHTLY[n][1] for n in names])
    assert dict(zip(names, got)) == dict.fromkeys(names, 1.0)
