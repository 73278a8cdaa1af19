"""One LoRA config, one set of adapted weights, whichever backend trains it.

A user who switches ``backends`` from torch to mlx expects the same training. On tiny models of
every family the tests use, the HF weights that get adapters are the same set on both backends:
for "all-linear" (the default) that is every linear layer of transformers' model but the output
head, as peft's "all-linear" reads it (a mixture-of-experts' router and fused experts are not
linear layers in transformers 5), and a list of names reaches the same weights. A name that
matches nothing, or only something LoRA cannot adapt here (the head, a norm, a MoE's router or
experts on torch), is one error on ``lora.target_modules``, never a silently different set.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_families import build_family_model, require_backends

from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.testing.tiny_model import build_tiny_model
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig

#: families the MLX backend runs (tests/test_architectures.py, test_mlx_families.py)
DENSE = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text"]
MOE = ["qwen2_moe", "qwen3_moe"]
#: mlx-lm's stacked expert weight -> transformers' fused tensor (polyrl_mlx.expert_names)
SWITCH_TO_HF = {"switch_mlp.gate_proj.weight": "experts.gate_up_proj",
                "switch_mlp.up_proj.weight": "experts.gate_up_proj",
                "switch_mlp.down_proj.weight": "experts.down_proj"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("lora-targets")


def _model(models: Path, family: str) -> str:
    if family in DENSE:
        return build_tiny_model(models / family, arch=family)
    return build_family_model(family, models / family)


def _engine(backend: str, path: str, lora: LoraConfig) -> Engine:
    return Engine(get_registry(), backend, EngineConfig(model=path, role="train", threads=1, lora=lora,
                                                        optimizer=OptimizerConfig(lr=1e-3)))


def _hf_name(path: str) -> str:
    for switch, fused in SWITCH_TO_HF.items():
        if path.endswith(switch):
            return path[: -len(switch)] + fused
    return path


def adapted(backend: str, engine: Engine) -> dict[str, float]:
    """HF weight name -> adapter scale, for every weight the engine trains an adapter on."""
    raw = engine.raw
    if backend == "torch":
        from peft.tuners.lora import LoraLayer

        return {name.removeprefix("base_model.model.") + ".weight": float(m.scaling["default"])
                for name, m in raw.model.named_modules() if isinstance(m, LoraLayer)}
    return {_hf_name(f"{name}.weight"): float(m.scale) for name, m in raw.lora_modules().items()}


def transformers_linear_weights(path: str) -> set[str]:
    """What peft's "all-linear" means on this folder: every ``nn.Linear`` of transformers' model
    but the output head (computed here from transformers, not from a backend)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    head = model.get_output_embeddings()
    return {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head}


BACKENDS = ["torch", "mlx"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", DENSE + MOE)
def test_all_linear_adapts_transformers_linear_layers_but_the_head(family, backend, models):
    """The default ("all-linear") on either backend: transformers' linear layers but the head; on a
    MoE neither the router (MLX adapted it, torch not) nor the fused experts; scale alpha / rank."""
    require_backends("torch", backend)
    path = _model(models, family)
    got = adapted(backend, _engine(backend, path, LoraConfig(rank=4, alpha=8)))
    expected = transformers_linear_weights(path)
    assert set(got) == expected, sorted(set(got) ^ expected)
    assert set(got.values()) == {2.0}  # alpha / rank, as peft without rsLoRA


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family, names, expected", [
    ("llama", ("q_proj", "v_proj"), {"self_attn.q_proj", "self_attn.v_proj"}),
    ("phi3", ("qkv_proj",), {"self_attn.qkv_proj"}),
    ("qwen3_moe", ("q_proj", "v_proj"), {"self_attn.q_proj", "self_attn.v_proj"}),
    ("qwen2_moe", ("shared_expert.gate_proj", "shared_expert_gate"),
     {"mlp.shared_expert.gate_proj", "mlp.shared_expert_gate"}),
    ("qwen2_moe", ("self_attn.o_proj",), {"self_attn.o_proj"}),
])
def test_listed_names_adapt_the_same_weights_on_either_backend(family, names, expected, backend, models):
    """A list adapts the modules whose block path is a name or ends with ``.name`` (peft's
    matching), in every block; a dotted name was refused on both backends before."""
    require_backends("torch", backend)
    path = _model(models, family)
    got = set(adapted(backend, _engine(backend, path, LoraConfig(rank=2, alpha=4, target_modules=names))))
    assert got == {f"model.layers.{i}.{m}.weight" for i in range(2) for m in expected}


@pytest.mark.faults
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family, name, words", [
    ("llama", "nope_proj", "names no layer"),
    ("llama", "lm_head", "names no layer"),  # torch adapted the output head, MLX refused it
    ("llama", "embed_tokens", "names no layer"),
    ("llama", "mlp", "not a linear layer"),  # a traceback from peft / mlx-lm before
    ("qwen2", "input_layernorm", "not a linear layer"),
    ("phi3", "q_proj", "names no layer"),
    ("qwen3_moe", "mlp", "not a linear layer"),
])
def test_a_name_reaching_no_linear_layer_is_one_error(family, name, words, backend, models):
    require_backends("torch", backend)
    path = _model(models, family)
    with pytest.raises(ConfigError) as err:
        _engine(backend, path, LoraConfig(rank=2, alpha=4, target_modules=(name, "v_proj")))
    text = str(err.value)
    assert err.value.field == "lora.target_modules" and words in text and repr(name) in text, text
    assert "\n" not in text and err.value.fix, text


@pytest.mark.faults
@pytest.mark.parametrize("family, names, refused", [
    # torch adapted the shared expert's gate/up/down and silently not the routed experts
    ("qwen2_moe", ("gate_proj", "up_proj", "down_proj"), "mlp.experts.gate_proj"),
    ("qwen3_moe", ("gate_proj", "up_proj", "down_proj"), "mlp.experts.gate_proj"),
    ("qwen2_moe", ("gate",), "mlp.gate"),  # peft's ValueError as a traceback before
    ("qwen3_moe", ("gate",), "mlp.gate"),
    ("qwen2_moe", ("experts",), "mlp.experts"),
])
def test_moe_router_and_experts_are_refused_on_torch_which_cannot_adapt_them(family, names, refused, models):
    """transformers 5 holds the experts as fused 3-D tensors and the router as a router module:
    torch refuses to train without them, one line naming the field and the fix."""
    require_backends("torch")
    path = _model(models, family)
    with pytest.raises(ConfigError) as err:
        _engine("torch", path, LoraConfig(rank=2, alpha=4, target_modules=names))
    text = str(err.value)
    assert err.value.field == "lora.target_modules" and "\n" not in text, text
    assert f"names {refused}," in text and "cannot adapt" in text and "mlx" in err.value.fix, text


@pytest.mark.parametrize("family, names, weight", [
    ("qwen2_moe", ("gate_proj", "up_proj", "down_proj"), "mlp.experts.gate_up_proj"),
    ("qwen3_moe", ("gate_proj", "up_proj", "down_proj"), "mlp.experts.down_proj"),
    ("qwen3_moe", ("gate",), "mlp.gate.weight"),
])
def test_moe_router_and_experts_named_are_adapted_on_mlx(family, names, weight, models):
    """What torch refuses, MLX trains as asked (``LoRASwitchLinear`` per expert, ``LoRALinear``)."""
    require_backends("mlx")
    path = _model(models, family)
    got = adapted("mlx", _engine("mlx", path, LoraConfig(rank=2, alpha=4, target_modules=names)))
    assert {f"model.layers.{i}.{weight}" for i in range(2)} <= set(got), sorted(got)
