"""``--log-json``: every stderr line is one JSON object, whoever wrote it, so a log shipper parses
all of them; and ``polyrl train`` keeps stdout for its JSON summary alone.

Once: a library's banner (W&B's ``wandb: ...`` lines), transformers' progress bar, polyrl's own
progress bar, Python warnings, the ``error:`` line and tracebacks were plain text among the JSON
lines, and trackio's banner went to stdout ahead of the summary, so ``polyrl train x.toml >
summary.json`` was no JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from polyrl import logs

REWARD = '''
import sys, warnings

def noisy(prompts, completions, **kwargs):
    warnings.warn("a reward warning\\nover two lines")
    print("a reward printing to stdout")
    sys.stderr.write("\\rprogress 10%\\rprogress 100%\\n")
    return [float(len(c) % 3) for c in completions]
'''


def _objects(stderr: str) -> list[dict]:
    """Each line of ``stderr`` as JSON; fails naming the first line that is not an object."""
    out = []
    for line in stderr.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        assert isinstance(value, dict), f"not a JSON object: {line!r}"
        out.append(value)
    return out


def _train(tmp_path: Path, model: str, *flags: str, report_to: str = '["tensorboard"]') -> subprocess.CompletedProcess:
    (tmp_path / "noisy.py").write_text(REWARD)
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        f'[data]\ntask = "arithmetic"\noptions = {{count = 8}}\n[[rewards]]\nfunction = "{tmp_path / "noisy.py"}:noisy"\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{tmp_path / "run"}"\n'
        f'[logging]\nreport_to = {report_to}\ncompletions_per_step = 1\n')
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "--log-json", "train", str(config), *flags],
                          capture_output=True, text=True, timeout=300)


def test_a_json_logged_run_writes_only_json_objects_on_stderr_and_only_its_summary_on_stdout(tmp_path,
                                                                                            tiny_model_dir):
    done = _train(tmp_path, tiny_model_dir)  # progress bar left on: JSON lines turn it off
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # the summary alone: the reward's print went to stderr
    assert summary["steps"] == 2
    events = _objects(done.stderr)
    assert sum(e["event"] == "step" for e in events) == 2
    warned = [e for e in events if e.get("category") == "UserWarning"]
    assert warned and warned[0]["event"] == "a reward warning\nover two lines" and warned[0]["level"] == "warning"
    texts = [e["event"] for e in events if e.get("logger") == "stderr"]
    assert "a reward printing to stdout" in texts and "progress 100%" in texts  # what a terminal shows
    assert not any("progress 10%" in t or "━" in t for t in texts)


def test_a_config_error_under_json_logs_is_one_json_error_line(tmp_path, tiny_model_dir):
    done = _train(tmp_path, tiny_model_dir, report_to='["no_such_tracker"]')
    assert done.returncode == 2 and done.stdout == ""
    (event,) = _objects(done.stderr)
    assert event["level"] == "error" and event["event"].startswith("error: logging.report_to: unknown tracker")


@pytest.mark.faults
def test_json_stderr_keeps_each_writer_whole_and_turns_warnings_and_uncaught_errors_into_events(capsys):
    try:
        logs.configure(json=True)
        sys.stderr.write("an unfinished line")  # then polyrl logs: two lines, not one joined
        logs.get_logger("t").info("an event", key="v")
        sys.stderr.write("a library's \x1b[1mbanner\x1b[0m\n\n")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("careful", DeprecationWarning, stacklevel=1)
        worker = threading.Thread(target=lambda: 1 / 0, name="worker")
        worker.start()
        worker.join()
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            sys.excepthook(*sys.exc_info())
        sys.stderr.write("a last line without its newline")
    finally:
        logs.configure(json=False)  # unwraps stderr, writing the last line, and puts the hooks back
    assert not isinstance(sys.stderr, logs.JsonLinesStderr) and sys.excepthook is not logs._uncaught
    events = _objects(capsys.readouterr().err)
    assert [e["event"] for e in events[:3]] == ["an unfinished line", "an event", "a library's \x1b[1mbanner\x1b[0m"]
    assert events[1]["key"] == "v" and events[3]["category"] == "DeprecationWarning"
    assert "ZeroDivisionError" in events[4]["exception"] and "worker" in events[4]["event"]
    assert events[5]["level"] == "critical" and "RuntimeError: boom" in events[5]["exception"]
    assert events[6]["event"] == "a last line without its newline" and len(events) == 7
