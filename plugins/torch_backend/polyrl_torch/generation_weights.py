"""A ``compute_dtype`` copy of the policy that only the sampler runs (mixed precision generation).

Why a copy rather than autocast around the decode loop: autocast casts the float32 weights to
bfloat16 again and again (every decode step for frozen LoRA base weights) and measured no faster
than float32 decoding, slower for full fine-tuning, on an AVX512-BF16 CPU; one bfloat16 copy halves
the bytes each decode step reads and runs native bfloat16 matmuls.

The copy is a plain transformers model (no peft layers) holding the weights ``export_weights``
would give (LoRA folded in), rounded to ``compute_dtype``. It is rebuilt lazily: before each
``generate`` the live parameters' storage and in-place version counters, and the engine's update
count, are compared with those it was made from, so an optimizer step, ``import_weights``, a
LoRA reset or a checkpoint load all refresh it (``TorchEngine.weight_updates`` covers the writes version counters miss).
"""

from __future__ import annotations

from typing import Any

import torch

from polyrl_torch.engine import TorchEngine
from polyrl_torch.kv_cache import register_cache_dtype_attention


def weights_fingerprint(engine: TorchEngine) -> tuple[Any, ...]:
    """The engine's update count and each parameter's (storage address, in-place write count):
    changes whenever a weight does (the count covers fused AdamW, which bumps no version)."""
    return (engine.weight_updates, *((p.data_ptr(), p._version) for p in engine.model.parameters()))


class GenerationCopy:
    """The sampler's ``compute_dtype`` model, refreshed from the engine when its weights changed."""

    def __init__(self, engine: TorchEngine) -> None:
        from transformers import AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        assert engine.compute_dtype is not None
        source = engine.causal_lm
        attn = getattr(source.config, "_attn_implementation", None) or "sdpa"
        if attn == "sdpa" and engine.device.type == "cpu":  # a float32 KV cache: see kv_cache
            attn = register_cache_dtype_attention()
            self.cache_dtype: torch.dtype | None = torch.float32
        else:
            self.cache_dtype = None
        with no_init_weights():  # every weight is overwritten by ``current``: skip the random init
            self.model: Any = AutoModelForCausalLM.from_config(source.config, dtype=engine.compute_dtype,
                                                               attn_implementation=attn)
        self.model.tie_weights()  # init_weights (skipped) is what ties them; a no-op when untied
        self.model.to(engine.device).eval().requires_grad_(False)
        self.model.generation_config = source.generation_config
        # the prefill's last position is a strided [rows, 1, hidden] view: torch's bfloat16 matmul
        # copied the whole expanded lm_head weight for it; a contiguous input takes the plain mm
        self.model.get_output_embeddings().register_forward_pre_hook(lambda _, args: (args[0].contiguous(),))
        self._made_from: tuple[Any, ...] = ()

    def current(self, engine: TorchEngine) -> Any:
        """The copy, first refreshed if any of the engine's weights changed since it was made."""
        fingerprint = weights_fingerprint(engine)
        if fingerprint != self._made_from:
            from polyrl_torch.weights import hf_state_dict

            with torch.no_grad():
                state = hf_state_dict(engine)  # LoRA folded, tied duplicates dropped
                missing, unexpected = self.model.load_state_dict(state, strict=False)
                tied = {k for k in missing if k in _tied_names(self.model)}
                if unexpected or set(missing) - tied:
                    raise RuntimeError(f"generation copy out of step with the model: missing "
                                       f"{sorted(set(missing) - tied)[:3]}, unexpected {unexpected[:3]}")
            self._made_from = fingerprint
        return self.model


def _tied_names(model: Any) -> set[str]:
    """Parameter names that alias another one (e.g. ``lm_head.weight`` tied to the embeddings)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.data_ptr() in seen:
            tied.add(name)
        else:
            seen[tensor.data_ptr()] = name
    return tied
