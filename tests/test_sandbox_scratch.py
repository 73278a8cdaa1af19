"""The sample's folder on the host (``polyrl.sandbox.scratch``) and its removal
(``leftovers.remove_tree``): through descriptors, never through a link, never opening a FIFO.
No sample runs here; the attacks themselves are replayed in ``test_sandbox_escapes.py``."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from polyrl.sandbox import leftovers, scratch


#: rm, found before a test hides it (``rm_or_not``).
RM = shutil.which("rm", path="/usr/bin:/bin") or "rm"


@pytest.fixture(params=["rm", "no rm"])
def rm_or_not(request, monkeypatch):
    """Both ways ``remove_tree`` works: GNU rm's descriptor walk, and its own where rm is missing."""
    if request.param == "no rm":
        monkeypatch.setattr(leftovers.shutil, "which", lambda *args, **kwargs: None)
    return request.param


def _outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    return outside


def test_a_folder_is_removed_whole_and_its_links_targets_stay(tmp_path, rm_or_not):
    outside = _outside(tmp_path)
    home = tmp_path / "polyrl-sandbox-x" / "home"
    (home / "a" / "b").mkdir(parents=True)
    (home / "a" / "b" / "f").write_text("x")
    (home / "dir-link").symlink_to(outside)
    (home / "file-link").symlink_to(outside / "keep")
    os.mkfifo(home / "fifo")
    assert leftovers.remove_tree(str(home.parent))
    assert not os.path.lexists(home.parent)
    assert (outside / "keep").read_text() == "host file"


@pytest.mark.parametrize("planted", ["fifo", "link to a fifo", "link to a folder"])
def test_what_stands_in_the_folders_place_is_unlinked_never_opened(tmp_path, rm_or_not, planted):
    """A FIFO (or a link) in the folder's place: ``shutil.rmtree`` opened the path, following a link
    and blocking in a FIFO's open; here it is unlinked. The FIFO is held open for writing, so code
    that opened it would not block but would leave it (its ``scandir`` fails): the test fails then."""
    outside = _outside(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    place = tmp_path / "polyrl-sandbox-x"
    try:
        if planted == "fifo":
            os.rename(fifo, place)
        else:
            place.symlink_to(fifo if planted == "link to a fifo" else outside)
        assert leftovers.remove_tree(str(place))
    finally:
        os.close(writer)
    assert not os.path.lexists(place)
    assert sorted(os.listdir(outside)) == ["keep"] and (outside / "keep").read_text() == "host file"
    assert planted == "fifo" or stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _deep(top, levels: int) -> None:
    """``levels`` folders nested in ``top``, made through descriptors (no path that long)."""
    at = os.open(top, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=at)
        inner = os.open("d", os.O_RDONLY, dir_fd=at)
        os.close(at)
        at = inner
    os.close(at)


def test_a_tree_past_the_recursion_limit_is_removed_by_rm_or_reported_without_it(tmp_path, rm_or_not):
    """Removed here where it can, by rm past the recursion limit; without rm it stays and the
    answer says so (no RecursionError reaches the caller: ``Sandbox.run`` raised it before)."""
    folder = tmp_path / "polyrl-sandbox-x"
    folder.mkdir()
    _deep(folder, 1500)
    try:
        gone = leftovers.remove_tree(str(folder))
        assert gone == (rm_or_not == "rm") and os.path.lexists(folder) != gone
    finally:  # pytest's own clean-up of old temp folders (shutil.rmtree) raised RecursionError on it
        subprocess.run([RM, "-rf", "--one-file-system", "--", str(folder)], check=True)


def test_a_deep_tree_holds_few_of_the_trainers_descriptors_at_once(tmp_path, monkeypatch):
    """A tree 300 deep is removed (rm takes what lies past ``IN_PROCESS_LEVELS``) while the
    trainer holds at most about ``IN_PROCESS_LEVELS`` descriptors for it at once: in-process to
    the recursion limit it held one per level, 300 here, and a tree 900 deep left another thread's
    ``open`` (a checkpoint, the next sample's pipes) EMFILE under a 1024 limit."""
    folder = tmp_path / "polyrl-sandbox-x"
    folder.mkdir()
    _deep(folder, 300)
    base = len(os.listdir("/proc/self/fd"))
    peak = [base]
    real_open = os.open

    def counted(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")))
        return fd

    monkeypatch.setattr(leftovers.os, "open", counted)
    try:
        assert leftovers.remove_tree(str(folder))
    finally:
        monkeypatch.undo()
        subprocess.run([RM, "-rf", "--one-file-system", "--", str(folder)], check=True)
    assert peak[0] - base <= 40, peak[0] - base  # IN_PROCESS_LEVELS (32) and a few


def test_a_folder_already_gone_counts_as_removed(tmp_path):
    assert leftovers.remove_tree(str(tmp_path / "never-made"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the home to another uid")
def test_the_sample_owns_its_home_only_never_the_folders_entry(tmp_path, monkeypatch):
    """The folder (its entry in the shared /tmp) is the trainer's, mode 0711: the sample can
    neither rename nor replace it; the home inside is the sample's uid's, mode 0700."""
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    folder, home = scratch.make((2_000_000_000 + 4243, 2_000_000_000 + 4243))
    try:
        top, own = os.lstat(folder), os.lstat(home)
        assert (top.st_uid, stat.S_IMODE(top.st_mode)) == (0, 0o711)
        assert (own.st_uid, own.st_gid, stat.S_IMODE(own.st_mode)) == (2_000_004_243, 2_000_004_243, 0o700)
        assert os.path.dirname(home) == folder and os.path.basename(folder).startswith(scratch.PREFIX)
    finally:
        assert leftovers.remove_tree(folder)
