"""Logging setup: structlog key=value lines on stderr, JSON lines when asked.

Secrets never reach the log: values of keys that look like credentials are redacted.

Under ``--log-json`` (``POLYRL_LOG_JSON=1``) every stderr line is one JSON object, so a log shipper
parses all of them: text that other code writes to ``sys.stderr`` (a library's banner or progress
bar, ``print(..., file=sys.stderr)``, the ``error:`` line) is wrapped as ``{"event": text, ...}``,
a Python warning is one event, and an uncaught exception one event with its traceback.
"""

from __future__ import annotations

import atexit
import datetime
import json as jsonlib
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable, MutableMapping
from types import TracebackType
from typing import Any, TextIO

import structlog

from polyrl.errors import ConfigError
from polyrl.redact import is_secret_key

_SECRET_VALUE = re.compile(r"(Bearer\s+)[^\s\"']+|\b(sk-)[A-Za-z0-9_\-]{6,}", re.IGNORECASE)


def _scrub(key: str, value: Any) -> Any:
    """Redact credentials by key name (any depth) and by shape (``Bearer ...``, ``sk-...``)."""
    if isinstance(value, str):
        if is_secret_key(key):
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
    """Writes to whatever ``sys.stderr`` is now (pytest and notebooks swap it); under JSON lines,
    each event whole, never joined to another writer's unfinished line."""

    def write(self, text: str) -> int:
        stream = sys.stderr
        if isinstance(stream, JsonLinesStderr):
            return stream.write_event(text)
        return stream.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _now() -> str:
    """The timestamp structlog's ``TimeStamper(fmt="iso", utc=True)`` writes."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_line(line: str) -> str | None:
    """``line`` as one JSON object: unchanged when it is one, else wrapped (a terminal shows only
    what follows the last carriage return, as of a progress bar); None for a blank line."""
    if line.startswith("{"):
        try:
            if isinstance(jsonlib.loads(line), dict):
                return line
        except ValueError:
            pass
    text = line.rsplit("\r", 1)[-1].rstrip()
    if not text.strip():
        return None
    level = "error" if text.startswith(("error:", "Traceback")) else "info"
    event = {"event": _scrub("", text), "level": level, "logger": "stderr", "timestamp": _now()}
    return jsonlib.dumps(event)  # ASCII: a lone surrogate in a library's text still encodes


class JsonLinesStderr:
    """``sys.stderr`` under ``--log-json``: each line written becomes one JSON object
    (``_json_line``) on the stream it replaced. A line is held until its newline (a progress bar
    redraws one with carriage returns); ``isatty`` is False, so libraries draw no live displays."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._partial = ""
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            out = [j for j in map(_json_line, lines) if j is not None]
            if out:
                self.target.write("".join(j + "\n" for j in out))
        return len(text)

    def write_event(self, text: str) -> int:
        """Write polyrl's own rendered event (JSON lines, newline included) as it is, after any
        unfinished line of another writer, which becomes a line of its own."""
        with self._lock:
            if self._partial:
                self.write("\n")
            self.target.write(text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.target.flush()

    def finish(self) -> None:
        """Write a last line that never got its newline."""
        with self._lock:
            if self._partial:
                self.write("\n")
            self.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, errors, fileno...: the stream's own
        return getattr(self.target, name)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    if file is not None and file is not sys.stderr:  # a warning shown to a file of the caller's own
        _ORIGINAL_HOOKS[0](message, category, filename, lineno, file, line)
        return
    structlog.get_logger("py.warnings").warning(str(message), category=category.__name__,
                                                source=f"{filename}:{lineno}")


def _uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    structlog.get_logger("polyrl").critical(
        f"uncaught {kind.__name__}: {value}", exception="".join(traceback.format_exception(kind, value, tb)))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    assert args.exc_value is not None  # as the default hook, which formats it
    structlog.get_logger("polyrl").critical(
        f"uncaught {args.exc_type.__name__} in thread {getattr(args.thread, 'name', '?')}: {args.exc_value}",
        exception="".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))


_ORIGINAL_HOOKS = (warnings.showwarning, sys.excepthook, threading.excepthook)
_exit_registered = False


def _json_stderr(on: bool) -> None:
    """Wrap (or unwrap) ``sys.stderr`` and the warning / uncaught-exception hooks for JSON lines;
    unwrapping puts back only what is still polyrl's (a test harness may have swapped it since)."""
    global _exit_registered
    if on:
        if not isinstance(sys.stderr, JsonLinesStderr):
            sys.stderr = JsonLinesStderr(sys.stderr)
        if not _exit_registered:  # a last line without its newline is written too
            atexit.register(_json_stderr, False)
            _exit_registered = True
        warnings.showwarning = _show_warning
        sys.excepthook, threading.excepthook = _uncaught, _uncaught_in_thread
        return
    stream = sys.stderr
    if isinstance(stream, JsonLinesStderr):
        stream.finish()
        sys.stderr = stream.target
    if warnings.showwarning is _show_warning:
        warnings.showwarning = _ORIGINAL_HOOKS[0]
    if sys.excepthook is _uncaught:
        sys.excepthook = _ORIGINAL_HOOKS[1]
    if threading.excepthook is _uncaught_in_thread:
        threading.excepthook = _ORIGINAL_HOOKS[2]


def json_mode() -> bool:
    """Whether stderr is JSON lines now (progress bars stay off then)."""
    return isinstance(sys.stderr, JsonLinesStderr)


#: POLYRL_LOG_JSON's spellings, any case
_JSON_ON, _JSON_OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _env_json() -> bool:
    """``POLYRL_LOG_JSON`` as a switch; anything else is a ConfigError: ``False`` or ``no`` turned
    JSON lines on (only "", "0" and "false" were off) and ``maybe`` too, without a word."""
    text = os.environ.get("POLYRL_LOG_JSON", "").strip()
    if text.lower() in _JSON_ON + _JSON_OFF:
        return text.lower() in _JSON_ON
    raise ConfigError(f"must be a switch, got {text!r}", field="POLYRL_LOG_JSON",
                      fix="set POLYRL_LOG_JSON=1 for JSON log lines, 0 (or unset it) for plain ones")


def _env_level(level: str | None) -> str:
    """The level's name: ``level``, else ``POLYRL_LOG_LEVEL``; a name logging lacks is a ConfigError
    (``LOUD`` or ``warn ing`` logged at info without a word)."""
    name = (level or os.environ.get("POLYRL_LOG_LEVEL", "") or "info").strip().lower()
    if name not in (*LOG_LEVELS, "warn"):  # logging's alias of warning
        raise ConfigError(f"is not a log level, got {name!r}", field="POLYRL_LOG_LEVEL",
                          fix=f"use one of {', '.join(LOG_LEVELS)}, or unset it (info)")
    return name.upper()


def configure(json: bool | None = None, level: str | None = None) -> None:
    """Configure structlog once per process; ``POLYRL_LOG_JSON=1`` / ``POLYRL_LOG_LEVEL`` too."""
    if json is None:
        json = _env_json()
    level_name = _env_level(level)
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False, sort_keys=False)
    )
    _json_stderr(json)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        # one write per event (the print logger writes the newline apart)
        logger_factory=structlog.WriteLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "polyrl") -> Any:
    """A structlog logger; configures polyrl's defaults first if nobody configured structlog.

    Why: without it, library use (the Python API, tests) would get structlog's bare defaults,
    which print to stdout and skip the secret redaction.
    """
    if not structlog.is_configured():
        try:
            configure()
        except ConfigError as exc:  # at import: the CLI's own configure() makes it the command's error line
            configure(json=False, level="info")
            structlog.get_logger("polyrl").warning(f"{exc.field} ignored: {exc.message}", fix=exc.fix)
    return structlog.get_logger(name)


def readable(value: float, digits: int = 4) -> float:
    """``value`` shortened for a log line without losing small numbers: 4 decimals for magnitudes
    of 1 and more, else ``digits`` significant digits (``round(1e-5, 4)`` would print ``lr=0.0``)."""
    if value != value or value in (float("inf"), float("-inf")) or value == 0 or abs(value) >= 1:
        return round(value, digits) if value == value and abs(value) != float("inf") else value
    return float(f"{value:.{digits}g}")


def log_from_signal_handler(method: Any, event: str, **fields: Any) -> None:
    """Log from a signal handler without deadlocking: the handler runs on the main thread between
    two bytecodes, possibly while that thread holds the stderr writer's lock (structlog's is not
    re-entrant), so the line is written by a short thread once the main thread lets go."""
    threading.Thread(target=method, args=(event,), kwargs=fields, daemon=True).start()
