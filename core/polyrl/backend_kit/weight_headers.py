"""A model's config.json sizes checked against its safetensors headers before anything is built.

Why: transformers builds (and randomly initialises) the whole model config.json describes before
it reads one weight, and only then finds the tensors missing. A downloaded folder is someone
else's data: a tiny model whose config.json said ``num_hidden_layers = 20000`` cost 89 s of CPU and
gigabytes of memory before that clean error, 10**6 layers an hour, and a ``vocab_size`` of 10**9
asks for more memory than the machine has. The headers (names, dtypes and shapes, a few kilobytes
at the start of each file) say what the weights can back, in milliseconds:

* every decoder layer has tensors numbered by its index (``model.layers.7.``, GPT-2's ``h.7.``):
  the config may not name more layers than the weights number;
* the input embedding has ``vocab_size`` rows: the config may not name more;
* ``hidden_size`` is a dimension of the embedding and the norms: it must be some tensor's;
* ``intermediate_size`` (``moe_intermediate_size``) is a dimension of the MLP's (experts')
  tensors: it may not exceed the largest dimension of the layers' tensors. A config with a
  ``moe_intermediate_size`` (Qwen-MoE) uses ``intermediate_size`` only in its dense layers, which
  it may not have: that one is only bounded by the largest dimension in the weights;
* a mixture-of-experts layer holds its experts numbered (``experts.7.gate_proj``, Mixtral's
  ``experts.7.w1``) or stacked (transformers' fused ``experts.gate_up_proj``, mlx-lm's
  ``switch_mlp``; the first dimension): ``num_experts`` / ``num_local_experts`` may not name more.

The torch policy and reward model check a transformers config (``config_sizes``); mlx-lm and
MAX, which build from config.json the same way, check the file (``refuse_config_json_beyond_weights``).

Only more than the weights hold is refused here: fewer is cheap, and the loader's own check of
missing and mismatched tensors refuses it with the tensors' names. A folder without safetensors
(a ``.gguf``, ``pytorch_model.bin``) is not checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from polyrl.errors import ConfigError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
#: An index names a few thousand shards at most; a larger one is not an index (nor a config.json).
MAX_INDEX_BYTES = 64 * 2**20
#: Names of the input embedding in the families transformers loads (Llama-likes, GPT-2, GPT-NeoX,
#: Falcon/Bloom, InternLM); the output head, which has the same rows, when it is all there is.
EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "embed_in.weight", "word_embeddings.weight",
              "tok_embeddings.weight")
HEADS = ("lm_head.weight", "embed_out.weight")
#: dtypes whose shape is the logical one (a quantized tensor's is packed)
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})
FIX = "use the config.json saved with these weights, or re-download the model folder"

_NUMBER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
#: parts of a name that hold a layer's experts stacked on the first dimension
STACKED_EXPERTS = (".experts.", ".switch_mlp.", ".block_sparse_moe.")
#: role -> the config keys that spell it, in the order looked for (a family's own name last:
#: GPT-2's, Falcon's, DistilBERT's)
ROLES: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "vocab": ("vocab_size",),
    "hidden": ("hidden_size", "n_embd", "dim"),
    "intermediate": ("intermediate_size", "n_inner", "ffn_hidden_size", "hidden_dim"),
    "moe_intermediate": ("moe_intermediate_size",),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts"),
}


def weight_files(folder: Path) -> list[Path] | None:
    """The safetensors files transformers loads from ``folder``: ``model.safetensors``, else the
    shards its index names; None when it has neither. A shard outside the folder, missing or not a
    regular file is refused (its name comes from the folder's own index)."""
    single = folder / SINGLE_FILE
    if single.is_file():
        return [single]
    index = folder / INDEX_FILE
    if not index.exists():
        return None
    where = f"{INDEX_FILE} in {str(folder)!r}"
    try:
        if not index.is_file() or index.stat().st_size > MAX_INDEX_BYTES:
            raise ValueError("not a regular file of at most 64 MiB")
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{where} is not a safetensors index ({exc})", field="model.path", fix=FIX) from None
    if not isinstance(weight_map, Mapping) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ConfigError(f"{where} has no weight_map of tensor names to file names", field="model.path", fix=FIX)
    root = folder.resolve()
    shards = []
    for name in sorted(set(weight_map.values())):
        shard = folder / name
        if not shard.resolve().is_relative_to(root):
            raise ConfigError(f"{where} names {name!r}, outside the model folder", field="model.path",
                              fix="re-download the model; polyrl never reads outside a model folder")
        if not shard.is_file():
            raise ConfigError(f"{where} names {name!r}, which is missing or not a regular file",
                              field="model.path", fix="re-copy or re-download the model's *.safetensors files")
        shards.append(shard)
    return shards


def tensor_shapes(files: Iterable[Path]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor's (dtype, shape) from the files' headers; no tensor data is read."""
    from safetensors import SafetensorError, safe_open

    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as f:
                for name in f.keys():
                    piece = f.get_slice(name)
                    out[name] = (str(piece.get_dtype()), tuple(int(d) for d in piece.get_shape()))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(f"the weights in {str(file)!r} are truncated or corrupt ({exc})",
                              field="model.path",
                              fix="re-copy or re-download the model's *.safetensors files") from None
    return out


def numbered_layers(names: Iterable[str]) -> set[int]:
    """The layer indices tensor names hold: the first number in each (``model.layers.7.mlp...``)."""
    found = set()
    for name in names:
        if (match := _NUMBER.search(name)) is not None:
            found.add(int(match.group(1)))
    return found


def _embeddings(shapes: Mapping[str, tuple[str, tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """The shapes (rows, width) of the input embeddings (of the output heads when there is none)."""
    for suffixes in (EMBEDDINGS, HEADS):
        found: list[tuple[int, ...]] = [
            shape for name, (dtype, shape) in shapes.items()
            if dtype in FLOAT_DTYPES and len(shape) == 2 and any(name == s or name.endswith("." + s) for s in suffixes)]
        if found:
            return found
    return []


def held_experts(shapes: Mapping[str, tuple[str, tuple[int, ...]]]) -> int:
    """Experts per layer the weights hold: the distinct numbers after ``experts.``, or the first
    dimension of a layer's stacked expert tensors (3-D); 0 when no expert tensor is recognised."""
    numbered = {int(m.group(1)) for name in shapes if (m := _EXPERT.search(name)) is not None}
    stacked = [shape[0] for name, (_, shape) in shapes.items()
               if len(shape) == 3 and any(part in name for part in STACKED_EXPERTS)]
    return max([len(numbered), *stacked])


def largest_dimension(shapes: Mapping[str, tuple[str, tuple[int, ...]]], layers_only: bool) -> int:
    """The largest dimension of any tensor (``layers_only``: of the numbered layers' tensors, when
    there are any); 0 for no tensors."""
    layered = [shape for name, (_, shape) in shapes.items() if _NUMBER.search(name) is not None]
    pool = layered if layers_only and layered else [shape for _, shape in shapes.values()]
    return max((d for shape in pool for d in shape), default=0)


def size_problem(shapes: Mapping[str, tuple[str, tuple[int, ...]]], sizes: Mapping[str, tuple[str, int]]
                 ) -> str | None:
    """What config.json claims beyond the weights (``sizes``: role -> (its config.json key, value),
    roles as in ``ROLES``), or None."""
    if "layers" in sizes:
        key, value = sizes["layers"]
        held = len(numbered_layers(shapes))
        if value > held:
            return f"{key} is {value}, but the weights hold {held} numbered layers"
    embeddings = _embeddings(shapes)
    if "vocab" in sizes and embeddings:
        key, value = sizes["vocab"]
        rows = max(shape[0] for shape in embeddings)
        if value > rows:
            return f"{key} is {value}, but the embedding in the weights has {rows} rows"
    if "hidden" in sizes and shapes:
        key, value = sizes["hidden"]
        if not any(value in shape for _, shape in shapes.values()):
            widths = sorted({shape[1] for shape in embeddings})
            seen = f" (the embedding's width is {widths[0]})" if len(widths) == 1 else ""
            return f"{key} is {value}, a size no tensor in the weights has{seen}"
    for role in ("intermediate", "moe_intermediate"):
        if role in sizes and shapes:
            key, value = sizes[role]
            layers_only = not (role == "intermediate" and "moe_intermediate" in sizes)
            largest = largest_dimension(shapes, layers_only)
            if value > largest:
                where = "the layers' tensors" if layers_only else "the weights"
                return f"{key} is {value}, larger than any dimension of {where} (the largest is {largest})"
    if "experts" in sizes and (held := held_experts(shapes)):
        key, value = sizes["experts"]
        if value > held:
            return f"{key} is {value}, but the weights hold {held} experts per layer"
    return None


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def config_sizes(hf_config: Any) -> dict[str, tuple[str, int]]:
    """role -> (config.json key, value) of a transformers config or of config.json itself (a
    dict): its text model's sizes under the family's own key names (GPT-2's ``n_layer``, Mixtral's
    ``num_local_experts``, a multimodal model's ``text_config.num_hidden_layers``); a size the
    config does not have as an integer is left out."""
    if isinstance(hf_config, Mapping):
        inner = hf_config.get("text_config")
        text: Any = inner if isinstance(inner, Mapping) else hf_config
        prefix = "text_config." if text is inner else ""
        found = {role: next((k for k in keys if _whole(text.get(k))), None) for role, keys in ROLES.items()}
        return {role: (prefix + key, int(text[key])) for role, key in found.items() if key is not None}
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    prefix = "" if text is hf_config else "text_config."
    aliases = getattr(type(text), "attribute_map", {}) or {}
    out: dict[str, tuple[str, int]] = {}
    for role, attrs in ROLES.items():
        for attr in attrs:
            try:
                value = getattr(text, attr, None)
            except (AttributeError, TypeError):
                continue
            if _whole(value):
                out[role] = (prefix + str(aliases.get(attr, attr)), value)
                break
    return out


def refuse_sizes_beyond_weights(folder: str | Path, sizes: Mapping[str, tuple[str, int]],
                                field: str = "model.path", files: Iterable[Path] | None = None) -> None:
    """``ConfigError`` on ``field`` naming config.json and the key when the config claims more
    than ``folder``'s safetensors hold (``files``: those the caller's loader reads, default
    ``weight_files``); nothing for a folder without safetensors."""
    try:
        found = list(files) if files is not None else weight_files(Path(folder))
        if not found:
            return
        shapes = tensor_shapes(found)
    except ConfigError as exc:  # a broken index or file, named under the caller's field
        raise ConfigError(exc.message, field=field, fix=exc.fix) from None
    problem = size_problem(shapes, sizes)
    if problem is not None:
        raise ConfigError(f"config.json in {str(folder)!r} does not match its weights: {problem}",
                          field=field, fix=FIX)


def refuse_config_json_beyond_weights(folder: str | Path, field: str = "model.path",
                                      files: Iterable[Path] | None = None) -> None:
    """``refuse_sizes_beyond_weights`` for a loader that reads ``folder/config.json`` itself (mlx-lm,
    MAX): a config.json that cannot be read as an object is left to that loader's own error."""
    path = Path(folder) / "config.json"
    try:
        if not path.is_file() or path.stat().st_size > MAX_INDEX_BYTES:
            return
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, Mapping):
        refuse_sizes_beyond_weights(folder, config_sizes(data), field=field, files=files)
