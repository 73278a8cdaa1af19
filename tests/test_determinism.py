"""Same seed, same machine, same threads: a run repeats bit for bit (issue 19, `make demo`).

Two demo runs once ended at 90.0 % and 68.3 % held-out accuracy: the first training step's
gradient already differed in its last bits, because the shared-prompt forward gathered each
prompt's KV cache with advanced indexing, whose CPU backward adds the rows of a prompt group
with atomic float adds from several threads. The model here is wider than the default tiny one
and the prompts long, so that backward is big enough for torch to split it over threads (small
tensors are added serially and never showed the drift); stop strings make the completions ragged
so that a length bucket mixes prompt groups, as the demo's do.

The promise is the CPU's, so the runs here are pinned to it: on an H200 six repeats of one batch's
gradient gave six different digests (README, "On a GPU"; most likely CUDA's backward kernels adding
with atomics). ``backends.options.deterministic = true`` asks torch for its deterministic kernels:
the gradient test runs with it on the default device too (CUDA where there is one).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.trainer import Trainer

pytest.importorskip("torch")

#: Metrics that measure the machine (clock, memory), not the run.
MACHINE_KEYS = ("time/", "perf/", "memory/", "generate_seconds", "tokens_per_s", "latency_s", "step_time")

SYSTEM = "Answer with one number. Think about the digits first, then write the result. " * 3


@pytest.fixture(scope="module")
def wide_tiny_model(tmp_path_factory) -> str:
    from polyrl.testing.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-wide", hidden_size=128,
                            intermediate_size=256)


def run_config(model: str, out) -> RunConfig:
    rows = [{"prompt": [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)}
            for a in range(4) for b in range(4)]
    return RunConfig.from_dict({
        "model": {"path": model, "device": "cpu"},
        "lora": {"rank": 8, "alpha": 16},
        "generation": {"group_size": 4, "max_new_tokens": 6, "stop": ["e", " t"]},
        "optimizer": {"lr": 5e-3},
        "data": {"rows": rows},
        "rewards": [{"name": "numeric_match"}, {"name": "length_penalty", "weight": 0.5,
                                                "options": {"target": 4, "unit": "chars"}}],
        "logging": {"completions_per_step": 16},
        "train": {"steps": 2, "prompts_per_step": 4, "seed": 0, "threads": 2, "output_dir": str(out)},
    })


def weights_digest(trainer: Trainer) -> str:
    h = hashlib.sha256()
    weights = trainer.train_engine.export_weights()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(np.ascontiguousarray(weights[name]).tobytes())
    return h.hexdigest()


def learning_metrics(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not any(m in k for m in MACHINE_KEYS)} for row in rows]


def test_two_runs_with_one_seed_are_bitwise_identical(wide_tiny_model, tmp_path):
    results = []
    for name in ("first", "second"):
        trainer = Trainer(run_config(wide_tiny_model, tmp_path / name))
        trainer.run()
        results.append(trainer)
    first, second = (tmp_path / "first", tmp_path / "second")
    lengths = {len(c["completion"]) for line in (first / "completions.jsonl").read_text().splitlines()
               for c in [json.loads(line)]}
    assert len(lengths) > 2  # ragged completions: the length buckets mix prompt groups
    assert (first / "completions.jsonl").read_text() == (second / "completions.jsonl").read_text()
    a, b = learning_metrics(first), learning_metrics(second)
    assert len(a) == 2
    for step, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"step {step}: " + ", ".join(f"{k} {x[k]!r} != {y.get(k)!r}" for k in x if x[k] != y.get(k))
    assert weights_digest(results[0]) == weights_digest(results[1])


@pytest.fixture
def process_determinism():
    """torch's process-wide determinism settings, put back after the test."""
    import torch

    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]


@pytest.mark.parametrize(("device", "options"), [("cpu", {}), ("auto", {"deterministic": True})],
                         ids=["cpu", "default-device-deterministic"])
def test_shared_prompt_training_gradient_repeats_bitwise(wide_tiny_model, device, options, process_determinism):
    """The same batch's gradient, six times in one process: one result (it was up to six)."""
    import torch

    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence
    from polyrl_torch.scoring import token_logprobs

    engine = Engine(get_registry(), "torch", EngineConfig(
        model=wide_tiny_model, threads=2, optimizer=OptimizerConfig(lr=1e-2), lora=LoraConfig(rank=8, alpha=16),
        device=device, options=options))
    assert torch.are_deterministic_algorithms_enabled() == bool(options)
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}]
             for a, b in ((2, 3), (7, 4), (9, 9), (1, 8))]
    out = engine.generate(chats, SamplingParams(max_new_tokens=6, n=4, seed=1))
    # lengths 2, 4, 3, 2, ...: every length bucket holds rows of several prompts, out of order
    seqs = [TokenSequence(c.prompt_ids, c.completion_ids[: 2 + (i * 5) % 3]) for i, c in enumerate(out)]
    assert min(len(s.completion_ids) for s in seqs) == 2 and max(len(s.completion_ids) for s in seqs) == 4
    weights = np.linspace(-1.0, 1.0, len(seqs))
    model = engine.raw.model
    digests = set()
    for _ in range(6):
        model.zero_grad(set_to_none=True)
        lps = token_logprobs(engine.raw, seqs, 1.0)
        sum(float(w) * lp.sum() for w, lp in zip(weights, lps)).backward()
        h = hashlib.sha256()
        grads = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
        assert len(grads) > 4
        for name, grad in grads:
            h.update(name.encode())
            h.update(grad.cpu().numpy().tobytes())
        digests.add(h.hexdigest())
    assert len(digests) == 1


def test_deterministic_switch_must_be_a_boolean(wide_tiny_model):
    from polyrl.engine import Engine
    from polyrl.errors import ConfigError
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    with pytest.raises(ConfigError) as err:
        Engine(get_registry(), "torch", EngineConfig(model=wide_tiny_model, device="cpu",
                                                     options={"deterministic": "yes"}))
    assert err.value.field == "backends.options.deterministic" and "true or false" in str(err.value)
