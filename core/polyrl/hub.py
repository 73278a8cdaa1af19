"""Hugging Face Hub ids as ``model.path``: resolved from the local HF cache only, never fetched.

Why: a user whose model sits in ``~/.cache/huggingface`` (downloaded once by transformers or
``hf download``) should not have to dig out its snapshot folder; but polyrl runs offline, so an id
that is not cached is a clear ``error:`` with the command that fixes it, not a download or a hang.
The cache layout (``models--org--name/snapshots/<rev>/`` + ``refs/main``) is huggingface_hub's;
it is read through its own ``snapshot_download(local_files_only=True)``.
"""

from __future__ import annotations

import re
from pathlib import Path

from polyrl.errors import ConfigError

#: org/name as the Hub spells it: no leading dot, slash or tilde (those are local paths).
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+(@[\w.\-/]+)?$")


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` that is not an existing local path."""
    return bool(_REPO_ID.match(name)) and not name.endswith((".gguf", ".json")) and not Path(name).exists()


def resolve_cached(repo_id: str, field: str = "model.path") -> str:
    """The local snapshot folder of ``repo_id`` (``org/name`` or ``org/name@revision``)."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise ConfigError(
            f"{repo_id!r} is not a local path, and huggingface_hub (needed to read the HF cache) "
            "is not installed", field=field,
            fix="pip install huggingface_hub, or give a local model folder") from None
    repo, _, revision = repo_id.partition("@")
    try:
        return snapshot_download(repo, revision=revision or None, local_files_only=True)
    except LocalEntryNotFoundError:
        raise ConfigError(
            f"{repo_id!r} is neither a local path nor a model in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}); polyrl never downloads",
            field=field,
            fix=f"download it once where there is network (`hf download {repo}`, with the same "
                "HF_HOME), or give a local model folder") from None
