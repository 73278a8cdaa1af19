"""A sample's value emptied under the tests' loop, or true over no items: forgeries that scored 1.0.

Each forged completion is a WRONG ``primes`` whose value gives ``len`` three non-primes and then,
once a call the tests make reaches it, nothing, so the loop ``all(is_prime(x) for x in r)`` after
that call holds vacuously; or whose ``__bool__`` says True over no items. Each is scored through
the real reward path (``code_tests``: sandbox, harness, the forked copy of the trainer) and must
score 0, while right solutions of the same tests, and right values emptied or shrunk by the tests'
calls as Python would, keep 1.0. See ``polyrl.sandbox.shrinking`` and ``Remote.__bool__``.
"""

from __future__ import annotations

import pytest
from test_sandbox_forging import IS_PRIME, QUEUE, STACK_OF
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

#: A forged ``primes``: three 4s, gone once the tests call ``reset``, pass the value to ``show``
#: or ``valid``, or call the ``Sieve`` it came from.
FORGED = ("class R:\n    def __init__(self, n):\n        self.xs = [4] * n\n    def __len__(self):\n"
          "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
          "    def reset(self):\n        self.xs = []\n"
          "def primes(n):\n    return R(n)\ndef show(r):\n    r.xs = []\ndef valid(r):\n    r.xs = []\n    return True\n"
          "class Sieve:\n    def primes(self, n):\n        self.last = R(n)\n        return self.last\n"
          "    def reset(self):\n        self.last.xs = []\n")
#: The right ``primes`` with the same names: its calls change nothing the tests loop over.
RIGHT = ("class Primes:\n    def __init__(self, n):\n        self.n = n\n        self.xs = [2, 3, 5, 7, 11][:n]\n"
         "    def __len__(self):\n        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
         "    def reset(self):\n        self.xs = [2, 3, 5, 7, 11][:self.n]\n"
         "def primes(n):\n    return Primes(n)\ndef show(r):\n    print(list(r))\ndef valid(r):\n    return len(r) > 0\n"
         "class Sieve:\n    def primes(self, n):\n        return Primes(n)\n    def reset(self):\n        pass\n")
#: Tests: ``len`` reads the value's items, then a call that reaches it, then a loop over it.
EMPTIED = {
    "own_method_as_a_statement": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
                                 "    assert all(is_prime(x) for x in r)\ntest()",
    "passed_to_a_function": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                            "    for x in r:\n        assert is_prime(x)\ntest()",
    "passed_to_a_function_in_the_assert": IS_PRIME + "r = primes(3)\n"
                                          "assert len(r) == 3 and valid(r) and all(is_prime(x) for x in r)",
    "enumerated": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                  "    for i, x in enumerate(r):\n        assert is_prime(x)\ntest()",
    "mapped": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
              "    assert all(map(is_prime, r))\ntest()",
    "the_object_it_came_from_reset": IS_PRIME + "def test():\n    s = Sieve()\n    r = s.primes(3)\n"
                                     "    assert len(r) == 3\n    s.reset()\n    assert [x for x in r if not is_prime(x)] "
                                     "== []\ntest()",
}
#: (tests, its score with ``FORGED``): the loop is no test of its own, its result asserted later.
LOOP_OUTSIDE_A_TEST = (IS_PRIME + "r = primes(3)\nassert len(r) == 3\nshow(r)\nok = all(is_prime(x) for x in r)\n"
                       "assert ok", 0.5)
#: A forged ``primes`` whose value is true over no items.
TRUE_OVER_NOTHING = ("class R:\n    def __len__(self):\n        return 0\n    def __iter__(self):\n"
                     "        return iter([])\n    def __bool__(self):\n        return True\n"
                     "def primes(n):\n    return R()\n")
#: One whose ``__len__`` says 3 over no items (Python's ``bool`` asks it).
LONG_OVER_NOTHING = ("class R:\n    def __len__(self):\n        return 3\n    def __iter__(self):\n"
                     "        return iter([])\ndef primes(n):\n    return R()\n")
#: (tests, forged solution).
TRUTH = {
    "assert_and_loop": (IS_PRIME + "r = primes(3)\nassert r and all(is_prime(x) for x in r)", TRUE_OVER_NOTHING),
    "if_then_loop": (IS_PRIME + "def test():\n    r = primes(3)\n    if not r:\n        raise AssertionError('none')\n"
                     "    assert all(is_prime(x) for x in r)\ntest()", TRUE_OVER_NOTHING),
    "long_over_nothing": (IS_PRIME + "r = primes(3)\nassert r and all(is_prime(x) for x in r)", LONG_OVER_NOTHING),
}
GRAPH_EDGES = ("class Edges:\n    def __init__(self, g):\n        self.g = g\n    def __len__(self):\n"
               "        return len(self.g.es)\n    def __iter__(self):\n        return iter(self.g.es)\n"
               "class Graph:\n    def __init__(self, es):\n        self.es = [tuple(e) for e in es]\n    @property\n"
               "    def edges(self):\n        return Edges(self)\n    def remove(self, n):\n"
               "        self.es = [e for e in self.es if n not in e]\ndef make_graph(es):\n    return Graph(es)\n")
QUEUE_CLEARED = QUEUE + "Queue.clear = lambda self: self.items.clear()\ndef empty(q):\n    q.items.clear()\n"
#: (tests, right solution): values the tests' calls empty or shrink as in Python, then read.
CHANGED_RIGHTLY = {
    "popped_as_a_statement": ("s = make_stack([7])\nassert len(s) == 1\ns.pop()\nassert all(x > 0 for x in s) and "
                              "len(s) == 0", STACK_OF),
    "cleared_then_counted_then_looped": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nq.clear()\n"
                                         "assert len(q) == 0 and all(x > 5 for x in q)", QUEUE_CLEARED),
    "emptied_by_a_function_then_compared": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert all(x > 0 for x in q)\n"
                                            "empty(q)\nassert list(q) == [] and sorted(q) == []", QUEUE_CLEARED),
    "cleared_looped_then_counted": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nq.clear()\n"
                                    "assert all(x > 5 for x in q)\nassert len(q) == 0", QUEUE_CLEARED),
    "emptied_looped_then_false": ("def test():\n    q = make_queue()\n    q.push(1)\n    q.push(2)\n"
                                  "    assert list(q) == [1, 2]\n    empty(q)\n    for x in q:\n        assert x > 5\n"
                                  "    assert not q\ntest()", QUEUE_CLEARED),
    "cleared_refilled_looped": ("q = make_queue()\nq.push(1)\nq.push(2)\nassert len(q) == 2\nq.clear()\nq.push(3)\n"
                                "assert all(x == 3 for x in q)", QUEUE_CLEARED),
    "edges_left_after_a_removal": ("g = make_graph([(1, 2), (2, 3), (3, 4)])\nedges = g.edges\nassert len(edges) == 3\n"
                                   "g.remove(2)\nassert all(2 not in e for e in edges) and len(edges) == 1",
                                   GRAPH_EDGES),
    "true_with_items": ("assert primes(3) and not primes(0)\nassert check(1) and gen(0)",
                        RIGHT + "class Ok:\n    def __bool__(self):\n        return True\n"
                        "def check(x):\n    return Ok()\ndef gen(n):\n    yield from range(n)\n"),
}
#: (tests, right solution): a method called for its value that takes the items it returns, then a
#: loop over what is left (one item per call was all such a call might take: 0.67).
DRAINED = {
    "drained_then_looped": ("s = make_stack([1, 2, 3])\nassert len(s) == 3\nassert s.drain() == [3, 2, 1]\n"
                            "assert all(x > 5 for x in s) and len(s) == 0",
                            STACK_OF + "Stack.drain = lambda self: [self.xs.pop() for _ in list(self.xs)]\n"),
    "two_taken_then_looped": ("s = make_stack([1, 2, 3])\nassert list(s) == [1, 2, 3]\nassert s.take(2) == (3, 2)\n"
                              "assert all(x == 1 for x in s)",
                              STACK_OF + "Stack.take = lambda self, n: tuple(self.xs.pop() for _ in range(n))\n"),
}
#: A forged method for its value: it empties the value and gives back what was never in it.
DRAINED_FORGED = {
    "took_other_items": (IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n"
                         "    assert r.drain() == [2, 3, 5]\n    assert all(is_prime(x) for x in r)\ntest()",
                         FORGED + "R.drain = lambda self: [2, 3, 5] if not setattr(self, 'xs', []) else None\n"),
}


def _scored(tests: list[str], solutions: list[str]) -> list[float]:
    return list(score(solutions, rows=[{"prompt": "p", "tests": t} for t in tests]).total)


def _all_scored(tests: list[str], solution: str) -> list[float]:
    """Each of ``tests`` scored against the one ``solution``, in order."""
    return _scored(tests, [solution] * len(tests))


def _each_scored(cases: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Each (tests, solution) case's score by its name, so a failing assert names the case."""
    return dict(zip(cases, _scored([t for t, _ in cases.values()], [s for _, s in cases.values()])))


def _each_scored_against(cases: dict[str, str], solution: str) -> dict[str, float]:
    """Each case's tests scored against the one ``solution``, by the case's name."""
    return dict(zip(cases, _all_scored(list(cases.values()), solution)))


def test_a_value_emptied_by_a_call_the_tests_make_fails_their_loop_over_it():
    """A call that reaches a value (its own method as a statement, ``r.reset()``; a function it
    is passed to, ``show(r)``, ``valid(r)``; a method of the object it came from, ``s.reset()``)
    may change it as it likes, so a forged ``primes`` whose three items went at such a call passed
    ``len(r) == 3`` and then a loop over it (``for``, ``all``, the tests' ``enumerate`` and
    ``map``, a comprehension: 1.0). A loop over a value emptied by fewer calls than
    it had items fails its test now (one that is no test of its own, ``ok = all(...)``, fails the
    next test, ``assert ok``); the right ``primes`` keeps 1.0 on the same tests."""
    tests = [*EMPTIED.values(), LOOP_OUTSIDE_A_TEST[0]]
    assert _all_scored(tests, FORGED) == [0.0] * len(EMPTIED) + [LOOP_OUTSIDE_A_TEST[1]]
    assert _all_scored(tests, RIGHT) == [1.0] * len(tests)


def test_a_value_true_over_no_items_fails():
    """``assert r`` (or ``if not r``) of a value whose ``__bool__`` says True (or ``__len__`` 3)
    over no items held, and then the loop over it (1.0): such a value is true only with an item now."""
    tests = [tests for tests, _ in TRUTH.values()]
    assert _scored(tests, [forged for _, forged in TRUTH.values()]) == [0.0] * len(TRUTH)
    assert _scored(tests, [RIGHT] * len(TRUTH)) == [1.0] * len(TRUTH)


def test_values_the_tests_calls_change_as_python_does_keep_their_score():
    """A stack popped to empty, a queue cleared (then counted, compared whole, or refilled) and a
    graph's edges shrunk by a removal, each then looped over, a queue emptied, looped over and then
    seen empty (``len(q) == 0`` in a later test, ``not q``), and values true with items or with no
    ``len`` keep 1.0."""
    assert _each_scored(CHANGED_RIGHTLY) == dict.fromkeys(CHANGED_RIGHTLY, 1.0)


def test_a_method_may_take_the_items_it_gives_back():
    """A right ``drain`` or ``take(2)`` called in an assert took more items than the one per call
    such a call might take, so the loop over what was left failed (0.67); the items it gives back
    count now. A forged one that empties the value and gives back other items still scores 0."""
    assert _each_scored(DRAINED) == dict.fromkeys(DRAINED, 1.0)
    assert _each_scored(DRAINED_FORGED) == dict.fromkeys(DRAINED_FORGED, 0.0)



#: Right values of the tests' own classes whose ``bool`` Python answers from ``__len__`` alone:
#: a heap whose ``__iter__`` pops in order, and a mapping with ``__getitem__`` by key and no ``__iter__``.
HEAP = ("import heapq\nclass PQ:\n    def __init__(self):\n        self.h = []\n    def push(self, x):\n"
        "        heapq.heappush(self.h, x)\n    def __len__(self):\n        return len(self.h)\n"
        "    def __iter__(self):\n        while self.h:\n            yield heapq.heappop(self.h)\n")
MAPPING = ("class Cache:\n    def __init__(self):\n        self.d = {}\n    def put(self, k, v):\n        self.d[k] = v\n"
           "    def __len__(self):\n        return len(self.d)\n    def __getitem__(self, k):\n        return self.d[k]\n")
#: (tests, right solution): ``assert q`` and then other checks of the same value.
TRUE_RIGHTLY = {
    "heap_popping_iterator": ("q = PQ()\nq.push(3)\nq.push(1)\nq.push(2)\nassert q\nassert len(q) == 3", HEAP),
    "mapping_without_iter": ("c = Cache()\nc.put('a', 1)\nassert c\nassert c['a'] == 1 and len(c) == 1", MAPPING),
}


def test_bool_of_a_right_value_reads_none_of_its_items():
    """Python's ``bool`` asks ``__len__`` only; reading a first item for ``assert q`` popped one
    off a right heap whose ``__iter__`` pops (``len(q) == 3`` then failed) and raised KeyError
    for item 0 of a mapping without ``__iter__`` (each 0.5). Both keep 1.0 now, while the values
    true over no items above still fail (``test_a_value_true_over_no_items_fails``)."""
    assert _each_scored(TRUE_RIGHTLY) == dict.fromkeys(TRUE_RIGHTLY, 1.0)


#: Right classes a dataset of data-structure tasks holds: a queue on a deque, a stack with
#: ``clear``, a cache whose ``compact`` drops the keys holding None.
DEQUE_QUEUE = ("from collections import deque\nclass Queue:\n    def __init__(self):\n        self.items = deque()\n"
               "    def enqueue(self, x):\n        self.items.append(x)\n    def dequeue(self):\n"
               "        return self.items.popleft()\n    def clear(self):\n        self.items.clear()\n"
               "    def __len__(self):\n        return len(self.items)\n    def __iter__(self):\n"
               "        return iter(self.items)\n")
CLEARED_STACK = ("class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n"
                 "        self.xs.append(x)\n    def pop(self):\n        return self.xs.pop()\n    def clear(self):\n"
                 "        self.xs.clear()\n    def is_empty(self):\n        return not self.xs\n"
                 "    def __len__(self):\n        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n")
COMPACTED_CACHE = ("class Cache:\n    def __init__(self):\n        self.d = {}\n    def put(self, k, v):\n"
                   "        self.d[k] = v\n    def compact(self):\n"
                   "        self.d = {k: v for k, v in self.d.items() if v is not None}\n"
                   "    def __len__(self):\n        return len(self.d)\n    def __iter__(self):\n        return iter(self.d)\n"
                   "    def __getitem__(self, k):\n        return self.d[k]\n")
_FOUR = "for i in range(4):\n    {}.{}(i)\nassert len({}) == 4\n"
QUEUE_OF_FOUR = "q = Queue()\n" + _FOUR.format("q", "enqueue", "q")
STACK_OF_FOUR = "s = Stack()\n" + _FOUR.format("s", "push", "s")
#: (tests, right solution): emptied by one call, then read by a loop that checks none of its
#: items: it counts them, copies them as they are, or fails on any (each scored 0 or 0.5 before).
EMPTIED_THEN_SEEN_BY_A_LOOP = {
    "counted_by_a_for": (QUEUE_OF_FOUR + "q.clear()\nn = 0\nfor _ in q:\n    n += 1\nassert n == 0\n", DEQUE_QUEUE),
    "counted_in_a_test_function": ("def test_clear():\n    q = Queue()\n    for i in range(4):\n        q.enqueue(i)\n"
                                   "    assert len(q) == 4\n    q.clear()\n    n = 0\n    for _ in q:\n        n += 1\n"
                                   "    assert n == 0\ntest_clear()\n", DEQUE_QUEUE),
    "counted_by_sum": (QUEUE_OF_FOUR + "q.clear()\nassert sum(1 for _ in q) == 0\n", DEQUE_QUEUE),
    "a_loop_that_fails_on_any_item": (STACK_OF_FOUR + "s.clear()\nassert s.is_empty()\nfor x in s:\n"
                                      "    raise AssertionError('left after clear')\n", CLEARED_STACK),
    "assert_false_with_the_item": ("def test_clear():\n    q = Queue()\n    q.enqueue(1)\n    q.enqueue(2)\n"
                                   "    q.enqueue(3)\n    assert len(q) == 3\n    q.clear()\n    for x in q:\n"
                                   "        assert False, f'{x} left'\ntest_clear()\n", DEQUE_QUEUE),
    "unittest_fail_on_any_item": ("import unittest\nclass TestQueue(unittest.TestCase):\n    def test_clear(self):\n"
                                  "        q = Queue()\n        for i in range(4):\n            q.enqueue(i)\n"
                                  "        self.assertEqual(len(q), 4)\n        q.clear()\n        for x in q:\n"
                                  "            self.fail(f'{x} left after clear')\n", DEQUE_QUEUE),
    "copied_then_compared": (STACK_OF_FOUR + "s.clear()\nassert [x for x in s] == []\n", CLEARED_STACK),
    "copied_then_counted": (STACK_OF_FOUR + "s.clear()\nassert len([x for x in s]) == 0\n", CLEARED_STACK),
    "compacted_to_nothing_then_copied": ("c = Cache()\nc.put('a', None)\nc.put('b', None)\nc.put('c', None)\n"
                                         "assert len(c) == 3\nc.compact()\nassert {k for k in c} == set()\n",
                                         COMPACTED_CACHE),
}
#: (tests, right solution): drained one call per item, partly compacted: these kept 1.0 and must.
DRAINED_RIGHTLY = {
    "while_queue_dequeue": (QUEUE_OF_FOUR + "out = []\nwhile q:\n    out.append(q.dequeue())\nassert out == [0, 1, 2, 3]\n"
                            "assert all(x > 9 for x in q)\n", DEQUE_QUEUE),
    "while_stack_pop": (STACK_OF_FOUR + "while s:\n    s.pop()\nfor x in s:\n    assert x > 9\n", CLEARED_STACK),
    "compacted_in_part": ("c = Cache()\nc.put('a', 1)\nc.put('b', None)\nc.put('c', None)\nassert len(c) == 3\n"
                          "c.compact()\nassert all(c[k] is not None for k in c)\n", COMPACTED_CACHE),
}
#: (tests of the forged ``primes`` above): loops whose body looks at an item for its verdict, or
#: a count the tests expect to be 3: each still fails once the value is emptied under them.
EMPTIED_THEN_CHECKED = {
    "raise_if_not_prime": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
                          "    for x in r:\n        if not is_prime(x):\n            raise AssertionError(x)\ntest()",
    "list_of_verdicts": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and all([is_prime(x) for x in r])",
    "counted": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and sum(1 for _ in r) == 3",
    "filtered_copy": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and [x for x in r if not is_prime(x)] == []",
    # a copy that is not compared equal or counted where it is made: each scored 1.0 forged
    "copy_looped_over": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                        "    for x in [x for x in r]:\n        assert is_prime(x)\ntest()",
    "copy_a_subset": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and {x for x in r} <= {2, 3, 5, 7}",
    "copy_stored_then_looped": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                               "    xs = [x for x in r]\n    assert all(is_prime(x) for x in xs)\ntest()",
    "copy_asked_not_in": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and 4 not in [x for x in r]",
}


@pytest.mark.slow
def test_a_right_value_emptied_then_read_by_a_loop_that_checks_no_item_keeps_its_score():
    """A right queue or stack cleared (a cache compacted to nothing) in one call and then counted
    (``for _ in q: n += 1``, ``sum(1 for _ in q)``), copied (``[x for x in s] == []``) or looped
    over with a body that fails on any item (``raise AssertionError``, ``self.fail``) scored 0 or 0.5: such a
    loop was taken for a check over each item, vacuous on the emptied value, and no other whole
    reading saw it empty. It reads the value whole now (``item_free_loops``); values drained one
    call per item keep 1.0; the forged ``primes`` still fails loops that look at its items."""
    assert not EMPTIED_THEN_SEEN_BY_A_LOOP.keys() & DRAINED_RIGHTLY.keys()  # one score a name
    cases = {**EMPTIED_THEN_SEEN_BY_A_LOOP, **DRAINED_RIGHTLY}
    assert _each_scored(cases) == dict.fromkeys(cases, 1.0)
    tests = list(EMPTIED_THEN_CHECKED.values())
    assert _all_scored(tests, FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, RIGHT) == [1.0] * len(tests)


#: (tests of the forged ``primes`` above): ``x not in r`` after a call that reaches ``r``.
NOT_IN_AFTER_EMPTYING = {
    "own_method_as_a_statement": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.reset()\n"
                                 "    assert 4 not in r\ntest()",
    "passed_to_a_function": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    show(r)\n"
                            "    assert 4 not in r and 6 not in r\ntest()",
    "passed_to_a_function_in_the_assert": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and valid(r) and 4 not in r",
}
#: A right set-like class with ``__contains__``: the items the tests add are theirs to expect gone.
BAG = ("class Bag:\n    def __init__(self):\n        self.xs = set()\n    def add(self, x):\n        self.xs.add(x)\n"
       "    def clear(self):\n        self.xs.clear()\n    def __len__(self):\n        return len(self.xs)\n"
       "    def __iter__(self):\n        return iter(self.xs)\n    def __contains__(self, x):\n        return x in self.xs\n")
#: (tests, right solution): items the tests put in, gone after a call that empties the value.
NOT_IN_RIGHTLY = {
    "bag_cleared": ("b = Bag()\nb.add(1)\nb.add(2)\nassert len(b) == 2\nb.clear()\nassert 1 not in b and 2 not in b\n",
                    BAG),
    "queue_cleared": (QUEUE_OF_FOUR + "q.clear()\nassert 2 not in q\n", DEQUE_QUEUE),
    "stack_made_with_them": ("s = make_stack([1, 2, 3])\nassert len(s) == 3\ns.clear()\nassert 1 not in s and 3 not in s\n",
                             STACK_OF + "Stack.clear = lambda self: self.xs.clear()\n"),
    "bag_refilled": ("b = Bag()\nb.add(1)\nb.add(2)\nassert len(b) == 2\nb.clear()\nb.add(3)\nassert 1 not in b and 3 in b\n",
                     BAG),
}


def test_x_not_in_a_value_emptied_under_it_fails():
    """``x not in r`` holds over no items, so the forged ``primes`` emptied by ``r.reset()``,
    ``show(r)`` or ``valid(r)`` passed ``len(r) == 3`` and then ``4 not in r`` (1.0): it is read
    as the tests' loop is now (``Remote.__contains__``). A right bag, queue or stack the tests fill
    (or make with items), clear and then ask ``1 not in b`` of items they put in keeps 1.0, as the
    right ``primes`` does."""
    tests = list(NOT_IN_AFTER_EMPTYING.values())
    assert _all_scored(tests, FORGED) == [0.0] * len(tests)
    assert _all_scored(tests, RIGHT) == [1.0] * len(tests)
    assert _each_scored(NOT_IN_RIGHTLY) == dict.fromkeys(NOT_IN_RIGHTLY, 1.0)


#: (tests, right solution): the stack cleared, seen empty by its own ``is_empty()``, then looped.
SAID_EMPTY = {
    "is_empty_then_looped": (STACK_OF_FOUR + "s.clear()\nassert s.is_empty()\nassert all(x >= 0 for x in s)\n",
                             CLEARED_STACK),
    "looped_then_is_empty": ("def test():\n    q = Queue()\n    q.enqueue(1)\n    q.enqueue(2)\n    q.enqueue(3)\n"
                             "    assert len(q) == 3\n    q.clear()\n    for x in q:\n        assert x > 0\n"
                             "    assert q.empty()\ntest()\n", DEQUE_QUEUE + "Queue.empty = lambda self: not self.items\n"),
}
#: (tests of the forged ``primes``, which says it is empty whatever it holds): a True before the
#: call that emptied the value excuses no later loop over it.
SAID_EMPTY_BEFORE = (IS_PRIME + "def test():\n    r = primes(3)\n    print(r.is_empty())\n    assert len(r) == 3\n"
                     "    r.reset()\n    assert all(is_prime(x) for x in r)\ntest()",
                     FORGED + "R.is_empty = lambda self: True\n")


def test_a_right_value_its_own_is_empty_says_empty_keeps_its_score():
    """A right stack cleared, ``assert s.is_empty()`` (or ``q.empty()``, as ``queue.Queue`` has it)
    and then (or before) a loop over it scored 0.67 (0): only the tests' own whole readings
    counted as seeing it empty. A True of such a method since its last change counts now
    (``remote.EMPTINESS``); one said before the call that emptied it still excuses nothing."""
    assert _each_scored(SAID_EMPTY) == dict.fromkeys(SAID_EMPTY, 1.0)
    assert _scored([SAID_EMPTY_BEFORE[0]], [SAID_EMPTY_BEFORE[1]]) == [0.0]
    assert _scored([SAID_EMPTY_BEFORE[0]], [RIGHT + "Primes.is_empty = lambda self: False\n"]) == [1.0]
