"""A path argument left empty (``"$OUT"`` with OUT unset) is one error naming it (``refuse_empty_path``).

``Path("")`` is the current folder: ``polyrl convert M ""`` wrote into it (or said "destination ''
exists and is not empty"), ``polyrl report ""`` drew whatever run it held, ``polyrl report RUN --html ""`` wrote no page and
exited 0, and ``polyrl bench --output ""`` was refused as "'.' is a directory"."""

from __future__ import annotations

import pytest

from polyrl.cli import main


@pytest.mark.parametrize(("argv", "field"), [
    (["convert", "tiny-llama", "", "--to", "mlx"], "dst"),
    (["convert", "tiny-llama", "  ", "--to", "hf"], "dst"),
    (["report", ""], "RUN_DIR"),
    (["bench", "--output", "", "--backends", "torch"], "--output"),
    (["report", "RUN", "--output", ""], "--output"),
    (["report", "RUN", "--html", " "], "--html"),
])
def test_an_empty_path_argument_is_one_error_naming_it(capsys, monkeypatch, tmp_path, argv, field):
    monkeypatch.chdir(tmp_path)  # where "" would have pointed: nothing may be written there
    run = tmp_path.parent / f"{tmp_path.name}-run"  # a run to report on, outside the folder watched
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5, "loss": 1.0}\n')
    argv = [str(run) if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {field}: names no path ("), line
    assert "Fix: give the path" in line
    assert not any(tmp_path.iterdir()) and [p.name for p in run.iterdir()] == ["metrics.jsonl"]
