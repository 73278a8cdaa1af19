"""A function reward run in a forked child that keeps state across calls is named once.

In a child (``isolation = "process"``, the default for math-verify rewards) a counter or a
curriculum the reward moves is moved in the child's copy of the process and lost when the call
returns; TRL, calling the reward on its main thread, keeps every change.
"""

from __future__ import annotations

import os

import pytest
from structlog.testing import capture_logs

from polyrl.rewards.functions import FunctionReward

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="process isolation needs os.fork")

CALLS = 0
SEEN: list[int] = []


def counting_accuracy(completions, solution, **kwargs):
    """The open-r1 accuracy reward with a call counter, as a curriculum keeps one."""
    from math_verify import parse, verify

    global CALLS
    CALLS += 1
    return [float(verify(parse(s), parse(c))) for c, s in zip(completions, solution)]


def remembering(completions, **kwargs):
    SEEN.append(len(completions))
    return [1.0] * len(completions)


def plain(completions, **kwargs):
    return [float(len(c) < 10) for c in completions]


class Curriculum:
    def __init__(self):
        self.level = 0

    def __call__(self, completions, **kwargs):
        self.level += 1
        return [float(self.level)] * len(completions)


def _warnings(fn, isolation):
    with capture_logs() as logs:
        reward = FunctionReward(fn, isolation=isolation)
    return reward, [e for e in logs if e.get("log_level") == "warning" and "forked child" in e["event"]]


def test_a_math_verify_reward_counting_its_calls_is_named_as_losing_the_count():
    pytest.importorskip("math_verify")
    reward, said = _warnings(counting_accuracy, "auto")
    assert reward.isolation == "process"
    assert len(said) == 1 and "global 'CALLS'" in said[0]["event"] and 'isolation = "thread"' in said[0]["fix"]


@pytest.mark.parametrize("fn, what", [(remembering, "module-level 'SEEN' (append)"), (Curriculum(), "self.level")])
def test_state_a_child_loses_is_named_for_a_forked_reward(fn, what):
    _, said = _warnings(fn, "process")
    assert len(said) == 1 and what in said[0]["event"]


def test_no_word_for_a_reward_without_state_or_on_the_thread():
    assert _warnings(plain, "process")[1] == []
    from polyrl.rewards.isolation import kept_state

    assert _warnings(Curriculum(), "thread")[1] == []
    assert kept_state(plain) is None


def test_a_cell_of_the_calls_own_nested_function_is_no_state():
    from polyrl.rewards.isolation import kept_state

    def reward(completions, **kwargs):
        total = 0

        def add(x):
            nonlocal total
            total += x

        for c in completions:
            add(len(c))
        return [float(total)] * len(completions)

    assert kept_state(reward) is None


def test_a_function_wrapped_twice_is_named_once():
    def counter(completions, **kwargs):
        SEEN.clear()
        return [1.0] * len(completions)

    assert len(_warnings(counter, "process")[1]) == 1
    assert _warnings(counter, "process")[1] == []
