"""Atomic checkpoint directories: a crash never leaves a checkpoint that looks complete.

A checkpoint is written into ``.tmp-step-XXXXXXXX``, every file fsynced, a ``COMPLETE`` marker
(with the step) written last, then the directory is renamed to ``step-XXXXXXXX`` and its parent
fsynced. Only directories with a valid marker are ever chosen for ``--resume``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = "COMPLETE"
STATE_FILE = "trainer_state.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb+") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(root))


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def write_checkpoint(
    root: str | Path, step: int, state: dict[str, Any], write_model: Callable[[str], None]
) -> Path:
    """Write a checkpoint for ``step`` atomically; ``write_model(dir)`` saves the engine's part."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write_model(str(tmp / "model"))
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True))
    _fsync_tree(tmp)
    marker = tmp / MARKER
    with open(marker, "w") as fh:
        fh.write(json.dumps({"step": step}))
        fh.flush()
        os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def is_complete(path: Path) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text())
        json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return path.name == f"step-{int(marker.get('step', -1)):08d}"


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(root: str | Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def read_state(path: Path) -> dict[str, Any]:
    return json.loads((path / STATE_FILE).read_text())


def prune(root: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints and any stale temp dirs."""
    root = Path(root)
    for stale in root.glob(".tmp-step-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for old in complete_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
