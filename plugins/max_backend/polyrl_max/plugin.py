"""The pluggy hook implementations of the ``max`` backend (Modular MAX).

Loaded by the ``polyrl.backends`` entry point in every polyrl process, so it never imports ``max``
at module level: registration reads installed metadata, the probe looks for the packages without
importing them (importing MAX takes seconds), and each compute hook first checks whether the
engine is one of ours. MAX generates and scores; it does not train (``train_step`` is left to the
torch or MLX backend in a hybrid run: ``[backends] train = "torch"``, ``generate = "max"``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.backend_kit.versions import installed_version
from polyrl.device_names import BUILTIN_DEVICE_NAMES
from polyrl.hookspecs import hookimpl
from polyrl.types import ArchSupport, BackendSpec, Capabilities, EngineConfig
from polyrl_max.architectures import capability_table
from polyrl_max.options import KEYS as OPTION_KEYS

BACKEND = "max"
DISTRIBUTION = "polyrl-max"
INSTALL_HINT = "pip install polyrl[max]"
#: optional ``SamplingParams`` features ``generate`` honours (ignore_eos: MAX's own EOS tracking is
#: switched off for the row); min_p/repetition_penalty are refused, see generation.py
SAMPLING = ("ignore_eos",)



def _probe() -> str | None:
    """None when usable here; else why not (without importing MAX)."""
    if not sys.platform.startswith(("linux", "darwin")):
        return f"MAX runs on Linux and macOS only, not {sys.platform}"
    for module, pip_name in (("max", "max[serve]"), ("max.pipelines", "max[serve]"),
                             ("transformers", "transformers")):
        try:
            if importlib.util.find_spec(module) is None:
                return f"{pip_name} not installed: {INSTALL_HINT}"
        except (ImportError, ValueError):
            return f"{pip_name} not installed: {INSTALL_HINT}"
    installed = installed_version("max")
    from polyrl_max.engine import MAX_VERSION

    if not installed.startswith(MAX_VERSION):
        return f"max {installed} is installed but polyrl-max needs max {MAX_VERSION}.x: {INSTALL_HINT}"
    return None


def _devices() -> tuple[str, ...]:
    devices = ["cpu"]
    if importlib.util.find_spec("max") is not None and sys.platform.startswith("linux"):
        devices.append("gpu")  # NVIDIA/AMD where MAX supports the card; checked when loading
    return tuple(devices)


CAPABILITIES = Capabilities(
    generate=True, logprobs=True, train_step=False, lora=False, weight_export=False,
    weight_import=True, checkpoint=False, dtypes=("float32", "bfloat16"), devices=_devices(),
    # float32 weights generating in bfloat16 (MAX's bfloat16 encoding; GPU only: the engine refuses
    # it on CPU by name), so a bench or run asking torch for bfloat16 compute asks MAX too
    compute_dtypes=("bfloat16",),
    device_names=BUILTIN_DEVICE_NAMES["max"],  # what polyrl_max.engine.resolve_device reads
    token_prompts=True,  # TokenPrompt ids verbatim and encode_chat: multi-turn episodes generate here
    sampling=SAMPLING,
    # exhaustive (no "*"): MAX's pipeline registry runs only these; device/encoding limits are
    # in each entry's notes and checked by the engine before compiling
    architectures={t: ArchSupport(**fields) for t, fields in capability_table().items()},
)


def _diagnostics() -> Mapping[str, str]:
    from polyrl_max.engine import configure_environment

    from polyrl_max.architectures import describe

    info = {"max": installed_version("max"), "compile_cache": str(configure_environment({})),
            "architectures": describe()}
    from max.driver import accelerator_count

    info["accelerators"] = str(accelerator_count())
    return info


def _load(config: EngineConfig) -> Any:
    from polyrl_max.engine import MaxEngine

    return MaxEngine(config)


@hookimpl
def polyrl_register_backends(register) -> None:
    register(
        BackendSpec(
            name=BACKEND,
            load=_load,
            capabilities=CAPABILITIES,
            probe=_probe,
            install_hint=INSTALL_HINT,
            summary="Modular MAX pipelines: compiled generation (Llama, Qwen2, Qwen3, Phi-3 on CPU; "
                    "Mistral, Gemma 3 bfloat16 on GPU) with exact per-token log-probs, "
                    "teacher-forced scoring, weight hot reload without recompiling",
            version=installed_version(DISTRIBUTION),
            diagnostics=_diagnostics,
            options=OPTION_KEYS,  # the [backends.options] keys it reads (polyrl_max.options)
        )
    )


@hookimpl
def generate(engine: Any, prompts: Sequence[Any], sampling: Any) -> list | None:
    from polyrl_max.generation import generate as run

    return run(engine, prompts, sampling)


@hookimpl
def encode_chat(engine: Any, messages: Sequence[Any], tools: Sequence[Any] | None,
                add_generation_prompt: bool) -> list | None:
    return engine.encode_chat(messages, tools, add_generation_prompt)


@hookimpl
def logprobs(engine: Any, sequences: Sequence[Any], temperature: float, reference: bool) -> list | None:
    from polyrl_max.scoring import logprobs as run

    return run(engine, sequences, temperature, reference)


@hookimpl
def import_weights(engine: Any, weights: Any) -> bool | None:
    from polyrl_max.weights import import_weights as run

    return run(engine, weights)
