"""Evaluation during training: unbiased pass@k, eval keys on the step's metrics line, the
completions file, the metrics users expect on every step, and rewind on resume."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from polyrl import evaluation
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.step_metrics import frac_reward_zero_std


# --- the estimator -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_equals_brute_force_enumeration_of_k_subsets(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(correct, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert evaluation.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_stays_finite_for_large_n_and_rejects_impossible_counts():
    value = evaluation.pass_at_k(2000, 3, 100)
    assert 0 < value < 1 and math.isfinite(value)
    assert value == pytest.approx(1 - math.comb(1997, 100) / math.comb(2000, 100), rel=1e-9)
    for n, c, k in ((4, 5, 1), (4, 1, 5), (4, 1, 0), (4, -1, 1)):
        with pytest.raises(ValueError):
            evaluation.pass_at_k(n, c, k)


def test_mean_pass_at_k_uses_the_threshold_and_counts_a_failed_reward_as_wrong():
    scores = np.array([1.0, 0.0, 0.0, 0.0,   # prompt 0: 1 of 4
                       0.5, 0.5, np.nan, 2.0])  # prompt 1: 1 of 4 at threshold 1 (nan is wrong)
    assert evaluation.mean_pass_at_k(scores, 4, 1, 1.0) == pytest.approx(0.25)
    assert evaluation.mean_pass_at_k(scores, 4, 2, 1.0) == pytest.approx(0.5)
    assert evaluation.mean_pass_at_k(scores, 4, 1, 0.5) == pytest.approx((0.25 + 0.75) / 2)


def test_frac_reward_zero_std_counts_flat_groups():
    rewards = np.array([1, 1, 1, 1, 0, 1, 0, 0, 2, 2, np.nan, 2.0])
    assert frac_reward_zero_std(rewards, 4) == pytest.approx(2 / 3)


@pytest.mark.faults
@pytest.mark.parametrize(("data", "eval_settings", "field"), [
    ({"eval_path": "held_out.jsonl"}, {}, "data.eval_path"),
    ({"eval_split": "test"}, {}, "data.eval_split"),
    ({}, {"every": 5}, "eval.every"),
    ({}, {"reward": "exact_match"}, "eval.reward"),
])
def test_eval_settings_with_eval_count_0_are_an_error_not_ignored(data, eval_settings, field):
    """eval.count = 0 (the default) turns evaluation off: an eval file or schedule given with it
    used to be ignored without a word."""
    settings = {"model": {"path": "m"}, "data": {"path": "train.jsonl", **data}, "rewards": [{"name": "numeric_match"}],
                "eval": eval_settings}
    with pytest.raises(ConfigError, match="eval.count is 0") as info:
        RunConfig.from_dict(settings)
    assert info.value.field == field and "set eval.count" in info.value.fix
    RunConfig.from_dict({**settings, "eval": {**eval_settings, "count": 4}})  # with a count: accepted


def test_pass_k_above_samples_is_a_config_error():
    base = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({**base, "eval": {"count": 2, "samples": 2, "pass_k": 4}})
    assert info.value.field == "eval.pass_k" and "eval.samples" in str(info.value)
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({**base, "eval": {"samples": -1}})
    assert info.value.field == "eval.samples"


def test_rewind_keeps_evaluations_up_to_the_checkpoint(tmp_path):
    records = [{"phase": "before", "after_steps": 0}, {"phase": "during", "after_steps": 1},
               {"phase": "during", "after_steps": 2}, {"phase": "after", "after_steps": 2}]
    path = tmp_path / evaluation.COMPLETIONS_FILE
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"phase": "dur')  # a torn line
    evaluation.rewind_records(tmp_path, 1)
    assert [json.loads(x) for x in path.read_text().splitlines()] == records[:2]
    evaluation.rewind_records(tmp_path, 0)
    assert path.read_text() == ""


# --- a real tiny-model run -----------------------------------------------------------------------


def _config(tiny_model_dir, out, **train) -> RunConfig:
    return RunConfig.from_dict(_config_dict(tiny_model_dir, out, **train))


def _config_dict(tiny_model_dir, out, **train) -> dict:
    return {
        "model": {"path": tiny_model_dir, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 6, "temperature": 1.0},
        "data": {"task": "arithmetic", "options": {"count": 16, "digits": 1}},
        "rewards": [{"name": "numeric_match"}],
        "eval": {"count": 3, "every": 1, "samples": 4, "pass_k": 2, "pass_threshold": 0.0},
        "train": {"steps": 2, "prompts_per_step": 2, "threads": 1, "output_dir": str(out), **train},
    }


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_against_records(line, records, after_steps):
    """The line's eval numbers, recomputed from the saved completions of that evaluation."""
    mine = [r for r in records if r["phase"] == "during" and r["after_steps"] == after_steps]
    greedy = [r["reward"] for r in mine if r["greedy"]]
    sampled = sorted((r for r in mine if not r["greedy"]), key=lambda r: (r["prompt_index"], r["sample"]))
    assert len(greedy) == 3 and len(sampled) == 12
    assert line["eval/accuracy"] == pytest.approx(np.mean(greedy))
    correct = [sum(r["reward"] >= 0.0 for r in sampled if r["prompt_index"] == p) for p in range(3)]
    assert all(r["correct"] == (r["reward"] >= 0.0) for r in mine)
    assert line["eval/pass@2"] == pytest.approx(np.mean([evaluation.pass_at_k(4, c, 2) for c in correct]))
    assert line["eval/pass@1"] == pytest.approx(np.mean([c / 4 for c in correct]))
    assert line["eval/count"] == 3


def test_tiny_model_run_writes_eval_lines_completions_and_step_metrics(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    out = tmp_path / "run"
    summary = Trainer(_config(tiny_model_dir, out)).run(progress=False)
    every = _lines(out / "metrics.jsonl")
    records = _lines(out / evaluation.COMPLETIONS_FILE)
    # the evaluation before training on a line of its own at step 0; the one after training is the
    # last step's (the same weights), not run again
    assert [(x["step"], x.get("phase")) for x in every] == [(0, "before"), (1, None), (2, None)]
    lines = every[1:]
    for line in lines:
        _check_against_records(line, records, line["step"])
        lengths = (line["completions/min_length"], line["completions/mean_length"], line["completions/max_length"])
        assert 1 <= lengths[0] <= lengths[1] <= lengths[2] <= 6
        assert 0 <= line["completions/clipped_ratio"] <= 1 and 0 <= line["frac_reward_zero_std"] <= 1
        assert line["perf/generate_tokens_per_s"] > 0 and line["perf/score_tokens_per_s"] > 0
        assert line["perf/peak_rss_mb"] > 50  # torch alone is bigger than that
        if not line.get("skipped"):
            assert line["perf/train_tokens_per_s"] > 0
    assert {r["phase"] for r in records} == {"before", "during"}  # after == the last step's: reused
    assert summary["eval_after"] == {k: v for k, v in lines[-1].items() if k.startswith("eval/")}
    assert summary["eval_before"] == {k: v for k, v in every[0].items() if k.startswith("eval/")}
    assert summary["eval_before"]["eval/count"] == 3 and "eval/pass@2" in summary["eval_before"]
    assert all(isinstance(r["completion"], str) and isinstance(r["prompt"], (str, list)) for r in records)


def test_resume_rewinds_eval_completions_with_the_metrics(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    out = tmp_path / "run"
    Trainer(_config(tiny_model_dir, out, checkpoint_every=1, keep_checkpoints=3)).run(progress=False)
    first = _lines(out / evaluation.COMPLETIONS_FILE)
    trainer = Trainer(_config(tiny_model_dir, out, checkpoint_every=1, keep_checkpoints=3))
    assert trainer.resume(out / "checkpoints" / "step-00000001")
    trainer.run(progress=False)
    again = _lines(out / evaluation.COMPLETIONS_FILE)
    lines = _lines(out / "metrics.jsonl")
    assert [(x["step"], x.get("phase")) for x in lines] == [(0, "before"), (1, None), (2, None)]
    count = {(r["phase"], r["after_steps"]): 0 for r in again}
    for r in again:
        count[(r["phase"], r["after_steps"])] += 1
    assert count == {("before", 0): 15, ("during", 1): 15, ("during", 2): 15}
    assert again[:30] == first[:30]  # the kept lineage is untouched
    _check_against_records(lines[2], again, 2)


@pytest.mark.faults
def test_a_resume_at_the_last_step_does_not_evaluate_the_same_weights_again(tiny_model_dir, tmp_path):
    """Killed after its last checkpoint (its step evaluated by eval.every), the resumed run
    evaluated those weights again as "after": an extra metrics line at that step and extra eval
    completions that the uninterrupted run does not have."""
    from polyrl.trainer import Trainer

    out = tmp_path / "run"
    Trainer(_config(tiny_model_dir, out)).run(progress=False)
    metrics, records = (out / "metrics.jsonl").read_text(), (out / evaluation.COMPLETIONS_FILE).read_text()
    trainer = Trainer(_config(tiny_model_dir, out))
    assert trainer.resume()
    summary = trainer.run(progress=False)
    assert (out / "metrics.jsonl").read_text() == metrics
    assert (out / evaluation.COMPLETIONS_FILE).read_text() == records
    assert summary["eval_after"] == {k: v for k, v in _lines(out / "metrics.jsonl")[-1].items() if k.startswith("eval/")}


def test_a_stop_request_during_a_mid_run_evaluation_keeps_the_trained_step(tiny_model_dir, tmp_path, monkeypatch):
    """The eval reward hangs after the first update while a stop is requested: the step's update
    is kept (its line written without eval keys, then checkpointed) and the run ends cleanly."""
    import threading

    from polyrl.rewards import guard
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.trainer import Trainer

    monkeypatch.setattr(guard, "STOP_GRACE_S", 0.2)
    release = threading.Event()
    holder: dict = {}

    def hangs_after_training(completions, **kw):
        if holder["trainer"].step > 0:
            holder["trainer"].stop_requested = True  # as SIGINT's handler does
            release.wait(60)
        return [0.0] * len(completions)

    config = RunConfig.from_dict({**_config_dict(tiny_model_dir, tmp_path / "run"),
                                  "eval": {"count": 2, "every": 1, "reward": "hangs_after_training"}})
    trainer = Trainer(config, extra_plugins=(function_reward_plugin(hangs_after_training),))
    holder["trainer"] = trainer
    try:
        summary = trainer.run(progress=False)
    finally:
        release.set()
    lines = _lines(tmp_path / "run" / "metrics.jsonl")
    assert summary["steps"] == 1 and summary.get("stopped_early") and "eval_after" not in summary
    assert [(x["step"], x.get("phase")) for x in lines] == [(0, "before"), (1, None)]
    assert not any(k.startswith("eval/") for k in lines[1])
    assert summary["checkpoint"].endswith("step-00000001")



def test_a_reward_failing_in_a_mid_run_evaluation_keeps_the_trained_step_and_says_where(tiny_model_dir, tmp_path):
    """eval.reward = "run" with a function that fails on the held-out rows only: the step that
    trained before the evaluation is kept (its line and a checkpoint), as a reward failing in
    training keeps the steps before it; the error names the evaluation (it read as a training step's)."""
    from polyrl.errors import RewardError
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.trainer import Trainer

    holder: dict = {}

    def fails_in_eval(completions, **kw):
        if holder["trainer"].step > 0 and not holder["trainer"].step % 2:  # the evaluation after step 2
            raise ValueError("cannot score these rows")
        return [0.0] * len(completions)

    config = RunConfig.from_dict({**_config_dict(tiny_model_dir, tmp_path / "run", steps=3, checkpoint_every=5),
                                  "rewards": [{"name": "fails_in_eval"}],
                                  "eval": {"count": 2, "every": 2, "reward": "run", "before": False}})
    trainer = Trainer(config, extra_plugins=(function_reward_plugin(fails_in_eval),))
    holder["trainer"] = trainer
    with pytest.raises(RewardError, match="the evaluation after step 2 .*cannot score these rows"):
        trainer.run(progress=False)
    assert [x["step"] for x in _lines(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-00000002"]


def test_an_eval_set_without_the_eval_rewards_column_is_refused_before_any_model_loads(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    """eval.reward (numeric_match by default) reads 'answer': a held-out file without it used to fail
    at the first evaluation, after the models loaded; now it is one ConfigError at construction,
    naming eval.reward. An eval.reward that is one of the run's rewards scores with that entry's
    options (here its answer column), as training does: it used to get the reward's defaults."""
    from polyrl.trainer import Trainer
    from polyrl.types import RewardContext

    train, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text("".join(json.dumps({"prompt": f"{i}+1=", "gold": str(i + 1)}) + "\n" for i in range(4)))
    held_out.write_text("".join(json.dumps({"prompt": f"{i}+2=", "gold": str(i + 2)}) + "\n" for i in range(3)))
    settings = _config_dict(tiny_model_dir, tmp_path / "run")
    settings["data"] = {"path": str(train), "eval_path": str(held_out)}
    settings["rewards"] = [{"name": "exact_match", "options": {"column": "gold"}}]
    settings["eval"] = {"count": 3, "every": 1}  # eval.reward: numeric_match, not one of the run's rewards
    monkeypatch.setattr(Trainer, "_load_models", lambda self: pytest.fail("a model loaded before the check"))
    with pytest.raises(ConfigError) as info:
        Trainer(RunConfig.from_dict(settings))
    assert info.value.field == "eval.reward"
    assert "held-out set" in str(info.value) and "column 'answer'" in str(info.value) and "prompt, gold" in str(info.value)
    settings["rewards"] = [{"name": "exact_match", "options": {"column": "gold"}},
                           {"name": "numeric_match", "options": {"column": "gold"}}]
    monkeypatch.setattr(Trainer, "_load_models", lambda self: None)
    trainer = Trainer(RunConfig.from_dict(settings))  # eval.reward = the run's numeric_match: its column
    trainer.lock.release()
    result = trainer._eval_rewards(["1+2="], ["3"], RewardContext(rows=[{"prompt": "1+2=", "gold": "3"}],
                                                                  wanted=("numeric_match",), options={"numeric_match": {}}))
    assert list(result.total) == [1.0]


def test_eval_completion_records_are_redacted_valid_and_cut_like_the_completions_log(tmp_path):
    """A completion quoting a credential, running away or holding a lone surrogate is kept in
    eval_completions.jsonl as in completions.jsonl: masked, cut to MAX_TEXT_CHARS, valid UTF-8."""
    from polyrl.tracking.completions import MAX_TEXT_CHARS, cut_marker

    key = "sk-" + "A1b2C3d4" * 4
    prompts = [f"my key is {key}", [{"role": "user", "content": f"Bearer {key}"}]]
    texts = [f"here: {key}", "x" * (MAX_TEXT_CHARS + 10), "bad \ud800 half", "fine"]
    records = evaluation.completion_records("after", 3, prompts, texts, np.asarray([1.0, 0.0, 0.5, 1.0]),
                                            samples=2, greedy=False, threshold=1.0)
    evaluation.append_records(tmp_path, records)
    raw = (tmp_path / evaluation.COMPLETIONS_FILE).read_bytes()
    assert key.encode() not in raw
    back = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert back[0]["completion"] == "here: ***" and back[0]["prompt"] == "my key is ***"
    assert back[2]["prompt"] == [{"role": "user", "content": "Bearer ***"}]
    assert back[1]["completion"] == "x" * MAX_TEXT_CHARS + cut_marker(10)
    assert back[2]["completion"] == "bad \ufffd half"
    assert [r["correct"] for r in back] == [True, False, False, True]
