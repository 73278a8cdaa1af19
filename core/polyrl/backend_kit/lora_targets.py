"""Which layers ``lora.target_modules`` adapts: one rule, applied the same way by every backend.

Why: a user who switches ``backends`` from torch to mlx expects the same training, so the same
weights must get adapters. Each backend lists the modules of its decoder blocks, named relative
to the block (``self_attn.q_proj``, ``mlp.shared_expert.gate_proj``) and sorted into kinds; this
module decides from that list alone, so the decision cannot differ between backends:

* ``"all-linear"`` adapts every ``LINEAR`` module of the blocks: peft's "all-linear" (every linear
  layer, output head excluded) as the model is in transformers 5, where a mixture-of-experts'
  router and its experts are not linear layers (router modules, fused 3-D expert tensors);
* a list of names adapts the modules whose block path is a name or ends with ``.name`` (peft's
  matching of a list), and every name must reach something the backend can adapt: a name that
  matches nothing, only a non-linear module (``mlp``, a norm), or a router or experts this
  backend cannot adapt is one ``ConfigError`` on ``lora.target_modules``, never a smaller set.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from polyrl.errors import ConfigError
from polyrl.types import ALL_LINEAR, LoraConfig

FIELD = "lora.target_modules"
#: a linear layer of the block (``nn.Linear``, GPT-2's ``Conv1D``): what "all-linear" adapts
LINEAR = "linear"
#: a mixture-of-experts' router (transformers 5: a router module holding a [experts, hidden] weight)
ROUTER = "router"
#: a mixture-of-experts' routed experts, one entry per projection (``mlp.experts.gate_proj``)
EXPERTS = "experts"
#: anything else (attention and MLP containers, norms): never adapted
OTHER = "other"


def matches(path: str, name: str) -> bool:
    """peft's rule for a listed name: the module's path is the name or ends with ``.name``."""
    return path == name or path.endswith("." + name)


def _examples(paths: Collection[str]) -> str:
    leaves = sorted({p.rsplit(".", 1)[-1] for p in paths})
    return ", ".join(leaves) if leaves else "none"


def select_targets(modules: Mapping[str, str], lora: LoraConfig, *, adaptable: Collection[str],
                   backend: str, model_type: str) -> list[str]:
    """The block paths of ``modules`` (block path -> kind) that LoRA adapts, sorted.

    ``adaptable``: the kinds this backend can train an adapter on besides ``LINEAR`` (MLX: routers
    and experts; torch: none). Raises ``ConfigError`` on ``lora.target_modules`` when a listed name
    reaches nothing adaptable, or something this backend cannot adapt.
    """
    linear = sorted(p for p, kind in modules.items() if kind == LINEAR)
    if lora.all_linear:
        if not linear:
            raise ConfigError(f"this {model_type} model has no linear layer in its decoder blocks for LoRA",
                              field=FIELD, fix="train without [lora]")
        return linear
    can = {LINEAR, *adaptable}
    chosen: set[str] = set()
    for name in lora.target_modules:
        hits = {p: kind for p, kind in modules.items() if matches(p, name)}
        if not hits:
            raise ConfigError(f"{name!r} names no layer in the decoder blocks of this {model_type} model "
                              "(polyrl adapts the blocks' linear layers; the output head and embeddings never)",
                              field=FIELD, fix=f'use "{ALL_LINEAR}" or some of: {_examples(linear)}')
        other = sorted(p for p, kind in hits.items() if kind == OTHER)
        if other:
            inner = [p for p in linear if p.startswith(other[0] + ".")]
            fix = f"name its linear layers: {', '.join(inner)}" if inner else \
                f'use "{ALL_LINEAR}" or some of: {_examples(linear)}'
            raise ConfigError(f"{name!r} names {other[0]}, which is not a linear layer: LoRA adapts linear layers",
                              field=FIELD, fix=fix)
        refused = sorted(p for p, kind in hits.items() if kind not in can)
        if refused:
            kind = hits[refused[0]]
            what = ("the mixture-of-experts router" if kind == ROUTER
                    else "the routed experts (transformers holds them as fused 3-D tensors, not linear layers)")
            kept = sorted(p for p in hits if p not in refused)
            fix = (f"name only {', '.join(kept)}" if kept else f"leave {name!r} out") + \
                ' (or use backends "mlx", which adapts routers and each expert)'
            raise ConfigError(f"{name!r} names {refused[0]}, {what}, which the {backend} backend cannot adapt: "
                              "it would train fewer weights than the mlx backend", field=FIELD, fix=fix)
        chosen.update(hits)
    return sorted(chosen)


__all__ = ["EXPERTS", "FIELD", "LINEAR", "OTHER", "ROUTER", "matches", "select_targets"]
