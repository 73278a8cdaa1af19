"""Command-line input a new user's red team found slipping past the checks: each is one ``error:``
line naming the flag or key and the fix, never a traceback and never read as something else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import ConfigError

CONFIG = '[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'


@pytest.mark.parametrize(("assignment", "field", "complaint"), [
    ("train.output_dir=[1,2", "train.output_dir", "Unclosed array"),  # a run went to a folder named "[1,2"
    ('logging.run_name="exp 1', "logging.run_name", "Unterminated string"),  # kept its stray quote
    ('generation.stop=["###", "END"', "generation.stop", "Unclosed array"),  # was "expected list[str]"
    ('rewards.0.options={pattern = "x"', "rewards.0.options", "Unclosed inline table"),
    ('logging.run_name="a" b', "logging.run_name", "(at character 5)"),  # its place in VALUE
])
def test_a_set_value_that_opens_a_toml_literal_and_breaks_it_is_refused(tmp_path, assignment, field, complaint):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path, (assignment,))
    assert info.value.field == field and complaint in str(info.value), str(info.value)
    raw = assignment.partition("=")[2]
    assert info.value.fix.endswith(f"{field}='{raw}'"), info.value.fix


def test_a_set_value_given_as_a_toml_string_or_plain_text_is_still_that_text(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    config = RunConfig.from_toml(path, ("train.output_dir='[1,2'",))
    assert config.train.output_dir is not None and config.train.output_dir.endswith("[1,2")
    assert RunConfig.from_toml(path, ("train.output_dir=runs/x",)).train.output_dir.endswith("runs/x")


def test_a_broken_set_literal_is_one_error_line_and_nothing_runs(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(path), "--set", "train.output_dir=[1,2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: train.output_dir: '[1,2' opens a TOML string, array or table"), line
    assert not (tmp_path / "[1,2").exists()


@pytest.mark.parametrize(("argv", "field"), [
    (["bench", "--backends", "torch", "--steps", "1", "--model", "", "--output", "{out}"], "--model"),
    (["generate", "hi", "--model", ""], "--model"),
    (["serve", "--model", " "], "--model"),
    (["convert", "", "{out}", "--to", "hf"], "src"),
])
def test_an_empty_model_argument_is_no_model_not_the_current_folder(tmp_path, capsys, monkeypatch, argv, field):
    """``--model ""`` was the current folder: `polyrl bench` timed the matmul peak, failed on every
    side, wrote its results file; the others blamed the folder (its FIFO, its missing config.json)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "results.json"
    assert main([a.format(out=out) for a in argv]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"error: {field}: no model given"), line
    assert "Fix: " in line and captured.out == "" and not out.exists()


@pytest.mark.parametrize("command", [["generate", "hi"], ["serve", "--port", "0"]])
@pytest.mark.parametrize(("model", "said"), [
    ("no such model", "model '{model}' is neither a local path nor a known alias. Fix: give a local HF model folder"),
    ("empty", "'{model}' has no config.json. Fix: "),  # the backend's own words, naming the flag
])
def test_a_bad_model_argument_names_the_flag_not_a_config_field(tmp_path, capsys, command, model, said):
    """`polyrl generate/serve --model X` named `model.path` (a config field these commands have none
    of) or no field, with the Python API's fix ("resolve an alias first (registry.resolve_model(...))")."""
    (tmp_path / "empty").mkdir()
    path = tmp_path / model
    assert main([*command, "--backend", "torch", "--model", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --model: " + said.format(model=path)), line
    assert "model.path" not in line and "resolve_model" not in line


@pytest.mark.parametrize(("flags", "said"), [
    (["--max-length", "1"], "--max-length: must be an integer in [2, 1048576], got 1"),  # was EngineConfig.max_length
    (["--device", "nodev"], "--device: unknown device 'nodev'"),  # was device:
    (["--dtype", "float8"], "--dtype: dtype 'float8' is not supported by the torch backend"),  # named no field
])
def test_serve_engine_flags_the_backend_refuses_name_the_flag(tiny_model_dir, capsys, flags, said):
    assert main(["serve", "--backend", "torch", "--model", tiny_model_dir, "--port", "0", *flags]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: " + said), line


@pytest.mark.parametrize("argv", [["generate", "hi", "--model", "tiny-llama"], ["serve", "--model", "tiny-llama", "--port", "0"]])
def test_an_unknown_backend_argument_names_the_flag(capsys, argv):
    """`polyrl generate/serve --backend nosuch` named no flag ("unknown backend 'nosuch'")."""
    assert main([*argv, "--backend", "nosuch"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --backend: unknown backend 'nosuch' (known: "), line


def test_convert_quantize_bits_the_converter_refuses_name_the_flag(tmp_path, capsys):
    """The converter's words named its hook argument (``quantize_bits: ...``), not ``--quantize-bits``."""
    pytest.importorskip("polyrl_mlx", reason="needs polyrl-mlx, whose converter refuses it")
    assert main(["convert", "tiny-llama", str(tmp_path / "out"), "--to", "hf", "--quantize-bits", "4"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --quantize-bits: quantization is only written in MLX format"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["train", "launch"])
def test_a_blank_resume_path_is_refused_not_read_as_resume_alone(command):
    """`--resume "$CKPT"` with CKPT unset was `--resume` alone: the newest checkpoint (or a fresh run)
    instead of the one meant, without a word. Alone it still means the newest."""
    from polyrl.cli import build_parser

    parser = build_parser()
    for blank in ("", " "):
        with pytest.raises(ConfigError) as err:
            parser.parse_args([command, "run.toml", "--resume", blank])
        assert err.value.field == "--resume" and "names no checkpoint" in str(err.value)
    assert parser.parse_args([command, "run.toml", "--resume"]).resume == ""
    assert parser.parse_args([command, "run.toml"]).resume is None
    assert parser.parse_args([command, "run.toml", "--resume", "runs/x/checkpoints/step-00000002"]).resume.endswith("2")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose every write fails)")
@pytest.mark.parametrize("argv", [["config-reference"], ["backends", "--json"], ["trackers"]])
def test_an_output_that_cannot_be_written_is_one_error_line(argv):
    """`polyrl config-reference > /dev/full` (a full disk) ended in an OSError traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "polyrl.cli", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and done.returncode == 2, done.stderr[-2000:]
    assert lines[-1].startswith("error: standard output: writing the command's output failed: No space left"), lines
    assert "Fix: " in lines[-1]


def test_bench_backends_with_no_names_is_refused_not_every_backend():
    """`polyrl bench --backends $NAMES` with NAMES unset gave an empty list, read as the default:
    every usable backend was benched (minutes each) instead of the ones meant."""
    from polyrl.bench.args import bench_backends
    from polyrl.registry import get_registry

    with pytest.raises(ConfigError) as info:
        bench_backends(get_registry(), [])
    assert info.value.field == "--backends" and "leave --backends out" in info.value.fix
    assert bench_backends(get_registry(), None)  # left out: every usable one, as before


def test_bench_backends_with_no_names_is_one_error_line_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["bench", "--backends", "--steps", "1", "--output", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --backends: names no backend. Fix: "), line
    assert not out.exists()


@pytest.mark.parametrize("command", ["trackers", "rewards"])
def test_a_listing_under_columns_zero_is_drawn_not_empty(command):
    """COLUMNS=0 (a CI runner's or a script's) made Rich draw every listing zero wide: nothing was
    printed and the command exited 0."""
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", command], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "0", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"polyrl {command}" in done.stdout and done.stdout.count("\n") > 5, done.stdout
