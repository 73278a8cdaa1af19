"""Tiny random models of the Llama-like architectures, derived from the tiny Llama.

Test helper (no hub here): each builder copies the tiny Llama's tokenizer and weights into the
layout of another Hugging Face architecture — Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm),
Mistral (sliding-window config), Phi-3 (fused ``qkv_proj`` and ``gate_up_proj``) — so every
backend can be compared on the same token ids. The extra tensors are random (seeded) so a backend
that ignores them disagrees with torch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "phi3": "Phi3ForCausalLM",
}


def _layer_count(tensors: dict[str, np.ndarray]) -> int:
    return 1 + max(int(k.split(".")[2]) for k in tensors if k.startswith("model.layers."))


def _qwen2(tensors, config, rng) -> None:
    for layer in range(_layer_count(tensors)):
        p = f"model.layers.{layer}.self_attn."
        for proj in ("q_proj", "k_proj", "v_proj"):
            rows = tensors[p + proj + ".weight"].shape[0]
            tensors[p + proj + ".bias"] = (rng.standard_normal(rows) * 0.1).astype(np.float32)
    config.update(use_sliding_window=False, sliding_window=None, max_window_layers=config["num_hidden_layers"])


def _qwen3(tensors, config, rng) -> None:
    head_dim = config["head_dim"]
    for layer in range(_layer_count(tensors)):
        p = f"model.layers.{layer}.self_attn."
        for norm in ("q_norm", "k_norm"):
            tensors[p + norm + ".weight"] = (1 + rng.standard_normal(head_dim) * 0.1).astype(np.float32)
    config.update(use_sliding_window=False, sliding_window=None, max_window_layers=config["num_hidden_layers"])


def _mistral(tensors, config, rng) -> None:
    config.update(sliding_window=None)


def _phi3(tensors, config, rng) -> None:
    for layer in range(_layer_count(tensors)):
        p = f"model.layers.{layer}."
        qkv = [tensors.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"]
        tensors[p + "self_attn.qkv_proj.weight"] = np.concatenate(qkv, axis=0)
        gate, up = tensors.pop(p + "mlp.gate_proj.weight"), tensors.pop(p + "mlp.up_proj.weight")
        tensors[p + "mlp.gate_up_proj.weight"] = np.concatenate([gate, up], axis=0)
    config.update(original_max_position_embeddings=config["max_position_embeddings"],
                  partial_rotary_factor=1.0, resid_pdrop=0.0, embd_pdrop=0.0, sliding_window=None)
    for key in ("attention_bias", "mlp_bias", "head_dim"):
        config.pop(key, None)


_CHANGES = {"llama": lambda *_: None, "qwen2": _qwen2, "qwen3": _qwen3, "mistral": _mistral,
            "phi3": _phi3}


def build_arch_model(llama_dir: str, model_type: str, dst: Path, *, tied: bool = False,
                     seed: int = 1) -> str:
    """Write ``dst``: the tiny Llama at ``llama_dir`` as a ``model_type`` model; return its path.

    ``tied`` drops ``lm_head.weight`` and sets ``tie_word_embeddings`` (the embedding is the head).
    """
    from safetensors.numpy import load_file, save_file

    src = Path(llama_dir)
    if (dst / "model.safetensors").exists():
        return str(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    tensors = dict(load_file(str(src / "model.safetensors")))
    config = json.loads((src / "config.json").read_text())
    config.update(model_type=model_type, architectures=[ARCHITECTURES[model_type]])
    _CHANGES[model_type](tensors, config, np.random.default_rng(seed))
    if tied:
        tensors.pop("lm_head.weight")
    config["tie_word_embeddings"] = tied
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return str(dst)
