"""bench/gpu_suite.sh and its helpers: what a GPU session runs must work before a GPU is lent.

The suite cannot meet a GPU here; its rehearsal (``GPU_SUITE_REHEARSE=1``: every section on the
CPU at toy sizes) runs the same script, model builder, bench commands and summary end to end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "bench" / "gpu_suite.sh"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prepared_models_carry_the_real_tokenizer_and_the_real_shapes(tmp_path):
    pytest.importorskip("polyrl_torch", reason="the embedded SmolLM2 comes with the torch backend")
    models = _load("gpu_models")
    small, large = models.prepare(tmp_path)
    assert not list(small.glob("*.safetensors")) and (small / "tokenizer.json").stat().st_size > 1_000_000
    assert (large / "tokenizer.json").read_bytes() == (small / "tokenizer.json").read_bytes()
    small_cfg, large_cfg = (json.loads((d / "config.json").read_text()) for d in (small, large))
    assert models.parameter_count(small_cfg) == 134_515_008  # SmolLM2-135M's own count
    assert 1.70e9 < models.parameter_count(large_cfg) < 1.72e9  # SmolLM2-1.7B's shape
    assert large_cfg["vocab_size"] == small_cfg["vocab_size"] == 49152


def test_built_random_weights_load_and_generate_in_polyrl(tmp_path):
    pytest.importorskip("polyrl_torch", reason="needs the torch backend")
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams

    models = _load("gpu_models")
    models.prepare(tmp_path)
    (folder,) = models.build(tmp_path, ["smollm2-135m-shape"], device="cpu", num_layers=1)
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 1
    engine = Engine(get_registry(), "torch", EngineConfig(model=str(folder), role="generate", threads=1))
    (done,) = engine.generate([[{"role": "user", "content": "2 + 2?"}]],
                              SamplingParams(max_new_tokens=4, ignore_eos=True, seed=0))
    assert len(done.completion_ids) == 4 and len(done.logprobs) == 4
    with pytest.raises(SystemExit, match="run `python bench/gpu_models.py prepare"):
        models.build(tmp_path / "elsewhere", ["smollm2-1.7b-shape"], device="cpu")
    # a quick check's 1-layer weights are never taken for the bench model (the GPU run would skip
    # building and time a one-layer model)
    with pytest.raises(SystemExit, match="holds a 1-layer build, not the 30 layers"):
        models.build(tmp_path, ["smollm2-135m-shape"], device="cpu")
    assert models.build(tmp_path, ["smollm2-135m-shape"], device="cpu", num_layers=1) == [folder]


def test_summary_reads_a_bench_report_and_junit_counts(tmp_path):
    summary = _load("gpu_summary")
    report = {"workload": {"model": "/m/smollm2-1.7b-shape", "prompts": 8, "group_size": 8, "max_new_tokens": 256,
                           "lora": True, "compute_dtype": "bfloat16"},
              "machine": {"device": "NVIDIA H100 80GB HBM3", "matmul_peak": {"peak_gflops": 60000.0},
                          "matmul_peaks": {"bfloat16": {"peak_gflops": 750000.0}}},
              "results": [{"backend": "torch", "step_s": 2.0, "generate_s": 1.5, "train_step_s": 0.5,
                           "generate_mfu": 0.1, "train_mfu": 0.4, "peak_device_mb": 30000.0,
                           "speedup_vs_trl": 3.5, "generate_speedup_vs_hf": 4.0},
                          {"backend": "trl", "error": "CUDA out of memory"}]}
    (tmp_path / "bench_x.json").write_text(json.dumps(report))
    (tmp_path / "tests.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.test_a" name="test_ok"/>'
        '<testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_a" name="test_skip"><skipped/></testcase></testsuite></testsuites>')
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_summary.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "tests: 1 passed, 1 failed, 0 errors, 1 skipped" in out and "FAILED tests.test_a.test_bad" in out
    assert "smollm2-1.7b-shape 8x8x256 LoRA bfloat16 on NVIDIA H100 80GB HBM3 (peak 750 TFLOP/s)" in out
    assert "3.50x TRL" in out and "generate 4.00x HF" in out and "GPU mem 30000 MB" in out
    assert "trl          error: CUDA out of memory" in out
    assert all(line in out for line in summary.bench_rows(report))  # the script prints what the module renders


def test_the_suite_parses_and_refuses_an_unknown_section(tmp_path):
    assert subprocess.run(["bash", "-n", str(SUITE)]).returncode == 0
    env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "RESULTS": str(tmp_path), "PYTHON": sys.executable}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SUITE), "env", "benchmark-all"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2
    assert not (tmp_path / "env.txt").exists()  # refused before any section ran
    assert ("error: unknown section 'benchmark-all'. Fix: use one of env tests small small-long large large-lora "
            "large-long profile fixed-ab max-parts max, or all") in done.stdout


@pytest.mark.slow
def test_the_suite_rehearses_every_section_on_the_cpu(tmp_path):
    """The whole suite at toy sizes on the CPU: models built, each bench JSON written with polyrl,
    TRL and HF generate on the device asked for, the tests' junit counts and the summary."""
    pytest.importorskip("trl", reason="the bench runs TRL beside polyrl (polyrl-torch[bench])")
    models = tmp_path / "models"
    _load("gpu_models").prepare(models)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "GPU_SUITE_MODELS": str(models), "OUT": str(out),
           "RESULTS": str(tmp_path / "results"), "PYTHON": sys.executable, "POLYRL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["bash", str(SUITE), "env", "tests", "small", "large-lora"], capture_output=True,
                          text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = tmp_path / "results"
    for name in ("bench_135m_short.json", "bench_1.7b_short_lora.json"):
        report = json.loads((results / name).read_text())
        sides = {r["backend"]: r for r in report["results"]}
        with_hf = name == "bench_135m_short.json"  # the LoRA point leaves HF generate to the full one
        assert set(sides) == {"torch", "trl", "hf-generate"} if with_hf else {"torch", "trl"}
        assert all("error" not in r for r in sides.values()), sides
        assert report["workload"]["device"] == "cpu" and sides["torch"]["device"] == "cpu"
        assert sides["torch"]["speedup_vs_trl"] > 0
        assert (sides["torch"].get("generate_speedup_vs_hf", 0) > 0) == with_hf
        assert report["workload"]["lora"] == name.endswith("_lora.json")
        assert report["workload"]["compute_dtype"] == _rehearsal_dtype()
    summary = (out / "summary.txt").read_text()
    assert "tests: " in summary and " 0 failed" in summary
    assert summary.count("x TRL") == 2 and (out / "gpu_results.tgz").stat().st_size > 1000
    assert "python " in (results / "env.txt").read_text()


def test_a_spent_time_budget_skips_sections_and_names_them_in_the_summary(tmp_path):
    """GPU_SUITE_SECONDS bounds one device call: a section that no longer fits is not started, and
    the summary names it so the next call runs it."""
    env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "RESULTS": str(tmp_path), "PYTHON": sys.executable,
           "GPU_SUITE_SECONDS": "60", "GPU_SUITE_MODELS": str(tmp_path / "models")}
    env.pop("OUT", None)
    _load("gpu_models").prepare(tmp_path / "models")
    done = subprocess.run(["bash", str(SUITE), "tests", "large"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not (tmp_path / "tests.log").exists() and not list(tmp_path.glob("bench_*.json"))
    summary = (tmp_path / "summary.txt").read_text()
    assert re.search(r"skipped: section tests \(needs 45 s, 3\d s left of GPU_SUITE_SECONDS=60\)", summary)
    assert re.search(r"skipped: section large \(needs 45 s, 3\d s left of GPU_SUITE_SECONDS=60\)", summary)


def test_chosen_test_ids_replace_the_tests_sections_list(tmp_path):
    """GPU_SUITE_TESTS reruns a previous call's failures alone (a device call is short)."""
    chosen = "tests/test_gpu_suite.py::test_the_suite_parses_and_refuses_an_unknown_section"
    env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "RESULTS": str(tmp_path), "PYTHON": sys.executable,
           "GPU_SUITE_TESTS": chosen, "GPU_SUITE_MODELS": str(tmp_path / "models")}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SUITE), "tests"], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests: 1 passed, 0 failed" in (tmp_path / "summary.txt").read_text()


def _rehearsal_dtype() -> str:
    """The suite rehearses in bfloat16 only where the CPU computes it natively (emulated, it is too slow)."""
    import torch

    return "bfloat16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"


def _rehearse_section(tmp_path, section: str):
    """Run one section of the suite on the CPU at toy size, on freshly prepared models; its results folder."""
    pytest.importorskip("polyrl_torch", reason="needs the torch backend")
    models = tmp_path / "models"
    _load("gpu_models").prepare(models)
    env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "RESULTS": str(tmp_path / "results"), "PYTHON": sys.executable,
           "GPU_SUITE_MODELS": str(models)}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SUITE), section], capture_output=True, text=True, env=env, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return tmp_path / "results"


@pytest.mark.slow  # a rehearsal of a GPU-only section: the longest test of the default suite
def test_the_profile_section_reports_each_phase_and_its_ops(tmp_path):
    """``profile`` (bench/gpu_profile.py) on the CPU at toy size: one generate and one train step
    profiled after a warm-up, their numbers in profile.json and the summary, their op tables."""
    folder = _rehearse_section(tmp_path, "profile") / "profile_1.7b"
    report = json.loads((folder / "profile.json").read_text())
    assert report["device"] == "cpu" and report["compute_dtype"] == _rehearsal_dtype()
    assert report["generate"]["tokens"] == 2 * 2 * 8
    for phase in ("generate", "train"):
        numbers = report[phase]
        assert numbers["wall_s"] > 0 and numbers["ops"] > 10
        assert numbers["device_kernel_s"] is None and numbers["device_busy"] is None  # no device on the CPU
        assert numbers["graph_launches"] == 0  # CUDA graphs only on a GPU (polyrl_torch.fixed_decode)
        assert "Self CPU" in (folder / f"{phase}_ops.txt").read_text()
    summary = (folder.parent / "summary.txt").read_text()
    assert "profile: " in summary and "  generate wall " in summary and "  train    wall " in summary
    assert "no device" in summary


def test_max_parts_arrive_over_two_calls_and_unpack_into_the_site(tmp_path):
    """MAX travels in parts (bench/gpu_max_wheels.sh, bench/gpu_parts.py): a call carrying one part
    keeps it and says what is missing; the call bringing the last one checks every digest, rebuilds
    the packed site and unpacks it where the suite's Python imports from."""
    import tarfile

    parts = _load("gpu_parts")
    staged = tmp_path / "stage"
    (staged / "site").mkdir(parents=True)
    (staged / "site" / "fake_max_probe.py").write_text("VALUE = 42\n# " + os.urandom(20_000).hex() + "\n")  # incompressible: several parts
    (staged / "packed").mkdir()
    with tarfile.open(staged / "packed" / "maxsite.tar.xz", "w:xz", preset=0) as tar:
        tar.add(staged / "site" / "fake_max_probe.py", arcname="fake_max_probe.py")
    manifest = parts.split(staged / "packed", tmp_path / "split", size=4096)
    assert len(manifest["parts"]) >= 2
    calls = []
    for k, names in enumerate((["part-000"], [p["name"] for p in manifest["parts"][1:]])):
        carried = tmp_path / f"carried{k}"
        carried.mkdir()
        for name in [parts.MANIFEST, *names]:
            (carried / name).write_bytes((tmp_path / "split" / name).read_bytes())
        env = {**os.environ, "GPU_SUITE_REHEARSE": "1", "RESULTS": str(tmp_path / f"results{k}"),
               "PYTHON": sys.executable, "GPU_SUITE_MAXPARTS": str(carried), "GPU_SUITE_MAXKEEP": str(tmp_path / "keep"),
               "GPU_SUITE_SITE": str(tmp_path / "site"), "GPU_SUITE_MODELS": str(tmp_path / "models"),
               "GPU_SUITE_SECONDS": "60"}  # 35 s left: enough for a call that only brings a part
        env.pop("OUT", None)
        calls.append(subprocess.run(["bash", str(SUITE), "max-parts"], capture_output=True, text=True, env=env,
                                    timeout=300, cwd=ROOT))
        assert calls[-1].returncode == 0, calls[-1].stdout[-2000:] + calls[-1].stderr[-2000:]
        if k == 0:  # kept, nothing unpacked yet
            assert "still missing: part-001" in calls[0].stdout and not (tmp_path / "site").exists()
            assert (tmp_path / "keep" / "part-000").exists()
    assert "all parts here" in calls[1].stdout and "MAX unpacked into" in calls[1].stdout
    assert (tmp_path / "site" / "fake_max_probe.py").read_text().startswith("VALUE = 42")


def test_a_damaged_part_is_refused_by_name(tmp_path):
    parts = _load("gpu_parts")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.whl").write_bytes(os.urandom(10_000))
    parts.split(tmp_path / "src", tmp_path / "split", size=4096)
    assert parts.receive(tmp_path / "split", tmp_path / "keep") == []
    damaged = bytearray((tmp_path / "keep" / "part-001").read_bytes())
    damaged[0] ^= 1
    (tmp_path / "keep" / "part-001").write_bytes(bytes(damaged))
    with pytest.raises(SystemExit, match="part part-001 is damaged"):
        parts.join(tmp_path / "keep", tmp_path / "dest")
    (tmp_path / "keep" / "part-001").write_bytes((tmp_path / "split" / "part-001").read_bytes())
    (made,) = parts.join(tmp_path / "keep", tmp_path / "dest")
    assert made.read_bytes() == (tmp_path / "src" / "a.whl").read_bytes()


@pytest.mark.slow  # a rehearsal of a GPU-only section (two bench processes per shape), like the profile one
def test_the_fixed_ab_section_times_both_ways_on_both_shapes(tmp_path):
    """``fixed-ab`` (bench/fixed_decode_ab.py) on the CPU at toy size: both model shapes, each way's
    rounds and its ratio in one JSON per shape and one summary line each (no graph on the CPU)."""
    results = _rehearse_section(tmp_path, "fixed-ab")
    summary = (results / "summary.txt").read_text()
    for shape in ("smollm2-135m-shape", "smollm2-1.7b-shape"):
        report = json.loads((results / f"fixed_ab_{shape}.json").read_text())
        assert {k: len(v) for k, v in report["generate_s"].items()} == {"dropping": 2, "fixed": 2}
        assert report["device"] == "cpu" and report["fixed_steps"] > 0 and report["graph_replays"] == 0
        assert f"fixed-shape decode {shape} on cpu: " in summary


def test_the_closure_check_names_packages_only_where_no_distribution_of_a_module_is_there():
    closure = _load("gpu_max_closure")
    owners = {"google": ["protobuf", "google-auth"], "pydantic_core": ["pydantic_core"], "_brotli": ["Brotli"],
              "polyrl_max": ["polyrl-max"], "json": []}
    gaps = closure.missing(["google", "pydantic_core", "_brotli", "polyrl_max", "json"], owners, {"protobuf"})
    assert gaps == {"pydantic_core": ["pydantic-core"]}  # one distribution of a namespace is enough
    assert closure.missing(["pydantic_core"], owners, {"pydantic-core"}) == {}


def test_the_closure_check_finds_what_max_lacked_on_the_gpu_machine(tmp_path, capsys, monkeypatch):
    """A GPU session carried MAX there in four calls, then stopped at 'No module named pydantic', then
    'av': checked here, with the image's package list and no wheels, those are named; once wheels
    bring them, nothing is. (MAX's imports are probed in a child once, ~20 s, and its source scanned
    once, ~5-10 s: the second check, which differs only in the wheels, reuses what the first found.)"""
    pytest.importorskip("max.pipelines", reason="MAX (polyrl[max]) is not installed")
    closure = _load("gpu_max_closure")
    probed: dict[tuple[str, ...], set[str]] = {}
    scanned: dict[Path, dict[str, set[str]]] = {}
    child, scan = closure.loaded_modules, closure.code_imports

    def once(imports):
        key = tuple(imports)
        if key not in probed:
            probed[key] = child(imports)
        return set(probed[key])

    def scan_once(package):
        if package not in scanned:
            scanned[package] = scan(package)
        return {module: set(files) for module, files in scanned[package].items()}

    monkeypatch.setattr(closure, "loaded_modules", once)
    monkeypatch.setattr(closure, "code_imports", scan_once)
    assert closure.main(["--wheels", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("error: MAX imports packages the GPU machines lack")
    named = set(out.split("Fix: add ")[1].split(" (pinned)")[0].split())
    assert {"pydantic", "pydantic-core", "av"} <= named
    for name in named | {"dill", "gguf", "structlog"}:  # the suite's own .whl brings these three
        (tmp_path / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_bytes(b"")
    assert closure.main(["--wheels", str(tmp_path)]) == 0


def test_the_run_mode_names_apart_what_only_a_load_compile_or_generate_imported(monkeypatch, capsys, tmp_path):
    """``--run``: the child's modules are mapped like the imports'; a gap only the run showed is named
    apart (MAX imports it lazily, so only a real load, compile or generate on the GPU would have hit it)."""
    closure = _load("gpu_max_closure")
    owners = {"pydantic": ["pydantic"], "av": ["av"], "jinja2": ["Jinja2"], "late_kernels": ["late-kernels"],
              "_brotli": ["Brotli"], "json": []}
    imported, ran = {"pydantic", "json"}, {"pydantic", "json", "av", "jinja2", "late_kernels", "_brotli"}
    assert closure.run_only(imported, ran, owners, {"jinja2"}) == {"av": ["av"], "late_kernels": ["late-kernels"]}
    assert closure.run_only(imported, ran, owners, {"av", "late-kernels", "jinja2"}) == {}
    # a gap at import is not repeated as a run's
    assert "pydantic" not in closure.run_only(imported, ran, owners, set())

    monkeypatch.setattr(closure.md, "packages_distributions", lambda: owners)
    monkeypatch.setattr(closure, "loaded_modules", lambda imports: set(imported))
    monkeypatch.setattr(closure, "run_modules", lambda: (set(ran), 12.0))
    monkeypatch.setattr(closure, "max_package", lambda: None)  # the source scan: its own test
    image = tmp_path / "image.txt"
    image.write_text("# the image\njinja2\n")
    assert closure.main(["--image", str(image), "--wheels", str(tmp_path)]) == 1  # without --run: no child
    out = capsys.readouterr().out
    assert "at import: pydantic (pydantic)" in out and "av" not in out
    assert closure.main(["--image", str(image), "--wheels", str(tmp_path), "--run"]) == 1
    out = capsys.readouterr().out
    assert "took 12 s and loaded 4 top-level modules its imports did not" in out
    assert ("error: MAX imports packages the GPU machines lack and no carried wheel brings: at import: "
            "pydantic (pydantic); only while loading, compiling or generating: av (av), late_kernels (late-kernels). "
            "Fix: add av late-kernels pydantic (pinned) to bench/gpu_max_wheels.sh") in out
    for name in ("pydantic", "av", "late_kernels"):
        (tmp_path / f"{name}-1.0-py3-none-any.whl").write_bytes(b"")
    assert closure.main(["--image", str(image), "--wheels", str(tmp_path), "--run"]) == 0
    assert "MAX's imports and its run: every package is in the GPU image or carried" in capsys.readouterr().out


def _pinned_wheels(script: str) -> set[str]:
    """The ``name==version`` pins a wheel script downloads."""
    return {m.group(1) for m in re.finditer(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==[0-9]", (ROOT / "bench" / script).read_text())}


@pytest.mark.slow  # loads, compiles (minutes cold; seconds from MAX's compile cache) and generates with MAX
def test_a_real_max_run_needs_nothing_beyond_the_image_and_the_carried_wheels(tmp_path, capsys):
    """What ``bench/gpu_max_wheels.sh`` runs before packing: a tiny Llama loaded through polyrl's max
    backend and a few tokens generated, here in a child, and every package that run imported found in
    the GPU image's list or among the wheels the two scripts pin (empty stand-ins of those wheels)."""
    pytest.importorskip("max.pipelines", reason="MAX (polyrl[max]) is not installed")
    closure = _load("gpu_max_closure")
    for name in _pinned_wheels("gpu_max_wheels.sh") | _pinned_wheels("gpu_wheels.sh"):
        (tmp_path / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_bytes(b"")
    code = closure.main(["--wheels", str(tmp_path), "--run"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "MAX's imports and its run: every package is in the GPU image or carried" in out
    ran = int(re.search(r"and loaded (\d+) top-level modules its imports did not", out).group(1))
    assert ran > 0  # the run did import more than the imports alone (a real load happened)


def test_the_source_scan_names_lazy_imports_no_run_loaded_with_their_files(tmp_path):
    """A GPU-only path cannot run here: MAX's source is scanned for imports (inside functions too),
    its server and benchmarks left out; a package installed here and missing there that nothing
    loaded is named with the files importing it."""
    closure = _load("gpu_max_closure")
    package = tmp_path / "max"
    (package / "pipelines").mkdir(parents=True)
    (package / "serve").mkdir()
    (package / "pipelines" / "gpu.py").write_text(
        "import json\nfrom . import near\n\ndef on_gpu():\n    import pynvml_like.smi\n    from av import open\n")
    (package / "serve" / "api.py").write_text("import fastapi\n")
    (package / "pipelines" / "broken.py").write_text("def (:\n")  # unparsable: skipped, not fatal
    code = closure.code_imports(package)
    assert code == {"json": {"pipelines/gpu.py"}, "pynvml_like": {"pipelines/gpu.py"}, "av": {"pipelines/gpu.py"}}
    owners = {"pynvml_like": ["pynvml-like"], "av": ["av"], "fastapi": ["fastapi"], "json": []}
    assert closure.unrun_gaps(code, {"av"}, owners, set()) == {"pynvml_like": (["pynvml-like"], ["pipelines/gpu.py"])}
    assert closure.unrun_gaps(code, set(), owners, {"pynvml-like", "av"}) == {}


@pytest.mark.slow  # MAX compiles the 2-layer SmolLM2-135M shape (minutes the first time, cached after)
def test_the_max_section_rehearses_max_beside_torch_and_hf_generate(tmp_path):
    """``max`` on the CPU at toy size: the import check passes, MAX generates through the bench (float32:
    the GPU run's ``--compute-dtype bfloat16`` is refused on the CPU), torch and HF generate follow."""
    pytest.importorskip("max.pipelines", reason="MAX (polyrl[max]) is not installed")
    results = _rehearse_section(tmp_path, "max")
    (side,) = json.loads((results / "bench_max_generate.json").read_text())["results"]
    assert side["backend"] == "max" and "error" not in side, side
    assert side["device"] == "cpu" and side["compute_dtype"] == "float32"
    sides = {r["backend"]: r for r in json.loads((results / "bench_max_generate_torch.json").read_text())["results"]}
    assert set(sides) == {"torch", "hf-generate"} and all("error" not in r for r in sides.values()), sides
    assert "MAX is not importable" not in (results / "summary.txt").read_text()
