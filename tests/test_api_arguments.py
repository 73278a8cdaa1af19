"""``polyrl.api.run``'s arguments: TRL's GRPOTrainer names refused with polyrl's, and a batch
larger than the prompts kept as given (the Trainer warns), as a TOML config keeps it."""

from __future__ import annotations

import pytest

from polyrl import api
from polyrl.errors import ConfigError


def test_trl_trainer_names_are_one_config_error_naming_run_arguments():
    with pytest.raises(ConfigError) as info:
        api.run(api.grpo, model="m", reward_funcs=[len], train_dataset=["a"], args=None)
    err = info.value
    assert err.field == "model"
    for trl, ours in [("model", "policy=Agent("), ("reward_funcs", "rewards="), ("train_dataset", "prompts="),
                      ("args", "grpo_config=")]:
        assert trl in err.message and f"{trl}: TRL's GRPOTrainer({trl}=...) is run({ours}" in err.fix
    assert "from polyrl.trl import GRPOTrainer" in err.fix


def test_trainer_only_argument_points_at_polyrl_trl():
    with pytest.raises(ConfigError) as info:
        api.run(api.grpo, policy=api.Agent("m"), prompts=["a"], tools=[len])
    assert info.value.field == "tools" and "run() has no tools" in info.value.fix
    assert "from polyrl.trl import GRPOTrainer" in info.value.fix


def test_typo_and_grpo_config_field_get_their_fix():
    with pytest.raises(ConfigError) as info:
        api.run(api.grpo, policy=api.Agent("m"), prompts=["a"], reward=["x"], beta=0.1)
    assert "reward: did you mean rewards?" in info.value.fix
    assert "beta: pass it as grpo_config=GRPOConfig(beta=...)" in info.value.fix


def test_prompts_per_step_is_not_shrunk_to_the_prompts():
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["a", "b", "c"],
                               grpo_config=api.GRPOConfig(prompts_per_step=8))
    assert config.train.prompts_per_step == 8  # the Trainer warns and samples some prompts twice


def test_epochs_with_fewer_prompts_than_a_batch_are_refused():
    with pytest.raises(ConfigError) as info:
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=["a", "b", "c"],
                       grpo_config=api.GRPOConfig(prompts_per_step=8, epochs=2))
    assert info.value.field == "grpo_config.epochs" and "3 or fewer" in info.value.fix


def test_the_python_apis_generation_defaults_are_the_toml_configs():
    """``api.GenerationConfig`` and the TOML's ``[generation]`` each write their defaults: a run
    started from Python must sample as the same run from a TOML file, so every field they share
    has one default (a changed one in either place fails here)."""
    import attrs

    from polyrl.config import GenerationSection

    api_defaults = {f.name: f.default for f in attrs.fields(api.GenerationConfig)}
    toml_defaults = {f.name: f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
                     for f in attrs.fields(GenerationSection)}
    shared = sorted(set(api_defaults) & set(toml_defaults))
    assert len(shared) >= 10, shared
    assert {k: api_defaults[k] for k in shared if k != "stop"} == {k: toml_defaults[k] for k in shared if k != "stop"}
    assert list(api_defaults["stop"]) == toml_defaults["stop"] == []
