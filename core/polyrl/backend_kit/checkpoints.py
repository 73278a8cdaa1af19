"""Checkpoint errors shared by the backends' ``load_checkpoint``."""

from __future__ import annotations

from pathlib import Path

from polyrl.errors import ConfigError


def missing_piece(piece: str, file: Path) -> ConfigError:
    """The error for a resume whose checkpoint lacks ``piece`` (optimizer or RNG state)."""
    return ConfigError(f"checkpoint has no {piece} ({file} is missing)", field="--resume",
                       fix="resume with --resume-weights-only to load the weights alone (fresh optimizer and RNG)")
