"""`polyrl bench --model` that names no model is one error line before anything is measured: it
ran the matmul peak, failed on every backend alike, wrote a results file of failures and exited 0."""

from __future__ import annotations

import subprocess
import sys


def test_a_missing_bench_model_is_one_error_line_and_nothing_is_written(tmp_path):
    missing, output = tmp_path / "no such model", tmp_path / "out" / "results.json"
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "bench", "--model", str(missing), "--steps", "1",
                             "--output", str(output)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: --model: model '{missing}' is neither a local path nor a known alias. Fix: ")
    assert not output.exists() and result.stdout == ""
