"""Checks that hold over no items, written in shapes the readers missed: forgeries that scored 1.0.

A forged bank's ``log`` (a plain list) gives ``len`` three -5s and ``[]`` after ``b.reset()``; a
forged ``primes`` gives three 4s and nothing after ``r.reset()``. Each test reads it whole, then
resets it, then checks it where no items pass: through ``getattr`` (``attribute_reads``), in a
helper function of the tests' (``helper_reads``), after comparing it with itself
(``self_compared``), through a builtin's default (``defaulted_reads``) or by ``x not in`` a name
bound to it (``named_copies``). Each is scored through the real reward path (``code_tests``) and
must score 0, while right solutions of the same tests, and right values the tests empty and
check so, keep 1.0.
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import FORGED, IS_PRIME, QUEUE_CLEARED, RIGHT, _scored
from test_sandbox_named_copies import _LOG, LOG_BANK_FORGED, LOG_BANK_RIGHT

pytestmark = pytest.mark.faults

#: The right bank whose ``reset`` keeps its log of 5s (the forged one's empties its -5s).
LOG_BANK_KEPT = LOG_BANK_RIGHT.replace("        self.log = []\n", "        pass\n")
_ALL_POSITIVE = "def positive(xs):\n    return all(x > 0 for x in xs)\n"
_CHECK = "def check(xs):\n    for x in xs:\n        assert x > 0\n"
#: Tests: ``len`` reads the log, ``b.reset()`` empties the forged one, then a check over no items.
LOG_CHECKED_VACUOUSLY = {
    "getattr_all": _LOG + "    b.reset()\n    assert all(x > 0 for x in getattr(b, 'log'))\ntest()",
    "getattr_for": _LOG + "    b.reset()\n    for x in getattr(b, 'log'):\n        assert x > 0\ntest()",
    "helper_all": _ALL_POSITIVE + _LOG + "    b.reset()\n    assert positive(b.log)\ntest()",
    "helper_assert": _CHECK + _LOG + "    b.reset()\n    check(b.log)\ntest()",
    "helper_keyword": _CHECK + _LOG + "    b.reset()\n    check(xs=b.log)\ntest()",
    "compared_with_itself": _LOG + "    b.reset()\n    assert b.log == b.log\n    assert all(x > 0 for x in b.log)\ntest()",
    "min_default": _LOG + "    b.reset()\n    assert min(b.log, default=1) > 0\ntest()",
    "max_default": _LOG + "    b.reset()\n    assert max(b.log, default=1) > 0\ntest()",
    "next_default": _LOG + "    b.reset()\n    assert next(iter(b.log), 1) > 0\ntest()",
    "named_not_in": _LOG + "    b.reset()\n    h = b.log\n    assert -5 not in h\ntest()",
    "two_readings_compared": _LOG + "    b.reset()\n    assert len(b.log) == len(list(b.log))\n"
                             "    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests a right bank whose ``reset`` clears its log passes: they see it empty, or count it.
LOG_SEEN_EMPTY = {
    "getattr_compared": _LOG + "    b.reset()\n    assert getattr(b, 'log') == []\n"
                        "    assert all(x > 0 for x in getattr(b, 'log'))\ntest()",
    "helper_counts": "def count(xs):\n    return sum(1 for _ in xs)\n" + _LOG + "    b.reset()\n"
                     "    assert count(b.log) == 0\ntest()",
    "helper_compares": "def empty(xs):\n    return xs == []\n" + _LOG + "    b.reset()\n    assert empty(b.log)\n"
                       "    assert all(x > 0 for x in b.log)\ntest()",
    "compared_with_itself_then_empty": _LOG + "    b.reset()\n    assert b.log == b.log and b.log == []\n"
                                       "    assert all(x > 0 for x in b.log)\ntest()",
    "next_is_the_default": _LOG + "    b.reset()\n    assert next(iter(b.log), None) is None\ntest()",
    "min_is_the_default": _LOG + "    b.reset()\n    assert min(b.log, default=None) is None\ntest()",
    "named_not_in_then_counted": _LOG + "    b.reset()\n    h = b.log\n    assert -5 not in h and len(h) == 0\ntest()",
    # the tests' own item, handed to ``b.deposit``: they expect ``b.reset()`` to take it (it scored 0)
    "handed_then_not_in": _LOG + "    b.deposit(7)\n    b.reset()\n    assert 7 not in b.log\ntest()",
    "handed_name_then_not_in": _LOG + "    x = 7\n    b.deposit(x)\n    b.reset()\n    assert x not in b.log\ntest()",
}

_THREE = "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
#: Tests: ``len`` reads the forged ``primes``' three 4s, ``r.reset()`` empties it, then a check over no items.
VALUE_CHECKED_VACUOUSLY = {
    "min_default": IS_PRIME + _THREE + "    assert is_prime(min(r, default=2))\ntest()",
    "max_default": IS_PRIME + _THREE + "    assert is_prime(max(r, default=2))\ntest()",
    "next_default": IS_PRIME + _THREE + "    assert is_prime(next(iter(r), 2))\ntest()",
    "next_is_its_default": IS_PRIME + _THREE + "    assert next(iter(r), 2) == 2\ntest()",
    "min_at_least_its_default": IS_PRIME + _THREE + "    assert min(r, default=2) >= 2\ntest()",
    "copies_compared_with_each_other": IS_PRIME + _THREE + "    assert list(r) == list(r)\n"
                                       "    assert all(is_prime(x) for x in r)\ntest()",
    "counts_compared_with_each_other": IS_PRIME + _THREE + "    assert len(set(r)) == len(list(r))\n"
                                       "    assert all(is_prime(x) for x in r)\ntest()",
    "sorted_and_copied_compared": IS_PRIME + _THREE + "    assert sorted(r) == [x for x in r]\n"
                                  "    assert all(is_prime(x) for x in r)\ntest()",
}
_CLEARED = "q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nq.clear()\n"
#: Tests a right queue the tests clear passes: the default is what they expect, or they see it empty.
QUEUE_SEEN_EMPTY = {
    "next_is_the_default": _CLEARED + "assert next(iter(q), None) is None",
    "min_is_the_default": _CLEARED + "assert min(q, default=None) is None",
    "copies_then_empty": _CLEARED + "assert list(q) == list(q) and list(q) == []\nassert all(x > 5 for x in q)",
}


def test_a_plain_data_attribute_emptied_then_checked_where_no_items_pass_fails():
    """``getattr(b, 'log')`` looped over, ``b.log`` handed to a helper of the tests' that loops over
    it (``positive(b.log)``, ``check(b.log)``), ``b.log == b.log`` before a loop (taken for the
    tests seeing it empty), ``min``/``max``/``next`` with a default, and ``x not in h`` of ``h =
    b.log`` each passed a forged bank whose log went from three -5s to ``[]`` at ``b.reset()``
    (1.0). They fail it now; the right bank keeps 1.0 on the same tests."""
    names = list(LOG_CHECKED_VACUOUSLY)
    tests = [LOG_CHECKED_VACUOUSLY[n] for n in names]
    assert dict(zip(names, _scored(tests, [LOG_BANK_FORGED] * len(tests)))) == dict.fromkeys(names, 0.0)
    assert dict(zip(names, _scored(tests, [LOG_BANK_KEPT] * len(tests)))) == dict.fromkeys(names, 1.0)


def test_a_right_log_the_tests_clear_and_see_empty_keeps_its_score():
    """A right bank whose ``reset`` clears its log, read whole by the tests (compared with ``[]``
    through ``getattr`` or a helper, counted by a helper, a ``None`` default asked for and compared
    with it, ``len`` of a name bound to it) keeps 1.0; so does ``7 not in b.log`` after the tests
    handed 7 to ``b.deposit`` and reset it (0 before: they expect their own item gone)."""
    names = list(LOG_SEEN_EMPTY)
    tests = [LOG_SEEN_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [LOG_BANK_RIGHT] * len(tests)))) == dict.fromkeys(names, 1.0)


def test_a_sample_value_emptied_then_read_through_a_default_or_compared_with_itself_fails():
    """``min(r, default=2)``, ``max(r, default=2)`` and ``next(iter(r), 2)`` answer their default
    over no items (``== 2``, ``>= 2`` of it too), and ``list(r) == list(r)``, ``len(set(r)) ==
    len(list(r))`` and ``sorted(r) == [x for x in r]`` hold whatever ``r`` holds, yet they read ``r`` whole
    and empty (the tests seeing it so): a forged ``primes`` emptied by ``r.reset()`` passed each
    (1.0). It fails now; the right ``primes`` keeps 1.0, and a right queue the tests clear and then
    read so, expecting the default or seeing it empty, keeps 1.0 too."""
    names = list(VALUE_CHECKED_VACUOUSLY)
    tests = [VALUE_CHECKED_VACUOUSLY[n] for n in names]
    assert dict(zip(names, _scored(tests, [FORGED] * len(tests)))) == dict.fromkeys(names, 0.0)
    assert dict(zip(names, _scored(tests, [RIGHT] * len(tests)))) == dict.fromkeys(names, 1.0)
    names = list(QUEUE_SEEN_EMPTY)
    tests = [QUEUE_SEEN_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)
