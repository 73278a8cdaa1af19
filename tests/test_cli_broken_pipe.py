"""A command whose output's reader leaves early (`polyrl config-reference | head`) ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run_with_reader_gone(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """``polyrl <args>`` with standard output a pipe whose read end is closed before it writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "polyrl.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                              timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    finally:
        os.close(write_end)


def test_a_reader_that_left_ends_the_command_like_a_unix_tool_without_a_traceback():
    done = _run_with_reader_gone(["config-reference"])
    assert b"Traceback" not in done.stderr and b"BrokenPipeError" not in done.stderr, done.stderr.decode()[-800:]
    assert done.returncode == 141  # what a shell reports for a pipeline's writer SIGPIPE ended


def test_a_reader_that_stays_gets_the_whole_output_and_exit_zero():
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "config-reference"], capture_output=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0 and done.stdout.count(b"\n") > 100 and not done.stderr.strip()


def test_a_listing_whose_reader_left_ends_like_every_other_command():
    """The listings print through Rich, whose own answer to a broken pipe is exit status 1 (a
    failure); they end as `config-reference | head` does now."""
    done = _run_with_reader_gone(["trackers"])
    assert b"Traceback" not in done.stderr, done.stderr.decode()[-800:]
    assert done.returncode == 141, done.stderr.decode()[-800:]


def test_a_standard_output_closed_before_the_start_is_one_error_line_not_a_success():
    """`polyrl config-reference >&-`: the output went nowhere and the command ended with 0."""
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "config-reference"], stderr=subprocess.PIPE,
                          preexec_fn=lambda: os.close(1), timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, done.stderr.decode()[-800:]
    assert len(lines) == 1 and lines[0].startswith("error: standard output is closed") and "> /dev/null" in lines[0]


#: ``--help`` and ``--version`` print through argparse, which dropped a failed write and exited 0
HELP_ARGVS = [["--help"], ["--version"], ["backends", "--help"]]


@pytest.mark.parametrize("argv", HELP_ARGVS)
def test_help_and_version_to_a_closed_output_are_one_error_line(argv, monkeypatch, capsys):
    """`polyrl --help >&-`: the text went to stderr instead and the command exited 0."""
    from polyrl.cli import main

    monkeypatch.setattr(sys, "stdout", None)  # what Python sets when descriptor 1 was closed at its start
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: standard output is closed") and "> /dev/null" in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose every write fails)")
def test_version_to_a_full_device_is_one_error_line(monkeypatch, capsys):
    """`polyrl --version > /dev/full` exited 0: argparse dropped the failed write."""
    from polyrl.cli import main

    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert main(["--version"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: standard output: writing the command's output failed: No space left")


def test_help_to_a_reader_that_left_ends_like_every_other_command(monkeypatch, capsys):
    """`polyrl --help` into a pipe whose reader left exited 0, as if the help was read."""
    from polyrl.cli import STDOUT_READER_GONE_EXIT, main

    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as pipe:
        monkeypatch.setattr(sys, "stdout", pipe)
        assert main(["--help"]) == STDOUT_READER_GONE_EXIT
        monkeypatch.undo()
        assert "Traceback" not in capsys.readouterr().err
