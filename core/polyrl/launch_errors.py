"""How the ranks of a ``polyrl launch`` hand their ``error:`` line to the launcher, which prints one.

Why: ranks that stop together (a config, reward or agreement error every rank raises alike) each
printed the same line, then torchrun its ChildFailedError traceback. Under ``polyrl launch``
(``ENV`` set) a rank writes its line into the launcher's folder instead, one small JSON file per
rank, and the launcher prints the first failing rank's line once (``first_error``).

Each launch has its own folder (``new_folder``: ``polyrl-launch-<launcher pid>-<random>`` in the
temp dir), read only by the launcher that made it. A launcher killed with -9 leaves its folder
behind: a rank then has no one to hand its line to and prints it itself (``report`` writes only
for its live parent launcher, ``OWNER_ENV``), and the next launch deletes the error files such
folders hold (their torchrun.log stays: a failed run's message names it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from polyrl.errors import one_line

#: The folder the launcher reads; set by ``polyrl launch`` for the ranks it starts.
ENV = "POLYRL_LAUNCH_ERRORS"
#: The launcher's pid: a rank hands its line over only while that process is its parent.
OWNER_ENV = "POLYRL_LAUNCH_PID"
PREFIX = "polyrl-launch-"


def new_folder() -> Path:
    """A fresh folder for this launch, named by its pid; first the error files of launches whose
    launcher is gone are deleted, so no stale line is ever left to read."""
    root = Path(tempfile.gettempdir())
    for old in root.glob(f"{PREFIX}*-*"):
        pid = old.name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)) and _mine(old):
            try:
                for stale in [*old.glob("rank-*.json"), *old.glob("rank-*.tmp")]:
                    stale.unlink(missing_ok=True)
                if not any(old.iterdir()):
                    old.rmdir()
            except OSError:  # another launch cleaning it too, or unreadable: never a reason not to start
                continue
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive, and not ours to judge
        return True
    return True


def _mine(folder: Path) -> bool:
    try:
        return folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
    except OSError:
        return False


def report(text: str, full: str | None = None) -> bool:
    """Leave this rank's error line for the launcher; False when there is none (or the folder
    cannot take it, or the launcher that made it is no longer this rank's parent: killed, or the
    variables leaked into another process's environment): the caller prints the line itself, so
    it is never lost. ``full``: the message before it was made one line (``errors.one_line``),
    which the launcher keeps in torchrun's log (``full_text``)."""
    folder, owner = os.environ.get(ENV), os.environ.get(OWNER_ENV, "")
    if not folder or not owner.isdigit() or int(owner) != os.getppid():
        return False
    rank = os.environ.get("RANK", "0")
    record: dict[str, object] = {"rank": int(rank) if rank.isdigit() else 0, "time": time.time(), "message": text}
    if full is not None and full != text:
        record["full"] = full
    target = Path(folder) / f"rank-{rank}.json"
    partial = target.with_suffix(".tmp")
    try:
        partial.write_text(json.dumps(record))
        os.replace(partial, target)  # the launcher never reads half a line
    except OSError:
        return False
    return True


def _records(folder: Path) -> list[dict]:
    found = []
    for path in folder.glob("rank-*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("message"), str):
            found.append(record)
    return sorted(found, key=lambda r: (float(r.get("time", 0)), int(r.get("rank", 0))))


def first_error(folder: str | os.PathLike[str]) -> str | None:
    """The first failing rank's line: as is when every rank that wrote one wrote the same,
    else naming that rank. None when no rank left one (a crash with a traceback, a kill)."""
    records = _records(Path(folder))
    if not records:
        return None
    first = records[0]
    message = one_line(first["message"])  # a rank of another polyrl version may have left newlines
    if all(r["message"] == first["message"] for r in records):
        return message
    others = ", ".join(str(r["rank"]) for r in records[1:])
    return f"rank {first['rank']} failed first: {message} (rank(s) {others} stopped after it)"


def full_text(folder: str | os.PathLike[str]) -> str | None:
    """The first failing rank's message as raised, when making it one line changed it (a library's
    multi-line text inside it); None otherwise."""
    records = _records(Path(folder))
    full = records[0].get("full") if records else None
    return full if isinstance(full, str) else None
