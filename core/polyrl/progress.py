"""Rich progress for long work (training steps), silent when not wanted or when stderr is JSON
lines (``--log-json``: a bar is no event a log shipper can read, and the step lines say the same)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from polyrl import plugin_state
from polyrl.logs import get_logger, json_mode

log = get_logger("polyrl.trainer")
#: Seconds a step runs, without the bar, before a log line says it still runs, and between such lines.
HEARTBEAT_S = 60.0
#: The span of recent steps the bar's time left is estimated from. Why not rich's default 30 s: it
#: needs two steps ending within it, so with steps of over 30 s (an RL step on a real model) the
#: time left read ``-:--:--`` for the whole run.
RATE_WINDOW_S = 24 * 3600.0


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
    progress = Progress(*columns, console=console, transient=False, speed_estimate_period=RATE_WINDOW_S)
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


@attrs.define
class StepHeartbeat:
    """Says, where no bar is drawn, that a long step is still running: ``step still running step=3
    of=50 running_s=120`` each ``every`` seconds of one step. Why: a log without the bar (a batch
    job's, ``nohup``'s) got a line only as each step ended, so a step of many minutes (a big
    model's sampling, a slow judge) read as a hung run, with nothing to tell it from one.
    ``start`` runs ``beat`` on a thread of its own; ``begin``/``end`` bound each step."""

    total: int
    every: float = HEARTBEAT_S
    now: Callable[[], float] = time.monotonic
    _step: int | None = None
    _began: float = 0.0
    _due: float = 0.0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _stopped: threading.Event = attrs.field(factory=threading.Event)
    _thread: threading.Thread | None = None

    def begin(self, step: int) -> None:
        """Step ``step`` starts now."""
        with self._lock:
            self._step, self._began = step, self.now()
            self._due = self._began + self.every

    def end(self) -> None:
        """The running step's line is written: nothing more to say of it."""
        with self._lock:
            self._step = None

    def beat(self) -> bool:
        """Say the running step still runs if ``every`` seconds passed since it began or was last
        said; whether it was said."""
        with self._lock:
            now = self.now()
            if self._step is None or now < self._due:
                return False
            step, running = self._step, now - self._began
            self._due = now + self.every
        log.info("step still running", step=step, of=self.total, running_s=round(running))
        return True

    def start(self) -> None:
        """Beat on a daemon thread (checked a few times per ``every``) until ``stop``."""
        def run() -> None:
            while not self._stopped.wait(min(self.every / 4, 5.0)):
                self.beat()

        self._thread = threading.Thread(target=run, name="polyrl-step-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextmanager
def step_heartbeat(total: int, enabled: bool) -> Iterator[StepHeartbeat | None]:
    """A started ``StepHeartbeat`` of a run of ``total`` steps, stopped on leaving; None when not
    ``enabled`` (a bar is drawn, whose clock ticks; not the logging rank)."""
    if not enabled:
        yield None
        return
    heartbeat = StepHeartbeat(total, every=HEARTBEAT_S)
    heartbeat.start()
    try:
        yield heartbeat
    finally:
        heartbeat.stop()
