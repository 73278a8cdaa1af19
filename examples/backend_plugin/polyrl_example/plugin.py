"""The module the ``polyrl.backends`` entry point names: registration plus one line per hook.

Nothing heavy is imported here: ``polyrl backends`` imports every installed plugin, so a missing
torch must come back as the probe's reason, not as an ImportError. The compute hooks are called
only with engines this plugin's ``load`` built (polyrl never asks another plugin), so they need no
``isinstance`` checks.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.backend_kit.versions import installed_version
from polyrl.hookspecs import hookimpl
from polyrl.types import BackendSpec, Capabilities, EngineConfig

NAME = "example"
CAPABILITIES = Capabilities(
    generate=True, logprobs=True, train_step=True, weight_export=True, weight_import=True, checkpoint=True,
    token_prompts=True, loss_mask=True,  # what multi-turn episodes (agents, environments) need
    device_names=("cpu",),  # the model.device names the engine reads ("auto" always): others are refused up front
)


def _probe() -> str | None:
    """None when usable here, else why not; cheap (finds packages without importing them)."""
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def _load(config: EngineConfig) -> Any:
    from polyrl_example.engine import ExampleEngine

    return ExampleEngine(config)


@hookimpl
def polyrl_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=NAME, load=_load, capabilities=CAPABILITIES, probe=_probe,
        install_hint="pip install torch transformers", summary="transformers on the CPU (example plugin)",
        version=installed_version("polyrl-example-backend"),
        options=(),  # reads no [backends.options] keys, so the core refuses any typo'd one
    ))


@hookimpl
def generate(engine: Any, prompts: Sequence[Any], sampling: Any) -> Any:
    from polyrl_example.generation import generate as sample

    return sample(engine, prompts, sampling)


@hookimpl
def logprobs(engine: Any, sequences: Sequence[Any], temperature: float, reference: bool) -> Any:
    # None for the frozen reference policy: the core then loads a reference engine of its own
    return None if reference else engine.logprobs(sequences, temperature)


@hookimpl
def train_step(engine: Any, batch: Any, objective: Any) -> Any:
    from polyrl_example.training import train_step as step

    return step(engine, batch, objective)


@hookimpl
def encode_chat(engine: Any, messages: Sequence[Mapping[str, Any]], tools: Any, add_generation_prompt: bool) -> Any:
    return engine.encode_chat(messages, tools, add_generation_prompt)


@hookimpl
def export_weights(engine: Any) -> Any:
    return engine.export_weights()


@hookimpl
def import_weights(engine: Any, weights: Any) -> Any:
    return engine.import_weights(weights)


@hookimpl
def save_checkpoint(engine: Any, path: str, state_path: str | None) -> Any:
    return engine.save_checkpoint(path, state_path)


@hookimpl
def load_checkpoint(engine: Any, path: str, state_path: str | None, weights_only: bool) -> Any:
    return engine.load_checkpoint(path, state_path, weights_only)
