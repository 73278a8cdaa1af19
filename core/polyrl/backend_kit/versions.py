"""Installed distribution versions, read from package metadata (never by importing the package).

Why metadata: a backend's registration must stay cheap and must not import torch, MAX or MLX just
to say which version would run; and a development checkout without metadata still registers.
"""

from __future__ import annotations

from importlib import metadata


def installed_version(distribution: str) -> str:
    """``distribution``'s installed version, or ``"0+unknown"`` when it has no metadata here."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "0+unknown"
