"""The pluggy hook implementations of the ``torch`` backend.

This module is what the ``polyrl.backends`` entry point loads when any polyrl process starts, so it
imports neither torch nor transformers at module level: registration only looks at installed
metadata, and every compute hook first checks (without importing torch) whether the engine is one
of ours. A machine without torch therefore still lists the backend, with the probe's reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl.backend_kit.versions import installed_version
from polyrl.device_names import BUILTIN_DEVICE_NAMES
from polyrl.hookspecs import hookimpl
from polyrl.types import ArchSupport, BackendSpec, Capabilities, EngineConfig
from polyrl_torch.options import KEYS as OPTION_KEYS

BACKEND = "torch"
DISTRIBUTION = "polyrl-torch"
INSTALL_HINT = "pip install polyrl[torch]"
SMOLLM2_ALIAS = "smollm2-135m-instruct"



def _missing_package() -> str | None:
    for module, pip_name in (("torch", "torch"), ("transformers", "transformers"),
                             ("safetensors", "safetensors")):
        if importlib.util.find_spec(module) is None:
            return pip_name
    return None


def _probe() -> str | None:
    """None when usable; else why not (checked without importing torch, so it stays cheap)."""
    missing = _missing_package()
    if missing == "torch":
        return f"torch not installed: {INSTALL_HINT}"
    if missing:
        return f"{missing} not installed: {INSTALL_HINT}"
    return None


def _torch_built_with_cuda() -> bool:
    """Read torch/version.py as text: importing torch here would cost seconds at every startup."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("cuda") and "=" in line:
            return "None" not in line.split("=", 1)[1]
    return False


def _devices() -> tuple[str, ...]:
    """Devices this machine can actually run on (cuda only with a CUDA torch and a visible GPU)."""
    devices = ["cpu"]
    gpu_visible = Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir()
    if _torch_built_with_cuda() and gpu_visible and os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        devices.append("cuda")
    if sys.platform == "darwin" and platform.machine() == "arm64":
        devices.append("mps")
    return tuple(devices)


_WINDOW = "sliding-window layers: no shared-prompt forward"
_MOE_LORA = "LoRA adapts the linear layers; the fused experts train with full weights only"

#: Tested on tiny models by tests/test_architectures.py (against MLX: the trainer every other
#: backend's log-probs are measured against) and tests/test_hf_families.py (torch against the
#: family's own eager forward); any other model_type transformers loads runs untested, behind a
#: load-time check that the scorer reproduces the model's logits (``output_head``).
ARCHITECTURES = {
    **{name: ArchSupport(generate=True, train=True, fast_path=True)
       for name in ("llama", "mistral", "qwen2", "qwen3", "phi3", "gpt2", "gpt_neox", "olmo2", "phi",
                    "stablelm", "smollm3", "falcon")},
    "gemma3_text": ArchSupport(generate=True, train=True, fast_path=False, notes=_WINDOW),
    "gemma2": ArchSupport(generate=True, train=True, fast_path=False,
                          notes=f"{_WINDOW}; attention soft-cap: eager attention"),
    "starcoder2": ArchSupport(generate=True, train=True, fast_path=False, notes=_WINDOW),
    "granite": ArchSupport(generate=True, train=True, fast_path=True, notes="logits / logits_scaling in the scorer"),
    "cohere": ArchSupport(generate=True, train=True, fast_path=True, notes="logits * logit_scale in the scorer"),
    "qwen2_moe": ArchSupport(generate=True, train=True, fast_path=True, notes=_MOE_LORA),
    "qwen3_moe": ArchSupport(generate=True, train=True, fast_path=True, notes=_MOE_LORA),
    "*": ArchSupport(generate=True, train=True,
                     notes="any other transformers AutoModelForCausalLM model_type, untested by polyrl: refused "
                           "at load when its forward's logits differ from polyrl's scorer"),
}

CAPABILITIES_BASE: dict[str, Any] = dict(
    generate=True, logprobs=True, train_step=True, lora=True, weight_export=True,
    weight_import=True, checkpoint=True, concurrent_generate=True, data_parallel=True,
    sampling=("min_p", "repetition_penalty", "ignore_eos"), gradient_checkpointing=True,
    token_prompts=True, loss_mask=True,
    dtypes=("float32", "bfloat16", "float16"),
    compute_dtypes=("bfloat16",),  # autocast over float32 weights (polyrl_torch.engine.COMPUTE_DTYPES)
    architectures=ARCHITECTURES,
    device_names=BUILTIN_DEVICE_NAMES["torch"],  # what torch.device reads (polyrl_torch.devices)
)


def _diagnostics() -> Mapping[str, str]:
    """Facts for ``polyrl doctor`` (this one may import torch: doctor is allowed to be slow)."""
    import torch

    from polyrl_torch import decode_kernel

    info = {
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "cuda": str(torch.cuda.is_available()),
        "blas": "mkl" if torch.backends.mkl.is_available() else "other",
        "decode_kernel": decode_kernel.described(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - the probe reports this
        pass
    return info


def _load(config: EngineConfig) -> Any:
    from polyrl_torch.engine import TorchEngine
    from polyrl_torch.output_head import check_scorer_matches_model

    engine = TorchEngine(config)
    if getattr(engine.causal_lm.config, "model_type", None) not in ARCHITECTURES:
        check_scorer_matches_model(engine)  # "*": an untested family's forward may transform its logits
    return engine


def _check_checkpoint(path: str, state_path: str, weights_only: bool) -> None:
    from polyrl_torch.state_files import check_checkpoint

    check_checkpoint(path, state_path, weights_only)


def _check_model(config: Any) -> None:
    from polyrl_torch.startup_check import check_model

    check_model(config)


# --- discovery -----------------------------------------------------------------------------------


@hookimpl
def polyrl_register_backends(register) -> None:
    register(
        BackendSpec(
            name=BACKEND,
            load=_load,
            capabilities=Capabilities(**CAPABILITIES_BASE, devices=_devices()),
            probe=_probe,
            install_hint=INSTALL_HINT,
            summary="PyTorch + transformers: exact-logprob sampling, GRPO-family training, LoRA (peft)",
            version=installed_version(DISTRIBUTION),
            diagnostics=_diagnostics,
            options=OPTION_KEYS,
            check_checkpoint=_check_checkpoint,
            check_model=_check_model,
        )
    )


@hookimpl
def polyrl_resolve_model(name: str) -> str | None:
    """``smollm2-135m-instruct`` (``tiny-llama`` is the core's: ``polyrl.testing.aliases``)."""
    if name == SMOLLM2_ALIAS:
        if _missing_package():
            return None  # another plugin may be able to provide it without torch
        from polyrl_torch.models import smollm2_135m_instruct

        return smollm2_135m_instruct()
    return None


@hookimpl
def polyrl_convert_model(src: str, dst: str, to: str, quantize_bits: int | None) -> str | None:
    """``to="hf"``: turn a GGUF file into a float HF folder (what every backend can load)."""
    if to != "hf" or not str(src).endswith(".gguf") or _missing_package():
        return None
    if quantize_bits is not None:
        from polyrl.errors import ConfigError

        raise ConfigError("the torch backend writes float HF folders only", field="quantize_bits",
                          fix="drop --quantize-bits for --to hf")
    from polyrl.backend_kit.convert_paths import check_destination
    from polyrl_torch.models import check_gguf_source, gguf_to_hf

    src_path = check_gguf_source(src)
    # gguf_to_hf reuses a converted cache folder and deletes an unfinished one: a user's dst is
    # neither (it deleted the files of a non-empty folder given as dst, and returned another model's
    # conversion as this one's)
    return gguf_to_hf(str(src_path.parent), src_path.name, str(check_destination(dst)))


# --- compute -------------------------------------------------------------------------------------


def _fsdp_bounded(engine: Any, hook: str) -> contextlib.AbstractContextManager[None]:
    """Under FSDP a hook runs FSDP's own collectives (each unit's all_gather, the backward's
    reduce_scatter, the state gathers): a peer late there is the same ``CollectiveTimeout``
    naming ``train.collective_timeout_s`` as in polyrl's own collectives, not gloo's raw text
    blamed on the backend. Nothing outside FSDP (a hook's own error stays its own)."""
    if getattr(engine, "fsdp", None) is None:
        return contextlib.nullcontext()
    from polyrl_torch import distributed

    return distributed.bounded(f"FSDP's all_gather/reduce_scatter of {hook}")


@hookimpl
def generate(engine: Any, prompts: Sequence[Any], sampling: Any) -> list | None:
    from polyrl_torch.generation import generate as run

    return run(engine, prompts, sampling)


@hookimpl
def generation_phase(engine: Any) -> Any:
    """FSDP: the whole weights gathered once for the rollout, so ranks may call ``generate`` a
    different number of times inside (``TorchEngine.full_weights``); nothing otherwise."""
    return engine.full_weights()


@hookimpl
def encode_chat(engine: Any, messages: Sequence[Any], tools: Sequence[Any] | None,
                add_generation_prompt: bool) -> Any:
    import numpy as np

    return np.asarray(engine.encode_chat(messages, tools, add_generation_prompt), dtype=np.int64)


@hookimpl
def logprobs(engine: Any, sequences: Sequence[Any], temperature: float, reference: bool) -> list | None:
    from polyrl_torch.scoring import logprobs as run

    with _fsdp_bounded(engine, "logprobs"):
        return run(engine, sequences, temperature, reference)


@hookimpl
def entropies(engine: Any, sequences: Sequence[Any], temperature: float) -> list | None:
    from polyrl_torch.scoring import entropies as run

    with _fsdp_bounded(engine, "entropies"):
        return run(engine, sequences, temperature)


@hookimpl
def train_step(engine: Any, batch: Any, objective: Any) -> Any:
    from polyrl_torch.training import train_step as run

    with _fsdp_bounded(engine, "train_step"):
        return run(engine, batch, objective)


# --- weights and state ---------------------------------------------------------------------------


@hookimpl
def export_weights(engine: Any) -> Any:
    from polyrl_torch.weights import export_weights as run

    with _fsdp_bounded(engine, "export_weights"):
        return run(engine)


@hookimpl
def import_weights(engine: Any, weights: Any) -> bool | None:
    from polyrl_torch.weights import import_weights as run

    with _fsdp_bounded(engine, "import_weights"):
        return run(engine, weights)


@hookimpl
def save_checkpoint(engine: Any, path: str, state_path: str | None) -> bool | None:
    from polyrl_torch.weights import save_checkpoint as run

    with _fsdp_bounded(engine, "save_checkpoint"):
        return run(engine, path, state_path)


@hookimpl
def load_checkpoint(engine: Any, path: str, state_path: str | None, weights_only: bool) -> bool | None:
    from polyrl_torch.weights import load_checkpoint as run

    with _fsdp_bounded(engine, "load_checkpoint"):
        return run(engine, path, state_path, weights_only=weights_only)


@hookimpl
def all_gather(engine: Any, value: Any) -> list[Any] | None:
    """Objects from every rank under torchrun (the trainer gathers rewards with it)."""
    from polyrl_torch import distributed

    return distributed.all_gather_objects(value) if distributed.active() else None
