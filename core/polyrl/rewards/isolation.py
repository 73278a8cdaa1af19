"""Where a function reward's calls run: ``[[rewards]] isolation = "thread" | "process" | "auto"``.

``"thread"``: a reward thread (``polyrl.rewards.guard``); any callable works, but a call past its
time limit cannot be killed and is abandoned. ``"process"``: each call in a forked child
(``polyrl.rewards.forked``), killed at the time limit; POSIX only. ``"auto"`` (the default):
``"process"`` for math-verify rewards, ``"thread"`` for everything else.

Why math-verify rewards: math-verify bounds its sympy work with ``signal.alarm``, which Python
allows only on the main thread, so TRL's ``accuracy_reward`` turns the limits off on a reward
thread and a completion like ``\\boxed{2^{2^{64}}}`` runs until ``timeout_s``. In a forked child the
reward runs on the child's main thread and the limits work as under TRL.

Why not every function: fork copies the process. A reward that holds torch/GPU state (a reward
model), runs OpenMP code (OpenMP after fork can deadlock) or keeps state across calls (a counter,
a cache filled as it goes: the child's changes are lost with it) must stay on the thread.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import ModuleType
from typing import Any

from polyrl.errors import ConfigError
from polyrl.rewards.forked import FORK_AVAILABLE

ISOLATIONS = ("auto", "thread", "process")
FIELD = "rewards.isolation"


def check(value: Any, field: str = FIELD) -> str:
    """``value`` if it is a choice this platform can honour, else one ConfigError naming ``field``."""
    if not isinstance(value, str) or value not in ISOLATIONS:
        raise ConfigError(f"unknown isolation {value!r}", field=field,
                          fix='use "auto" (the default), "thread" or "process"')
    if value == "process" and not FORK_AVAILABLE:
        raise ConfigError(f"isolation \"process\" needs os.fork, which {sys.platform} lacks", field=field,
                          fix='use "thread" or "auto" (a thread here)')
    return value


def resolve(fn: Any, value: str, field: str = FIELD) -> str:
    """``"thread"`` or ``"process"``: how ``fn``'s calls run under the configured ``value``."""
    check(value, field)
    if value == "auto":
        return "process" if FORK_AVAILABLE and is_math_verify_reward(fn) else "thread"
    return value


def _module_name(fn: Any) -> str:
    """The module that defines ``fn`` (a partial's function, a callable object's class)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        name = getattr(fn, "__module__", None)
    else:
        name = type(fn).__module__
    return name if isinstance(name, str) else ""


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _uses_math_verify(module: ModuleType | None) -> bool:
    """Whether ``module`` holds math-verify's module or anything defined in it (``parse``, ``verify``)."""
    for value in vars(module or ModuleType("none")).values():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and _in_package(name, "math_verify"):
            return True
    return False


def is_math_verify_reward(fn: Any) -> bool:
    """``fn`` is defined in math-verify, or in a ``trl.rewards`` module that uses math-verify
    (``accuracy_reward``, ``reasoning_accuracy_reward``, the cosine-scaled reward; not
    ``think_format_reward`` or the length penalties). A user function wrapping one is not: its
    author decides."""
    module = _module_name(fn)
    if _in_package(module, "math_verify"):
        return True
    return _in_package(module, "trl.rewards") and _uses_math_verify(sys.modules.get(module))
