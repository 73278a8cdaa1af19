"""A plugin distribution's declared requirement on polyrl, checked before its module is imported.

Why: pip refuses to install a plugin whose ``polyrl`` requirement the installed core does not meet,
but an editable or ``--no-deps`` install (an author's checkout, a pinned environment) does not. Such
a plugin then fails on import with a name this core lacks, or loads and is called in a way it does
not expect; one line naming both versions and the fix says what is wrong instead.
"""

from __future__ import annotations

import re
from typing import Any

from polyrl.backend_kit.versions import installed_version

CORE = "polyrl"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unmet_core_requirement(dist: Any) -> str | None:
    """Why ``dist`` (an ``importlib.metadata.Distribution``) cannot run on the installed polyrl, or
    None when it declares no unmet requirement on it (or the versions cannot be compared here)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging comes with pip/datasets; without it, no check
        return None
    if dist is None:
        return None
    try:
        core = Version(installed_version(CORE))
    except InvalidVersion:
        return None
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if _canonical(req.name) != CORE or not req.specifier:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra's requirement
        if req.specifier.contains(core, prereleases=True):
            continue
        name, version = dist.metadata["Name"] or "?", dist.version or "?"
        return (f"{name} {version} requires {CORE}{req.specifier} but {CORE} {core} is installed; it was "
                f"not loaded. Fix: pip install '{CORE}{req.specifier}', or a {name} release made for "
                f"{CORE} {core}")
    return None
