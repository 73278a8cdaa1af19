"""reward/<name>/latency_s is each reward's own time, also when one plugin call answers several."""

from __future__ import annotations

import time

from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext, RewardScores, RewardSpec


class _SlowAndFast:
    """One plugin answering a slow and a fast reward in one call, timing each."""

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name="slow", distribution="polyrl-latency"))
        register(RewardSpec(name="fast", distribution="polyrl-latency"))

    @hookimpl
    def reward(self, prompts, completions, context):
        out = {}
        for name in context.wanted:
            t0 = time.perf_counter()
            if name == "slow":
                time.sleep(0.2)
            out[name] = RewardScores([1.0] * len(completions), metrics={"latency_s": time.perf_counter() - t0})
        return out or None


def _metrics(pm, names):
    computer = RewardComputer(pm, [(name, 1.0, {"target": 8} if name == "length_penalty" else {}) for name in names])
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": "3+3?", "answer": "6"}]
    completions = [Completion(0, [1], [2], [-0.1], text="4"), Completion(1, [1], [2], [-0.1], text="5")]
    return computer([r["prompt"] for r in rows], completions, RewardContext(rows=rows, wanted=tuple(names))).metrics


def test_a_plugin_answering_two_rewards_in_one_call_reports_each_ones_time():
    metrics = _metrics(get_plugin_manager(entry_points=False, extra=[_SlowAndFast()]), ["slow", "fast"])
    assert metrics["slow"]["latency_s"] >= 0.2 > metrics["fast"]["latency_s"] * 10


def test_the_builtin_rewards_are_timed_one_by_one():
    """The built-ins answer in one call: each got that call's time, bit for bit the same."""
    metrics = _metrics(get_plugin_manager(entry_points=False), ["numeric_match", "length_penalty"])
    assert metrics["numeric_match"]["latency_s"] != metrics["length_penalty"]["latency_s"]
