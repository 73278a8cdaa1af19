"""LR schedules, gradient checkpointing, min-p and repetition penalty on the torch and MLX backends.

Real engines on the tiny Llama; the schedule is checked against transformers' own schedulers,
the repetition penalty against transformers' ``RepetitionPenaltyLogitsProcessor`` and greedy
``model.generate``, and resumes against an uninterrupted run.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.backend_features import check_backend_features, refuse_unsupported_sampling
from polyrl.config import RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.schedules import lr_multiplier
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

CHATS = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Name a colour."}]]
BACKENDS = ["torch", "mlx"]
BASE = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}


def make_engine(backend: str, model: str, **overrides) -> Engine:
    reg = get_registry()
    if backend not in reg.names() or not reg.status(backend).available:
        pytest.skip(f"backend {backend!r} not usable here")
    overrides.setdefault("optimizer", OptimizerConfig(lr=1e-2, max_grad_norm=None))
    overrides.setdefault("threads", 1)
    return Engine(reg, backend, EngineConfig(model=model, **overrides))


def batch_of(engine: Engine, seed: int = 0, tokens: int = 6) -> TrainBatch:
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=tokens, n=2, seed=seed))
    seqs = [TokenSequence.of(c) for c in out]
    return TrainBatch(seqs, np.linspace(-1, 1, len(seqs)))


def weights(engine: Engine) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float32) for k, v in engine.export_weights().items()}


# --- schedules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule,warmup,min_ratio", [
    ("cosine", 3, 0.0), ("cosine", 0, 0.0), ("cosine", 2, 0.1), ("linear", 4, 0.0), ("constant", 5, 0.0),
])
def test_multipliers_equal_transformers_schedulers(schedule, warmup, min_ratio):
    import transformers

    total = 12
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    if schedule == "cosine" and min_ratio:
        sched = transformers.get_cosine_with_min_lr_schedule_with_warmup(opt, warmup, total, min_lr_rate=min_ratio)
    elif schedule == "cosine":
        sched = transformers.get_cosine_schedule_with_warmup(opt, warmup, total)
    elif schedule == "linear":
        sched = transformers.get_linear_schedule_with_warmup(opt, warmup, total)
    else:
        sched = transformers.get_constant_schedule_with_warmup(opt, warmup)
    for k in range(total + 1):
        assert lr_multiplier(k, schedule, warmup, total, min_ratio) == pytest.approx(sched.get_last_lr()[0], abs=1e-12), k
        opt.step()
        sched.step()


def test_schedule_ends_at_the_floor_and_stays_there():
    assert lr_multiplier(10, "linear", 2, 10, 0.25) == pytest.approx(0.25)
    assert lr_multiplier(50, "cosine", 2, 10, 0.25) == pytest.approx(0.25)  # past the end: the floor


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_schedule_in_metrics_and_exact_after_resume(backend, tiny_model_dir, tmp_path):
    opt = OptimizerConfig(lr=1e-2, max_grad_norm=None, schedule="cosine", warmup_steps=2, total_steps=6,
                          min_lr_ratio=0.1)
    a = make_engine(backend, tiny_model_dir, optimizer=opt)
    batches = [batch_of(a, seed=s) for s in range(5)]
    lrs_a = [a.train_step(batches[0], Objective()).extra["lr"], a.train_step(batches[1], Objective()).extra["lr"]]
    a.save_checkpoint(str(tmp_path / "ckpt"))
    lrs_a += [a.train_step(b, Objective()).extra["lr"] for b in batches[2:]]
    expected = [1e-2 * lr_multiplier(k, "cosine", 2, 6, 0.1) for k in range(5)]
    assert lrs_a == pytest.approx(expected, rel=1e-12)
    assert lrs_a[0] == 0.0 and lrs_a[2] == pytest.approx(1e-2)  # warmup from 0, then the peak

    b = make_engine(backend, tiny_model_dir, optimizer=opt)
    b.load_checkpoint(str(tmp_path / "ckpt"))
    lrs_b = [b.train_step(batch, Objective()).extra["lr"] for batch in batches[2:]]
    assert lrs_b == lrs_a[2:]
    wa, wb = weights(a), weights(b)
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], atol=1e-6, rtol=0, err_msg=k)


def test_optimizer_config_rejects_bad_schedule_fields():
    with pytest.raises(ConfigError, match="schedule"):
        OptimizerConfig(schedule="exponential")
    for key, value in (("min_lr_ratio", 1.5), ("warmup_steps", -1), ("total_steps", 0)):
        with pytest.raises(ConfigError, match=f"optimizer.{key}"):
            RunConfig.from_dict({**BASE, "optimizer": {key: value}})


# --- gradient checkpointing -----------------------------------------------------------------------


def _checkpointing_active(engine: Engine) -> bool:
    if engine.backend == "torch":
        return bool(engine.raw.causal_lm.is_gradient_checkpointing)
    from polyrl_mlx.checkpointing import is_checkpointed

    return is_checkpointed(engine.raw.model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lora", [None, LoraConfig(rank=4, alpha=8.0)], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_step(backend, lora, tiny_model_dir):
    # both on the one-pass forward (a checkpointed training forward never shares prompts), so
    # the only difference is the recomputation; Adam's first step is ~lr x sign(g), which would
    # turn float-order noise in a near-zero gradient into a visible weight difference
    options = {"shared_prompt_forward": False}
    plain = make_engine(backend, tiny_model_dir, options=options, lora=lora)
    ckpt = make_engine(backend, tiny_model_dir, gradient_checkpointing=True, options=options, lora=lora)
    assert _checkpointing_active(ckpt) and not _checkpointing_active(plain)
    batch = batch_of(plain, tokens=8)
    ma, mb = plain.train_step(batch, Objective()), ckpt.train_step(batch, Objective())
    assert ma.loss == pytest.approx(mb.loss, abs=1e-6)
    assert ma.grad_norm == pytest.approx(mb.grad_norm, rel=1e-5)
    assert ma.grad_norm > 0
    wa, wb = weights(plain), weights(ckpt)
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], atol=1e-6, rtol=0, err_msg=k)


# --- min-p and repetition penalty -----------------------------------------------------------------


def _full_logprobs(engine: Engine, prompt: np.ndarray, completion: np.ndarray, temperature: float) -> np.ndarray:
    """[len(completion), vocab] log-probs of every next token at ``temperature``, from the model itself."""
    ids = np.concatenate([prompt, completion[:-1]])
    if engine.backend == "torch":
        with torch.no_grad():
            logits = engine.raw.model(torch.tensor(ids)[None]).logits[0].float()
        logits = logits.numpy()
    else:
        from polyrl_mlx._mx import mx

        logits = np.array(engine.raw.model(mx.array(ids)[None])[0].astype(mx.float32))
    logits = logits[len(prompt) - 1:].astype(np.float64) / temperature
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def _ratios_to_top(engine: Engine, sampling: SamplingParams) -> np.ndarray:
    """p(token) / p(top token) of every sampled token, at the sampling temperature."""
    out = []
    for c in engine.generate(CHATS, sampling):
        full = _full_logprobs(engine, c.prompt_ids, c.completion_ids, sampling.temperature)
        picked = full[np.arange(len(c.completion_ids)), c.completion_ids]
        np.testing.assert_allclose(c.logprobs, picked, atol=1e-4)  # pre-truncation log-probs
        out.append(np.exp(picked - full.max(axis=-1)))
    return np.concatenate(out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature,min_p", [(1.0, 0.8), (0.5, 0.5)])
def test_min_p_never_samples_below_min_p_times_the_top(backend, temperature, min_p, tiny_model_dir):
    engine = make_engine(backend, tiny_model_dir, role="generate")
    sampling = SamplingParams(max_new_tokens=24, n=8, seed=3, temperature=temperature)
    free = _ratios_to_top(engine, sampling)
    assert (free < min_p).mean() > 0.3  # without min-p such tokens are common: the check can fail
    kept = _ratios_to_top(engine, attrs.evolve(sampling, min_p=min_p))
    assert kept.min() >= min_p - 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_repetition_penalty_matches_transformers_processor(backend):
    from transformers import RepetitionPenaltyLogitsProcessor

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 50)).astype(np.float32) * 3
    history = rng.integers(0, 50, size=(3, 7))
    expected = RepetitionPenaltyLogitsProcessor(1.7)(torch.tensor(history), torch.tensor(logits)).numpy()
    seen = np.zeros((3, 50), dtype=bool)
    np.put_along_axis(seen, history, True, axis=1)
    if backend == "torch":
        from polyrl_torch.generation import penalize_repeats

        got = penalize_repeats(torch.tensor(logits), torch.tensor(seen), 1.7).numpy()
    else:
        pytest.importorskip("mlx")
        from polyrl_mlx._mx import mx
        from polyrl_mlx.generation import penalize_repeats

        got = np.array(penalize_repeats(mx.array(logits), mx.array(seen), 1.7))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert not np.allclose(got, logits)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_with_repetition_penalty_equals_transformers_generate(backend, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    engine = make_engine(backend, tiny_model_dir, role="generate")
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    sampling = SamplingParams(max_new_tokens=16, temperature=0.0, repetition_penalty=1.8)
    plain = engine.generate(CHATS, SamplingParams(max_new_tokens=16, temperature=0.0))
    changed = False
    for c, p in zip(engine.generate(CHATS, sampling), plain):
        with torch.no_grad():
            ref = hf.generate(torch.tensor(c.prompt_ids)[None], do_sample=False, repetition_penalty=1.8,
                              max_new_tokens=len(c.completion_ids), min_new_tokens=len(c.completion_ids),
                              eos_token_id=None, pad_token_id=0)[0, len(c.prompt_ids):]
        assert c.completion_ids.tolist() == ref.tolist()[: len(c.completion_ids)]
        changed |= c.completion_ids.tolist() != p.completion_ids.tolist()
    assert changed  # the penalty changed what greedy decoding picks


def test_backends_without_min_p_are_refused_up_front():
    config = RunConfig.from_dict({**BASE,
                                  "backends": {"train": "torch", "generate": "max"},
                                  "generation": {"min_p": 0.1}})
    reg = get_registry()
    if "max" not in reg.names():
        pytest.skip("max backend not installed")
    with pytest.raises(ConfigError, match="generation.min_p"):
        check_backend_features(config, reg)
    with pytest.raises(ConfigError, match="repetition_penalty"):
        refuse_unsupported_sampling(SamplingParams(repetition_penalty=1.2), "max")
    ok = RunConfig.from_dict({**BASE,
                              "generation": {"min_p": 0.1, "repetition_penalty": 1.1},
                              "train": {"gradient_checkpointing": True}})
    check_backend_features(ok, reg)  # torch declares all three


def test_sampling_fields_are_validated():
    with pytest.raises(ConfigError, match="min_p"):
        SamplingParams(min_p=1.5)
    with pytest.raises(ConfigError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=0.0)
    assert math.isclose(SamplingParams(min_p=0.05).min_p, 0.05)


def test_training_run_with_schedule_checkpointing_and_sampling_knobs(tiny_model_dir, tmp_path):
    """A real torch run through the trainer: the lr each step logs follows the schedule over
    train.steps, with checkpointing and both sampling knobs on."""
    from polyrl.trainer import Trainer

    make_engine("torch", tiny_model_dir, role="generate")  # skips when torch is unusable
    data = {**BASE, "model": {"path": tiny_model_dir},
            "generation": {"group_size": 2, "max_new_tokens": 6, "min_p": 0.05, "repetition_penalty": 1.2},
            "optimizer": {"lr": 1e-3, "schedule": "linear", "warmup_steps": 1, "min_lr_ratio": 0.5},
            "train": {"steps": 4, "prompts_per_step": 2, "threads": 1, "gradient_checkpointing": True,
                      "output_dir": str(tmp_path / "run")}}
    trainer = Trainer(RunConfig.from_dict(data))
    assert trainer.train_engine.raw.causal_lm.is_gradient_checkpointing
    history = trainer.run(progress=False)["history"]
    assert [m["lr"] for m in history] == pytest.approx([1e-3 * lr_multiplier(k, "linear", 1, 4, 0.5)
                                                        for k in range(4)])
