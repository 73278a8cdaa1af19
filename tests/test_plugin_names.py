"""The name-collision rules of the four plugin kinds are stated in one place (``polyrl.hookspecs``,
"Plugin names and collisions") and are what the code does.

Why: each kind has its own rule (backends and environments: the name is unusable for both;
trackers: the first keeps it; rewards: a third-party one replaces polyrl's with a warning, two
third-party ones are an error), and hookspecs stated only the backends' one, so an author could
not tell which applied without reading the registry.
"""

from __future__ import annotations

import pytest

from polyrl import hookspecs
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.rewards.combine import RewardComputer
from polyrl.types import BackendSpec, RewardSpec


def _section(title: str) -> str:
    doc = hookspecs.__doc__ or ""
    return next(block for block in doc.split("\n\n") if block.startswith(title))


class _Claims:
    """A plugin registering one name of each kind (and a reward hook answering it); its reward
    names a third-party distribution (a plugin passed as ``extra`` counts as polyrl's own)."""

    def __init__(self, tag: str, reward: str = "shared_reward") -> None:
        self.__name__ = f"claims-{tag}"
        self.tag, self.reward_name = tag, reward

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="shared", load=lambda config: object(), summary=self.tag))

    @hookimpl
    def polyrl_register_environments(self, register):
        from polyrl.agents.spec import EnvironmentSpec

        register(EnvironmentSpec(name="shared", create=lambda options: None, summary=self.tag))

    @hookimpl
    def polyrl_register_trackers(self, register):
        from polyrl.tracking import TrackerSpec

        register(TrackerSpec(name="shared", create=lambda ctx: None, summary=self.tag))

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name=self.reward_name, summary=self.tag, distribution=f"dist-{self.tag}"))

    @hookimpl
    def reward(self, prompts, completions, context):
        if self.reward_name not in context.wanted:
            return None
        return {self.reward_name: [1.0] * len(completions)}


def test_hookspecs_states_the_collision_rule_of_every_plugin_kind():
    rules = _section("Plugin names and collisions")
    for kind in ("Backends:", "Environments and tools:", "Trackers:", "Rewards:"):
        assert kind in rules
    assert "unusable" in rules and "first registration keeps the name" in rules
    assert "scores instead" in rules and "ConfigError" in rules
    faults = _section("What the core does with a faulty plugin")
    assert "probe returned int, expected None or a reason string" in faults
    assert "Plugin names and collisions" in faults


def test_the_documented_collision_rules_are_what_the_registry_does():
    first, second = _Claims("first"), _Claims("second")
    reg = Registry(get_plugin_manager(extra=[first, second], entry_points=False))
    # backends, environments: unusable for both
    assert not reg.status("shared").available and "registered by 2" in (reg.status("shared").reason or "")
    env = {(s.kind, s.name): s for s in reg.environment_statuses()}[("environment", "shared")]
    assert not env.available and "registered by 2" in (env.reason or "")
    # trackers: the first keeps it, the second is a load error
    assert reg.trackers_by_name()["shared"].summary == "first"
    assert any(e.name == "shared" and e.group == "polyrl_register_trackers" for e in reg.load_errors)
    # rewards: two third-party registrations of one name refuse a run naming it
    with pytest.raises(ConfigError, match="registered by 2 distributions"):
        RewardComputer(reg.pm, [("shared_reward", 1.0, {})])


def test_a_plugin_may_replace_one_of_polyrls_rewards_with_a_warning(capsys):
    plugin = _Claims("mine", reward="numeric_match")
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [("numeric_match", 1.0, {})])
    assert computer.specs["numeric_match"].summary == "mine"  # the later (third-party) one scores
    assert "reward 'numeric_match' of polyrl is replaced by dist-mine's" in capsys.readouterr().err
