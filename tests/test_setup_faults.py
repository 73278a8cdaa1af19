"""What a run reads besides its TOML, refused as one ``error:`` line before any model loads: an
output_dir that is a file, lies inside one or loops through symlinks, and the ``POLYRL_*``
environment variables, whose bad values were replaced by a default (or read as "on") without a word."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyrl
from polyrl import logs

pytestmark = pytest.mark.faults

CORE = Path(polyrl.__file__).resolve().parents[1]  # the polyrl this test imported, for the CLI too


def polyrl_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CORE), os.environ.get("PYTHONPATH", "")]),
               "HF_HUB_OFFLINE": "1", "POLYRL_DISABLE_PLUGINS": "mlx,max", **env}
    return subprocess.run([sys.executable, "-m", "polyrl.cli", *args], capture_output=True, text=True, timeout=300,
                          env=environ, cwd=cwd)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


def write_config(tmp_path: Path, output_dir: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                    f'[generation]\ngroup_size = 2\nmax_new_tokens = 4\n[train]\nsteps = 1\nprompts_per_step = 2\n'
                    f'output_dir = "{output_dir}"\n')
    return path


def _file(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "notes.txt").write_text("a file")
    return tmp_path / "notes.txt", "is a file, not a folder"


def _inside_a_file(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "notes.txt").write_text("a file")
    return tmp_path / "notes.txt" / "run", f"is inside {tmp_path / 'notes.txt'}, a file, not a folder"


def _symlink_loop(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a", "cannot be followed"


@pytest.mark.parametrize("make", [_file, _inside_a_file, _symlink_loop])
def test_an_output_dir_that_cannot_be_a_folder_is_one_error_before_the_models_load(tmp_path, make):
    """A file was "cannot write to output_dir ...: File exists" with a fix about free space, after
    the models loaded; a symlink loop was an OSError traceback from the trackers' run name."""
    output_dir, expected = make(tmp_path)
    result = polyrl_cli("train", str(write_config(tmp_path, output_dir)), "--no-progress", cwd=tmp_path)
    line = one_error_line(result)
    assert line.startswith("error: train.output_dir: ") and expected in line and "Fix:" in line, line
    assert "engines ready" not in result.stderr  # refused before any model loaded


@pytest.mark.parametrize(("env", "expected"), [
    ({"POLYRL_PLUGIN_TIMEOUT_S": "abc"}, "POLYRL_PLUGIN_TIMEOUT_S: must be a number of seconds > 0, got 'abc'"),
    ({"POLYRL_PLUGIN_TIMEOUT_S": "-1"}, "POLYRL_PLUGIN_TIMEOUT_S: must be a number of seconds > 0, got '-1'"),
    ({"POLYRL_PLUGIN_TIMEOUT_S": "nan"}, "POLYRL_PLUGIN_TIMEOUT_S: must be a number of seconds > 0, got 'nan'"),
    ({"POLYRL_LOG_LEVEL": "LOUD"}, "POLYRL_LOG_LEVEL: is not a log level, got 'loud'"),
    ({"POLYRL_LOG_JSON": "maybe"}, "POLYRL_LOG_JSON: must be a switch, got 'maybe'"),
])
def test_a_bad_environment_variable_is_one_error_line(tmp_path, env, expected):
    """Each was replaced by its default (a 120 s plugin limit, info, JSON lines on) without a word."""
    line = one_error_line(polyrl_cli("rewards", cwd=tmp_path, **env))
    assert line.startswith(f"error: {expected}") and "Fix:" in line, line


@pytest.mark.parametrize(("value", "json_lines"), [("False", False), ("no", False), ("OFF", False), ("0", False),
                                                  ("", False), ("true", True), ("1", True), ("Yes", True)])
def test_polyrl_log_json_reads_the_usual_spellings_of_a_switch(monkeypatch, value, json_lines):
    """Only "", "0" and "false" were off: ``POLYRL_LOG_JSON=False`` or ``no`` turned JSON lines on."""
    monkeypatch.setenv("POLYRL_LOG_JSON", value)
    try:
        logs.configure()
        assert isinstance(sys.stderr, logs.JsonLinesStderr) == json_lines
    finally:
        logs.configure(json=False, level="info")


def test_a_plugin_time_limit_in_range_is_read():
    from polyrl import plugin_calls

    os.environ[plugin_calls.LIMIT_ENV] = "300"
    try:
        assert plugin_calls.limit_s() == 300.0
    finally:
        del os.environ[plugin_calls.LIMIT_ENV]
    assert plugin_calls.limit_s() == plugin_calls.DEFAULT_LIMIT_S


HOLDER = """
import sys, time
from pathlib import Path
from polyrl.run_lock import OutputDirLock
OutputDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_running_runs_output_dir_is_refused_before_the_models_load(tmp_path):
    """``polyrl train`` on the output_dir of a running run loaded its models (minutes for a large
    one) before the run lock refused it; now the lock is asked first."""
    out = tmp_path / "run"
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CORE), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=environ)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = polyrl_cli("train", str(write_config(tmp_path, out)), "--no-progress", cwd=tmp_path)
        line = one_error_line(result)
        assert f"in use by another trainer (pid {holder.pid})" in line, line
        assert "engines ready" not in result.stderr and sorted(p.name for p in out.iterdir()) == [".polyrl.lock"]
    finally:
        holder.kill()
        holder.wait()
