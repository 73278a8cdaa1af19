"""A plugin's discovery calls (its import, its register hooks, its probes) under a time limit.

Why: they run before anything else in every command. A probe asking a hung driver, or a module
that waits on the network at import, made ``polyrl backends`` (and ``polyrl train``) wait forever
without a word, while rewards, trackers and tools all run under limits. Each call runs on a
daemon thread; past the limit the command goes on and the plugin is reported as unusable or not
loaded, naming what it did not finish. The thread is abandoned (Python cannot stop it), which is
why the limit is generous: a slow first import of a large library is not a hang.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

from polyrl.errors import ConfigError

#: Seconds one discovery call may take; ``POLYRL_PLUGIN_TIMEOUT_S`` overrides it.
DEFAULT_LIMIT_S = 120.0
LIMIT_ENV = "POLYRL_PLUGIN_TIMEOUT_S"


class PluginCallTimedOut(Exception):
    """A plugin's import, register hook or probe did not return within the limit."""


class PluginCallRaised(Exception):
    """A plugin's call raised what is no ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, its
    own ``BaseException`` subclass). It ran on a daemon thread, so it is the plugin's own doing,
    never the user's Ctrl-C (that reaches the waiting thread): raised again as itself, a register
    hook's or probe's ``sys.exit(2)`` ended ``polyrl environments`` with no word, and a subclass
    ended it with a traceback. ``original`` is what the plugin raised."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def shown(exc: BaseException) -> BaseException:
    """What a plugin raised, as its failure is named (``PluginCallRaised`` unwrapped)."""
    return exc.original if isinstance(exc, PluginCallRaised) else exc


def limit_s() -> float:
    """The limit in seconds: the environment's, else the default. A value that is not a finite
    number > 0 is a ConfigError naming the variable: ``abc``, ``-1`` or ``nan`` was replaced by
    the default without a word."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"must be a number of seconds > 0, got {text!r}", field=LIMIT_ENV,
                          fix=f"e.g. {LIMIT_ENV}=300, or unset it for the default {DEFAULT_LIMIT_S:g} s")
    return value


def call_limited(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` on a daemon thread: its result, the ``Exception`` it raised, ``PluginCallRaised``
    for any other ``BaseException`` it raised, or PluginCallTimedOut naming ``what`` past the limit."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    limit = limit_s()
    thread = threading.Thread(target=run, name=f"polyrl-plugin-call: {what}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise PluginCallTimedOut(f"{what} did not return within {limit:g} s (a hang? {LIMIT_ENV} sets the limit)")
    if "error" in box:
        error = box["error"]
        if not isinstance(error, Exception):
            raise PluginCallRaised(error) from error
        raise error
    return box.get("value")


def probe_reason(probe: Callable[[], str | None], what: str) -> str | None:
    """What a spec's ``probe`` says (None: usable here); a probe that raises or hangs means
    "unusable", with what it raised or that it did not answer, and so does one answering anything
    but None or a non-empty reason string.

    Why the type check: a probe returning ``42`` broke ``polyrl backends``, ``polyrl doctor`` and
    ``Registry.statuses()`` (every caller treats the reason as text), hiding every other backend."""
    try:
        answer = call_limited(probe, f"the probe of {what}")
    except PluginCallTimedOut as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken probe must not break the listing
        return f"probe raised {type(shown(exc)).__name__}: {exc}"
    if answer is None:
        return None
    if not isinstance(answer, str):
        return f"probe returned {type(answer).__name__}, expected None or a reason string"
    if not answer.strip():  # unusable, but nobody could tell why
        return "probe returned an empty reason string (None means usable)"
    return answer
