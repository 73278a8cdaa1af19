"""``polyrl.sandbox.shrinking`` alone: which readings are the tests' loops, and how many lost items
the calls between two readings may have taken (the sandboxed cases: ``test_sandbox_emptied_values``)."""

from __future__ import annotations

from polyrl.sandbox.shrinking import looped_here, loops_over, returned_items, taken_back


def test_looped_here_tells_a_loop_of_the_tests_from_a_whole_reading():
    """``shrinking.looped_here`` is true only where the tests' own code starts a loop or a
    comprehension over the value; ``list``/``sorted``/``in`` and code outside the tests are not."""

    class Probe:
        def __init__(self) -> None:
            self.seen: list[bool] = []

        def __iter__(self):
            self.seen.append(looped_here())
            return iter([1])

    source = "for x in r:\n    pass\nall(x for x in r)\n[x for x in r]\nlist(r)\nsorted(r)\n1 in r\nlooped(r)\n"
    probe = Probe()
    looped = loops_over(lambda value: iter(value))
    exec(compile(source, "<test>", "exec"), {"r": probe, "looped": looped})
    assert probe.seen == [True, True, True, False, False, False, True]
    outside = Probe()
    exec(compile("for x in r:\n    pass\n", "<elsewhere>", "exec"), {"r": outside})
    assert outside.seen == [False]


def test_taken_back_counts_only_lost_items_a_call_returned():
    """One item per call, or the lost items the calls returned where more: a ``drain`` giving back
    the three it took may take three; one giving back other items, one."""
    assert taken_back([1, 2, 3], [], returned_items([3, 2, 1]), 1) == 3
    assert taken_back([4, 4, 4], [], returned_items([2, 3, 5]), 1) == 1
    assert taken_back([1, 2, 3], [1], returned_items(3), 1) == 1
    assert taken_back([1, 1, 2], [2], returned_items((1, 1, 1)), 1) == 2
