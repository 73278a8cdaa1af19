"""``all(r)``/``any(r)`` of an emptied value, and a generator asserted true over no items: forgeries that scored 1.0.

Each forged completion is scored through the real reward path (``code_tests``: sandbox,
harness, the forked copy of the trainer) and must score 0, while right solutions of the same
tests, and right values the tests empty and see empty, keep 1.0. See ``polyrl.sandbox.truth_loops``
and ``polyrl.sandbox.asserted_truths``.
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import (
    CLEARED_STACK, DEQUE_QUEUE, IS_PRIME, QUEUE_OF_FOUR, STACK_OF_FOUR, _all_scored,
    _each_scored, _each_scored_against)
from test_sandbox_forging import STACK_OF

pytestmark = pytest.mark.faults

#: A forged ``flags``: three False items for ``len``, gone once the tests call ``reset`` or pass
#: the value to ``show``; its ``hidden`` gives three True items the same way.
FLAGS_FORGED = ("class R:\n    def __init__(self, xs):\n        self.xs = xs\n    def __len__(self):\n"
                "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
                "    def reset(self):\n        self.xs = []\n"
                "def flags(n):\n    return R([False] * n)\ndef hidden(n):\n    return R([True] * n)\n"
                "def show(r):\n    r.xs = []\n")
#: The right ``flags`` with the same names: its calls change nothing the tests read.
FLAGS_RIGHT = ("class R:\n    def __init__(self, xs):\n        self.xs = xs\n    def __len__(self):\n"
               "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
               "    def reset(self):\n        self.xs = list(self.xs)\n"
               "def flags(n):\n    return R([True] * n)\ndef hidden(n):\n    return R([False] * n)\n"
               "def show(r):\n    print(list(r))\n")
#: Tests: ``len`` reads the value's items, a call that reaches it, then ``all`` or ``any`` of it.
ALL_OF_EMPTIED = {
    "all_after_own_method": "def test():\n    r = flags(3)\n    assert len(r) == 3\n    r.reset()\n    assert all(r)\ntest()",
    "all_after_a_function": "def test():\n    r = flags(3)\n    assert len(r) == 3\n    show(r)\n    assert all(r)\ntest()",
    "not_any_after_a_function": "def test():\n    r = hidden(3)\n    assert len(r) == 3\n    show(r)\n"
                                "    assert not any(r)\ntest()",
    "builtins_all": "import builtins\ndef test():\n    r = flags(3)\n    assert len(r) == 3\n    r.reset()\n"
                    "    assert builtins.all(r)\ntest()",
}
APPLY = "def apply(f, xs):\n    return [f(x) for x in xs]\n"
#: (tests, right solution): ``all``/``any`` of right values, emptied by the tests and seen empty
#: (before or after, ``len``, ``not s``), shrunk by a pop, or never changed; and sent to the solution.
ALL_RIGHTLY = {
    "cleared_seen_then_all": (QUEUE_OF_FOUR + "q.clear()\nassert len(q) == 0 and all(q)\n", DEQUE_QUEUE),
    "cleared_not_any_then_counted": (QUEUE_OF_FOUR + "q.clear()\nassert not any(q)\nassert len(q) == 0\n", DEQUE_QUEUE),
    "cleared_false_then_not_any": (STACK_OF_FOUR + "s.clear()\nassert not s\nassert not any(s)\n", CLEARED_STACK),
    "popped_then_all": ("s = make_stack([1, 2, 3])\nassert len(s) == 3\nassert s.pop() == 3\nassert all(s) and any(s)\n",
                        STACK_OF),
    "unchanged": ("r = flags(3)\nassert len(r) == 3\nassert all(r) and any(r) and not any(hidden(2))\n", FLAGS_RIGHT),
    "sent_to_the_solution": ("assert apply(all, [[1, 2], [0, 1]]) == [True, False]\n"
                             "assert apply(any, [[0], [0, 1]]) == [False, True]\n", APPLY),
}


def test_all_or_any_of_a_value_emptied_under_it_fails():
    """``all(r)`` holds over no items (as ``not any(r)`` does), and Python's ``all`` asked
    ``__iter__`` from the tests' call, a whole reading to ``shrinking.looped_here``: the forged
    ``flags`` emptied by ``r.reset()`` or ``show(r)`` passed ``len(r) == 3`` and then ``assert
    all(r)`` (1.0) where ``all(x for x in r)`` failed. The tests' ``all`` and ``any`` are loops
    over the value now (``truth_loops``); the right ``flags`` keeps 1.0."""
    tests = list(ALL_OF_EMPTIED.values())
    assert _all_scored(tests, FLAGS_FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, FLAGS_RIGHT) == [1.0] * len(tests)


def test_all_or_any_of_right_values_keeps_its_score():
    """Right values cleared and seen empty (``len(q) == 0`` before or after, ``assert not s``
    before), popped, or unchanged, read by ``all``/``any``, and ``all``/``any`` handed to the
    solution (the sample's own), keep 1.0."""
    assert _each_scored(ALL_RIGHTLY) == dict.fromkeys(ALL_RIGHTLY, 1.0)


#: (tests, right solution): a stack or queue cleared, ``assert not s`` and then a loop over it.
FALSE_THEN_LOOPED = {
    "not_then_genexpr": (STACK_OF_FOUR + "s.clear()\nassert not s\nassert all(x > 0 for x in s)\n", CLEARED_STACK),
    "not_then_for": (QUEUE_OF_FOUR + "q.clear()\nassert not q\nfor x in q:\n    assert x > 0\n", DEQUE_QUEUE),
}


def test_a_right_value_seen_false_before_a_loop_over_it_keeps_its_score():
    """``assert not q`` after it was cleared counted as the tests seeing it empty only after
    their loop over it, not before (each 0.67): a false ``bool`` counts as ``q.is_empty()`` does now."""
    assert _each_scored(FALSE_THEN_LOOPED) == dict.fromkeys(FALSE_THEN_LOOPED, 1.0)


#: Forged ``primes`` that are their own iterator (Python's ``bool`` is True) and yield nothing.
GENERATOR_FORGED = "def primes(n):\n    yield from ()\n"
ITERATOR_FORGED = ("class It:\n    def __iter__(self):\n        return self\n    def __next__(self):\n"
                   "        raise StopIteration\ndef primes(n):\n    return It()\n")
GENERATOR_RIGHT = "def primes(n):\n    yield from [2, 3, 5, 7, 11][:n]\n"
#: Tests: the value asserted true, then looped over item by item.
ASSERTED_THEN_LOOPED = {
    "assert_and_loop": IS_PRIME + "def test():\n    r = primes(3)\n    assert r and all(is_prime(x) for x in r)\ntest()",
    "assert_then_for": IS_PRIME + "def test():\n    r = primes(3)\n    assert r\n    for x in r:\n"
                       "        assert is_prime(x)\ntest()",
    "if_not_raise": IS_PRIME + "def test():\n    r = primes(3)\n    if not r:\n        raise AssertionError('none')\n"
                    "    assert all(is_prime(x) for x in r)\ntest()",
    "assert_then_all_map": IS_PRIME + "def test():\n    r = primes(3)\n    assert r\n    assert all(map(is_prime, r))\ntest()",
}
EVENS = "def evens(n):\n    yield from range(0, 2 * n, 2)\ndef show(g):\n    print(list(g))\n"
#: (tests): a right generator that may yield nothing, read so; each keeps 1.0.
GENERATOR_RIGHTLY = {
    "asserted_then_listed": "r = evens(0)\nassert r\nassert list(r) == []\n",
    "if_guard": "def test():\n    r = evens(0)\n    if r:\n        for x in r:\n            assert x % 2 == 0\ntest()\n",
    "asserted_then_counted": "r = evens(0)\nassert r\nn = 0\nfor _ in r:\n    n += 1\nassert n == 0\n",
    "next_then_looped": "r = evens(1)\nassert r\nassert next(r) == 0\nassert all(x % 2 == 0 for x in r)\n",
    "used_up_by_a_call": "r = evens(2)\nassert r\nshow(r)\nassert all(x % 2 == 0 for x in r)\n",
    "bool_called": "r = evens(0)\nb = bool(r)\nassert b\nassert all(x % 2 == 0 for x in r)\n",
    "asserted_with_items": "r = evens(3)\nassert r and all(x % 2 == 0 for x in r)\n",
}


def test_an_own_iterator_asserted_true_over_no_items_fails():
    """Python's ``bool`` of a generator is True whatever it yields, so a forged ``primes``
    yielding nothing passed ``assert r`` (``if not r: raise``) and then the loop over it (1.0),
    where the right generator's 2, 3, 5 are each checked. A loop over no items right after an
    ``assert`` of its truth fails now (``asserted_truths``); a right generator the tests assert
    and then list, count, take from, hand to a call, or only guard with ``if r``, keeps 1.0."""
    tests = list(ASSERTED_THEN_LOOPED.values())
    assert _all_scored(tests, GENERATOR_FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, ITERATOR_FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, GENERATOR_RIGHT) == [1.0] * len(tests)
    assert _each_scored_against(GENERATOR_RIGHTLY, EVENS) == dict.fromkeys(GENERATOR_RIGHTLY, 1.0)


_DICT_BODY = ("    def __init__(self, n):\n        self.d = {i: 0 for i in range(n)}\n    def __len__(self):\n"
              "        return len(self.d)\n    def __iter__(self):\n        return iter(self.d)\n"
              "    def __getitem__(self, k):\n        return self.d[k]\n    def items(self):\n        return self.d.items()\n"
              "    def values(self):\n        return self.d.values()\n    def keys(self):\n        return self.d.keys()\n"
              "    def reset(self):\n        self.d = {}\ndef squares(n):\n    return D(n)\ndef show(d):\n    d.d = {}\n")
#: Forged ``squares`` (each square 0), emptied once the tests call ``reset`` or ``show``: a class
#: of the sample's with ``items()``, and a ``collections.abc.Mapping``.
SQUARES_FORGED = {"own_class": "class D:\n" + _DICT_BODY,
                  "mapping": "import collections.abc\nclass D(collections.abc.Mapping):\n" + _DICT_BODY}
SQUARES_RIGHT = {name: forged.replace("{i: 0 for", "{i: i * i for").replace("    d.d = {}\n", "    print(dict(d.d))\n")
                 .replace("        self.d = {}\n", "        pass\n") for name, forged in SQUARES_FORGED.items()}
#: Tests: ``len`` reads the value's items, a call that reaches it, then a loop over a view of it.
VIEW_OF_EMPTIED = {
    "items_for": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    show(d)\n    for k, v in d.items():\n"
                 "        assert v == k * k\ntest()",
    "items_all": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    d.reset()\n"
                 "    assert all(v == k * k for k, v in d.items())\ntest()",
    "keys_then_getitem": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    show(d)\n    for k in d.keys():\n"
                         "        assert d[k] == k * k\ntest()",
    "two_items": "def test():\n    d = squares(2)\n    assert len(d) == 2\n    show(d)\n"
                 "    assert not any(v != k * k for k, v in d.items())\ntest()",
}
#: The same, zipped beside each other (both empty: the tests' ``zip`` fails an empty operand only
#: beside one with items); a ``Mapping``'s views are plain dict views here (``zipped_views``).
ZIPPED_VIEWS = "def test():\n    d = squares(3)\n    assert len(d) == 3\n    show(d)\n" \
               "    for k, v in zip(d.keys(), d.values()):\n        assert v == k * k\ntest()"
#: More loops over a ``Mapping``'s views through the tests' ``zip`` and its kin (``zipped_views``).
ZIPPED_VIEWS_MORE = {
    "zip_in_all": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    d.reset()\n"
                  "    assert all(v == k * k for k, v in zip(d.keys(), d.values()))\ntest()",
    "sorted_items": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    show(d)\n"
                    "    for k, v in sorted(d.items()):\n        assert v == k * k\ntest()",
    "enumerate_values": "def test():\n    d = squares(3)\n    assert len(d) == 3\n    show(d)\n"
                        "    assert all(v == i * i for i, v in enumerate(d.values()))\ntest()",
}
_CACHE_BODY = ("    def __init__(self):\n        self.d = {}\n    def put(self, k, v):\n        self.d[k] = v\n"
               "    def clear(self):\n        self.d.clear()\n    def remove(self, k):\n        del self.d[k]\n"
               "    def __len__(self):\n        return len(self.d)\n    def __iter__(self):\n        return iter(self.d)\n"
               "    def __getitem__(self, k):\n        return self.d[k]\n    def items(self):\n        return self.d.items()\n"
               "    def values(self):\n        return self.d.values()\n    def keys(self):\n        return self.d.keys()\n")
CACHES = {"own_class": "class Cache:\n" + _CACHE_BODY,
          "mapping": "import collections.abc\nclass Cache(collections.abc.Mapping):\n" + _CACHE_BODY}
_THREE = "c = Cache()\nfor k in 'abc':\n    c.put(k, k.upper())\nassert len(c) == 3\n"
#: (tests): a right cache the tests clear and see empty (before or after), shrink by one, or
#: count, each then read through a view; each keeps 1.0.
VIEWS_RIGHTLY = {
    "cleared_seen_then_items": _THREE + "c.clear()\nassert len(c) == 0\nfor k, v in c.items():\n    assert v == k.upper()\n",
    "cleared_items_then_seen": _THREE + "c.clear()\nassert all(v == k.upper() for k, v in c.items())\nassert len(c) == 0\n",
    "cleared_items_counted": _THREE + "c.clear()\nassert sum(1 for _ in c.items()) == 0\n",
    "one_removed_then_values": _THREE + "c.remove('b')\nassert all(v in 'AC' for v in c.values()) and len(c) == 2\n",
    "unchanged_items": _THREE + "for k, v in c.items():\n    assert c[k] == v\nassert sorted(c.keys()) == ['a', 'b', 'c']\n",
    "cleared_seen_then_zipped": _THREE + "c.clear()\nassert len(c) == 0\nfor k, v in zip(c.keys(), c.values()):\n"
                                "    assert v == k.upper()\n",
    "cleared_zipped_then_seen": _THREE + "c.clear()\nassert all(v == k.upper() for k, v in zip(c.keys(), c.values()))\n"
                                "assert not c\n",
    "one_removed_then_zipped": _THREE + "c.remove('b')\nfor k, v in zip(c.keys(), c.values()):\n"
                               "    assert v == k.upper() and k != 'b'\n",
    "unchanged_zipped": _THREE + "assert sorted(zip(c.keys(), c.values())) == [('a', 'A'), ('b', 'B'), ('c', 'C')]\n"
                        "assert all(v == k.upper() for k, v in zip(c.keys(), c.values()))\n",
}


@pytest.mark.parametrize("kind", list(SQUARES_FORGED))
def test_a_loop_over_a_view_of_a_value_emptied_under_it_fails(kind):
    """``for k, v in d.items()`` of a value emptied by ``show(d)`` or ``d.reset()`` holds over no
    items: the forged ``squares`` (a class of the sample's with ``items()``, or a ``Mapping``)
    passed ``len(d) == 3`` and then a loop over its view (1.0), or over ``zip(d.keys(), d.values())``.
    Such a loop reads the value as a loop over it does now (``Remote._emptied_unseen``,
    ``shrinking.view_looped_here``, the tests' ``zip`` reading its operands: ``pairing._read``); the right
    ``squares`` and right caches cleared and seen empty, shrunk or counted keep 1.0."""
    tests = [*VIEW_OF_EMPTIED.values(), ZIPPED_VIEWS, *ZIPPED_VIEWS_MORE.values()]
    assert _all_scored(tests, SQUARES_FORGED[kind]) == [0.0] * len(tests)
    assert _all_scored(tests, SQUARES_RIGHT[kind]) == [1.0] * len(tests)
    assert _each_scored_against(VIEWS_RIGHTLY, CACHES[kind]) == dict.fromkeys(VIEWS_RIGHTLY, 1.0)


_UNITTEST = "import unittest\n" + IS_PRIME + "class T(unittest.TestCase):\n    def test_primes(self):\n"
#: Tests in a ``unittest.TestCase``: the generator asserted true by ``self.assertTrue``, then looped over.
ASSERTED_TRUE_IN_UNITTEST = {
    "assert_true_then_for": _UNITTEST + "        r = primes(3)\n        self.assertTrue(r)\n        for x in r:\n"
                            "            self.assertTrue(is_prime(x))\n",
    "assert_true_then_all": _UNITTEST + "        r = primes(3)\n        self.assertTrue(r)\n"
                            "        self.assertTrue(all(is_prime(x) for x in r))\n",
}
#: (tests): a right generator that may yield nothing, asserted true by ``self.assertTrue`` and then
#: listed, counted or guarded; each keeps 1.0.
UNITTEST_RIGHTLY = {
    "asserted_then_listed": "import unittest\nclass T(unittest.TestCase):\n    def test_none(self):\n"
                            "        r = evens(0)\n        self.assertTrue(r)\n        self.assertEqual(list(r), [])\n",
    "asserted_with_items": "import unittest\nclass T(unittest.TestCase):\n    def test_some(self):\n"
                           "        r = evens(3)\n        self.assertTrue(r)\n"
                           "        self.assertTrue(all(x % 2 == 0 for x in r))\n",
    "if_guard": "import unittest\nclass T(unittest.TestCase):\n    def test_none(self):\n        r = evens(0)\n"
                "        if r:\n            for x in r:\n                self.assertEqual(x % 2, 0)\n",
}


def test_an_own_iterator_asserted_true_by_unittest_over_no_items_fails():
    """``self.assertTrue(r)`` asks ``bool`` inside unittest, which ``asserted_truths`` read as
    no assertion of the tests', so a forged ``primes`` yielding nothing passed it and then the loop
    over it in a ``unittest.TestCase`` (1.0). unittest's ``assertTrue`` called from the tests is
    their assertion now; the right generator, and right ones yielding nothing read whole, keep 1.0."""
    tests = list(ASSERTED_TRUE_IN_UNITTEST.values())
    assert _all_scored(tests, GENERATOR_FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, ITERATOR_FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, GENERATOR_RIGHT) == [1.0] * len(tests)
    assert _each_scored_against(UNITTEST_RIGHTLY, EVENS) == dict.fromkeys(UNITTEST_RIGHTLY, 1.0)
