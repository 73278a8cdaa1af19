"""What a reward function hands TRL's ``log_extra`` / ``log_metric`` callables, however odd, never
hangs the run, fills its memory or ends it with a traceback.

TRL 1.16 (``GRPOTrainer._log_completion_extra``) ``extend``s its column with whatever it is given,
so an endless iterator hangs it; polyrl draws one value past the completions at most. A value the
completions log cannot hold as JSON (one holding itself, nested thousands deep, whose repr raises,
an int past Python's 4300 digits) is written as a text, on a reward thread and in a forked child alike.
"""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.tracking import completions as clog
from polyrl.types import Completion, RewardContext

ISOLATIONS = ["thread", pytest.param("process", marks=pytest.mark.skipif(not hasattr(os, "fork"), reason="fork"))]


def _scored(fn, isolation="thread"):
    plugin = function_reward_plugin(fn, isolation=isolation)
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})],
                              timeouts={plugin.name: 60})
    comps = [Completion(0, [1], [7], [0.0], text=t) for t in ("x", "y")]
    res = computer(["p", "p"], comps, RewardContext(rows=[{"prompt": "p"}] * 2, wanted=(plugin.name,)))
    return res, comps


def _records(res, comps):
    records = clog.sample_records(1, ["p", "p"], comps, res.per_reward, res.total, [0.0, 0.0], 2, 0, extra=res.extra)
    json.dumps(records, allow_nan=False)  # strict JSON, as completions.jsonl holds it
    return [r["extra"] for r in records]


class Endless:
    """An iterator that counts what was drawn from it (and stops, so the old code ends too)."""

    def __init__(self, stop=100_000):
        self.drawn, self.stop = 0, stop

    def __iter__(self):
        return self

    def __next__(self):
        if self.drawn >= self.stop:
            raise StopIteration
        self.drawn += 1
        return self.drawn


def test_an_endless_log_extra_iterator_is_drawn_one_past_the_completions_and_named():
    """Once: every item was drawn (``extend``): ``itertools.count()`` filled memory until the call's
    limit and went on in the abandoned thread."""
    endless = Endless()

    def logs_forever(completions, log_extra, **kwargs):
        log_extra("n", endless)
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match=r"called log_extra\('n', .*\): more than 2 values for 2 completions.*"
                                          r"Fix: pass one value per completion"):
        _scored(logs_forever)
    assert endless.drawn == 3


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_an_endless_log_extra_iterator_ends_the_call_at_once(isolation):
    def logs_forever(completions, log_extra, **kwargs):
        log_extra("n", itertools.count())
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match="more than 2 values for 2 completions"):
        _scored(logs_forever, isolation)


@pytest.mark.parametrize("values, why", [({0.5, 1.5}, "a set has no order"), ({"a": 1, "b": 2}, "a dict gives its keys")],
                         ids=["set", "dict"])
def test_a_set_or_a_dict_given_to_log_extra_is_refused(values, why):
    """A set's order is no completion order; TRL's ``extend`` of a dict takes its keys."""
    def logs(completions, log_extra, **kwargs):
        log_extra("col", values)
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match=f"{why}.*Fix: pass a list with one value per completion"):
        _scored(logs)


def test_more_values_than_completions_in_two_calls_is_named_with_the_count():
    def logs_twice(completions, log_extra, **kwargs):
        log_extra("col", ["a", "b"])
        log_extra("col", ["c"])
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match=r"3 values for 2 completions \(in this call's log_extra calls of 'col'\)"):
        _scored(logs_twice)


class BadRepr:
    def __repr__(self):
        raise RuntimeError("repr broke")


def test_a_log_metric_value_whose_repr_raises_is_named_not_raised():
    """Once: the error line's repr of the value raised the object's own error in its place."""
    def logs(completions, log_metric, **kwargs):
        log_metric("m", BadRepr())
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match=r"called log_metric\('m', <BadRepr instance at 0x[0-9a-f]+>\)"):
        _scored(logs)


def _nested(depth):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _hostile_values():
    loop: list = []
    loop.append(loop)
    return {
        "loop": [loop, loop],
        "deep": [_nested(5000), 1],
        "bad_repr": [BadRepr(), BadRepr()],
        "huge_int": [10 ** 5000, 1],
        "numpy": [np.complex128(1j), np.array([np.datetime64("2020-01-01")])],
        "long": [list(range(clog.EXTRA_ITEMS + 5)), []],
        "keys": [{(1, 2): "t", BadRepr(): "b"}, {}],
    }


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_log_extra_values_json_cannot_hold_reach_the_completions_log_as_text(isolation):
    """Once: on a thread a value that held itself, was nested 5000 deep or whose repr raised raised
    out of the step's sampling (the completions log went off for the run); in a forked child the
    reward failed ("its answer could not be sent back"); an int of 5000 digits failed the JSON."""
    hostile = _hostile_values()

    def logs(completions, log_extra, **kwargs):
        for column, values in hostile.items():
            log_extra(column, values)
        return [1.0] * len(completions)

    res, comps = _scored(logs, isolation)
    first, second = _records(res, comps)
    assert first["loop"] == ["[...]"] and first["bad_repr"] == "<BadRepr object whose repr raised RuntimeError>"
    deep = json.dumps(first["deep"])  # lists as deep as EXTRA_DEPTH, then the repr, which Python refuses there
    assert deep == "[" * clog.EXTRA_DEPTH + '"<list object whose repr raised RecursionError>"' + "]" * clog.EXTRA_DEPTH
    assert second["deep"] == 1
    assert first["huge_int"] == "<int of 16610 bits>" and second["huge_int"] == 1
    assert first["numpy"] == repr(np.complex128(1j)) and second["numpy"] == ["datetime.date(2020, 1, 1)"]
    assert first["long"][-1] == "[... 5 more items cut by polyrl]" and len(first["long"]) == clog.EXTRA_ITEMS + 1
    assert first["keys"] == {"(1, 2)": "t", "<BadRepr object whose repr raised RuntimeError>": "b"}
    for values in hostile.values():  # what a forked child sent is written as it came
        assert [clog.plain_extra(clog.plain_extra(v)) for v in values] == [clog.plain_extra(v) for v in values]


def test_a_huge_text_is_redacted_only_as_far_as_the_log_keeps_it():
    """Once: a reward's 50 MB ``log_extra`` text went whole through the redactor's patterns, seconds
    per record every step, to keep its first ``MAX_TEXT_CHARS``."""
    seen: list[int] = []

    class Counting:
        def __call__(self, text):
            seen.append(len(text))
            return text.replace("sk-secret", "***")

    size = 5_000_000
    shown = clog.shown_value("sk-secret " + "y" * size, Counting())
    assert max(seen) <= clog.REDACT_CHARS
    assert shown.startswith("*** y") and shown.endswith(clog.cut_marker(size + 4 - clog.MAX_TEXT_CHARS))
    assert len(shown) == clog.MAX_TEXT_CHARS + len(clog.cut_marker(size + 4 - clog.MAX_TEXT_CHARS))
