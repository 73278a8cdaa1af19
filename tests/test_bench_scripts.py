"""bench/summarize_runs.py, bench/mismatch.py and the other bench scripts: README figures come from runs and
samplers, not by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str):
    """``bench/<name>.py`` imported as a module (the bench folder is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_run(run: Path, rewards: list[float], correct_before: list[bool], correct_after: list[bool],
               with_mismatch: bool) -> None:
    run.mkdir()
    lines = [json.dumps({"step": 0, "phase": "before", "eval/accuracy": 0.25})]  # an eval line, no reward
    for step, reward in enumerate(rewards, start=1):
        m = {"step": step, "reward_mean": reward, "time/step": 2.0}
        if with_mismatch:
            m.update(mismatch_abs=step - 0.5, mismatch_over=0.25, mismatch_corrected=0.1, mismatch_kl=0.2)
        lines.append(json.dumps(m))
    lines.append(json.dumps({"step": len(rewards), "phase": "after", "eval/accuracy": 0.5}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    evals = [{"phase": "before", "correct": c} for c in correct_before]
    evals += [{"phase": "after", "correct": c} for c in correct_after]
    (run / "eval_completions.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def test_summary_reads_accuracy_rewards_and_mismatch(tmp_path):
    run = tmp_path / "run"
    _write_run(run, [0.0, 0.5, 1.0], [True, False, False, False], [True, True, True, False], True)
    summary = _bench("summarize_runs").summarize(run, last=2)
    assert summary["steps"] == 3
    assert summary["held_out_accuracy_before"] == 0.25
    assert summary["held_out_accuracy_after"] == 0.75
    assert summary["reward_first_step"] == 0.0
    assert summary["reward_mean_last_2"] == 0.75
    assert summary["reward_per_step"] == [0.0, 0.5, 1.0]
    assert summary["seconds_in_steps"] == 6.0
    assert summary["mismatch_abs_per_step"] == [0.5, 1.5, 2.5]
    assert summary["mismatch_corrected_per_step"] == [0.1, 0.1, 0.1]


def test_a_run_without_eval_or_mismatch_says_so(tmp_path):
    run = tmp_path / "run"
    _write_run(run, [0.25, 0.75], [], [], False)
    (run / "eval_completions.jsonl").unlink()
    summary = _bench("summarize_runs").summarize(run, last=10)
    assert summary["held_out_accuracy_before"] is None and summary["held_out_accuracy_after"] is None
    assert summary["reward_mean_last_2"] == 0.5
    assert not any(key.startswith("mismatch") for key in summary)


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_mismatch_bench_samples_from_the_generate_model(tiny_model_dir, tmp_path):
    """``--generate-model``: the sampler loads its own weights while torch scores ``--model``'s, so
    another seed's weights give a large gap and the same weights none."""
    import os
    import subprocess
    import sys

    from polyrl.testing.tiny_model import build_tiny_llama

    other = build_tiny_llama(tmp_path / "other", seed=1)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def run(gen_model: str, name: str) -> dict:
        out = tmp_path / f"{name}.json"
        subprocess.run([sys.executable, str(BENCH / "mismatch.py"), "--model", tiny_model_dir,
                        "--generate", "torch", "--train", "torch", "--generate-model", gen_model,
                        "--prompts", "2", "--n", "2", "--max-new-tokens", "4", "--out", str(out)],
                       check=True, capture_output=True, text=True, env=env, timeout=300)
        return json.loads(out.read_text())

    same, different = run(tiny_model_dir, "same"), run(str(other), "different")
    assert same["generate_model"] == tiny_model_dir and different["generate_model"] == str(other)
    assert same["tokens"] > 0 and same["mismatch_abs"] < 1e-4
    assert different["mismatch_abs"] > 100 * max(same["mismatch_abs"], 1e-6)
    assert different["cpu"]["threads"] == 1


def test_decode_matmul_bench_measures_each_row_count_and_dtype(tiny_model_dir, tmp_path):
    """bench/decode_matmul.py: a rate per dtype and row count for the model's own shapes, with the
    weight bytes it streamed; more rows reuse each weight more, so they cannot be slower per FLOP
    by a wide margin on any CPU (a broken FLOP count or timing loop would show here)."""
    pytest.importorskip("torch")
    module = _bench("decode_matmul")
    out = tmp_path / "decode.json"
    assert module.main(["--model", tiny_model_dir, "--rows", "1,64", "--dtypes", "float32", "--seconds", "0.2",
                        "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    rates = report["decode"]["float32"]
    assert set(rates) == {"1", "64"} and report["square_peak"]["peak_gflops"] > 0
    assert all(v["gflops"] > 0 and v["weight_gb_per_s"] > 0 and v["step_ms"] > 0 for v in rates.values())
    assert rates["64"]["gflops"] > rates["1"]["gflops"]
    packed = report["decode_packed"]["float32"]  # the sampler's packed weights: same FLOP count
    assert set(packed) == {"1", "64"} and packed["64"]["gflops"] > packed["1"]["gflops"] > 0
    fused = report["decode_fused"]["float32"]  # q/k/v and gate/up stacked: the same FLOPs and bytes
    assert set(fused) == {"1", "64"} and fused["64"]["gflops"] > fused["1"]["gflops"] > 0
    for rows in ("1", "64"):
        assert fused[rows]["gflops"] * fused[rows]["step_ms"] == pytest.approx(packed[rows]["gflops"] * packed[rows]["step_ms"])
    # the roofline: both bounds above the slower of the two, the overlapped one the higher
    assert report["memory_read_gb_per_s"] > 0
    for v in [*rates.values(), *packed.values(), *fused.values()]:
        assert v["roofline_gflops"] >= v["serial_gflops"] > 0
        assert v["of_roofline"] == pytest.approx(v["gflops"] / v["roofline_gflops"])


def test_decode_roofline_is_the_slower_of_arithmetic_and_streaming():
    """A step of 100 GFLOP streaming 10 GB in 2 s at a 100 GFLOP/s peak and 5 GB/s: arithmetic
    alone 1 s, streaming alone 2 s: overlapped 2 s (50 GFLOP/s), taking turns 3 s (33.3)."""
    module = _bench("decode_matmul")
    out = module.with_roofline({"gflops": 50.0, "step_ms": 2000.0, "weight_gb_per_s": 5.0}, 100.0, 5.0)
    assert out["roofline_gflops"] == pytest.approx(50.0)
    assert out["serial_gflops"] == pytest.approx(100 / 3)
    assert out["of_roofline"] == pytest.approx(1.0) and out["of_serial"] == pytest.approx(1.5)
    assert module.main(["--rows", "four"]) == 2


def test_lora_train_ab_bench_times_both_ways_on_the_same_losses(tiny_model_dir, tmp_path):
    """bench/lora_train_ab.py: peft's and the fused LoRA layers alternate on one engine; the
    report holds every round's seconds for both and refuses losses that differ."""
    pytest.importorskip("peft")
    module = _bench("lora_train_ab")
    out = tmp_path / "ab.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--prompts", "2", "--group-size", "2",
                        "--max-new-tokens", "4", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {k: len(v) for k, v in report["seconds"].items()} == {"peft": 2, "fused": 2}
    assert report["fused_vs_peft"] == pytest.approx(report["median_s"]["fused"] / report["median_s"]["peft"], abs=1e-3)
    assert report["machine"]["threads"] == 1 and report["fused_faster_in"].endswith("of 2 rounds")
    assert module.main(["--rounds", "0"]) == 2


@pytest.mark.parametrize("lora", [False, True])
def test_fused_ops_ab_bench_splits_each_way_into_matmuls_and_the_rest(tiny_model_dir, tmp_path, lora):
    """bench/fused_ops_ab.py: transformers' norms + flash attention and polyrl's fused ones
    alternate on one engine; each round's profiled step is split into matmul and other CPU time,
    and both ways trained alike (same loss and gradient norm)."""
    module = _bench("fused_ops_ab")
    out = tmp_path / "ab.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--prompts", "2", "--group-size", "2",
                        "--max-new-tokens", "4", "--output", str(out), *(["--lora"] if lora else [])]) == 0
    report = json.loads(out.read_text())
    for way in ("transformers", "fused"):
        rounds = report["rounds"][way]
        assert len(rounds["wall_s"]) == 2 and all(m > 0 and o > 0 for m, o in zip(rounds["matmul_s"], rounds["other_s"]))
    assert report["rounds"]["fused"]["loss"] == pytest.approx(report["rounds"]["transformers"]["loss"], rel=1e-4, abs=1e-6)
    median = report["median"]
    assert report["other_s_change"] == pytest.approx(median["fused"]["other_s"] - median["transformers"]["other_s"],
                                                     abs=1e-3)
    assert report["training"].startswith("LoRA" if lora else "full")
    assert module.main(["--rounds", "0"]) == 2


def test_step_pieces_ab_bench_times_every_way_and_checks_they_agree(tiny_model_dir, tmp_path):
    """bench/step_pieces_ab.py: the three attention ways give flash's output (to float32 rounding)
    and each gets a time per round; both sampling ways pick the same tokens; both target log-prob
    block sizes give the same bits; bad flags are refused."""
    module = _bench("step_pieces_ab")
    out = tmp_path / "pieces.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--reps", "1", "--prompts", "2",
                        "--group-size", "2", "--prompt-tokens", "6", "--max-new-tokens", "5", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    for part in ("attention_completion_pass", "attention_prompt_pass"):
        piece = report[part]
        assert set(piece["ms_per_layer_fwd_bwd"]) == {"flash_sdpa", "in_place_scores", "baddbmm"}
        assert all(len(t) == 2 and min(t) > 0 for t in piece["rounds_ms"].values())
        assert max(piece["max_abs_diff_vs_flash"].values()) < 1e-5
    assert report["attention_completion_pass"]["queries"] == 4 and report["attention_completion_pass"]["keys"] == 10
    sampling = report["sampling_step"]
    assert sampling["same_tokens"] and sampling["rows"] == 4
    assert all(v > 0 for v in sampling["ms_per_step"].values())
    target = report["target_logprobs"]  # 4 rows x 5 tokens; both block sizes, the same bits
    assert target["same_bits"] and target["tokens"] == 20
    assert set(target["ms_forward_with_entropy"]) == set(target["ms_backward"]) == {"blocks_16mb", "blocks_now"}
    assert all(v > 0 for v in target["ms_backward"].values())
    assert module.main(["--max-new-tokens", "1"]) == 2 and module.main(["--rounds", "0"]) == 2


@pytest.mark.parametrize("compute_dtype", [None, "bfloat16"])
def test_decode_step_ab_bench_times_both_ways_and_checks_the_same_bits(tiny_model_dir, tmp_path, compute_dtype):
    """bench/decode_step_ab.py: transformers' forward and the written-out decode step alternate on
    one engine's copy; every round's seconds for both, bit-identical samples, bad flags refused."""
    module = _bench("decode_step_ab")
    out = tmp_path / "decode.json"
    dtype = ["--compute-dtype", compute_dtype] if compute_dtype else []
    assert module.main(["--model", tiny_model_dir, "--rounds", "3", "--prompts", "2", "--group-size", "2",
                        "--max-new-tokens", "6", "--output", str(out), *dtype]) == 0
    report = json.loads(out.read_text())
    assert {k: len(v) for k, v in report["generate_s"].items()} == {"transformers": 3, "written_out": 3}
    assert report["bit_identical"] and report["compute_dtype"] == (compute_dtype or "float32")
    pairs = [t / w for t, w in zip(report["generate_s"]["transformers"], report["generate_s"]["written_out"])]
    assert report["transformers_over_written_out_each"] == pytest.approx(pairs)
    assert module.main(["--rounds", "0"]) == 2


def test_shared_prompt_ab_bench_times_both_caches_and_reports_the_rounding_gap(tiny_model_dir, tmp_path):
    """bench/shared_prompt_ab.py: per-row and shared prompt caches alternate on one engine's copy,
    with reference or random-token prompts; every round's seconds for both, their log-probs within
    rounding, bad flags refused."""
    module = _bench("shared_prompt_ab")
    for prompt_tokens in ("0", "20"):
        out = tmp_path / f"shared_{prompt_tokens}.json"
        assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--prompts", "2", "--group-size", "3",
                            "--max-new-tokens", "5", "--prompt-tokens", prompt_tokens, "--output", str(out)]) == 0
        report = json.loads(out.read_text())
        assert {k: len(v) for k, v in report["generate_s"].items()} == {"per_row": 2, "shared": 2}
        assert report["rows"] == 2 * 2 * 3 and 0 <= report["rows_parted"] <= report["rows"]
        assert 0 < report["largest_logprob_gap"] < module.ROUNDING  # different float order, same tokens' log-probs
        pairs = [r / s for r, s in zip(report["generate_s"]["per_row"], report["generate_s"]["shared"])]
        assert report["per_row_over_shared_each"] == pytest.approx(pairs)
        assert report["prompt_tokens"] == (int(prompt_tokens) or "reference")
    assert module.main(["--prompt-tokens", "-1"]) == 2 and module.main(["--rounds", "0"]) == 2


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_decode_cost_by_length_bench_times_both_samplers_per_token_and_splits_by_op_kind(tiny_model_dir, tmp_path):
    """bench/decode_cost_by_length.py: per-token milliseconds for polyrl's sampler and transformers'
    generate at each cache length, each split by kind of op (matmuls and attention on both sides);
    bad flags refused."""
    module = _bench("decode_cost_by_length")
    out = tmp_path / "cost.json"
    # the split is a difference of two profiled calls (1 and 1 + tokens new tokens), so the tokens
    # must be enough that a kind's share outweighs a busy host's noise (8 gave negative matmul time)
    assert module.main(["--model", tiny_model_dir, "--lengths", "8,24", "--rows", "2", "--tokens", "40",
                        "--rounds", "3", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [p["cache_length"] for p in report["points"]] == [8, 24]
    for point in report["points"]:
        assert {k: len(v) for k, v in point["ms_per_token_each"].items()} == {"polyrl": 3, "transformers": 3}
        assert point["transformers_over_polyrl"] == pytest.approx(
            point["ms_per_token"]["transformers"] / point["ms_per_token"]["polyrl"], rel=0.01)
        kinds = point["profiled_ms_per_token_by_kind"]
        assert set(kinds) == {"polyrl", "transformers"}
        assert all(kinds[side]["matmul"] > 0 and kinds[side]["attention"] > 0 for side in kinds)
    assert report["command"][0] == "bench/decode_cost_by_length.py"
    assert module.main(["--lengths", "8,x"]) == 2 and module.main(["--rows", "0"]) == 2
    assert module.op_kind("mkldnn::_linear_pointwise") == "matmul" and module.op_kind("aten::cat") == "concat"


def test_fixed_decode_ab_bench_times_both_ways_and_reports_the_rounding_gap(tiny_model_dir, tmp_path):
    """bench/fixed_decode_ab.py: the row-dropping loop and fixed-shape decoding take turns on two
    engines of one model; every round's seconds for both, the fixed way's steps counted (eager on
    the CPU: no graph), the same tokens' log-probs within rounding, bad flags refused."""
    module = _bench("fixed_decode_ab")
    out = tmp_path / "fixed.json"
    assert module.main(["--model", tiny_model_dir, "--device", "cpu", "--rounds", "2", "--prompts", "2",
                        "--group-size", "3", "--max-new-tokens", "6", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {k: len(v) for k, v in report["generate_s"].items()} == {"dropping": 2, "fixed": 2}
    assert report["fixed_steps"] >= 2 * 5 and report["graph_replays"] == 0
    assert report["rows"] == 2 * 2 * 3 and report["rows_parted"] == 0
    assert report["largest_logprob_gap"] < 1e-4  # float32 on the CPU: rounding only
    pairs = [d / f for d, f in zip(report["generate_s"]["dropping"], report["generate_s"]["fixed"])]
    assert report["dropping_over_fixed_each"] == pytest.approx(pairs)
    assert module.main(["--rounds", "0"]) == 2


def test_heap_warmup_bench_gives_each_steps_seconds_and_page_faults(tiny_model_dir, tmp_path):
    """bench/heap_warmup.py: every step's phases get seconds and minor page faults, from the
    process's first step on; bad flags are refused."""
    module = _bench("heap_warmup")
    out = tmp_path / "heap.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "3", "--prompts", "2", "--group-size", "2",
                        "--max-new-tokens", "4", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    steps = report["steps"]
    assert steps[0]["phase"] == "load and first sample" and steps[0]["faults"] > 0
    assert [s["step"] for s in steps[1:]] == [1, 2, 3]
    for s in steps[1:]:
        assert s["generate_s"] > 0 and s["train_s"] > 0 and s["generate_faults"] >= 0 and s["train_faults"] >= 0
    assert report["machine"]["threads"] == 1 and report["lora"] is False
    assert module.main(["--rounds", "0"]) == 2


def test_step_profile_groups_matmuls_by_what_they_compute():
    """bench/step_profile.py: a matmul's FLOPs come from its shapes, and its group from its sizes:
    the vocabulary is the output head, the LoRA rank the adapters, batched matmuls attention."""
    module = _bench("step_profile")
    assert module.matmul_flops("aten::mm", [[4, 8], [8, 16]]) == 2 * 4 * 8 * 16
    assert module.matmul_flops("aten::addmm_", [[4, 16], [4, 8], [8, 16], [], []]) == 2 * 4 * 8 * 16
    assert module.matmul_flops("aten::baddbmm", [[3, 4, 5], [3, 4, 6], [3, 6, 5], [], []]) == 2 * 3 * 4 * 6 * 5
    assert module.matmul_flops("mkldnn::_linear_pointwise", [[2, 3, 8], [16, 8], [], [], [], []]) == 2 * 6 * 8 * 16
    assert module.matmul_flops("aten::mm", [[4, 8]]) == 0.0  # shapes not recorded: no FLOPs, no crash
    vocab, rank = 1000, 16
    assert module.group_of("aten::mm", [[32, 64], [64, vocab]], vocab, rank) == "output head"
    assert module.group_of("aten::mm", [[rank, 32], [32, 64]], vocab, rank) == "adapters"
    assert module.group_of("aten::mm", [[rank, 32], [32, 64]], vocab, None) == "weights"  # full training: no rank
    assert module.group_of("aten::bmm", [[2, 4, 8], [2, 8, 4]], vocab, rank) == "attention"
    assert module.group_of("aten::mul", [[4, 8], [4, 8]], vocab, rank) == "other"


@pytest.mark.parametrize("lora", [False, True])
def test_step_profile_bench_splits_both_phases_into_groups(tiny_model_dir, tmp_path, lora):
    """bench/step_profile.py on a tiny model: both phases profiled each round, every group's share
    of the profiled CPU time summing to one, the decoder's weights among the groups, and LoRA's
    rank-r products a group of their own only with LoRA."""
    module = _bench("step_profile")
    out = tmp_path / "profile.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "1", "--prompts", "2", "--group-size", "2",
                        "--max-new-tokens", "4", "--output", str(out), *(["--lora"] if lora else [])]) == 0
    report = json.loads(out.read_text())
    for phase in ("generate", "train_step"):
        assert len(report[phase]["wall_s"]) == 1 and report[phase]["wall_s_median"] > 0
        groups = report[phase]["rounds"][0]["groups"]
        assert sum(g["share"] for g in groups.values()) == pytest.approx(1.0, abs=1e-3)
        assert groups["weights"]["gflop"] > 0 and groups["weights"]["gflops"] > 0
    assert ("adapters" in report["train_step"]["median"]) == lora
    assert report["training"].startswith("LoRA" if lora else "full")
    assert module.main(["--rounds", "0"]) == 2


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root (samples run as an unprivileged uid) and /usr/bin/python3")
def test_sandbox_cost_bench_runs_as_root(tmp_path):
    """As root a sample runs as an unprivileged uid, which cannot start an interpreter under
    root's folders (a venv over /root/.pyenv): the plain-subprocess levels stopped the bench with
    a RewardError traceback. Every level runs /usr/bin/python3 as root now, as the sandbox tests
    do, and the JSON says which; an unknown level is one ``error:`` line."""
    out = tmp_path / "cost.json"
    done = subprocess.run([sys.executable, str(BENCH / "sandbox_cost.py"), "--samples", "2", "--repeats", "1",
                           "--workers", "1", "--levels", "off,python_guard", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["python"] == "/usr/bin/python3" and result["euid"] == 0
    assert set(result["levels"]) == {"off", "python_guard"}
    assert all(len(level["runs"]) == 1 and level["ms_per_sample_median"] > 0 for level in result["levels"].values())
    assert "avx512" in result["cpu"] and result["cpu"]["model"]
    bad = subprocess.run([sys.executable, str(BENCH / "sandbox_cost.py"), "--levels", "off,bwarp"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        "error: --levels bwarp unknown. Fix: a comma-separated subset of off,python_guard,bwrap"], bad.stderr


def _kernel_ab(name: str, tiny_model_dir: str, tmp_path: Path, slow: str, fast: str) -> dict:
    """``bench/<name>.py`` (an A/B of two ways of sampling with polyrl's decode kernel) on the tiny
    model, 2 rounds of 2 prompts x 3: its report, after checking each round's seconds for both
    ways and each pair's ratio (``slow``/``fast``)."""
    from polyrl_torch import decode_kernel

    if reason := decode_kernel.unavailable_reason():
        pytest.skip(f"polyrl's decode kernel cannot run here: {reason}")
    out = tmp_path / f"{name}.json"
    assert _bench(name).main(["--model", tiny_model_dir, "--rounds", "2", "--prompts", "2", "--group-size", "3",
                              "--max-new-tokens", "6", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {k: len(v) for k, v in report["generate_s"].items()} == {slow: 2, fast: 2}
    assert report["rows"] == 2 * 2 * 3
    assert report["kernel_build"] == decode_kernel.instruction_set()  # which build's figures these are
    pairs = [a / b for a, b in zip(report["generate_s"][slow], report["generate_s"][fast])]
    assert report[f"{slow}_over_{fast}_each"] == pytest.approx(pairs)
    return report


def test_decode_kernel_ab_bench_times_both_ways_on_the_same_prompts(tiny_model_dir, tmp_path):
    """bench/decode_kernel_ab.py: the sampler on oneDNN's packed weights and on polyrl's decode
    kernel take turns on two engines of one model; every round's seconds for both, their ratios,
    the same tokens' log-probs within float32 rounding."""
    report = _kernel_ab("decode_kernel_ab", tiny_model_dir, tmp_path, "onednn", "kernel")
    assert report["largest_logprob_gap"] < 1e-4


def test_native_ops_ab_bench_times_the_step_in_torch_ops_and_in_c(tiny_model_dir, tmp_path):
    """bench/native_ops_ab.py: the written-out step in torch ops and with its elementwise ops and
    attention in C take turns on one engine; every round's seconds for both, their ratios, the same
    tokens' log-probs within float32 rounding but not bit for bit."""
    report = _kernel_ab("native_ops_ab", tiny_model_dir, tmp_path, "torch_ops", "c_ops")
    assert 0 < report["largest_logprob_gap"] < 1e-4


def test_native_build_ab_bench_times_this_build_against_another_checkouts_sources(tiny_model_dir, tmp_path, capsys):
    """bench/native_build_ab.py: one engine samples on the library built from another folder's C
    sources and on this checkout's, in turns (here the same sources: the same log-probs bit for bit);
    afterwards the process's sampler is on its own library again. A folder without the sources is
    one ``error:`` line."""
    from polyrl_torch import decode_kernel

    if reason := decode_kernel.unavailable_reason():
        pytest.skip(f"polyrl's decode kernel cannot run here: {reason}")
    module = _bench("native_build_ab")
    assert module.main(["--against", str(tmp_path), "--model", tiny_model_dir]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --against {tmp_path} holds no polyrl_torch C sources. Fix: name the polyrl_torch folder of "
        "another checkout (plugins/torch_backend/polyrl_torch)"]
    other = tmp_path / "other"
    other.mkdir()
    for path in (*decode_kernel.SOURCES, *decode_kernel.HEADERS):
        shutil.copy(path, other / path.name)
    own = decode_kernel._library
    out = tmp_path / "native_build_ab.json"
    assert module.main(["--against", str(other), "--model", tiny_model_dir, "--rounds", "2", "--prompts", "2",
                        "--group-size", "3", "--max-new-tokens", "6", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {k: len(v) for k, v in report["generate_s"].items()} == {"against": 2, "this": 2}
    assert report["largest_logprob_gap"] == 0.0 and report["rows_parted"] == 0
    assert report["against"] == str(other)
    assert decode_kernel._library is own


@pytest.mark.parametrize("name", ["decode_kernel_ab", "native_ops_ab"])
def test_kernel_ab_benches_stop_with_one_error_line_where_there_is_nothing_to_compare(name, monkeypatch, capsys):
    """Both decode-kernel A/B benches (``ab_workload.kernel_args``): a workload with nothing to time,
    and a process where the kernel cannot run (here an instruction-set cap), each exit 2 with one
    ``error:`` line, before any model loads."""
    from polyrl_torch import decode_kernel

    module = _bench(name)
    assert module.main(["--rounds", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --rounds, --prompts, --group-size, --max-new-tokens and --threads must be >= 1"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    decode_kernel.unavailable_reason.cache_clear()
    try:
        assert module.main(["--model", "no-such-model"]) == 2
        reason = decode_kernel.unavailable_reason()
    finally:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
        decode_kernel.unavailable_reason.cache_clear()
    assert reason in ("ONEDNN_MAX_CPU_ISA caps the instruction set torch uses",
                      "this CPU has neither AVX-512F nor AVX2 with FMA")
    assert capsys.readouterr().err.splitlines() == [
        f"error: polyrl's decode kernel cannot run here ({reason}); nothing to compare"]


def test_decode_kernel_probe_times_four_ways_of_one_decode_step(tiny_model_dir, tmp_path):
    """bench/decode_kernel_probe.py: oneDNN's packed matmul (the sampler's), MKL's packed sgemm and
    the probe's own AVX-512 kernel with and without prefetch, alternating on the same weights; the
    kernel's answer is checked against torch's linear before any rate is reported."""
    import platform
    import shutil

    if "avx512f" not in Path("/proc/cpuinfo").read_text() or platform.machine() != "x86_64":
        pytest.skip("the probe's kernel needs an x86_64 CPU with AVX-512F (none here)")
    if shutil.which("cc") is None:
        pytest.skip("the probe compiles its kernel with cc (no C compiler here)")
    module = _bench("decode_kernel_probe")
    out = tmp_path / "probe.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--seconds", "0.05", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    methods = {"onednn_packed", "mkl_packed", "kernel_no_prefetch", "kernel_prefetch"}
    assert set(report["gflops_per_round"]) == methods and report["rows"] == 32
    assert all(len(r) == 2 and min(r) > 0 for r in report["gflops_per_round"].values())
    assert report["ratio_to_onednn_per_round"]["onednn_packed"] == [1.0, 1.0]
    assert 0 <= report["kernel_max_relative_error"] < 1e-5 and report["square_peak_gflops"] > 0


def test_decode_kernel_probe_kernel_matches_torch_linear(tmp_path):
    """The probe's kernel multiplies 32 rows by a panel-packed weight as torch's linear does."""
    import platform
    import shutil

    if "avx512f" not in Path("/proc/cpuinfo").read_text() or platform.machine() != "x86_64":
        pytest.skip("the probe's kernel needs an x86_64 CPU with AVX-512F (none here)")
    if shutil.which("cc") is None:
        pytest.skip("the probe compiles its kernel with cc (no C compiler here)")
    torch = pytest.importorskip("torch")
    module = _bench("decode_kernel_probe")
    lib = module.compile_kernel(tmp_path)
    for n, k, dist in [(48, 37, 0), (48, 37, 1), (16, 1, 2)]:
        w, x = torch.randn(n, k), torch.randn(32, k)
        packed = module.panels_of(w)
        x_t, out = x.t().contiguous(), torch.full((32, n), float("nan"))
        lib.decode_gemm32(x_t.data_ptr(), packed.data_ptr(), out.data_ptr(), n, k, dist)
        torch.testing.assert_close(out, torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-5)


def test_copy_refresh_ab_bench_refreshes_both_ways_to_a_fresh_copys_weights(tiny_model_dir, tmp_path):
    """bench/copy_refresh_ab.py: after each small LoRA step the sampler copy is refreshed every tensor
    and changed-only, outside generate's inference mode (where the decode kernel's panels were made),
    and ends equal to a copy made afresh."""
    module = _bench("copy_refresh_ab")
    out = tmp_path / "refresh.json"
    assert module.main(["--model", tiny_model_dir, "--rounds", "2", "--steps", "1", "--prompts", "2",
                        "--group-size", "2", "--max-new-tokens", "4", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["same_as_fresh_copy"] is True
    assert {way: len(s) for way, s in report["seconds"].items()} == {"every_tensor": 2, "changed_only": 2}
