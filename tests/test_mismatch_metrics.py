"""The sampler-trainer gap under TRL's ``sampling/...`` names, with TRL's meaning: a numpy
transcription of TRL's GRPOTrainer definitions (``_generate_and_score_completions``, vLLM's
importance sampling correction) against the reference, the torch and MLX train steps and a run's
metrics.jsonl; and a sampler token with a NaN log-prob (one the sampler could not score) is left
out of the gap, not turned into NaN metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import mismatch_metrics
from polyrl.step_metrics import TRL_SAMPLING_NAMES, sampling_metrics

LENGTHS = [3, 6, 1, 4]
#: polyrl's (mismatch_correction, mismatch_level) -> TRL's vllm_importance_sampling_mode
MODES = {("tis", "token"): "token_truncate", ("mis", "token"): "token_mask",
         ("tis", "sequence"): "sequence_truncate", ("mis", "sequence"): "sequence_mask"}
CAP = 1.3


def _inputs(seed: int, nan: bool):
    """Trainer (old) and sampler log-probs per completion; the sampler's gap is wide enough for
    the cap to bind on some tokens and sequences."""
    rng = np.random.default_rng(seed)
    old = [-rng.uniform(0.1, 3.0, n) for n in LENGTHS]
    sampler = [o + rng.normal(0, 0.4, len(o)) for o in old]
    if nan:  # tokens the sampler could not score (vLLM returns NaN for them)
        sampler[1][[2, 4]] = np.nan
        sampler[3][0] = np.nan
    return old, sampler


def trl_sampling(old, sampler, mode: str, clip_max: float) -> dict[str, float]:
    """TRL 1.16's sampling/... metrics for one process, on padded [B, T] arrays: the gap
    ``old - sampler`` masked by the completion mask, NaN as 0 in the ratio (weight 1), the ratio
    truncated or masked at ``clip_max`` per token or per sequence (flattened over every row), and
    |gap| over the masked tokens whose gap is not NaN; 0 when there is nothing."""
    width = max(len(o) for o in old)
    mask = np.zeros((len(old), width))
    o_pad, s_pad = np.zeros_like(mask), np.zeros_like(mask)
    for i, (o, s) in enumerate(zip(old, sampler)):
        mask[i, : len(o)] = 1
        o_pad[i, : len(o)], s_pad[i, : len(s)] = o, s
    diff = np.nan_to_num((o_pad - s_pad) * mask, nan=0.0)
    sequence = mode.startswith("sequence")
    ratio = np.exp(diff.sum(axis=-1, keepdims=True) if sequence else diff)
    ratio = np.minimum(ratio, clip_max) if mode.endswith("truncate") else np.where(ratio > clip_max, 0.0, ratio)
    delta = np.abs(o_pad - s_pad)[(mask > 0) & ~np.isnan(o_pad - s_pad)]
    flat = ratio.ravel() if sequence else ratio[mask > 0]
    return {"sampling/sampling_logp_difference/mean": float(delta.mean()) if delta.size else 0.0,
            "sampling/sampling_logp_difference/max": float(delta.max()) if delta.size else 0.0,
            "sampling/importance_sampling_ratio/min": float(flat.min()) if flat.size else 0.0,
            "sampling/importance_sampling_ratio/mean": float(flat.mean()) if flat.size else 0.0,
            "sampling/importance_sampling_ratio/max": float(flat.max()) if flat.size else 0.0}


def _objective(correction: str, level: str) -> Objective:
    return Objective(mismatch_correction=correction, mismatch_level=level, mismatch_cap=CAP)


def _assert_trl(got: dict, expected: dict, rel: float) -> None:
    assert set(got) == set(expected), sorted(set(got) ^ set(expected))
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=rel, abs=rel * 1e-2), key


CASES = [(c, lvl, nan) for (c, lvl) in MODES for nan in (False, True)]


@pytest.mark.parametrize(("correction", "level", "nan"), CASES)
def test_reference_gap_under_trls_names_is_trls_computation(correction, level, nan):
    old, sampler = _inputs(3, nan)
    metrics = mismatch_metrics(old, sampler, _objective(correction, level))
    expected = trl_sampling(old, sampler, MODES[correction, level], CAP)
    _assert_trl(sampling_metrics(metrics), expected, rel=1e-12)
    assert 0.0 < expected["sampling/importance_sampling_ratio/min"] < 1.0 or correction == "mis"
    assert expected["sampling/importance_sampling_ratio/max"] <= CAP  # the cap binds here


def test_a_nan_sampler_token_is_left_out_of_the_gap_and_counted():
    """It made every gap metric NaN; now they are the means over the scored tokens and
    ``mismatch_unscored`` is the share of tokens the sampler could not score."""
    old, sampler = _inputs(5, nan=True)
    metrics = mismatch_metrics(old, sampler, Objective())
    scored = [(o - s)[~np.isnan(s)] for o, s in zip(old, sampler)]
    gap = np.concatenate(scored)
    assert metrics["mismatch_abs"] == pytest.approx(np.abs(gap).mean())
    assert metrics["mismatch_abs_max"] == pytest.approx(np.abs(gap).max())
    assert metrics["mismatch_kl"] == pytest.approx(np.mean(np.exp(gap) - gap - 1.0))
    assert metrics["mismatch_over"] == pytest.approx(np.mean(np.abs(gap) > 0.1))
    assert metrics["mismatch_unscored"] == pytest.approx(3 / sum(LENGTHS))
    assert all(np.isfinite(v) for v in metrics.values())
    # nothing scored: 0, as TRL logs
    none = mismatch_metrics([np.array([-1.0])], [np.array([np.nan])], _objective("tis", "token"))
    assert none["mismatch_abs"] == none["mismatch_abs_max"] == 0.0 and none["mismatch_unscored"] == 1.0
    assert none["mismatch_ratio_mean"] == 1.0  # an unscored token weighs 1 in the correction


def test_without_a_correction_only_the_difference_is_logged():
    old, sampler = _inputs(3, nan=False)
    names = sampling_metrics(mismatch_metrics(old, sampler, Objective()))
    assert set(names) == {"sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"}
    assert sampling_metrics({"loss": 1.0}) == {}


def _batch(engine_tokens: int, nan: bool):
    from polyrl.types import TokenSequence, TrainBatch

    old, sampler = _inputs(7, nan)
    rng = np.random.default_rng(1)
    seqs = [TokenSequence(list(rng.integers(3, engine_tokens, 4)), list(rng.integers(3, engine_tokens, n)))
            for n in LENGTHS]
    adv = np.array([1.0, -0.5, 0.3, -1.2])
    batch = TrainBatch(seqs, adv, old_logprobs=[o.astype(np.float32) for o in old],
                       sampler_logprobs=[s.astype(np.float32) for s in sampler])
    return batch, [o.astype(np.float32).astype(np.float64) for o in old], \
        [s.astype(np.float32).astype(np.float64) for s in sampler]


@pytest.mark.parametrize(("backend", "rel", "abs_"), [("torch", 1e-5, 1e-7), ("mlx", 1e-4, 1e-6)])
@pytest.mark.parametrize(("correction", "level", "nan"), CASES)
def test_the_train_step_reports_trls_sampling_metrics(tiny_model_dir, backend, rel, abs_, correction, level, nan):
    """Over micro-batches of 2 (the extremes and means combine across them), with the trainer's
    old log-probs given, so the gap is exactly the one TRL's formula sees."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig

    status = get_registry().status(backend)
    if not status.available:
        pytest.skip(f"{backend} not usable here: {status.reason}")
    engine = Engine(get_registry(), backend, EngineConfig(
        model=tiny_model_dir, role="train", threads=1, optimizer=OptimizerConfig(lr=1e-4, micro_batch_size=2)))
    batch, old, sampler = _batch(200, nan)
    got = engine.train_step(batch, _objective(correction, level))
    assert not got.skipped
    _assert_trl(sampling_metrics(got.extra), trl_sampling(old, sampler, MODES[correction, level], CAP), rel=1e-5)
    reference = mismatch_metrics(old, sampler, _objective(correction, level))
    for key in ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_unscored", "mismatch_corrected"):
        assert got.extra[key] == pytest.approx(reference[key], rel=rel, abs=abs_), key


def test_a_run_logs_trls_sampling_keys_in_metrics_and_log_history(tiny_model_dir, tmp_path):
    """metrics.jsonl (and so the trackers and ``log_history``, which get the same dict) has TRL's
    keys; one rank's one update: the difference equals polyrl's mismatch metric of the step."""
    from polyrl.config import RunConfig
    from polyrl.rewards.trl_compat import with_trl_names
    from polyrl.trainer import Trainer

    pytest.importorskip("torch")
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "generation": {"group_size": 2, "max_new_tokens": 6},
        "algorithm": {"name": "grpo", "mismatch_correction": "mis", "mismatch_level": "sequence",
                      "mismatch_cap": 1.5},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "length_penalty", "options": {"target": 2}}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        "eval": {"count": 0},
    })
    history = Trainer(config).run(progress=False)["history"]
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    for ours, trl in TRL_SAMPLING_NAMES.items():
        assert with_trl_names(history[-1])[trl] == line[trl]
        if "difference" in trl:  # one rank, one update: TRL's value over the step's scored tokens
            assert line[trl] == pytest.approx(line[ours], rel=1e-9), trl
    assert not [key for key in line if key.startswith("rank_")]  # the backend's per-rank gap stays inside
    assert 0.0 <= line["sampling/importance_sampling_ratio/min"] <= line["sampling/importance_sampling_ratio/max"]


UNSCORED_ODD = """
def odd_unscored(completions, **kwargs):
    return [None if i % 2 else -len(c) / 10 for i, c in enumerate(completions)]
"""


def test_a_completion_no_reward_scored_counts_in_trls_sampling_values(tiny_model_dir, tmp_path, monkeypatch):
    """TRL's sampling/ values are over every completion of its batch with loss tokens, one no
    reward scored too (advantage 0, still in the batch). polyrl does not train such a completion
    without a KL term, and its gap was left out: here the sampler's log-probs of exactly those
    are 0.5 below the trainer's, so TRL's difference is 0.5 on their tokens (max 0.5, ratio
    exp(0.5) under the cap); polyrl logged the trained completions' gap alone (about 0)."""
    import attrs

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    pytest.importorskip("torch")
    (tmp_path / "odd.py").write_text(UNSCORED_ODD)
    seen: list = []
    original = Trainer._sample

    def shifted(self, rows, sampling, training=True):
        out = original(self, rows, sampling, training)
        if training:
            out = [attrs.evolve(c, logprobs=c.logprobs - 0.5) if i % 2 else c for i, c in enumerate(out)]
            seen.append(out)
        return out

    monkeypatch.setattr(Trainer, "_sample", shifted)
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "generation": {"group_size": 2, "max_new_tokens": 6},
        "algorithm": {"name": "grpo", "mismatch_correction": "tis", "mismatch_cap": 2.0},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"function": f"{tmp_path / 'odd.py'}:odd_unscored"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        "eval": {"count": 0},
    })
    Trainer(config).run(progress=False)
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    tokens = [len(c.completion_ids) for c in seen[0]]
    unscored = sum(n for i, n in enumerate(tokens) if i % 2)
    assert unscored and line["samples_kept"] == 2  # the premise: half unscored, not trained
    assert line["sampling/sampling_logp_difference/mean"] == pytest.approx(0.5 * unscored / sum(tokens), abs=1e-2)
    assert line["sampling/sampling_logp_difference/max"] == pytest.approx(0.5, abs=1e-2)
    assert line["sampling/importance_sampling_ratio/max"] == pytest.approx(np.exp(0.5), abs=1e-2)


def _trl_gather(processes: list[dict]) -> dict:
    """TRL's gather of the per-process values: ``gather(mean).mean()`` (``nanmean`` for the ratio),
    ``nanmin`` of the mins, the max of the maxes."""
    return {key: (min if key.endswith("/min") else max if key.endswith("/max") else np.mean)(
        [p[key] for p in processes]) for key in processes[0]}


@pytest.mark.parametrize(("backend", "rel"), [("torch", 1e-5), ("mlx", 1e-4)])
@pytest.mark.parametrize(("correction", "level"), list(MODES))
def test_trls_values_are_each_ranks_whole_batch_then_the_mean_of_the_ranks(tiny_model_dir, backend, rel,
                                                                           correction, level):
    """TRL computes each process's values once over its whole generation batch (a polyrl step:
    all of its mini-batches) and logs the mean of the processes' means, an empty completion at
    ratio 1 at sequence level. It was the token mean over every rank, of the mini-batches' means,
    without the empty completion. Two ranks of unequal size, each in two mini-batches."""
    from polyrl.backend_kit.gap_metrics import RANK_KEYS
    from polyrl.engine import Engine
    from polyrl.minibatches import pass_metrics, take
    from polyrl.registry import get_registry
    from polyrl.step_metrics import trl_gathered_sampling, trl_process_sampling
    from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence, TrainBatch

    status = get_registry().status(backend)
    if not status.available:
        pytest.skip(f"{backend} not usable here: {status.reason}")
    engine = Engine(get_registry(), backend, EngineConfig(
        model=tiny_model_dir, role="train", threads=1, optimizer=OptimizerConfig(lr=1e-4, micro_batch_size=2)))
    objective = _objective(correction, level)
    rng = np.random.default_rng(11)
    processes, expected, globals_ = [], [], []
    for lengths, empty in (([3, 6, 1, 4, 7, 2], 1), ([5], 0)):
        old = [-rng.uniform(0.1, 3.0, n).astype(np.float32) for n in lengths]
        sampler = [(o + rng.normal(0, 0.4, len(o))).astype(np.float32) for o in old]
        seqs = [TokenSequence(list(rng.integers(3, 200, 4)), list(rng.integers(3, 200, n))) for n in lengths]
        whole = TrainBatch(seqs, rng.normal(size=len(lengths)), old_logprobs=old, sampler_logprobs=sampler)
        rows = np.array_split(np.arange(len(lengths)), 2 if len(lengths) > 1 else 1)
        updates = [engine.train_step(take(whole, list(r), len(r), 1.0), objective) for r in rows]
        globals_.append(sampling_metrics(pass_metrics(updates)))
        gap = {k: v for k, v in pass_metrics(updates).items() if k in RANK_KEYS}
        processes.append(trl_process_sampling(gap, empty, level == "sequence"))
        as64 = [np.asarray(x, np.float64) for x in old], [np.asarray(x, np.float64) for x in sampler]
        empty_rows = [np.zeros(0)] * empty  # a completion with no loss token (TRL: mask all 0)
        expected.append(trl_sampling(as64[0] + empty_rows, as64[1] + empty_rows, MODES[correction, level], CAP))
    want = _trl_gather(expected)
    _assert_trl(trl_gathered_sampling(processes), want, rel=rel)
    assert trl_gathered_sampling(processes)["sampling/sampling_logp_difference/mean"] != pytest.approx(
        globals_[0]["sampling/sampling_logp_difference/mean"], rel=1e-3)  # not rank 0's mini-batch mean


def test_the_trainer_gathers_every_ranks_values_and_counts_its_rows_without_a_token():
    """The per-rank seam: this rank's values (its truncated-and-masked and empty rows at ratio 1)
    go through one ``all_gather``; the logged value is the mean over the ranks, the backend's
    per-rank keys leave the step's metrics."""
    from types import SimpleNamespace

    from polyrl.trainer import Trainer
    from polyrl.types import Completion

    peer = {"sampling/sampling_logp_difference/mean": 0.5, "sampling/sampling_logp_difference/max": 2.0,
            "sampling/importance_sampling_ratio/min": 0.25, "sampling/importance_sampling_ratio/mean": 0.75,
            "sampling/importance_sampling_ratio/max": 1.25}
    seen = []

    class Gather:
        def all_gather(self, mine: object, world_size: int = 1) -> list[object]:
            seen.append(mine)
            return [mine, peer]

    rank = SimpleNamespace(world_size=2, train_engine=Gather())
    done = [Completion(0, [1], [5, 6], [-1.0, -1.0], finish_reason="stop"),
            Completion(0, [1], [5, 6, 7], [-1.0] * 3, finish_reason="length"),  # cut: masked out
            Completion(1, [1], [], [], finish_reason="stop"),  # no token
            Completion(1, [1], [5], [-1.0], finish_reason="stop")]
    metrics = {"mismatch_abs": 9.0, "rank_gap_abs_sum": 0.4, "rank_gap_scored_count": 2.0, "rank_gap_abs_max": 0.3,
               "rank_ratio_sum": 1.5, "rank_ratio_count": 2.0, "rank_ratio_min": 0.5, "rank_ratio_max": 1.0}
    counted = np.array([True, True, True, False])  # the last one's group dropped (dynamic sampling)
    got = Trainer._trl_sampling(rank, metrics, done, counted, np.array([True, False, True, True]), True)
    assert seen[0]["sampling/importance_sampling_ratio/mean"] == pytest.approx((1.5 + 2) / 4)  # 2 rows at 1
    assert got["sampling/sampling_logp_difference/mean"] == pytest.approx((0.2 + 0.5) / 2)
    assert got["sampling/importance_sampling_ratio/mean"] == pytest.approx(((1.5 + 2) / 4 + 0.75) / 2)
    assert got["sampling/importance_sampling_ratio/min"] == 0.25 and got["sampling/sampling_logp_difference/max"] == 2.0
    assert not [k for k in metrics if k.startswith("rank_")] and metrics["mismatch_abs"] == 9.0
