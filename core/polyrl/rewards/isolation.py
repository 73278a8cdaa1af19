"""Where a function reward's calls run: ``[[rewards]] isolation = "thread" | "process" | "auto"``.

``"thread"``: a reward thread (``polyrl.rewards.guard``); any callable works, but a call past its
time limit cannot be killed and is abandoned. ``"process"``: each call in a forked child
(``polyrl.rewards.forked``), killed at the time limit; POSIX only. ``"auto"`` (the default):
``"process"`` for math-verify rewards (TRL's, and a user's function that calls math-verify, as
the usual open-r1 accuracy reward does) and for a function whose code uses ``signal`` (a
``signal.alarm`` time limit: ``sets_signals``), ``"thread"`` for everything else.

Why math-verify rewards: math-verify bounds its sympy work with ``signal.alarm``, which Python
allows only on the main thread, so TRL's ``accuracy_reward`` turns the limits off on a reward
thread and a completion like ``\\boxed{2^{2^{64}}}`` runs until ``timeout_s``. In a forked child the
reward runs on the child's main thread and the limits work as under TRL.

Why a user's function too: math-verify's ``parse`` with its default time limit raises on any
thread but the main one, so the open-r1 reward that TRL runs unchanged stopped polyrl's run at its
first step. Only a function whose code reaches math-verify (directly, or through a function of
its own module it calls) is moved: its other rewards (a format
reward in the same file, a counter) stay on the thread.

Why not every function: fork copies the process. A reward that holds torch/GPU state (a reward
model), runs OpenMP code (OpenMP after fork can deadlock) or keeps state across calls (a counter,
a cache filled as it goes: the child's changes are lost with it) must stay on the thread.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import ModuleType
from collections.abc import Callable
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
        return "process" if FORK_AVAILABLE and (is_math_verify_reward(fn) or sets_signals(fn)) else "thread"
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
    ``think_format_reward`` or the length penalties), or its code calls math-verify
    (``_calls_math_verify``)."""
    module = _module_name(fn)
    if _in_package(module, "math_verify"):
        return True
    if _in_package(module, "trl.rewards"):
        return _uses_math_verify(sys.modules.get(module))
    return _calls_math_verify(fn)


def _python_function(fn: Any) -> Any:
    """The Python function whose code ``fn`` runs (a partial's, a method's, a callable object's
    ``__call__``), or None (a builtin)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.ismethod(fn):
        fn = fn.__func__
    if not inspect.isfunction(fn):
        fn = inspect.getattr_static(type(fn), "__call__", None)  # a callable object's method
    return fn if inspect.isfunction(fn) else None


def _names(code: Any) -> set[str]:
    """The global, attribute and imported names ``code`` and the code nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _names(const)
    return names


def _from_math_verify(value: Any) -> bool:
    name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
    return isinstance(name, str) and _in_package(name, "math_verify")


def _cell_values(function: Any) -> list[Any]:
    """The values ``function`` closes over (an empty cell left out)."""
    values = []
    for cell in function.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # not filled yet
            continue
    return values


def _calls_math_verify(fn: Any) -> bool:
    """Whether ``fn``'s code names math-verify (its module, ``parse``/``verify`` imported from it,
    an import inside the function, a closure over them), directly or through the functions of its
    own module it names. A function wrapping TRL's ``accuracy_reward`` is not: TRL's turns its
    limits off on a thread instead of failing, so its author decides."""
    return _code_reaches(fn, _from_math_verify,
                         lambda names, _: any(_in_package(name, "math_verify") for name in names))


#: what a time limit made of signals names: Python runs signal handlers on the main thread only
_ALARM_NAMES = frozenset({"alarm", "setitimer", "SIGALRM", "ITIMER_REAL"})


def _from_signal(value: Any) -> bool:
    name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
    return name in ("signal", "_signal")


def sets_signals(fn: Any) -> bool:
    """Whether ``fn``'s code uses the ``signal`` module (a ``signal.alarm`` time limit around a
    completion's code or a sympy call, as reward code often bounds its work), directly or through
    the functions of its own module it names (a ``time_limit`` context manager). Why: TRL calls a
    reward on the main thread, where signals work; on a reward thread ``signal.signal`` raises
    "signal only works in main thread", and the fix the error gave, ``isolation = "process"``,
    has no spelling for a reward passed in Python (``polyrl.trl.GRPOTrainer``)."""
    return _code_reaches(fn, _from_signal, lambda names, scope: "signal" in names and "signal" not in scope
                         and bool(names & _ALARM_NAMES))  # an `import signal` inside the function


def _code_reaches(fn: Any, found: Callable[[Any], bool], names_say: Callable[[set[str], dict[str, Any]], bool]) -> bool:
    """Whether ``fn``'s code, or a function of its own module it names (unwrapped: a
    ``@contextmanager`` helper), names a value ``found`` says yes to (a global or closed-over one),
    or has names ``names_say`` says yes to (given the function's globals)."""
    start = _python_function(fn)
    pending, seen = ([start] if start is not None else []), set()
    while pending:
        function = pending.pop()
        if function in seen:
            continue
        seen.add(function)
        names = _names(function.__code__)
        if names_say(names, function.__globals__):
            return True
        for value in [function.__globals__.get(name) for name in names] + _cell_values(function):
            if found(value):
                return True
            if inspect.isfunction(value):
                value = inspect.unwrap(value)
            if inspect.isfunction(value) and value.__globals__ is function.__globals__:
                pending.append(value)  # a helper of the same module
    return False


def kept_state(fn: Any) -> str | None:
    """What ``fn``'s own code changes that outlives a call, or None: a global it assigns
    (``global n; n += 1``), a module-level container it fills (``SEEN.append``, ``STATE["n"] += 1``,
    ``CACHE[key] = v``), an enclosing function's variable (``nonlocal``, a closure's
    ``cache[key] = v``), an attribute of its object (a callable object's or method's
    ``self.calls += 1``, ``self.cache[key] = v``), a mutable default argument, a random generator
    it draws from; in the functions of its own module it calls too (``polyrl.rewards.kept_state``).
    Why: in a forked child (``isolation = "process"``, the default for math-verify rewards) such a
    change is lost with the child after every call, so a curriculum or a counter silently never moves."""
    from polyrl.rewards import kept_state as scan

    try:
        return scan.kept_state(fn, _python_function)
    except Exception:  # noqa: BLE001 - a warning's reading of the code must never stop the reward from loading
        return None
