"""MAX generation for every architecture its CPU float32 pipeline runs, checked against torch.

Each architecture is a tiny random model derived from the tiny Llama (tests/arch_models.py), so
MAX and torch see identical token ids. A new architecture is a new MAX graph (1-5 minutes of
compiling on 2 cores, seconds from the compile cache afterwards): the MAX tests are ``slow``.
The refusal tests load nothing and run in the default suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from arch_models import build_arch_model
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams, TokenSequence
from polyrl_max.architectures import MAX_ARCHITECTURES, cpu_float32_architectures

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Count to five."}],
]
#: (model_type, tied embeddings): every CPU architecture, both embedding layouts covered.
CPU_CASES = [("qwen2", True), ("phi3", False)]


def _usable() -> None:
    status = get_registry().status("max")
    if not status.available:
        pytest.skip(f"backend 'max' not usable here: {status.reason}")


def _engine(model: str, backend: str, role: str, **kw) -> Engine:
    return Engine(get_registry(), backend, EngineConfig(model=model, role=role, threads=1, **kw))


@pytest.fixture(scope="module")
def arch_root(tiny_model_dir, tmp_path_factory) -> tuple[str, Path]:
    return tiny_model_dir, tmp_path_factory.mktemp("archs")


def test_cpu_cases_cover_every_cpu_architecture():
    assert {t for t, _ in CPU_CASES} | {"llama"} == set(cpu_float32_architectures())


@pytest.mark.parametrize("model_type", ["mistral", "gemma3", "qwen3"])
def test_gpu_only_architecture_is_refused_on_cpu_before_compiling(arch_root, model_type):
    _usable()
    llama, root = arch_root
    if model_type == "gemma3":  # only the config matters: refused before weights are read
        folder = root / "gemma3"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(
            {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}))
        model_type = "gemma3_text"
    else:
        folder = Path(build_arch_model(llama, model_type, root / model_type))
    with pytest.raises(ConfigError, match="GPU only") as err:
        _engine(str(folder), "max", "generate")
    assert err.value.field == "device" and "torch" in err.value.fix
    assert MAX_ARCHITECTURES[model_type].devices() == ("gpu",)


def test_unknown_architecture_is_refused_before_compiling(arch_root):
    _usable()
    _, root = arch_root
    folder = root / "gpt2"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConfigError, match="GPT2LMHeadModel") as err:
        _engine(str(folder), "max", "generate")
    assert err.value.field == "model"


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "tied"), CPU_CASES)
def test_max_equals_torch_and_takes_pushed_weights(arch_root, model_type, tied):
    """Greedy tokens equal torch's, sampler log-probs within float error, and a weight push
    (torch-named, perturbed) makes MAX compute what torch computes with the same weights."""
    _usable()
    llama, root = arch_root
    folder = build_arch_model(llama, model_type, root / f"{model_type}-{'tied' if tied else 'untied'}",
                              tied=tied)
    gen = _engine(folder, "max", "generate")
    ref = _engine(folder, "torch", "train")
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    mine, theirs = gen.generate(CHATS, greedy), ref.generate(CHATS, greedy)
    assert [c.completion_ids.tolist() for c in mine] == [c.completion_ids.tolist() for c in theirs]
    deviation = max(float(np.abs(a.logprobs - b.logprobs).max()) for a, b in zip(mine, theirs))
    sampled = gen.generate(CHATS, SamplingParams(max_new_tokens=12, temperature=0.8, seed=3))
    seqs = [TokenSequence.of(c) for c in sampled]
    scored = ref.logprobs(seqs, 0.8)
    deviation = max(deviation, *(float(np.abs(c.logprobs - s).max()) for c, s in zip(sampled, scored)))
    print(f"\nMAX-vs-torch log-prob deviation {model_type} (tied={tied}): {deviation:.2e}")
    assert deviation < 1e-4

    weights = {k: v * np.float32(1.4) if ("mlp" in k or "embed" in k) else v
               for k, v in ref.export_weights().items()}
    assert ("lm_head.weight" in weights) is not tied
    ref.import_weights(weights)
    gen.import_weights(weights)
    for a, b in zip(gen.logprobs(seqs, 1.0), ref.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert ([c.completion_ids.tolist() for c in gen.generate(CHATS, greedy)]
            == [c.completion_ids.tolist() for c in ref.generate(CHATS, greedy)])
    gen.raw.close()


def test_table_matches_the_installed_max_registry():
    """The plugin's static table is what max.pipelines' registry declares (a MAX upgrade that
    changes encodings fails here rather than at a user's compile)."""
    _usable()
    from max.pipelines.lib import PIPELINE_REGISTRY

    for model_type, arch in MAX_ARCHITECTURES.items():
        registered = PIPELINE_REGISTRY.retrieve_architecture(arch.hf_class)
        assert registered is not None, arch.hf_class
        declared = {str(e) for e in registered.supported_encodings}
        assert set(arch.encodings) | set(arch.quantized) <= declared, (model_type, declared)
        assert ("float32" in declared) == ("float32" in arch.encodings), (model_type, declared)


@pytest.mark.parametrize(("model_type", "encoding", "device", "refused_field"), [
    ("llama", "q4_k", "cpu", None),
    ("qwen2", "q4_k", "cpu", "dtype"),      # MAX's Qwen2 has no quantized encodings
    ("mistral", "bfloat16", "gpu", None),
    ("mistral", "float32", "gpu", "dtype"),
    ("qwen3", "float32", "gpu", None),
    ("phi3", "float32", "cpu", None),
])
def test_encoding_and_device_rules(tmp_path, model_type, encoding, device, refused_field):
    from polyrl_max.architectures import check_architecture

    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": model_type, "architectures": [MAX_ARCHITECTURES[model_type].hf_class]}))
    if refused_field is None:
        assert check_architecture(tmp_path, encoding, device) is MAX_ARCHITECTURES[model_type]
    else:
        with pytest.raises(ConfigError) as err:
            check_architecture(tmp_path, encoding, device)
        assert err.value.field == refused_field and encoding in str(err.value)


@pytest.mark.faults
def test_cli_prints_one_error_line_for_a_cpu_run_of_a_gpu_only_architecture(arch_root, capsys):
    _usable()
    from polyrl.cli import main

    llama, root = arch_root
    folder = build_arch_model(llama, "mistral", root / "mistral-cli")
    assert main(["generate", "hi", "--backend", "max", "--model", folder, "--max-new-tokens", "2"]) == 2
    captured = capsys.readouterr()
    line = next(x for x in captured.err.splitlines() if x.startswith("error: "))
    assert "MistralForCausalLM on a GPU only" in line and "Fix:" in line
    everything = captured.out + captured.err
    assert "Traceback" not in everything and "max_loading" not in everything  # before MAX loads
