"""Where polyrl keeps what it builds or measures (converted models, MAX graphs, bench speeds, the
judge's answers), and one error naming ``POLYRL_CACHE`` when that place cannot be written.

Why the error: ``POLYRL_CACHE`` pointing at a file, inside a file or at a read-only folder ended
the first command that wrote there (``tiny-llama``, ``polyrl bench``, a model conversion) with an
``OSError`` traceback that named neither the variable nor the fix.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from polyrl.errors import ConfigError

CACHE_ENV = "POLYRL_CACHE"


def default_cache_dir() -> Path:
    """``$POLYRL_CACHE`` or ``~/.cache/polyrl``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "polyrl"


def cache_error(path: Path, exc: OSError) -> ConfigError:
    """The error for a cache folder ``path`` that could not be made or written (``exc``)."""
    a_file = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if a_file is not None:  # "File exists" / "Not a directory" named the symptom, not the cause
        reason = f"{str(a_file)!r} is a file, not a folder"
    else:
        reason = f"{exc.strerror or exc}: {exc.filename if isinstance(exc.filename, str) else path}"
    if os.environ.get(CACHE_ENV):
        where = f"{CACHE_ENV} ({os.environ[CACHE_ENV]!r}) cannot hold polyrl's cache folder {str(path)!r}"
        fix = f"point {CACHE_ENV} at a writable folder (not a file), e.g. {CACHE_ENV}=~/.cache/polyrl"
    else:
        where = f"{CACHE_ENV} is unset and the default cache folder {str(path)!r} cannot be written"
        fix = f"set {CACHE_ENV} to a writable folder, e.g. {CACHE_ENV}=/tmp/polyrl-cache"
    return ConfigError(f"{where}: {reason}", field=CACHE_ENV, fix=fix)


def make_writable_folder(path: Path) -> None:
    """Create ``path`` and write a file there (made and removed); OSError where it cannot hold one."""
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
        pass


def cache_subdir(*parts: str) -> Path:
    """``default_cache_dir() / parts``, created and checked writable (a file made and removed):
    any failure is one ConfigError naming ``POLYRL_CACHE`` and the fix."""
    path = default_cache_dir().joinpath(*parts)
    try:
        make_writable_folder(path)
    except OSError as exc:
        raise cache_error(path, exc) from None
    return path
