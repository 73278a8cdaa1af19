"""Tiny random models of decoder families beyond the Llama-like ones, built with transformers' own
config classes (``AutoConfig.for_model``) and the tiny Llama's tokenizer.

Test helper (no hub here). Each config keeps the family's quirk at a strength a backend that drops
it cannot hide: Gemma 2's attention and final soft-caps and 8-token sliding window, Granite's
embedding/residual/attention/logit multipliers, Cohere's logit scale, GPT-2's Conv1D layers,
learned positions and 0.1 dropout, partial rotary embeddings (GPT-NeoX, Phi-2, StableLM), Qwen2-
and Qwen3-MoE's routed (and shared) experts, SmolLM3's layers without RoPE, Starcoder2's sliding
window, Falcon's fused query_key_value.
``initializer_range`` 0.2 (not HF's 0.02) so the next-token distributions are far from uniform.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from polyrl.testing.tiny_model import build_tiny_llama

_ATTENTION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  max_position_embeddings=1024)
_GQA = dict(_ATTENTION, num_key_value_heads=2)

#: model_type -> the config values of its tiny model (beyond vocabulary and special ids).
FAMILIES: dict[str, dict[str, Any]] = {
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=1024, n_inner=128),
    "gpt_neox": dict(_ATTENTION, rotary_pct=0.25, tie_word_embeddings=False),
    "gemma2": dict(_GQA, head_dim=16, sliding_window=8, attn_logit_softcapping=5.0,
                   final_logit_softcapping=3.0, query_pre_attn_scalar=16),
    "olmo2": dict(_GQA),
    "granite": dict(_GQA, embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0,
                    attention_multiplier=0.1),
    "qwen3_moe": dict(_GQA, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                      decoder_sparse_step=1, use_sliding_window=False),
    "qwen2_moe": dict(_GQA, moe_intermediate_size=32, shared_expert_intermediate_size=64, num_experts=4,
                      num_experts_per_tok=2, decoder_sparse_step=1, use_sliding_window=False),
    "cohere": dict(_GQA, logit_scale=0.25),
    "phi": dict(_ATTENTION, partial_rotary_factor=0.5),
    "stablelm": dict(_GQA, partial_rotary_factor=0.25),
    "smollm3": dict(_GQA, num_hidden_layers=4, no_rope_layer_interval=2),
    "starcoder2": dict(_GQA, sliding_window=8),
    "falcon": dict(_ATTENTION),
}


def build_family_model(model_type: str, dst: Path, seed: int = 0) -> str:
    """Write (once) a tiny random ``model_type`` model with the tiny Llama's tokenizer to ``dst``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if (dst / "config.json").exists():
        return str(dst)
    tokenizer_dir = Path(build_tiny_llama(dst.parent / "tokenizer-source"))
    vocab = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    config = AutoConfig.for_model(model_type, vocab_size=vocab, bos_token_id=0, eos_token_id=2, pad_token_id=3,
                                  initializer_range=0.2, **FAMILIES[model_type])
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tmp = dst.with_name(dst.name + ".tmp")
    model.save_pretrained(tmp)
    for f in tokenizer_dir.iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, tmp / f.name)
    tmp.rename(dst)
    return str(dst)


def largest_gap(a: Any, b: Any) -> float:
    """The largest absolute difference between two lists of per-token log-prob arrays."""
    import numpy as np

    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


def eager_logprobs(path: str, seqs: Any) -> list[Any]:
    """Each sequence's completion log-probs from the family's own transformers forward (eager
    attention, float32): what a backend's sampler and scorer must reproduce."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.from_numpy(np.concatenate([s.prompt_ids, s.completion_ids]))[None]
            logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)[len(s.prompt_ids) - 1:-1]
            out.append(logp.gather(-1, torch.from_numpy(s.completion_ids)[:, None])[:, 0].numpy())
    return out


def require_backends(*names: str) -> None:
    """Skip, naming the backend, when one of ``names`` is not usable here."""
    import pytest

    from polyrl.registry import get_registry

    reg = get_registry()
    for name in names:
        if name not in reg.names() or not reg.status(name).available:
            pytest.skip(f"backend {name!r} not usable here")


def sample_and_train_as_its_own_forward(trainer: Any, path: str, chats: Any, max_new_tokens: int,
                                        tolerance: float) -> tuple[list[Any], list[Any]]:
    """Sample ``chats`` (2 per chat) with ``trainer``; check sampler == scorer == the family's own
    forward within ``tolerance`` and that one train step moves the log-probs. Returns the
    sequences and their log-probs after the step."""
    import numpy as np

    from polyrl.algorithms.objective import Objective
    from polyrl.types import SamplingParams, TokenSequence, TrainBatch

    out = trainer.generate(chats, SamplingParams(max_new_tokens=max_new_tokens, n=2, seed=0))
    seqs = [TokenSequence.of(c) for c in out]
    sampler = [c.logprobs for c in out]
    assert largest_gap(sampler, trainer.logprobs(seqs, 1.0)) < tolerance, "sampler != scorer"
    assert largest_gap(sampler, eager_logprobs(path, seqs)) < tolerance, "sampler != the model's own forward"
    # no MoE load-balancing loss here: test_router_aux.py checks it on torch and MLX
    metrics = trainer.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)), sampler_logprobs=sampler),
                                 Objective(router_aux_loss_coef=0.0))
    assert not metrics.skipped and metrics.extra["mismatch_abs"] < 1e-5  # the training forward is the sampler's
    after = trainer.logprobs(seqs, 1.0)
    assert largest_gap(sampler, after) > 1e-3, "train_step changed nothing"
    return seqs, after


def train_once_and_save(engine: Any, seqs: Any, folder: str) -> list[Any]:
    """One train step pushing the first sequence up and the second down, then a checkpoint in
    ``folder``; the log-probs the trained weights give ``seqs`` (what a loader must reproduce)."""
    import numpy as np

    from polyrl.algorithms.objective import Objective
    from polyrl.types import TrainBatch

    engine.train_step(TrainBatch(seqs, np.array([1.0, -1.0])), Objective())
    want = engine.logprobs(seqs, 1.0)
    engine.save_checkpoint(folder)
    return want
