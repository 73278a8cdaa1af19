"""``polyrl.sandbox.shrinking`` alone: which readings are the tests' loops, and how many lost items
the calls between two readings may have taken (the sandboxed cases: ``test_sandbox_emptied_values``)."""

from __future__ import annotations

import builtins
import dis

from polyrl.sandbox.item_free_loops import checks_no_item
from polyrl.sandbox.module_views import _bound
from polyrl.sandbox.reader import same_items
from polyrl.sandbox.shrinking import gained, looped_here, loops_over, not_in_here, returned_items, taken_back
from polyrl.sandbox.values import item_key


class _Probe:
    """A value that records, at each reading, whether ``looped_here`` saw a loop of the tests'."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def __iter__(self):
        self.seen.append(looped_here())
        return iter([1])


def test_looped_here_tells_a_loop_of_the_tests_from_a_whole_reading():
    """``shrinking.looped_here`` is true only where the tests' own code starts a loop or a
    comprehension over the value that checks its items; ``list``/``sorted``/``in``, loops that
    count, copy or fail on any item (``item_free_loops``) and code outside the tests are not."""

    source = ("for x in r:\n    assert x\nall(x for x in r)\n[x + 1 for x in r]\nlist(r)\nsorted(r)\n1 in r\n"
              "looped(r)\nfor x in r:\n    pass\n[x for x in r] == [1]\nsum(1 for _ in r)\n")
    probe = _Probe()
    looped = loops_over(lambda value: iter(value))
    exec(compile(source, "<test>", "exec"), {"r": probe, "looped": looped})
    assert probe.seen == [True, True, True, False, False, False, True, False, False, False]
    outside = _Probe()
    exec(compile("for x in r:\n    assert x\n", "<elsewhere>", "exec"), {"r": outside})
    assert outside.seen == [False]


def test_not_in_here_is_the_tests_not_in_only():
    """``x not in r`` of the tests' code is seen, not ``x in r`` nor code outside the tests."""

    class Probe:
        def __init__(self) -> None:
            self.seen: list[bool] = []

        def __contains__(self, item: object) -> bool:
            self.seen.append(not_in_here())
            return False

    probe = Probe()
    exec(compile("1 not in r\n1 in r\nassert 2 not in r\n", "<test>", "exec"), {"r": probe})
    exec(compile("1 not in r\n", "<elsewhere>", "exec"), {"r": probe})
    assert probe.seen == [True, False, True, False]


def _loops(source: str) -> list[bool]:
    """``checks_no_item`` of each loop start (``GET_ITER``) of ``source``'s top level, in order."""
    code = compile(source, "<test>", "exec")
    return [checks_no_item(code, i.offset) for i in dis.get_instructions(code) if i.opname == "GET_ITER"]


def test_a_loop_checks_no_item_where_it_counts_copies_or_fails_on_any():
    """Counting (``n += 1``, ``sum(1 for _ in q)``), copying as they are (``[x for x in q]``,
    ``{x for x in q}``) and failing on any item (``raise``, ``assert False, x``, ``self.fail()``,
    ``pytest.fail()``) read no item for
    a verdict; a body that reads one, branches before its raise, raises inside a ``try`` of its
    own, a comprehension that filters or maps, or a copy not compared equal or counted where it is
    made (kept, looped over, taken by a call other than ``len``, asked ``in``, compared by ``<=``), does."""
    free = ("for _ in q:\n    n += 1\nsum(1 for _ in q)\n[x for x in q] == [2, 3]\nset() != {x for x in q}\n"
            "for x in q:\n    raise AssertionError('left')\nfor x in q:\n    assert False, f'{x} left'\n"
            "for a, b in q:\n    n = n + 1\nfor x in q:\n    pytest.fail(f'{x} left')\n")
    assert _loops(free) == [True] * 8
    method = compile("def test(self):\n    for x in q:\n        self.fail('left')\n", "<test>", "exec").co_consts[0]
    assert [checks_no_item(method, i.offset) for i in dis.get_instructions(method) if i.opname == "GET_ITER"] == [True]
    checked = ("for x in q:\n    n += x\nsum(x for x in q)\n[x for x in q if x]\n[f(x) for x in q]\n"
               "for x in q:\n    if x:\n        raise AssertionError(x)\n"
               "for x in q:\n    try:\n        raise AssertionError\n    except AssertionError:\n        pass\n"
               "for x in q:\n    f()\nfor x in q:\n    if x:\n        self.fail()\nfor x in q:\n    other.fail()\n"
               "(x for x in q)\nall([x for x in q])\nfor _ in q:\n    n = [1 for _ in q]\n"
               "[x for x in q]\nxs = [x for x in q]\nfor y in [x for x in q]:\n    pass\n"
               "{x for x in q} <= {2}\n4 not in [x for x in q]\nf([x for x in q], 3) == 1\n"
               "len([x for x in q]) == 0\n")
    assert _loops(checked) == [False] * 12 + [True] + [False] * 3 + [True] + [False] * 3 + [True]  # the 2nd True: the for over a copy (a list)


def test_looped_here_counts_a_whole_reading_a_loop_goes_over():
    """``for x in sorted(r)``, ``all(... for x in list(r))`` and ``for x in iter(r)`` are loops over
    ``r`` (the tests' ``sorted``/``iter`` are ``module_views._bound`` functions calling Python's),
    whether ``__iter__`` or ``__len__`` (which ``list`` asks first) is asked; ``sorted(r) == [1]``,
    ``n = len(r)`` and a loop over ``sorted(r)`` that checks no item (``n += 1``: a whole reading,
    as ``for _ in r: n += 1`` is; ``shrinking.feeds_item_free_loop``) are not."""

    class Probe(_Probe):
        def __len__(self) -> int:
            self.seen.append(looped_here())
            return 1

    source = ("def test():\n    for x in sorted(r):\n        assert x\n    all(x for x in list(r))\n"
              "    for x in iter(r):\n        assert x\n    sorted(r) == [1]\n    n = len(r)\n"
              "    for x in sorted(r):\n        n += 1\ntest()\n")
    probe = Probe()
    names = {name: _bound(getattr(builtins, name), None) for name in ("sorted", "iter", "len")}
    exec(compile(source, "<test>", "exec"), {"r": probe, **names})
    assert probe.seen == [True, True, True, True, True, False, False, False, False, False]


def test_gained_is_an_item_neither_read_before_nor_handed_in():
    """A value shrunk to items it had, or to ones the tests' calls passed in, gained none."""
    assert gained([4, 4, 4], [2], [])
    assert not gained([(1, 2), (2, 3), (3, 4)], [(3, 4)], [])
    assert not gained([1, 2, 3], [9], [[9], 9])
    assert gained([1, 2, 3], [9, 9], [9])


def test_taken_back_counts_only_lost_items_a_call_returned():
    """One item per call, or the lost items the calls returned where more: a ``drain`` giving back
    the three it took may take three; one giving back other items, one."""
    assert taken_back([1, 2, 3], [], returned_items([3, 2, 1]), 1) == 3
    assert taken_back([4, 4, 4], [], returned_items([2, 3, 5]), 1) == 1
    assert taken_back([1, 2, 3], [1], returned_items(3), 1) == 1
    assert taken_back([1, 1, 2], [2], returned_items((1, 1, 1)), 1) == 2


class _Handle:
    """A stand-in of ``remote.Remote`` for the one attribute the rule reads: a new handle each reading."""

    LIVES_IN_SAMPLE = True

    def __init__(self, type_name: str) -> None:
        self._type = type_name


class _Node:
    pass


def test_one_rule_of_the_same_item_for_readings_and_lost_items():
    """``reader.same_items`` (two readings of one value) and ``shrinking``'s lost and gained items
    follow one rule, ``values.item_key``: plain data exactly (``nan`` is itself; ``1`` is not
    ``True`` nor ``1.0``; ``-0.0`` is not ``0.0``; an int past 4300 digits by its value, as it
    crosses; a set in its order), an object of the sample's by its type (a new handle each
    reading), another object by its type's name."""
    nan = float("nan")
    pairs = [  # (a, b, whether they are the same item)
        (1, True, False), (1, 1.0, False), (0.0, -0.0, False), (nan, float("nan"), True), ("1", b"1", False),
        ((1, [2]), (1, [2]), True), ((1,), [1], False), (10 ** 5000, 10 ** 5001, False),
        (10 ** 5000, 10 ** 5000, True), (_Node(), _Node(), True),
        (_Handle("Node"), _Handle("Node"), True), (_Handle("Node"), _Node(), False),
        (_Handle("Node"), _Handle("Leaf"), False), ({"a": 1}, {"a": 1}, True), ({"a": 1}, {"a": 2}, False),
    ]
    for a, b, same in pairs:
        assert same_items([a], [b]) is same, (a, b)
        assert (item_key(a) == item_key(b)) is same, (a, b)
        assert gained([a], [b], []) is not same, (a, b)  # b is an item ``[a]`` never had
        assert taken_back([a], [], [b], 0) == int(same), (a, b)  # a call that gave back b took a
