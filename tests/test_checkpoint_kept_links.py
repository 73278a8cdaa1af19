"""A checkpoint's hard link of a kept input (``kept_inputs``: a TRL PeftModel's merged reference)
is hashed and fsynced once, not at every save (``checkpoint._unchanged_links``), while a resume
still reads it whole and refuses it changed. Before, each save read the whole reference again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyrl import checkpoint as ckpt

BIG = 8 << 20  # a stand-in for the reference's weights


def _kept(tmp_path: Path) -> Path:
    source = tmp_path / "run" / "initial_reference"
    source.mkdir(parents=True)
    (source / "model.safetensors").write_bytes(os.urandom(BIG))
    return source


def _writer(source: Path, step: int):
    def write(model_dir: str, state_dir: str) -> None:
        Path(model_dir).mkdir()
        (Path(model_dir) / "weights.bin").write_bytes(bytes([step]) * 1024)  # new at every save
        Path(state_dir).mkdir()
        kept = Path(model_dir).parent / "initial_reference"
        kept.mkdir()
        os.link(source / "model.safetensors", kept / "model.safetensors")
    return write


@pytest.fixture
def hashed(monkeypatch):
    """The files the checkpoint module reads to hash, in order."""
    read: list[Path] = []
    real = ckpt.sha256

    def counting(path: Path) -> str:
        read.append(Path(path))
        return real(path)
    monkeypatch.setattr(ckpt, "sha256", counting)
    return read


def _fsynced(monkeypatch) -> list[int]:
    inodes: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        inodes.append(os.fstat(fd).st_ino)
        real(fd)
    monkeypatch.setattr(os, "fsync", counting)
    return inodes


def test_a_second_save_neither_reads_nor_fsyncs_the_unchanged_kept_link(tmp_path, hashed, monkeypatch):
    source, root = _kept(tmp_path), tmp_path / "run" / "checkpoints"
    inode = (source / "model.safetensors").stat().st_ino
    ckpt.write_checkpoint(root, 1, {"step": 1}, _writer(source, 1))
    assert any(p.name == "model.safetensors" for p in hashed)  # the first save reads it once
    hashed.clear()
    fsynced = _fsynced(monkeypatch)
    second = ckpt.write_checkpoint(root, 2, {"step": 2}, _writer(source, 2))
    assert [p for p in hashed if p.name == "model.safetensors"] == []
    assert inode not in fsynced
    assert any(p.name == "weights.bin" for p in hashed)  # the files written anew are read as before
    assert ckpt.verify(second) is None  # the digest it took over is the file's


def test_a_kept_link_changed_since_is_read_again(tmp_path, hashed):
    source, root = _kept(tmp_path), tmp_path / "run" / "checkpoints"
    ckpt.write_checkpoint(root, 1, {"step": 1}, _writer(source, 1))
    with open(source / "model.safetensors", "r+b") as fh:  # in place: the same inode
        fh.write(b"\x00" * 16)
    hashed.clear()
    second = ckpt.write_checkpoint(root, 2, {"step": 2}, _writer(source, 2))
    assert any(p.name == "model.safetensors" for p in hashed)
    assert ckpt.verify(second) is None


def test_a_resume_refuses_a_kept_link_altered_with_its_mtime_set_back(tmp_path):
    source, root = _kept(tmp_path), tmp_path / "run" / "checkpoints"
    ckpt.write_checkpoint(root, 1, {"step": 1}, _writer(source, 1))
    ckpt.write_checkpoint(root, 2, {"step": 2}, _writer(source, 2))
    kept = source / "model.safetensors"
    before = kept.stat()
    with open(kept, "r+b") as fh:
        fh.seek(BIG // 2)
        fh.write(b"\xff" * 16)
    os.utime(kept, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and mtime as recorded
    third = ckpt.write_checkpoint(root, 3, {"step": 3}, _writer(source, 3))  # takes over the old digest
    for found in (third, root / "step-00000002"):
        assert ckpt.verify(found).startswith("initial_reference/model.safetensors does not match its checksum")
    newest, skipped = ckpt.newest_verified(root)
    assert newest is None and len(skipped) == 3  # each holds the altered file: none is resumed
