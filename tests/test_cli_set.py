"""``polyrl train CONFIG --set KEY=VALUE``: any key, TOML literals, the file's own validation."""

from __future__ import annotations

import os

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.config_overrides import apply_overrides, parse_value
from polyrl.errors import ConfigError

CONFIG = """
[model]
path = "tiny-llama"
[data]
task = "arithmetic"
[algorithm]
name = "grpo"
beta = 0.0
[[rewards]]
name = "numeric_match"
[[rewards]]
name = "length_penalty"
weight = 0.5
options = { target = 64 }
"""


@pytest.fixture()
def config_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    return path


def test_values_are_toml_literals_else_strings():
    assert parse_value("0.04") == 0.04 and isinstance(parse_value("7"), int)
    assert parse_value("true") is True
    assert parse_value("[0.9, 0.99]") == [0.9, 0.99]
    assert parse_value('"quoted"') == "quoted"
    assert parse_value("train.parquet") == "train.parquet"  # not TOML: the text itself
    assert parse_value("a b=c") == "a b=c"


def test_overrides_reach_every_kind_of_key(config_file):
    config = RunConfig.from_toml(config_file, (
        "algorithm.beta=0.04", "data.options={count = 12}", "optimizer.betas=[0.8, 0.9]",
        "rewards.1.weight=2", "lora.rank=4", "train.steps=3", "train.steps=5"))
    assert config.algorithm.beta == 0.04
    assert config.data.options == {"count": 12}  # an inline table
    assert tuple(config.optimizer.betas) == (0.8, 0.9)
    assert config.rewards[1].weight == 2 and config.rewards[0].weight == 1.0
    assert config.lora is not None and config.lora.rank == 4  # a missing table is created
    assert config.train.steps == 5  # repeated: the last one wins
    assert config.algorithm.name == "grpo"


def test_the_file_is_not_changed(config_file):
    RunConfig.from_toml(config_file, ("algorithm.beta=0.04",))
    assert config_file.read_text() == CONFIG
    data = {"algorithm": {"beta": 0.0}}
    apply_overrides(data, ["algorithm.beta=1"])
    assert data == {"algorithm": {"beta": 0.0}}


@pytest.mark.faults
@pytest.mark.parametrize(("assignment", "field", "words"), [
    ("algorithm.nosuch=1", "algorithm.nosuch", "unknown key"),
    ("nosuch.key=1", "nosuch", "unknown section"),
    ("generation.tempreature=0.5", "generation.tempreature", "temperature"),
    ("algorithm.beta=-1", "algorithm.beta", ">= 0"),
    ("optimizer.lr=nan", "optimizer.lr", "nan"),
    ("train.steps=many", "train.steps", "expected"),
    ("rewards.5.weight=1", "rewards.5", "no entry"),
    ("rewards.\u00b2.weight=1", "rewards.\u00b2", "no entry"),  # a superscript two: int() refused it, a traceback
    ("rewards.\uff10.weight=1", "rewards.\uff10", "no entry"),  # a fullwidth zero: int() read it as 0, silently
    ("algorithm.beta.x=1", "algorithm.beta.x", "not a table"),
    ("data.path=x.parquet", "data", "exactly one of"),  # the file's cross-field rules too
    ("algorithm.beta", "--set", "KEY=VALUE"),
    ("algorithm=1", "--set", "section"),
    ("=1", "--set", "KEY=VALUE"),
    ("lr=4", "--set", "write --set optimizer.lr=4"),  # a key without its section
    ("train.lr=4", "train.lr", "lr belongs to another table: optimizer.lr"),
    ("num_generations=4", "--set", "TRL's num_generations is polyrl's generation.group_size: "
                                   "--set generation.group_size=4"),
    ("scale_rewards=false", "--set", '--set algorithm.scale_rewards="none"'),
    ("loss_type=cispo", "--set", '--set algorithm.name="cispo"'),
    ("delta=2", "--set", "TRL's delta is polyrl's algorithm.dual_clip"),
])
def test_bad_overrides_are_named_like_the_file(config_file, assignment, field, words):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(config_file, (assignment,))
    assert info.value.field == field
    assert words in str(info.value)


@pytest.mark.faults
def test_cli_prints_one_error_line_for_an_unknown_key(config_file, capsys):
    assert main(["train", str(config_file), "--set", "algorithm.bta=0.04"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "algorithm.bta" in err[0]
    assert "beta" in err[0]  # the fix suggests the close match


@pytest.mark.parametrize(("assignment", "field"), [
    (b"logging.run_name=\xff", "logging.run_name"),  # a shell's $'\xff': taken as is, it broke file names later
    (b"train.output_dir=runs/\xe9t\xe9", "train.output_dir"),  # Latin-1 text
    (b"train.out\xffput_dir=x", "--set"),  # in the key: no key to name
])
def test_a_set_with_bytes_that_are_not_utf8_is_one_error_line(config_file, capsys, assignment, field):
    assert main(["train", str(config_file), "--set", os.fsdecode(assignment)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: "), err
    assert "which is not UTF-8" in err[0] and "Fix: pass the setting as UTF-8 text" in err[0], err


@pytest.mark.parametrize(("assignment", "fix"), [
    ("genration.group_size=4", "did you mean --set generation.group_size=4?"),  # a typo
    ("peft.rank=8", "did you mean --set lora.rank=8?"),  # peft's name for the table
    ("reward.weight=2", "did you mean --set rewards.0.weight=2?"),  # an array: its entry's index too
])
def test_an_unknown_section_in_a_set_gets_the_set_to_write_not_a_table_to_rename(config_file, assignment, fix):
    """The file's fix ("rename the table to [generation]") sent the user to a table the file lacks."""
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(config_file, (assignment,))
    assert info.value.field == assignment.split(".")[0] and "unknown section" in str(info.value)
    assert info.value.fix == fix and "rename the table" not in str(info.value)


def test_launch_forwards_every_set(config_file, capsys):
    """Through ``main`` in this process: what is checked is the torchrun command it prints."""
    pytest.importorskip("torch", reason="polyrl launch runs torchrun, which comes with torch")
    code = main(["launch", str(config_file), "--dry-run", "--set", "algorithm.beta=0.04",
                 "--set", "train.output_dir=x y"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "--set algorithm.beta=0.04 --set 'train.output_dir=x y'" in out.out  # shell-quoted


@pytest.mark.parametrize("assignment", ["train.steps=5", "train . steps = 5"])  # spaces: the same key to --set
def test_a_flag_and_a_set_for_the_same_key_is_one_error_line(config_file, capsys, assignment):
    assert main(["train", str(config_file), "--set", assignment, "--steps", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --steps and --set train.steps=... both set it. "
                   "Fix: give it once: drop one of --steps and --set train.steps"]


@pytest.mark.parametrize(("value", "words"), [("0", "must be >= 1, got 0"),
                                              ("10000000000", "must be an integer in [1, 1000000000]")])
def test_steps_out_of_range_name_the_field_and_a_fix(config_file, capsys, value, words):
    assert main(["train", str(config_file), "--steps", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.steps" in err[0] and words in err[0] and "Fix: e.g." in err[0], err


def test_a_folder_given_as_the_config_is_named_as_a_folder(tmp_path, capsys):
    assert main(["train", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"config file '{tmp_path}' is a directory" in err[0], err


@pytest.mark.parametrize(("given", "words"), [
    ("self.toml", "it leads into a symlink loop"),  # self.toml -> self.toml
    ("via.toml", "it leads into a symlink loop"),  # via.toml -> a/run.toml, a -> b -> a
    ("a/run.toml", "a folder on its path is a symlink loop"),
])
def test_a_config_path_in_a_symlink_loop_is_named_as_one(tmp_path, capsys, given, words):
    """``Path.exists`` reads a symlink loop as no file, so the config was "not found" while ``ls``
    lists it; a missing file is still "not found"."""
    (tmp_path / "self.toml").symlink_to("self.toml")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "via.toml").symlink_to("a/run.toml")
    assert main(["train", str(tmp_path / given)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: config file '{tmp_path / given}' cannot be followed: {words}")
    assert "remove or repoint the looping symlink" in err[0], err
    assert main(["train", str(tmp_path / "nope.toml")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: config file '{tmp_path / 'nope.toml'}' not found. "
                                               "Fix: pass the path of an existing TOML file")


def test_ctrl_c_before_a_command_handles_signals_is_one_line_and_exit_130(monkeypatch, capsys):
    import polyrl.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt  # what Ctrl-C raises while imports or a model load run

    monkeypatch.setattr(cli, "cmd_doctor", interrupted)
    assert cli.main(["doctor"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interrupted (Ctrl-C)"]  # `polyrl train` says where its run goes on: tests/test_cli_interrupt.py
