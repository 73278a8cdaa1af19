"""Logging setup: structlog key=value lines on stderr, JSON lines when asked.

Secrets never reach the log: values of keys that look like credentials are redacted.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)", re.IGNORECASE)


_SECRET_VALUE = re.compile(r"(Bearer\s+)[^\s\"']+|\b(sk-)[A-Za-z0-9_\-]{6,}", re.IGNORECASE)


def _scrub(key: str, value: Any) -> Any:
    """Redact credentials by key name (any depth) and by shape (``Bearer ...``, ``sk-...``)."""
    if isinstance(value, str):
        if _SECRET_KEY.search(key):
            return "***"
        return _SECRET_VALUE.sub(lambda m: (m.group(1) or m.group(2)) + "***", value)
    if isinstance(value, dict):
        return {k: _scrub(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(key, v) for v in value)
    return value


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        event[key] = _scrub("" if key == "event" else key, event[key])
    return event


class _Stderr:
    """Writes to whatever ``sys.stderr`` is now (pytest and notebooks swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(json: bool | None = None, level: str | None = None) -> None:
    """Configure structlog once per process; ``POLYRL_LOG_JSON=1`` / ``POLYRL_LOG_LEVEL`` too."""
    if json is None:
        json = os.environ.get("POLYRL_LOG_JSON", "") not in ("", "0", "false")
    level_name = (level or os.environ.get("POLYRL_LOG_LEVEL", "info")).upper()
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "polyrl") -> Any:
    """A structlog logger; configures polyrl's defaults first if nobody configured structlog.

    Why: without it, library use (the Python API, tests) would get structlog's bare defaults,
    which print to stdout and skip the secret redaction.
    """
    if not structlog.is_configured():
        configure()
    return structlog.get_logger(name)


def readable(value: float, digits: int = 4) -> float:
    """``value`` shortened for a log line without losing small numbers: 4 decimals for magnitudes
    of 1 and more, else ``digits`` significant digits (``round(1e-5, 4)`` would print ``lr=0.0``)."""
    if value != value or value in (float("inf"), float("-inf")) or value == 0 or abs(value) >= 1:
        return round(value, digits) if value == value and abs(value) != float("inf") else value
    return float(f"{value:.{digits}g}")
