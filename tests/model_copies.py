"""A copy of a test model folder with one of its JSON files edited (config.json,
tokenizer_config.json, generation_config.json): how the tests give a backend a model whose
settings differ in one place."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: as a value in ``edited_copy``'s changes: the key is deleted (it must be there)
REMOVE: Any = object()


def edited_copy(source: str | Path, folder: Path, changes: Mapping[str, Any], file: str = "config.json") -> Path:
    """``source`` copied to ``folder``, whose ``file`` then has ``changes`` over its own keys."""
    shutil.copytree(source, folder)
    path = folder / file
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is REMOVE:
            del data[key]
        else:
            data[key] = value
    path.write_text(json.dumps(data))
    return folder


def own_tokenizer_code_copy(source: str | Path, folder: Path, marker: Path) -> Path:
    """``source`` whose tokenizer is a class of the folder's own code (tokenizer_config's
    auto_map); that code writes ``marker`` when it runs, so a test sees whether it ever did."""
    edited_copy(source, folder, {"tokenizer_class": "XTok",
                                 "auto_map": {"AutoTokenizer": [None, "tokenization_x.XTok"]}},
                file="tokenizer_config.json")
    (folder / "tokenization_x.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PreTrainedTokenizerFast\n\n"
        "class XTok(PreTrainedTokenizerFast):\n    pass\n")
    return folder


def own_model_code_copy(source: str | Path, folder: Path, marker: Path) -> Path:
    """``source`` as a model type only the folder's own code builds (config.json's auto_map); its
    files write ``marker`` when they run."""
    edited_copy(source, folder, {
        "model_type": "polyrl_custom_llama", "architectures": ["CustomLlama"],
        "auto_map": {"AutoConfig": "configuration_custom.CustomConfig",
                     "AutoModelForCausalLM": "modeling_custom.CustomLlama"}})
    for name in ("configuration_custom.py", "modeling_custom.py"):
        (folder / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return folder
