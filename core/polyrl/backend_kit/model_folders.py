"""Model folders a TRL user may hand over that are not a plain model transformers can load as is.

Why: transformers' own exceptions for these name the wrong cause or fix, or none: a peft adapter
folder reads as "has no config.json" (as if the copy were broken), a folder of custom modelling
code as a multi-line plea to pass ``trust_remote_code=True`` in Python with a ``hf.co`` link built
from a local path, and a pickled ``.bin`` checkpoint holding more than tensors as torch's advice
to allowlist the very globals it refused. Each is one ``error:`` line here, naming the field that
loads the folder and how. The mlx and max backends share them, with their own limits: they run no
transformers modelling code, read no peft adapter and no pickled ``.bin`` (mlx-lm and MAX said
"no config.json", "model type not supported" or "No safetensors found" as a plugin crash).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError

ADAPTER_CONFIG = "adapter_config.json"


def json_object(file: Path) -> dict[str, Any]:
    """``file``'s JSON object; empty when absent, unreadable or not an object (the loader reports those)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def adapter_folder_error(folder: Path, field: str = "model.path", backend: str = "torch") -> ConfigError | None:
    """The refusal of a peft adapter folder (``adapter_config.json``, no ``config.json``) given as
    the model, naming its base model and the options that train on from it; None for other folders.
    Only the torch backend reads ``initial_adapter``: another ``backend`` is told to merge first."""
    config = folder / ADAPTER_CONFIG
    if (folder / "config.json").exists() or not config.is_file():
        return None
    adapter = json_object(config)
    if "fine_tune_type" in adapter or "lora_parameters" in adapter:
        return _mlx_lm_adapter_error(folder, adapter, field)
    base = adapter.get("base_model_name_or_path")
    base_text = f"its base model is {base!r}" if isinstance(base, str) and base else "it names no base model"
    rank, alpha, targets = adapter.get("r"), adapter.get("lora_alpha"), adapter.get("target_modules")
    lora = f"[lora] rank = {rank}, alpha = {alpha}" if rank is not None and alpha is not None else "[lora] as it was trained"
    if isinstance(targets, list) and all(isinstance(t, str) for t in targets):
        lora += f", target_modules = {json.dumps(sorted(targets))}"
    elif isinstance(targets, str):
        lora += f", target_modules = {json.dumps(targets)}"
    start = (f"set model.path to the base model and backends.options.initial_adapter = {str(folder)!r} with "
             f"{lora} to train on from the adapter")
    merge = f"merge it first (PeftModel.merge_and_unload().save_pretrained(DIR)) and point {field} at DIR"
    return ConfigError(
        f"{str(folder)!r} is a peft adapter folder ({ADAPTER_CONFIG}), not a model: {base_text}", field=field,
        fix=f"{start}; or {merge}" if backend == "torch" else
            f"{merge}; the {backend} backend reads no peft adapter (with backend \"torch\": {start})")


def _mlx_lm_adapter_error(folder: Path, adapter: dict[str, Any], field: str) -> ConfigError:
    """An adapter ``mlx_lm.lora`` wrote (its own ``adapter_config.json``: ``fine_tune_type``,
    ``lora_parameters``, the base as ``model``): peft's merge does not read it, mlx-lm's fuse does."""
    base = adapter.get("model")
    base_text = f"its base model is {base!r}" if isinstance(base, str) and base else "it names no base model"
    base_arg = base if isinstance(base, str) and base else "BASE"
    return ConfigError(
        f"{str(folder)!r} is an mlx-lm adapter folder ({ADAPTER_CONFIG}, adapters.safetensors), not a model: "
        f"{base_text}", field=field,
        fix=f"fuse it into its base first (python -m mlx_lm.fuse --model {base_arg} --adapter-path {folder} "
            f"--save-path OUT; add --dequantize for a quantized base) and point {field} at OUT")


def remote_code_files(folder: Path) -> list[str]:
    """The Python files ``auto_map`` in ``config.json`` / ``tokenizer_config.json`` names (the
    folder's own modelling code), sorted; empty when neither file names any."""
    files: set[str] = set()
    for name in ("config.json", "tokenizer_config.json"):
        auto_map = json_object(folder / name).get("auto_map")
        if not isinstance(auto_map, dict):
            continue
        for value in auto_map.values():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str) and "." in ref:
                    module = ref.split("--")[-1].rsplit(".", 1)[0]  # "repo--module.Class" names another repo
                    files.add(module.replace(".", "/") + ".py")
    return sorted(files)


#: What ``remote_code_error`` tells a ``polyrl train`` user to do (the TRL drop-in gives its own).
_REMOTE_CODE_FIX = ("read those files, then set model.trust_remote_code = true if you trust them; or use a folder "
                    "of a model type transformers implements")


def remote_code_error(folder: Path, trusted: bool, exc: BaseException,
                      field: str = "model.trust_remote_code", refuser: str = "polyrl does not run unless asked",
                      fix: str = _REMOTE_CODE_FIX) -> ConfigError | None:
    """The refusal of a folder whose load failed (``exc``, transformers' own, asking for
    ``trust_remote_code``) because it names its own modelling code that ``trust_remote_code`` keeps
    from running; None when it names none, the code was allowed, or ``exc`` is another failure
    (a folder whose ``model_type`` transformers implements loads without its code). ``refuser``
    ends the sentence naming what does not run it, ``fix`` is the way out."""
    files = remote_code_files(folder)
    if trusted or not files or "trust_remote_code" not in str(exc):
        return None
    return ConfigError(
        f"{str(folder)!r} needs its own Python code to load ({', '.join(files)}, named by auto_map), which "
        f"{refuser}", field=field, fix=fix)


def unknown_type_error(folder: Path, exc: BaseException, field: str = "model.path") -> ConfigError | None:
    """The refusal of a folder whose load failed (``exc``) because transformers implements no model
    of its config.json's ``model_type`` (a model newer than the installed transformers, or a name
    edited in): one line naming the type and the version. transformers' own message runs over
    several lines and paragraphs, and the generic fix "point model.path at a Hugging Face model
    folder" sent the user looking for a folder they had given. None for any other failure."""
    model_type = json_object(folder / "config.json").get("model_type")
    if not isinstance(model_type, str) or "model_type" not in str(exc) and model_type not in str(exc):
        return None
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        return None
    if model_type in CONFIG_MAPPING:
        return None
    return ConfigError(
        f"{str(folder)!r} holds a model of type {model_type!r} (its config.json), which transformers "
        f"{transformers.__version__} does not implement", field=field,
        fix=f"upgrade transformers if {model_type!r} is newer than it, or train a model of an architecture it "
            "implements (README: Supported architectures)")


def foreign_code_error(folder: Path, backend: str, field: str = "model.path") -> ConfigError | None:
    """The refusal, by a backend that runs no transformers modelling code (mlx, max), of a folder
    whose ``model_type`` it has no module for and whose ``auto_map`` names the folder's own code:
    only torch can load it, and only with ``model.trust_remote_code``; None when ``auto_map``
    names no file (the backend's own "not supported" refusal stands)."""
    files = remote_code_files(folder)
    if not files:
        return None
    model_type = json_object(folder / "config.json").get("model_type")
    return ConfigError(
        f"{str(folder)!r} needs its own Python code to build model_type {model_type!r} ({', '.join(files)}, "
        f"named by auto_map), which the {backend} backend cannot run", field=field,
        fix="use backend \"torch\" and set model.trust_remote_code = true after reading those files, if you "
            f"trust them; or use a folder of a model type the {backend} backend implements")


#: transformers' names for pickled weights: ``pytorch_model.bin``, ``pytorch_model-00001-of-00002.bin``
PICKLED_WEIGHTS = "pytorch_model*.bin"


def pickled_only_error(folder: Path, backend: str, field: str = "model.path",
                       weights: str = "*.safetensors") -> ConfigError | None:
    """The refusal, by a backend that reads only safetensors (``weights``: the files it reads), of a
    folder whose weights are pickled ``.bin`` files alone: torch loads those (tensors only), the
    backend would end in "no safetensors found"; None when the folder has files it reads or no ``.bin``."""
    if any(folder.glob(weights)) or any(folder.glob("*.gguf")):
        return None
    bins = sorted(p.name for p in folder.glob(PICKLED_WEIGHTS))
    if not bins:
        return None
    named = ", ".join(bins[:3]) + (", ..." if len(bins) > 3 else "")
    return ConfigError(
        f"{str(folder)!r} holds its weights as pickled {named} only, and the {backend} backend reads "
        "*.safetensors files", field=field,
        fix="use backend \"torch\" (it loads them with torch.load(weights_only=True)); or, where you trust "
            "their source, save a safetensors copy (AutoModelForCausalLM.from_pretrained(DIR)"
            f".save_pretrained(OUT)) and point {field} at OUT")


def no_weights_error(folder: Path, backend: str, field: str = "model.path",
                     weights: str = "*.safetensors") -> ConfigError | None:
    """The refusal of a folder that holds none of the weight files ``backend`` reads (``weights``):
    a config.json copied without its weights, or weights saved under another name. mlx-lm ended in
    "No safetensors found", shown as the backend's crash; it is the folder the user gave. Call it
    after ``pickled_only_error`` (a ``.bin``-only folder has its own fix); None when a file matches."""
    if any(folder.glob(weights)):
        return None
    others = sorted(p.name for p in folder.glob("*.safetensors"))
    held = f"weights named {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}" if others else "no weights"
    return ConfigError(
        f"{str(folder)!r} holds {held}, and the {backend} backend reads only {weights} files", field=field,
        fix=f"point {field} at a complete model folder: config.json, the tokenizer files and the weights as "
            "model.safetensors (or model-00001-of-0000N.safetensors shards), as save_pretrained writes them"
            + ("; or rename the weight files to those names" if others else ""))


#: torch's ``weights_only`` refusal names the global it met: ``Unsupported global: GLOBAL builtins.print``
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def pickled_code_error(folder: Path, exc: BaseException, field: str = "model.path") -> ConfigError:
    """The refusal of a pickled ``.bin`` checkpoint that holds more than tensors: torch read it with
    ``weights_only=True`` and stopped at an object that would run code when unpickled."""
    found = _GLOBAL.search(str(exc))
    what = f" ({found.group(1)})" if found else ""
    bins = sorted(p.name for p in folder.glob("*.bin"))
    named = ", ".join(bins[:3]) + (", ..." if len(bins) > 3 else "") if bins else "its pickled weights"
    return ConfigError(
        f"{named} in {str(folder)!r} hold(s) a Python object besides tensors{what}: polyrl loads pickled "
        "weights with torch.load(weights_only=True) and never runs a file's code", field=field,
        fix="use the model's *.safetensors files instead, or convert the checkpoint to safetensors where you "
            "trust its source (model.save_pretrained(DIR))")
