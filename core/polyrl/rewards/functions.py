"""Plain Python functions as reward plugins (TRL-style reward functions).

A reward function has TRL's signature::

    def my_reward(prompts, completions, **kwargs) -> list[float | None]: ...
    async def my_reward(prompts, completions, **kwargs) -> list[float | None]: ...

``prompts`` has one entry per completion (a string or a chat), ``completions`` are the completion
*texts*, and the keyword arguments are the dataset columns as lists aligned with the completions
(e.g. ``answer=[...]``; a row without a column gives None), plus ``completion_ids`` (token id
lists) and ``step``. As in TRL, the columns "prompt"/"completion" are not repeated as keywords.
A function that does not take ``**kwargs`` receives only the keywords it names. None skips a sample.

Async functions run on an event loop; ``RewardComputer`` runs all async rewards of a step
concurrently (``await_reward``), so I/O-bound judges overlap.

Load one from a spec string: ``"package.module:function"`` or ``"path/to/file.py:function"``.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.types import Completion, Prompt, RewardContext, RewardSpec

#: Columns TRL does not pass again as keyword arguments (they are the positional arguments).
RESERVED = frozenset({"prompt", "prompts", "completion", "completions", "completion_ids", "step"})


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion, also from inside a running event loop (in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="polyrl-async-reward")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class FunctionReward:
    """A reward plugin wrapping one callable; register it with ``get_plugin_manager(extra=...)``."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, origin: str | None = None) -> None:
        if not callable(fn):
            raise ConfigError(f"{fn!r} is not callable", field="rewards.function",
                              fix="point at a function taking (prompts, completions, **kwargs)")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or "reward"
        self.origin = origin or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', self.name)}"
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)
        )
        #: pluggy registers the plugin under this name (unique per reward name).
        self.__name__ = f"polyrl-function-reward:{self.name}"
        self._accepts_kwargs, self._params = self._signature()

    def _signature(self) -> tuple[bool, frozenset[str]]:
        try:
            sig = inspect.signature(self.fn)
        except (TypeError, ValueError):  # builtins without a signature: pass everything
            return True, frozenset()
        kinds = {p.kind for p in sig.parameters.values()}
        return inspect.Parameter.VAR_KEYWORD in kinds, frozenset(sig.parameters)

    def __repr__(self) -> str:
        return f"FunctionReward({self.name!r} from {self.origin})"

    # --- calling ---------------------------------------------------------------------------

    def _arguments(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion | str], context: RewardContext
    ) -> tuple[list[Any], list[str], dict[str, Any]]:
        rows = context.rows
        columns: list[str] = []
        for row in rows:
            columns += [c for c in row if c not in columns and c not in RESERVED]
        kwargs: dict[str, Any] = {c: [row.get(c) for row in rows] for c in columns}
        if context.completion_ids is not None:
            ids = context.completion_ids
        else:
            ids = [getattr(c, "completion_ids", []) for c in completions]
        kwargs["completion_ids"] = [[int(t) for t in x] for x in ids]
        kwargs["step"] = context.step
        if not self._accepts_kwargs:
            kwargs = {k: v for k, v in kwargs.items() if k in self._params}
        texts = [c if isinstance(c, str) else c.text for c in completions]
        return list(prompts), texts, kwargs

    async def await_reward(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion | str], context: RewardContext
    ) -> dict[str, Any] | None:
        """The ``reward`` hook as a coroutine (async functions are awaited, sync ones called)."""
        if self.name not in context.wanted:
            return None
        p, c, kw = self._arguments(prompts, completions, context)
        result = self.fn(p, c, **kw)
        if inspect.isawaitable(result):
            result = await result
        return {self.name: result}

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
        p, c, kw = self._arguments(prompts, completions, context)
        return {self.name: self.fn(p, c, **kw)}


def function_reward_plugin(fn: Callable[..., Any], name: str | None = None) -> FunctionReward:
    """Wrap ``fn`` as a reward plugin named ``name`` (default: the function's ``__name__``)."""
    return FunctionReward(fn, name=name)


def _import_file(path: Path, spec: str) -> Any:
    if not path.is_file():
        raise ConfigError(f"reward file {str(path)!r} not found (from {spec!r})", field="rewards.function",
                          fix="give an existing .py file, relative to the working directory or absolute")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    module_name = f"polyrl_user_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"cannot import {str(path)!r} as Python", field="rewards.function",
                          fix="point at a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(f"importing {str(path)!r} raised {type(exc).__name__}: {exc}",
                          field="rewards.function", fix="fix the error in that file") from exc
    return module


def _import_module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"module {name!r} not found (from {spec!r}): {exc}", field="rewards.function",
                          fix="install the package, add its folder to PYTHONPATH, or use "
                          "\"path/to/file.py:function\"") from exc
    except Exception as exc:
        raise ConfigError(f"importing {name!r} raised {type(exc).__name__}: {exc}", field="rewards.function",
                          fix="fix the error in that module") from exc


def load_function_reward(spec: str, name: str | None = None) -> FunctionReward:
    """Load ``"package.module:function"`` or ``"path/to/file.py:function"`` as a reward plugin."""
    if not isinstance(spec, str) or ":" not in spec or spec.endswith(":"):
        raise ConfigError(f"reward function spec {spec!r} has no ':function' part", field="rewards.function",
                          fix='write "package.module:function" or "path/to/file.py:function"')
    target, attr = spec.rsplit(":", 1)
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _import_file(Path(target), spec) if is_file else _import_module(target, spec)
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise ConfigError(f"{target!r} has no attribute {attr!r}", field="rewards.function",
                              fix=f"use one of: {', '.join(available) or 'no public callables found'}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ConfigError(f"{spec!r} is a {type(fn).__name__}, not a function", field="rewards.function",
                          fix="point at a function taking (prompts, completions, **kwargs)")
    return FunctionReward(fn, name=name or attr.rsplit(".", 1)[-1], origin=spec)
