"""The pluggy hook implementations of the ``mlx`` backend.

This module is what the ``polyrl.backends`` entry point loads in every polyrl process, so it
imports neither MLX nor mlx-lm at module level: registration reads installed metadata only, and
each compute hook first checks (without importing MLX) whether the engine is one of ours. A
machine without MLX still lists the backend, with the probe's reason and the install hint.
"""

from __future__ import annotations

import functools
import importlib.util
import platform
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from polyrl.backend_kit.options import SCORING_KEYS
from polyrl.backend_kit.versions import installed_version
from polyrl.device_names import BUILTIN_DEVICE_NAMES
from polyrl.hookspecs import hookimpl
from polyrl.types import BackendSpec, Capabilities, EngineConfig

from polyrl_mlx import state_files
from polyrl_mlx.architectures import ARCHITECTURES, ROUTER_AUX_TYPES

BACKEND = "mlx"
DISTRIBUTION = "polyrl-mlx"
INSTALL_HINT = "pip install polyrl[mlx]"



@functools.lru_cache(maxsize=1)
def _import_error() -> str | None:
    """Why ``mlx.core`` cannot be imported here, or None (imports it once, then remembers)."""
    try:
        if importlib.util.find_spec("mlx") is None:
            return "not installed"
        from polyrl_mlx._mx import mx  # noqa: F401  (preloads OpenBLAS first on Linux)
    except ImportError as exc:
        if "mlx" in str(exc) and "No module named" in str(exc):
            return "not installed"
        return f"import failed ({type(exc).__name__}: {exc})"
    except Exception as exc:  # noqa: BLE001 - any failure means "unusable", with the reason
        return f"import failed ({type(exc).__name__}: {exc})"
    return None


def _probe() -> str | None:
    """None when usable; else why not (``polyrl backends`` shows it)."""
    error = _import_error()
    if error is not None:
        extra = " (on Linux the CPU build is `mlx[cpu]`)" if sys.platform.startswith("linux") else ""
        return f"mlx {error}: {INSTALL_HINT}{extra}"
    for module, pip_name in (("mlx_lm", "mlx-lm"), ("transformers", "transformers")):
        if importlib.util.find_spec(module) is None:
            return f"{pip_name} not installed: {INSTALL_HINT}"
    return None


def _devices() -> tuple[str, ...]:
    """Devices MLX can run on here, decided without importing MLX."""
    devices = ["cpu"]
    if sys.platform == "darwin" and platform.machine() == "arm64":
        devices.append("gpu")  # Metal
    elif importlib.util.find_spec("mlx_cuda") is not None:
        devices.append("gpu")
    return tuple(devices)


CAPABILITIES = Capabilities(
    generate=True, logprobs=True, train_step=True, lora=True, weight_export=True,
    weight_import=True, checkpoint=True, dtypes=("float32", "bfloat16", "float16"),
    devices=_devices(), architectures=ARCHITECTURES,
    device_names=BUILTIN_DEVICE_NAMES["mlx"],  # what polyrl_mlx.engine._device reads
    sampling=("min_p", "repetition_penalty", "ignore_eos"), gradient_checkpointing=True,
    token_prompts=True, loss_mask=True, router_aux_types=tuple(ROUTER_AUX_TYPES),
    # transformers-quantized folders mlx-lm's load converts to its own packed layers (it names any
    # variant it cannot read); polyrl trains LoRA over those as over its own 4/8-bit folders
    quant_methods=("awq", "gptq", "mxfp4", "mxfp8", "compressed-tensors", "modelopt"),
)


def _diagnostics() -> Mapping[str, str]:
    """Facts for ``polyrl doctor`` (imports MLX and runs a 0.3 GFLOP matmul)."""
    from polyrl_mlx import blas
    from polyrl_mlx._mx import mx

    info = {"mlx": mx.__version__, "blas": blas.blas_status(),
            "default_device": str(mx.default_device()),
            "fp32_matmul_gflops": f"{blas.measure_gflops():.1f}"}
    try:
        info["mlx_lm"] = metadata.version("mlx-lm")
    except metadata.PackageNotFoundError:  # pragma: no cover - the probe reports this
        pass
    return info


def _load(config: EngineConfig) -> Any:
    from polyrl_mlx.engine import MLXEngine

    return MLXEngine(config)


def _check_model(config: EngineConfig) -> None:
    """LoRA targets the engine's load would refuse, on the model built from config.json alone."""
    if _probe() is not None:  # no MLX here: the backend is refused as unusable before this
        return
    from polyrl_mlx.startup_check import check_model

    check_model(config)


# --- discovery -----------------------------------------------------------------------------------


@hookimpl
def polyrl_register_backends(register) -> None:
    register(
        BackendSpec(
            name=BACKEND,
            load=_load,
            capabilities=CAPABILITIES,
            probe=_probe,
            install_hint=INSTALL_HINT,
            summary="Apple MLX + mlx-lm (Metal on Apple silicon, OpenBLAS on Linux CPUs): "
                    "exact-logprob sampling, GRPO-family training, LoRA/QLoRA, 4/8-bit models",
            version=installed_version(DISTRIBUTION),
            diagnostics=_diagnostics,
            options=SCORING_KEYS,  # the [backends.options] keys it reads (polyrl_mlx.engine.ScoringOptions)
            check_checkpoint=state_files.check_checkpoint,  # headers only: imports no MLX
            check_model=_check_model,  # LoRA targets at startup, no weights read
        )
    )


@hookimpl
def polyrl_convert_model(src: str, dst: str, to: str, quantize_bits: int | None) -> str | None:
    """``to="mlx"`` (optionally quantized) from a HF/MLX folder; ``to="hf"`` from an MLX folder.

    GGUF sources are left to the torch backend (mlx-lm cannot read GGUF).
    """
    if to not in ("mlx", "hf") or str(src).endswith(".gguf") or _probe() is not None:
        return None
    from polyrl_mlx.convert import convert

    return convert(src, dst, to=to, quantize_bits=quantize_bits)


# --- compute -------------------------------------------------------------------------------------


@hookimpl
def generate(engine: Any, prompts: Sequence[Any], sampling: Any) -> list | None:
    from polyrl_mlx.generation import generate as run

    return run(engine, prompts, sampling)


@hookimpl
def encode_chat(engine: Any, messages: Sequence[Any], tools: Sequence[Any] | None,
                add_generation_prompt: bool) -> Any:
    import numpy as np

    return np.asarray(engine.encode_chat(messages, tools, add_generation_prompt), dtype=np.int64)


@hookimpl
def logprobs(engine: Any, sequences: Sequence[Any], temperature: float, reference: bool) -> list | None:
    from polyrl_mlx.scoring import logprobs as run

    return run(engine, sequences, temperature, reference)


@hookimpl
def entropies(engine: Any, sequences: Sequence[Any], temperature: float) -> list | None:
    from polyrl_mlx.scoring import entropies as run

    return run(engine, sequences, temperature)


@hookimpl
def train_step(engine: Any, batch: Any, objective: Any) -> Any:
    from polyrl_mlx.training import train_step as run

    return run(engine, batch, objective)


# --- weights and state ---------------------------------------------------------------------------


@hookimpl
def export_weights(engine: Any) -> Any:
    from polyrl_mlx.weights import export_weights as run

    return run(engine)


@hookimpl
def import_weights(engine: Any, weights: Any) -> bool | None:
    from polyrl_mlx.weights import import_weights as run

    return run(engine, weights)


@hookimpl
def save_checkpoint(engine: Any, path: str, state_path: str | None) -> bool | None:
    from polyrl_mlx.weights import save_checkpoint as run

    return run(engine, path, state_path)


@hookimpl
def load_checkpoint(engine: Any, path: str, state_path: str | None, weights_only: bool) -> bool | None:
    from polyrl_mlx.weights import load_checkpoint as run

    return run(engine, path, state_path, weights_only=weights_only)
