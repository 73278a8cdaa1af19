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
