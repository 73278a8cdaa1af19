"""Two forgeries that scored 1.0 through the real reward path (``code_tests``: sandbox, harness,
the forked copy of the trainer), and the right solutions beside them that keep 1.0.

1. An argument rewritten in place, compared through the tests' ``zip``: ``outs = [my_sort(c) for c
   in cases]`` then ``for o, c in zip(outs, cases): assert o == sorted(c)``; ``xs[:] = [0] *
   len(xs); return list(xs)`` made the tests' ``c`` agree with its forged answer, since the loop
   over a ``zip`` bound ``o`` to no answer of the solution's (``vacuous_reads._item_sources``).
2. A forged ``primes`` read by index only (``y = r[0]``), emptied by ``r.reset()``, then looped
   over: only whole readings (``len``) told the harness the tests saw it with items, so the loop
   over no items held (``remote.Remote._read_for_index``).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import FORGED as FORGED_PRIMES
from test_sandbox_emptied_values import RIGHT as RIGHT_PRIMES
from test_sandbox_emptied_values import _each_scored_against, _scored
from test_sandbox_forging import IS_PRIME

pytestmark = pytest.mark.faults

_CASES = "cases = [[3, 1, 2], [2, 1], [5, 4, 9]]\nouts = [my_sort(c) for c in cases]\n"
#: answers listed first, then paired with their arguments by the tests' ``zip``/``enumerate``.
ZIPPED = {
    "for_zip": _CASES + "for o, c in zip(outs, cases):\n    assert o == sorted(c)\n",
    "all_zip": _CASES + "assert all(o == sorted(c) for o, c in zip(outs, cases))\n",
    "in_a_function": "def t():\n    cases = [[3, 1, 2], [2, 1]]\n    outs = [my_sort(c) for c in cases]\n"
                     "    for o, c in zip(outs, cases):\n        assert o == sorted(c)\nt()\n",
    "enumerated": _CASES + "for i, c in enumerate(cases):\n    assert outs[i] == sorted(c)\n",
    "enumerated_zip": _CASES + "for i, (o, c) in enumerate(zip(outs, cases)):\n    assert o == sorted(c)\n",
    "answers_second": _CASES + "for c, o in zip(cases, outs):\n    assert sorted(c) == o\n",
}
FORGED_SORT = "def my_sort(xs):\n    xs[:] = [0] * len(xs)\n    return list(xs)\n"
RIGHT_SORTS = ("def my_sort(xs):\n    xs.sort()\n    return xs\n", "def my_sort(xs):\n    return sorted(xs)\n")
#: (tests, right in-place solution) reading the arguments' new contents through ``zip``.
IN_PLACE_ZIPPED = {
    "dedupe_26": ("cases = [[1, 1, 2], [0, 0, 1, 1, 2]]\nwants = [[1, 2], [0, 1, 2]]\n"
                  "ks = [remove_duplicates(n) for n in cases]\n"
                  "for k, n, w in zip(ks, cases, wants):\n    assert k == len(w) and n[:k] == w\n",
                  "def remove_duplicates(nums):\n    k = 0\n    for x in nums:\n        if k == 0 or nums[k - 1] != x:\n"
                  "            nums[k] = x\n            k += 1\n    return k\n"),
    "colors_75": ("cases = [[2, 0, 1], [1, 0]]\nfor c in cases:\n    sort_colors(c)\n"
                  "for c, w in zip(cases, [[0, 1, 2], [0, 1]]):\n    assert c == w\n",
                  "def sort_colors(nums):\n    nums.sort()\n"),
    "returned_argument": ("cases = [[3, 1, 2], [2, 1]]\nouts = [my_sort(c) for c in cases]\n"
                          "for o, c in zip(outs, cases):\n    assert o == c == sorted(c)\n",
                          "def my_sort(xs):\n    xs.sort()\n    return xs\n"),
}


def test_an_argument_rewritten_in_place_does_not_forge_a_zipped_comparison():
    """The forgery scored 1.0 on each; it scores 0 now, and right sorts (in place, copying) keep 1.0."""
    assert _each_scored_against(ZIPPED, FORGED_SORT) == dict.fromkeys(ZIPPED, 0.0)
    for right in RIGHT_SORTS:
        assert _each_scored_against(ZIPPED, right) == dict.fromkeys(ZIPPED, 1.0)


def test_right_in_place_solutions_read_through_zip_keep_full_marks():
    got = _scored([t for t, _ in IN_PLACE_ZIPPED.values()], [s for _, s in IN_PLACE_ZIPPED.values()])
    assert dict(zip(IN_PLACE_ZIPPED, got)) == dict.fromkeys(IN_PLACE_ZIPPED, 1.0)


def test_zipped_names_are_paired_with_the_operand_they_come_from():
    from polyrl.sandbox.vacuous_reads import vacuous_paths

    found = vacuous_paths([ZIPPED["for_zip"], "for a, b in pairs:\n    assert f(a) == sorted(b)\n"])
    assert found is not None
    assert found.answered == {("c", "<module>", 1), ("cases", "<module>", 1), ("b", "<module>", 1)}


_INDEXED = "r = primes(3)\ny = r[0]\nr.reset()\n"
#: Tests that read ``r`` by index only, then have it reset, then loop over it.
INDEXED = {
    "module_level": IS_PRIME + _INDEXED + "assert all(is_prime(x) for x in r)\n",
    "for_loop": IS_PRIME + _INDEXED + "for x in r:\n    assert is_prime(x)\n",
    "in_a_function": IS_PRIME + "def test():\n" + "".join(f"    {line}\n" for line in _INDEXED.splitlines())
                     + "    assert all(is_prime(x) for x in r)\ntest()\n",
    "index_asserted": IS_PRIME + "r = primes(3)\nassert r[1] == r[1]\nr.reset()\nassert all(is_prime(x) for x in r)\n",
}
#: Right ``primes`` that support ``r[i]`` and ``reset`` (which keeps or restores the items).
_GETITEM = "Primes.__getitem__ = lambda self, i: self.xs[i]\n"
RIGHT_INDEXED = (RIGHT_PRIMES + _GETITEM,
                 "class L(list):\n    def reset(self):\n        pass\ndef primes(n):\n    return L([2, 3, 5, 7, 11][:n])\n")


def test_a_value_read_by_index_then_emptied_fails_the_loop_over_it():
    """The forged ``primes`` (three 4s, none after ``r.reset()``) scored 1.0 on each; its loop fails now. Right
    ones keep 1.0, and a loop over a value the tests never saw with items keeps Python's reading
    (``r = primes(3); r.reset()`` then the loop: emptiness may be right there)."""
    forged = FORGED_PRIMES + "R.__getitem__ = lambda self, i: self.xs[i]\n"
    # ``assert r[1] == r[1]`` is a test of its own that holds: one of two
    assert _each_scored_against(INDEXED, forged) == dict.fromkeys(INDEXED, 0.0) | {"index_asserted": 0.5}
    for right in RIGHT_INDEXED:
        assert _each_scored_against(INDEXED, right) == dict.fromkeys(INDEXED, 1.0)
    never_seen = IS_PRIME + "r = primes(3)\nr.reset()\nassert all(is_prime(x) for x in r)\n"
    assert _scored([never_seen], [forged]) == [1.0]


def test_a_right_value_read_by_index_and_emptied_keeps_full_marks_when_seen_empty():
    """A right queue read by index, cleared, and seen empty (``len(q) == 0``) before its loop keeps 1.0."""
    from test_sandbox_emptied_values import QUEUE_CLEARED

    tests = ("q = make_queue()\nq.push(1)\nq.push(2)\nassert q[0] == 1\nq.clear()\n"
             "assert len(q) == 0 and all(x > 5 for x in q)\n")
    assert _scored([tests], [QUEUE_CLEARED + "Queue.__getitem__ = lambda self, i: self.items[i]\n"]) == [1.0]


#: Right values read by index whose whole reading must not change what the tests see next: a heap
#: whose ``__iter__`` pops, an own iterator, a mapping by int key with no ``__iter__``.
_HEAP = ("import heapq\nclass PQ:\n    def __init__(self):\n        self.h = []\n    def push(self, x):\n"
         "        heapq.heappush(self.h, x)\n    def __len__(self):\n        return len(self.h)\n"
         "    def __getitem__(self, i):\n        return self.h[i]\n"
         "    def __iter__(self):\n        while self.h:\n            yield heapq.heappop(self.h)\ndef make_pq():\n    return PQ()\n")
_OWN = ("class It:\n    def __init__(s):\n        s.xs = [1, 3, 5]\n        s.i = 0\n    def __iter__(s):\n        return s\n"
        "    def __next__(s):\n        if s.i >= len(s.xs):\n            raise StopIteration\n        s.i += 1\n"
        "        return s.xs[s.i - 1]\n    def __getitem__(s, k):\n        return s.xs[k]\ndef odds(n):\n    return It()\n")
_CACHE = ("class Cache:\n    def __init__(self):\n        self.d = {}\n    def put(self, k, v):\n        self.d[k] = v\n"
          "    def __len__(self):\n        return len(self.d)\n    def __getitem__(self, k):\n        return self.d[k]\n"
          "def make_cache():\n    return Cache()\n")
READ_BY_INDEX_RIGHTLY = {
    "heap_popping_iterator": ("q = make_pq()\nq.push(3)\nq.push(1)\nq.push(2)\nassert q[0] == 1\nassert len(q) == 3", _HEAP),
    "own_iterator": ("r = odds(3)\nassert r[0] == 1\nassert list(r) == [1, 3, 5]", _OWN),
    "mapping_by_int_key": ("c = make_cache()\nc.put(1, 'a')\nc.put(5, 'b')\nassert c[1] == 'a'\n"
                           "assert c[5] == 'b' and len(c) == 2", _CACHE),
}


def test_a_whole_reading_after_an_index_keeps_right_values_as_python_reads_them():
    from test_sandbox_emptied_values import _each_scored

    assert _each_scored(READ_BY_INDEX_RIGHTLY) == dict.fromkeys(READ_BY_INDEX_RIGHTLY, 1.0)
