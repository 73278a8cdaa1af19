"""A checkpoint's backend files (``engine_state/`` and the model folder) checked on ``--resume``.

Why: the manifest proves a file is what was written, not that polyrl wrote it (whoever can edit
the folder can re-sign the manifest, and checkpoints from before manifests resume unverified).
A truncated ``rng.pt``, an ``engine.json`` whose ``lora`` is a string or an optimizer state of
another shape surfaced as a backend's ``PluginError`` after the models had loaded, with no fix,
and torch's multi-line unpickling text broke the ``error:`` line in two. Each is now one
``ConfigError`` on ``--resume`` naming the file: what can be seen cheaply (presence, size,
engine.json's fields, a safetensors header, a zip archive's directory) before any model loads
(a backend's ``BackendSpec.check_checkpoint``), the rest as the backend reads the file.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError, one_line

FIELD = "--resume"
ENGINE_JSON = "engine.json"
#: engine.json is a few short fields; anything larger was not written by a backend.
ENGINE_JSON_BYTES = 64 << 10
#: How a damaged file is fixed when a weights-only resume does not read it.
FIX = ("restore the file from a copy of the checkpoint, resume another checkpoint (--resume "
       "output_dir/checkpoints/step-NNNNNNNN), or resume with --resume-weights-only to load the weights "
       "alone (fresh optimizer and RNG)")
#: ... and when it does (the model's weights).
WEIGHTS_FIX = "restore the file from a copy of the checkpoint, or resume another checkpoint"

#: A JSON type as engine.json holds it: the Python types json gives for it, and its name.
JsonType = tuple[tuple[type, ...], str]
BOOL: JsonType = ((bool,), "true or false")
INT: JsonType = ((int,), "an integer")
TEXT: JsonType = ((str,), "a string")
TEXT_OR_NULL: JsonType = ((str, type(None)), "a string or null")
OBJECT_OR_NULL: JsonType = ((dict, type(None)), "an object or null")


def state_error(file: Path, what: str, fix: str = FIX) -> ConfigError:
    """The one-line ``--resume`` error for ``file`` (``what``: what is wrong with it)."""
    return ConfigError(f"{file}: {one_line(what)}", field=FIELD, fix=fix)


def require(file: Path, fix: str = FIX) -> None:
    """``file`` exists as a regular file that is not empty."""
    if not file.exists():
        raise state_error(file, "is missing", fix)
    if not file.is_file():
        raise state_error(file, "is not a regular file", fix)
    if file.stat().st_size == 0:
        raise state_error(file, "is empty (0 bytes: cut short when it was written or copied)", fix)


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def read_engine_json(state: Path, fields: Mapping[str, JsonType], fmt: int) -> dict[str, Any]:
    """``state/engine.json`` as a backend's ``save_checkpoint`` wrote it: an object of at most
    ``ENGINE_JSON_BYTES`` whose ``format`` is at most ``fmt`` and whose ``fields`` (all required
    when present in the file; ``lora`` and ``optimizer`` always) have their JSON types."""
    file = state / ENGINE_JSON
    require(file)
    if file.stat().st_size > ENGINE_JSON_BYTES:
        raise state_error(file, f"has {file.stat().st_size} bytes; a backend writes a few short fields "
                                f"(at most {ENGINE_JSON_BYTES})")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise state_error(file, f"is not valid JSON ({type(exc).__name__}: {exc}; cut short?)") from None
    if not isinstance(meta, dict):
        raise state_error(file, f"holds {_type_name(meta)}, not an object of the backend's fields")
    form = meta.get("format")
    if not isinstance(form, int) or isinstance(form, bool) or not 1 <= form <= fmt:
        raise state_error(file, f'"format" is {json.dumps(form)}; this backend reads formats 1 to {fmt} '
                                "(a newer polyrl wrote it, or it was edited)")
    for key, (types, wanted) in fields.items():
        if key not in meta:
            if key in ("lora", "optimizer"):
                raise state_error(file, f'has no "{key}" field ({wanted})')
            continue
        value = meta[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise state_error(file, f'"{key}" is {_type_name(value)} ({json.dumps(value)[:60]}), '
                                    f"the backend writes {wanted}")
    return meta


def safetensors_header(file: Path, fix: str = FIX) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor's (dtype, shape) in ``file``; a missing, truncated or malformed file (the header
    is checked to cover the file exactly) is one error. Reads the header only."""
    from safetensors import SafetensorError, safe_open

    require(file, fix)
    try:
        with safe_open(str(file), framework="numpy") as handle:
            return {name: (handle.get_slice(name).get_dtype(), tuple(handle.get_slice(name).get_shape()))
                    for name in handle.keys()}  # noqa: SIM118 - safe_open is not a mapping
    except (SafetensorError, OSError, ValueError) as exc:
        raise state_error(file, f"is not a complete safetensors file ({exc})", fix) from None


def torch_archive(file: Path, fix: str = FIX) -> None:
    """``file`` is a whole ``torch.save`` archive (a zip file whose directory at its end is intact):
    a truncated one is refused before anything loads; its contents are checked by ``loading``."""
    require(file, fix)
    try:
        ok = zipfile.is_zipfile(file)
        if ok:
            with zipfile.ZipFile(file) as archive:
                ok = any(name.endswith("data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        ok = False
    if not ok:
        raise state_error(file, f"is not a complete torch.save archive ({file.stat().st_size} bytes: cut "
                                "short, or another kind of file)", fix)


@contextmanager
def loading(file: Path, what: str, fix: str = FIX) -> Iterator[None]:
    """Turn whatever reading ``file`` raises (torch's ``UnpicklingError`` for a pickle that is not
    what ``torch.save`` wrote, safetensors' own errors) into one error naming it; a
    ``ConfigError`` raised inside passes as it is."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a library's reader: any failure means the file is bad
        text = one_line(str(exc)) or type(exc).__name__
        raise state_error(file, f"cannot be read as {what} ({type(exc).__name__}: {text[:400]})", fix) from exc


def check_tensor(file: Path, name: str, value: Any, shape: tuple[int, ...], dtype: Any,
                 fix: str = FIX) -> None:
    """``value`` (an entry of ``file``) is a tensor of ``shape`` and ``dtype`` (torch, numpy or mlx)."""
    got_shape, got_dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if got_shape is None or got_dtype is None:
        raise state_error(file, f"{name} is {type(value).__name__}, not a tensor", fix)
    if tuple(got_shape) != tuple(shape) or got_dtype != dtype:
        raise state_error(file, f"{name} is a tensor of shape {list(got_shape)} and dtype {got_dtype}; "
                                f"this engine's is {list(shape)} and {dtype}", fix)


@contextmanager
def fitting(file: Path, fix: str = WEIGHTS_FIX) -> Iterator[None]:
    """An engine's own name and shape check of ``file``'s tensors against the model (a
    ``ValueError`` raised before anything is changed) as one error naming the file."""
    try:
        yield
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise state_error(file, f"does not fit this model: {exc}", fix) from exc
