"""The conformance kit: the contract's rules as tests any backend runs against itself.

A backend's test module subclasses ``BackendConformance`` (or ``GenerationConformance`` for a
backend that does not train) and names its backend::

    from polyrl.testing.conformance import BackendConformance

    class TestMyBackend(BackendConformance):
        backend = "mine"
        # optional: compare log-probs with another installed backend on the same weights
        compare_with = "torch"

pytest then runs every check below on a tiny local Llama (built without any hub, see
``polyrl.testing.tiny_model``). The checks use only the public hooks, so they hold for any
implementation: token ids and log-probs come from the sampler, seeds repeat, stop strings and
lengths are honoured, the reported loss equals the numpy reference, and weights move between
backends without changing what the model computes.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
]


class GenerationConformance:
    """The checks for a backend that generates and scores (no ``train_step``, e.g. MAX); set
    ``backend`` (and optionally ``compare_with``)."""

    backend: ClassVar[str] = ""
    compare_with: ClassVar[str | None] = None
    logprob_atol: ClassVar[float] = 2e-4

    @pytest.fixture(scope="class")
    def model_dir(self, tmp_path_factory) -> str:
        from polyrl.testing.tiny_model import build_tiny_llama

        return build_tiny_llama(str(tmp_path_factory.mktemp("conformance") / "tiny"))

    def _engine(self, model_dir: str, role: str = "train", backend: str | None = None) -> Engine:
        reg = get_registry()
        name = backend or self.backend
        status = reg.status(name)
        if not status.available:
            pytest.skip(f"backend {name!r} not usable here: {status.reason}")
        return Engine(reg, name, EngineConfig(model=model_dir, role=role, threads=1,
                                              optimizer=OptimizerConfig(lr=1e-2)))

    @pytest.fixture(scope="class")
    def engine(self, model_dir) -> Engine:
        return self._engine(model_dir, role="generate")

    # --- generate ------------------------------------------------------------------------------

    def test_generate_groups_and_shapes(self, engine):
        out = engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=3, seed=0))
        assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1]
        for c in out:
            assert 1 <= len(c.completion_ids) <= 6
            assert len(c.logprobs) == len(c.completion_ids)
            assert np.all(c.logprobs <= 0) and np.all(np.isfinite(c.logprobs))
            assert c.finish_reason in ("stop", "length")
        assert np.array_equal(out[0].prompt_ids, out[2].prompt_ids)

    @pytest.mark.parametrize("temperature", [1.0, 0.7])
    def test_sampler_logprobs_equal_scored_logprobs(self, engine, temperature):
        out = engine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=1, temperature=temperature))
        scored = engine.logprobs([TokenSequence.of(c) for c in out], temperature)
        for c, lp in zip(out, scored):
            np.testing.assert_allclose(c.logprobs, lp, atol=self.logprob_atol)

    def test_seed_repeats_and_differs(self, engine):
        sampling = SamplingParams(max_new_tokens=8, n=2, seed=7)
        a = engine.generate(CHATS, sampling)
        b = engine.generate(CHATS, sampling)
        c = engine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=8))
        ids = lambda xs: [x.completion_ids.tolist() for x in xs]  # noqa: E731
        assert ids(a) == ids(b)
        assert ids(a) != ids(c)

    def test_greedy_is_deterministic_and_top_k_1_is_greedy(self, engine):
        greedy = engine.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=0.0))
        again = engine.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=0.0))
        top1 = engine.generate(CHATS, SamplingParams(max_new_tokens=8, temperature=1.0, top_k=1, seed=3))
        for g, a, t in zip(greedy, again, top1):
            assert g.completion_ids.tolist() == a.completion_ids.tolist() == t.completion_ids.tolist()

    def test_length_limit_reports_length(self, engine):
        out = engine.generate(CHATS, SamplingParams(max_new_tokens=3, temperature=0.0))
        for c in out:
            assert len(c.completion_ids) <= 3
            if len(c.completion_ids) == 3:
                assert c.finish_reason in ("length", "stop")

    def test_stop_string_ends_completion(self, engine):
        free = engine.generate(CHATS[:1], SamplingParams(max_new_tokens=12, temperature=0.0))[0]
        if len(free.text) < 4:
            pytest.skip("the tiny model's greedy completion is too short to pick a stop string from")
        stop = free.text[2:4]
        stopped = engine.generate(CHATS[:1], SamplingParams(max_new_tokens=12, temperature=0.0, stop=(stop,)))[0]
        assert stopped.finish_reason == "stop"
        assert len(stopped.completion_ids) < len(free.completion_ids)
        assert stop in stopped.text or stopped.text.endswith(stop[:1])

    def test_generate_on_a_worker_thread_when_declared(self, engine):
        """``concurrent_generate`` (generation.overlap) promises generate works off the main thread."""
        from concurrent.futures import ThreadPoolExecutor

        if not get_registry().spec(self.backend).capabilities.concurrent_generate:
            pytest.skip(f"backend {self.backend!r} does not declare concurrent_generate")
        sampling = SamplingParams(max_new_tokens=8, n=2, seed=9)
        here = engine.generate(CHATS, sampling)
        with ThreadPoolExecutor(1) as worker:
            there = worker.submit(engine.generate, CHATS, sampling).result()
        for a, b in zip(here, there):
            assert a.completion_ids.tolist() == b.completion_ids.tolist()
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=self.logprob_atol)

    # --- training ------------------------------------------------------------------------------

    # --- weights -------------------------------------------------------------------------------

    def test_weights_round_trip_across_backends(self, model_dir):
        other = self.compare_with
        if other is None:
            pytest.skip("no comparison backend named (compare_with)")
        mine = self._engine(model_dir)
        theirs = self._engine(model_dir, backend=other)
        out = mine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=2))
        seqs = [TokenSequence.of(c) for c in out]
        for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
            np.testing.assert_allclose(a, b, atol=self.logprob_atol)
        caps = get_registry().spec(self.backend).capabilities
        if caps.weight_import:
            weights = theirs.export_weights()
            perturbed = {k: v + np.float32(0.01) if k.endswith("q_proj.weight") else v
                         for k, v in weights.items()}
            mine.import_weights(perturbed)
            theirs.import_weights(perturbed)
            for a, b in zip(mine.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
                np.testing.assert_allclose(a, b, atol=self.logprob_atol)


class BackendConformance(GenerationConformance):
    """Every check, for a backend that also trains (``capabilities.train_step``)."""

    @pytest.mark.parametrize(
        "objective",
        [
            Objective(),
            Objective(loss_aggregation="token_mean", clip_eps_high=0.28),
            Objective(loss_aggregation="seq_mean_token_sum_norm", max_completion_length=8),
            Objective(beta=0.1, kl_estimator="k3", dual_clip=3.0),
            Objective(beta=0.1, kl_estimator="k1"),
            Objective(beta=0.1, kl_estimator="k2", loss_aggregation="token_mean"),
            Objective(importance_sampling_level="sequence", clip_eps_low=0.05, clip_eps_high=0.05),
            Objective(policy_loss="cispo", clip_eps_high=0.2, loss_aggregation="token_mean"),
            Objective(mismatch_correction="tis", mismatch_cap=1.2, beta=0.1),
            Objective(mismatch_correction="mis", mismatch_level="sequence", mismatch_cap=1.5),
        ],
        ids=["grpo", "dapo", "dr_grpo", "k3_dual", "k1", "k2", "gspo", "cispo", "tis_token", "mis_sequence"],
    )
    def test_reported_loss_equals_reference(self, model_dir, objective):
        engine = self._engine(model_dir)
        out = engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=4))
        seqs = [TokenSequence.of(c) for c in out]
        rng = np.random.default_rng(0)
        current = engine.logprobs(seqs, 1.0)
        old = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
        ref = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in current]
        adv = rng.standard_normal(len(seqs)).astype(np.float32)
        # a sampler that disagrees with the trainer (as another backend or a server would)
        sampler = [lp + rng.normal(0, 0.3, len(lp)).astype(np.float32) for lp in old]
        ref_in = ref if objective.beta else None
        expected, metrics = policy_loss(current, adv, objective, old, ref_in, sampler)
        got = engine.train_step(TrainBatch(seqs, adv, old, ref_in, sampler_logprobs=sampler), objective)
        assert not got.skipped
        assert got.loss == pytest.approx(expected, rel=1e-3, abs=1e-4)
        assert got.clip_fraction == pytest.approx(metrics["clip_fraction"], abs=1e-6)
        assert got.tokens == metrics["tokens"]

    def test_positive_advantage_raises_logprob(self, model_dir):
        engine = self._engine(model_dir)
        out = engine.generate(CHATS[:1], SamplingParams(max_new_tokens=6, n=2, seed=5))
        seqs = [TokenSequence.of(c) for c in out]
        before = [lp.sum() for lp in engine.logprobs(seqs, 1.0)]
        engine.train_step(TrainBatch(seqs, np.array([1.0, -1.0])), Objective())
        after = [lp.sum() for lp in engine.logprobs(seqs, 1.0)]
        assert after[0] > before[0] and after[1] < before[1]
