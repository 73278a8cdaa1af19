"""A copy or view of an emptied value bound to a name before a vacuous check, and a zip of views no loop checks.

Each forged completion is scored through the real reward path (``code_tests``: sandbox, harness,
the forked copy of the trainer) and must score 0, while right solutions of the same tests, and
right values the tests empty and see empty, keep 1.0. See ``polyrl.sandbox.named_copies``,
``polyrl.sandbox.subset_reads``, ``polyrl.sandbox.zipped_views`` and
``shrinking.feeds_item_free_loop``.
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import (
    CLEARED_STACK, DEQUE_QUEUE, FORGED, IS_PRIME, QUEUE_OF_FOUR, RIGHT, STACK_OF_FOUR, _all_scored,
    _each_scored, _each_scored_against, _scored)
from test_sandbox_forging import STACK_OF
from test_sandbox_vacuous_truths import CACHES, SQUARES_FORGED, SQUARES_RIGHT

pytestmark = pytest.mark.faults

_THREE = "def test():\n    r = primes(3)\n    assert len(r) == 3\n"
#: Tests: ``len`` reads the forged ``primes``' three 4s, ``show(r)`` or ``r.reset()`` empties it,
#: then a copy bound to a name is checked where no items pass (the right 2, 3, 5 pass each).
NAMED_COPIES = {
    "set_then_at_most": _THREE + "    show(r)\n    s = set(r)\n    assert s <= {2, 3, 5, 7}\ntest()",
    "set_then_issubset": _THREE + "    r.reset()\n    s = set(r)\n    assert s.issubset({2, 3, 5, 7})\ntest()",
    "frozenset_under_ge": _THREE + "    show(r)\n    s = frozenset(r)\n    assert {2, 3, 5, 7} >= s\ntest()",
    "set_then_issuperset": _THREE + "    show(r)\n    s = set(r)\n    assert {2, 3, 5, 7}.issuperset(s)\ntest()",
    "list_then_all": IS_PRIME + _THREE + "    show(r)\n    xs = list(r)\n    assert all(is_prime(x) for x in xs)\ntest()",
    "sorted_then_for": IS_PRIME + _THREE + "    r.reset()\n    xs = sorted(r)\n    for x in xs:\n"
                       "        assert is_prime(x)\ntest()",
    "tuple_then_zip_and_subset": _THREE + "    show(r)\n    xs = tuple(r)\n"
                                 "    assert all(a < b for a, b in zip(xs, xs[1:]))\n    assert set(xs) <= {2, 3, 5}\ntest()",
}


def test_a_named_copy_of_a_value_emptied_under_it_fails():
    """``s = set(r)`` (``frozenset``, ``list``, ``tuple``, ``sorted``) then a check that holds over
    no items: the copy was a whole reading, the check a statement later saw plain data, so the
    forged ``primes`` emptied by ``show(r)`` or ``r.reset()`` passed ``len(r) == 3`` and then the
    check (1.0). Such a copy is the check's reading now (``named_copies``); the right one keeps 1.0."""
    tests = list(NAMED_COPIES.values())
    assert _all_scored(tests, FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, RIGHT) == [1.0] * len(tests)


#: (tests, right solution): right values cleared, popped or unchanged, copied under a name and
#: checked vacuously, where the tests see them whole (the copy compared or counted, the value
#: seen empty before or after); each keeps 1.0.
NAMED_RIGHTLY = {
    "cleared_copy_compared": (STACK_OF_FOUR + "s.clear()\nxs = list(s)\nassert xs == []\n"
                              "assert all(x > 0 for x in xs) and set(xs) <= {1}\n", CLEARED_STACK),
    "cleared_copy_counted": (STACK_OF_FOUR + "s.clear()\nt = set(s)\nassert len(t) == 0 and t <= {1}\n", CLEARED_STACK),
    "cleared_seen_then_copied": (STACK_OF_FOUR + "s.clear()\nassert s.is_empty()\nt = set(s)\nassert t <= {1}\n",
                                 CLEARED_STACK),
    "cleared_copied_then_seen": (QUEUE_OF_FOUR + "q.clear()\nt = frozenset(q)\nassert t.issubset({1})\n"
                                 "assert len(q) == 0\n", DEQUE_QUEUE),
    "popped_one_of_three": ("s = make_stack([1, 2, 3])\nassert len(s) == 3\ns.pop()\nt = set(s)\n"
                            "assert t <= {1, 2} and t.isdisjoint([3])\n", STACK_OF),
    "unchanged": ("r = primes(3)\nassert len(r) == 3\nshow(r)\nt = set(r)\nxs = sorted(r)\n"
                  "assert t <= {2, 3, 5, 7} and all(x > 1 for x in xs)\n", RIGHT),
}


def test_a_named_copy_of_right_values_keeps_its_score():
    """Right values copied under a name and checked as a subset or in a loop keep 1.0 where the
    tests compare or count the copy, see the value empty before or after, popped one item, or
    changed nothing."""
    assert _each_scored(NAMED_RIGHTLY) == dict.fromkeys(NAMED_RIGHTLY, 1.0)


_SQUARES = "def test():\n    d = squares(3)\n    assert len(d) == 3\n"
#: Tests: ``len`` reads the forged ``squares``' items (each square 0), ``show(d)`` or ``d.reset()``
#: empties it, then a view of it bound to a name is looped over, or a set of a view checked as a subset.
NAMED_VIEWS = {
    "keys_then_all": _SQUARES + "    show(d)\n    v = d.keys()\n    assert all(d[k] == k * k for k in v)\ntest()",
    "items_then_for": _SQUARES + "    d.reset()\n    it = d.items()\n    for k, v in it:\n        assert v == k * k\ntest()",
    "two_views_then_zip": _SQUARES + "    show(d)\n    ks, vs = d.keys(), d.values()\n"
                          "    for k, v in zip(ks, vs):\n        assert v == k * k\ntest()",
    "set_of_items_at_most": _SQUARES + "    show(d)\n    assert set(d.items()) <= {(0, 0), (1, 1), (2, 4)}\ntest()",
    "set_of_items_issubset": _SQUARES + "    d.reset()\n    assert set(d.items()).issubset({(0, 0), (1, 1), (2, 4)})\ntest()",
    "named_set_of_items": _SQUARES + "    show(d)\n    s = set(d.items())\n    assert s <= {(0, 0), (1, 1), (2, 4)}\ntest()",
}


@pytest.mark.parametrize("kind", list(SQUARES_FORGED))
def test_a_named_view_of_a_mapping_emptied_under_it_fails(kind):
    """A ``Mapping``'s views are plain dict views of one reading (``Remote._container_data``), a
    loop's only where the loop takes them straight: ``v = d.keys()`` then ``all(... for k in v)``,
    ``ks, vs = d.keys(), d.values()`` then ``zip(ks, vs)``, and ``set(d.items()) <= allowed`` held
    over the forged ``squares`` emptied by ``show(d)`` or ``d.reset()`` (1.0). These are that loop's
    reading now (``zipped_views``); a class of the sample's with ``items()`` fails them too, and the
    right ``squares`` keeps 1.0."""
    tests = list(NAMED_VIEWS.values())
    assert _all_scored(tests, SQUARES_FORGED[kind]) == [0.0] * len(tests)
    assert _all_scored(tests, SQUARES_RIGHT[kind]) == [1.0] * len(tests)


_CACHE = "c = Cache()\nfor k in 'abc':\n    c.put(k, k.upper())\nassert len(c) == 3\nc.clear()\n"
#: (tests): a right cache the tests clear and then read through a zip (``enumerate``, ``sorted``) of
#: its views in a loop that checks no item: it counts them or fails on any (each scored 0.5).
ITEM_FREE_ZIPS = {
    "zip_counted_by_a_for": _CACHE + "n = 0\nfor k, v in zip(c.keys(), c.values()):\n    n += 1\nassert n == 0\n",
    "zip_summed_ones": _CACHE + "assert sum(1 for _ in zip(c.keys(), c.values())) == 0\n",
    "zip_fails_on_any": _CACHE + "for k, v in zip(c.keys(), c.values()):\n    raise AssertionError('left')\n",
    "sorted_counted": _CACHE + "n = 0\nfor k, v in sorted(c.items()):\n    n += 1\nassert n == 0\n",
    "enumerate_counted": _CACHE + "assert sum(1 for _ in enumerate(c.values())) == 0\n",
    "named_view_counted": _CACHE + "v = c.values()\nn = 0\nfor _ in v:\n    n += 1\nassert n == 0\n",
}
#: The forged ``squares`` emptied, then a zip of its views in a loop that checks each pair, or
#: counted and compared with what ``len`` said: both fail it (the right one keeps 1.0).
CHECKED_ZIPS = {
    "zip_checked": _SQUARES + "    show(d)\n    for k, v in zip(d.keys(), d.values()):\n        assert v == k * k\ntest()",
    "zip_counted_as_three": _SQUARES + "    d.reset()\n    n = 0\n    for _ in zip(d.keys(), d.values()):\n"
                            "        n += 1\n    assert n == 3\ntest()",
}


@pytest.mark.parametrize("kind", list(CACHES))
def test_a_zip_of_views_no_loop_checks_reads_a_right_value_whole(kind):
    """A loop over ``zip(c.keys(), c.values())`` (or ``enumerate``/``sorted`` of a view) whose
    body counts or fails on any item took the views for a check over each item, so a right cache
    the tests cleared and counted so scored 0.5, where the same loop over ``c`` itself kept 1.0.
    Such a loop reads the views whole now (``shrinking.feeds_item_free_loop``); a loop that checks
    the pairs still fails the forged ``squares``."""
    assert _each_scored_against(ITEM_FREE_ZIPS, CACHES[kind]) == dict.fromkeys(ITEM_FREE_ZIPS, 1.0)
    tests = list(CHECKED_ZIPS.values())
    assert _all_scored(tests, SQUARES_FORGED[kind]) == [0.0] * len(tests)
    assert _all_scored(tests, SQUARES_RIGHT[kind]) == [1.0] * len(tests)


_HISTORY = ("class History:\n    def __init__(self, xs):\n        self.xs = xs\n    def __len__(self):\n"
            "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n")
#: Forged banks: a ``history`` of three -5s (an attribute holding an object of the sample's, or a
#: property making a new one at each read), gone once the tests call ``reset`` or pass it to ``show``.
BANKS_FORGED = {
    "attribute": _HISTORY + ("class Bank:\n    def __init__(self):\n        self.history = History([-5, -5, -5])\n"
                             "    def reset(self):\n        self.history.xs = []\n"
                             "def make_bank():\n    return Bank()\ndef show(b):\n    b.history.xs = []\n"),
    "property": _HISTORY + ("class Bank:\n    def __init__(self):\n        self._h = [-5, -5, -5]\n    @property\n"
                            "    def history(self):\n        return History(self._h)\n    def reset(self):\n"
                            "        self._h = []\ndef make_bank():\n    return Bank()\ndef show(b):\n    b._h = []\n"),
}
BANKS_RIGHT = {name: forged.replace("[-5, -5, -5]", "[5, 5, 5]").replace("        self.history.xs = []\n", "        pass\n")
               .replace("        self._h = []\n", "        pass\n").replace("    b.history.xs = []\n", "    print(len(b.history))\n")
               .replace("    b._h = []\n", "    print(b._h)\n") for name, forged in BANKS_FORGED.items()}
_BANK = "def test():\n    b = make_bank()\n    assert len(b.history) == 3\n"
#: Tests: ``len`` reads ``b.history``, a call empties it, then the attribute read again is looped over.
READ_AGAIN = {
    "reset_then_all": _BANK + "    b.reset()\n    assert all(x > 0 for x in b.history)\ntest()",
    "shown_then_for": _BANK + "    show(b)\n    for x in b.history:\n        assert x > 0\ntest()",
    "named_after": _BANK + "    b.reset()\n    h = b.history\n    assert set(h) <= {5}\ntest()",
}


@pytest.mark.parametrize("kind", list(BANKS_FORGED))
def test_an_attribute_read_again_after_it_was_emptied_fails(kind):
    """Each read of ``b.history`` was a new value to the tests, with no reading before it, so a
    forged bank whose history gave ``len`` three -5s and nothing after ``b.reset()`` or ``show(b)``
    passed ``len(b.history) == 3`` and then a loop over ``b.history`` (1.0), where ``h = b.history``
    read once and looped over failed. An attribute read again of the same object is the value read
    before (``Remote._same_attribute``); the right bank keeps 1.0."""
    tests = list(READ_AGAIN.values())
    assert _all_scored(tests, BANKS_FORGED[kind]) == [0.0] * len(tests)
    assert _all_scored(tests, BANKS_RIGHT[kind]) == [1.0] * len(tests)


#: A right bank whose ``reset`` gives it a new, empty history; ``withdraw`` takes the last entry.
CLEARING_BANK = _HISTORY + ("class Bank:\n    def __init__(self):\n        self.history = History([5, 5, 5])\n"
                            "    def reset(self):\n        self.history = History([])\n    def deposit(self, x):\n"
                            "        self.history.xs.append(x)\n    def withdraw(self):\n        return self.history.xs.pop()\n"
                            "def make_bank():\n    return Bank()\n")
#: (tests): the right bank's history read again after calls that change it as Python would, seen
#: empty before or after a loop, given an item, or shrunk by a method of the bank called for its
#: value (held under a name too, which scored 0 before: nothing called on ``history`` itself).
READ_AGAIN_RIGHTLY = {
    "reset_looped_then_seen": _BANK + "    b.reset()\n    assert all(x > 0 for x in b.history)\n"
                              "    assert len(b.history) == 0\ntest()",
    "reset_false_then_looped": _BANK + "    b.reset()\n    assert not b.history\n    for x in b.history:\n"
                               "        assert x > 0\ntest()",
    "deposited_then_looped": _BANK + "    b.deposit(7)\n    assert all(x > 0 for x in b.history) and len(b.history) == 4\ntest()",
    "reset_deposited_looped": _BANK + "    b.reset()\n    b.deposit(9)\n    assert all(x == 9 for x in b.history)\ntest()",
    "withdrawn_then_read": _BANK + "    assert b.withdraw() == 5\n    assert all(x == 5 for x in b.history)\n"
                           "    assert list(b.history) == [5, 5]\ntest()",
    "held_then_withdrawn": "def test():\n    b = make_bank()\n    h = b.history\n    assert len(h) == 3\n"
                           "    assert b.withdraw() == 5\n    assert list(h) == [5, 5] and all(x == 5 for x in h)\ntest()",
    "unchanged": _BANK + "    assert list(b.history) == [5, 5, 5] and sorted(b.history) == [5, 5, 5]\ntest()",
}


def test_an_attribute_of_a_right_value_read_again_keeps_its_score():
    """The right bank's history read again after ``reset`` (seen empty before or after the loop),
    ``deposit``, or ``withdraw()`` called for its value keeps 1.0; ``h = b.history`` held across
    ``b.withdraw()`` scored 0 (``len(h)`` had read 3 items and only calls on ``h`` might take one):
    a method of the object it was read from now may (``Remote.__call__``)."""
    assert _each_scored_against(READ_AGAIN_RIGHTLY, CLEARING_BANK) == dict.fromkeys(READ_AGAIN_RIGHTLY, 1.0)


#: (tests): a right cache the tests clear and then copy through a zip or enumerate of its views,
#: the copy compared or counted right where it is made (each scored 0.5: ``compared_copies``).
COMPARED_ZIPS = {
    "list_of_zip_equal": _CACHE + "assert list(zip(c.keys(), c.values())) == []\n",
    "tuple_of_zip_equal": _CACHE + "assert tuple(zip(c.keys(), c.values())) == ()\n",
    "dict_of_zip_equal": _CACHE + "assert dict(zip(c.keys(), c.values())) == {}\n",
    "len_of_list_of_zip": _CACHE + "assert len(list(zip(c.keys(), c.values()))) == 0\n",
    "list_of_enumerate": _CACHE + "assert list(enumerate(c.values())) == []\n",
}
#: The forged ``squares`` emptied, then a zip of its views copied and checked pair by pair.
COPIED_ZIPS_CHECKED = {
    "copy_kept_then_checked": _SQUARES + "    show(d)\n    pairs = list(zip(d.keys(), d.values()))\n"
                              "    assert all(v == k * k for k, v in pairs)\ntest()",
    "copy_compared_by_subset": _SQUARES + "    d.reset()\n    assert set(zip(d.keys(), d.values())) <= {(0, 0), (1, 1), (2, 4)}"
                               "\ntest()",
}


@pytest.mark.parametrize("kind", list(CACHES))
def test_a_copy_of_a_zip_of_views_compared_whole_reads_a_right_value_whole(kind):
    """``list(zip(c.keys(), c.values())) == []`` of a right cache the tests cleared scored 0.5:
    the tests' ``zip`` read the views as a loop does. A copy compared or counted where it is made
    reads them whole now (``compared_copies``)."""
    assert _each_scored_against(COMPARED_ZIPS, CACHES[kind]) == dict.fromkeys(COMPARED_ZIPS, 1.0)


@pytest.mark.parametrize("kind", list(SQUARES_FORGED))
def test_a_zip_of_views_copied_then_checked_fails_an_emptied_value(kind):
    """``pairs = list(zip(d.keys(), d.values()))`` then a check of each pair, or ``set(zip(...))
    <= allowed``, of a forged ``Mapping`` emptied by ``show(d)`` or ``d.reset()`` passed (1.0): its
    views are plain dicts here, and neither copy was a loop's site (``zipped_views._copied_vacuously``).
    The right ``squares`` keeps 1.0."""
    tests = list(COPIED_ZIPS_CHECKED.values())
    assert _all_scored(tests, SQUARES_FORGED[kind]) == [0.0] * len(tests)
    assert _all_scored(tests, SQUARES_RIGHT[kind]) == [1.0] * len(tests)


#: A forged bank whose ``log``, a plain list, holds three -5s, and ``[]`` after ``reset`` or ``show``.
LOG_BANK_FORGED = ("class Bank:\n    def __init__(self):\n        self.log = [-5, -5, -5]\n    def reset(self):\n"
                   "        self.log = []\n    def deposit(self, x):\n        self.log.append(x)\n"
                   "    def withdraw(self):\n        return self.log.pop()\ndef make_bank():\n    return Bank()\n"
                   "def show(b):\n    b.log = []\n")
#: The right one: its log keeps its 5s through ``show``; ``reset`` clears it.
LOG_BANK_RIGHT = LOG_BANK_FORGED.replace("[-5, -5, -5]", "[5, 5, 5]").replace("    b.log = []\n", "    print(b.log)\n")
_LOG = "def test():\n    b = make_bank()\n    assert len(b.log) == 3\n"
#: Tests: ``len`` reads ``b.log``, a call empties it, then the attribute read again is looped over.
LOG_READ_AGAIN = {
    "reset_then_all": _LOG + "    b.reset()\n    assert all(x > 0 for x in b.log)\ntest()",
    "shown_then_for": _LOG + "    show(b)\n    for x in b.log:\n        assert x > 0\ntest()",
    "reset_then_sorted_for": _LOG + "    b.reset()\n    for x in sorted(b.log):\n        assert x > 0\ntest()",
    "reset_then_not_in": _LOG + "    b.reset()\n    assert -5 not in b.log\ntest()",
    "reset_then_map": _LOG + "    b.reset()\n    assert all(map(lambda x: x > 0, b.log))\ntest()",
    "shown_then_subset": _LOG + "    show(b)\n    assert set(b.log) <= {5}\ntest()",
    "reset_then_named": _LOG + "    b.reset()\n    h = b.log\n    assert all(x > 0 for x in h)\ntest()",
}
#: A forged bank whose ``cfg``, a plain dict, holds negative values, and ``{}`` after ``reset``.
CFG_BANK_FORGED = ("class Bank:\n    def __init__(self):\n        self.cfg = {1: -1, 2: -2, 3: -3}\n"
                   "    def reset(self):\n        self.cfg = {}\ndef make_bank():\n    return Bank()\n")
CFG_BANK_RIGHT = CFG_BANK_FORGED.replace("{1: -1, 2: -2, 3: -3}", "{1: 1, 2: 2, 3: 3}").replace(
    "        self.cfg = {}\n", "        pass\n")
CFG_READ_AGAIN = ("def test():\n    b = make_bank()\n    assert len(b.cfg) == 3\n    b.reset()\n"
                  "    assert all(v == k for k, v in b.cfg.items())\ntest()")
#: (tests): the right bank's log read again after calls that change it as Python would.
LOG_READ_AGAIN_RIGHTLY = {
    "shown_then_for": LOG_READ_AGAIN["shown_then_for"],
    "reset_looped_then_seen": _LOG + "    b.reset()\n    assert all(x > 0 for x in b.log)\n    assert b.log == []\ntest()",
    "reset_seen_then_looped": _LOG + "    b.reset()\n    assert not b.log\n    for x in b.log:\n        assert x > 0\ntest()",
    "deposited_then_looped": _LOG + "    b.deposit(7)\n    assert all(x > 0 for x in b.log) and len(b.log) == 4\ntest()",
    "reset_deposited_looped": _LOG + "    b.reset()\n    b.deposit(9)\n    assert all(x == 9 for x in b.log)\ntest()",
    "withdrawn_then_looped": _LOG + "    assert b.withdraw() == 5\n    assert all(x == 5 for x in b.log)\ntest()",
    "reset_counted": _LOG + "    b.reset()\n    n = 0\n    for _ in b.log:\n        n += 1\n    assert n == 0\ntest()",
    "reset_sorted_counted": _LOG + "    b.reset()\n    n = 0\n    for _ in sorted(b.log):\n        n += 1\n"
                            "    assert n == 0\ntest()",
    "reset_not_in_then_seen": _LOG + "    b.reset()\n    assert 5 not in b.log and len(b.log) == 0\ntest()",
    "reset_named_then_compared": _LOG + "    b.reset()\n    h = b.log\n    assert h == [] and all(x > 0 for x in h)\ntest()",
}


def test_a_plain_data_attribute_read_again_after_it_was_emptied_fails():
    """Each read of ``b.log``, a plain list, was a new copy never compared with the one before, so
    a forged bank whose log gave ``len`` three -5s and nothing after ``b.reset()`` or ``show(b)``
    passed ``len(b.log) == 3`` and then a loop over ``b.log`` (1.0; ``sorted``, ``map``, ``not in``,
    a subset check, ``h = b.log`` looped over and a loop over ``b.cfg.items()`` too). Such a check of an attribute emptied by
    fewer calls than it had items fails unless the tests see it empty
    (``Remote._plain_attribute``); the right bank keeps 1.0 where it is seen so, refilled,
    withdrawn from or counted."""
    assert _each_scored_against(LOG_READ_AGAIN, LOG_BANK_FORGED) == dict.fromkeys(LOG_READ_AGAIN, 0.0)
    assert _scored([CFG_READ_AGAIN] * 2, [CFG_BANK_FORGED, CFG_BANK_RIGHT]) == [0.0, 1.0]
    assert _each_scored_against(LOG_READ_AGAIN_RIGHTLY, LOG_BANK_RIGHT) == dict.fromkeys(LOG_READ_AGAIN_RIGHTLY, 1.0)
