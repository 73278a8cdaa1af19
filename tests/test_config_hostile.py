"""What a scan of every config key with wrong, blank and misspelt values found slipping past the
checks (read as something else, ignored, or refused only after the models loaded): each is now
one ``error:`` line naming the key and the fix, through the real ``polyrl`` entry point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.run_lock import OutputDirLock, check_output_dir

BASE = '[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.mark.parametrize(("table", "extra"), [
    ('[backends]\ngenerate = ""\n', ""),  # was the train backend, without a word (" " was refused)
    ('[backends]\nreference = ""\n', "[algorithm]\nbeta = 0.04\n"),  # was the train backend too
])
def test_an_empty_backend_name_is_refused_not_read_as_unset(tmp_path, capsys, table, extra):
    key = table.split("\n")[1].split(" ")[0]
    path = tmp_path / "run.toml"
    path.write_text(BASE + table + extra + f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    assert main(["train", str(path)]) == 2
    assert _error_line(capsys) == (f"error: backends.{key}: is empty (''). "
                                   f"Fix: give backends.{key} a value, or remove the key")


def test_an_empty_backend_name_in_set_is_refused(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(BASE + f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    assert main(["train", str(path), "--set", "backends.generate="]) == 2
    assert _error_line(capsys).startswith("error: backends.generate: is empty ('')")


def test_a_split_beside_a_built_in_task_is_refused_not_ignored(tmp_path, capsys):
    """``split = "test"`` with ``task = "arithmetic"`` trained on the task's train split, silently."""
    path = tmp_path / "run.toml"
    path.write_text(BASE.replace('task = "arithmetic"\n', 'task = "arithmetic"\nsplit = "test"\n')
                    + f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    assert main(["train", str(path)]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: data.split: applies only to data.path or data.name"), line
    assert "built-in task has its own train/eval splits" in line


def test_a_split_still_applies_to_a_cached_dataset():
    config = RunConfig.from_dict({"model": {"path": "tiny-llama"}, "rewards": [{"name": "numeric_match"}],
                                  "data": {"name": "openai/gsm8k", "config": "main", "split": "train"}})
    assert config.data.split == "train"


@pytest.mark.parametrize(("table", "key", "value", "words"), [
    ("optimizer", "lerning_rate", "1e-5", "did you mean TRL's 'learning_rate'? TRL's learning_rate is polyrl's "
                                           "optimizer.lr: write lr = 1e-05 in [optimizer]"),
    ("train", "lerning_rate", "1e-5", "TRL's learning_rate is polyrl's optimizer.lr"),
    ("generation", "num_generation", "8", "TRL's num_generations is polyrl's generation.group_size"),
])
def test_a_misspelt_trl_name_points_at_polyrls_key(tmp_path, capsys, table, key, value, words):
    """The fix was the table's list of valid keys, where neither the TRL name nor polyrl's looks like
    what was written."""
    path = tmp_path / "run.toml"
    path.write_text(BASE + f"[{table}]\n{key} = {value}\n")
    assert main(["train", str(path)]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: {table}.{key}: unknown key '{key}'. Fix: ") and words in line, line


def test_a_close_key_of_the_table_still_wins_over_a_trl_name():
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"},
                             "rewards": [{"name": "numeric_match"}], "algorithm": {"betta": 0.04}})
    assert info.value.fix == "did you mean 'beta'?"


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder where no new entry can be made, even by root: /proc takes no folders."""
    if Path("/proc/self").is_dir():
        return Path("/proc") / f"polyrl-{tmp_path.name}" / "run"
    if os.geteuid() == 0:
        pytest.skip("root writes a read-only-mode folder; no /proc here")
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    return folder / "run"


def test_an_output_dir_the_run_cannot_write_is_refused_before_any_model_loads(tmp_path):
    """It was refused only when the run took its lock, after the engines had loaded."""
    where = _unwritable_folder(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_output_dir(where)
    assert info.value.field == "train.output_dir" and f"cannot write to output_dir {where}" in str(info.value)


def test_launch_dry_run_refuses_an_output_dir_the_run_cannot_write(tmp_path, capsys):
    """``polyrl launch --dry-run`` printed the torchrun command for it (exit 0)."""
    pytest.importorskip("torch", reason="polyrl launch runs torchrun, which comes with torch")
    path = tmp_path / "run.toml"
    path.write_text(BASE + f'[train]\noutput_dir = "{_unwritable_folder(tmp_path)}"\n')
    assert main(["launch", str(path), "--nproc-per-node", "1", "--dry-run"]) == 2
    assert _error_line(capsys).startswith("error: train.output_dir: cannot write to output_dir ")


@pytest.mark.parametrize("below", ["", "run/a"])
def test_an_output_dir_through_a_symlink_to_nowhere_is_refused_naming_the_link(tmp_path, below):
    """It passed the check (the folder above takes entries, and ``polyrl launch --dry-run`` exited 0),
    then the run, its models loaded, could not make the folder: "cannot write to output_dir ...:
    File exists. Fix: free space or make it writable"."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    where = link / below if below else link
    with pytest.raises(ConfigError) as info:
        check_output_dir(where)
    inside = f" is inside {link}," if below else " is"
    assert info.value.field == "train.output_dir"
    assert f"output_dir {where}{inside} a symlink to '{tmp_path / 'gone'}', a path that does not exist" in str(info.value)
    assert f"mkdir -p {tmp_path / 'gone'}" in str(info.value)
    (tmp_path / "gone").mkdir()  # the fix it gives: the run can then take the folder
    check_output_dir(where)
    lock = OutputDirLock(where)
    lock.acquire()
    lock.release()


def test_the_write_check_leaves_nothing_behind(tmp_path):
    check_output_dir(tmp_path / "new" / "run")  # the nearest existing folder is probed
    check_output_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("raw", "words"), [
    ("False", "Fix: write --set model.chat_template_kwargs.enable_thinking=false (TOML's spelling)"),
    ("None", "Fix: leave the key out of the file to unset it (TOML has no null)"),
])
def test_a_python_spelling_of_false_or_none_in_set_is_refused_not_taken_as_text(tmp_path, capsys, raw, words):
    """``--set model.chat_template_kwargs.enable_thinking=False`` passed the text "False" to the
    chat template, which reads it as true (no type check follows a template variable)."""
    path = tmp_path / "run.toml"
    path.write_text(BASE + f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    key = "model.chat_template_kwargs.enable_thinking"
    assert main(["train", str(path), "--steps", "1", "--set", f"{key}={raw}"]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: {key}: {raw!r} is not a TOML value") and words in line, line
    assert f"""quote it: --set '{key}="{raw}"'""" in line


def test_the_text_false_is_what_a_chat_template_reads_as_true():
    """Why the refusal above: jinja2 (transformers' template engine) takes "False" as true, as
    Qwen3's ``enable_thinking is false`` test does not match it."""
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Template("{% if enable_thinking is false %}off{% elif enable_thinking %}on{% endif %}")
    assert template.render(enable_thinking="False") == "on"
    assert template.render(enable_thinking=False) == "off"


def test_the_quoted_text_and_tomls_own_false_still_pass_through_set():
    from polyrl.config_overrides import parse_assignment

    assert parse_assignment('logging.run_name="False"') == (["logging", "run_name"], "False")
    assert parse_assignment("model.chat_template_kwargs.enable_thinking=false")[1] is False
    assert parse_assignment("logging.run_name=Falsey")[1] == "Falsey"


def test_a_config_file_past_the_cap_is_refused_without_reading_it_whole(tmp_path, capsys):
    """A 1 GB file passed as the config (a data file, an image) was read and decoded whole: 2 GB of
    memory and 20 s before "not valid TOML". Sparse: the test writes no such file to disk."""
    path = tmp_path / "huge.toml"
    with path.open("wb") as file:
        file.truncate((16 << 20) + 1)  # polyrl.config.MAX_CONFIG_BYTES + 1
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: config file ") and "larger than 16 MiB" in err[0], err
    assert "data.path" in err[0]


@pytest.mark.parametrize(("config", "sets", "field", "variable"), [
    ('[model]\npath = "$HOME/models/x"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n', (),
     "model.path", "$HOME"),
    ('[model]\npath = "tiny-llama"\n[data]\npath = "${DATA_DIR}/train.jsonl"\n[[rewards]]\nname = "numeric_match"\n',
     (), "data.path", "${DATA_DIR}"),
    (BASE, ("train.output_dir=$HOME/runs/x",), "train.output_dir", "$HOME"),  # a single-quoted --set: a folder "$HOME"
])
def test_a_shell_variable_in_a_path_setting_is_refused_not_read_as_part_of_the_name(tmp_path, capsys, monkeypatch,
                                                                                   config, sets, field, variable):
    monkeypatch.chdir(tmp_path)  # where the run without the check made its folder "$HOME"
    path = tmp_path / "run.toml"
    path.write_text(config)
    assert main(["train", str(path), *(f"--set={s}" for s in sets)]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: {field}: ") and f"holds {variable}, which nothing expands" in line, line
    assert "Fix: write the path itself" in line and "double quotes" in line


def test_a_path_that_exists_with_a_dollar_in_its_name_is_taken_as_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "$HOME").mkdir()
    path = tmp_path / "run.toml"
    path.write_text(BASE + '[train]\noutput_dir = "$HOME/x"\n')
    assert RunConfig.from_toml(path).train.output_dir == "$HOME/x"


@pytest.mark.parametrize(("table", "field", "char"), [
    ('[train]\noutput_dir = "runs\\new"\n', "train.output_dir", "U+000A"),  # Windows-style: "runs", a line break, "ew"
    ('[logging]\nrun_name = "exp\\t1"\n', "logging.run_name", "U+0009"),
    ('[logging]\nproject = "p\\u001b[31m"\n', "logging.project", "U+001B"),  # a terminal escape
])
def test_a_control_character_in_a_name_the_run_makes_is_refused(tmp_path, monkeypatch, table, field, char):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "run.toml"
    path.write_text(BASE + table)
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path)
    assert info.value.field == field and f"holds a control character ({char})" in str(info.value)
    assert "single quotes" in info.value.fix


def test_a_single_quoted_backslash_and_other_text_stay_a_name(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(BASE + "[train]\noutput_dir = 'runs\\new'\n[logging]\nrun_name = \"été 1\"\n")
    config = RunConfig.from_toml(path)
    assert config.train.output_dir == "runs\\new" and config.logging.run_name == "été 1"


@pytest.mark.parametrize(("encode", "what", "name"), [
    (lambda t: t.encode("utf-16"), "UTF-16 (little-endian, with a byte order mark)", "UTF-16"),
    (lambda t: t.encode("utf-16-le"), "UTF-16 (little-endian, without a byte order mark)", "UTF-16LE"),
])
def test_a_utf16_config_file_is_named_as_that_with_the_command_that_converts_it(tmp_path, capsys, encode, what,
                                                                                  name):
    """Notepad's "Unicode" was "line 1 is not valid UTF-8 (byte 0xff)", or without a byte order mark
    "not valid TOML": neither named the encoding nor how to convert the file, as the data files' do."""
    path = tmp_path / "run.toml"
    path.write_bytes(encode(BASE))
    assert main(["train", str(path)]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: config: {path} is saved as {what}, not UTF-8"), line
    assert f"iconv -f {name} -t UTF-8 {path} > {tmp_path / 'run.utf8.toml'}" in line
