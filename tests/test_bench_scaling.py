"""bench/scaling.py and polyrl.bench.sweep: polyrl vs TRL at fixed completion lengths, resumable."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from model_copies import edited_copy

from polyrl.bench.report import sweep_markdown, write_sweep_chart
from polyrl.bench.sweep import compare, length_check, plan_points, prompts_for, run_sweep
from polyrl.bench.workload import run_child
from polyrl.errors import ConfigError

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "scaling.py"
#: the tiny model's stop tokens in the EOS-heavy copy: a quarter of its 512-token vocabulary
STOP_IDS = [2, *range(100, 228)]


def _script():
    spec = importlib.util.spec_from_file_location("scaling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def eos_heavy_model(tiny_model_dir, tmp_path_factory) -> str:
    """The tiny model with 129 EOS ids: a completion left to stop on EOS ends within a few tokens,
    so a full-length one proves ``ignore_eos`` / ``min_new_tokens`` took effect."""
    folder = tmp_path_factory.mktemp("models") / "tiny-eos-heavy"
    return str(edited_copy(tiny_model_dir, folder, {"eos_token_id": STOP_IDS}, file="generation_config.json"))


@pytest.fixture(scope="module")
def sweep(eos_heavy_model, tmp_path_factory):
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    output = tmp_path_factory.mktemp("sweep") / "scaling.json"
    points = plan_points([8, 16], [2], [False], tokens_per_step=32, steps=2)
    report = run_sweep(eos_heavy_model, points, output, threads=1, tokens_per_step=32, steps=2, trl=True,
                       command=["bench/scaling.py", "--test"])
    return report, output


def test_the_eos_heavy_model_stops_early_unless_told_to_ignore_eos(eos_heavy_model):
    """The premise of the sweep's length check: without the fixed-length switch, both polyrl's
    sampler and transformers' generate (what TRL calls) end completions early on this model."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams
    from polyrl_torch.bench.hf_generate import run as hf_generate

    engine = Engine(get_registry(), "torch", EngineConfig(model=eos_heavy_model, threads=1))
    prompt = [[{"role": "user", "content": "What is 2 + 3?"}]]
    lengths = {free: [len(c.completion_ids) for c in engine.generate(
        prompt, SamplingParams(max_new_tokens=16, n=4, seed=0, ignore_eos=not free))] for free in (True, False)}
    assert min(lengths[True]) < 16 and lengths[False] == [16] * 4
    assert min(hf_generate(eos_heavy_model, 1, 4, 16, 1, 1)["completion_lens"]) < 16
    assert hf_generate(eos_heavy_model, 1, 4, 16, 1, 1, True)["completion_lens"] == [16] * 4


@pytest.mark.slow  # the sweep fixture runs polyrl and TRL side by side
def test_sweep_runs_polyrl_and_trl_at_fixed_lengths(sweep):
    report, output = sweep
    assert json.loads(output.read_text()) == report
    assert report["command"] == ["bench/scaling.py", "--test"]
    machine = report["machine"]
    assert machine["threads"] == 1 and machine["cpus"] >= 1 and machine["matmul_peak"]["peak_gflops"] > 0.5
    assert [p["key"] for p in report["points"]] == ["scaling/len8/g2/p2/full/s2", "scaling/len16/g2/p1/full/s2"]
    for point, length in zip(report["points"], (8, 16)):
        ours, trl = point["polyrl"], point["trl"]
        assert "error" not in ours and "error" not in trl, point
        # every completion of every step on both sides has the requested length
        assert point["lengths"] == {"requested": length, "polyrl_lens": [length], "trl_lens": [length],
                                    "equal": True}
        assert point["status"] == "ok"
        assert ours["steps_timed"] == 1 and trl["steps_timed"] == 1  # both leave out their first step
        assert ours["tokens_per_step"] == trl["tokens_per_step"] == point["workload"]["prompts"] * 2 * length
        ratio = point["trl_over_polyrl"]
        assert ratio["step"] == pytest.approx(trl["step_s"] / ours["step_s"])
        assert ratio["peak_rss"] == pytest.approx(trl["peak_rss_mb"] / ours["peak_rss_mb"])
        for side in (ours, trl):
            assert side["peak_rss_mb"] > 50
            assert 0 < side["generate_mfu"] < 1.5 and 0 < side["train_mfu"] < 1.5


@pytest.mark.slow  # the sweep fixture runs polyrl and TRL side by side
def test_sweep_writes_chart_and_markdown_table(sweep, tmp_path):
    report, _ = sweep
    chart = write_sweep_chart(report, tmp_path / "scaling.png")
    assert chart and Path(chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = sweep_markdown(report).splitlines()
    assert table[0].startswith("| kind | length | group |") and table[1].startswith("|---|")
    rows = [line for line in table[2:] if line.startswith("| scaling")]
    assert len(rows) == 2 and all(row.endswith("| ok |") for row in rows)
    assert rows[0].count("|") == table[0].count("|")
    (trend,) = [line for line in table if line.startswith("- ")]
    assert trend.startswith("- group 2, full: x TRL per step ") and "from 8 to 16 tokens" in trend


@pytest.mark.slow  # the sweep fixture runs polyrl and TRL side by side
def test_script_resumes_a_finished_sweep_without_rerunning_and_writes_png_and_md(sweep, eos_heavy_model,
                                                                                  tmp_path, capsys):
    """``bench/scaling.py --resume`` on a report holding every point: no child runs; the chart
    and the README table are written beside the JSON and the table printed."""
    _, output = sweep
    copy = tmp_path / "scaling.json"
    shutil.copy(output, copy)
    code = _script().main(["--model", eos_heavy_model, "--lengths", "8,16", "--groups", "2", "--lora", "full",
                           "--tokens-per-step", "32", "--steps", "2", "--resume", "--output", str(copy)])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["skipped: scaling/len8/g2/p2/full/s2", "skipped: scaling/len16/g2/p1/full/s2"]
    assert copy.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert copy.with_suffix(".md").read_text() in captured.out
    assert json.loads(copy.read_text())["points"] == json.loads(output.read_text())["points"]


@pytest.mark.slow  # the sweep fixture runs polyrl and TRL side by side
def test_resume_skips_done_points_and_records_a_trl_timeout(sweep, eos_heavy_model, tmp_path):
    report, output = sweep
    resumed_file = tmp_path / "scaling.json"
    shutil.copy(output, resumed_file)
    points = plan_points([8, 16, 4], [2], [False], tokens_per_step=32, steps=2)
    seen: list[tuple[str, str]] = []
    resumed = run_sweep(eos_heavy_model, points, resumed_file, threads=1, tokens_per_step=32, steps=2, trl=True,
                        trl_timeout=1, resume=True, on_point=lambda p, what: seen.append((p.key, what)))
    assert [what for _, what in seen] == ["skipped", "skipped", "ran"]
    assert resumed["points"][:2] == report["points"] and resumed["machine"] == report["machine"]
    new = resumed["points"][2]
    assert new["trl"] == {"backend": "trl", "error": "timed out after 1 s", "timed_out": True}
    assert "error" not in new["polyrl"] and new["lengths"]["polyrl_lens"] == [4]
    assert new["status"] == "trl timed out after 1 s" and "trl_over_polyrl" not in new
    assert json.loads(resumed_file.read_text()) == resumed
    assert "trl timed out after 1 s |" in sweep_markdown(resumed)
    assert write_sweep_chart(resumed, tmp_path / "scaling.png")


@pytest.mark.slow  # polyrl and TRL loaded side by side
def test_an_interleaved_sweep_pairs_each_speed_points_steps_and_keeps_memory_points_sequential(
        eos_heavy_model, tmp_path):
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    points = plan_points([8], [2], [False], tokens_per_step=32, steps=3, memory_lengths=[8])
    report = run_sweep(eos_heavy_model, points, tmp_path / "scaling.json", threads=1, tokens_per_step=32, steps=3,
                       trl=True, interleave=True, command=["bench/scaling.py", "--interleave"])
    speed, memory = report["points"]
    assert report["settings"]["interleave"] is True
    assert speed["interleaved"] is True and memory["interleaved"] is False
    for point in (speed, memory):
        assert point["status"] == "ok" and point["lengths"]["equal"], point["status"]
    ours, trl = speed["polyrl"], speed["trl"]
    events = sorted((s, e, r["backend"]) for r in (ours, trl) for s, e in r["step_spans_epoch"])
    assert [name for _, _, name in events] == ["torch", "trl", "trl", "torch", "torch", "trl"]  # in turn, rotating
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(events, events[1:]))
    pairs = speed["trl_over_polyrl_each_step"]
    assert len(pairs) == 2 and pairs == pytest.approx([t / o for t, o in zip(trl["step_s_each"], ours["step_s_each"])])
    # the memory point ran its sides one after the other: polyrl's last step ended before TRL's first began
    assert memory["polyrl"]["step_spans_epoch"][-1][1] <= memory["trl"]["step_spans_epoch"][0][0]
    assert "trl_over_polyrl_each_step" not in memory
    table = sweep_markdown(report)
    assert f"ok; step pairs x TRL {pairs[0]:.2f}, {pairs[1]:.2f} |" in table and "Speed points interleaved" in table


def test_the_script_refuses_interleave_without_trl(capsys):
    assert _script().main(["--interleave", "--no-trl"]) == 2
    assert capsys.readouterr().err == ("error: --interleave pairs polyrl's steps with TRL's: drop --no-trl, "
                                       "or drop --interleave\n")


@pytest.mark.slow  # the sweep fixture runs polyrl and TRL side by side
def test_resume_refuses_a_report_made_with_other_settings(sweep, eos_heavy_model):
    _, output = sweep
    with pytest.raises(ConfigError, match="threads") as caught:
        run_sweep(eos_heavy_model, [], output, threads=2, tokens_per_step=32, steps=2, resume=True)
    assert caught.value.field == "--threads"


def test_points_use_fewer_prompts_at_long_lengths():
    assert prompts_for(1024, 4, 32) == 8 and prompts_for(1024, 16, 512) == 1
    points = plan_points([32, 512], [4, 16], [False, True], 1024, 2, memory_lengths=[2048])
    assert len(points) == 2 * 2 * 2 + 1 and len({p.key for p in points}) == len(points)
    memory = points[-1]
    assert (memory.kind, memory.length, memory.prompts, memory.group_size, memory.steps) == ("memory", 2048, 1, 2, 1)


def test_a_point_whose_lengths_differ_is_flagged_not_compared():
    """A side that stopped early (a backend without ``ignore_eos``) did less work: no ratio."""
    full, short = {"completion_lens_seen": [16], "step_s": 2.0}, {"completion_lens_seen": [3, 16], "step_s": 1.0}
    point = {"polyrl": short, "trl": full, "lengths": length_check(16, {"polyrl": short, "trl": full})}
    compare(point)
    assert point["lengths"] == {"requested": 16, "polyrl_lens": [3, 16], "trl_lens": [16], "equal": False}
    assert point["status"] == "lengths differ: not compared" and "trl_over_polyrl" not in point
    alone = {"polyrl": full, "lengths": length_check(16, {"polyrl": full})}
    compare(alone)
    assert alone["status"] == "ok (polyrl only)"
    crashed = {"polyrl": full, "trl": {"backend": "trl", "error": "killed by SIGKILL"},
               "lengths": length_check(16, {"polyrl": full})}
    compare(crashed)
    assert crashed["status"] == "trl killed by SIGKILL" and "trl_over_polyrl" not in crashed


@pytest.mark.faults
def test_a_crashed_killed_or_slow_child_is_recorded_not_fatal():
    python = sys.executable
    killed = run_child([python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], "trl")
    assert killed["error"].startswith("killed by SIGKILL (out of memory?") and killed["returncode"] == -9
    oom = run_child([python, "-c", "raise MemoryError('no room for logits')"], "torch")
    assert oom["error"].startswith("out of memory:") and "no room for logits" in oom["error"]
    slow = run_child([python, "-c", "import time; time.sleep(30)"], "trl", timeout=0.5)
    assert slow == {"backend": "trl", "error": "timed out after 0.5 s", "timed_out": True}
    silent = run_child([python, "-c", "print('not json')"], "torch")
    assert silent["error"].startswith("no result line on stdout")


def test_cli_rejects_bad_values_with_one_line_errors(capsys):
    script = _script()
    with pytest.raises(SystemExit) as exited:
        script.main(["--lengths", "32,x"])
    assert exited.value.code == 2 and "argument --lengths: '32,x' is not a comma-separated list" in \
        capsys.readouterr().err
    assert script.main(["--steps", "0"]) == 2
    assert capsys.readouterr().err == "error: --steps must be positive, got 0\n"
