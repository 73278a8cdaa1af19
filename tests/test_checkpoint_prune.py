"""Pruning old checkpoints is crash-safe: a kill part-way through deleting one leaves nothing
that lingers on disk, and no kept checkpoint is ever touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polyrl import checkpoint as ckpt
from polyrl import previous_runs


def _write(root: Path, step: int) -> None:
    def engine(model: str, state: str) -> None:
        Path(model).mkdir()
        (Path(model) / "weights.bin").write_bytes(b"w" * 64)

    ckpt.write_checkpoint(root, step, {"step": step}, engine)


def test_a_kill_during_pruning_leaves_no_lasting_leftover(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        _write(root, step)
    real_rmtree = shutil.rmtree

    def killed_part_way(path, *args, **kwargs):  # the marker went, then the process was killed
        marker = Path(path) / ckpt.MARKER
        if marker.exists():
            marker.unlink()
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(ckpt.shutil, "rmtree", killed_part_way)
    with pytest.raises(KeyboardInterrupt):
        ckpt.prune(root, keep=2)
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    assert not (root / "step-00000001").exists()  # never a step-N folder without its marker
    assert [p.name for p in ckpt.complete_checkpoints(root)] == ["step-00000002", "step-00000003"]

    _write(root, 4)  # the next save prunes and removes the half-deleted one
    ckpt.prune(root, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["step-00000003", "step-00000004"]
    assert all(ckpt.verify(p) is None for p in root.iterdir())


def test_leftovers_are_removed_at_start_and_counted_as_polyrls(tmp_path):
    root = tmp_path / "checkpoints"
    _write(root, 2)
    leftover = root / f"{ckpt.DELETING}step-00000001"
    (leftover / "model").mkdir(parents=True)
    assert not previous_runs._foreign(root, tmp_path / "model")  # a fresh start may set it aside
    ckpt.remove_pruned_leftovers(root)
    assert [p.name for p in root.iterdir()] == ["step-00000002"]
