"""matplotlib's warnings while ``polyrl report`` draws, said as polyrl's own log lines.

Why: matplotlib speaks two ways, Python warnings (a glyph the font lacks, printed once per call
that hit it, each with a source line of polyrl's) and its ``logging`` loggers (an unwritable
config folder, a slow font cache, a legend with nothing to show), which with no handler
configured reach the terminal as bare text. Both came out raw between polyrl's structlog lines.
Here they are collected while drawing and logged once each through structlog, at their own
level: nothing is dropped, and an exception (a ``-W error`` filter included) still propagates.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator

from polyrl.logs import get_logger

#: matplotlib's text for a character its font cannot draw (drawn as a box)
_GLYPH = re.compile(r"Glyph (\d+) \(.*\) missing from font\(s\) (.+?)\.?$")


class _Collect(logging.Handler):
    """Keeps matplotlib's log records (its loggers' own level decides which arrive)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _said(caught: list[warnings.WarningMessage], records: list[logging.LogRecord]) -> list[tuple[str, str, dict]]:
    """(level, event, fields) for each distinct thing matplotlib said, in order; missing glyphs as
    one line per font naming the characters (a folder name in Chinese was a warning per
    character, twice)."""
    out: list[tuple[str, str, dict]] = []
    glyphs: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for record in records:
        event = record.getMessage()
        if ("log", event) not in seen:
            seen.add(("log", event))
            out.append((record.levelname.lower(), f"matplotlib: {event}", {"logger": record.name}))
    for caught_one in caught:
        text = str(caught_one.message)
        glyph = _GLYPH.match(text)
        if glyph:
            chars = glyphs.setdefault(glyph.group(2), [])
            if chr(int(glyph.group(1))) not in chars:
                chars.append(chr(int(glyph.group(1))))
            continue
        category = caught_one.category.__name__
        if (category, text) not in seen:
            seen.add((category, text))
            out.append(("warning", f"matplotlib: {text}", {"category": category}))
    for font, chars in glyphs.items():
        out.append(("warning", f"the chart's font ({font}) has no glyph for {''.join(chars)!r}: "
                               "drawn as boxes", {"fix": "install a font that has them (e.g. Noto Sans CJK) "
                                                         "or rename the run folder or metric"}))
    return out


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """While the body draws, matplotlib's warnings and log records are held, then logged through
    structlog once each (also when the body raises). The warning filters are left as they are."""
    logger = logging.getLogger("matplotlib")
    handler = _Collect()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # else the root's last-resort handler prints it raw too
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as held:
            caught = held
            yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        log = get_logger("polyrl.report")
        for level, event, fields in _said(caught, handler.records):
            getattr(log, level if level in ("debug", "info", "warning", "error", "critical") else "warning")(
                event, **fields)
