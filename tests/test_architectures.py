"""Every common decoder family on torch and MLX: generate, score, train and sync weights.

Each family gets a tiny random model built locally (``build_tiny_model``: its real HF config
quirks, the shared tiny tokenizer). Through the backend hooks only, each backend samples, scores
the other's samples, takes a training step and hands its weights to the other; the log-probs of
the two backends must agree to float error throughout. The measured gaps are the numbers the
README's "Supported architectures" table shows: with ``POLYRL_ARCH_RESULTS=path.json`` the run
writes them there, and ``tools/architectures_table.py`` renders the table from that file.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
from pathlib import Path

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.tiny_model import ARCHITECTURES, build_tiny_model
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
]
#: float32 error of two different kernels over a few layers; the Gemma 3 bf16 scale was 1e-4.
FLOAT_ERROR = 2e-5
RESULTS: dict[str, dict] = {}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _usable(*names: str) -> None:
    reg = get_registry()
    for name in names:
        status = reg.status(name) if name in reg.names() else None
        if status is None or not status.available:
            pytest.skip(f"backend {name!r} not usable here")


def _engine(path: str, backend: str, role: str = "train") -> Engine:
    return Engine(get_registry(), backend, EngineConfig(
        model=path, role=role, threads=1, optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None)))


def _gap(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("architectures")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    target = os.environ.get("POLYRL_ARCH_RESULTS")
    if target and RESULTS:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps({
            "what": "max |log-prob difference| vs the torch float32 trainer on tiny random models "
                    "(tests/test_architectures.py)",
            "machine": _cpu_model(),
            "architectures": dict(sorted(RESULTS.items())),
        }, indent=2) + "\n")


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_family_runs_on_torch_and_mlx_with_equal_logprobs(arch, models):
    _usable("torch", "mlx")
    path = build_tiny_model(models / arch, arch=arch)
    torch_engine, mlx_engine = _engine(path, "torch"), _engine(path, "mlx")
    record = {"tie_word_embeddings": json.loads(Path(path, "config.json").read_text())["tie_word_embeddings"]}
    seqs = []
    for name, engine in (("torch", torch_engine), ("mlx", mlx_engine)):
        out = engine.generate(CHATS, SamplingParams(max_new_tokens=12, n=2, seed=0))
        assert len(out) == 4 and all(len(c.completion_ids) >= 1 for c in out)
        own = [TokenSequence.of(c) for c in out]
        scored = engine.logprobs(own, 1.0)
        assert _gap([c.logprobs for c in out], scored) < FLOAT_ERROR, f"{name} sampler != scorer"
        gap = _gap(torch_engine.logprobs(own, 1.0), mlx_engine.logprobs(own, 1.0))
        record[f"logprob_gap_on_{name}_samples"] = gap
        assert gap < FLOAT_ERROR, f"{arch}: torch and MLX log-probs differ by {gap:.2e}"
        seqs += own
    for name, trainer, other in (("torch", torch_engine, mlx_engine), ("mlx", mlx_engine, torch_engine)):
        before = trainer.logprobs(seqs, 1.0)
        metrics = trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
        assert not metrics.skipped and np.isfinite(metrics.loss)
        after = trainer.logprobs(seqs, 1.0)
        assert _gap(before, after) > 1e-3, f"{name} train_step did not change the {arch} model"
        other.import_weights(trainer.export_weights())
        gap = _gap(after, other.logprobs(seqs, 1.0))
        record[f"logprob_gap_after_{name}_trains_and_syncs"] = gap
        assert gap < FLOAT_ERROR, f"{arch}: after {name} -> other sync log-probs differ by {gap:.2e}"
    RESULTS[arch] = record


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("arch", ["gemma3_text", "qwen2", "llama"])
def test_tied_and_untied_heads_survive_every_sync_direction(arch, tie, models):
    _usable("torch", "mlx")
    path = build_tiny_model(models / f"{arch}-{tie}", arch=arch, tie_word_embeddings=tie)
    trainer, mlx_gen, torch_gen = _engine(path, "torch"), _engine(path, "mlx"), _engine(path, "torch", "generate")
    seqs = [TokenSequence.of(c) for c in trainer.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=3))]
    for step in range(2):  # twice: the second sync is where a loaded Gemma 3 used to raise
        trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)) * (-1) ** step), Objective())
        exported = trainer.export_weights()
        assert ("lm_head.weight" in exported) is not tie
        for receiver in (mlx_gen, torch_gen):  # torch -> MLX, torch -> torch
            receiver.import_weights(exported)
            assert _gap(trainer.logprobs(seqs, 1.0), receiver.logprobs(seqs, 1.0)) < FLOAT_ERROR
    mlx_trainer = _engine(path, "mlx")
    mlx_trainer.import_weights(trainer.export_weights())
    mlx_trainer.train_step(TrainBatch(seqs, np.linspace(1, -1, len(seqs))), Objective())
    exported = mlx_trainer.export_weights()
    assert ("lm_head.weight" in exported) is not tie
    trainer.import_weights(exported)  # MLX -> torch
    assert _gap(mlx_trainer.logprobs(seqs, 1.0), trainer.logprobs(seqs, 1.0)) < FLOAT_ERROR


def test_gemma3_embedding_scale_is_exact_in_float32_and_untouched_in_bfloat16(models):
    _usable("mlx")
    import math

    path = build_tiny_model(models / "gemma3_text", arch="gemma3_text")
    f32 = _engine(path, "mlx", "generate").raw
    bf16 = Engine(get_registry(), "mlx", EngineConfig(model=path, role="generate", dtype="bfloat16")).raw
    assert bf16.embedding_scale_factor == 1.0
    from polyrl_mlx._mx import mx

    rounded = float(mx.array(math.sqrt(80), mx.bfloat16).astype(mx.float32).item())
    assert f32.embedding_scale_factor == pytest.approx(math.sqrt(80) / rounded, rel=1e-7)
    ids = mx.array([[5, 6, 7]])
    embed = f32.model.model.embed_tokens
    ratio = embed(ids) / embed.weight[ids]
    assert float(mx.abs(ratio - f32.embedding_scale_factor).max().item()) < 1e-6


def test_capabilities_list_the_tested_architectures():
    reg = get_registry()
    for name in ("torch", "mlx"):
        if name not in reg.names():
            continue
        archs = reg.status(name).capabilities["architectures"]
        assert set(ARCHITECTURES) <= set(archs)
        assert all(archs[a]["train"] and archs[a]["generate"] for a in ARCHITECTURES)


@pytest.mark.faults
def test_an_architecture_a_backend_cannot_run_is_refused_up_front(tmp_path):
    from polyrl.types import ArchSupport, BackendSpec, Capabilities

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    reg = get_registry()
    spec = BackendSpec(name="narrow", load=lambda c: None, capabilities=Capabilities(
        train_step=True, architectures={"llama": ArchSupport(generate=True, train=True),
                                        "phi3": ArchSupport(generate=True, train=False)}))
    reg._backends["narrow"] = spec
    try:
        with pytest.raises(ConfigError) as err:
            reg.check_architecture("narrow", str(model), "generate")
        text = str(err.value)
        assert "'narrow'" in text and "'mamba'" in text and err.value.field == "model.path"
        (model / "config.json").write_text(json.dumps({"model_type": "phi3"}))
        reg.check_architecture("narrow", str(model), "generate")  # allowed
        with pytest.raises(ConfigError, match="cannot train architecture 'phi3'"):
            reg.check_architecture("narrow", str(model), "train")
        reg.check_architecture("torch", str(model), "train")  # '*': anything transformers loads
    finally:
        del reg._backends["narrow"]


# --- LoRA: every linear layer by default, peft configs accepted ----------------------------------


def _lora_targets(engine: Engine) -> set[str]:
    """Leaf names of the adapted modules of layer 0 (peft's or mlx-lm's LoRA layers)."""
    if engine.backend == "torch":
        from peft.tuners.lora import LoraLayer

        named = engine.raw.model.named_modules()
        return {n.rsplit(".", 1)[-1] for n, m in named if isinstance(m, LoraLayer) and ".layers.0." in n}
    return {n.rsplit(".", 1)[-1] for n in engine.raw.lora_modules() if ".layers.0." in n}


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize("arch, expected", [
    ("phi3", {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}),
    ("qwen3", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
])
def test_default_lora_adapts_every_linear_layer_of_the_family(arch, expected, backend, models):
    from polyrl.types import LoraConfig

    _usable(backend)
    path = build_tiny_model(models / arch, arch=arch)
    engine = Engine(get_registry(), backend, EngineConfig(model=path, role="train", threads=1,
                                                          lora=LoraConfig(rank=2, alpha=4)))
    assert _lora_targets(engine) == expected
    seqs = [TokenSequence.of(c) for c in engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=0))]
    metrics = engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    assert not metrics.skipped and "lm_head" not in str(sorted(_lora_targets(engine)))


def test_peft_lora_config_is_accepted_by_agent_config_and_engines(models):
    import peft

    from polyrl.api import Agent
    from polyrl.types import LoraConfig

    agent = Agent("tiny", lora=peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                               target_modules=["v_proj", "q_proj"], task_type="CAUSAL_LM"))
    assert agent.lora == LoraConfig(rank=4, alpha=8.0, dropout=0.0, target_modules=("q_proj", "v_proj"))
    assert Agent("tiny", lora=peft.LoraConfig(r=2)).lora.all_linear  # no family to read: every linear layer
    _usable("torch")
    path = build_tiny_model(models / "phi3", arch="phi3")
    engine = Engine(get_registry(), "torch", EngineConfig(
        model=path, role="train", threads=1, lora=peft.LoraConfig(r=2, target_modules="all-linear")))
    assert _lora_targets(engine) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


@pytest.mark.faults
@pytest.mark.parametrize("field, value", [("use_dora", True), ("bias", "all"), ("use_rslora", True),
                                          ("modules_to_save", ["lm_head"]), ("layers_to_transform", [0])])
def test_unsupported_peft_lora_fields_are_refused_by_name(field, value):
    import peft

    from polyrl.api import Agent

    with pytest.raises(ConfigError) as err:
        Agent("tiny", lora=peft.LoraConfig(r=4, **{field: value}))
    assert field in str(err.value) and err.value.field == "lora"
    with pytest.raises(ConfigError, match="regular-expression"):
        Agent("tiny", lora=peft.LoraConfig(r=4, target_modules=r".*q_proj"))


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_float16_generates_scores_and_trains(backend, models):
    _usable(backend)
    path = build_tiny_model(models / "qwen2", arch="qwen2")
    engine = Engine(get_registry(), backend, EngineConfig(model=path, role="train", dtype="float16", threads=1,
                                                          optimizer=OptimizerConfig(lr=1e-2)))
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=0))
    seqs = [TokenSequence.of(c) for c in out]
    assert _gap([c.logprobs for c in out], engine.logprobs(seqs, 1.0)) < 2e-3  # float16 rounding
    _usable("torch")
    exact = _engine(path, "torch", "generate").logprobs(seqs, 1.0)
    assert _gap(exact, engine.logprobs(seqs, 1.0)) < 2e-3
    metrics = engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    assert not metrics.skipped and np.isfinite(metrics.loss)
    weights = engine.export_weights()
    assert all(w.dtype == np.float32 and np.isfinite(w).all() for w in weights.values())


@pytest.mark.faults
def test_a_dtype_the_generator_does_not_run_is_refused_before_loading(models, tmp_path):
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    reg = get_registry()
    if "max" not in reg.names():
        pytest.skip("the max plugin (which declares no float16) is not installed")
    path = build_tiny_model(models / "llama", arch="llama")
    data = {
        "model": {"path": path, "dtype": "float16"},
        "backends": {"train": "torch", "generate": "max"},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")},
    }
    with pytest.raises(ConfigError) as err:
        Trainer(RunConfig.from_dict(data))
    assert err.value.field == "model.dtype" and "'max'" in str(err.value) and "float16" in str(err.value)
    data["model"]["dtype"] = "float8"
    with pytest.raises(ConfigError, match="model.dtype"):
        RunConfig.from_dict(data)


@pytest.mark.parametrize("tie, server_backend", [(False, "torch"), (True, "mlx")],
                         ids=["untied-torch", "tied-mlx"])  # tied torch import: the local test above
def test_weights_pushed_to_a_remote_server_keep_tied_and_untied_heads(tie, server_backend, models):
    """torch trainer -> ``polyrl serve`` (a real server on 127.0.0.1) -> sampled log-probs equal."""
    from serve_util import start_server

    _usable("torch", server_backend)
    path = build_tiny_model(models / f"gemma3_text-{tie}", arch="gemma3_text", tie_word_embeddings=tie)
    trainer = _engine(path, "torch")
    seqs = [TokenSequence.of(c) for c in trainer.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=3))]
    trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective())
    token = models / f"push-token-{tie}"
    token.write_text(secrets.token_hex(16))
    server = start_server(path, "--backend", server_backend, "--allow-weight-push",
                          "--weight-push-token-file", str(token))
    try:
        remote = Engine(get_registry(), "remote", EngineConfig(
            model="unused", role="generate", options={"servers": [f"{server.url}/v1"],
                                                      "weight_push_token_file": str(token)}))
        for _ in range(2):  # the second push is where a loaded MLX Gemma 3 used to raise
            remote.import_weights(trainer.export_weights())
            out = remote.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=1))
            expected = trainer.logprobs([TokenSequence.of(c) for c in out], 1.0)
            assert _gap([c.logprobs for c in out], expected) < 5e-5
            trainer.train_step(TrainBatch(seqs, -np.linspace(-1, 1, len(seqs))), Objective())
    finally:
        server.stop(graceful=False)  # cleanup (serve_util.ServerProcess.stop)


def test_readme_architecture_table_is_the_rendered_measurements():
    """README's table is what tools/architectures_table.py renders from the measurements and the
    backends' declared capabilities: a stale hand edit or an unrendered capability change fails."""
    import importlib.util
    import re

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("architectures_table", root / "tools" / "architectures_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    expected = tool.render(json.loads(tool.RESULTS.read_text()))
    readme = (root / "README.md").read_text()
    shown = re.search(r"<!-- architectures:start -->\n(.*?)<!-- architectures:end -->", readme, re.DOTALL)
    assert shown is not None and shown.group(1) == expected, "run: python tools/architectures_table.py"


def test_a_peft_lora_config_without_targets_adapts_what_peft_would(models):
    """peft (and so TRL's GRPOTrainer) adapts its per-family default for LoraConfig(r=...) without
    target_modules (q_proj and v_proj for Llama); polyrl adapted every linear layer, silently."""
    import peft
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from polyrl.api import Agent

    _usable("torch")
    path = build_tiny_model(models / "llama-peft-default", arch="llama")
    config = peft.LoraConfig(r=2, lora_alpha=4, task_type="CAUSAL_LM")
    wrapped = get_peft_model(AutoModelForCausalLM.from_pretrained(path), config)
    peft_targets = {name.rsplit(".", 1)[-1] for name, module in wrapped.named_modules() if hasattr(module, "lora_A")}
    assert Agent(path, lora=peft.LoraConfig(r=2, lora_alpha=4)).lora.target_modules == tuple(sorted(peft_targets))
    engine = Engine(get_registry(), "torch", EngineConfig(model=path, role="train", threads=1,
                                                          lora=peft.LoraConfig(r=2, lora_alpha=4)))
    assert _lora_targets(engine) == peft_targets == {"q_proj", "v_proj"}
