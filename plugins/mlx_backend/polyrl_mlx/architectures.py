"""Per-architecture facts of the MLX backend: what it runs, and one numeric fix (Gemma 3).

Why a module of its own: the plugin's capability table (``polyrl backends --json``), the engine's
split-head scoring and the Gemma 3 embedding-scale fix all depend on the HF ``model_type``, and
keeping them together makes adding an architecture one edit.
"""

from __future__ import annotations

import math
from typing import Any

from polyrl.types import ArchSupport

#: mlx-lm model types whose logits are ``lm_head(model.model(x))`` (or the tied embedding), so
#: scoring and prefill project only the positions they need onto the vocabulary.
SPLIT_HEAD_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3"})

#: What tests/test_architectures.py checks on tiny models: generate, score and train through the
#: hooks, weights synced both ways with torch, log-probs equal to torch's within float error.
ARCHITECTURES: dict[str, ArchSupport] = {
    **{name: ArchSupport(generate=True, train=True, fast_path=True)
       for name in ("llama", "mistral", "qwen2", "qwen3", "phi3")},
    "gemma3_text": ArchSupport(
        generate=True, train=True, fast_path=True,
        notes="embedding scale sqrt(hidden) applied in the model dtype by polyrl (mlx-lm rounds "
              "it to bfloat16); shared-prompt forward masks the sliding-window layers itself"),
    "*": ArchSupport(generate=True, train=True, fast_path=False,
                     notes="other mlx-lm model types: full forward, untested by polyrl; checked at "
                           "load (config keys mlx-lm drops, unloaded weights, sampler vs scorer "
                           "on a probe) and refused on a mismatch"),
}

#: The model types above that polyrl tests; any other one goes through ``family_check`` at load.
TESTED_TYPES = frozenset(ARCHITECTURES) - {"*"}

#: Mixture-of-Experts model type -> transformers' default ``router_aux_loss_coef`` for its config
#: class (Qwen2MoeConfig, Qwen3MoeConfig: what the torch backend reads when config.json leaves it
#: out): the types whose router load-balancing loss ``train_step`` adds (``router_aux``); another
#: MoE model with a coefficient not 0 is refused before it loads (``Capabilities.router_aux_types``).
ROUTER_AUX_TYPES: dict[str, float] = {"qwen2_moe": 0.001, "qwen3_moe": 0.001}


def _bfloat16(value: float) -> float:
    """``value`` rounded to bfloat16 as mlx-lm does (MLX's own cast, so rounding modes match)."""
    from polyrl_mlx._mx import mx

    return float(mx.array(value, mx.bfloat16).astype(mx.float32).item())


def _in_dtype(value: float, dtype: str) -> float:
    from polyrl_mlx._mx import mx

    return float(mx.array(value, getattr(mx, dtype)).astype(mx.float32).item())


def exact_embedding_scale(model: Any, model_type: str, dtype: str) -> float:
    """Make Gemma 3's embedding scale what transformers uses; return the factor applied (1.0: none).

    mlx-lm multiplies the embeddings by ``sqrt(hidden_size)`` rounded to bfloat16 whatever the
    model's dtype; transformers rounds it to the weights' dtype. In float32 that is a 0.1 %
    different input to every layer, enough to move log-probs by ~1e-2 on a real Gemma 3 and to
    break the trainer/sampler agreement GRPO's ratio relies on. The embedding module's class is
    swapped for a subclass multiplying by ``exact / rounded`` (parameters and names unchanged,
    so weight sync and checkpoints see nothing); in bfloat16 the factor is 1 and nothing changes.
    """
    if model_type != "gemma3_text":
        return 1.0
    backbone = getattr(model, "model", None)
    embed = getattr(backbone, "embed_tokens", None)
    hidden = getattr(getattr(backbone, "args", None), "hidden_size", None)
    if embed is None or not hidden:
        return 1.0
    exact = math.sqrt(hidden)
    factor = _in_dtype(exact, dtype) / _bfloat16(exact)
    if factor == 1.0:
        return 1.0
    base = type(embed)
    if getattr(base, "_polyrl_scale_factor", None) is not None:
        base = base.__mro__[1]  # already corrected (a second call): re-derive from the original

    def __call__(self: Any, x: Any) -> Any:
        return base.__call__(self, x) * factor

    embed.__class__ = type(f"ScaleCorrected{base.__name__}", (base,),
                           {"__call__": __call__, "_polyrl_scale_factor": factor})
    return factor


def backbone_embed_scale(engine: Any) -> float | None:
    """The factor the backbone's own ``__call__`` puts on the embeddings (Gemma 3: sqrt(hidden),
    which mlx-lm rounds to bfloat16; the exact part is in the embedding, see above), for code
    that runs the layers itself (the shared-prompt forward); None when there is none."""
    if engine.model_type != "gemma3_text":
        return None
    return math.sqrt(engine.model.model.args.hidden_size)
