"""A copy of a model folder that renders chats with another template.

Why: checks of how a backend renders chats (template variables, ``tools``, a template that
raises) need the same weights under a template of their own. Hugging Face keeps a folder's
template in ``tokenizer_config.json`` or, as transformers 5's ``save_pretrained`` writes it, in
``chat_template.jinja`` (or ``chat_template.json``), and such a file wins over the config's: a
copy that only rewrote the config still rendered the folder's own template.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

#: the files that hold a folder's default chat template instead of ``tokenizer_config.json``
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def with_chat_template(model_dir: str | os.PathLike[str], dst: str | os.PathLike[str], template: str | None) -> str:
    """Copy ``model_dir`` to ``dst`` (which must not exist) with ``template`` as its only chat
    template (None: without any); return ``dst``."""
    folder = Path(shutil.copytree(model_dir, dst))
    config = folder / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings.pop("chat_template", None)
    if template is not None:
        settings["chat_template"] = template
    config.write_text(json.dumps(settings))
    for name in TEMPLATE_FILES:
        (folder / name).unlink(missing_ok=True)
    return str(folder)
