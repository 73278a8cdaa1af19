"""How the ranks of a ``polyrl launch`` hand their ``error:`` line to the launcher, which prints one.

Why: ranks that stop together (a config, reward or agreement error every rank raises alike) each
printed the same line, then torchrun its ChildFailedError traceback. Under ``polyrl launch``
(``ENV`` set) a rank writes its line into the launcher's folder instead, one small JSON file per
rank, and the launcher prints the first failing rank's line once (``first_error``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

#: The folder the launcher reads; set by ``polyrl launch`` for the ranks it starts.
ENV = "POLYRL_LAUNCH_ERRORS"


def report(text: str) -> bool:
    """Leave this rank's error line for the launcher; False when there is none (or the folder
    cannot take it): the caller prints the line itself, so it is never lost."""
    folder = os.environ.get(ENV)
    if not folder:
        return False
    rank = os.environ.get("RANK", "0")
    record = {"rank": int(rank) if rank.isdigit() else 0, "time": time.time(), "message": text}
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
    if all(r["message"] == first["message"] for r in records):
        return str(first["message"])
    others = ", ".join(str(r["rank"]) for r in records[1:])
    return f"rank {first['rank']} failed first: {first['message']} (rank(s) {others} stopped after it)"
