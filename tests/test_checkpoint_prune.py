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


def _unmark(root: Path, step: int, half: bool = True) -> Path:
    """``step-N`` as a kill in an earlier polyrl's in-place prune left it: no marker, part of its files."""
    folder = root / f"step-{step:08d}"
    (folder / ckpt.MARKER).unlink()
    if half:
        shutil.rmtree(folder / "model")
    return folder


def test_an_unmarked_step_folder_older_than_a_complete_checkpoint_is_removed(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        _write(root, step)
    leftover = _unmark(root, 1)
    assert ckpt.remove_unmarked_leftovers(root) == [leftover]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000002", "step-00000003"]
    assert all(ckpt.verify(p) is None for p in root.iterdir())


def test_no_complete_or_possibly_salvageable_checkpoint_is_removed(tmp_path):
    """Kept: every complete checkpoint; an unmarked folder newer than all of them (resume skips it,
    a save of its step replaces it); one whose marker is there but damaged (its weights may be
    worth saving by hand); a link; and an unmarked folder when no complete checkpoint exists."""
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        _write(root, step)
    (root / "step-00000001" / ckpt.MARKER).write_text("{damaged")
    _unmark(root, 4, half=False)
    (root / "step-00000000").symlink_to(tmp_path, target_is_directory=True)
    before = sorted(p.name for p in root.iterdir())
    assert ckpt.remove_unmarked_leftovers(root) == []
    assert sorted(p.name for p in root.iterdir()) == before
    found, skipped = ckpt.newest_verified(root)
    assert found == root / "step-00000003" and [p.name for p, _ in skipped] == ["step-00000004"]

    lone = tmp_path / "lone"
    _write(lone, 5)
    _unmark(lone, 5)
    assert ckpt.remove_unmarked_leftovers(lone) == [] and (lone / "step-00000005").is_dir()


def test_a_users_folder_named_after_a_checkpoint_is_not_an_unmarked_leftover(tmp_path):
    """Only polyrl's own ``step-N`` names are judged: a folder a user made beside the checkpoints
    ("step-00000001-merged", no marker) was deleted by the prefix match as an earlier polyrl's leftover."""
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        _write(root, step)
    mine = root / "step-00000001-merged"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"weights")
    assert ckpt.remove_unmarked_leftovers(root) == []
    assert (mine / "model.safetensors").read_bytes() == b"weights"


@pytest.mark.parametrize(("keep", "left"), [(2, [2, 5]), (3, [2, 4, 5]), (1, [2, 5])])
def test_a_protected_checkpoint_is_kept_and_counted_as_transformers_rotate_checkpoints(tmp_path, keep, left):
    """A TRL run's best checkpoint (load_best_model_at_end loads it at the end) survives pruning,
    counted among the kept ones: the oldest others go first; the newest is always kept."""
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4, 5):
        _write(root, step)
    ckpt.prune(root, keep=keep, protect=[root / "step-00000002"])
    assert [p.name for p in ckpt.complete_checkpoints(root)] == [f"step-{s:08d}" for s in left]
    ckpt.prune(root, keep=keep)  # without it, the newest keep as before
    assert len(ckpt.complete_checkpoints(root)) == keep


def test_keep_checkpoints_0_keeps_every_checkpoint(tmp_path):
    """``train.keep_checkpoints = 0`` (TRL's ``save_total_limit = None``, transformers' keep-all) was
    refused by the config; pruning keeps every checkpoint with it. Below 0 is one error."""
    from polyrl.config import TrainSection
    from polyrl.errors import ConfigError

    assert TrainSection(keep_checkpoints=0).keep_checkpoints == 0
    with pytest.raises(ConfigError) as err:
        TrainSection(keep_checkpoints=-1)
    assert err.value.field == "train.keep_checkpoints"
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        _write(root, step)
    ckpt.prune(root, keep=0)
    assert [p.name for p in ckpt.complete_checkpoints(root)] == [f"step-{s:08d}" for s in (1, 2, 3, 4)]
