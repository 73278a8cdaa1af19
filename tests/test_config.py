"""TOML configs: valid files load; each bad value names its field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = {
    "model": {"path": "tiny-llama"},
    "data": {"task": "arithmetic"},
    "rewards": [{"name": "numeric_match"}],
}


def with_(section: str, **values) -> dict:
    data = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in MINIMAL.items()}
    data.setdefault(section, {})
    data[section] = {**data[section], **values}
    return data


def test_example_configs_load():
    for path in sorted((ROOT / "examples").glob("*.toml")):
        config = RunConfig.from_toml(path)
        assert config.rewards, path


def test_defaults_and_presets():
    config = RunConfig.from_dict({**MINIMAL, "algorithm": {"name": "dapo"}})
    objective = config.algorithm.objective()
    assert objective.loss_aggregation == "token_mean"
    assert objective.clip_eps_high > objective.clip_eps_low  # clip-higher
    assert config.backends.generate_backend == "torch"


@pytest.mark.parametrize(
    ("data", "field", "hint"),
    [
        (with_("generation", temperature="hot"), "generation.temperature", "expected float"),
        (with_("generation", temprature=0.7), "generation.temprature", "did you mean 'temperature'"),
        (with_("generation", group_size=1), "generation.group_size", 'algorithm.name = "reinforce"'),
        (with_("generation", group_size=0), "generation.group_size", "[1, "),
        (with_("generation", top_p=1.5), "generation.top_p", "(0, 1]"),
        (with_("train", steps=0), "train.steps", "in [1, 1000000000], got 0"),
        (with_("algorithm", name="ppo2"), "algorithm.name", "grpo"),
        (with_("algorithm", kl_estimator="k9"), "algorithm.kl_estimator", "k3"),
        (with_("algorithm", beta=-1.0), "algorithm.beta", ">= 0"),
        (with_("optimizer", lr=-1.0), "optimizer.lr", "in (0, 10)"),
        (with_("lora", rank=0), "lora.rank", "[1, "),
        ({**MINIMAL, "model": {}}, "model.path", "smollm2"),
        ({k: v for k, v in MINIMAL.items() if k != "model"}, "model.path", "[model]"),
        ({**MINIMAL, "rewards": []}, "rewards", "[[rewards]]"),
        ({**MINIMAL, "rewards": [{"name": "a", "function": "m:f"}]}, "rewards", "exactly one"),
        ({**MINIMAL, "data": {}}, "data", "task"),
        ({**MINIMAL, "trainer": {}}, "trainer", "did you mean [train]?"),
        ({**MINIMAL, "nosuch": {}}, "nosuch", "valid sections"),
    ],
)
def test_bad_values_name_the_field_and_fix(data, field, hint):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    message = str(info.value)
    assert field in message, message
    assert hint in message, message


def test_toml_syntax_error_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\npath = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        RunConfig.from_toml(bad)
    with pytest.raises(ConfigError, match="not found"):
        RunConfig.from_toml(tmp_path / "missing.toml")


def test_a_config_saved_with_a_byte_order_mark_reads_as_without_it(tmp_path):
    """Windows editors' "UTF-8 with BOM" was `not valid TOML: Invalid statement (at line 1, column
    1)`, naming nothing; the data files' readers already skipped the mark."""
    text = '[model]\npath = "m"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
    (tmp_path / "plain.toml").write_text(text, encoding="utf-8")
    (tmp_path / "bom.toml").write_text(text, encoding="utf-8-sig")
    assert (tmp_path / "bom.toml").read_bytes().startswith(b"\xef\xbb\xbf")
    assert RunConfig.from_toml(tmp_path / "bom.toml") == RunConfig.from_toml(tmp_path / "plain.toml")


def test_an_eval_path_naming_the_training_files_is_refused():
    """Only equal split names were refused: eval_path set to the training file evaluated on the
    prompts the policy trains on, silently."""
    from polyrl.config import DataSection

    with pytest.raises(ConfigError, match="data.eval_path: names the training data itself"):
        DataSection(path="data/train.jsonl", eval_path="./data/train.jsonl")
    with pytest.raises(ConfigError, match="names the training data itself"):
        DataSection(path=["b.jsonl", "a.jsonl"], eval_path=["a.jsonl", "b.jsonl"])
    assert DataSection(path="data/train.jsonl", eval_path="data/eval.jsonl").eval_path == "data/eval.jsonl"
