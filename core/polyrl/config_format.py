"""A config file that is JSON or YAML, not TOML: a hint beside TOML's parse error.

Why: ``run.toml`` holding ``{"model": ...}`` or ``model:\\n  path: x`` (written from another
tool's example) was "Invalid statement (at line 1, column 1)" alone, which reads as a typo to
hunt for. The hint is given only when the text is clearly JSON or YAML: a TOML file with one
mistyped line (``lr: 1e-5`` among ``key = value`` lines) keeps TOML's error as it is.
"""

from __future__ import annotations

import json
import re

#: a TOML table header (``[model]``, ``[[rewards]]``) or assignment (``lr = 1e-5``): a file with one is TOML
_TOML_LINE = re.compile(r"""^\s*(\[\[?\s*[\w."' -]+\s*\]\]?\s*(#.*)?|[\w."'-]+\s*=.*)$""")
#: a YAML mapping key at the start of a line: ``model:`` or ``path: x`` (TOML writes ``=``)
_YAML_KEY = re.compile(r"^[\w.-]+:(\s|$)")

_FIX = ("polyrl configs are TOML: write each table as a [model] line and its settings as key = value lines "
        "(`polyrl config-reference` lists every key)")


def _meaningful(text: str) -> list[str]:
    """The lines holding something: not blank, not a ``#`` comment (TOML's and YAML's alike)."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def looks_like(text: str) -> str | None:
    """``"JSON"`` or ``"YAML"`` when ``text`` (which TOML refused) clearly is one, else None."""
    start = text.lstrip()
    if start.startswith("{"):  # a TOML file never starts with an inline table
        return "JSON"
    if start.startswith("["):
        try:
            json.loads(text)
        except ValueError:
            return None  # a TOML table header, perhaps mistyped
        return "JSON"
    lines = _meaningful(text)
    if not lines or any(_TOML_LINE.match(line) for line in lines):
        return None
    first = lines[0]
    return "YAML" if first.rstrip() == "---" or _YAML_KEY.match(first) else None


def hint(text: str) -> str | None:
    """The fix for a config TOML refused that is clearly JSON or YAML; None for a TOML typo."""
    kind = looks_like(text)
    return f"this looks like {kind}; {_FIX}" if kind else None
