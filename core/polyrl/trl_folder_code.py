"""The TRL drop-in's loads of a model folder (tokenizer, config, weights) with ``trust_remote_code``
always passed, and a folder that needs its own Python refused in one line.

Why: without the argument transformers 5 ASKS on a terminal ("Do you wish to run the custom code?
[y/N]") and a "y" ran the folder's code, though the run's ``model.trust_remote_code`` is false;
off a terminal its refusal was a multi-line plea with an ``hf.co`` link built from a local path.
The drop-in's runs never run a folder's code: ``from_trl`` refuses TRL's ``trust_remote_code =
True`` and the Python API sets no ``model.trust_remote_code``, so the loads here pass False.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from polyrl.backend_kit.model_folders import remote_code_error
from polyrl.errors import ConfigError

#: the drop-in's ``model.trust_remote_code`` (``from_trl`` refuses TRL's True)
TRUSTED = False


def refusal(source: str | Path, exc: BaseException, field: str) -> ConfigError | None:
    """The one-line refusal of ``source`` whose load failed (``exc``) because its ``auto_map`` names
    its own code; None for any other failure (the caller's own message stands)."""
    folder = Path(source)
    if not folder.is_dir():
        return None
    return remote_code_error(
        folder, TRUSTED, exc, field, refuser="polyrl's TRL drop-in does not run",
        fix="use a folder of a model type and tokenizer class transformers implements; or, after reading "
            "those files, train it with `polyrl train` and model.trust_remote_code = true in the TOML config")


def load(loader: Any, source: str | Path, field: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained(source, trust_remote_code=TRUSTED, **kwargs)`` (``AutoTokenizer``,
    ``AutoConfig``, ``AutoModelForCausalLM``), a refusal of the folder's own code as one ``error:`` line."""
    try:
        return loader.from_pretrained(str(source), trust_remote_code=TRUSTED, **kwargs)
    except ValueError as exc:
        error = refusal(source, exc, field)
        if error is None:
            raise
        raise error from None
