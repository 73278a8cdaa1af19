"""The sampler's decode step compiled (``backends.options.compile_decode``) on a real tiny Llama.

Compiled, the step fuses its small ops, which rounds differently: it must still sample what the
uncompiled step samples (greedy: the same tokens; log-probs within float32 rounding), with rows
leaving mid-way and after the weights change (the packed weights are the compiled graph's inputs,
not constants baked into it), so the policy that samples is the one trained.
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

#: prompts of different token lengths: the batch is left-padded, so the mask matters
PROMPTS = ["hello there", "count to three, then four, five and six", "a"]
#: float32 log-probs through fused kernels (another summation order)
FP32_LOGP_TOL = 1e-4


def _engine(model_dir: str, **options) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(model=model_dir, threads=1, seed=0, options=options,
                                                        optimizer=OptimizerConfig(lr=1e-2)))


def _gap(a, b) -> float:
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b, strict=True))


def test_compiled_step_samples_what_the_eager_step_does_and_follows_updates(tiny_model_dir):
    from polyrl_torch.generation_weights import packing_available

    if not packing_available(torch.device("cpu"), torch.float32):
        pytest.skip("this torch build has no oneDNN weight packing")
    compiled, eager = _engine(tiny_model_dir, compile_decode=True), _engine(tiny_model_dir)
    greedy = SamplingParams(max_new_tokens=10, n=2, temperature=0.0)
    a, b = compiled.generate(PROMPTS, greedy), eager.generate(PROMPTS, greedy)
    assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b]
    assert _gap([c.logprobs for c in a], [c.logprobs for c in b]) < FP32_LOGP_TOL
    step = compiled.raw.generation_copy.decode_step
    assert step._layers_forward != step._run_layers  # the compiled function, not the method itself
    # rows leave mid-way (a stop string), then the weights change twice: the sampler's log-probs stay
    # the trainer's for the new weights
    sampling = SamplingParams(max_new_tokens=12, n=2, seed=3, temperature=1.0, stop=["e"])
    for _ in range(3):
        completions = compiled.generate(PROMPTS, sampling)
        assert len({len(c.completion_ids) for c in completions}) > 1  # rows left at different steps
        seqs = [TokenSequence.of(c) for c in completions]
        assert _gap(compiled.logprobs(seqs, 1.0), [c.logprobs for c in completions]) < FP32_LOGP_TOL
        compiled.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)).astype(np.float32)), Objective())
