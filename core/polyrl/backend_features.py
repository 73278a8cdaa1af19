"""Up-front refusal of optional features (sampling knobs, gradient checkpointing) a backend lacks.

Why: ``SamplingParams`` says every backend honours every field, so a generator that cannot do
min-p must not silently sample without it; the run is refused before any model loads, naming
the field, the backend and the fix. Backends declare what they honour in ``Capabilities``.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from polyrl.backend_kit.router_aux import (check_declared, is_moe, own_coef, refuse_router_aux,
                                          returns_router_logits, router_aux_coef)
from polyrl.errors import ConfigError
from polyrl.model_config import config_tables
from polyrl.types import OptimizerConfig
from polyrl.validators import shown

#: ``generation`` field -> (its "off" value, the ``Capabilities.sampling`` feature name)
SAMPLING_FEATURES: dict[str, tuple[float | bool, str]] = {
    "min_p": (0.0, "min_p"),
    "repetition_penalty": (1.0, "repetition_penalty"),
    "ignore_eos": (False, "ignore_eos"),
}


def _toml(value: float | bool) -> str:
    """``value`` as the user writes it in the TOML config (``false``, not Python's ``False``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def refuse_unsupported_sampling(sampling: Any, backend: str, supported: tuple[str, ...] = ()) -> None:
    """For a backend's own ``generate``: a ``SamplingParams`` knob it cannot honour is an error,
    never silently dropped (the same check the trainer makes up front from ``Capabilities``)."""
    for field, (off, feature) in SAMPLING_FEATURES.items():
        if getattr(sampling, field) != off and feature not in supported:
            raise ConfigError(f"backend {backend!r} does not support {field}", field=f"generation.{field}",
                              fix=f"set {field} = {_toml(off)}, or generate with a backend that declares it "
                              "(`polyrl backends`)")


def with_total_steps(optimizer: OptimizerConfig, total: int) -> OptimizerConfig:
    """The run's optimizer settings with the schedule's span filled in when the user left it unset."""
    return optimizer if optimizer.total_steps is not None else attrs.evolve(optimizer, total_steps=total)


def check_backend_features(config: Any, registry: Any) -> None:
    """Raise ``ConfigError`` when ``config`` (a ``RunConfig``) asks for a feature its backends lack."""
    gen_name = config.backends.generate_backend
    gen_caps = registry.spec(gen_name).capabilities
    for field, (off, feature) in SAMPLING_FEATURES.items():
        if getattr(config.generation, field) != off and feature not in gen_caps.sampling:
            raise ConfigError(
                f"generate backend {gen_name!r} does not support {field}", field=f"generation.{field}",
                fix=f"set generation.{field} = {_toml(off)}, or generate with a backend that "
                "declares it (`polyrl backends`)")
    train_name = config.backends.train
    if config.train.gradient_checkpointing and not registry.spec(train_name).capabilities.gradient_checkpointing:
        raise ConfigError(f"train backend {train_name!r} does not support gradient checkpointing",
                          field="train.gradient_checkpointing",
                          fix="set train.gradient_checkpointing = false, or train with torch or mlx")


def check_router_aux(config: Any, registry: Any, model_path: str, launched: bool | None = None) -> None:
    """Refuse up front a Mixture-of-Experts model whose router load-balancing loss the train backend
    does not compute (``Capabilities.router_aux_types`` declared without its model type) unless
    ``algorithm.router_aux_loss_coef`` is 0: the same error its ``train_step`` would raise, before
    a model loads instead of after the first rollout. A coefficient set on a dense model is refused
    here for every backend, and so is the term under FSDP (``launched``: under a multi-process
    launcher, None: read from torchrun's environment), whose sharded forward returns no router
    logits (torch's ``train_step`` refuses it too, after a rollout)."""
    name = config.backends.train
    covered = registry.spec(name).capabilities.router_aux_types
    tables = config_tables(model_path)
    requested = config.algorithm.router_aux_loss_coef
    if tables:  # "router_aux_loss_coef": null: transformers loads no such model (every backend refuses it)
        check_declared(tables[0], f"model {config.model.path!r}")
    if launched is None:
        launched = "WORLD_SIZE" in os.environ
    if tables and launched and config.backends.options.get("fsdp") is True and is_moe(tables[0]):
        coef = requested if requested is not None else own_coef(tables[0])
        if coef != 0.0:  # unset and undeclared: transformers' default for the type
            raise ConfigError(("is " + shown(coef) if requested is not None else "is unset (the model's own "
                               "coefficient applies)") + ", and the torch backend's sharded (fsdp = true) forward "
                              "has no Mixture-of-Experts router load-balancing loss (TRL adds it by default)",
                              field="algorithm.router_aux_loss_coef",
                              fix="set router_aux_loss_coef = 0 in [algorithm] to train without it under FSDP, or "
                                  "remove fsdp = true from [backends.options] (plain data parallelism adds it)")
    if tables and requested and not is_moe(tables[0]) and not returns_router_logits(tables[-1].get("model_type")):
        # a coefficient on a dense model, whatever the backend: the error train_step would raise
        # after the first rollout, here before a model loads
        router_aux_coef(tables[0], requested, f"model {config.model.path!r}")
    if covered is None or not tables or tables[0].get("model_type") in covered:
        return
    refuse_router_aux(tables[0], requested, name)


def check_compute_dtype(config: Any, registry: Any) -> None:
    """Refuse ``model.compute_dtype`` up front when a backend of the run does not declare it in
    ``Capabilities.compute_dtypes``: it would otherwise compute in ``model.dtype`` without a word.
    Equal to ``model.dtype`` it asks for nothing and passes everywhere."""
    wanted = config.model.compute_dtype
    if wanted is None or wanted == config.model.dtype:
        return
    roles = [("train", config.backends.train), ("generate", config.backends.generate_backend)]
    if config.algorithm.beta > 0:
        roles.append(("reference", config.backends.reference_backend))
    for role, name in roles:
        offered = registry.spec(name).capabilities.compute_dtypes
        if wanted not in offered:
            raise ConfigError(
                f"{role} backend {name!r} does not offer compute_dtype {wanted!r}", field="model.compute_dtype",
                fix=f"remove model.compute_dtype (or use one of {', '.join(offered)})" if offered else
                "remove model.compute_dtype, or use a backend that declares it (`polyrl backends`; torch does)")
