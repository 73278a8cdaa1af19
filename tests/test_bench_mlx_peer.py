"""``polyrl bench --mlx-lm-lora``: the MLX backend beside mlx-lm-lora's own GRPO, one workload."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("polyrl_mlx", reason="the MLX backend's peer needs the MLX backend")
pytest.importorskip("mlx_lm_lora", reason="mlx-lm-lora is the bench-only extra polyrl-mlx[bench]")


def all_linear_lora_params(model_dir: str, rank: int) -> int:
    """LoRA parameters on every linear layer of a Llama's blocks: rank x (in + out) each."""
    c = json.loads((Path(model_dir) / "config.json").read_text())
    h, inter = c["hidden_size"], c["intermediate_size"]
    kv = c["num_key_value_heads"] * c.get("head_dim", h // c["num_attention_heads"])
    per_layer = (h + h) * 2 + (h + kv) * 2 + (h + inter) * 3  # q, o; k, v; gate, up, down
    return rank * per_layer * c["num_hidden_layers"]


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_bench_runs_mlx_lm_lora_beside_the_mlx_backend(tiny_model_dir, tmp_path):
    from polyrl.types import LoraConfig

    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "polyrl.cli", "bench", "--model", tiny_model_dir, "--backends", "mlx",
         "--mlx-lm-lora", "--lora", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "4",
         "--threads", "1", "--steps", "2", "--output", str(out)],
        capture_output=True, text=True, env={**os.environ, "POLYRL_CACHE": str(tmp_path / "cache")}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "x mlx-lm-lora" in done.stderr  # the table's column
    report = json.loads(out.read_text())
    assert report["workload"]["mlx_lm_lora"] is True and report["workload"]["lora"] is True
    ours, peer = report["results"]
    assert ours["backend"] == "mlx" and "error" not in ours, ours
    assert peer["backend"] == "mlx-lm-lora" and "error" not in peer, peer
    assert peer["mlx_lm_lora_version"] == "5.10.2" and peer["steps_timed"] == 1 and peer["first_step_s"] > 0
    assert peer["step_s_each"] == [pytest.approx(peer["step_s"])]
    # it really trained: its loss was computed each step and the adapters it saved moved
    assert len(peer["losses"]) == 2 and all(loss == loss for loss in peer["losses"])
    assert peer["saved_weights_moved_l2"] > 0
    # the same LoRA as polyrl's (rank, every linear layer of the blocks), and the same BLAS
    assert peer["trainable_params"] == all_linear_lora_params(tiny_model_dir, LoraConfig().rank)
    assert peer["blas"].startswith("OpenBLAS") and peer["dtype"] == "float32" and "cpu" in peer["device"]
    # the same workload: 2 prompts x 2 completions of at most 4 tokens, the bench's prompt lengths
    assert len(peer["shapes"]["completion_lens"]) == 4 and 0 < peer["tokens_per_step"] <= 16
    assert sorted(set(peer["shapes"]["prompt_lens"])) == sorted(set(ours["shapes"]["prompt_lens"]))
    phases = [peer[k] for k in ("generate_s", "scoring_s", "forward_backward_s", "optimizer_s")]
    assert all(p > 0 for p in phases), peer
    assert sum(phases) <= peer["step_s"]
    assert peer["train_step_s"] == pytest.approx(peer["step_s"] - peer["generate_s"])
    assert peer["train_mfu"] == pytest.approx(
        peer["workload_gflop"]["train"] / peer["forward_backward_s"] / report["machine"]["matmul_peak"]["peak_gflops"])
    assert ours["speedup_vs_mlx_lm_lora"] == pytest.approx(peer["step_s"] / ours["step_s"])
    assert ours["rss_vs_mlx_lm_lora"] == pytest.approx(ours["peak_rss_mb"] / peer["peak_rss_mb"])
    assert "speedup_vs_mlx_lm_lora" not in peer


def test_the_peer_can_generate_fixed_lengths_and_train_every_weight(tiny_model_dir, tmp_path):
    """A model whose every token is an end token: mlx-lm-lora stops after one token unless EOS
    is ignored, and then runs to the length asked. Full fine-tuning moves the whole model."""
    from polyrl_mlx.bench.mlx_lm_lora_grpo import run

    model = tmp_path / "all-eos"
    shutil.copytree(tiny_model_dir, model)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    for name in ("config.json", "generation_config.json"):  # mlx-lm reads the second one last
        config = json.loads((model / name).read_text())
        config["eos_token_id"] = list(range(vocab))
        (model / name).write_text(json.dumps(config))

    natural = run(str(model), 2, 2, 5, 1, 1, False)
    assert natural["shapes"]["completion_lens"] == [1, 1, 1, 1]
    fixed = run(str(model), 2, 2, 5, 1, 1, False, True)
    assert fixed["ignore_eos"] is True and fixed["shapes"]["completion_lens"] == [5, 5, 5, 5]
    assert fixed["tokens_per_step"] == 20
    assert fixed["trainable_params"] > all_linear_lora_params(tiny_model_dir, 16)  # the whole model
    assert fixed["saved_weights_moved_l2"] > 0


@pytest.mark.faults
def test_a_missing_mlx_lm_lora_is_one_clear_line(tiny_model_dir, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlx_lm_lora" else real(name, *a))
    from polyrl.bench.workload import _mlx_lm_lora

    found = _mlx_lm_lora(tiny_model_dir, 1, 1, 1, 1, 1, True)
    assert found == {"backend": "mlx-lm-lora", "error": "mlx-lm-lora missing: pip install 'polyrl-mlx[bench]'"}
    assert len(found["error"]) <= 60  # the table shows 60 characters of an error
