"""The write-back rule for arguments compared with a solution's answer, kept to the calls it is for.

1. FALSE ZEROS: an argument the tests compare, through a function of theirs, with an answer of the
   solution's keeps the tests' own value (``vacuous_reads.compared_with_answer``: a forged
   ``xs[:] = [0] * len(xs); return list(xs)`` made ``sorted(xs)`` agree with it). Matched by scope,
   the rule also kept every other call's in-place change to an item of the same ``cases`` away from
   the tests, so a right in-place ``sort_it(cases[1])`` beside ``all([my_sort(x) == sorted(x) for
   x in cases])`` left ``cases[1]`` unsorted (0.5). Calls that name no function whose answer is so
   compared now write back (``Vacuous.free_calls``); a warm-up ``my_sort(x)`` still does not.
2. A forgery: ``outs = list(map(my_sort, cases))`` then ``for o, c in zip(outs, cases): assert o ==
   sorted(c)`` bound no answer (a function handed to ``map`` is no call of the solution's), so the
   rewriting sort scored 1.0.
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored_against

pytestmark = pytest.mark.faults

FORGED = "def my_sort(xs):\n    xs[:] = [0] * len(xs)\n    return list(xs)\ndef sort_it(xs):\n    xs.sort()\n"
RIGHTS = ("def my_sort(xs):\n    return sorted(xs)\ndef sort_it(xs):\n    xs.sort()\n",
          "def my_sort(xs):\n    xs.sort()\n    return xs\ndef sort_it(xs):\n    xs.sort()\n")
_CASES = "cases = [[3, 1, 2], [2, 1]]\n"
#: Tests comparing ``my_sort``'s answers with ``sorted`` of its arguments, then sorting an item of
#: the same ``cases`` in place with another function and reading it.
IN_PLACE_BESIDE = {
    "comprehension": _CASES + "assert all([my_sort(x) == sorted(x) for x in cases])\nsort_it(cases[1])\n"
                     "assert cases[1] == [1, 2]\n",
    "zipped": _CASES + "outs = [my_sort(c) for c in cases]\nfor o, c in zip(outs, cases):\n    assert o == sorted(c)\n"
              "sort_it(cases[0])\nassert cases[0] == [1, 2, 3]\n",
    "looped": _CASES + "for x in cases:\n    assert my_sort(x) == sorted(x)\nsort_it(cases[1])\nassert cases[1] == [1, 2]\n",
    "sorted_first": _CASES + "for x in cases:\n    sort_it(x)\nassert cases == [[1, 2, 3], [1, 2]]\n"
                    "assert all([my_sort(x) == sorted(x) for x in cases])\n",
    "appended_item": "def test():\n    cases = [[3, 1, 2], [2, 1]]\n    assert all([my_sort(x) == sorted(x) for x in cases])\n"
                     "    extra = [5, 4]\n    cases.append(extra)\n    sort_it(extra)\n    assert extra == [4, 5]\ntest()\n",
}
#: Tests where the rewriting sort must fail: a warm-up call of ``my_sort`` itself, and ``map``.
REWRITTEN = {
    "warm_up_call": _CASES + "for x in cases:\n    my_sort(x)\nassert all([my_sort(x) == sorted(x) for x in cases])\n",
    "mapped": _CASES + "outs = list(map(my_sort, cases))\nfor o, c in zip(outs, cases):\n    assert o == sorted(c)\n",
    "mapped_in_a_function": "def test():\n    cases = [[3, 1, 2], [2, 1]]\n    outs = list(map(my_sort, cases))\n"
                            "    assert all(o == sorted(c) for o, c in zip(outs, cases))\ntest()\n",
}


def test_another_functions_in_place_change_beside_a_compared_answer_is_written_back():
    """Right solutions scored 0.5 on each (0 on the last, one test); 1.0 now. The forgery still fails
    its comparisons (the ``sort_it`` half is right, so it keeps that half)."""
    for right in RIGHTS:
        assert _each_scored_against(IN_PLACE_BESIDE, right) == dict.fromkeys(IN_PLACE_BESIDE, 1.0)
    assert _each_scored_against(IN_PLACE_BESIDE, FORGED) == {"comprehension": 0.5, "zipped": 0.5, "looped": 0.5,
                                                             "sorted_first": 0.5, "appended_item": 0.0}


def test_an_argument_rewritten_under_a_warm_up_call_or_map_fails():
    """The forgery scored 1.0 through ``map``; it scores 0 on each, and right sorts keep 1.0."""
    assert _each_scored_against(REWRITTEN, FORGED) == dict.fromkeys(REWRITTEN, 0.0)
    for right in RIGHTS:
        assert _each_scored_against(REWRITTEN, right) == dict.fromkeys(REWRITTEN, 1.0)


def test_free_calls_are_those_naming_no_compared_function():
    from polyrl.sandbox.vacuous_reads import vacuous_paths

    found = vacuous_paths([IN_PLACE_BESIDE["comprehension"]])
    assert found is not None
    assert (3, 3, 0, 17) in found.free_calls  # sort_it(cases[1])
    assert (2, 2, 12, 22) not in found.free_calls and (2, 2, 7, 52) not in found.free_calls  # my_sort(x), all(...)
    mapped = vacuous_paths([REWRITTEN["mapped"]])
    assert mapped is not None and ("c", "<module>", 1) in mapped.answered
    assert (2, 2, 7, 33) not in mapped.free_calls  # list(map(my_sort, cases))
