"""One generation phase per rollout: what keeps launched ranks in step when their episodes differ.

Under a launcher the ranks' episodes may take different numbers of turns (or none), so they call
``generate`` a different number of times; collectives a backend needs for generation (FSDP's
weight gather) run once per rollout in ``generation_phase`` instead, and an environment that never
works stops every rank together. The launched runs are in ``test_distributed.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from polyrl.agents.episodes import EnvironmentFailed, agreed_failure
from polyrl.engine import Engine
from polyrl.errors import PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec, Capabilities, EngineConfig


class _Phased:
    """A backend whose generation phase is whatever its model name says."""

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="phased", load=lambda c: c.model, distribution="polyrl-phased",
                             capabilities=Capabilities(generate=True)))

    @hookimpl
    def generation_phase(self, engine):
        return {"none": None, "number": 42, "held": _held(engine)}[engine]


_ENTERED: list[str] = []


@contextlib.contextmanager
def _held(name: str) -> Iterator[None]:
    _ENTERED.append(name)
    yield
    _ENTERED.append("left")


def _engine(model: str) -> Engine:
    return Engine(Registry(get_plugin_manager(extra=[_Phased()])), "phased", EngineConfig(model=model))


def test_the_phase_is_the_backends_context_or_nothing_and_anything_else_is_its_fault():
    _ENTERED.clear()
    with _engine("held").generation_phase():
        assert _ENTERED == ["held"]
    assert _ENTERED == ["held", "left"]
    with _engine("none").generation_phase():  # no phase to hold: nothing happens
        pass
    with pytest.raises(PluginError, match="'phased' \\(polyrl-phased\\) hook generation_phase: returned int"):
        _engine("number").generation_phase()


@pytest.mark.parametrize("failures, stops", [
    (["environment 'x': every episode failed", "environment 'x': every episode failed (rank 1)"], True),
    ([None, "environment 'x': every episode failed"], False),  # rank 0's episodes work: the run goes on
    (["environment 'x': every episode failed", None], False),
    ([None, None], False),
])
def test_ranks_stop_on_a_failing_environment_only_together_and_with_one_text(failures, stops):
    """Each rank counts the rollouts of its shard; the run's streak is the shortest of theirs."""
    agreed = agreed_failure(failures)
    assert (agreed is not None) == stops
    if agreed is not None:
        assert isinstance(agreed, EnvironmentFailed) and str(agreed) == failures[0]


@pytest.mark.parametrize("failures", [
    [None, ("environment 'x': 32 of its calls are still running", True)],
    [("environment 'x': 32 of its calls are still running", True), "environment 'x': every episode failed"],
])
def test_a_rank_whose_environment_calls_reached_the_abandoned_cap_stops_every_rank(failures):
    """Its threads pile up whatever its peers' episodes do: one rank's is enough, and all stop together."""
    agreed = agreed_failure(failures)
    assert isinstance(agreed, EnvironmentFailed) and agreed.alone
    assert str(agreed) == "environment 'x': 32 of its calls are still running"
    assert EnvironmentFailed(str(agreed), alone=True).shared() == (str(agreed), True)
    assert EnvironmentFailed("every episode failed").shared() == "every episode failed"


def test_a_rollout_of_episodes_is_one_phase_holding_every_turns_generate_call(tiny_model_dir, tmp_path):
    """A real torch run of multi-turn episodes and an evaluation: each rollout enters the phase
    once and every generate call (one per turn) runs inside it, none outside."""
    from test_agent_training import agent_config

    from polyrl.trainer import Trainer

    trainer = Trainer(agent_config(tiny_model_dir, tmp_path / "run", train={"steps": 2},
                                   eval={"count": 2, "reward": "environment"}))
    engine = trainer.gen_engine
    phase, generate = engine.generation_phase, engine.generate
    depth, phases, calls = [0], [], []

    @contextlib.contextmanager
    def counted_phase() -> Iterator[None]:
        with phase():
            phases.append(depth[0])
            depth[0] += 1
            try:
                yield
            finally:
                depth[0] -= 1

    def counted_generate(prompts: Any, sampling: Any) -> Any:
        calls.append(depth[0])
        return generate(prompts, sampling)

    engine.generation_phase = counted_phase
    trainer.episodes.generate = counted_generate
    summary = trainer.run(progress=False)
    assert summary["steps"] == 2
    assert phases == [0] * 4  # eval before, 2 steps, eval after: never nested
    assert calls and set(calls) == {1}  # every turn's call inside its rollout's phase
    assert len(calls) > len(phases)  # episodes went on for more than one turn
