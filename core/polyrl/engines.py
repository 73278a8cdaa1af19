"""A run's engines: which backend does what, the models they load, and the weight push between them.

Why a module of its own: checking backend names, resolving models, refusing unsupported feature
combinations and deciding whether generation shares the train engine are setup, not the
algorithm; keeping them here lets ``Trainer``'s step read as generate -> reward -> update -> sync.
Every check that can fail runs before the engine it guards loads, so a bad config errs in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import attrs

from polyrl.backend_features import check_backend_features, check_compute_dtype, check_router_aux, with_total_steps
from polyrl.backend_kit.options import check_option_keys
from polyrl.bench import speed_records
from polyrl.config import RunConfig
from polyrl.device_names import check_device
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.model_sampling import warn_unused_sampling
from polyrl.plugins import install_hint
from polyrl.prequantized import refuse_prequantized
from polyrl.ref_sync import ReferenceSync, needs_own_reference
from polyrl.registry import Registry
from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence

log = get_logger("polyrl.trainer")


@attrs.define
class RunEngines:
    """The loaded engines of a run. ``generate`` is ``train`` itself when they can share one copy;
    ``reference`` is None when the train engine answers reference log-probs (or ``beta = 0``)."""

    model_path: str
    train: Engine
    generate: Engine
    reference: Engine | None
    ref_sync: ReferenceSync
    #: updates the generate engine's weights have seen (-1: unknown)
    generator_version: int = -1

    def sync_weights(self, version: int) -> float:
        """Push the train engine's weights (``version`` updates) to the generator; the seconds it took."""
        if version == self.generator_version:
            return 0.0
        t0 = time.perf_counter()
        _push_weights(self.train, self.generate)
        self.generator_version = version
        return time.perf_counter() - t0


def _push_weights(train: Engine, generate: Engine) -> None:
    if generate is not train:
        generate.import_weights(train.export_weights())


def choose_generate_backend(config: RunConfig, registry: Registry) -> RunConfig:
    """Resolve ``backends.generate = "auto"``: the fastest usable backend ``polyrl bench``
    measured for this model on this machine, else the train backend (see speed_records)."""
    b = config.backends
    if b.generate != "auto":
        return config
    usable = [s.name for s in registry.statuses()
              if s.available and s.capabilities.get("generate")
              and (s.name == b.train or s.capabilities.get("weight_import"))
              and (not config.generation.overlap or s.capabilities.get("concurrent_generate"))]
    model = registry.resolve_model(config.model.path)
    found = speed_records.fastest(model, usable)
    if found:
        chosen, speeds = found
        log.info("generate backend chosen", backend=chosen, why="fastest measured here by polyrl bench",
                 tokens_per_s={k: round(v, 1) for k, v in speeds.items()})
    else:
        chosen = b.train
        log.info("generate backend chosen", backend=chosen,
                 why="no polyrl bench measurement for this model on this machine: the train backend "
                 "(run `polyrl bench --generate-only --model ...` to measure)")
    return attrs.evolve(config, backends=attrs.evolve(b, generate=chosen))


def check_backend_names(config: RunConfig, registry: Registry) -> None:
    """Fail before loading anything when a role names a backend that is not installed."""
    c, known = config, registry.names()
    roles = [("train", c.backends.train), ("generate", c.backends.generate_backend)]
    if c.algorithm.beta > 0:
        roles.append(("reference", c.backends.reference_backend))
    failed = registry.load_errors_of("backends")
    for role, name in roles:
        if name not in known:
            broken = next((e for e in failed if e.name == name), None)
            if broken is not None:  # installed, but its plugin did not load: "install it" would mislead
                raise ConfigError(
                    f"backend {name!r} is installed ({broken.distribution or 'unknown distribution'}) but its "
                    f"plugin did not load: {broken.error}", field=f"backends.{role}",
                    fix=None if "Fix:" in broken.error else "repair or reinstall that distribution (`polyrl "
                    "backends` shows the error), or name another backend")
            others = f"; plugins that did not load: {', '.join(e.name for e in failed)}" if failed else ""
            raise ConfigError(
                f"unknown backend {name!r} (installed: {', '.join(known) or 'none'}{others})",
                field=f"backends.{role}",
                fix=f"install its plugin ({install_hint(name)}) or name an installed "
                "backend; `polyrl backends` lists them",
            )


def _run_backends(config: RunConfig) -> list[str]:
    """The backends this run loads engines of (the reference one only when ``beta > 0``)."""
    b = config.backends
    names = [b.train, b.generate_backend] + ([b.reference_backend] if config.algorithm.beta > 0 else [])
    return list(dict.fromkeys(names))


def check_backend_options(config: RunConfig, registry: Registry) -> None:
    """Refuse a ``backends.options`` key that no backend of the run reads, before anything loads
    (the table is free-form, so a typo would otherwise silently do nothing). Skipped when a
    backend of the run does not declare its keys (``BackendSpec.options`` None)."""
    known: dict[str, tuple[str, ...]] = {}
    for name in _run_backends(config):
        keys = registry.spec(name).options
        if keys is None:
            return
        known[name] = keys
    check_option_keys(config.backends.options, known)


def check_backend_devices(config: RunConfig, registry: Registry) -> None:
    """Refuse a ``model.device`` that a backend of the run does not read, by the names its plugin
    declares (``Capabilities.device_names``), before anything loads. The config checked polyrl's
    own backends' names when it loaded; this reaches third-party ones, and skips any that declare
    none (their engine decides)."""
    for name in _run_backends(config):
        check_device(config.model.device, registry.spec(name).capabilities.device_names, name)


def run_optimizer(config: RunConfig) -> OptimizerConfig:
    """The run's optimizer settings as the train engine gets them: the schedule spans
    ``train.steps`` x ``num_iterations`` x ``minibatches`` updates unless ``optimizer.total_steps``
    says otherwise."""
    return with_total_steps(config.optimizer, config.train.steps * config.algorithm.updates_per_step)


def engine_config(config: RunConfig, role: str, model: str) -> EngineConfig:
    """What an engine of ``role`` ("train", "generate", "reference") is built with."""
    c = config
    return EngineConfig(
        model=model, role=role, dtype=c.model.dtype, compute_dtype=c.model.compute_dtype, device=c.model.device, seed=c.train.seed,
        threads=c.train.threads, lora=c.lora if role == "train" else None,
        optimizer=run_optimizer(c),
        max_length=c.model.max_length, options=dict(c.backends.options),
        trust_remote_code=c.model.trust_remote_code,
        chat_template_kwargs=dict(c.model.chat_template_kwargs),
        gradient_checkpointing=c.train.gradient_checkpointing and role == "train",
        collective_timeout_s=c.train.collective_timeout_s,
    )


def _generate_model(config: RunConfig, registry: Registry, model: str) -> str:
    """The generate engine's model: ``generation.max_model_path`` (e.g. a GGUF for MAX), else ``model``."""
    if not config.generation.max_model_path:
        return model
    gen_model = registry.resolve_model(config.generation.max_model_path, field="generation.max_model_path")
    if not Path(gen_model).exists():
        raise ConfigError(
            f"max_model_path {config.generation.max_model_path!r} does not exist",
            field="generation.max_model_path",
            fix="point it at the file or folder the generate backend should load (e.g. a "
            ".gguf for MAX), or remove it to generate from model.path",
        )
    return gen_model


def _check_overlap(config: RunConfig, registry: Registry) -> None:
    c = config
    if c.generation.overlap and not registry.spec(c.backends.generate_backend).capabilities.concurrent_generate:
        raise ConfigError(
            f"backend {c.backends.generate_backend!r} does not declare concurrent_generate (its "
            "generate running on a worker thread while training runs)", field="generation.overlap",
            fix="set generation.overlap = false, or generate with a backend that declares it "
            "(`polyrl backends` shows capabilities; torch and remote do)")
    if c.generation.overlap and c.train.threads is None:
        log.warning("generation.overlap with train.threads unset: the sampler and the trainer each "
                    "use every core and slow each other down", fix="set train.threads to half the cores")


def _reference_engine(config: RunConfig, registry: Registry, model: str, train: Engine) -> Engine | None:
    """A separate reference engine, or None when ``beta = 0`` or the train engine answers for it."""
    c = config
    if c.algorithm.beta <= 0:
        return None
    ref_model = (registry.resolve_model(c.model.reference_path, field="model.reference_path")
                 if c.model.reference_path else model)
    if (ref_model == model and c.backends.reference_backend == c.backends.train
            and not needs_own_reference(c.algorithm)):
        # e.g. a LoRA engine answers for its frozen base with adapters disabled
        if train.logprobs([TokenSequence([1], [1])], 1.0, reference=True) is not None:
            return None
    return Engine(registry, c.backends.reference_backend, engine_config(c, "reference", ref_model))


def _refuse_prequantized_reference(config: RunConfig, registry: Registry, model: str) -> None:
    """A pre-quantized KL reference (``model.reference_path``, or model.path under a
    ``backends.reference`` of its own) refused as model.path is (``polyrl.prequantized``). Why: only
    the train and generate roles' models were checked, so a GPTQ/AWQ reference failed only as its
    engine loaded, after every startup check."""
    c = config
    if c.algorithm.beta <= 0 or (not c.model.reference_path and c.backends.reference_backend == c.backends.train):
        return  # no KL term, or the train engine's own model, already checked for that backend
    backend = c.backends.reference_backend
    if c.model.reference_path:
        ref = registry.resolve_model(c.model.reference_path, field="model.reference_path")
        field, shown = "model.reference_path", c.model.reference_path
    else:
        ref, field, shown = model, "backends.reference", c.model.path
    refuse_prequantized(ref, backend, registry.spec(backend).capabilities.quant_methods,
                        "score the KL reference", field, shown_as=shown)


def check_engines(config: RunConfig, registry: Registry, launched: bool | None = None) -> tuple[str, str]:
    """Everything about the backends and models that can be checked without loading one: names,
    options, the model paths, each role's architecture, dtypes and features. The train and
    generate models' paths. ``polyrl launch`` runs it too, so its ranks never meet these errors."""
    c, reg = config, registry
    check_backend_names(c, reg)
    check_backend_options(c, reg)
    check_backend_devices(c, reg)
    model = reg.resolve_model(c.model.path)
    if not Path(model).exists():
        raise ConfigError(
            f"model {c.model.path!r} is neither a local path nor a known alias",
            field="model.path",
            fix="give an existing HF folder/GGUF file, or an alias like smollm2-135m-instruct "
            "(needs polyrl[torch])",
        )
    reg.check_architecture(c.backends.train, model, "train", device=c.model.device)
    refuse_prequantized(model, c.backends.train, reg.spec(c.backends.train).capabilities.quant_methods, "train",
                        shown_as=c.model.path)
    check_router_aux(c, reg, model, launched)
    # what the train engine's load would refuse (LoRA targets...), no weights read
    reg.run_check(c.backends.train, "check_model", engine_config(c, "train", model))
    gen_model = _generate_model(c, reg, model)  # both roles' models checked before either loads
    gen_field = "generation.max_model_path" if gen_model != model else "model.path"
    reg.check_architecture(c.backends.generate_backend, gen_model, "generate", device=c.model.device,
                           field=gen_field)
    refuse_prequantized(gen_model, c.backends.generate_backend,
                        reg.spec(c.backends.generate_backend).capabilities.quant_methods, "generate", gen_field,
                        shown_as=c.model.path if gen_model == model else None)
    _refuse_prequantized_reference(c, reg, model)
    reg.check_dtype(c.backends.train, c.model.dtype, "train")
    reg.check_dtype(c.backends.generate_backend, c.model.dtype, "generate")
    check_compute_dtype(c, reg)
    check_backend_features(c, reg)
    _check_overlap(c, reg)
    return model, gen_model


def load_engines(config: RunConfig, registry: Registry,
                 before_load: Callable[[str], None] | None = None) -> RunEngines:
    """Check the backends and models, then load the train, generate and reference engines; the
    generator starts with the train engine's weights. ``before_load(model_path)``: the caller's
    checks that need the resolved model folder but no weights (the chat template's)."""
    c, reg = config, registry
    model, gen_model = check_engines(c, reg)
    warn_unused_sampling(model, c.generation, log)  # the model's suggested temperature... , as TRL: not used
    if before_load is not None:
        before_load(model)
    t0 = time.perf_counter()
    train = Engine(reg, c.backends.train, engine_config(c, "train", model))
    shared = c.backends.generate_backend == c.backends.train and gen_model == model
    if shared and not c.generation.overlap:
        generate = train
    else:  # overlap needs a second copy: the train engine's weights change while it samples
        generate = Engine(reg, c.backends.generate_backend, engine_config(c, "generate", gen_model))
    _push_weights(train, generate)  # before the reference loads, as the generator's version 0
    reference = _reference_engine(c, reg, model, train)
    ref_sync = ReferenceSync(train, reference, c.algorithm.ref_sync_every, c.algorithm.ref_sync_alpha)
    log.info("engines ready", train=c.backends.train, generate=c.backends.generate_backend,
             reference=(c.backends.reference_backend if reference else "train engine")
             if c.algorithm.beta > 0 else "none", model=model, seconds=round(time.perf_counter() - t0, 2))
    return RunEngines(model, train, generate, reference, ref_sync, generator_version=0)
