"""The MLX backend's checkpoint files checked on ``--resume`` (``polyrl.backend_kit.engine_state``).

Why: ``engine.json``, ``rng.safetensors``, ``optimizer.safetensors``, the model and the LoRA files
are someone's files to edit (and re-sign). ``check_checkpoint`` reads only their headers, so it
imports no MLX and runs before any model loads; ``check_optimizer`` compares the loaded optimizer
state with the model's parameters before it replaces the engine's (MLX would take moments of
another shape and fail, or broadcast, at the next step).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyrl.backend_kit import engine_state as es
from polyrl.backend_kit.checkpoints import missing_piece

STATE_DIR = "mlx_state"
ADAPTER_DIR = "adapter"
FORMAT = 1
FIELDS: dict[str, es.JsonType] = {"format": es.INT, "lora": es.BOOL, "optimizer": es.BOOL, "dtype": es.TEXT,
                                  "base_replaced": es.BOOL, "polyrl_mlx": es.TEXT_OR_NULL, "mlx": es.TEXT,
                                  "quantization": es.OBJECT_OR_NULL}
#: The sampler key as ``mx.random.key`` makes it (safetensors dtype, shape).
KEY = ("U32", (2,))


def state_folder(path: str, state_path: str | None) -> Path:
    """Where the engine state is: ``state_path``, else ``path/mlx_state`` (a direct engine call)."""
    return Path(state_path) if state_path and Path(state_path).is_dir() else Path(path) / STATE_DIR


def adapter_file(path: str, state: Path) -> Path:
    """The LoRA adapters: beside the model, or (written before they moved there) in the state."""
    beside = Path(path) / ADAPTER_DIR / "adapters.safetensors"
    return beside if beside.exists() or not (state / "adapters.safetensors").exists() else state / "adapters.safetensors"


def check_checkpoint(path: str, state_path: str | None, weights_only: bool) -> dict[str, Any]:
    """engine.json's fields (returned) and every file this resume reads, present and whole (the
    sampler key's dtype and shape from its header); ``weights_only`` reads the merged model alone."""
    folder, state = Path(path), state_folder(path, state_path)
    es.safetensors_header(folder / "model.safetensors", es.WEIGHTS_FIX)
    if weights_only:
        return {}
    meta = es.read_engine_json(state, FIELDS, FORMAT)
    rng = state / "rng.safetensors"
    if not rng.exists():
        raise missing_piece("RNG state", rng)
    key = es.safetensors_header(rng).get("sampler_key")
    if key is None or (key[0], tuple(key[1])) != KEY:
        shown = "no sampler_key" if key is None else f"a sampler_key of dtype {key[0]} and shape {list(key[1])}"
        raise es.state_error(rng, f"holds {shown}; polyrl saves one of dtype {KEY[0]} and shape {list(KEY[1])}")
    if meta["optimizer"]:
        if not (state / "optimizer.safetensors").exists():
            raise missing_piece("optimizer state", state / "optimizer.safetensors")
        es.safetensors_header(state / "optimizer.safetensors")
    if meta["lora"]:
        es.safetensors_header(adapter_file(path, state))
        if meta.get("base_replaced"):
            es.safetensors_header(state / "base_model.safetensors")
    return meta


def check_optimizer(file: Path, saved: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Each per-parameter moment in ``saved`` (flattened names ``<parameter>.<moment>``) has its
    parameter's shape and a floating dtype (``params``: the model's flattened parameters)."""
    for name, value in saved.items():
        owner, _, moment = name.rpartition(".")
        if owner not in params:
            continue
        want = tuple(params[owner].shape)
        if tuple(value.shape) != want:
            raise es.state_error(file, f"{owner}'s {moment!r} has shape {list(value.shape)}; the parameter's "
                                       f"is {list(want)}")
        if "float" not in str(value.dtype):
            raise es.state_error(file, f"{owner}'s {moment!r} has dtype {value.dtype}, not a float")
