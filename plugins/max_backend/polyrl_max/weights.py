"""The ``import_weights`` hook on MAX: new policy weights without recompiling.

MAX's compiled decoder (``max.engine.Model``) takes a new weights registry with ``reload``, which
swaps every weight buffer in place; the graph, its compile cache entry and the KV cache stay.
Names: MAX's Llama-family adapters name a weight by its Hugging Face name without the leading
``model.`` (``model.layers.0.mlp.up_proj.weight`` -> ``layers.0.mlp.up_proj.weight``); a tied
``lm_head`` is the embedding; an engine loaded from a GGUF file gets Q/K rows in llama.cpp's
interleaved order (:func:`rope_permute`). Every name MAX compiled must be given, with its exact shape, or the
import is refused before anything changes.

The engine keeps its own contiguous copies of the imported arrays: on CPU MAX reads the registry's
memory directly (aliasing, measured in DESIGN.md), so the arrays must outlive the call and must not
be written while a generation runs (the core never overlaps the two).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.types import NamedWeights

from polyrl_max.engine import MaxEngine

log = get_logger("polyrl.max")


def max_name(hf_name: str) -> str:
    """MAX's registry name for a Hugging Face weight name."""
    return hf_name[len("model."):] if hf_name.startswith("model.") else hf_name


def rope_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row order (rotary pairs interleaved, not split in halves).

    MAX runs GGUF Llama weights as stored, with interleaved RoPE; an engine loaded from a GGUF
    therefore needs HF-ordered Q/K weights permuted the same way before a reload.
    """
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _head_counts(engine: MaxEngine) -> tuple[int, int]:
    import json

    config = json.loads((engine.max_model_dir / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    return heads, int(config.get("num_key_value_heads") or heads)


def _expected(engine: MaxEngine) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Name -> (shape, MAX dtype) of every weight the compiled decoder holds."""
    if engine.weight_shapes is None:
        engine.weight_shapes = {name: (tuple(int(d) for d in data.shape), data.dtype)
                                for name, data in engine.initial_weights().items()}
    if not engine.weight_shapes:
        raise RuntimeError("MAX released its weights registry; polyrl-max cannot tell which weights "
                           f"the compiled model needs (written against max {engine.MAX_VERSION}.x)")
    return engine.weight_shapes


def to_registry(engine: MaxEngine, weights: NamedWeights) -> dict[str, Any]:
    """MAX-named host arrays (or device buffers) for ``reload``; refuses a partial or misfit set."""
    from max.dtype import DType

    expected = _expected(engine)
    given = {max_name(k): v for k, v in weights.items()}
    if "lm_head.weight" in expected and "lm_head.weight" not in given and "embed_tokens.weight" in given:
        given["lm_head.weight"] = given["embed_tokens.weight"]  # tied embeddings
    missing = sorted(set(expected) - set(given))
    if missing:
        raise ConfigError(f"the imported weights lack {len(missing)} tensors the MAX model needs, "
                          f"e.g. {missing[:3]}", field="weights",
                          fix="export full weights from the trainer (LoRA merged) of the same architecture")
    interleaved = engine.gguf_file is not None
    heads, kv_heads = _head_counts(engine) if interleaved else (0, 0)
    registry: dict[str, Any] = {}
    for name, (shape, dtype) in expected.items():
        array = np.asarray(given[name])
        if interleaved and name.endswith(("q_proj.weight", "k_proj.weight")):
            array = rope_permute(array, heads if name.endswith("q_proj.weight") else kv_heads)
        if tuple(array.shape) != shape:
            raise ConfigError(f"weight {name!r} has shape {tuple(array.shape)}, the MAX model has {shape}",
                              field="weights", fix="sync weights between engines of the same model")
        array = np.ascontiguousarray(array, dtype=np.float32)
        if dtype == DType.float32 and engine.device_kind == "cpu":
            registry[name] = array
        else:
            from max.driver import CPU
            from max.pipelines.lib.bfloat16_utils import float32_array_to_buffer

            registry[name] = float32_array_to_buffer(array, dtype=dtype, device=CPU())
    return registry


def import_weights(engine: MaxEngine, weights: NamedWeights | Mapping[str, Any]) -> bool:
    if engine.quantized:
        raise ConfigError("a quantized MAX engine cannot take float weights", field="backends.options",
                          fix="use quantization_encoding = 'float32' (CPU) or 'bfloat16' (GPU) for a "
                              "generator that syncs weights from the trainer")
    start = time.perf_counter()
    registry = to_registry(engine, weights)
    engine.decoder_model().reload(registry)
    engine.weight_arrays = registry  # keep them alive: MAX may read this memory directly
    engine.last_sync_ms = (time.perf_counter() - start) * 1000
    engine.weight_version += 1
    log.info("max_weights_reloaded", tensors=len(registry), sync_ms=round(engine.last_sync_ms, 2),
             version=engine.weight_version)
    return True
