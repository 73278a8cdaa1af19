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


def test_api_run_returns_the_summary_polyrl_train_prints(tiny_model_dir, tmp_path, capsys):
    """``polyrl train`` prints the run's summary (JSON on stdout) when it ends; ``api.run`` prints
    none and returns that same summary (one ``Trainer.run`` answer, not a second copy of it) with
    the steps' metrics under ``history`` besides, the evaluations before and after included."""
    import json

    from polyrl.cli import main

    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.toml").write_text(f"""
[model]
path = "{tiny_model_dir}"
[generation]
group_size = 2
max_new_tokens = 4
[data]
path = "{tmp_path / 'rows.jsonl'}"
[[rewards]]
name = "numeric_match"
[eval]
count = 2
[train]
steps = 1
prompts_per_step = 2
output_dir = "{tmp_path / 'cli'}"
""")
    capsys.readouterr()
    assert main(["train", str(tmp_path / "run.toml"), "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = api.run(api.grpo, policy=api.Agent(tiny_model_dir, backend="torch"), prompts=rows[2:],
                      eval_prompts=rows[:2], rewards=["numeric_match"],
                      generation_config=api.GenerationConfig(max_new_tokens=4, group_size=2),
                      grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "api")),
                      progress=False)
    assert capsys.readouterr().out == ""
    assert set(summary) == set(printed) | {"history"} and summary["steps"] == printed["steps"] == 1
    assert set(summary["eval_after"]) == set(printed["eval_after"]) and len(summary["history"]) == 1
    assert {k: v.replace(str(tmp_path / "api"), "X") for k, v in summary.items() if isinstance(v, str)} \
        == {k: v.replace(str(tmp_path / "cli"), "X") for k, v in printed.items() if isinstance(v, str)}
