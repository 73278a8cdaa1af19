"""Races on the audit hook's path checks at ``isolation = "off"`` (no mount namespace), and what
the hook judged by a descriptor.

The hook judges a path (``os.path.realpath`` against the sample's folder), then the kernel opens
it: a second thread of the sample's that changes what the path names in between (renaming a
folder of its own over one holding a link to a file outside, changing the working folder, or
swapping the descriptor a ``/proc/self/fd/N`` path names) made the open reach a file outside.
Each attack here tries a bounded number of times and reports how many writes got out; the
trainer's files are checked on disk as well. As ``user = "none"`` where the trainer is root (the
sample owns root's files), else as the trainer's own uid."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, memfd_filter

pytestmark = pytest.mark.faults

#: Attempts per race: thousands of checks a second, so a race the kernel lets through shows in
#: well under a second; the bound keeps a closed one short.
TRIES = 4000

RACES = r"""
import os, threading

def _swapping(work, stop):
    def run():
        while not stop:
            try:
                work()
            except OSError:
                pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread

def _open_tries(path, tries, stop):
    out = 0
    for _ in range(tries):
        try:
            with open(path, "a") as f:
                f.write("X")
            out += 1
        except OSError:
            pass
    stop.append(True)
    return out

def race_rename(victim, tries):
    # "b/f" is a plain file when judged; "a" holds "f", a link to the victim; a thread swaps a and b
    for name in ("a", "b"):
        os.mkdir(name)
    open("b/f", "w").close()
    try:
        os.symlink(victim, "a/f")
    except OSError:
        pass
    def swap():
        os.rename("a", "t")
        os.rename("b", "a")
        os.rename("t", "b")
    stop = []
    thread = _swapping(swap, stop)
    _open_tries("b/f", tries, stop)
    thread.join()
    return "done"

def race_chdir(folder, tries):
    # "planted" is judged against the working folder, then the other thread moves it
    home = os.getcwd()
    def move():
        os.chdir(folder)
        os.chdir(home)
    stop = []
    thread = _swapping(move, stop)
    _open_tries("planted", tries, stop)
    thread.join()
    try:
        os.chdir(home)
    except OSError:
        pass
    return "done"

def race_dotdot(victim, tries):
    # "../" as many times as the working folder is deep, then the victim's path: judged from a
    # folder as deep again inside the sample's own, it names a file there; the other thread
    # changes the working folder back to the sample's, where the same path names the victim
    home = os.getcwd()
    depth = len(home.strip("/").split("/"))
    deep = os.path.join(home, *["d"] * depth)
    os.makedirs(deep)
    def move():
        os.chdir(deep)
        os.chdir(home)
    stop = []
    thread = _swapping(move, stop)
    _open_tries("../" * depth + victim.lstrip("/"), tries, stop)
    thread.join()
    try:
        os.chdir(home)
    except OSError:
        pass
    return "done"

def race_fd(victim, tries):
    # /proc/self/fd/N names a file of the sample's when judged; the other thread puts the
    # victim, open for reading only, at N; the open for writing reopens the victim
    mine = os.open("mine", os.O_RDONLY | os.O_CREAT)
    theirs = os.open(victim, os.O_RDONLY)
    n = os.dup(mine)
    def swap():
        os.dup2(theirs, n)
        os.dup2(mine, n)
    stop = []
    thread = _swapping(swap, stop)
    _open_tries("/proc/self/fd/%d" % n, tries, stop)
    thread.join()
    return "done"

def mode_by_fd(victim):
    # the hook let a descriptor's metadata change through ("checked when it was opened")
    fd = os.open(victim, os.O_RDONLY)
    out = []
    for change in (lambda: os.chmod(fd, 0o666), lambda: os.fchmod(fd, 0o666), lambda: os.utime(fd, (0, 0))):
        try:
            change()
            out.append("changed")
        except OSError:
            out.append("refused")
    return out
"""


def _box(audit_hook: bool = True) -> Sandbox:
    if memfd_filter.program() is None:
        pytest.skip("the small filter's numbers are known for x86_64 and aarch64 only")
    return Sandbox(SandboxLimits(timeout_s=30, memory_mb=512, disk_mb=8), audit_hook=audit_hook, isolation="off",
                   user="none" if os.geteuid() == 0 else "auto", python=sys.executable)


@pytest.fixture
def trainer_files(tmp_path):
    """A folder of the trainer's outside the sample's, with a file the sample's uid may write."""
    folder = tmp_path / "trainer-files"
    folder.mkdir()
    victim = folder / "victim"
    victim.write_text("kept")
    victim.chmod(0o644)
    return folder


@pytest.mark.parametrize("race", ["race_rename", "race_chdir", "race_fd", "race_dotdot"])
def test_a_second_thread_does_not_race_a_write_out_of_the_folder_at_off(trainer_files, race):
    """A thread of the sample's changing what a judged path names before the kernel opens it
    (module docstring): each wrote the trainer's file or planted one in its folder within a few
    thousand tries. Now none gets out."""
    victim = trainer_files / "victim"
    target = str(trainer_files) if race == "race_chdir" else str(victim)
    result = _box().run(RACES, parse_tests(f"assert {race}({target!r}, {TRIES}) == 'done'\n"))
    assert result.status == "ok", result
    assert victim.read_text() == "kept", (race, victim.read_text()[:40], result.output[-500:])
    assert sorted(p.name for p in trainer_files.iterdir()) == ["victim"], result.output[-500:]


def test_a_descriptor_opened_for_reading_changes_no_metadata_outside_at_off(trainer_files):
    """``os.chmod(fd)``/``os.fchmod`` and ``os.utime(fd)`` of a file outside, opened for reading: the
    hook judged a descriptor "when it was opened", and a read-only open passes, so the sample made
    the trainer's file world-writable. Now those calls on a descriptor are refused."""
    victim = trainer_files / "victim"
    result = _box().run(RACES, parse_tests(
        f"assert mode_by_fd({str(victim)!r}) == ['refused'] * 3\n"))
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644, oct(victim.stat().st_mode)
    assert result.status == "ok" and result.passed == [True], result


NATURAL = r"""
import os, sys, tempfile, threading

def natural():
    sys.setrecursionlimit(1 << 20)
    threading.stack_size(1 << 26)
    out = []
    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)
    t = threading.Thread(target=lambda: out.append(deep(50000)))
    t.start()
    t.join()
    os.makedirs("sub/dir", exist_ok=True)
    with open("sub/dir/data.txt", "w") as f:
        f.write("hello")
    with open(os.path.join(os.getcwd(), "sub", "dir", "data.txt")) as f:
        out.append(f.read())
    with tempfile.NamedTemporaryFile("w", dir=".", delete=False) as f:
        f.write("t")
    with open(f.name) as g:
        out.append(g.read())
    os.remove(f.name)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "x"), "w") as f:
            f.write("y")
        out.append(sorted(os.listdir(d)))
    out.append(sorted(os.listdir("sub/dir")))
    return out
"""


@pytest.mark.parametrize("linked", [False, True])
def test_natural_threads_and_file_io_still_work_at_off(tmp_path, monkeypatch, linked):
    """Deep recursion in a thread (Codeforces-style), files in folders of the sample's own, a
    temporary file and folder: all still work under the filter and hook at ``off``; ``linked``:
    the trainer's temporary folder is reached through a link, so the sample's HOME and TMPDIR
    (where ``tempfile`` writes) are written through it while its working folder is the real one."""
    if linked:
        import tempfile

        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "alias").symlink_to(real)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "alias"))
    result = _box().run(NATURAL, parse_tests("assert natural() == [50000, 'hello', 't', ['x'], ['data.txt']]\n"))
    assert result.status == "ok" and result.passed == [True], result


RENAMES = r"""
import os, pathlib, shutil, tempfile

def natural():
    os.makedirs("out/sub", exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir="out", delete=False) as f:
        f.write("v1")
    os.replace(f.name, "out/result.txt")  # write a temporary file, then put it in place
    shutil.move("out/result.txt", "out/sub/moved.txt")
    os.rename("out/sub", "out/kept")
    pathlib.Path("out/kept/moved.txt").rename("out/kept/final.txt")
    home = os.getcwd()
    os.chdir("out")
    with open("kept/final.txt") as f:
        got = [f.read()]
    with open("here.txt", "w") as f:
        f.write("h")
    os.chdir(home)
    got.append(sorted(os.listdir("out")))
    return got

def refused(victim):
    out = []
    os.makedirs("a/b", exist_ok=True)
    open("f", "w").close()
    for act in (lambda: os.rename("f", os.path.join(os.path.dirname(victim), "planted")),
                lambda: os.rename(victim, "stolen"),
                lambda: os.replace("f", victim),
                lambda: os.chdir(os.path.dirname(victim)),
                lambda: os.chdir("a/.."),
                lambda: os.chdir(os.open("/", os.O_RDONLY)),
                lambda: open("a/../g", "w"),
                lambda: os.rename("a/b/../../f", "g")):
        try:
            act()
            out.append("done")
        except OSError:
            out.append("refused")
    return out
"""


def test_a_sample_renames_and_changes_folder_within_its_own_folder_at_off(trainer_files):
    """Natural code writing a temporary file and ``os.replace``-ing it into place, ``shutil.move``,
    renaming a folder and ``os.chdir`` into a folder of its own failed with EPERM at ``off`` only
    (the small filter refused every rename and chdir). Now they work inside the sample's folder,
    while a rename or chdir out of it, or by a path with ``..`` (the race ``race_dotdot`` shows),
    is refused by the audit hook and ``fchdir`` by the filter."""
    victim = trainer_files / "victim"
    result = _box().run(RENAMES, parse_tests(
        "assert natural() == ['v1', ['here.txt', 'kept']]\n"
        f"assert refused({str(victim)!r}) == ['refused'] * 8\n"))
    assert result.status == "ok" and result.passed == [True, True], result
    assert victim.read_text() == "kept" and sorted(p.name for p in trainer_files.iterdir()) == ["victim"]
    assert "renames and chdir only within the sample's folder" in _box().report["seccomp"], _box().report


FLOCKS = r"""
import fcntl, os

def flocks(theirs):
    out = []
    for path in (theirs, "mine"):
        fd = os.open(path, os.O_RDONLY | os.O_CREAT if path == "mine" else os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out.append("locked")
        except OSError:
            out.append("refused")
    return out
"""


def test_a_sample_at_off_takes_no_flock_of_a_file_outside_its_folder(trainer_files):
    """Opening for reading passes the audit hook, and ``flock`` needs no more: a ``user = "none"``
    sample (root's files) took the flock of the uid pool's lock files (``/run/polyrl-sandbox-uids``),
    and the trainer skipped every uid it held while it ran. Now ``fcntl.flock`` of a file outside
    the sample's folder is refused; of its own files it works."""
    result = _box().run(FLOCKS, parse_tests(f"assert flocks({str(trainer_files / 'victim')!r}) == ['refused', 'locked']\n"))
    assert result.status == "ok" and result.passed == [True], result


UNAUDITED = r"""
import os

def unaudited(folder, name):
    out = []
    def tried(act):
        try:
            act()
            out.append("done")
        except Exception:
            out.append("refused")
    def database():
        import sqlite3
        sqlite3.connect(":memory:").execute("vacuum into ?", (os.path.join(folder, "vacuumed.db"),))
    def history():
        import readline
        readline.add_history("* * * * * root planted")
        readline.write_history_file(os.path.join(folder, "history"))
    def shared_memory():
        import _posixshmem
        os.close(_posixshmem.shm_open("/" + name, os.O_CREAT | os.O_RDWR, 0o600))
    def semaphore():
        import _multiprocessing
        _multiprocessing.SemLock(1, 1, 1, "/" + name + "-sem", False)
    for act in (database, history, shared_memory, semaphore):
        tried(act)
    return out
"""


def test_a_sample_at_off_writes_no_file_through_modules_the_hook_never_hears_of(trainer_files):
    """C modules writing files by path raise no audit event the hook judges: at ``off`` a sample
    wrote a SQLite database outside its folder (``VACUUM INTO``; ``connect`` and ``ATTACH`` alike),
    a file of lines of its choosing (``readline.write_history_file``: a cron line, a ``.pth``), and
    files in the host's /dev/shm (``_posixshmem.shm_open``, ``_multiprocessing.SemLock``: memory
    no rlimit counts that outlives the sample). Now those modules are not importable there."""
    name = f"polyrl-test-{os.getpid()}"
    result = _box().run(UNAUDITED, parse_tests(
        f"assert unaudited({str(trainer_files)!r}, {name!r}) == ['refused'] * 4\n"))
    leaked = [p for p in (f"/dev/shm/{name}", f"/dev/shm/sem.{name}-sem") if os.path.exists(p)]
    for path in leaked:
        os.unlink(path)
    assert sorted(p.name for p in trainer_files.iterdir()) == ["victim"] and not leaked, leaked
    assert result.status == "ok" and result.passed == [True], result
