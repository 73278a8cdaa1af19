"""Helpers for the crash/resume tests: a tiny-model run config, the real CLI, strict readers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import checkpoint as ckpt

POLYRL = [sys.executable, "-m", "polyrl.cli"]
REWARD = """
def digits(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]  # chat: TRL's messages
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
"""


def write_config(tmp_path: Path, model: str, out: Path, lr: str = "1e-3", backend: str = "torch",
                 extra: str = "", reward_dir: Path | None = None, **train) -> Path:
    """A run config in ``tmp_path``; ``reward_dir``: where reward.py lives (another run's folder,
    so that a copy of that run resumes with an unchanged config)."""
    reward = (reward_dir or tmp_path) / "reward.py"
    reward.write_text(REWARD)
    settings = {"steps": 6, "prompts_per_step": 2, "threads": 1, "checkpoint_every": 1,
                "keep_checkpoints": 10, "output_dir": f'"{out}"', **train}
    config = tmp_path / f"{out.name}.toml"
    config.write_text(
        f'[model]\npath = "{model}"\n[backends]\ntrain = "{backend}"\n'
        '[generation]\ngroup_size = 4\nmax_new_tokens = 8\n'
        f'[optimizer]\nlr = {lr}\n[data]\ntask = "arithmetic"\n'
        f'[[rewards]]\nfunction = "{reward}:digits"\n{extra}[train]\n'
        + "".join(f"{k} = {v}\n" for k, v in settings.items())
    )
    return config


def train(config: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*POLYRL, "train", str(config), "--no-progress", *extra],
                          capture_output=True, text=True, timeout=timeout)


def train_here(capfd: Any, config: Path, *extra: str) -> subprocess.CompletedProcess:
    """``polyrl train`` as ``train`` runs it, but through ``polyrl.cli.main`` in this process: its
    exit code and what it wrote to stdout/stderr (``capfd``, read and cleared). Why: a subprocess
    pays torch's and transformers' imports again (~5 s of a resume test's 6-10 s); the tests whose
    point is the process itself (kill -9, signals, locks held by another process) keep ``train``."""
    from polyrl.cli import main

    capfd.readouterr()
    args = ["train", str(config), "--no-progress", *extra]
    code = main(args)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def signal_when_reached(proc: subprocess.Popen, marker: Path, sig: int = signal.SIGTERM, wait_s: float = 240,
                        settle_s: float = 0.0) -> tuple[str, float]:
    """Wait until the run ``proc`` creates ``marker`` (a plugin's "I am here now"), send it ``sig``
    ``settle_s`` later, and let it finish: (its stderr, seconds from the signal to its exit). A run
    that exits or takes past ``wait_s`` first fails the test; one still running at the end is killed."""
    try:
        deadline = time.monotonic() + wait_s
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        time.sleep(settle_s)
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
        return stderr, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def strict_loads(text: str):
    """json.loads that refuses NaN/Infinity tokens (they are not JSON)."""
    def reject(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=reject)


def metric_steps(out: Path) -> list[dict]:
    return [strict_loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def checkpoint_weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "model" / "model.safetensors"))


def final_weights(out: Path) -> dict[str, np.ndarray]:
    return checkpoint_weights(ckpt.latest_checkpoint(out / "checkpoints"))


def assert_same_weights(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)  # bitwise on CPU
