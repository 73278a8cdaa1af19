"""``polyrl bench --interleave``: the sides run at once, one step each in turn, never two at a time.

The protocol is tested with small child scripts (``polyrl.bench.lockstep`` is the same code the
real sides run); the slow test runs polyrl's torch engine and TRL's GRPOTrainer in lockstep on
the tiny model and reads their own step clocks back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from polyrl.bench import run_bench
from polyrl.bench.lockstep import LOCKSTEP_FD_ENV, run_in_lockstep, wait_for_turn
from polyrl.errors import ConfigError

#: A bench child in miniature: loads for ``load`` seconds, then takes ``steps`` steps of ``step``
#: seconds, each after ``wait_for_turn``; ``crash_at`` raises before that step. Prints its spans as JSON.
CHILD = textwrap.dedent("""
    import json, sys, time
    from polyrl.bench.lockstep import wait_for_turn
    name, steps, load, crash_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    step = float(sys.argv[5])
    time.sleep(load)
    loaded = time.time()
    spans = []
    for i in range(steps):
        wait_for_turn()
        if i == crash_at:
            raise RuntimeError(f"{name} broke at step {i}")
        start = time.time()
        time.sleep(step)
        spans.append([start, time.time()])
    print(json.dumps({"backend": name, "loaded": loaded, "spans": spans}))
""")


def child(name: str, steps: int, load: float = 0.0, crash_at: int = -1, step: float = 0.05) -> tuple[str, list[str]]:
    return name, [sys.executable, "-c", CHILD, name, str(steps), str(load), str(crash_at), str(step)]


def timeline(results: list[dict]) -> list[tuple[float, float, str]]:
    return sorted((start, end, r["backend"]) for r in results if "spans" in r for start, end in r["spans"])


def test_sides_step_one_at_a_time_in_rotating_order_after_all_have_loaded():
    results = run_in_lockstep([child("a", 3), child("b", 3, load=0.3)], steps=3)
    assert [r["backend"] for r in results] == ["a", "b"] and all("error" not in r for r in results)
    events = timeline(results)
    assert [name for _, _, name in events] == ["a", "b", "b", "a", "a", "b"]  # who goes first rotates
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(events, events[1:]))  # never two at once
    assert events[0][0] >= results[1]["loaded"]  # the slow loader was ready before anyone stepped


def test_a_side_that_crashes_is_its_error_and_the_others_finish():
    results = run_in_lockstep([child("a", 3, crash_at=1), child("b", 3)], steps=3)
    crashed, other = results
    assert crashed["backend"] == "a" and crashed["error"] == "RuntimeError: a broke at step 1"
    assert "Traceback" in crashed["stderr_tail"]
    assert len(other["spans"]) == 3 and "error" not in other


def test_a_side_that_dies_while_loading_does_not_hold_up_the_others():
    results = run_in_lockstep([child("a", 2, crash_at=0), ("b", [sys.executable, "-c", "raise SystemExit(3)"]),
                               child("c", 2)], steps=2)
    assert results[0]["error"] == "RuntimeError: a broke at step 0"
    assert results[1] == {"backend": "b", "error": "exit 3", "returncode": 3, "stderr_tail": ""}
    assert len(results[2]["spans"]) == 2


def test_a_side_past_its_timeout_is_killed_and_recorded_while_the_others_finish():
    """A timeout counts the parent's waits on that side alone (its loading and its own steps):
    ``slow`` runs out in its first step, ``hung`` while loading, and ``patient``, whose waits for
    the others' turns (over 5 s in all) are not its own, finishes."""
    results = run_in_lockstep([child("slow", 3, step=30.0), child("patient", 3, load=0.5),
                               child("hung", 3, load=30.0)], steps=3, timeouts=[2.5, 5.0, 3.0])
    slow, patient, hung = results
    assert slow == {"backend": "slow", "error": "timed out after 2.5 s", "timed_out": True}
    assert hung == {"backend": "hung", "error": "timed out after 3 s", "timed_out": True}
    assert "error" not in patient and len(patient["spans"]) == 3
    with pytest.raises(ValueError, match="2 timeouts for 1 children"):
        run_in_lockstep([child("a", 1)], steps=1, timeouts=[1.0, 2.0])


def test_a_child_run_alone_never_waits(monkeypatch):
    monkeypatch.delenv(LOCKSTEP_FD_ENV, raising=False)
    wait_for_turn()  # returns at once: no parent, no pipe
    done = subprocess.run([sys.executable, "-c", CHILD, "solo", "2", "0", "-1", "0.05"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["spans"]) == 2


@pytest.mark.parametrize("kwargs, says", [
    ({"trl": False}, "--trl is not given"),
    ({"trl": True, "generate_only": True}, "--generate-only times no step"),
])
def test_interleave_needs_trl_and_whole_steps(tiny_model_dir, kwargs, says):
    with pytest.raises(ConfigError, match=says) as err:
        run_bench(model=tiny_model_dir, backends=["torch"], steps=2, output=None, interleave=True, **kwargs)
    assert err.value.field == "--interleave"


def test_the_cli_refuses_interleave_without_trl_in_one_line(tiny_model_dir):
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "bench", "--model", tiny_model_dir, "--backends",
                           "torch", "--interleave"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: --interleave runs the backends and TRL stepping in turn, but --trl is "
                                   "not given. Fix: add --trl, or drop --interleave")


@pytest.mark.slow  # polyrl's engine and TRL's trainer loaded side by side
def test_polyrl_and_trl_interleaved_step_in_turn_and_pair_their_steps(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("trl", reason="trl is the bench-only extra polyrl-torch[bench]")
    monkeypatch.setattr("polyrl.bench.speed_records.default_cache_dir", lambda: tmp_path / "cache")
    report = run_bench(model=tiny_model_dir, backends=["torch"], prompts=2, group_size=2, max_new_tokens=4,
                       threads=1, steps=3, output=None, trl=True, interleave=True)
    assert report["workload"]["interleave"] is True
    ours, trl = report["results"]
    assert "error" not in ours and "error" not in trl, (ours, trl)
    # each side's own clocks: three steps each, alternating, the first mover rotating, none overlapping
    events = sorted((s, e, r["backend"]) for r in (ours, trl) for s, e in r["step_spans_epoch"])
    assert [name for _, _, name in events] == ["torch", "trl", "trl", "torch", "torch", "trl"]
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(events, events[1:]))
    # the pairs: step i of each (the warm-up step left out on both sides)
    assert len(ours["speedup_vs_trl_each"]) == ours["steps_timed"] == trl["steps_timed"] == 2
    assert ours["speedup_vs_trl_each"] == pytest.approx([t / o for t, o in zip(trl["step_s_each"], ours["step_s_each"])])
    assert ours["speedup_vs_trl"] == pytest.approx(trl["step_s"] / ours["step_s"])
