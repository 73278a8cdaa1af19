"""A reward that edits what it is given in place changes nothing outside its own call.

The trainer trains on the generator's token ids held by the ``Completion`` objects, logs their
text and keeps the dataset rows for the whole run, so a reward plugin editing them would change
the trained tokens, the completions log, the rewards called after it and later steps' prompts.
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.errors import RewardError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.types import Completion, RewardContext, RewardSpec

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


class _Vandal:
    """A reward plugin that rewrites every input it can reach, then scores 1."""

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name="vandal", distribution="polyrl-test-vandal"))

    @hookimpl
    def reward(self, prompts, completions, context):
        if "vandal" not in context.wanted:
            return None
        completions[0].completion_ids[0] = 999
        completions[0].logprobs[0] = -42.0
        completions[0].text = "rewritten"
        context.completion_ids[1][0] = 888
        context.rows[0]["answer"] = "rewritten"
        context.options["vandal"]["k"].append("rewritten")
        prompts[0][0]["content"] = "rewritten"
        return {"vandal": [1.0] * len(completions)}


def test_a_reward_plugin_editing_its_inputs_changes_no_trained_token_log_row_or_later_reward():
    seen = {}

    def later(prompts, completions, completion_ids, answer, **kwargs):
        seen.update(prompts=prompts, completions=completions, ids=completion_ids, answer=answer)
        return [0.0] * len(completions)

    pm = get_plugin_manager(entry_points=False, extra=[_Vandal(), function_reward_plugin(later)])
    options = {"k": ["given"]}
    computer = RewardComputer(pm, [("vandal", 1.0, options), ("later", 1.0, {})], columns=("prompt", "answer"))
    row = {"prompt": CHAT, "answer": "4"}
    rows = [row, row]  # one row object per completion of a group, as the trainer repeats it
    completions = [Completion(0, [1], [5, 6], [-0.5, -0.5], text="4"), Completion(0, [1], [7, 8], [-0.5, -0.5], text="5")]
    context = RewardContext(rows=rows, wanted=("vandal", "later"), completion_ids=[c.completion_ids for c in completions])
    result = computer([r["prompt"] for r in rows], completions, context)

    assert result.total.tolist() == [1.0, 1.0]
    assert [c.completion_ids.tolist() for c in completions] == [[5, 6], [7, 8]]  # what the trainer trains on
    assert completions[0].logprobs.tolist() == [-0.5, -0.5] and completions[0].text == "4"
    assert row == {"prompt": [{"role": "user", "content": "What is 2 + 2?"}], "answer": "4"}
    assert computer.rewards[0][2] == {"k": ["given"]}  # the configured options, for the next step
    assert seen["ids"] == [[5, 6], [7, 8]] and seen["answer"] == ["4", "4"]
    assert seen["completions"][0] == [{"role": "assistant", "content": "4"}]
    assert seen["prompts"][0] == CHAT


def test_a_reward_plugin_still_gets_the_completions_and_their_live_environment():
    got = {}

    class Reader:
        @hookimpl
        def polyrl_register_rewards(self, register):
            register(RewardSpec(name="reader", distribution="polyrl-test-reader"))

        @hookimpl
        def reward(self, prompts, completions, context):
            got.update(completions=completions, ids=context.completion_ids)
            return {"reader": [1.0] * len(completions)}

    env = object()
    completion = Completion(0, [1], [5, 6], [-0.5, -0.5], text="4", mask=[True, False],
                            messages=[{"role": "assistant", "content": "4"}], info={"turns": 1}, environment=env)
    computer = RewardComputer(get_plugin_manager(entry_points=False, extra=[Reader()]), [("reader", 1.0, {})])
    computer([CHAT], [completion], RewardContext(rows=[{"prompt": CHAT}], wanted=("reader",)))

    given = got["completions"][0]
    assert given.environment is env and given.text == "4" and given.info == {"turns": 1}
    assert given.completion_ids.tolist() == [5, 6] and given.mask.tolist() == [True, False]
    assert given.messages == [{"role": "assistant", "content": "4"}]
    assert np.array_equal(got["ids"][0], [5, 6])


def test_a_row_holding_a_value_that_cannot_be_copied_still_has_its_other_columns_copied():
    import threading

    class Editor:
        @hookimpl
        def polyrl_register_rewards(self, register):
            register(RewardSpec(name="editor", distribution="polyrl-test-editor"))

        @hookimpl
        def reward(self, prompts, completions, context):
            assert context.rows[0]["lock"] is lock  # passed as is
            context.rows[0]["answer"] = "rewritten"
            return {"editor": [1.0]}

    lock = threading.Lock()
    row = {"prompt": "2+2?", "answer": "4", "lock": lock}
    computer = RewardComputer(get_plugin_manager(entry_points=False, extra=[Editor()]), [("editor", 1.0, {})])
    computer(["2+2?"], [Completion(0, [1], [5], [-0.5], text="4")], RewardContext(rows=[row], wanted=("editor",)))
    assert row["answer"] == "4"


def test_a_row_repeated_for_a_group_is_copied_once_per_call():
    """The trainer repeats one row object per completion of a group; a row of large test cases
    copied group_size times for every plugin was group_size times the memory."""
    got = []

    class Reader:
        @hookimpl
        def polyrl_register_rewards(self, register):
            register(RewardSpec(name="reader", distribution="polyrl-test-reader"))

        @hookimpl
        def reward(self, prompts, completions, context):
            got.append(context.rows)
            return {"reader": [1.0] * len(completions)}

    row = {"prompt": "2+2?", "tests": ["assert f() == 4"] * 100}
    computer = RewardComputer(get_plugin_manager(entry_points=False, extra=[Reader()]), [("reader", 1.0, {})])
    completions = [Completion(0, [1], [5], [-0.5], text=t) for t in "abcd"]
    computer(["2+2?"] * 4, completions, RewardContext(rows=[row] * 4, wanted=("reader",)))
    tests = [r["tests"] for r in got[0]]
    assert tests[0] == row["tests"] and tests[0] is not row["tests"]
    assert all(t is tests[0] for t in tests)


def test_a_reward_returning_an_endless_generator_is_a_count_error_after_one_item_too_many():
    """TRL draws a returned generator to the end; an endless one (``itertools.count()``) filled memory
    until the time limit, then in the abandoned thread until the trainer ran out of memory."""
    drawn = []

    def endless(completions, **kwargs):
        def scores():
            for i in range(10**6):  # stands in for an endless one: on the old code it drew all
                drawn.append(i)
                yield 1.0
        return scores()

    computer = RewardComputer(get_plugin_manager(entry_points=False, extra=[function_reward_plugin(endless)]),
                              [("endless", 1.0, {})])
    completions = [Completion(0, [1], [5], [-0.5], text=t) for t in "ab"]
    with pytest.raises(RewardError, match="returned 3 scores: expected 2"):
        computer(["q", "q"], completions, RewardContext(rows=[{}, {}], wanted=("endless",)))
    assert len(drawn) == 3


class _Counting:
    """A reward plugin counting its calls in an object its Python API user put in its options."""

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name="counting", distribution="polyrl-test-counting"))

    @hookimpl
    def reward(self, prompts, completions, context):
        if "counting" not in context.wanted:
            return None
        context.options["counting"]["tally"].calls += 1
        return {"counting": [1.0] * len(completions)}


class _Tally:
    calls = 0


def test_an_object_in_a_plugins_options_keeps_the_state_the_plugin_leaves_in_it():
    """Options' containers are copied for each call, the objects in them are not: a deep copy lost
    a cache's or counter's state every call without a word."""
    tally = _Tally()
    pm = get_plugin_manager(entry_points=False, extra=[_Counting()])
    computer = RewardComputer(pm, [("counting", 1.0, {"tally": tally})], columns=("prompt",))
    for _ in range(2):
        completions = [Completion(0, [1], [5], [-0.5], text="4")]
        computer([CHAT], completions, RewardContext(rows=[{"prompt": CHAT}], wanted=("counting",)))
    assert tally.calls == 2
