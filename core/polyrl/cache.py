"""Where polyrl keeps what it builds or measures (converted models, MAX graphs, bench speeds)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$POLYRL_CACHE`` or ``~/.cache/polyrl``."""
    env = os.environ.get("POLYRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "polyrl"
