"""``polyrl bench``: every backend in its own child process, one report, ratios to the first."""

from __future__ import annotations

import json
import os

import pytest

from polyrl.bench import run_bench
from polyrl.errors import ConfigError


@pytest.fixture(autouse=True)
def private_speed_records(tmp_path, monkeypatch):
    """Benches record generation speeds (speed_records); keep the user's cache out of it."""
    monkeypatch.setattr("polyrl.bench.speed_records.default_cache_dir", lambda: tmp_path / "cache")


@pytest.mark.slow  # two bench children, each loading torch and the model
def test_bench_reports_each_backend_in_its_own_process(tiny_model_dir, tmp_path):
    out = tmp_path / "bench.json"
    report = run_bench(model=tiny_model_dir, backends=["torch", "torch"], prompts=2, group_size=2,
                       max_new_tokens=4, threads=1, steps=1, output=str(out))
    assert json.loads(out.read_text()) == report
    assert report["machine"]["threads"] == 1
    assert report["machine"]["model"] and report["machine"]["cpus"] >= 1  # figures name their CPU
    assert "isa_limits" not in report["machine"]  # none set: the CPU's own kernels
    first, second = report["results"]
    for r in (first, second):
        assert "error" not in r, r
        assert r["generate_s"] > 0 and r["train_step_s"] > 0 and r["tokens_per_step"] >= 4
        assert r["peak_rss_mb"] > 50
    for r in (first, second):  # every timed step is kept: the run's spread
        assert len(r["step_s_each"]) == r["steps_timed"] == 1 and r["step_s_each"][0] == pytest.approx(r["step_s"])
    assert first["generate_s_vs_torch"] == pytest.approx(1.0)
    assert second["generate_s_vs_torch"] == pytest.approx(second["generate_s"] / first["generate_s"])
    # the train step's phases add up to (at most) the step; utilisation is against the measured peak
    peak = report["machine"]["matmul_peak"]["peak_gflops"]
    assert peak > 0.5
    for r in (first, second):
        parts = r["forward_s"] + r["backward_s"] + r["optimizer_s"]
        assert 0 < parts <= r["train_step_s"]
        assert r["train_mfu"] == pytest.approx(r["train_gflops"] / peak)
        assert 0 < r["generate_mfu"] < 1.5 and 0 < r["train_mfu"] < 1.5
        assert r["workload_gflop"]["train"] == pytest.approx(3 * r["workload_gflop"]["logprobs"])
    # generation's floor from streaming the weights: one pass per token of the longest completion
    read = report["machine"]["memory_read"]["read_gb_per_s"]
    assert read > 0.5 and report["machine"]["memory_read"]["threads"] == 1
    for r in (first, second):
        floor = r["generate_floor"]
        assert floor["weight_passes"] == max(r["shapes"]["completion_lens"]) and floor["read_gb_per_s"] == read
        assert floor["taking_turns_s"] == pytest.approx(floor["arithmetic_s"] + floor["stream_s"])
        assert floor["arithmetic_s"] == pytest.approx(r["workload_gflop"]["generate"] / peak)
        assert 0 < floor["mfu_taking_turns"] < floor["mfu_overlapped"] <= 1
    assert report["chart"] == str(out.with_suffix(".png"))
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bench_whose_every_side_failed_exits_non_zero_with_one_error_line(tmp_path):
    """Every side failing for another reason than a missing --model (a folder the backend cannot
    load) measured nothing, yet exited 0: now the table and report, then one ``error:`` line. A
    failing backend is reported, not fatal: its side's result holds its error (one bench run
    checks both; each costs three children loading torch)."""
    broken = tmp_path / "broken-model"  # a config.json but no weights nor tokenizer: the torch side's load fails
    broken.mkdir()  # (a missing --model, or a folder with no config.json, is refused before any side runs)
    (broken / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = tmp_path / "b.json"
    done = _bench_cli(tmp_path, "--model", str(broken), "--backends", "torch", "--steps", "1", "--output", str(out))
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: every side of the bench failed, nothing was measured (torch: "), done.stderr
    assert "broken-model" in last and f"stderr_tail in {out}" in last and "Fix:" in last, last
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [last]
    report = json.loads(out.read_text())
    (only,) = report["results"]  # the report is still written, its error kept
    assert only["backend"] == "torch" and "broken-model" in only["error"], only
    assert "memory_read" not in report["machine"]  # nothing measured to bound: no child measured it


@pytest.mark.parametrize("side", [{"error": "OSError: no weights"}, {"step_s": 1.0}])
def test_the_memory_read_rate_is_measured_only_when_a_side_measured(tmp_path, monkeypatch, side):
    """The read rate bounds the measured sides' generation; a bench whose every side failed ran its
    torch child anyway (seconds of a 512 MB read) for a number nothing used."""
    from polyrl.bench import workload

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    reads: list[int] = []
    monkeypatch.setattr(workload, "matmul_peak", lambda *a, **k: {"peak_gflops": 100.0, "device": "cpu"})
    monkeypatch.setattr(workload, "backend_child", lambda name, *a, **k: {"backend": name, **side})
    monkeypatch.setattr(workload, "memory_read", lambda threads: reads.append(threads) or {"read_gb_per_s": 9.0})
    report = run_bench(model=str(model), backends=["torch"], prompts=2, group_size=2, max_new_tokens=4,
                       threads=1, steps=1, output=None)
    assert reads == ([] if "error" in side else [1])
    assert ("memory_read" in report["machine"]) is ("error" not in side)


def test_a_bench_with_one_side_measured_is_no_failure():
    from polyrl.bench.report import every_side_failed

    failed = {"backend": "trl", "error": "Traceback ...\nImportError: no trl"}
    assert every_side_failed({"results": [{"backend": "torch", "step_s": 1.0}, failed]}, "b.json") is None
    assert every_side_failed({"results": []}, "b.json") is None
    line = every_side_failed({"results": [failed, {"backend": "mlx", "error": "x" * 500}]}, None)
    assert line is not None and line.startswith("every side of the bench failed, nothing was measured "
                                                "(trl: ImportError: no trl; mlx: " + "x" * 200 + ")")
    assert "stderr_tail" not in line and "Fix:" in line


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_bench_runs_trl_on_the_same_workload(tiny_model_dir):
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    report = run_bench(model=tiny_model_dir, backends=["torch"], prompts=2, group_size=2,
                       max_new_tokens=4, threads=1, steps=2, output=None, trl=True)
    ours, trl = report["results"]
    assert trl["backend"] == "trl" and "error" not in trl, trl
    assert trl["trl_version"] == "1.16.0" and trl["step_s"] > 0 and trl["steps_timed"] >= 1
    assert len(trl["step_s_each"]) == trl["steps_timed"] and min(trl["step_s_each"]) <= trl["step_s"]
    assert 0 < trl["tokens_per_step"] <= 2 * 2 * 4
    assert ours["speedup_vs_trl"] == pytest.approx(trl["step_s"] / ours["step_s"])
    # the FLOP floor: the workload's FLOPs at the measured peak, and what it allows against TRL
    work = ours["workload_gflop"]
    assert ours["flop_floor_s"] == pytest.approx((work["generate"] + work["train"]) / report["machine"]["matmul_peak"]["peak_gflops"])
    assert ours["max_speedup_vs_trl"] == pytest.approx(trl["step_s"] / ours["flop_floor_s"])
    assert ours["peak_share_for_3x_trl"] == pytest.approx(3 / ours["max_speedup_vs_trl"])
    # TRL's phases, timed around its own methods, fit inside its step
    phases = [trl[k] for k in ("generate_s", "scoring_s", "forward_s", "backward_s", "optimizer_s")]
    assert all(p is not None and p >= 0 for p in phases), trl
    assert trl["generate_s"] > 0 and trl["forward_s"] > 0
    assert sum(phases) == pytest.approx(trl["step_s"], rel=1e-6)
    assert len(trl["shapes"]["completion_lens"]) == 4 and trl["generate_mfu"] > 0


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_bench_times_hf_generate_as_the_generation_baseline(tiny_model_dir, tmp_path):
    """``hf_generate``: transformers' ``model.generate`` on the same prompts in its own process;
    each backend gets its generation speed-up over it, and it never enters the speed records
    that ``generate = "auto"`` chooses from."""
    from polyrl.bench import speed_records

    report = run_bench(model=tiny_model_dir, backends=["torch"], prompts=2, group_size=3,
                       max_new_tokens=5, threads=1, steps=2, output=None, generate_only=True,
                       hf_generate=True)
    ours, hf = report["results"]
    assert hf["backend"] == "hf-generate" and "error" not in hf, hf
    assert hf["generate_s"] > 0 and len(hf["completion_lens"]) == 2 * 3
    assert all(1 <= n <= 5 for n in hf["completion_lens"]) and hf["tokens_per_step"] <= 2 * 3 * 5
    assert ours["generate_speedup_vs_hf"] == pytest.approx(hf["generate_s"] / ours["generate_s"])
    measured = speed_records.load().get(speed_records.machine_key(), {})
    assert set(next(iter(measured.values()))) == {"torch"}


def test_an_instruction_set_cap_is_recorded_and_takes_effect(monkeypatch):
    """``ATEN_CPU_CAPABILITY`` etc. make an AVX-512 CPU run its AVX2 kernels (a stand-in for an
    AVX2-only machine): the report must say so, and the peak's child must have run under it."""
    from polyrl.bench.machine import cpu_info
    from polyrl.bench.workload import matmul_peak

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu_info()["isa_limits"] == {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert matmul_peak(1)["cpu_capability"] == "DEFAULT"
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert "isa_limits" not in cpu_info()


def test_printed_report_names_the_cpu_its_caps_and_each_sides_spread(capsys):
    """What `polyrl bench` prints under its table: the CPU with its SIMD flags (an AVX2-only CPU
    shows avx2, not an empty AVX-512 list), any instruction-set cap, and each side's timed steps."""
    from polyrl.bench.report import print_table

    peak = {"peak_gflops": 50.0, "library": "torch"}
    report = {
        "machine": {"model": "Some CPU", "cpus": 2, "simd_flags": ["avx", "avx2", "fma"], "threads": 1,
                    "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "matmul_peak": peak, "matmul_peaks": {}},
        "results": [{"backend": "torch", "step_s": 10.5, "step_s_each": [10.0, 11.0]},
                    {"backend": "trl", "step_s": 30.0, "step_s_each": [30.0]}],
    }
    print_table(report)
    err = capsys.readouterr().err
    assert "CPU: Some CPU, 2 CPUs, SIMD: avx, avx2, fma" in err
    assert "instruction set capped by {'ONEDNN_MAX_CPU_ISA': 'AVX2'}" in err
    assert "torch: 2 timed steps, 10.00-11.00 s (the table's step s: 10.50)" in err
    assert "trl: 1 timed steps" not in err  # one step has no spread to show
    assert "peak GPU" not in err  # a CPU run has no device memory column


def test_printed_report_of_a_gpu_run_names_the_gpu_and_its_memory(capsys):
    from polyrl.bench.report import print_table

    peak = {"peak_gflops": 700000.0, "library": "torch", "device": "cuda", "cuda_version": "13.0",
            "device_name": "NVIDIA H100 80GB HBM3"}
    report = {
        "machine": {"model": "Some CPU", "cpus": 16, "simd_flags": ["avx2"], "threads": 8, "matmul_peak": peak,
                    "matmul_peaks": {}, "device": "NVIDIA H100 80GB HBM3"},
        "results": [{"backend": "torch", "step_s": 2.0, "peak_rss_mb": 3000.0, "peak_device_mb": 41234.0},
                    {"backend": "mlx", "step_s": 3.0, "mfu_note": "no matmul peak measured on Device(gpu, 0)"}],
    }
    print_table(report)
    err = capsys.readouterr().err
    assert "device: NVIDIA H100 80GB HBM3 (cuda, CUDA 13.0)" in err
    assert "peak GPU" in err and "41234" in err
    assert "mlx: no matmul peak measured on Device(gpu, 0)" in err


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_every_side_names_the_device_it_ran_on(tiny_model_dir):
    """``--device`` (default ``auto``) reaches each child; the report says where the peak and each
    side ran (the CPU here: no accelerator on this machine)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test reads a CPU-only machine's report")
    report = run_bench(model=tiny_model_dir, backends=["torch"], prompts=1, group_size=2, max_new_tokens=3,
                       threads=1, steps=1, output=None, generate_only=True, hf_generate=True,
                       compute_dtype="bfloat16", device="cpu")
    assert report["workload"]["device"] == "cpu" and report["machine"]["device"] == "cpu"
    assert report["machine"]["matmul_peak"]["device"] == "cpu"
    ours, hf = report["results"]
    assert ours["device"] == "cpu" and hf["device"] == "cpu"
    assert hf["dtype"] == "bfloat16"  # HF samples in the precision polyrl's sampler runs in
    assert ours["generate_mfu"] > 0 and "mfu_note" not in ours


def test_a_device_the_machine_lacks_is_one_error_line(tiny_model_dir, tmp_path, bench_here):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nothing to refuse")
    done = bench_here("--model", tiny_model_dir, "--backends", "torch", "--steps", "1", "--device", "cuda",
                      "--output", str(tmp_path / "b.json"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line, no traceback
    assert done.stderr.startswith("error: --device:") and "sees no CUDA device" in done.stderr
    assert not (tmp_path / "b.json").exists()


def test_no_utilisation_against_another_devices_peak(tiny_model_dir):
    """MLX on Metal beside a peak torch measured on the CPU: no MFU, a note saying why."""
    from polyrl.bench.workload import add_utilisations, engine_device, on_cpu

    shapes = {"prompt_lens": [5, 5], "completion_lens": [3, 3], "owners": [0, 0]}
    on_gpu = {"backend": "mlx", "device": "Device(gpu, 0)", "generate_s": 1.0, "shapes": shapes}
    here = {"backend": "torch", "device": "cpu", "generate_s": 1.0, "shapes": shapes}
    add_utilisations([on_gpu, here], {"float32": {"peak_gflops": 10.0, "device": "cpu"}}, tiny_model_dir, False)
    assert "generate_mfu" not in on_gpu and "Device(gpu, 0)" in on_gpu["mfu_note"]
    assert here["generate_mfu"] > 0 and "mfu_note" not in here
    assert on_cpu("Device(cpu, 0)") and on_cpu("cpu") and not on_cpu("cuda:0") and not on_cpu("gpu:0")

    class Max:
        device_spec = "gpu:0"

    assert engine_device(Max()) == "gpu:0" and engine_device(object()) == "unknown"


def _bench_cli(tmp_path, *argv):
    """``polyrl bench ARGV`` in a subprocess (what a user runs); its own cache."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "POLYRL_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "bench", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture()
def bench_here(tmp_path, monkeypatch, capfd):
    """``polyrl bench ARGV`` through ``polyrl.cli.main`` in this process, its own cache: the exit
    code and what it printed. For refusals made before any child runs, where a fresh interpreter
    (``_bench_cli``, kept for the run that reaches its children) only added its imports."""
    import subprocess

    from polyrl.cli import main

    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path / "cache"))

    def run(*argv: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        code = main(["bench", *argv])
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)

    return run


@pytest.mark.parametrize("flag, value", [
    ("--prompts", "0"), ("--prompts", "-1"), ("--group-size", "0"), ("--group-size", "1"),
    ("--max-new-tokens", "0"), ("--steps", "0"), ("--steps", "-1"), ("--threads", "0"),
])
def test_nonsense_workload_is_one_error_line_before_anything_runs(tmp_path, flag, value, bench_here):
    out = tmp_path / "b.json"
    done = bench_here("--model", str(tmp_path / "never-loaded"), "--backends", "torch", flag, value,
                      "--output", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line, no traceback
    assert done.stderr.startswith(f"error: {flag}:") and "Fix:" in done.stderr
    assert not out.exists() and not out.with_suffix(".png").exists()


def test_group_size_one_is_a_generation_only_workload():
    """A GRPO step needs a group to compare within; timing generation alone does not."""
    from polyrl.bench.args import check_workload

    check_workload(prompts=1, group_size=1, max_new_tokens=1, threads=1, steps=1, generate_only=True)
    with pytest.raises(ConfigError, match="--group-size.*--generate-only"):
        check_workload(prompts=1, group_size=1, max_new_tokens=1, threads=1, steps=1, generate_only=False)
    with pytest.raises(ConfigError, match="--group-size"):  # TRL's GRPO trains even with --generate-only
        check_workload(prompts=1, group_size=1, max_new_tokens=1, threads=1, steps=1, generate_only=True,
                       trains_baseline=True)


@pytest.mark.parametrize("backends, needle", [
    (["nope"], "unknown backend 'nope' (known: "),
    (["torch", "remote"], "backends.options.servers"),
])
def test_an_unknown_or_unbenchable_backend_is_one_error_line(tmp_path, backends, needle, bench_here):
    out = tmp_path / "b.json"
    done = bench_here("--backends", *backends, "--steps", "1", "--output", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("error: --backends:") and needle in done.stderr and "Fix:" in done.stderr
    assert not out.exists()


def test_the_default_backends_leave_out_remote():
    """``remote`` needs servers (backends.options.servers), which bench has no flag for."""
    from polyrl.bench.args import bench_backends
    from polyrl.registry import get_registry

    reg = get_registry()
    assert "remote" in reg.available()
    default = bench_backends(reg, None)
    assert "remote" not in default and default and set(default) <= set(reg.available())
    assert bench_backends(reg, ["torch"]) == ["torch"]


@pytest.mark.parametrize("output, needle", [
    ("/proc/x.json", "cannot write"),
    ("{tmp}", "is a directory"),
    ("{tmp}/file.txt/b.json", "is a file, not a folder"),
])
def test_an_unwritable_output_is_one_error_line_before_any_benchmark(tmp_path, output, needle, bench_here):
    (tmp_path / "file.txt").write_text("x")
    done = bench_here("--backends", "torch", "--steps", "1", "--output", output.format(tmp=tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("error: --output:") and needle in done.stderr and "Fix:" in done.stderr


def test_a_child_that_dies_in_a_traceback_is_one_line_in_the_table(capsys):
    """The result's ``error`` is the exception's line; the traceback stays in ``stderr_tail``."""
    import sys

    from polyrl.bench.report import print_table
    from polyrl.bench.workload import run_child

    code = ("def load():\n    raise ValueError('header too short: the file is truncated')\n"
            "def outer():\n    load()\nouter()\n")
    result = run_child([sys.executable, "-c", code], "torch")
    assert result["error"] == "ValueError: header too short: the file is truncated"
    assert "Traceback" in result["stderr_tail"] and "in outer" in result["stderr_tail"]
    machine = {"model": "Some CPU", "cpus": 2, "simd_flags": ["avx2"], "threads": 1,
               "matmul_peak": {"peak_gflops": 50.0, "library": "torch"}, "matmul_peaks": {}}
    print_table({"machine": machine, "results": [result]})
    err = capsys.readouterr().err
    assert "torch: failed: ValueError: header too short: the file is truncated" in err
    assert "in outer" not in err and "Traceback" not in err


def test_few_shot_prompts_put_the_same_solved_examples_before_the_same_questions():
    """``--few-shot K``: long prompts made as GRPO prompts grow long in practice; without it the
    prompts are the ones every earlier bench ran (so their figures stay comparable)."""
    from polyrl.bench.workload import bench_prompts, few_shot_preamble

    short, long = bench_prompts(3), bench_prompts(3, few_shot=5)
    assert short[0][0]["content"].startswith("What is ") and short[0][0]["content"].endswith("the number only.")
    preamble = few_shot_preamble(5)
    solved = preamble.removeprefix("Examples:\n").strip().splitlines()
    assert len(solved) == 5
    for line in solved:  # each example is a correct sum
        a, b, total = (int(x) for x in line.removeprefix("What is ").replace("? ", " + ").split(" + "))
        assert a + b == total
    assert [p[0]["content"] for p in long] == [preamble + p[0]["content"] for p in short]
    with pytest.raises(ConfigError) as err:
        run_bench(model="tiny-llama", backends=["torch"], few_shot=-1, output=None)
    assert err.value.field == "--few-shot"


@pytest.mark.slow  # polyrl's and TRL's children, each loading the model
def test_few_shot_prompts_reach_every_side(tiny_model_dir):
    """The same long prompts on polyrl's side, TRL's and transformers' generate: the token counts
    each side reports match, and exceed the short prompts' by the examples."""
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    kwargs = dict(model=tiny_model_dir, backends=["torch"], prompts=2, group_size=2, max_new_tokens=3, threads=1,
                  steps=1, output=None, trl=True)
    short, long = run_bench(**kwargs)["results"], run_bench(**kwargs, few_shot=20)["results"]
    (ours_short, trl_short), (ours_long, trl_long) = short, long
    for r in (*short, *long):
        assert "error" not in r, r
    assert trl_long["shapes"]["prompt_lens"] == ours_long["shapes"]["prompt_lens"]
    assert min(ours_long["shapes"]["prompt_lens"]) > max(ours_short["shapes"]["prompt_lens"]) + 20
    assert trl_short["shapes"]["prompt_lens"] == ours_short["shapes"]["prompt_lens"]


@pytest.mark.parametrize(("output", "words"), [
    (".", "is a directory"),  # was a ValueError traceback: "." has no name to give a .png suffix
    ("/", "is a directory"),
    ("/dev/full", "is not a regular file"),  # the report failed after the whole bench
])
def test_an_output_that_is_a_folder_without_a_name_or_a_device_is_one_error(output, words):
    from polyrl.bench.args import check_output

    with pytest.raises(ConfigError) as info:
        check_output(output)
    assert info.value.field == "--output" and words in str(info.value)


def test_max_new_tokens_past_generations_bound_is_refused_before_the_bench():
    """Every side failed on it after the matmul peak was measured, and a report of failures was written."""
    from polyrl.bench.args import check_workload

    with pytest.raises(ConfigError, match=r"--max-new-tokens: must be an integer in \[1, 1048576\]"):
        check_workload(prompts=1, group_size=2, max_new_tokens=10**11, threads=1, steps=1, generate_only=False)


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: (d / "a").symlink_to(d / "b") or (d / "b").symlink_to(d / "a"), "cannot be followed: it leads into a "
                                                                              "symlink loop"),
    (lambda d: (d / "a").symlink_to(d / "gone" / "results.json"), "is a symlink to"),
])
def test_an_output_through_a_looping_or_dangling_link_is_refused_before_the_bench(tmp_path, make, words):
    """The write failed after the whole bench (a loop, a link into a missing folder), or went
    where a link to nowhere points; the chart beside it (``.png``) is checked as well."""
    from polyrl.bench.args import check_output

    make(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_output(str(tmp_path / "a"))
    assert info.value.field == "--output" and words in str(info.value), str(info.value)
    (tmp_path / "r.json").write_text("{}")
    make_png = tmp_path / "r.png"
    make_png.symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(ConfigError, match="r.png' is a symlink to"):
        check_output(str(tmp_path / "r.json"))


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: os.mkfifo(p), "is neither a folder nor a regular file"),
    (lambda p: p.mkdir(), "has no config.json"),
    (lambda p: p.write_text("{}"), "is a file but not a .gguf file"),
])
def test_a_model_that_is_no_model_is_refused_before_the_matmul_peak(tmp_path, make, words):
    """A FIFO, an empty folder or a JSON file passed (it exists): the matmul peak ran, then every side failed alike."""
    from polyrl.bench.args import resolve_bench_model
    from polyrl.registry import get_registry

    path = tmp_path / "model"
    make(path)
    with pytest.raises(ConfigError) as info:
        resolve_bench_model(get_registry(), str(path))
    assert info.value.field == "--model" and words in str(info.value), str(info.value)


def test_a_model_folder_still_resolves(tiny_model_dir):
    from polyrl.bench.args import resolve_bench_model
    from polyrl.registry import get_registry

    assert resolve_bench_model(get_registry(), tiny_model_dir) == tiny_model_dir
