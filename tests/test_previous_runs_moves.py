"""An earlier run set aside into a previous/ on another filesystem (os.replace fails with EXDEV):
moved by copy then delete, and never lost when the copy fails half-way."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from polyrl import previous_runs
from polyrl.previous_runs import SetAsideError, earlier_runs, set_aside


def _earlier_run(out: Path) -> list[Path]:
    """A finished run's files in ``out`` (a checkpoint with a symlink in it, the model, metrics)."""
    step = out / "checkpoints" / "step-00000001"
    (step / "model").mkdir(parents=True)
    (step / "model" / "weights").write_text("step 1 weights")
    (step / "latest").symlink_to("model")
    (out / "model").mkdir()
    (out / "model" / "weights").write_text("final weights")
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    return [out / "checkpoints", out / "model", out / "metrics.jsonl", out / "completions.jsonl"]


def _cross_device(monkeypatch: pytest.MonkeyPatch, out: Path) -> list[str]:
    """Renames out of ``out`` fail as they do between filesystems (the OS's answer, faked); those
    within previous/ (one filesystem) work. Returns the names renamed into place."""
    real_replace = os.replace
    renamed: list[str] = []

    def replace(src, dst):
        if Path(src).parent == out:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        renamed.append(Path(dst).name)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return renamed


def test_a_cross_filesystem_move_copies_then_deletes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    items = _earlier_run(out)
    renamed = _cross_device(monkeypatch, out)
    aside = set_aside(out, items, keep=1)  # old code: OSError [Errno 18] traceback
    assert (aside / "checkpoints" / "step-00000001" / "model" / "weights").read_text() == "step 1 weights"
    assert (aside / "checkpoints" / "step-00000001" / "latest").is_symlink()  # links copied as links
    assert (aside / "model" / "weights").read_text() == "final weights"
    assert (aside / "metrics.jsonl").read_text() == '{"step": 0}\n'
    assert sorted(renamed) == ["checkpoints", "metrics.jsonl", "model"]  # each copy renamed into place
    assert not any(p.exists() for p in items)  # the originals went only after their copies were whole
    assert sorted(p.name for p in aside.iterdir()) == [".copied-stats.json", "checkpoints", "metrics.jsonl", "model"]


def test_a_copy_that_fails_half_way_loses_nothing(tmp_path, monkeypatch):
    out = tmp_path / "run"
    items = _earlier_run(out)
    _cross_device(monkeypatch, out)
    real_copyfile = shutil.copyfile
    copied = []

    def copyfile(src, dst, *args, **kwargs):  # the other disk fills up after one file
        if copied:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        copied.append(src)
        return real_copyfile(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    with pytest.raises(SetAsideError) as caught:
        set_aside(out, items, keep=1)
    message = str(caught.value)
    assert "No space left on device" in message and "left where it was" in message and "Fix:" in message
    assert (out / "checkpoints" / "step-00000001" / "model" / "weights").read_text() == "step 1 weights"
    assert (out / "checkpoints" / "step-00000001" / "latest").is_symlink()
    assert (out / "model" / "weights").read_text() == "final weights"
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n'
    assert earlier_runs(out / "previous") == []  # no half copy, no empty folder counted as a run
    assert list((out / "previous").iterdir()) == []


def test_an_original_that_cannot_be_deleted_after_its_copy_is_one_error(tmp_path, monkeypatch):
    out = tmp_path / "run"
    items = _earlier_run(out)
    _cross_device(monkeypatch, out)

    def remove(path: Path) -> None:
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(previous_runs, "_remove", remove)
    with pytest.raises(SetAsideError, match="copied whole to .*checkpoints .*model .*Fix: delete"):
        set_aside(out, items, keep=1)
    (aside,) = earlier_runs(out / "previous")
    assert (aside / "checkpoints" / "step-00000001" / "model" / "weights").read_text() == "step 1 weights"
    assert (out / "checkpoints" / "step-00000001" / "model" / "weights").read_text() == "step 1 weights"


def test_a_previous_folder_on_a_real_other_filesystem(tmp_path):
    """No fake: previous/ is a symlink into /dev/shm (tmpfs) where that is another filesystem."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev or not os.access(shm, os.W_OK):
        pytest.skip("no writable second filesystem at /dev/shm")
    elsewhere = Path(tempfile.mkdtemp(dir=shm))
    try:
        out = tmp_path / "run"
        items = _earlier_run(out)
        (out / "previous").symlink_to(elsewhere, target_is_directory=True)
        aside = set_aside(out, items, keep=1)
        assert aside.resolve().parent == elsewhere.resolve()
        assert (aside / "model" / "weights").read_text() == "final weights"
        assert not (out / "model").exists() and not (out / "checkpoints").exists()
    finally:
        shutil.rmtree(elsewhere)


class _Killed(BaseException):
    """A kill -9 stand-in: nothing after it runs (no undo, no cleanup)."""


def test_a_start_killed_between_its_moves_loses_no_part_of_the_earlier_run(tmp_path, monkeypatch):
    """The earlier run's files are moved one by one. Killed after checkpoints/ moved, the next
    start found model/ and metrics.jsonl, set them aside in a second folder and, keeping one run,
    deleted the first folder: the checkpoints were gone."""
    out = tmp_path / "run"
    items = _earlier_run(out)
    real_replace = os.replace
    moves: list[str] = []

    def killed_after_one(src, dst):
        if moves:
            raise _Killed()
        moves.append(Path(src).name)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_after_one)
    with pytest.raises(_Killed):
        set_aside(out, items, keep=1)
    monkeypatch.setattr(os, "replace", real_replace)
    assert moves == ["checkpoints"] and (out / "model").is_dir()
    aside = set_aside(out, items, keep=1)  # the next fresh start
    assert sorted(p.name for p in aside.iterdir()) == ["metrics.jsonl", "model"]
    weights = list((out / "previous").rglob("step-00000001/model/weights"))
    assert [p.read_text() for p in weights] == ["step 1 weights"]  # kept, in the folder the kill left
    assert earlier_runs(out / "previous") == [aside]  # a part-run never counts against keep_previous_runs


def test_checkpoints_moved_across_filesystems_get_no_record_in_their_folder(tmp_path, monkeypatch):
    """A resume's newer checkpoints moved into previous/<time>/checkpoints/ on another filesystem
    (``move_aside``) got a ``.copied-stats.json`` in that checkpoints folder. Moved back to continue
    that branch, the next fresh start stopped on it as a file polyrl did not write in checkpoints/.
    Only checkpoints are in that folder, and a fresh start moves it aside as polyrl's."""
    out = tmp_path / "run"
    steps = []
    for step in (2, 3):
        (out / "checkpoints" / f"step-0000000{step}" / "model").mkdir(parents=True)
        (out / "checkpoints" / f"step-0000000{step}" / "model" / "weights").write_text(f"step {step}")
        steps.append(out / "checkpoints" / f"step-0000000{step}")
    target = out / "previous" / "20260101T000000Z" / "checkpoints"
    target.mkdir(parents=True)
    real_replace = os.replace

    def replace(src, dst):  # out of checkpoints/ is another filesystem (the OS's answer, faked)
        if Path(src).parent == out / "checkpoints":
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    previous_runs.move_aside(steps, target)
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(p.name for p in target.iterdir()) == ["step-00000002", "step-00000003"]  # old: .copied-stats.json
    assert (target / "step-00000003" / "model" / "weights").read_text() == "step 3"
    shutil.rmtree(out / "checkpoints")
    target.rename(out / "checkpoints")  # back, to continue the branch it was
    assert previous_runs.earlier_run(out / "checkpoints", out / "model")  # a run of polyrl's, not refused
