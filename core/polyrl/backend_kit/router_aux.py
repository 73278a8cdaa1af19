"""The Mixture-of-Experts load-balancing loss's coefficient, chosen as TRL 1.16's GRPOTrainer does.

Why: TRL adds ``router_aux_loss_coef x`` the router's load-balancing loss (Switch Transformer's,
transformers' ``load_balancing_loss_func``) to the loss of every MoE model by default, with the
model config's own coefficient when ``GRPOConfig.router_aux_loss_coef`` is unset; a backend that
left the term out trained a TRL user's Qwen2-MoE / Mixtral / Qwen3-MoE differently without a word.
A model is MoE, as TRL reads it, when its (text) config has ``output_router_logits``; a
coefficient set on a dense model is an error there and here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError
from polyrl.validators import shown

FIELD = "algorithm.router_aux_loss_coef"
#: config.json keys of a mixture-of-experts model beyond ``output_router_logits`` (a hand-written
#: config.json may leave that out; transformers' config classes that have it always write it)
EXPERT_KEYS = ("output_router_logits", "num_experts", "num_local_experts", "n_routed_experts")


def text_config(config: Any) -> Any:
    """The language model's config: ``get_text_config()`` of a transformers config (a vision-language
    model's text part, as TRL reads it), a config.json dict's ``text_config`` when it has one."""
    if isinstance(config, Mapping):
        inner = config.get("text_config")
        return inner if isinstance(inner, Mapping) else config
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def expert_counts(config: Any) -> tuple[int, int]:
    """(experts, experts per token) of a MoE config (a transformers config or a config.json dict),
    as TRL reads them: transformers 5's ``num_experts``, Mixtral's ``num_local_experts`` under that
    name, and ``num_experts_per_tok``; every backend's router term counts with these."""
    text = text_config(config)

    def field(key: str) -> Any:
        return text.get(key) if isinstance(text, Mapping) else getattr(text, key, None)

    return int(field("num_experts") or field("num_local_experts")), int(field("num_experts_per_tok"))


def is_moe(config: Any) -> bool:
    """Whether the model returns router logits (TRL's test: ``output_router_logits`` in its text
    config); a config.json dict also by its expert counts, unless transformers' config class of its
    ``model_type`` has no ``output_router_logits`` (``returns_router_logits``)."""
    text = text_config(config)
    if isinstance(text, Mapping):
        if text.get("output_router_logits") is not None:
            return True
        if not any(text.get(key) is not None for key in EXPERT_KEYS):
            return False
        model_type = text.get("model_type", config.get("model_type") if isinstance(config, Mapping) else None)
        return returns_router_logits(model_type) is not False
    return hasattr(text, "output_router_logits")


def config_class(model_type: Any) -> Any:
    """transformers' config class for ``model_type``, or None (no transformers here, no type, or
    one it does not know): read lazily so the core imports no transformers of its own."""
    if not isinstance(model_type, str) or not model_type:
        return None
    try:
        from transformers import CONFIG_MAPPING

        return CONFIG_MAPPING[model_type]
    except Exception:  # noqa: BLE001 - no transformers, or a type it does not know
        return None


def returns_router_logits(model_type: Any) -> bool | None:
    """Whether transformers' config class for ``model_type`` has ``output_router_logits`` (None:
    transformers or the type unknown here, so the expert counts decide). Why: DeepSeek-V2/V3's,
    GLM-4-MoE's, Hunyuan-MoE's and LFM2-MoE's configs count experts but return no router logits,
    so TRL adds no load-balancing loss for them; counted as MoE, their eval loss was dropped and a
    backend without the term refused them for a loss TRL does not add."""
    cls = config_class(model_type)
    if cls is None:
        return None
    if hasattr(cls, "output_router_logits") or "output_router_logits" in getattr(cls, "__annotations__", {}):
        return True
    try:  # a class that sets it in ``__init__`` alone
        return "output_router_logits" in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return None


#: transformers' MoE config classes' usual default (Qwen2/3-MoE, Mixtral), where the class of a
#: model type cannot be read here (no transformers, a type it does not know)
FALLBACK_COEF = 0.001


def default_coef(model_type: Any) -> float:
    """What transformers loads a MoE config.json without ``router_aux_loss_coef`` as: its config
    class's default for ``model_type`` (0.01 for OLMoE, 0.001 for Qwen-MoE and Mixtral), else
    ``FALLBACK_COEF``. Why: the torch backend reads the loaded config object (the class default)
    while the core, the eval loss and MLX read the file; a missing key read as 0 turned the term
    off where TRL adds it, and a flat 0.001 weighted OLMoE's ten times too little."""
    cls = config_class(model_type)
    if cls is None:
        return FALLBACK_COEF
    value = getattr(cls, "router_aux_loss_coef", None)
    if value is None:
        try:
            value = inspect.signature(cls.__init__).parameters["router_aux_loss_coef"].default
        except (KeyError, TypeError, ValueError):
            return FALLBACK_COEF
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else FALLBACK_COEF


def _model_type(config: Any) -> Any:
    """The (text) config's ``model_type``, else the outer config's."""
    def get(table: Any) -> Any:
        return table.get("model_type") if isinstance(table, Mapping) else getattr(table, "model_type", None)

    return get(text_config(config)) or get(config)


def _declared(text: Any) -> float | None:
    """The config's own coefficient; None when a config.json leaves the key out (transformers then
    uses its config class's default). ``null`` is a ``ConfigError`` (``null_coefficient``)."""
    if isinstance(text, Mapping):
        if "router_aux_loss_coef" not in text:
            return None
        value = text["router_aux_loss_coef"]
    else:
        value = getattr(text, "router_aux_loss_coef", 0.0)
    if value is None:
        raise null_coefficient()
    return float(value)


def null_coefficient(model: str = "the model") -> ConfigError:
    """A MoE config that writes ``"router_aux_loss_coef": null``. Why an error: transformers 5's
    MoE config classes refuse to load it (a float field), and TRL, under a transformers that
    loads it, takes ``None`` as the coefficient and fails at its first loss; a backend that read
    it as 0 (no term) or as the type's default (0.001) trained a loss TRL never computes."""
    return ConfigError(f"{model}'s config.json has \"router_aux_loss_coef\": null, which transformers refuses to load "
                       "(it is a number) and TRL cannot weight its router load-balancing loss with",
                       field="model.path",
                       fix="write a number for router_aux_loss_coef in the model's config.json, or remove the key "
                           "for transformers' default (0.001 for Qwen-MoE and Mixtral)")


def declared_coef(config: Any) -> float | None:
    """A MoE config's own coefficient (its text config's), None where a config.json declares none."""
    return _declared(text_config(config))


def own_coef(config: Any) -> float:
    """A MoE config's coefficient as transformers loads it: the declared one, else its config
    class's default (``default_coef``)."""
    declared = declared_coef(config)
    return default_coef(_model_type(config)) if declared is None else declared


def check_declared(config: Any, model: str = "the model") -> None:
    """``null_coefficient`` for a MoE config (a transformers config or a config.json dict) whose
    coefficient is ``null``, whatever ``algorithm.router_aux_loss_coef`` says: the model does not
    load in transformers either way. Every backend and the eval loss check it before reading it."""
    if not is_moe(config):
        return
    try:
        _declared(text_config(config))
    except ConfigError:
        raise null_coefficient(model) from None


def router_aux_coef(config: Any, requested: float | None, model: str = "the model") -> float:
    """The coefficient in effect (0.0: no term): ``requested``, or when None the model config's own
    (``own_coef``: transformers' default for its type where config.json declares none), for a MoE
    model; a dense model gets 0.0, and a nonzero
    ``requested`` there is a ``ConfigError`` naming the field (TRL raises too)."""
    moe = is_moe(config)
    if requested and not moe:
        raise ConfigError(f"is {shown(requested)}, but {model} is not a Mixture-of-Experts model that returns "
                          "router logits, so there is no load-balancing loss to weight", field=FIELD,
                          fix="remove router_aux_loss_coef (or set it to 0), or train a Mixture-of-Experts model")
    if not moe:
        return 0.0
    check_declared(config, model)
    if requested is not None:
        return float(requested)
    return own_coef(config)


def refuse_router_aux(config: Mapping[str, Any], requested: float | None, backend: str) -> None:
    """For a backend whose loss has no router term: a MoE model whose coefficient is not 0 (set, or
    the model's own, ``own_coef``) is a ``ConfigError``, never a loss
    that silently differs from TRL's."""
    if not is_moe(config):
        router_aux_coef(config, requested)  # a coefficient on a dense model: TRL's error
        return
    check_declared(config)
    coef = requested if requested is not None else own_coef(config)
    if coef == 0.0:
        return
    what = (f"is {shown(requested)}" if requested is not None else
            f"is unset, so the model's own coefficient applies ({shown(coef)})")
    raise ConfigError(f"{what}, and backend {backend!r} has no Mixture-of-Experts load-balancing loss (TRL adds "
                      "it by default)", field=FIELD,
                      fix=f"set router_aux_loss_coef = 0 in [algorithm] to train without it on {backend}, or train "
                          'with backends train = "torch", which adds it as TRL does')
