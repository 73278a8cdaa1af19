"""``generate = "auto"``: the fastest backend `polyrl bench` measured for the model on this machine."""

from __future__ import annotations

import json

import pytest

from polyrl.bench import speed_records
from polyrl.bench import run_bench
from polyrl.config import RunConfig
from polyrl.registry import get_registry
from polyrl.trainer import Trainer


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr("polyrl.bench.speed_records.default_cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def auto_config(model: str, out) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": model}, "backends": {"train": "torch", "generate": "auto"},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"task": "arithmetic", "options": {"count": 16}},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(out)},
    })


def test_records_keep_valid_speeds_per_machine_and_model(cache):
    results = [{"backend": "torch", "generate_tokens_per_s": 80.0},
               {"backend": "max", "generate_tokens_per_s": 120.0},
               {"backend": "mlx", "generate_tokens_per_s": float("nan")},
               {"backend": "broken", "error": "no model"}]
    path = speed_records.record("/models/a", results, threads=1)
    stored = json.loads(path.read_text())[speed_records.machine_key()]["/models/a"]
    assert sorted(stored) == ["max", "torch"] and stored["max"]["threads"] == 1
    assert speed_records.fastest("/models/a", ["torch", "max", "mlx"]) == ("max", {"torch": 80.0, "max": 120.0})
    assert speed_records.fastest("/models/a", ["torch", "mlx"]) == ("torch", {"torch": 80.0})  # max unusable
    assert speed_records.fastest("/models/b", ["torch", "max"]) is None  # another model
    # a later bench of the same backend replaces its number; other machines' records are never used
    speed_records.record("/models/a", [{"backend": "torch", "generate_tokens_per_s": 200.0}], threads=2)
    assert speed_records.fastest("/models/a", ["torch", "max"])[0] == "torch"
    data = json.loads(path.read_text())
    data = {"other-machine": data.pop(speed_records.machine_key())}
    path.write_text(json.dumps(data))
    assert speed_records.fastest("/models/a", ["torch", "max"]) is None


def test_auto_without_a_measurement_keeps_generation_in_the_train_backend(cache, tiny_model_dir, tmp_path):
    trainer = Trainer(auto_config(tiny_model_dir, tmp_path / "run"))
    assert trainer.config.backends.generate == "torch"
    assert trainer.gen_engine is trainer.train_engine


@pytest.mark.slow  # a side-by-side run of several children: make test-slow (CI runs it)
def test_bench_measures_and_auto_trains_with_the_fastest(cache, tiny_model_dir, tmp_path):
    candidates = [n for n in ("torch", "mlx") if n in get_registry().available()]
    if len(candidates) < 2:
        pytest.skip(f"needs two generate backends here, have {candidates} (install polyrl[mlx])")
    report = run_bench(model=tiny_model_dir, backends=candidates, prompts=2, group_size=2,
                       max_new_tokens=4, threads=1, steps=1, generate_only=True, output=None)
    speeds = {r["backend"]: r["generate_tokens_per_s"] for r in report["results"]}
    assert all(v > 0 for v in speeds.values()), report["results"]
    fastest = max(speeds, key=speeds.__getitem__)

    trainer = Trainer(auto_config(tiny_model_dir, tmp_path / "run"))
    assert trainer.config.backends.generate == fastest
    assert trainer.gen_engine.backend == fastest
    summary = trainer.run(progress=False)
    assert summary["steps"] == 1 and summary["history"][0]["completion_len_mean"] > 0
