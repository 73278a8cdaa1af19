"""Hostile input a config/data/reward fuzzer found slipping past the checks: each is now one error
naming its field (or file and line) and the fix, never a traceback or a silently ignored value."""

from __future__ import annotations

import json

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.config_overrides import parse_assignment
from polyrl.data import load_dataset
from polyrl.errors import ConfigError, RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.types import Completion, RewardContext

MINIMAL = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
LONG = "9" * 5000  # past int()'s 4300-digit limit, which tomllib and json let through as a bare ValueError


def test_a_number_past_pythons_digit_limit_in_the_config_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                    f"[train]\nsteps = {LONG}\n")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path)
    assert info.value.field == "config" and "line 8 holds a number of 5000 digits" in str(info.value)
    assert main(["train", str(path)]) == 2
    assert capsys.readouterr().err.startswith("error: config: ")


def test_a_number_past_pythons_digit_limit_in_set_names_the_key():
    with pytest.raises(ConfigError) as info:
        parse_assignment(f"train.steps={LONG}")
    assert info.value.field == "train.steps" and "5000 digits" in str(info.value)


def test_a_number_past_pythons_digit_limit_in_a_jsonl_row_names_its_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "a"}) + "\n" + f'{{"prompt": "b", "answer": {LONG}}}\n')
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    assert info.value.field == "data.path" and "rows.jsonl:2 holds a number of 5000 digits" in str(info.value)


@pytest.mark.parametrize(("section", "values", "field"), [
    ("generation", {"stop": ["\n", ""]}, "generation.stop[1]"),  # stopped nothing, silently
    ("train", {"output_dir": "runs/a\0b"}, "train.output_dir"),  # was os.path's "embedded null byte" traceback
    ("train", {"output_dir": "runs/" + "x" * 300}, "train.output_dir"),  # these: "File name too long" tracebacks
    ("model", {"path": "x" * 300}, "model.path"),
    ("generation", {"max_model_path": "/tmp/" + "x" * 300}, "generation.max_model_path"),
    ("rewards", {"name": ""}, "rewards[0].name"),  # was "unknown reward 'None'" once the models were loading
    ("rewards", {"function": " "}, "rewards[0].function"),
    ("generation", {"max_model_path": ""}, "generation.max_model_path"),
    ("algorithm", {"num_iterations": 2**40}, "algorithm.num_iterations"),  # one step trained ~forever  # was read as unset without a word
    ("data", {"path": ""}, "data.path"),  # was reported as the folder '.'
    ("data", {"path": ["a.jsonl", ""]}, "data.path"),
])
def test_values_no_run_can_use_are_refused_naming_the_field(section, values, field):
    data = {**MINIMAL, section: [values] if section == "rewards" else values}
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    assert info.value.field == field and info.value.fix, str(info.value)


def test_a_file_count_of_zero_is_refused_not_read_as_every_row(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(3)))
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), options={"count": 0})
    assert info.value.field == "data.options.count" and "keep no training rows" in str(info.value)


def test_a_null_prompt_on_one_line_is_not_blamed_on_the_prompt_column(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n" + json.dumps({"prompt": None, "answer": "2"}) + "\n")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    assert "rows.jsonl line 2 (row 1)" in str(info.value)
    assert info.value.fix.startswith("give this row a prompt in column 'prompt'"), info.value.fix


def test_an_empty_regex_format_pattern_is_refused_at_setup():
    with pytest.raises(ConfigError, match=r"rewards\[0\]\.options: .*an empty pattern is found in every completion"):
        RewardComputer(get_plugin_manager(entry_points=False), [("regex_format", 1.0, {"pattern": ""})])


class _Score(float):
    """A float subclass whose conversion raises something other than TypeError/ValueError."""

    def __float__(self) -> float:
        raise RuntimeError("not now")


def test_a_score_whose_float_raises_anything_is_a_reward_error_naming_it():
    def odd(completions, **kwargs):
        return [_Score(1.0) for _ in completions]

    plugin = function_reward_plugin(odd)
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})])
    context = RewardContext(rows=[{"prompt": "p"}], wanted=(plugin.name,))
    with pytest.raises(RewardError, match=r"reward 'odd' .* whose float\(\) raised RuntimeError: not now"):
        computer(["p"], [Completion(0, [1], [2], [0.0], text="a")], context)


@pytest.mark.parametrize(("argv", "field"), [
    (["train", "{long}.toml"], "config"),
    (["train", "{config}", "--resume", "{long}"], "--resume"),
    (["report", "{long}"], "RUN_DIR"),
    (["train", "{config}", "--set", 'rewards.0={{function = "{long}.py:score"}}'], "rewards[0].function"),
    (["train", "{config}", "--set", 'environment.tools=["{long}.py:lookup"]'], "environment.tools"),
    (["generate", "hi", "--model", "{long}"], "--model"),
    (["convert", "{long}", "{config}.out", "--to", "hf"], "src"),
    (["convert", "{model}", "{long}", "--to", "hf"], "dst"),
    (["bench", "--backends", "torch", "--output", "{long}.json"], "--output"),  # before any benchmark ran
])
def test_a_path_argument_past_the_name_limit_is_one_error_line(request, tmp_path, capsys, argv, field):
    """Each was ``OSError: [Errno 36] File name too long`` from ``is_file``/``is_dir``/``exists``."""
    config = tmp_path / "run.toml"
    config.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    long = str(tmp_path / ("x" * 300))
    model = request.getfixturevalue("tiny_model_dir") if "{model}" in argv else ""
    assert main([a.format(long=long, config=config, model=model) for a in argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {field}: has a name of ") and "255" in line, line


@pytest.mark.parametrize(("where", "field"), [
    ("model.path", "model.path"),
    ("train.output_dir", "train.output_dir"),
    ("config", "config"),
    ("--resume", "--resume"),
    ("report", "RUN_DIR"),
    ("bench", "--output"),
])
def test_a_path_past_the_system_path_limit_is_one_error_line(tmp_path, capsys, where, field):
    """Every name short, the whole past PATH_MAX: ``is_file``/``exists`` raised ``OSError: [Errno 36]
    File name too long`` as for one long name (the 255-byte check let it through)."""
    deep = str(tmp_path / "/".join(["x" * 200] * 25))  # 25 names of 200 bytes: about 5000 bytes
    section, _, key = where.partition(".")
    values = {"model": "tiny-llama", "output_dir": str(tmp_path / "out")}
    if key:
        values[key if key == "output_dir" else "model"] = deep
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{values["model"]}"\n[data]\ntask = "arithmetic"\n[[rewards]]\n'
                      f'name = "numeric_match"\n[train]\noutput_dir = "{values["output_dir"]}"\n')
    argv = {"config": ["train", deep + ".toml"], "--resume": ["train", str(config), "--resume", deep],
            "report": ["report", deep], "bench": ["bench", "--backends", "torch", "--output", deep + ".json"],
            }.get(where, ["train", str(config)])
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {field}: is a path of ") and "the system takes in one path" in line, line


@pytest.mark.parametrize("flag", ["--output", "--html"])
@pytest.mark.parametrize("deep", [False, True], ids=["long-name", "long-path"])
def test_a_report_output_no_file_system_can_hold_is_one_error_line(tmp_path, capsys, flag, deep):
    """``polyrl report RUN --output/--html`` with a name past 255 bytes or a path past PATH_MAX:
    ``is_dir`` raised ``OSError: [Errno 36] File name too long`` (RUN_DIR itself was checked)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    suffix = ".png" if flag == "--output" else ".html"
    target = str(tmp_path / ("/".join(["x" * 200] * 25) if deep else "x" * 300)) + suffix
    assert main(["report", str(run), flag, target]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {flag}: ") and ("255" in line or "in one path" in line), line


def test_an_output_dir_with_no_room_below_it_for_the_runs_files_is_one_error_line(tmp_path, capsys):
    """A ``train.output_dir`` just under PATH_MAX (every name short) passed the config, then
    ``.polyrl.lock`` inside it was ``OSError: [Errno 36] File name too long``, a traceback (and a
    little shorter, the first checkpoint failed after the training)."""
    import os

    limit = os.pathconf("/", "PC_PATH_MAX")
    deep = str(tmp_path)
    while len(os.fsencode(deep)) < limit - 10:  # the folder itself fits; its .polyrl.lock does not
        deep += "/" + "x" * min(200, limit - 10 - len(os.fsencode(deep)) - 1)
    config = tmp_path / "run.toml"
    config.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\noutput_dir = "{deep}"\n')
    assert main(["train", str(config)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: train.output_dir: is a path of ") and "the files written below it" in line, line
