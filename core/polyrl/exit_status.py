"""Whether this process is leaving on an error: what a backend's exit handler asks before it
waits for its peers.

Why: under torchrun a rank that leaves meets its peers at an exit barrier (gloo tears down cleanly
only so). A rank leaving on an error (its checkpoint write failed before the backend's collective
save) waited there for peers that sat in that save's collective and never came: a minute before it
exited and torchrun stopped them. Marked failed, it leaves at once; its peers' collective then
fails on the closed connection and they stop too.
"""

from __future__ import annotations

_failed = False


def mark_failed() -> None:
    """Record that this process leaves on an error (a command's non-zero exit, an uncaught exception)."""
    global _failed
    _failed = True


def failed() -> bool:
    """Whether ``mark_failed`` was called in this process."""
    return _failed
