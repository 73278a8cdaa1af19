"""A Mixture-of-Experts model's router load-balancing loss, over the tokens TRL takes it over.

Why: TRL 1.16's GRPOTrainer adds ``router_aux_loss_coef x aux_loss`` to each micro-batch's loss of
a MoE model (``_compute_loss``), where ``aux_loss`` is transformers' (Mixtral's)
``load_balancing_loss_func`` of the backbone's router logits over every real token the forward
sees (prompt and completion, padding masked out), with the config's ``num_experts`` and
``num_experts_per_tok``; the coefficient is chosen by ``polyrl.backend_kit.router_aux``.
"""

from __future__ import annotations

from typing import Any

import torch

from polyrl.algorithms.objective import Objective
from polyrl.backend_kit.router_aux import expert_counts, router_aux_coef


def router_aux_weight(engine: Any, objective: Objective) -> float:
    """The coefficient in effect for ``engine``'s model (0.0: no term); ``ConfigError`` for a
    coefficient set on a dense model."""
    return router_aux_coef(engine.causal_lm.config, objective.router_aux_loss_coef, f"model {engine.config.model!r}")


def load_balancing_loss(config: Any, router_logits: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
    """transformers' (Mixtral's) load-balancing loss of ``router_logits`` (one ``[rows x width,
    experts]`` tensor per MoE layer) over ``mask``'s real tokens (``[rows, width]``)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    experts, top_k = expert_counts(config)
    loss = load_balancing_loss_func(tuple(router_logits), experts, top_k, mask.to(router_logits[0].device))
    if not isinstance(loss, torch.Tensor):  # the model returned no router logits
        raise ValueError("the MoE model returned no router logits for its load-balancing loss")
    return loss
