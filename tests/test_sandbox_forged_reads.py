"""Checks that hold over no items, written in shapes the readers missed: forgeries that scored 1.0.

A forged bank's ``log`` (a plain list) gives ``len`` three -5s and ``[]`` after ``b.reset()``; a
forged ``primes`` gives three 4s and nothing after ``r.reset()``. Each test reads it whole, then
resets it, then checks it where no items pass: through ``getattr`` (``attribute_reads``), in a
helper function of the tests' (``helper_reads``), after comparing it with itself
(``self_compared``), through a builtin's default (``defaulted_reads``) or by ``x not in`` a name
bound to it (``named_copies``), after counting it only against a constant any count answers
alike (``len(r) >= 0``: ``vacuous_counts``), or after comparing it with its own items passed
through a function (``[(lambda: x)() for x in r] == [x for x in r]``: ``self_compared``), after
computing a count into what every count answers alike (``len(r) + 1 > 0``, ``abs(len(r)) >= 0``)
or comparing a comprehension that looks at no item with another reading of it (``sum(1 for _ in
r) == len(r)``, ``[1 for x in r] == [1] * len(r)``). Each is
scored through the real reward path (``code_tests``) and must score 0, while right solutions of
the same tests, and right values the tests empty and check so, keep 1.0.
"""

from __future__ import annotations

import ast

import pytest
from polyrl.sandbox.vacuous_counts import _bound_names, changes_with_the_count, measured
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
_LOOPED = "    assert all(is_prime(x) for x in r)\ntest()"
#: Tests: the forged ``primes``' three 4s counted, ``r.reset()`` empties it, a count that every
#: count answers alike, then a loop over no items.
COUNTED_VACUOUSLY = {
    "at_least_zero": IS_PRIME + _THREE + "    assert len(r) >= 0\n" + _LOOPED,
    "zero_at_most": IS_PRIME + _THREE + "    assert 0 <= len(r)\n" + _LOOPED,
    "above_minus_one": IS_PRIME + _THREE + "    assert len(r) > -1\n" + _LOOPED,
    "not_none": IS_PRIME + _THREE + "    assert len(r) is not None\n" + _LOOPED,
    "never_negative": IS_PRIME + _THREE + "    if len(r) < 0:\n        raise AssertionError('negative')\n" + _LOOPED,
    "a_copy_counted": IS_PRIME + _THREE + "    assert len(list(r)) >= 0\n" + _LOOPED,
    "counted_twice_alike": IS_PRIME + _THREE + "    assert len(r) == len(list(r))\n" + _LOOPED,
    "log_at_least_zero": _LOG + "    b.reset()\n    assert len(b.log) >= 0\n    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests: the forged ``primes`` emptied by ``r.reset()``, then compared with its own items passed
#: through a function or filter of the tests' (over no items both sides are empty).
MAPPED_AND_COPIED = {
    "called_items_and_a_copy": IS_PRIME + _THREE + "    assert [(lambda: x)() for x in r] == [x for x in r]\ntest()",
    "mapped_and_listed": IS_PRIME + _THREE + "    assert list(map(lambda x: x, r)) == list(r)\n" + _LOOPED,
    "filtered_and_listed": IS_PRIME + _THREE + "    assert [x for x in r if x] == list(r)\n" + _LOOPED,
    "sorted_by_a_key_and_listed": IS_PRIME + _THREE + "    assert sorted(r, key=abs) == list(r)\n" + _LOOPED,
    "log_called_items_and_a_copy": _LOG + "    b.reset()\n    assert [(lambda: x)() for x in b.log] == "
                                   "[x for x in b.log]\ntest()",
}
#: Tests a right queue the tests clear passes: a count some count would fail sees it empty, and so
#: does a whole reading after a count or a comparison that sees nothing.
_LOOP_OVER_Q = "assert all(x > 5 for x in q)"
QUEUE_COUNTED_EMPTY = {
    "at_least_zero_then_zero": _CLEARED + "assert len(q) >= 0 and len(q) == 0\n" + _LOOP_OVER_Q,
    "at_least_zero_then_compared": _CLEARED + "assert len(q) >= 0\nassert list(q) == []\n" + _LOOP_OVER_Q,
    "counted_twice_then_zero": _CLEARED + "assert len(q) == len(list(q)) and len(q) == 0\n" + _LOOP_OVER_Q,
    "not_counted": _CLEARED + "assert not len(q)\n" + _LOOP_OVER_Q,
    "between_zero_and_zero": _CLEARED + "assert 0 <= len(q) <= 0\n" + _LOOP_OVER_Q,
    "under_one": _CLEARED + "assert len(q) < 1\n" + _LOOP_OVER_Q,
    "count_named_then_compared": _CLEARED + "n = len(q)\nassert n == 0\n" + _LOOP_OVER_Q,
}
#: Tests a right queue the tests clear passes: compared with its items through a function, then with ``[]``.
QUEUE_MAPPED_THEN_EMPTY = _CLEARED + "assert [x + 0 for x in q] == list(q) and list(q) == []\n" + _LOOP_OVER_Q


def _forged_fail_right_pass(table: dict[str, str], forged: str, right: str) -> None:
    """Each test of ``table`` fails the forged solution (a bank's forged log for ``log_`` names) and
    passes the right one."""
    names = list(table)
    tests = [table[n] for n in names]
    assert dict(zip(names, _scored(tests, [LOG_BANK_FORGED if n.startswith("log_") else forged for n in names]))) \
        == dict.fromkeys(names, 0.0)
    assert dict(zip(names, _scored(tests, [LOG_BANK_KEPT if n.startswith("log_") else right for n in names]))) \
        == dict.fromkeys(names, 1.0)


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_count_every_count_answers_alike_is_no_reading_that_sees_a_value_empty():
    """``len(r) >= 0`` (``0 <= len(r)``, ``> -1``, ``is not None``, ``if len(r) < 0: raise``,
    ``len(list(r)) >= 0``, ``len(b.log) >= 0``) and ``len(r) == len(list(r))`` hold whatever ``r``
    holds, yet a count of 0 there was the tests seeing it empty: a forged ``primes`` emptied by
    ``r.reset()`` (or a forged bank's log) passed each and then the loop over no items (1.0). It
    fails now; the right ``primes`` and a bank that keeps its log keep 1.0, and a right queue the
    tests clear and count against a number some count would fail (``len(q) == 0``, ``< 1``, ``0 <=
    len(q) <= 0``, ``not len(q)``, ``n = len(q)`` then ``n == 0``), or read whole after such a count
    (``list(q) == []``), keeps 1.0."""
    _forged_fail_right_pass(COUNTED_VACUOUSLY, FORGED, RIGHT)
    names = list(QUEUE_COUNTED_EMPTY)
    tests = [QUEUE_COUNTED_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)


def test_a_value_compared_with_its_items_through_a_function_is_the_tests_loop_over_it():
    """``[(lambda: x)() for x in r] == [x for x in r]`` (``list(map(f, r)) == list(r)``, ``[x for x
    in r if x] == list(r)``, the same of ``b.log``; and two copies, ``sorted(r, key=abs) ==
    list(r)``) holds over no items, yet its plain copy was the tests seeing ``r`` empty: a forged
    ``primes`` emptied by ``r.reset()`` passed it (1.0), with a loop after it or none. The copy sees nothing now and the
    side through the function is the tests' loop; the right ``primes`` and a bank that keeps its
    log keep 1.0, and so does a right queue the tests clear and then also compare with ``[]``."""
    _forged_fail_right_pass(MAPPED_AND_COPIED, FORGED, RIGHT)
    assert _scored([QUEUE_MAPPED_THEN_EMPTY], [QUEUE_CLEARED]) == [1.0]


#: Tests: the forged ``primes`` emptied by ``r.reset()``, then a count computed into what every
#: count answers alike (``vacuous_counts``: arithmetic, builtins, ``or``), then a loop over no items.
COMPUTED_VACUOUSLY = {
    "plus_one_above_zero": IS_PRIME + _THREE + "    assert len(r) + 1 > 0\n" + _LOOPED,
    "abs_at_least_zero": IS_PRIME + _THREE + "    assert abs(len(r)) >= 0\n" + _LOOPED,
    "negated_at_most_zero": IS_PRIME + _THREE + "    assert -len(r) <= 0\n" + _LOOPED,
    "times_zero": IS_PRIME + _THREE + "    assert len(r) * 0 == 0\n" + _LOOPED,
    "zero_or_true": IS_PRIME + _THREE + "    assert len(r) == 0 or True\n" + _LOOPED,
    "min_with_zero": IS_PRIME + _THREE + "    assert min(len(r), 0) == 0\n" + _LOOPED,
    "squared_copy_count": IS_PRIME + _THREE + "    assert len(list(r)) ** 2 >= 0\n" + _LOOPED,
    "log_plus_one": _LOG + "    b.reset()\n    assert len(b.log) + 1 > 0\n    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests a right queue the tests clear passes: a count computed into what some count changes sees it empty.
QUEUE_COMPUTED_EMPTY = {
    "plus_one_is_one": _CLEARED + "assert len(q) + 1 == 1\n" + _LOOP_OVER_Q,
    "abs_is_zero": _CLEARED + "assert abs(len(q)) == 0\n" + _LOOP_OVER_Q,
    "doubled_under_one": _CLEARED + "assert len(q) * 2 < 1\n" + _LOOP_OVER_Q,
    "negated_at_least_zero": _CLEARED + "assert -len(q) >= 0\n" + _LOOP_OVER_Q,
    "even": _CLEARED + "assert len(q) % 2 == 0 and len(q) < 2\n" + _LOOP_OVER_Q,
    "at_least_zero_then_min": _CLEARED + "assert abs(len(q)) >= 0 and min(len(q), 5) == 0\n" + _LOOP_OVER_Q,
    # a function of the tests' own named ``abs`` is theirs: what it does with the count is a reading
    "their_abs": "def abs(n):\n    assert n == 0\n    return n\n" + _CLEARED + "assert abs(len(q)) >= 0\n" + _LOOP_OVER_Q,
}
#: Tests: the forged ``primes`` emptied by ``r.reset()``, then compared with another reading of
#: itself through a comprehension that looks at no item (``self_compared.compared_loop_at``).
COMPARED_WITH_ITEM_FREE_LOOPS = {
    "ones_counted_and_a_copy_counted": IS_PRIME + _THREE + "    assert len([1 for x in r]) == len(list(r))\n"
                                       + _LOOPED,
    "ones_counted_alone": IS_PRIME + _THREE + "    assert len([1 for x in r]) == len(list(r))\ntest()",
    "ones_summed_and_counted": IS_PRIME + _THREE + "    assert sum(1 for _ in r) == len(r)\n" + _LOOPED,
    "ones_and_ones_times_count": IS_PRIME + _THREE + "    assert [1 for x in r] == [1] * len(r)\n" + _LOOPED,
    "log_ones_and_count": _LOG + "    b.reset()\n    assert [0 for _ in b.log] == [0] * len(b.log)\n"
                          "    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests a right queue the tests clear passes: compared so with itself, then seen empty.
QUEUE_ITEM_FREE_THEN_EMPTY = {
    "ones_summed_then_zero": _CLEARED + "assert sum(1 for _ in q) == len(q) and len(q) == 0\n" + _LOOP_OVER_Q,
    "ones_then_empty": _CLEARED + "assert [1 for x in q] == [1] * len(q)\nassert list(q) == []\n" + _LOOP_OVER_Q,
    "ones_summed_alone": _CLEARED + "assert sum(1 for _ in q) == 0\n" + _LOOP_OVER_Q,
}


@pytest.mark.slow
def test_a_count_computed_into_what_every_count_answers_alike_is_no_reading_that_sees_a_value_empty():
    """``len(r) + 1 > 0``, ``abs(len(r)) >= 0``, ``-len(r) <= 0``, ``len(r) * 0 == 0``, ``len(r) ==
    0 or True``, ``min(len(r), 0) == 0`` (and of ``list(r)``, ``b.log``) hold whatever ``r`` holds,
    yet a count of 0 there was the tests seeing it empty: a forged ``primes`` emptied by
    ``r.reset()`` passed each and then the loop over no items (1.0). It fails now; the right
    ``primes`` and a bank that keeps its log keep 1.0, and a right queue the tests clear and count
    into what some count changes (``len(q) + 1 == 1``, ``abs(len(q)) == 0``, ``len(q) % 2 == 0``,
    through an ``abs`` of their own) keeps 1.0."""
    _forged_fail_right_pass(COMPUTED_VACUOUSLY, FORGED, RIGHT)
    names = list(QUEUE_COMPUTED_EMPTY)
    tests = [QUEUE_COMPUTED_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)


def test_a_comprehension_that_looks_at_no_item_compared_with_the_same_value_is_the_tests_loop():
    """``len([1 for x in r]) == len(list(r))``, ``sum(1 for _ in r) == len(r)``, ``[1 for x in r]
    == [1] * len(r)`` hold over no items: the comprehension counted ``r`` (a whole reading that saw
    it empty), so a forged ``primes`` emptied by ``r.reset()`` passed each, with a loop after it or
    none (1.0). Such a comprehension is the tests' loop over the items now; the right ``primes``
    and a bank that keeps its log keep 1.0, and so does a right queue the tests clear and then
    see empty (``len(q) == 0``, ``list(q) == []``) or count alone (``sum(1 for _ in q) == 0``)."""
    _forged_fail_right_pass(COMPARED_WITH_ITEM_FREE_LOOPS, FORGED, RIGHT)
    names = list(QUEUE_ITEM_FREE_THEN_EMPTY)
    tests = [QUEUE_ITEM_FREE_THEN_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)


#: Tests: the forged ``primes`` emptied by ``r.reset()``, then the ``len`` of a comprehension whose
#: items are one value whatever the item (``vacuous_counts.measured``: ``r``'s count, or it capped at
#: one) compared into what every count answers alike, then a loop over no items.
BOUNDED_COUNTS_VACUOUSLY = {
    "set_of_a_constant_at_most_the_count": IS_PRIME + _THREE + "    assert len({0 for x in r}) <= len(r)\n" + _LOOPED,
    "set_of_a_constant_under_two": IS_PRIME + _THREE + "    assert len({1 for _ in r}) < 2\n" + _LOOPED,
    "set_of_a_generator_at_most_one": IS_PRIME + _THREE + "    assert len(set(0 for x in r)) <= 1\n" + _LOOPED,
    "frozenset_zero_or_one": IS_PRIME + _THREE + "    assert len(frozenset(1 for _ in r)) in (0, 1)\n" + _LOOPED,
    "set_listed_under_two": IS_PRIME + _THREE + "    assert len(tuple({0 for x in r})) < 2\n" + _LOOPED,
    "constants_listed_at_most_the_count": IS_PRIME + _THREE + "    assert len([0 for x in r]) <= len(r)\n" + _LOOPED,
    "outer_name_listed": IS_PRIME + _THREE + "    y = 0\n    assert len(list(y for _ in r)) >= len(r)\n" + _LOOPED,
    "log_set_of_a_constant": _LOG + "    b.reset()\n    assert len({0 for x in b.log}) <= len(b.log)\n"
                             "    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests a right queue the tests clear passes: such a ``len`` compared into what some count
#: changes, or of a comprehension that looks at the items (keys, unpacking), sees it empty.
QUEUE_BOUNDED_COUNT_EMPTY = {
    "set_of_a_constant_is_empty": _CLEARED + "assert len({0 for x in q}) == 0\n" + _LOOP_OVER_Q,
    "set_of_a_generator_under_one": _CLEARED + "assert len(set(0 for x in q)) < 1\n" + _LOOP_OVER_Q,
    "set_of_a_constant_not_counted": _CLEARED + "assert not len({0 for x in q})\n" + _LOOP_OVER_Q,
    "constants_listed_plus_zero": _CLEARED + "assert len([0 for x in q]) + 0 == 0\n" + _LOOP_OVER_Q,
    "keys_are_the_items": _CLEARED + "assert len({x: 0 for x in q}) == len(q)\n" + _LOOP_OVER_Q,
    "unpacked_items": _CLEARED + "assert len({0 for x, _ in q}) <= 1\n" + _LOOP_OVER_Q,
    "unhashable_name": _CLEARED + "y = []\nassert len({y for x in q}) <= 1\n" + _LOOP_OVER_Q,
}


@pytest.mark.slow
def test_a_count_of_a_comprehension_that_looks_at_no_item_is_bounded_by_the_count():
    """``len({0 for x in r}) <= len(r)``, ``len({1 for _ in r}) < 2``, ``len(set(0 for x in r)) <=
    1`` (``frozenset``, ``tuple`` of it, ``len([0 for x in r]) <= len(r)``, a name of the tests' as
    the item, of ``b.log``) hold whatever ``r`` holds (a set of one constant has 0 or 1 items, a
    list as many as ``r``), yet a whole reading there was the tests seeing ``r`` empty: a forged
    ``primes`` emptied by ``r.reset()`` passed each and then the loop over no items (1.0). It fails
    now; the right ``primes`` and a bank that keeps its log keep 1.0, and a right queue the tests
    clear and count so against what some count fails (``== 0``, ``< 1``, ``not``), or through a
    comprehension that looks at its items (``len({x: 0 for x in q}) == len(q)``: do they repeat;
    ``for x, _ in q``; an unhashable ``y`` in ``{y for x in q}``), keeps 1.0."""
    _forged_fail_right_pass(BOUNDED_COUNTS_VACUOUSLY, FORGED, RIGHT)
    names = list(QUEUE_BOUNDED_COUNT_EMPTY)
    tests = [QUEUE_BOUNDED_COUNT_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)


@pytest.mark.parametrize(("argument", "counted", "capped"), [
    ("{0 for x in r}", "r", True),
    ("set(0 for x in r)", "r", True),
    ("frozenset([(1, 2) for _ in r])", "r", True),
    ("{0: y for x in r}", "r", True),
    ("[0 for x in r]", "r", False),
    ("list(y for _ in b.log)", "b.log", False),
    ("{x: 0 for x in r}", "{x: 0 for x in r}", False),  # keys are the items: do they repeat
    ("{x for x in r}", "{x for x in r}", False),
    ("{y for x in r}", "{y for x in r}", False),  # ``y`` may be unhashable: raises where ``r`` has items
    ("{[] for x in r}", "{[] for x in r}", False),
    ("set([y for x in r])", "set([y for x in r])", False),
    ("{0 for x, z in r}", "{0 for x, z in r}", False),  # fails on an item that is no pair
    ("{0 for x in r if x}", "{0 for x in r if x}", False),
    ("{0 for x in r for z in x}", "{0 for x in r for z in x}", False),
    ("[x for x in r]", "[x for x in r]", False),
    ("[unbound for x in r]", "[unbound for x in r]", False),  # a NameError where ``r`` has items
    ("list(r)", "list(r)", False),
    ("(0 for x in r)", "(0 for x in r)", False),  # ``len`` of a generator raises
])
def test_measured_counts_a_comprehension_only_where_its_items_are_one_value_whatever_the_item(
        argument: str, counted: str, capped: bool) -> None:
    """``measured`` takes a comprehension for its loop's count (capped at one where it is a set or
    dict of one constant) only where no item can change or fail it; else it is a count of its own."""
    chain, found = measured(ast.parse(argument, mode="eval").body, dict.fromkeys(("y", "x", "z"), False))
    assert (ast.unparse(chain[-1]), found) == (counted, capped)


#: Tests: the forged ``primes`` emptied by ``r.reset()`` (or the forged bank's log), then the ``len``
#: of a set or dict whose one item is a name the tests bind only to a hashable literal (``y = 0``:
#: at most one item, ``vacuous_counts._hashable_value``) compared into what every count answers
#: alike, then a loop over no items; and a list of one constant compared with the count (``==``).
NAMED_CONSTANT_COUNTED = {
    "name_in_a_set_at_most_the_count": IS_PRIME + _THREE + "    y = 0\n    assert len({y for _ in r}) <= len(r)\n"
                                       + _LOOPED,
    "global_name_in_a_set_under_two": IS_PRIME + "Y = 0\n" + _THREE + "    assert len({Y for _ in r}) < 2\n" + _LOOPED,
    "name_as_a_key_at_most_the_count": IS_PRIME + _THREE + "    y = (1, 2)\n    assert len({y: 0 for _ in r}) <= len(r)\n"
                                       + _LOOPED,
    "global_name_in_a_frozenset_at_most_one": IS_PRIME + "Y = 'a'\n" + _THREE
                                              + "    assert len(frozenset(Y for _ in r)) <= 1\n" + _LOOPED,
    "constants_listed_equal_to_the_count": IS_PRIME + _THREE + "    assert len([0 for x in r]) == len(r)\n" + _LOOPED,
    "log_name_in_a_set": _LOG + "    b.reset()\n    y = 0\n    assert len({y for _ in b.log}) <= len(b.log)\n"
                         "    assert all(x > 0 for x in b.log)\ntest()",
}
#: Tests a right queue the tests clear passes: a count some count fails (``len({0 for x in q}) ==
#: len(q)`` holds for 0 or 1 items only), distinct items counted, or a name that may be unhashable
#: in a set (rebound to ``[]``; an item of the sample's, here a list: ``{y for _ in q}`` raises
#: where ``q`` has items), each sees it empty.
QUEUE_COUNTED_BY_A_SET_EMPTY = {
    "set_of_a_constant_equal_to_the_count": _CLEARED + "assert len({0 for x in q}) == len(q)\n" + _LOOP_OVER_Q,
    "set_of_a_generator_equal_to_the_count": _CLEARED + "assert len(set(0 for x in q)) == len(q)\n" + _LOOP_OVER_Q,
    "distinct_items_at_most_one": _CLEARED + "assert len({x for x in q}) <= 1\n" + _LOOP_OVER_Q,
    "name_rebound_unhashable": "y = 0\n" + _CLEARED + "y = []\nassert len({y for _ in q}) <= len(q)\n" + _LOOP_OVER_Q,
    "a_computed_list": _CLEARED + "y = list('ab')\nassert len({y for _ in q}) <= len(q)\n" + _LOOP_OVER_Q,
    "a_tuple_holding_a_list": _CLEARED + "y = (1, list('ab'))\nassert len({y: 0 for _ in q}) <= len(q)\n" + _LOOP_OVER_Q,
    "an_item_as_the_name": "q = make_queue()\nq.push([1])\nq.push([2])\nassert len(q) == 2\ny = list(q)[0]\n"
                           "q.clear()\nassert len({y for _ in q}) <= len(q)\nassert all(x > [5] for x in q)",
}


@pytest.mark.slow
def test_a_set_of_a_name_bound_to_one_hashable_literal_is_bounded_by_the_count():
    """``y = 0`` then ``len({y for _ in r}) <= len(r)`` (``len({Y for _ in r}) < 2`` of a module's
    ``Y = 0``, ``{y: 0 for _ in r}`` of ``y = (1, 2)``, ``frozenset(Y for _ in r)``, of ``b.log``)
    holds whatever ``r`` holds: the set has one item at most. A forged ``primes`` emptied by
    ``r.reset()`` passed each and then the loop over no items (1.0); it fails now, and the right
    ``primes`` and a bank that keeps its log keep 1.0."""
    _forged_fail_right_pass(NAMED_CONSTANT_COUNTED, FORGED, RIGHT)


#: The forged and right ``primes`` whose values answer ``r[0]`` too.
_INDEXED = "{}.__getitem__ = lambda self, i: self.xs[i]\n"
FORGED_INDEXED = FORGED + _INDEXED.format("R")
RIGHT_INDEXED = RIGHT + _INDEXED.format("Primes")
#: Tests: a name bound to no literal (an item of the sample's, a computed number or str, a
#: parameter's default) in a set or as a dict's key, whose ``len`` compared with the count holds
#: for every count where the name's value is hashable, then the forged ``primes`` emptied by
#: ``r.reset()`` and a loop over no items. Each scored 1.0.
NAMED_VALUE_COUNTED = {
    "an_item_listed": IS_PRIME + _THREE.replace("    r.reset()\n", "    y = list(r)[0]\n    r.reset()\n")
                      + "    assert len({y for _ in r}) <= len(r)\n" + _LOOPED,
    "an_item_indexed": IS_PRIME + _THREE.replace("    r.reset()\n", "    y = r[0]\n    r.reset()\n")
                       + "    assert len({y for _ in r}) <= len(r)\n" + _LOOPED,
    "a_computed_number": IS_PRIME + _THREE + "    y = 1 + 1\n    assert len({y for _ in r}) <= len(r)\n" + _LOOPED,
    "a_computed_str": IS_PRIME + _THREE + "    y = str(3)\n    assert len({y for _ in r}) <= len(r)\n" + _LOOPED,
    "the_count_first": IS_PRIME + _THREE + "    y = 1 + 1\n    assert len(r) >= len(set(y for _ in r))\n" + _LOOPED,
    "a_parameter": IS_PRIME + _THREE.replace("def test():", "def test(y=0):")
                   + "    assert len({y for _ in r}) <= len(r)\n" + _LOOPED,
    "an_item_as_a_key": IS_PRIME + _THREE.replace("    r.reset()\n", "    y = list(r)[0]\n    r.reset()\n")
                        + "    assert len({y: 0 for _ in r}) <= len(r)\n" + _LOOPED,
    "log_item": _LOG + "    y = b.log[0]\n    b.reset()\n    assert len({y for _ in b.log}) <= len(b.log)\n"
                "    assert all(x > 0 for x in b.log)\ntest()",
}


@pytest.mark.slow
def test_a_set_of_a_name_whose_value_is_hashable_is_bounded_by_the_count():
    """``y = list(r)[0]`` (``r[0]``, ``1 + 1``, ``str(3)``, a parameter) then ``len({y for _ in
    r}) <= len(r)``: the set holds at most one item where ``y`` is hashable, so this holds for any
    count, yet ``len(r)`` was taken for the tests seeing ``r`` empty (``y`` is bound to no hashable
    literal), and a forged ``primes`` emptied by ``r.reset()`` passed it and the loop after (1.0).
    Such a site is one now where ``y``'s value at run time is hashable; it fails, while the right
    ``primes`` and a bank that keeps its log keep 1.0 (and a right queue of lists, whose ``y`` makes
    the set raise where the queue has items, still sees it empty: the test below)."""
    _forged_fail_right_pass(NAMED_VALUE_COUNTED, FORGED_INDEXED, RIGHT_INDEXED)
    # at module level, ``len({y for _ in r}) <= 1`` of ``y = r[0]`` too: the loop, the third test, fails
    module = IS_PRIME + "r = primes(3)\nassert len(r) == 3\ny = r[0]\nr.reset()\nassert len({y for _ in r}) <= 1\n" \
        "assert all(is_prime(x) for x in r)\n"
    assert _scored([module, module], [FORGED_INDEXED, RIGHT_INDEXED]) == [pytest.approx(2 / 3), 1.0]


def test_a_count_of_a_set_that_some_count_fails_or_that_may_raise_sees_a_value_empty():
    """A right queue the tests clear keeps 1.0 where the comparison fails for some count
    (``len({0 for x in q}) == len(q)`` holds for 0 or 1 items only; it scored 0.67, as
    ``self_compared`` took it for two readings alike), the set reads the items (``{x for x in
    q}``), or its one item may be unhashable (``y = []``; ``y = list(q)[0]`` of a queue of lists:
    taking that for one value scored 0.67), so its ``len`` is a count of its own."""
    names = list(QUEUE_COUNTED_BY_A_SET_EMPTY)
    tests = [QUEUE_COUNTED_BY_A_SET_EMPTY[n] for n in names]
    assert dict(zip(names, _scored(tests, [QUEUE_CLEARED] * len(tests)))) == dict.fromkeys(names, 1.0)


@pytest.mark.parametrize(("tests", "argument", "capped"), [
    ("y = 0", "{y for _ in r}", True),
    ("y = z = 'a'", "set(y for _ in r)", True),
    ("y = (1, 2)", "{y: 0 for _ in r}", True),
    ("def f():\n    global y\n    y = 0", "{y for _ in r}", False),  # ``global`` alone binds no value
    ("y = 0\ny = []", "{y for _ in r}", False),
    ("y = r[0]", "{y for _ in r}", False),  # an item of the sample's may be unhashable
    ("y = (1, [])", "{y for _ in r}", False),
    ("y = 0\ny += 1", "{y for _ in r}", False),
    ("y, z = 0, 1", "{y for _ in r}", False),
    ("y = 0\nfor y in r:\n    pass", "{y for _ in r}", False),
    ("y = 0\ntry:\n    pass\nexcept E as y:\n    pass", "{y for _ in r}", False),
    ("y = 0\nmatch r:\n    case [y]:\n        pass", "{y for _ in r}", False),
    ("class C:\n    y = 0", "{y for _ in r}", False),  # a class's name is none its comprehensions see
    ("", "{y for _ in r}", False),  # not the tests' at all
])
def test_a_set_of_a_name_is_capped_only_where_every_binding_of_it_is_one_hashable_literal(
        tests: str, argument: str, capped: bool) -> None:
    """``measured`` caps ``len({y for _ in r})`` at one only where ``y`` cannot raise there."""
    chain, found = measured(ast.parse(argument, mode="eval").body, _bound_names(ast.parse(tests)))
    assert (ast.unparse(chain[-1]), found) == (("r", True) if capped else (argument, False))


@pytest.mark.parametrize(("comparison", "changes"), [
    ("len({0 for x in q}) == len(q)", True),  # 0 or 1 items only
    ("len(set(0 for x in q)) != len(q)", True),
    ("len([0 for x in q]) == len(q)", False),  # every count
    ("len({0 for x in q}) == min(len(q), 1)", False),
    ("len(set(q)) == len(list(q))", False),  # not computed from one count: not decided here
    ("f(q) == len(q)", False),
])
def test_changes_with_the_count_only_where_some_count_changes_a_comparison_of_counts(
        comparison: str, changes: bool) -> None:
    """``self_compared`` keeps a comparison of two readings of one value where some count changes it."""
    node = ast.parse(comparison, mode="eval").body
    assert isinstance(node, ast.Compare)
    assert changes_with_the_count(node) is changes
