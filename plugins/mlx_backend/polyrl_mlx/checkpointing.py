"""Activation (gradient) checkpointing on the decoder layers of one MLX model.

Each decoder layer's forward, while the model is in train mode, runs under ``mx.checkpoint``:
only the layer's input is kept and its activations are recomputed in backward. Unlike mlx-lm's
``grad_checkpoint`` (which patches the layer *class*, so every model of that class in the process,
the generator's and the reference's included, would change), each layer here gets its own
subclass, so only this engine is affected and the parameter names stay the same. A call given a
KV cache is never checkpointed: the cache is filled as a side effect the recomputation would
repeat and gradients through it would be lost. While a MoE model's router logits are recorded
(``router_aux.recording``) the layer returns them from its checkpointed call as extra outputs,
so the load-balancing loss stays differentiable.
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError

from polyrl_mlx import router_aux
from polyrl_mlx._mx import mx

_SUBCLASSES: dict[type, type] = {}


def _checkpointed_class(cls: type) -> type:
    if cls not in _SUBCLASSES:
        plain_call = cls.__call__

        def __call__(self, x, *args, **kwargs):
            cache = kwargs.get("cache", args[1] if len(args) > 1 else None)
            if not self.training or cache is not None:
                return plain_call(self, x, *args, **kwargs)

            if router_aux.active():  # the MoE gates as extra outputs: differentiable outside too
                def recorded(params, x):
                    self.update(params)
                    with router_aux.collecting() as gates:
                        out = plain_call(self, x, *args, **kwargs)
                    return (out, *gates)

                out, *gates = mx.checkpoint(recorded)(self.trainable_parameters(), x)
                router_aux.record(gates)
                return out

            def inner(params, x):
                self.update(params)
                return plain_call(self, x, *args, **kwargs)

            return mx.checkpoint(inner)(self.trainable_parameters(), x)

        _SUBCLASSES[cls] = type(f"Checkpointed{cls.__name__}", (cls,), {"__call__": __call__})
    return _SUBCLASSES[cls]


def enable_gradient_checkpointing(model: Any) -> int:
    """Checkpoint every decoder layer of ``model`` (an mlx-lm model); returns how many."""
    layers = getattr(model, "layers", None) or getattr(getattr(model, "model", None), "layers", None)
    if not layers:
        raise ConfigError("this model exposes no decoder layers to checkpoint",
                          field="train.gradient_checkpointing", fix="set train.gradient_checkpointing = false")
    for layer in layers:
        layer.__class__ = _checkpointed_class(type(layer))
    return len(layers)


def is_checkpointed(model: Any) -> bool:
    layers = getattr(model, "layers", None) or getattr(getattr(model, "model", None), "layers", None) or []
    return any(type(layer) in _SUBCLASSES.values() for layer in layers)
