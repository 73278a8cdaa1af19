"""Plain Python functions as reward plugins: TRL reward functions run unchanged.

A reward function is called exactly as TRL 1.16's ``GRPOTrainer`` calls it, by keyword::

    def my_reward(completions, **kwargs) -> list[float | None]: ...
    def my_reward(prompts, completions, completion_ids, ground_truth, trainer_state, **kwargs): ...
    async def my_reward(completions, **kwargs) -> list[float | None]: ...

``prompts`` has one entry per completion (a string, or a chat: a list of messages);
``completions`` are the texts for text prompts and ``[{"role": "assistant", "content": text}]``
for chat prompts; ``completion_ids`` the sampled token ids; every dataset column except
"prompt"/"completion"/"completion_ids" comes as a list aligned with the completions (a row without
the column gives None); ``trainer_state`` is a ``polyrl.rewards.trl_compat.TrainerState``
(``global_step``, ``max_steps``, ``epoch``...); ``log_metric(name, value)`` logs a scalar as
``reward/<function>/<name>`` (the mean of the call's values); ``log_extra(column, values)`` adds
one value per completion to the sampled records of ``completions.jsonl`` (under ``extra``), as
TRL adds a column to its completions table; in a run with TRL's ``environment_factory``
(``polyrl.trl``) ``environments`` is each completion's environment instance, live, as TRL passes
it (``FunctionReward.environments``). A function that does not take ``**kwargs`` receives
only the arguments it names (TRL would raise TypeError instead). None skips a sample, as in TRL, and
so does NaN (TRL's reading: it turns None into NaN and sums with ``nansum``; one warning per function).
The return value may be a list, tuple, numpy array, 1-d torch tensor (or one of shape (n, 1), a
reward model's logits), generator or other ordered iterable (``dict.values()``; drawn to one item past the completions)
of numbers, bools or None (what TRL accepts; a set, a dict, text or one number is refused, ``trl_compat.not_scores``; one-element
tensors, ``Fraction``, ``Decimal`` and sympy numbers are numbers, as ``torch.tensor`` reads them);
bools mixed with numbers (``[1, True, 0.5]``) read as TRL casts them, True = 1.0, with one warning
naming the sample. Each call gets its own copies of the prompts and columns, so a
function that edits them in place changes nothing outside its call. A callable object is named
after its class, a ``functools.partial`` after the function it wraps (TRL's names).

Backwards compatibility: polyrl used to call ``fn(prompts, completions, **columns)``
positionally. A function whose first two parameters are named ``prompts`` and ``completions``
receives the same values by keyword; any other parameter that no argument fills (e.g. ``def f(p,
c)``, or the old ``step``) is refused when the run is configured, naming the parameter, because
guessing which argument a positional name means could bind the wrong values silently.

Async functions run on an event loop; ``RewardComputer`` runs all async rewards of a step
concurrently (``await_reward``), so I/O-bound judges overlap.

``isolation`` (``[[rewards]] isolation``, ``polyrl.rewards.isolation``) says where the calls run:
on a reward thread, or each call in a forked child that is killed at the time limit (the default
for math-verify rewards such as TRL's ``accuracy_reward``, whose time limits need a main thread).
A reward that holds torch/GPU state or changes its own state across calls must stay on the thread.

Load one from a spec string: ``"package.module:function"`` or ``"path/to/file.py:function"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import io
import itertools
import reprlib
import sys
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Sized
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.errors import ConfigError, RewardError
from polyrl.hookspecs import hookimpl
from polyrl.logs import get_logger
from polyrl.path_loops import LOOP_FIX, missing_problem
from polyrl.rewards import guard
from polyrl.rewards.isolation import kept_state
from polyrl.rewards.isolation import resolve as resolve_isolation
from polyrl.rewards.trl_compat import (NOT_PASSED_COLUMNS, TRL_ARGUMENTS, TrainerState, accepted_arguments, as_number,
                                      as_score_list, callable_name, check_binding,
                                      NotScores, not_scores, is_async_callable, is_conversational,
                                      private_copy, trl_completion)
from polyrl.types import Completion, Prompt, RewardContext, RewardScores, RewardSpec

log = get_logger("polyrl.rewards")


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion, also from inside a running event loop (in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}
    inherit = guard.is_reward_thread()

    def target() -> None:
        if inherit:  # os._exit in the coroutine must still be caught
            guard.register_reward_thread()
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc
        finally:
            guard.unregister_reward_thread()

    thread = threading.Thread(target=target, name="polyrl-async-reward", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


_main_loop: asyncio.AbstractEventLoop | None = None
_main_loop_lock = threading.Lock()


@contextlib.contextmanager
def main_thread_loop() -> Any:
    """Give a sync reward's thread a current event loop, one kept for the whole process, so that
    ``asyncio.get_event_loop()`` answers as on TRL's main thread, where TRL calls sync rewards.
    Why: a judge that batches its requests with ``asyncio.get_event_loop().run_until_complete(...)``
    trains under TRL (Python < 3.14 makes the main thread a loop on first use and keeps it) and
    failed here with "There is no current event loop in thread 'polyrl-reward-...'". A loop still
    running (an abandoned call's) is not shared: that call gets a new one, kept from then on."""
    global _main_loop
    if threading.current_thread() is threading.main_thread() or _has_loop():
        yield
        return
    with _main_loop_lock:
        if _main_loop is None or _main_loop.is_closed() or _main_loop.is_running():
            _main_loop = asyncio.new_event_loop()
        loop = _main_loop
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)


def _has_loop() -> bool:
    """Whether this (non-main) thread has a current event loop, running or set: it keeps it."""
    try:
        asyncio.get_event_loop()
    except RuntimeError:
        return False
    return True


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60


def _short(value: Any) -> str:
    """``value``'s repr for an error line, at most 60 characters: built cut (``reprlib``: a 1 GB
    string or an endless list is not spelled out first), and a repr that raises is named, not raised."""
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # noqa: BLE001 - the reward's object: its repr is not this line's problem
        return f"<{type(value).__name__} object whose repr raised {type(exc).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _as_float(value: Any) -> float | None:
    """A number as a float; None for an int past float's range (TRL's float32 tensor of it fails too)."""
    try:
        return float(value)
    except OverflowError:
        return None


class _CallLog:
    """What one call reported through ``log_metric``/``log_extra``; ``n``: the call's completions
    (a column holds one value each)."""

    def __init__(self, reward: str, n: int | None = None) -> None:
        self.reward = reward
        self.n = n
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.extra: dict[str, list[Any]] = defaultdict(list)

    def log_metric(self, name: str, value: float) -> None:
        """TRL's scalar metric. Takes what TRL's sum-then-``torch.tensor`` takes: a number, a bool
        or a 0-d tensor/array (``log_metric("x", rewards.mean())``). NaN and inf are taken, as TRL
        takes them (``log_metric("acc", scores.mean())`` over no score is NaN): a step whose calls
        logged a NaN has the metric NaN, which ``log_history`` holds as None and ``metrics.jsonl``
        as null, as TRL's ``log`` writes a metric with no valid value; inf stays inf in
        ``log_history``. Why: a NaN raised RewardError and stopped the run, where TRL's goes on."""
        value = as_number(value)
        number = _as_float(value) if isinstance(value, (int, float, np.integer, np.floating, np.bool_)) else None
        if not isinstance(name, str) or number is None:
            raise RewardError(f"reward {self.reward!r} called log_metric({_short(name)}, {_short(value)}). "
                              "Fix: pass a metric name (str) and a number (a float, int, bool or 0-d tensor/array)")
        self.metrics[name].append(number)

    def log_extra(self, column: str, values: list[Any]) -> None:
        """TRL's extra completions-table column: polyrl adds it to the completions log. ``values``
        is drawn to one past the completions' count at most: more is a RewardError naming the
        column. Why: ``log_extra("x", itertools.count())`` (or ``map`` over one) filled memory until
        the call's time limit, and went on in the abandoned thread until the trainer ran out of
        memory (TRL's ``extend`` hangs the same way). A set (no order: its values could not be
        matched to the completions) and a dict (TRL's ``extend`` takes its keys) are refused."""
        call = f"reward {self.reward!r} called log_extra({_short(column)}, {_short(values)})"
        if not isinstance(column, str) or isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Iterable):
            raise RewardError(f"{call}. Fix: pass a column name (str) and a list with one value per completion")
        if isinstance(values, (AbstractSet, Mapping)):
            what = ("a set has no order, so its values cannot be matched to the completions"
                    if isinstance(values, AbstractSet) else "a dict gives its keys as values")
            raise RewardError(f"{call}: {what}. Fix: pass a list with one value per completion, in the "
                              "completions' order")
        kept = self.extra[column]
        if self.n is None:
            kept.extend(values)
            return
        room = max(self.n - len(kept), 0)
        drawn = list(itertools.islice(values, room + 1))  # one past: enough to tell there are too many
        if len(drawn) > room:
            told = f"{len(kept) + len(values)}" if isinstance(values, Sized) else f"more than {self.n}"
            raise RewardError(f"{call}: {told} values for {self.n} completions (in this call's log_extra calls of "
                              f"{column!r}). Fix: pass one value per completion")
        kept.extend(drawn)

    def means(self) -> dict[str, float]:
        """Each name's ``sum(values) / len(values)``, TRL's arithmetic: inf and -inf in one call give
        NaN, and values whose sum passes float64's largest inf, as TRL's sum gives. Why not
        ``np.mean``: its overflow printed numpy's raw ``RuntimeWarning: overflow encountered in
        reduce`` among the run's log lines."""
        return {name: sum(values) / len(values) for name, values in self.metrics.items()}

    def counts(self) -> dict[str, int]:
        """How many values each of ``means`` averages (what TRL's flush counts per process)."""
        return {name: len(values) for name, values in self.metrics.items()}


#: the functions ``FunctionReward._warn_lost_state`` has named (said once per function)
_warned_state: weakref.WeakSet[Any] = weakref.WeakSet()


class FunctionReward:
    """A reward plugin wrapping one callable; register it with ``get_plugin_manager(extra=...)``."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, origin: str | None = None,
                 isolation: str = "auto") -> None:
        if not callable(fn):
            raise ConfigError(f"{fn!r} is not callable", field="rewards.function",
                              fix="point at a function taking (completions, **kwargs), as for TRL")
        #: "thread" or "process" ("auto" resolved): how ``RewardComputer`` runs each call
        self.isolation = resolve_isolation(fn, isolation)
        self.fn = fn
        self.name = name or callable_name(fn)
        #: the name TRL logs it under (``rewards/<trl_name>/mean``): its label, except for a function
        #: given twice through the Python API, which polyrl labels ``f_2`` and TRL names ``f`` too
        self.trl_name = self.name
        self.origin = origin or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', self.name)}"
        self.is_async = is_async_callable(fn)
        #: pluggy registers the plugin under this name (unique per reward name).
        self.__name__ = f"polyrl-function-reward:{self.name}"
        self._accepted = accepted_arguments(fn)  # None: takes **kwargs
        self._checked: frozenset[str] | None = None
        #: pass ``environments=`` (each completion's ``Completion.environment``), as TRL does in a run
        #: with an ``environment_factory`` (set by ``polyrl.trl``, whose episodes keep them)
        self.environments = False
        #: a chat completion as TRL hands it over when its tokenizer has a ``response_schema``: the
        #: completion's token ids parsed into one assistant message (``thinking``, ``tool_calls``
        #: split out of ``content``; ``trl_responses.response_parser``), for this function called on
        #: its own. In a run the reward computer owns the parse (``RewardComputer.parse_completion``,
        #: set by ``polyrl.trl``) and hands it over as ``Completion.response_message``, read first
        self.parse_completion: Callable[[list[int]], dict[str, Any]] | None = None
        if self.isolation == "process":
            self._warn_lost_state(isolation)

    def __repr__(self) -> str:
        return f"FunctionReward({self.name!r} from {self.origin})"

    def _warn_lost_state(self, configured: str) -> None:
        """Say that a function run in a forked child keeps state its child loses (``kept_state``).
        Why: a counter or curriculum in a math-verify reward (forked by default) never moved, with
        no word, where TRL, calling it on its main thread, keeps every change."""
        state = kept_state(self.fn)
        if state is None:
            return
        try:
            if self.fn in _warned_state:
                return
            _warned_state.add(self.fn)  # once: the Python API wraps a function given twice twice
        except TypeError:  # an object without weak references (or unhashable): said each time
            pass
        why = "as configured" if configured == "process" else "by default, as it uses math-verify or signal"
        log.warning(f"reward {self.name!r} runs each call in a forked child ({why}), and its code {state}: that "
                    "change is made in the child and lost when the call returns, so the next call never sees it",
                    reward=self.name, origin=self.origin,
                    fix='set isolation = "thread" in its [[rewards]] entry to keep the state (math-verify\'s parse '
                        "then needs parsing_timeout=None), or keep the state outside the process (a file)")

    def check_binding(self, columns: Collection[str]) -> None:
        """Refuse (ConfigError) a parameter no argument fills, before any model loads."""
        arguments = (*TRL_ARGUMENTS, "environments") if self.environments else TRL_ARGUMENTS
        check_binding(self.fn, f"{self.name!r} ({self.origin})", columns, arguments)
        self._checked = frozenset(columns)

    # --- calling ---------------------------------------------------------------------------

    def _arguments(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion | str], context: RewardContext,
        call_log: _CallLog,
    ) -> dict[str, Any]:
        rows = context.rows
        # the dataset's every column, even one this batch's rows all lack (TRL's rows have it as None)
        columns: list[str] = [c for c in context.columns or () if c not in NOT_PASSED_COLUMNS]
        for row in rows:
            columns += [c for c in row if c not in columns and c not in NOT_PASSED_COLUMNS]
        if self._checked is None or not set(columns) <= self._checked:
            try:
                self.check_binding(columns)
            except ConfigError as exc:
                raise RewardError(str(exc)) from None
        if context.completion_ids is not None:
            ids: Sequence[Any] = context.completion_ids
        else:
            ids = [getattr(c, "completion_ids", []) for c in completions]
        texts = [c if isinstance(c, str) else c.text for c in completions]
        state = context.trainer_state
        if state is None:
            state = TrainerState(global_step=context.step)
        # in TRL's order (``_calculate_rewards``), which a reward iterating **kwargs sees; every call
        # gets its own copies: see trl_compat.private_copy
        id_lists = [[int(t) for t in x] for x in ids]
        kwargs: dict[str, Any] = {
            "prompts": [private_copy(p) for p in prompts],
            "completions": [self._completion(p, t, c, x) for p, t, c, x in zip(prompts, texts, completions, id_lists)],
            "completion_ids": id_lists,
            **{c: [private_copy(row.get(c)) for row in rows] for c in columns},
            "trainer_state": state, "log_extra": call_log.log_extra, "log_metric": call_log.log_metric,
        }
        if self.environments:  # the live instances, not copies: their state is what a reward reads
            kwargs["environments"] = [getattr(c, "environment", None) for c in completions]
        if self._accepted is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in self._accepted}
        return kwargs

    def _completion(self, prompt: Prompt, text: str, completion: Completion | str, ids: list[int]) -> Any:
        """One completion as TRL hands it over (``trl_completion``); a chat completion parsed from
        its token ids where ``parse_completion`` is set, as TRL's ``parse_response`` parses it."""
        messages = getattr(completion, "messages", None)
        parsed = getattr(completion, "response_message", None)  # RewardComputer's one parse
        if messages is None and parsed is not None and is_conversational(prompt):
            messages = [parsed]
        elif messages is None and self.parse_completion is not None and is_conversational(prompt):
            return [self.parse_completion(list(ids))]
        return trl_completion(prompt, text, messages)

    def _answer(self, result: Any, call_log: _CallLog, n: int) -> dict[str, Any]:
        if not isinstance(result, RewardScores):  # one with its own metrics stays as it is
            result = as_score_list(result, most=n + 1)  # one past n: the count check names it
            if not isinstance(result, list):  # named alike on a thread and from a forked child
                result = NotScores(not_scores(result) or type(result).__name__)
        metrics = call_log.means()
        if (metrics or call_log.extra) and isinstance(result, list):
            result = RewardScores(result, metrics=metrics, extra=dict(call_log.extra),
                                  metric_counts=call_log.counts())
        return {self.name: result}

    async def await_reward(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion | str], context: RewardContext
    ) -> dict[str, Any] | None:
        """The ``reward`` hook as a coroutine (async functions are awaited, sync ones called)."""
        if self.name not in context.wanted:
            return None
        call_log = _CallLog(self.name, len(completions))
        result = self.fn(**self._arguments(prompts, completions, context, call_log))
        if inspect.isawaitable(result):
            result = await result
        return self._answer(result, call_log, len(completions))

    # --- the plugin hooks ------------------------------------------------------------------

    @hookimpl
    def polyrl_register_rewards(self, register: Callable[[RewardSpec], None]) -> None:
        doc = (inspect.getdoc(self.fn) or "").strip().splitlines()
        register(RewardSpec(name=self.name, summary=doc[0] if doc else "Python reward function",
                            distribution=f"function {self.origin}"))

    @hookimpl
    def reward(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion], context: RewardContext
    ) -> dict[str, Any] | None:
        if self.name not in context.wanted:
            return None
        if self.is_async:
            return run_coroutine(self.await_reward(prompts, completions, context))
        call_log = _CallLog(self.name, len(completions))
        with main_thread_loop():
            result = self.fn(**self._arguments(prompts, completions, context, call_log))
        if inspect.isawaitable(result):  # a callable that hides its async (a wrapper without async def)
            result = run_coroutine(_awaited(result))
        return self._answer(result, call_log, len(completions))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def function_reward_plugin(fn: Callable[..., Any], name: str | None = None,
                           isolation: str = "auto") -> FunctionReward:
    """Wrap ``fn`` as a reward plugin named ``name`` (default: the function's ``__name__``)."""
    return FunctionReward(fn, name=name, isolation=isolation)


def _import_file(path: Path, spec: str, field: str = "rewards.function") -> Any:
    if not path.is_file():
        problem = missing_problem(path)
        if problem == "is a folder":  # "not found" sent the user looking for a file that is there
            raise ConfigError(f"{str(path)!r} is a folder, not a Python file (from {spec!r})", field=field,
                              fix=f'name a .py file in it, e.g. "{path.as_posix().rstrip("/")}/rewards.py:{spec.rsplit(":", 1)[-1]}", '
                                  'or a module of a package: "package.module:function" with the folder above it '
                                  "on PYTHONPATH")
        raise ConfigError(f"file {str(path)!r} {problem} (from {spec!r})", field=field,
                          fix=(f"{LOOP_FIX}, or " if "symlink loop" in problem else "")
                          + "give an existing .py file, relative to the working directory or absolute")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    module_name = f"polyrl_user_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"cannot import {str(path)!r} as Python", field=field,
                          fix="point at a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            module_spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[module_name]
        raise _exit_at_import(repr(str(path)), exc, said.getvalue(), field) from None
    except Exception as exc:
        sys.stderr.write(said.getvalue())
        del sys.modules[module_name]
        raise ConfigError(f"importing {str(path)!r} raised {type(exc).__name__}: {exc}",
                          field=field, fix=_import_fix(path, exc)) from exc
    sys.stderr.write(said.getvalue())  # what the import wrote (a warning), shown after all
    return module


def _exit_at_import(what: str, exc: SystemExit, said: str, field: str) -> ConfigError:
    """One error naming the file for a ``sys.exit`` (argparse's ``parse_args``) run when it was
    imported. Why: script code at module level, as in a converted TRL training script, ended polyrl
    with argparse's usage line under polyrl's name, or with nothing at all. What it wrote to stderr
    (argparse's message) is folded into the line."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    message = f" after writing {lines[-1]!r}" if lines else ""
    return ConfigError(f"importing {what} raised SystemExit({exc.code!r}){message}: the file ends the program "
                       "when imported (script code at module level, such as argparse's parse_args)", field=field,
                       fix='move the script code under if __name__ == "__main__": (polyrl imports the file only '
                           "for its functions)")


def _import_fix(path: Path, exc: Exception) -> str:
    """The fix for a file that failed to import. A module beside it is not importable: the file is
    loaded by path, not run as a script (whose folder Python, and so a TRL script, would search)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing:
        top = missing.split(".")[0]
        folder = path.resolve().parent
        if (folder / f"{top}.py").is_file() or (folder / top).is_dir():
            return (f"{top!r} sits beside the file, whose folder is not on Python's path (it is loaded by path): "
                    f"run with PYTHONPATH={folder}, or make the folder a package and write function = "
                    f'"package.module:function"')
    return "fix the error in that file"


def _import_module(name: str, spec: str, field: str = "rewards.function") -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"module {name!r} not found (from {spec!r}): {exc}", field=field,
                          fix="install the package, add its folder to PYTHONPATH, or use "
                          "\"path/to/file.py:function\"") from exc
    except SystemExit as exc:
        raise _exit_at_import(repr(name), exc, "", field) from None
    except Exception as exc:
        raise ConfigError(f"importing {name!r} raised {type(exc).__name__}: {exc}", field=field,
                          fix="fix the error in that module") from exc


def _public_callables(module: Any) -> list[str]:
    """The module's public callables by ``dir`` (which lazy modules such as ``trl.rewards`` answer
    with their exports, where ``vars`` holds only what was imported so far)."""
    names = []
    for name in dir(module):
        try:
            if not name.startswith("_") and callable(getattr(module, name)):
                names.append(name)
        except Exception:  # a lazy export that fails to import is no choice to offer
            continue
    return sorted(names)


def load_function_reward(spec: str, name: str | None = None, isolation: str = "auto") -> FunctionReward:
    """Load ``"package.module:function"`` or ``"path/to/file.py:function"`` as a reward plugin
    (``isolation``: the ``[[rewards]]`` entry's, see ``polyrl.rewards.isolation``)."""
    if not isinstance(spec, str) or ":" not in spec or spec.endswith(":"):
        raise ConfigError(f"reward function spec {spec!r} has no ':function' part", field="rewards.function",
                          fix='write "package.module:function" or "path/to/file.py:function"')
    target, attr = spec.rsplit(":", 1)
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _import_file(Path(target), spec) if is_file else _import_module(target, spec)
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            available = _public_callables(module)
            raise ConfigError(f"{target!r} has no attribute {attr!r}", field="rewards.function",
                              fix=f"use one of: {', '.join(available) or 'no public callables found'}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ConfigError(f"{spec!r} is a {type(fn).__name__}, not a function", field="rewards.function",
                          fix="point at a function taking (completions, **kwargs), as for TRL")
    return FunctionReward(fn, name=name or attr.rsplit(".", 1)[-1], origin=spec, isolation=isolation)
