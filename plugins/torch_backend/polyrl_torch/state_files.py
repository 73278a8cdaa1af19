"""The torch backend's checkpoint files checked on ``--resume`` (``polyrl.backend_kit.engine_state``).

Why: ``engine.json``, ``rng.pt``, ``optimizer.pt``, the safetensors and ``adapter/`` are someone's
files to edit (and re-sign). ``check_checkpoint`` looks at what is cheap (presence, size,
engine.json's fields, archive and header integrity) before any model loads; ``load_rng`` and
``load_optimizer`` read the pickled states with ``weights_only=True`` and check them against the
engine before anything is set, so a wrong tensor is one error naming the file, not a
``RuntimeError`` inside ``set_rng_state`` or a step that trains with another tensor's moments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from polyrl.backend_kit import engine_state as es
from polyrl.backend_kit.checkpoints import missing_piece

STATE_DIR = "torch_state"
ADAPTER_FILE = Path("adapter") / "adapter_model.safetensors"
FORMAT = 1
FIELDS: dict[str, es.JsonType] = {"format": es.INT, "lora": es.BOOL, "optimizer": es.BOOL, "dtype": es.TEXT,
                                  "polyrl_torch": es.TEXT_OR_NULL, "torch": es.TEXT}


def state_folder(path: str, state_path: str | None) -> Path:
    """Where the engine state is: ``state_path``, else ``path/torch_state`` (a direct engine call)."""
    return Path(state_path) if state_path and Path(state_path).is_dir() else Path(path) / STATE_DIR


def check_checkpoint(path: str, state_path: str | None, weights_only: bool) -> dict[str, Any]:
    """engine.json's fields (returned) and every file this resume reads, present and whole;
    ``weights_only`` reads the merged model alone. Needs no engine: runs before the models load."""
    folder, state = Path(path), state_folder(path, state_path)
    es.safetensors_header(folder / "model.safetensors", es.WEIGHTS_FIX)
    if weights_only:
        return {}
    meta = es.read_engine_json(state, FIELDS, FORMAT)
    pieces = [("RNG state", state / "rng.pt")]
    if meta["optimizer"]:
        pieces.append(("optimizer state", state / "optimizer.pt"))
    for piece, file in pieces:
        if not file.exists():
            raise missing_piece(piece, file)
        es.torch_archive(file)
    if meta["lora"]:
        es.safetensors_header(state / "base_model.safetensors")
        es.safetensors_header(folder / ADAPTER_FILE)
    return meta


def _tensor_spec(value: torch.Tensor) -> tuple[tuple[int, ...], torch.dtype]:
    return tuple(value.shape), value.dtype


def load_rng(file: Path, generator: torch.Generator) -> dict[str, Any]:
    """``rng.pt`` as ``save_checkpoint`` wrote it: CPU and sampler states of this process's sizes
    (and CUDA ones when saved), checked before any is set."""
    with es.loading(file, "the RNG state torch.save wrote"):
        rng = torch.load(file, weights_only=True)
    if not isinstance(rng, dict) or "torch" not in rng or "sampler" not in rng:
        shown = sorted(map(str, rng))[:4] if isinstance(rng, dict) else type(rng).__name__
        raise es.state_error(file, f"holds {shown}, not the RNG states polyrl saves ('torch', 'sampler')")
    es.check_tensor(file, "'torch'", rng["torch"], *_tensor_spec(torch.get_rng_state()))
    es.check_tensor(file, "'sampler'", rng["sampler"], *_tensor_spec(generator.get_state()))
    cuda = rng.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        if not isinstance(cuda, (list, tuple)):
            raise es.state_error(file, f"'cuda' is {type(cuda).__name__}, not a list of per-device states")
        for i, value in enumerate(cuda[:torch.cuda.device_count()]):
            es.check_tensor(file, f"'cuda'[{i}]", value, *_tensor_spec(torch.cuda.get_rng_state(i)))
    return rng


def load_optimizer(file: Path, optimizer: torch.optim.Optimizer, device: Any, sharded: bool) -> dict[str, Any]:
    """``optimizer.pt`` as ``torch.save`` wrote ``optimizer.state_dict()``: its groups and per-parameter
    tensors match this optimizer (``sharded``: FSDP's full state by index, whose parameters are
    shards here: shapes are not compared), and the group options keep their types."""
    with es.loading(file, "the optimizer state torch.save wrote"):
        saved = torch.load(file, map_location=device, weights_only=True)
    if not (isinstance(saved, dict) and isinstance(saved.get("state"), dict)
            and isinstance(saved.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in saved["param_groups"])):
        raise es.state_error(file, "is not an optimizer state_dict ({'state': {...}, 'param_groups': "
                                   "[{'params': [...], ...}]})")
    groups = optimizer.param_groups
    sizes = [len(g["params"]) for g in saved["param_groups"]]
    if sizes != [len(g["params"]) for g in groups]:
        raise es.state_error(file, f"has parameter groups of sizes {sizes[:8]}; this optimizer's are "
                                   f"{[len(g['params']) for g in groups][:8]}")
    for saved_group, group in zip(saved["param_groups"], groups, strict=True):
        for key, live in group.items():
            value = saved_group.get(key, live)
            numbers = isinstance(value, (int, float)) and isinstance(live, (int, float))
            if key != "params" and live is not None and value is not None and type(value) is not type(live) \
                    and not (numbers and isinstance(value, bool) == isinstance(live, bool)):
                raise es.state_error(file, f"group option {key!r} is {type(value).__name__} ({str(value)[:40]}), "
                                           f"this optimizer's is {type(live).__name__}")
    params = dict(zip((i for g in saved["param_groups"] for i in g["params"]),
                      (p for g in groups for p in g["params"]), strict=True))
    for index, entry in saved["state"].items():
        if index not in params or not isinstance(entry, dict):
            raise es.state_error(file, f"holds state for parameter {str(index)[:20]}, which its groups do not list")
        for key, value in entry.items():
            if not isinstance(value, torch.Tensor):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise es.state_error(file, f"parameter {index}'s {key!r} is {type(value).__name__}, not a tensor")
                continue
            if key == "step":
                if value.numel() != 1 or value.dtype.is_complex:
                    raise es.state_error(file, f"parameter {index}'s 'step' has shape {list(value.shape)}, not one number")
                continue
            if not value.is_floating_point():
                raise es.state_error(file, f"parameter {index}'s {key!r} has dtype {value.dtype}, not a float")
            if not sharded and tuple(value.shape) != tuple(params[index].shape):
                raise es.state_error(file, f"parameter {index}'s {key!r} has shape {list(value.shape)}; "
                                           f"the parameter's is {list(params[index].shape)}")
    return saved
