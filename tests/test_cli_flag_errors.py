"""Command-line flags that name nothing usable are one error line naming the flag: `polyrl bench
--model` that names no model (it ran the matmul peak, failed on every side, wrote a results file
of failures and exited 0), `polyrl convert --to` a format no backend writes; and a config path
with "~" is read from the home folder, as output_dir and --resume are."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture()
def polyrl(capfd):
    """``polyrl ARGV`` through ``polyrl.cli.main`` in this process: its exit code and output (a
    fresh interpreter per refusal only added its imports)."""
    from polyrl.cli import main

    def run(*argv: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        code = main(list(argv))
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)

    return run


def test_a_missing_bench_model_is_one_error_line_and_nothing_is_written(tmp_path, polyrl):
    missing, output = tmp_path / "no such model", tmp_path / "out" / "results.json"
    result = polyrl("bench", "--model", str(missing), "--steps", "1", "--output", str(output))
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: --model: model '{missing}' is neither a local path nor a known alias. Fix: ")
    assert not output.exists() and result.stdout == ""


def test_convert_to_an_unknown_format_names_the_flag_and_the_real_formats(tiny_model_dir, tmp_path, polyrl):
    """Main said "Fix: pip install polyrl[HF]", an extra that does not exist."""
    result = polyrl("convert", tiny_model_dir, str(tmp_path / "out"), "--to", "HF")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: --to: no installed backend converts '{tiny_model_dir}' to 'HF'. Fix: "), lines
    assert "polyrl[HF]" not in lines[0] and "--to mlx" in lines[0] and "--to hf" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_config_path_starting_with_a_tilde_is_read_from_the_home_folder(tmp_path, polyrl, monkeypatch):
    """A quoted "~/run.toml" (no shell expands it) was "config file '~/run.toml' not found", while
    train.output_dir and --resume take "~" as the home folder. The file is read: its typo is named."""
    (tmp_path / "run.toml").write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n'
                                       '[[rewards]]\nname = "numeric_match"\n[train]\nstepz = 1\n')
    monkeypatch.setenv("HOME", str(tmp_path))
    result = polyrl("train", "~/run.toml")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("error: train.stepz: unknown key 'stepz'. Fix: did you mean 'steps'?"), lines
