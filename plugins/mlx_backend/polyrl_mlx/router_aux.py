"""A Mixture-of-Experts model's router load-balancing loss on MLX, as the torch backend adds it.

Why: TRL 1.16 adds ``router_aux_loss_coef x`` transformers' (Mixtral's) ``load_balancing_loss_func``
of the router logits to a MoE model's loss by default; an MLX run that left it out (or refused
the model's own coefficient) trained differently from TRL and the torch backend.

mlx-lm's MoE blocks compute their router logits inside ``__call__`` (``gates = self.gate(x)``) and
return none. :func:`recording` gives each block's ``gate`` module a subclass (per instance,
parameters and names unchanged) that, while a recording is active, also appends its output to
the recording's list; under ``nn.value_and_grad`` those arrays belong to the traced graph, so the
loss computed from them differentiates into the routers and the layers below. A gradient-
checkpointed layer hands its gates out as extra outputs of its ``mx.checkpoint`` call
(``checkpointing.py``), so they stay differentiable there too.

Only the model types whose mlx-lm block is read here (``COVERED_TYPES``: ``gate`` a linear map of
the block input to the router logits transformers returns, beside ``switch_mlp``) get the term;
the plugin declares them (``Capabilities.router_aux_types``) and the core refuses any other MoE
model with a nonzero coefficient before a model loads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from polyrl.algorithms.objective import Objective
from polyrl.backend_kit.router_aux import is_moe, router_aux_coef, text_config

from polyrl_mlx._mx import mx
from polyrl_mlx.architectures import ROUTER_AUX_TYPES

#: the model types covered, with transformers' default coefficient (``architectures``)
COVERED_TYPES: Mapping[str, float] = ROUTER_AUX_TYPES

_SINKS: list[list[Any]] = []  # the active recordings, innermost last
_CLASSES: dict[type, type] = {}


def active() -> bool:
    """Whether a forward is recording router logits now."""
    return bool(_SINKS)


def record(logits: Sequence[Any]) -> None:
    """Append router logits to the innermost recording (a checkpointed layer's, handed out)."""
    _SINKS[-1].extend(logits)


@contextlib.contextmanager
def collecting() -> Iterator[list[Any]]:
    """A fresh sink for the gates computed inside the block (a checkpointed layer's own call)."""
    sink: list[Any] = []
    _SINKS.append(sink)
    try:
        yield sink
    finally:
        _SINKS.pop()


def _recording_class(cls: type) -> type:
    if cls not in _CLASSES:
        plain_call = cls.__call__

        def __call__(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
            out = plain_call(self, x, *args, **kwargs)
            if _SINKS:
                _SINKS[-1].append(out)
            return out

        _CLASSES[cls] = type(f"RouterRecording{cls.__name__}", (cls,), {"__call__": __call__})
    return _CLASSES[cls]


def moe_gates(model: Any) -> list[Any]:
    """The router (``gate``) module of every mlx-lm MoE block of ``model`` (those holding a
    ``gate`` beside a ``switch_mlp``)."""
    return [m["gate"] for m in model.modules()
            if isinstance(m, dict) and "gate" in m and "switch_mlp" in m]


@contextlib.contextmanager
def recording(model: Any) -> Iterator[list[Any]]:
    """Within the block every MoE gate of ``model`` appends its logits to the list yielded.

    The gates keep their recording subclass afterwards (it records nothing while no recording is
    active): a checkpointed layer recomputes its gates in backward, after the block has ended,
    and must hand out as many outputs as it did in the forward."""
    gates = moe_gates(model)
    if not gates:
        raise ValueError("no Mixture-of-Experts router (a block's gate beside its switch_mlp) found in the model")
    for g in gates:
        if type(g) not in _CLASSES.values():
            g.__class__ = _recording_class(type(g))
    with collecting() as sink:
        yield sink


def router_aux_weight(engine: Any, objective: Objective) -> float:
    """The coefficient in effect for ``engine``'s model (0.0: no term), as the torch backend's:
    the objective's, else the config's own, else (the key left out) transformers' default for the
    model type; ``ConfigError`` for one set on a dense model, or a config.json's ``null``, which
    transformers refuses to load (``polyrl.backend_kit.router_aux``)."""
    config = dict(engine.hf_config)
    if is_moe(config) and objective.router_aux_loss_coef is None and \
            "router_aux_loss_coef" not in text_config(config) and engine.model_type in COVERED_TYPES:
        config["router_aux_loss_coef"] = COVERED_TYPES[engine.model_type]
    return router_aux_coef(config, objective.router_aux_loss_coef, f"model {engine.config.model!r}")


def real_tokens(rows: Sequence[np.ndarray], width: int) -> mx.array:
    """``[rows, width]`` float mask of the real (not padding) positions of right-padded rows."""
    mask = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        mask[i, : len(r)] = 1.0
    return mx.array(mask)


def load_balancing_loss(gate_logits: Sequence[mx.array], real: mx.array, experts: int, top_k: int) -> mx.array:
    """transformers' (Mixtral's) ``load_balancing_loss_func`` over ``real``'s tokens: with every
    MoE layer's tokens pooled, ``experts x sum_e (share of the real tokens' top-k slots routed to
    e) x (mean router probability of e)``; differentiable through the probabilities only."""
    logits = mx.concatenate([g.reshape(-1, experts) for g in gate_logits], axis=0).astype(mx.float32)
    probs = mx.softmax(logits, axis=-1)
    keep = mx.tile(real.reshape(-1), (len(gate_logits),))[:, None]  # [layers x tokens, 1]
    chosen = mx.stop_gradient(mx.argpartition(-probs, kth=top_k - 1, axis=-1)[:, :top_k])
    routed = (mx.arange(experts)[None, None, :] == chosen[:, :, None]).astype(mx.float32).sum(axis=1)
    count = keep.sum()
    share = mx.stop_gradient((routed * keep).sum(axis=0) / count)  # summed over the top-k slots
    mean_prob = (probs * keep).sum(axis=0) / count
    return (share * mean_prob).sum() * experts


__all__ = ["COVERED_TYPES", "load_balancing_loss", "moe_gates", "real_tokens", "recording",
           "router_aux_weight"]
