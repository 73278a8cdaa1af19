"""Rich progress for long work (training steps), silent when not wanted or when stderr is JSON
lines (``--log-json``: a bar is no event a log shipper can read, and the step lines say the same)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from polyrl import plugin_state
from polyrl.logs import json_mode


@contextmanager
def step_progress(total: int, start: int = 0, enabled: bool = True) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Yield ``advance(metrics)``; shows the time left (from the steps of this process), reward and
    seconds per step beside the bar. Why the time left: a long run's elapsed time alone did not
    say when it ends."""
    if not bar_shown(enabled):
        yield lambda _metrics: None
        return
    console = Console(stderr=True)  # whatever sys.stderr is when it writes: one set back after plugin code too
    columns = (
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
    )
    before = (sys.stdout, sys.stderr)
    progress = Progress(*columns, console=console, transient=False)
    with _streams_told(before):
        progress.start()  # in a terminal: sys.stdout/stderr wrapped by rich while the bar is drawn
    proxies = (sys.stdout, sys.stderr)
    try:
        task = progress.add_task("train", total=total, completed=start, info="")

        def advance(metrics: dict[str, Any]) -> None:
            # 3 significant digits: a step of a few milliseconds read "s/step=0.0"
            info = f"reward={metrics.get('reward_mean', float('nan')):.3f} s/step={metrics.get('time/step', 0):.3g}"
            progress.update(task, advance=1, info=info)

        yield advance
    finally:
        with _streams_told(proxies):
            progress.stop()  # the streams as they were before it


@contextmanager
def _streams_told(old: tuple[Any, Any]) -> Iterator[None]:
    """Tell ``plugin_state`` the streams this display replaced ``old`` by: a plugin call running
    across its start or end sets back the streams the trainer uses then, not those it retired."""
    try:
        yield
    finally:
        plugin_state.streams_replaced(old, (sys.stdout, sys.stderr))


def bar_shown(enabled: bool) -> bool:
    """Whether ``step_progress(enabled=enabled)`` draws a bar: never under ``--log-json``, nor where
    stderr is no terminal rich draws in (a log file, a pipe: ``nohup``, a batch job's log). Why:
    rich draws the bar there once, when the run ends, and the step lines, taking the bar for
    shown, said neither the run's steps nor the time left while it ran. Rich's own switches
    (``TTY_COMPATIBLE=1``, ``FORCE_COLOR``) still draw it anywhere."""
    if not enabled or json_mode():
        return False
    console = Console(stderr=True)
    return console.is_jupyter or (console.is_terminal and not console.is_dumb_terminal)


@attrs.define
class StepClock:
    """How far the run is, for step lines printed without the bar (``--no-progress``,
    ``--log-json``): ``of`` the run's steps and ``eta_s`` the seconds left at this process's pace
    so far (evaluations and checkpoints included, as the wait is). Why: such a log said which step
    it was at, never of how many nor when the run would end."""

    total: int
    start: int  # steps already taken when this process began (a resume's)
    began: float = attrs.field(factory=time.monotonic)
    now: Callable[[], float] = time.monotonic

    def fields(self, done: int) -> dict[str, int]:
        """``of`` and (after this process's first step) ``eta_s`` once ``done`` steps are taken."""
        out = {"of": self.total}
        taken = done - self.start
        if taken > 0:
            out["eta_s"] = round((self.now() - self.began) / taken * max(self.total - done, 0))
        return out
