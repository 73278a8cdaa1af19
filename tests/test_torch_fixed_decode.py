"""Fixed-shape decoding (``polyrl_torch.fixed_decode``): every row decodes to the end from buffers
of the call's capacity, the way a CUDA graph needs. It must sample what the row-dropping loop
samples (stops noticed late are cut where they happened, uneven budgets, filters, repetition
penalty, greedy), keep the sampler's log-probs the trainer's, run only where asked, and have its
switch checked. On a GPU (device "auto" picks it) the same tests run its captured CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

from polyrl_torch import fixed_decode  # noqa: E402
from polyrl_torch.fixed_decode import FixedShapeDecoder  # noqa: E402

#: log-probs through a whole (tiny) model: fixed buffers against the row-dropping loop, or the trainer
LOGPROB_ROUNDING = 1e-4
PROMPTS = ["hello there", "count to three, then four, five and six", "a", "hello there"]


def _engine(model_dir: str, max_length: int | None = None, **options) -> Engine:
    extra = {"max_length": max_length} if max_length else {}
    return Engine(get_registry(), "torch", EngineConfig(
        model=model_dir, threads=1, seed=0, options=options, optimizer=OptimizerConfig(lr=1e-2), **extra))


def _gap(a, b) -> float:
    return max((abs(float(x) - float(y)) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True)),
               default=0.0)


@pytest.fixture
def steps(monkeypatch):
    """How many fixed-shape steps ran, and whether any ran from a captured graph."""
    seen = {"steps": 0, "graphs": 0}
    original = FixedShapeDecoder.step

    def counted(self, tokens):
        seen["steps"] += 1
        seen["graphs"] += self.graph is not None
        return original(self, tokens)

    monkeypatch.setattr(FixedShapeDecoder, "step", counted)
    return seen


SAMPLINGS = [
    SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=0.8, top_p=0.9, top_k=20),
    SamplingParams(max_new_tokens=20, n=3, seed=9, stop=("e", "o")),  # rows end mid-way, between read-backs
    SamplingParams(max_new_tokens=8, n=1, seed=1, min_p=0.05),        # one row each, a prompt given twice
    SamplingParams(max_new_tokens=10, n=2, temperature=0.0, repetition_penalty=1.3),  # greedy, penalised
]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["filters", "stops", "min-p", "greedy-penalty"])
def test_fixed_shapes_sample_what_the_row_dropping_loop_does(tiny_model_dir, steps, sampling):
    fixed, dropping = _engine(tiny_model_dir, fixed_shape_decode="on"), _engine(tiny_model_dir, fixed_shape_decode="off")
    a, b = fixed.generate(PROMPTS, sampling), dropping.generate(PROMPTS, sampling)
    assert steps["steps"] > 0  # the fixed decoder did the decoding
    assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    assert [c.text for c in a] == [c.text for c in b]
    assert _gap([c.logprobs for c in a], [c.logprobs for c in b]) < LOGPROB_ROUNDING
    if sampling.stop:  # rows did end at different steps, and no row ran past its stop
        assert len({len(c.completion_ids) for c in a}) > 1, [c.text for c in a]
        assert all(c.finish_reason == "stop" or len(c.completion_ids) == sampling.max_new_tokens for c in a)
    if torch.cuda.is_available():
        assert steps["graphs"] == steps["steps"]  # every step replayed the captured graph


def test_uneven_budgets_end_each_row_at_its_own(tiny_model_dir, steps):
    """Near ``max_length`` a long prompt's budget is shorter than a short one's: its rows end first."""
    sampling = SamplingParams(max_new_tokens=30, n=2, seed=3)
    fixed = _engine(tiny_model_dir, max_length=40, fixed_shape_decode="on").generate(PROMPTS[:3], sampling)
    dropping = _engine(tiny_model_dir, max_length=40, fixed_shape_decode="off").generate(PROMPTS[:3], sampling)
    assert steps["steps"] > 0
    lengths = [len(c.completion_ids) for c in fixed]
    assert lengths == [len(c.completion_ids) for c in dropping] and len(set(lengths)) > 1
    assert all(len(c.prompt_ids) + len(c.completion_ids) <= 40 for c in fixed)
    assert [list(c.completion_ids) for c in fixed] == [list(c.completion_ids) for c in dropping]


def test_fixed_shape_sampler_log_probs_are_the_trainers(tiny_model_dir, steps):
    engine = _engine(tiny_model_dir, fixed_shape_decode="on")
    sampling = SAMPLINGS[0]
    for _ in range(2):  # after updates too: the decoder reads the current weights
        seqs = [TokenSequence.of(c) for c in engine.generate(PROMPTS[:2], sampling)]
        engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)).astype(np.float32)), Objective())
    fresh = engine.generate(PROMPTS, sampling)
    assert steps["steps"] > 0
    assert _gap([c.logprobs for c in fresh],
                engine.logprobs([TokenSequence.of(c) for c in fresh], sampling.temperature)) < LOGPROB_ROUNDING


def test_bfloat16_copy_decodes_with_fixed_shapes(tiny_model_dir, steps):
    """Mixed precision samples from a bfloat16 copy: its steps run too, and its log-probs stay the
    row-dropping loop's to bfloat16 rounding where the two sampled the same tokens."""
    def engine(mode):
        return Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, threads=1, seed=0,
                                                            compute_dtype="bfloat16",
                                                            options={"fixed_shape_decode": mode}))
    sampling = SamplingParams(max_new_tokens=8, n=2, seed=2)
    a, b = engine("on").generate(PROMPTS, sampling), engine("off").generate(PROMPTS, sampling)
    assert steps["steps"] > 0
    for x, y in zip(a, b, strict=True):
        same = 0
        while same < min(len(x.completion_ids), len(y.completion_ids)) and \
                x.completion_ids[same] == y.completion_ids[same]:
            same += 1
        assert same > 0 and np.allclose(x.logprobs[:same], y.logprobs[:same], atol=0.05)


def test_used_only_where_asked(tiny_model_dir, steps):
    """"off" never; "auto" only on CUDA; a model whose code is not Llama's keeps the loop."""
    sampling = SamplingParams(max_new_tokens=4, n=2, seed=0)
    _engine(tiny_model_dir, fixed_shape_decode="off").generate(PROMPTS, sampling)
    assert steps["steps"] == 0
    _engine(tiny_model_dir).generate(PROMPTS, sampling)
    assert (steps["steps"] > 0) == torch.cuda.is_available()
    assert fixed_decode.wanted({}, torch.device("cuda")) and not fixed_decode.wanted({}, torch.device("cpu"))
    assert fixed_decode.wanted({"fixed_shape_decode": "on"}, torch.device("cpu"))


@pytest.mark.parametrize("value", ["yes", True, ""])
def test_switch_must_be_one_of_its_modes(tiny_model_dir, value):
    with pytest.raises(ConfigError) as err:
        _engine(tiny_model_dir, fixed_shape_decode=value)
    assert err.value.field == "backends.options.fixed_shape_decode"
    assert '"auto", "on", "off"' in str(err.value)
