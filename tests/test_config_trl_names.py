"""Config errors a TRL user meets: GRPOConfig names point at polyrl's key, and two settings that
would fail late or train nothing (an overlong buffer past the length, greedy groups) are refused
when the config is read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.config import RunConfig
from polyrl.configtools import build
from polyrl.errors import ConfigError
from polyrl.trl_names import TRL_NAMES

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
SECTIONS = ("generation", "algorithm", "optimizer", "train")
MAPPED = sorted(name for name, entry in TRL_NAMES.items() if entry.key is not None)


def with_(**sections: dict) -> dict:
    return {**MINIMAL, **sections}


def error(data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    return info.value


def readme_trl_names() -> set[str]:
    """The GRPOConfig names in the first column of README's "Coming from TRL" table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| `GRPOConfig` | polyrl |"):].split("\n\n", 1)[0]
    return {name for row in table.splitlines()[2:] for name in re.findall(r"`([a-z_0-9]+)[` ]", row.split("|")[1])}


def test_every_name_of_the_readme_table_has_a_hint():
    assert readme_trl_names() == set(TRL_NAMES)


@pytest.mark.parametrize("name", MAPPED)
def test_a_trl_name_in_any_section_names_polyrls_key(name):
    key = TRL_NAMES[name].key
    fields = RunConfig.from_dict(MINIMAL)
    for section in SECTIONS:
        if name in {f.name for f in attrs.fields(type(getattr(fields, section)))}:
            continue  # polyrl's own key of that name: valid there
        exc = error(with_(**{section: {name: 2}}))
        assert exc.field == f"{section}.{name}", exc
        assert f"TRL's {name} is polyrl's {key}" in str(exc), exc
    exc = error(with_(**{name: 2}))  # outside any table
    assert f"TRL's {name} is polyrl's {key}" in str(exc), exc


@pytest.mark.parametrize(("section", "name", "fix"), [
    ("algorithm", "delta", "TRL's delta is polyrl's algorithm.dual_clip"),  # not "did you mean 'beta'?"
    ("train", "save_steps", "TRL's save_steps is polyrl's train.checkpoint_every"),  # not 'steps'
    # TRL's 2 tool rounds after the first answer are 3 assistant turns (GRPOTrainer._tool_call_loop)
    ("algorithm", "max_tool_calling_iterations", "polyrl's environment.max_turns: for max_tool_calling_iterations = 2, "
                                                 "write max_turns = 3 in [environment]"),
    ("train", "report_to", "TRL's report_to is polyrl's logging.report_to"),
    ("algorithm", "trust_remote_code", "polyrl's model.trust_remote_code"),
    ("algorithm", "vllm_importance_sampling_correction",  # not 'importance_sampling_level'
     "TRL's vllm_importance_sampling_correction is polyrl's algorithm.mismatch_correction"),
    ("algorithm", "vllm_importance_sampling_clip_max", "polyrl's algorithm.mismatch_cap: write mismatch_cap = 2"),
    ("algorithm", "use_bias_correction_kl",  # not 'mismatch_correction'
     "TRL's use_bias_correction_kl is polyrl's algorithm.kl_bias_correction"),
    ("algorithm", "max_prompt_length", "never truncates a prompt"),  # not 'max_completion_length' (Dr.GRPO's)
    ("optimizer", "warmup_ratio", "write warmup_steps = ceil(2 x train.steps x algorithm.num_iterations x algorithm.minibatches)"),
])
def test_trl_names_from_other_tables_or_without_equivalent_are_not_steered_to_a_close_key(section, name, fix):
    """A TRL field close to an unrelated polyrl key used to get "did you mean" that key (delta ->
    beta: the KL coefficient); it now gets polyrl's key of the same meaning, or "no equivalent"."""
    exc = error(with_(**{section: {name: 2}}))
    assert exc.field == f"{section}.{name}" and fix in str(exc) and "did you mean" not in str(exc), exc


@pytest.mark.parametrize(("value", "fix"), [
    ("dapo", 'loss_aggregation = "token_mean"'), ("bnpo", 'loss_aggregation = "token_mean"'),
    ("grpo", 'loss_aggregation = "seq_mean_token_mean"'), ("dr_grpo", 'loss_aggregation = "seq_mean_token_sum_norm"'),
    ("cispo", 'algorithm.name = "cispo"'), ("sapo", 'algorithm.name = "sapo"'),
])
def test_loss_type_values_are_translated(value, fix):
    exc = error(with_(algorithm={"loss_type": value}))
    assert exc.field == "algorithm.loss_type" and "algorithm.loss_aggregation" in str(exc) and fix in str(exc), exc
    if value not in ("cispo", "sapo"):  # TRL's value written under polyrl's own key
        exc = error(with_(algorithm={"loss_aggregation": value}))
        assert exc.field == "algorithm.loss_aggregation" and fix in str(exc), exc


def test_trl_values_and_names_through_the_other_entry_points():
    exc = error(with_(algorithm={"scale_rewards": False}))
    assert exc.field == "algorithm.scale_rewards" and 'scale_rewards = "none"' in str(exc), exc
    exc = error(with_(train={"per_device_train_batch_size": 16}))
    assert "prompts_per_step = 16 x the processes x gradient_accumulation_steps / generation.group_size" in str(exc), exc
    exc = error(with_(optimizer={"warmup_steps": 0.1}))  # transformers' fraction: not "must be an integer" alone
    assert "fraction of the updates: write warmup_steps = ceil(0.1 x train.steps" in str(exc), exc
    exc = error(with_(train={"max_steps": 8}))  # TRL counts updates, polyrl rollout batches
    assert "write steps = 8 / num_iterations in [train]" in str(exc), exc
    exc = error(with_(algorithm={"steps_per_generation": 4}))  # TRL's update is gradient_accumulation_steps slices
    assert "write minibatches = 4 / gradient_accumulation_steps in [algorithm]" in str(exc), exc
    with pytest.raises(ConfigError, match="TRL's num_generations is polyrl's generation.group_size"):
        AlgorithmConfig.preset("grpo", num_generations=8)
    exc = error(with_(lora={"r": 8}))  # a section's own hints (peft's names) still come first
    assert "peft's r" in str(exc), exc
    with pytest.raises(ConfigError, match="did you mean 'temperature'"):  # a typo is still a typo
        build(type(RunConfig.from_dict(MINIMAL).generation), {"temprature": 1.0}, "generation")


def test_polyrl_train_names_polyrls_key_for_a_trl_name(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                    '[generation]\nnum_generations = 8\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True,
                            text=True, timeout=120, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: generation.num_generations: unknown key"), lines
    assert "TRL's num_generations is polyrl's generation.group_size: write group_size = 8 in [generation]" in lines[0]


# --- algorithm.overlong_buffer against the length it shapes ------------------------------------

@pytest.mark.parametrize(("settings", "source"), [
    ({"algorithm": {"name": "dapo", "overlong_buffer": 65}}, "generation.max_new_tokens = 64"),
    ({"algorithm": {"name": "dapo", "overlong_buffer": 200}, "generation": {"max_new_tokens": 128}},
     "generation.max_new_tokens = 128"),
    ({"algorithm": {"name": "dapo", "overlong_buffer": 513}, "environment": {"tools": ["calculator"]}},
     "environment.max_episode_tokens = 512"),
])
def test_an_overlong_buffer_past_the_length_is_refused_when_the_config_is_read(settings, source):
    exc = error(with_(**settings))
    assert exc.field == "algorithm.overlong_buffer" and source in str(exc) and "Fix:" in str(exc), exc


@pytest.mark.parametrize("settings", [
    {"algorithm": {"name": "dapo", "overlong_buffer": 64}},  # the whole length: a linear length penalty
    {"algorithm": {"name": "dapo", "overlong_buffer": 0.9}},
    {"algorithm": {"name": "dapo", "overlong_buffer": 65, "max_completion_length": 100}},  # the explicit length
])
def test_an_overlong_buffer_within_the_length_loads(settings):
    config = RunConfig.from_dict(with_(**settings))
    length = config.algorithm.max_completion_length or config.generation.max_new_tokens
    assert config.algorithm.overlong_buffer_tokens(length) <= length


# --- greedy sampling with group-relative advantages ----------------------------------------------

@pytest.mark.parametrize("name", ["grpo", "dapo", "dr_grpo", "rloo", "gspo", "cispo"])
def test_greedy_groups_are_refused_for_group_relative_advantages(name):
    exc = error(with_(generation={"temperature": 0.0}, algorithm={"name": name}))
    assert exc.field == "generation.temperature" and "nothing would train" in str(exc), exc
    assert "temperature > 0, e.g. 1.0" in str(exc), exc


@pytest.mark.parametrize("settings", [
    {"generation": {"temperature": 0.0}, "algorithm": {"name": "reinforce"}},  # batch baseline: prompts differ
    {"generation": {"temperature": 0.0}, "environment": {"tools": ["calculator"]}},  # episodes can differ
    {"generation": {"temperature": 0.01}},
    {"eval": {"count": 4, "samples": 2, "pass_k": 2}},  # greedy evaluation is not sampling a group
])
def test_greedy_is_allowed_where_the_advantage_can_differ(settings):
    assert RunConfig.from_dict(with_(**settings)).rewards


def test_a_key_outside_any_table_is_named_a_key_with_its_table():
    exc = error(with_(lr=3))
    assert exc.field == "lr" and str(exc).startswith("lr: unknown key 'lr' outside any section"), exc
    assert "polyrl's key of that name is optimizer.lr: write lr = ... in [optimizer]" in str(exc)
    assert "unknown section [nosuch]" in str(error(with_(nosuch={"a": 1})))
