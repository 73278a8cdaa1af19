"""Ctrl-C in `polyrl train` before the run's own stop handler is in place (imports, the models and
rewards loading): one line, exit 130, and a continue command that is true of the run's folder.
A real `polyrl train` child on the tiny model, interrupted with a real SIGINT."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from polyrl.checkpoint import latest_checkpoint

POLYRL = [sys.executable, "-m", "polyrl.cli"]

#: A reward module whose import, when $SLOW_REWARD_MARKER names a file, writes it and then waits:
#: the test's Ctrl-C lands at a known moment of the run's start (the rewards load with the models).
SLOW_REWARD = """import os, pathlib, time
if os.environ.get("SLOW_REWARD_MARKER"):
    pathlib.Path(os.environ["SLOW_REWARD_MARKER"]).write_text("importing")
    time.sleep(120)
def reward(completions, **kw):
    return [float(len(c)) for c in completions]
"""


def _config(tmp_path: Path, model: str) -> Path:
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Count to {i}:"}) + "\n" for i in range(8)))
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 2\n'
                      f'[data]\npath = "{prompts}"\n[[rewards]]\nfunction = "{tmp_path / "slow_reward.py"}:reward"\n'
                      f'[train]\nsteps = 1\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{tmp_path / "elsewhere"}"\n')
    return config


def _interrupt_while_loading(tmp_path: Path, args: list[str]) -> tuple[int, list[str]]:
    """Start `polyrl train ARGS`, Ctrl-C it while its reward module loads: (exit status, stderr
    lines that are not log lines)."""
    import os

    marker = tmp_path / "importing"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "SLOW_REWARD_MARKER": str(marker)}
    proc = subprocess.Popen([*POLYRL, "train", *args, "--no-progress"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err[-2000:]
    return proc.returncode, [line for line in err.splitlines() if "[info" not in line and line.strip()]


def test_ctrl_c_while_a_new_run_loads_says_nothing_was_saved_and_how_to_start_again(tiny_model_dir, tmp_path):
    """Main said "a training run continues from its last checkpoint with --resume" of a run that
    had saved nothing (its --resume then started from the first step under a "no checkpoint" note)."""
    config = _config(tmp_path, tiny_model_dir)
    out = tmp_path / "my run"
    code, lines = _interrupt_while_loading(tmp_path, [str(config), "--output-dir", str(out)])
    assert code == 130, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("interrupted (Ctrl-C) before the run saved anything; start it again with: "), lines
    again = lines[0].split("start it again with: ")[1]
    assert shlex.split(again) == ["polyrl", "train", str(config), "--output-dir", str(out)]


def test_ctrl_c_while_a_resumed_run_loads_names_its_checkpoint(tiny_model_dir, tmp_path):
    config = _config(tmp_path, tiny_model_dir)
    out = tmp_path / "my run"
    first = subprocess.run([*POLYRL, "train", str(config), "--output-dir", str(out), "--no-progress"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    newest = latest_checkpoint(out / "checkpoints")
    assert newest is not None
    flags = ["--steps", "3", "--output-dir", str(out)]
    code, lines = _interrupt_while_loading(tmp_path, [str(config), *flags, "--resume"])
    assert code == 130, lines
    assert len(lines) == 1 and f"the run continues from checkpoint {newest} with: " in lines[0], lines
    assert shlex.split(lines[0].split(" with: ")[1]) == ["polyrl", "train", str(config), *flags, "--resume"]


#: Run as `python -c`: the real `polyrl doctor`, whose process gets a real SIGINT at the moment the
#: CLI imports its logging setup (structlog, Rich: the slowest imports of its first half second).
CTRL_C_DURING_IMPORTS = """import importlib.abc, os, signal, sys
class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "polyrl.logs":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.modules.pop("polyrl.logs", None)
sys.meta_path.insert(0, CtrlC())
from polyrl.cli import main
sys.exit(main())
"""


def test_ctrl_c_while_the_command_imports_is_one_line_not_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-c", CTRL_C_DURING_IMPORTS, "doctor"],
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 130 and result.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"], result.stderr
