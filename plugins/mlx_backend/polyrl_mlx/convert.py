"""Model folders between formats: HF -> MLX (optionally quantized) and MLX -> HF.

    >>> from polyrl_mlx.convert import convert
    >>> convert("models/tiny", "models/tiny-mlx-4bit", to="mlx", quantize_bits=4)
    >>> convert("models/tiny-mlx-4bit", "models/tiny-hf", to="hf")     # dequantized float

``to="mlx"`` writes what ``mlx_lm.convert`` writes (mlx-lm's own ``load``/``quantize_model``/
``save``), keeping the weights' dtype unless quantizing. The source is read as the engine reads
it (``engine.load_mlx_lm``), so a mixture-of-experts folder the torch backend saved (transformers'
fused experts, which mlx-lm's own ``load`` refuses) converts too. ``to="hf"`` writes a plain transformers
folder: float weights under HF names (quantized layers dequantized) in ``model.safetensors``
with ``format=pt`` metadata, ``config.json`` without quantization keys, the tokenizer and
``generation_config.json``. Unquantized HF -> MLX -> HF gives bit-identical tensors.

The destination is written to a temporary sibling folder and renamed into place, so a reader
never sees half a model; an existing non-empty destination is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

from polyrl.backend_kit.convert_paths import check_destination, staging_folder
from polyrl.backend_kit.model_folders import (
    adapter_folder_error,
    foreign_code_error,
    no_weights_error,
    pickled_only_error,
)
from polyrl.backend_kit.weight_headers import refuse_config_json_beyond_weights
from polyrl.errors import ConfigError

#: the weight files mlx-lm's ``load_model`` reads (it globs no other name)
MLX_WEIGHTS = "model*.safetensors"
FORMATS = ("mlx", "hf")
BITS = (2, 3, 4, 5, 6, 8)
DEFAULT_GROUP_SIZE = 64


def _check(src: str, dst: str, to: str, quantize_bits: int | None) -> tuple[Path, Path]:
    if to not in FORMATS:
        raise ConfigError(f"unknown target format {to!r}", field="to", fix=f"use one of {', '.join(FORMATS)}")
    source = Path(src).expanduser()
    if source.suffix == ".gguf" or (source.is_dir() and not (source / "config.json").is_file()
                                    and any(source.glob("*.gguf"))):
        raise ConfigError(f"{src!r} is a GGUF model, which mlx-lm cannot read", field="src",
                          fix="convert it to HF first "
                              "(`polyrl convert MODEL.gguf OUT --to hf`, torch backend)")
    if not (source / "config.json").is_file():  # a folder named config.json was mlx-lm's IsADirectoryError
        adapter = adapter_folder_error(source, "src", backend="mlx") if source.is_dir() else None
        if adapter is not None:
            raise adapter
        raise ConfigError(f"{src!r} is not a model folder (no config.json file)", field="src",
                          fix="give a local HF or MLX model folder")
    pickled = pickled_only_error(source, "mlx", "src", weights=MLX_WEIGHTS)
    if pickled is not None:
        raise pickled
    missing = no_weights_error(source, "mlx", "src", weights=MLX_WEIGHTS)
    if missing is not None:  # mlx-lm's "No safetensors found" was the mlx plugin's crash
        raise missing
    if quantize_bits is not None:
        if to != "mlx":
            raise ConfigError("quantization is only written in MLX format", field="quantize_bits",
                              fix="use --to mlx, or drop --quantize-bits")
        if quantize_bits not in BITS:
            raise ConfigError(f"unsupported quantize_bits={quantize_bits}", field="quantize_bits",
                              fix=f"use one of {', '.join(map(str, BITS))}")
    return source.resolve(), check_destination(dst).resolve()


def _load(source: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The folder as the engine loads it (lazy): mlx-lm's ``load`` plus the config keys and the
    fused expert tensors it reads (a MoE the torch backend saved); its failures on a damaged
    folder as one ConfigError on ``src``. config.json's sizes are checked against the headers of
    the files mlx-lm reads first: 20000 layers over 2 took 13 s to build before mlx-lm refused."""
    from polyrl_mlx.engine import load_mlx_lm

    refuse_config_json_beyond_weights(source, "src", sorted(source.glob(MLX_WEIGHTS)))
    refuse_model_file(source, False, "src")
    try:
        return load_mlx_lm(source, False, lazy=True)
    except (RuntimeError, ValueError, TypeError) as exc:  # damaged weights, no module, a key missing
        raise load_error(exc, source, "src") from None


def load_error(exc: Exception, source: Path, field: str) -> ConfigError:
    """mlx-lm's failure to load ``source`` as one ConfigError on ``field``.

    mlx raises RuntimeError for weights cut short (an interrupted copy or download), ValueError
    listing every tensor when config.json and the weights disagree (e.g. its layer count),
    ValueError "Model type X not supported." for a family it has no module for, and TypeError when
    config.json lacks a key its module requires.
    """
    if isinstance(exc, RuntimeError):
        return ConfigError(f"the weights in {str(source)!r} are truncated or corrupt ({_summary(exc)})",
                           field=field, fix="re-copy or re-download the model's *.safetensors files")
    first = str(exc).split("\n", 1)[0]
    foreign = foreign_code_error(source, "mlx", field) if "not supported" in first else None
    if foreign is not None:  # auto_map's own code builds it: torch alone runs that
        return foreign
    if not any(word in first for word in ("parameters", "shape")):
        return ConfigError(f"mlx-lm cannot load {str(source)!r}: {_summary(exc)}", field=field,
                           fix="give an HF or MLX model folder of an architecture mlx-lm supports, "
                               "or use backend \"torch\"")
    return ConfigError(f"config.json in {str(source)!r} does not match its weights: {_summary(exc)}",
                       field=field, fix="use the config.json saved with these weights (e.g. "
                       "num_hidden_layers, hidden_size), or re-copy / re-download the model folder; if "
                       "transformers loads it, use backend \"torch\" (mlx-lm's module for this family "
                       "expects another layout)")


def refuse_model_file(folder: Path, trusted: bool, field: str) -> None:
    """Refuse a folder whose config.json names ``model_file`` (mlx-lm's own custom-module key: it
    imports that file to build the model) unless the run trusts it. mlx-lm's refusal asked to "pass
    trust_remote_code=True" in Python, under the fix "use backend torch", which ignores the key.
    ``polyrl convert`` (field ``src``) runs no folder's code."""
    try:
        model_file = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_file")
    except (OSError, ValueError, AttributeError):  # unreadable / not an object: the loader reports it
        return
    if model_file is None or trusted:
        return
    if field == "src":
        raise ConfigError(f"{str(folder)!r} builds its model with its own Python code ({model_file!r}, named "
                          "by config.json's model_file), which polyrl convert does not run", field=field,
                          fix="load the folder with backend \"mlx\" and model.trust_remote_code = true, after "
                              "reading that file, if you trust it")
    raise ConfigError(f"{str(folder)!r} builds its model with its own Python code ({model_file!r}, named by "
                      "config.json's model_file), which polyrl does not run unless asked", field=field,
                      fix="read that file, then set model.trust_remote_code = true if you trust it (mlx-lm "
                          "imports it); or use a folder of an architecture mlx-lm implements")


def _summary(exc: Exception) -> str:
    """mlx's message cut to its first line plus three of the tensors it lists (it lists them all)."""
    head, _, rest = str(exc).strip().partition("\n")
    names = [n.strip().rstrip(",.") for n in rest.splitlines() if n.strip()]
    if not names:
        return head.rstrip(": ") or type(exc).__name__
    return head.rstrip(": ") + ": " + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _to_mlx(source: Path, out: Path, quantize_bits: int | None, group_size: int) -> None:
    from mlx_lm.utils import quantize_model, save

    model, tokenizer, config = _load(source)
    if quantize_bits is not None:
        if config.get("quantization"):
            raise ConfigError(f"{source} is already quantized", field="quantize_bits",
                              fix="convert it to hf first, then quantize that")
        with contextlib.redirect_stdout(io.StringIO()):  # mlx-lm prints bits per weight
            model, config = quantize_model(model, config, group_size, quantize_bits)
    save(str(out), str(source), model, tokenizer, config, donate_model=False)


def _to_hf(source: Path, out: Path) -> None:
    from polyrl_mlx.weights import hf_tensors, save_hf_folder

    model, tokenizer, config = _load(source)
    save_hf_folder(out, hf_tensors(model), config, tokenizer._tokenizer, source=source)


def convert(src: str, dst: str, to: str = "mlx", quantize_bits: int | None = None,
            group_size: int = DEFAULT_GROUP_SIZE) -> str:
    """Convert the model folder ``src`` to format ``to`` ("mlx" or "hf") at ``dst``; return ``dst``.

    ``quantize_bits`` (MLX only) quantizes every linear/embedding layer whose input size divides
    by ``group_size`` (affine mode, as ``mlx_lm.convert -q``).
    """
    from polyrl_mlx._mx import mx

    source, target = _check(src, dst, to, quantize_bits)
    tmp = staging_folder(target)
    try:
        out = tmp / "model"
        with mx.stream(mx.cpu):
            if to == "mlx":
                _to_mlx(source, out, quantize_bits, group_size)
            else:
                _to_hf(source, out)
        readme = out / "README.md"
        if readme.exists() and to == "hf":
            readme.unlink()
        if target.exists():
            target.rmdir()  # empty (checked above)
        os.rename(out, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


__all__ = ["FORMATS", "convert"]
