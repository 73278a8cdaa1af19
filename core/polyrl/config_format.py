"""The fix beside TOML's parse error of a config file: where to correct it, or that it is JSON or YAML.

Why: ``run.toml`` holding ``{"model": ...}`` or ``model:\\n  path: x`` (written from another
tool's example) was "Invalid statement (at line 1, column 1)" alone, which reads as a typo to
hunt for. The hint is given only when the text is clearly JSON or YAML: a TOML file with one
mistyped line (``lr: 1e-5`` among ``key = value`` lines) gets the line and column TOML reports,
and that line's text, as its fix (``typo_fix``): it was the one config error without a ``Fix:``.
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


#: where tomllib says the error is, at the end of its message: ``(at line 3, column 5)`` or ``(at end of document)``
_WHERE = re.compile(r"\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")
#: how tomllib begins its error for a key set twice or a table declared twice (a table copied in whole)
_TWICE = ("Cannot overwrite a value", "Cannot declare")
#: the longest piece of the faulty line the fix quotes
_QUOTED = 60


def typo_fix(message: str, text: str, name: str) -> str:
    """The fix for a TOML typo in the file ``name`` (``text``) that tomllib refused with
    ``message``: the line and column it reports, with that line's text, or, at the end of the
    document, what is left open there. Why: the parse error alone had no ``Fix:``."""
    found = _WHERE.search(message)
    if found is None:  # no place named (another TOML reader's wording)
        return f"correct the TOML syntax {message!r} names in {name}"
    if found.group(1) is None:  # at the end: something opened and never closed
        return (f"close what is still open at the end of {name} (a string's quote, an array's ], an inline "
                "table's }, a table header's ]); TOML writes settings as key = value lines under [table] lines")
    line, column = int(found.group(1)), int(found.group(2))
    lines = text.split("\n")  # tomllib counts "\n" alone (splitlines would count \r, \f, U+2028 too)
    shown = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    if len(shown) > _QUOTED:
        shown = shown[:_QUOTED] + "..."
    quoted = f" ({shown!r})" if shown else ""
    if message.startswith(_TWICE):  # the line is well formed: "key = value lines" sent the user to its syntax
        return (f"line {line} of {name}{quoted} sets again a key or table set above it, and TOML takes each once: "
                "remove one of the two, or move its settings under the table's first [table] line")
    return (f"correct line {line}, column {column} of {name}{quoted}: TOML writes settings as key = value "
            "lines under [table] lines, strings in quotes")


def hint(text: str, message: str, name: str) -> str:
    """The fix for a config TOML refused with ``message``: when ``text`` is clearly JSON or YAML,
    that polyrl configs are TOML; else where to correct the typo (``typo_fix``)."""
    kind = looks_like(text)
    return f"this looks like {kind}; {_FIX}" if kind else typo_fix(message, text, name)
