"""Checkpoint errors shared by the backends' ``load_checkpoint``."""

from __future__ import annotations

from pathlib import Path

from polyrl.backend_kit.engine_state import FIX
from polyrl.errors import ConfigError


def missing_piece(piece: str, file: Path) -> ConfigError:
    """The error for a resume whose checkpoint lacks ``piece`` (optimizer or RNG state)."""
    return ConfigError(f"{file}: is missing (the checkpoint has no {piece})", field="--resume", fix=FIX)
