"""The sample uid pool (``polyrl.sandbox.uids``) on its own: which uid it hands out, and which it
skips (another process's claim, a live process's uid, a user's or group's number).

Apart from ``test_sandbox_starvation.py``, whose hostile samples load the host: these tests run
no sample, and each claims in a lock folder and uid range of its own, so two test runs on one
host (or a trainer beside them) neither see nor take each other's uids.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.faults


def _private_first() -> int:
    """A pool start apart from the real pool's (and, by pid, from another test run's): the real
    pool's uids are what other runs' and trainers' samples run as. A test with a lock folder of its
    own claims apart from them, but their live processes still show in /proc, where a uid of the
    real range is skipped as theirs; and a clean lock file of the real pool is claimed without a
    look at /proc, so another run could give its sample a uid this test runs a process as."""
    return 2_100_000_000 + os.getpid() % 470_000 * 100  # under 2**31 and systemd's unused range's end


def _another_process_holds_first(locks, first: int) -> None:
    """A second process (on lock folder ``locks``) takes the pool's first uid ``first``: this
    one's next uid is the one after; once that process is dead, ``first`` is this one's again."""
    import subprocess
    import sys

    from polyrl.sandbox import uids

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from polyrl.sandbox import uids; "
         f"uids.LOCKS = Path({str(locks)!r}); uids.FIRST = {first}; print(uids.acquire(), flush=True); "
         "time.sleep(30)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        theirs = int(holder.stdout.readline())
        ours = uids.acquire()
        uids.release(ours)
        assert theirs == first and ours == first + 1
    finally:
        holder.kill()
        holder.wait()
    again = uids.acquire()
    uids.release(again)
    assert again == first


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to run as another uid")
def test_the_pool_skips_a_uid_a_process_runs_as_or_a_user_has(tmp_path, monkeypatch):
    """The pool gave a sample uid ``FIRST`` though a process still ran with it (what a previous
    sample left running, or a real user whose uid falls in the range, as sssd's default id-mapping
    range 200000-2000200000 does): their RLIMIT_NPROC was shared, each could signal and ptrace the
    other, and at the ``off`` level the sample's end-of-sample kill reached that process. A uid
    the user database names is skipped too."""
    from polyrl.sandbox import uids

    first = _private_first()  # the real pool's first uid may be another run's sample's (see there)
    monkeypatch.setattr(uids, "LOCKS", tmp_path)
    monkeypatch.setattr(uids, "FIRST", first)
    other = subprocess.Popen(["setpriv", f"--reuid={first}", f"--regid={first}", "--clear-groups",
                              "sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60  # a bound for a broken setpriv, not a measure
        while first not in uids.live_uids():
            assert other.poll() is None and time.monotonic() < deadline, "no process ever ran as the uid"
            time.sleep(0.01)
        got = uids.acquire()
        uids.release(got)
        assert got == first + 1  # skipped the uid the process runs as, took the next
    finally:
        other.kill()
        other.wait()
    nobody = 65534
    try:
        import pwd

        pwd.getpwuid(nobody)
    except KeyError:
        pytest.skip("no user with uid 65534 here")
    monkeypatch.setattr(uids, "FIRST", nobody)
    got = uids.acquire()
    uids.release(got)
    assert got != nobody


def test_a_uid_another_process_holds_is_skipped(tmp_path, monkeypatch):
    """Two trainers on one host (torchrun ranks, two runs) each count from ``uids.FIRST``: the
    pool's lock files keep a uid one process's sample holds away from the other's."""

    from polyrl.sandbox import uids

    held = uids.busy()
    first = _private_first()
    monkeypatch.setattr(uids, "LOCKS", tmp_path)
    monkeypatch.setattr(uids, "FIRST", first)
    _another_process_holds_first(tmp_path, first)  # its lock gone with it
    assert uids.busy() == held


def test_without_a_writable_lock_folder_another_processs_uid_is_still_skipped(tmp_path, monkeypatch):
    """Where the lock folder cannot be made (a read-only or unshared /run, a non-root trainer's
    test of the pool) the claims fell back to this process alone: two trainers on the host gave
    concurrent samples the same uid. An abstract unix socket bound to a name per uid is the claim
    there (the kernel frees the name when its process dies); nothing is written anywhere."""
    import sys

    from polyrl.sandbox import uids

    if not sys.platform.startswith("linux"):
        pytest.skip("abstract unix sockets are Linux's")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    locks = blocker / "locks"  # under a regular file: never made
    first = _private_first()
    held = uids.busy()
    monkeypatch.setattr(uids, "LOCKS", locks)
    monkeypatch.setattr(uids, "FIRST", first)
    _another_process_holds_first(locks, first)  # its name free again
    assert uids.busy() == held and not locks.exists()


def test_a_uid_given_back_clean_is_claimed_without_a_look_at_proc(tmp_path, monkeypatch):
    """A scan of /proc costs ~50 us per process on the host, per sample: it is done only for a uid
    whose lock file does not say its last sample left nothing (a new file, or a holder killed
    mid-sample, whose file says "in use")."""
    from polyrl.sandbox import uids

    monkeypatch.setattr(uids, "LOCKS", tmp_path)
    monkeypatch.setattr(uids, "FIRST", _private_first())
    scans: list[int] = []
    real = uids.live_uids
    monkeypatch.setattr(uids, "live_uids", lambda: scans.append(1) or real())
    first = uids.acquire()
    assert (tmp_path / str(first)).read_bytes() == b"" and len(scans) == 1  # a new file: looked
    uids.release(first)
    assert (tmp_path / str(first)).read_bytes() == uids.CLEAN
    again = uids.acquire()
    assert again == first and len(scans) == 1  # given back clean: not looked again
    uids.release(again)


def test_the_pool_skips_a_number_the_group_database_names(tmp_path, monkeypatch):
    """A pooled sample's gid is its uid's number: a number a real group of the host has (made the
    pool's first here, with the user database told to know no one) is never given out, or the
    sample would get that group's file permissions."""
    import grp

    from polyrl.sandbox import uids

    running = uids.live_uids()
    group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid > 0 and g.gr_gid not in running), None)
    if group is None:
        pytest.skip("no group here whose number no process runs as")

    def no_user(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(uids, "LOCKS", tmp_path)
    monkeypatch.setattr(uids.pwd, "getpwuid", no_user)
    monkeypatch.setattr(uids, "FIRST", group)
    uids._named.cache_clear()
    try:
        got = uids.acquire()
        uids.release(got)
    finally:
        uids._named.cache_clear()
    assert got != group


def test_a_link_or_fifo_in_place_of_a_lock_file_is_skipped_and_nothing_truncated(tmp_path, monkeypatch):
    """A link planted in the lock folder under a uid's name was followed (``O_CREAT | O_RDWR``) and
    its target truncated to mark the uid in use (as root: any file of the host); a FIFO there made
    ``acquire`` raise (``pread``: ESPIPE). Now a lock file that is not a regular file of this user's
    makes its uid taken: the pool gives the next one and touches nothing."""
    from polyrl.sandbox import uids

    first = _private_first()
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("kept")
    (locks / str(first)).symlink_to(victim)
    os.mkfifo(locks / str(first + 1))
    monkeypatch.setattr(uids, "LOCKS", locks)
    monkeypatch.setattr(uids, "FIRST", first)
    got = uids.acquire()
    uids.release(got)
    assert got == first + 2 and victim.read_text() == "kept"
