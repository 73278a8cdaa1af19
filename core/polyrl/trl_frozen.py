"""A model object whose parameters the script froze (``requires_grad = False``), refused.

Why: transformers' optimizer, which TRL's GRPOTrainer builds, holds only the parameters with
``requires_grad`` set, so a script that freezes the embeddings or the lower layers trains the rest
alone. polyrl saves the object's weights and trains every one of them (it has no partial
freezing), so the frozen ones moved without a word. A PeftModel freezes its base by design and
``peft_config`` makes TRL freeze the base anyway: neither is checked here.
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError


def refuse_frozen_parameters(model: Any, peft_config: Any) -> None:
    """One ConfigError naming the frozen parameters of ``model`` (a ``PreTrainedModel``) where TRL
    would train only the others; nothing for a folder, a PeftModel or a run with ``peft_config``."""
    if peft_config is not None or not hasattr(model, "named_parameters"):
        return
    from polyrl import trl_peft_model

    if trl_peft_model.is_peft_model(model):
        return
    named = list(model.named_parameters())
    frozen = [name for name, p in named if not getattr(p, "requires_grad", True)]
    if not frozen:
        return
    shown = ", ".join(frozen[:3]) + (f" and {len(frozen) - 3} more" if len(frozen) > 3 else "")
    raise ConfigError(f"model has {len(frozen)} of its {len(named)} parameters frozen (requires_grad=False: {shown}); "
                      "TRL's optimizer trains only the others, polyrl trains every weight of the model",
                      field="model", fix="unfreeze them (model.requires_grad_(True)) to train the whole model, or "
                                         "train an adapter with peft_config=LoraConfig(...)")
