"""``polyrl bench --compute-dtype bfloat16``: polyrl and TRL both in bf16 mixed precision, fairly.

The CLI runs end to end on the tiny model: polyrl's torch engine and TRL's GRPOTrainer each
report running bfloat16 compute on float32 weights, and their utilisation is against the
bfloat16 matmul peak the same run measured (the JSON says which peak).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from polyrl.bench.workload import bench_backend


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_bench_cli_runs_polyrl_and_trl_in_bf16_mixed_precision(tiny_model_dir, tmp_path):
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    out = tmp_path / "bench.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "POLYRL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "bench", "--model", tiny_model_dir,
                           "--backends", "torch", "--threads", "1", "--steps", "2", "--prompts", "2",
                           "--group-size", "2", "--max-new-tokens", "4", "--trl", "--compute-dtype", "bfloat16",
                           "--output", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["workload"]["compute_dtype"] == "bfloat16"
    peaks = report["machine"]["matmul_peaks"]
    assert peaks["bfloat16"]["dtype"] == "bfloat16" and peaks["bfloat16"]["peak_gflops"] > 0
    assert peaks["float32"]["dtype"] == "float32"
    ours, trl = report["results"]
    assert "error" not in ours and "error" not in trl, (ours, trl)
    assert ours["compute_dtype"] == trl["compute_dtype"] == "bfloat16"
    assert trl["param_dtype"] == "float32"  # TRL's masters stay float32: autocast, not bf16 weights
    for r in (ours, trl):
        assert r["mfu_peak_dtype"] == "bfloat16"
        assert r["train_mfu"] == pytest.approx(r["train_gflops"] / peaks["bfloat16"]["peak_gflops"])
    assert "bfloat16 matmul peak" in done.stderr


def test_bench_reports_a_backend_without_the_compute_dtype():
    pytest.importorskip("polyrl_mlx")
    result = bench_backend("mlx", "unused-model", 1, 2, 2, 1, 1, False, compute_dtype="bfloat16")
    assert result == {"backend": "mlx", "error": "backend 'mlx' does not offer compute_dtype 'bfloat16'"}
