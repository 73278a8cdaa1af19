"""What a family's ``*ForCausalLM.forward`` does to the head's logits, and a check that the scorer
reproduces it.

Why: the scorer (``polyrl_torch.scoring``) runs the decoder and the output head itself, on the
completion positions only, instead of the model's whole forward; the sampler runs the whole
forward. Anything a family's forward does after the head is therefore the scorer's job too, or
the trainer's log-probs silently differ from the sampler's (and from the model's): Granite divides
the logits by ``logits_scaling`` (3.3 nats of log-prob on a tiny model before this), Cohere
multiplies them by ``logit_scale``, Gemma 2/3 soft-cap them (``final_logit_softcapping``).
``check_scorer_matches_model`` runs one short sequence both ways when a model type polyrl has not
tested loads (the scorer in train mode for a trainer: dropout ``engine.disable_dropout`` missed
would show too), and refuses the model when they differ (a transform not listed here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import torch

from polyrl.errors import ConfigError

if TYPE_CHECKING:
    from polyrl_torch.engine import TorchEngine

#: Tokens of the probe sequence (a prompt of one token, then the completion).
PROBE_TOKENS = 12
#: Largest |log-prob| difference the probe accepts: two kernels' float error, well below any
#: dropped transform (float32 measures ~1e-6; 16-bit weights round each layer's output).
PROBE_TOLERANCE = {torch.float32: 1e-3}
PROBE_TOLERANCE_16BIT = 5e-2


@attrs.frozen
class HeadTransform:
    """``softcap(logits * scale)``, as the family's forward computes it after ``lm_head``."""

    scale: float = 1.0
    softcap: float | None = None


def head_transform(config: Any) -> HeadTransform:
    """The transform ``config``'s family applies (Granite: / logits_scaling; Cohere: * logit_scale;
    Gemma 2/3: final_logit_softcapping); the identity for every other family."""
    scale = 1.0
    divisor = getattr(config, "logits_scaling", None)
    if isinstance(divisor, (int, float)) and divisor not in (0, 1):
        scale /= float(divisor)
    factor = getattr(config, "logit_scale", None)
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor != 1:
        scale *= float(factor)
    softcap = getattr(config, "final_logit_softcapping", None)
    return HeadTransform(scale=scale, softcap=float(softcap) if softcap else None)


def check_scorer_matches_model(engine: TorchEngine) -> None:
    """Refuse a model whose own forward gives other log-probs than polyrl's scorer (one short
    sequence through both; a no-op under FSDP, whose shards are not whole here)."""
    from polyrl.types import TokenSequence
    from polyrl_torch.scoring import token_logprobs

    if engine.fsdp is not None:
        return
    lm = engine.causal_lm
    vocab = int(lm.config.vocab_size)
    ids = (np.arange(PROBE_TOKENS, dtype=np.int64) * 7919 + 11) % vocab  # spread over the vocabulary
    was_training = engine.model.training
    engine.model.eval()
    try:
        with torch.inference_mode(), engine.autocast():
            logits = lm(input_ids=torch.from_numpy(ids)[None].to(engine.device), use_cache=False).logits[0]
            expected = torch.log_softmax(logits.float(), dim=-1)[:-1].gather(
                -1, torch.from_numpy(ids[1:])[:, None].to(engine.device))[:, 0]
            engine.model.train(engine.is_train)  # the training forward runs in train mode: no dropout left
            scored = token_logprobs(engine, [TokenSequence(ids[:1], ids[1:])], 1.0)[0]
    finally:
        engine.model.train(was_training)
    gap = float((scored.float() - expected).abs().max())
    tolerance = PROBE_TOLERANCE.get(engine.compute_dtype or engine.dtype, PROBE_TOLERANCE_16BIT)
    if not gap <= tolerance:
        model_type = getattr(lm.config, "model_type", "?")
        raise ConfigError(
            f"the torch backend cannot score model_type {model_type!r} exactly: its forward changes the "
            f"logits in a way polyrl's scorer does not reproduce (log-prob gap {gap:.2e} on a probe sequence)",
            field="model.path",
            fix="use a model family listed by `polyrl backends --json` (torch architectures)")
