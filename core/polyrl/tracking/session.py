"""``RunTracking``: what the trainer calls to show a run in trackers and the completions log.

Why one object: the trainer makes one call per event (checked at build, opened at run start,
samples collected in the step, published after metrics.jsonl, closed at the end), and a tracker
failing mid-run is contained here: reported once, dropped, and training goes on, since losing a
dashboard must never cost a run. "Failing" includes raising any BaseException (``sys.exit``) and
not returning within ``[logging] tracker_timeout_s``: each tracker runs on its own thread
(``polyrl.agents.threads.Worker``: a tracker that blocks must not hang the run, and one that raises
``SystemExit`` or calls ``os._exit`` there must not end it; a real Ctrl-C still reaches the main
thread); one slower than ``SLOW_CALL_S`` but under the limit is said once, since the run waits
for it. A ``close`` past the limit cannot be waited for either: its thread dies with the process,
so the warning says what it had not written is lost. The completions log is written here too, and failing to write it
turns it off with one warning rather than ending the run.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from polyrl import strict_json
from polyrl.agents.threads import CallRaised, CallTimedOut, Worker, describe
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.plugin_calls import probe_reason
from polyrl.redact import MASK, Redactor, is_secret_key
from polyrl.strict_json import valid_text
from polyrl.tracking import completions as clog
from polyrl.tracking.spec import TRACKER_METHODS, ResumedStep, Tracker, TrackerContext, TrackerSpec, TrlRun

log = get_logger("polyrl.tracking")
#: Failed steps whose completions records wait in memory for the next write; older ones are dropped,
#: named in the warning (a file that never takes a write must not grow the trainer's memory).
UNWRITTEN_STEPS = 8
#: A tracker call longer than this (or than a quarter of ``tracker_timeout_s``, if less) is said,
#: once per tracker: the run waits for every call, so a slow one slows each step without a word
#: until it passes the timeout (and is dropped).
SLOW_CALL_S = 5.0


def numeric_metrics(metrics: Mapping[str, Any], said: set[str] | None = None) -> dict[str, float]:
    """The finite numbers of a step's metrics as floats (booleans as 0/1, numpy scalars a backend or
    reward returned included); trackers take nothing else. A non-finite number or None (a skipped
    step's loss) is left out silently, as metrics.jsonl writes it ``null``; any other value left out
    (text, an int past float range) is a warning, once per key when ``said`` keeps the keys told."""
    out = {}
    for key, value in metrics.items():
        if key == "step" or value is None:
            continue
        number = None
        if isinstance(value, (numbers.Real, np.bool_)):
            try:
                number = float(value)
            except OverflowError:  # an int past float range
                pass
        if number is None:
            if said is None or key not in said:
                log.warning("metric left out of the trackers: not a number they take (metrics.jsonl keeps it)",
                            metric=valid_text(str(key)), value=valid_text(repr(value))[:200])
                if said is not None:
                    said.add(key)
        elif math.isfinite(number):
            out[valid_text(str(key))] = number
    return out


#: The tracker methods polyrl may call, required or optional (``spec.Tracker``).
CALLED_METHODS = (*TRACKER_METHODS, "log_eval_completions", "close_failed", "close_stopped", "log_checkpoint")


def unawaited_methods(tracker: Any) -> list[str]:
    """The methods of ``tracker`` polyrl calls that are ``async def`` or generator functions. Why:
    called plainly on the tracker's thread, such a ``log_metrics`` returned an unawaited coroutine,
    and the run logged nothing to that tracker, its only sign a ``RuntimeWarning``."""
    found = []
    for name in CALLED_METHODS:
        method = getattr(tracker, name, None)
        if method is not None and (inspect.iscoroutinefunction(method) or inspect.isgeneratorfunction(method)
                                   or inspect.isasyncgenfunction(method)):
            found.append(name)
    return found


def start_fix(name: str, failed: CallRaised | CallTimedOut) -> str:
    """The fix for a tracker that failed to start: a file it could not write (a read-only folder,
    a full disk, a file where its folder goes) names that path. Why: every start failure advised
    raising ``tracker_timeout_s``, no help for a folder the tracker cannot write."""
    cause = failed.cause if isinstance(failed, CallRaised) else None
    path = getattr(cause, "filename", None) if isinstance(cause, OSError) else None
    if path is not None:
        where = Path(os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path))
        if not os.path.lexists(where):  # a file it could not make: the folder it goes in
            where = where.parent
        return (f"make {valid_text(str(where))!r} a folder the run can write (not a file, not read-only, with free "
                f"space), point the tracker at another store, or remove {name!r} from report_to")
    if isinstance(failed, CallTimedOut):
        return f"raise logging.tracker_timeout_s if it is only slow, or remove {name!r} from report_to"
    return f"fix the cause named, or remove {name!r} from report_to"


def resolve_specs(registry: Any, names: Sequence[str]) -> list[TrackerSpec]:
    """The specs of ``[logging] report_to``; an unknown or uninstalled one is a ConfigError."""
    specs = []
    for name in names:
        spec = registry.trackers_by_name().get(name)
        if spec is None:
            known = ", ".join(sorted(registry.trackers_by_name())) or "none installed"
            fix = "name a tracker `polyrl trackers` lists, or install its plugin"
            if name in ("none", "all"):  # TRL's report_to spellings
                fix = (f"TRL's report_to = {name!r} is polyrl's " + ("report_to = [] (metrics.jsonl only)"
                       if name == "none" else f"list of the trackers wanted, e.g. report_to = [{known.split(', ')[0]!r}]"))
            raise ConfigError(f"unknown tracker {name!r} (known: {known})", field="logging.report_to", fix=fix)
        reason = probe_reason(spec.probe, f"tracker {name!r}")
        if reason is not None:
            raise ConfigError(f"tracker {name!r} cannot run here: {reason}", field="logging.report_to",
                              fix=spec.install_hint or f"remove {name!r} from report_to")
        specs.append(spec)
    return specs


@attrs.define
class RunTracking:
    """Trackers and the completions log of one run (only rank 0 writes)."""

    specs: list[TrackerSpec]
    output_dir: Path
    completions_per_step: int
    run_name: str
    project: str
    config: Mapping[str, Any]
    writer: bool = True  # rank 0
    redact: Redactor = attrs.field(factory=Redactor)
    timeout_s: float = 60.0  # per tracker call ([logging] tracker_timeout_s)
    #: characters of one completions table cell the trackers get ([logging] table_cell_chars; 0: uncut)
    cell_chars: int = clog.TABLE_CELL_CHARS
    #: the tags the trackers show for a line's keys; None: the keys as metrics.jsonl has them.
    #: ``polyrl.trl`` sets transformers' (``polyrl.trl_tags``), so a TRL user's dashboards keep theirs
    rename: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    #: the trackers' step per step of metrics.jsonl: ``polyrl.trl`` sets the updates a step makes,
    #: as transformers' callbacks log at ``global_step`` (optimizer updates)
    step_scale: int = 1
    #: a TRL script's run (``polyrl.trl`` sets it): each tracker opens as ``TrackerContext.trl`` says
    trl: bool = False
    #: a TRL script's run whose logs follow its ``logging_steps`` (``polyrl.trl_log_steps``): ``publish``
    #: sends a step's evaluation only, its training numbers reaching the trackers with each log
    #: (``publish_at``), as transformers' integrations get them from ``on_log``
    window_logs: bool = False
    #: whether the trackers get the sampled completions (TRL's ``log_completions``, which ``polyrl.trl``
    #: sets from a TRL script's config; completions.jsonl keeps them either way). With ``window_logs``
    #: they go with each log (``publish_log``), the latest step's, as TRL's ``log`` sends its latest batch
    log_completions: bool = True
    #: called with the records and the trackers' step with each log's table too: a TRL run's console
    #: table and parquet file (``polyrl.trl_completions``), as TRL prints and writes one with each log
    show_completions: Callable[[Sequence[dict[str, Any]], int], None] | None = None
    #: called with an evaluation's records and the trackers' step (``show_evaluation``): a TRL run's
    #: console table and parquet file, as TRL's ``log`` prints and writes its latest completions
    #: after an evaluation too
    show_eval_completions: Callable[[Sequence[dict[str, Any]], int], None] | None = None
    #: an evaluation's latest records shown (TRL's ``generation_batch_size``: its table's deque holds
    #: that many); None: its first ``completions.EVAL_TABLE_ROWS``
    eval_latest: int | None = None
    #: TRL's ``log_unique_prompts``: a log's table keeps each prompt's first record only (the console's
    #: all of them, as TRL prints them)
    unique_prompts: bool = False
    #: without ``window_logs`` (``polyrl.api.run`` with a ``trl.GRPOConfig``): whether a step's line is
    #: one TRL logs at (``polyrl.trl_log_steps.logs_line``), the latest step's table sent with it only,
    #: as with ``window_logs``; None: each step's table with its step (polyrl's own run)
    table_at: Callable[[Mapping[str, Any]], bool] | None = None
    #: what transformers' integrations read from the TRL script's trainer (``polyrl.trl`` sets it)
    trl_run: TrlRun | None = None
    #: a TRL run's folder of completions parquet files (``polyrl.trl_completions.follow``), rewound
    #: with completions.jsonl, and TRL's ``global_step`` per trackers' step in their names
    parquet_folder: Path | None = None
    parquet_scale: int = 1
    #: who started the run where not ``polyrl train`` (the trainer's ``started_by``), for the
    #: trackers' resume advice (``TrackerContext.started_by``)
    started_by: dict[str, str] | None = None
    #: the folder the run started in (``TrackerContext.start_dir``)
    start_dir: str | None = None
    trackers: dict[str, Tracker] = attrs.field(factory=dict)
    _threads: dict[str, Worker] = attrs.field(factory=dict)
    _pending: list[dict[str, Any]] = attrs.field(factory=list)
    #: the last step's records, for the trackers' next log (``window_logs``: ``publish_log``; ``table_at``)
    _latest: list[dict[str, Any]] = attrs.field(factory=list)
    #: the latest evaluation's records and step, until its log prints them (``hold_evaluation``)
    _evaluated: tuple[list[dict[str, Any]], int] | None = None
    #: records whose write to completions.jsonl failed, by step, written before the next step's
    _unwritten: dict[int, list[dict[str, Any]]] = attrs.field(factory=dict)
    _not_numbers: set[str] = attrs.field(factory=set)  # metric keys already warned about
    #: trackers dropped mid-run: name -> (step, why); said again when the run ends, since one
    #: warning scrolls away in a long run and the dashboard simply stops
    dropped: dict[str, tuple[int, str]] = attrs.field(factory=dict)
    _told_slow: set[str] = attrs.field(factory=set)  # trackers already said to be slow

    @property
    def completions_path(self) -> Path:
        return self.output_dir / clog.FILE_NAME

    def rewind(self, step: int, from_zero: bool = False) -> None:
        """Keep the completions of the ``step`` steps taken, drop later ones (a resume, or a fresh
        start at 0); ``from_zero``: the run's files were numbered from 0 (``clog.rewind``)."""
        if self.writer:
            clog.rewind(self.completions_path, step, from_zero)
        if self.writer and self.parquet_folder is not None:
            at = step * self.step_scale * self.parquet_scale
            try:
                gone = clog.rewind_parquet(self.parquet_folder, at)
            except OSError as exc:  # a copy of the table must never cost the run: said, left there
                gone = []
                log.warning("the completions parquet files of steps after the one this run starts from could not "
                            "all be removed; a script reading the folder may read those steps twice",
                            folder=str(self.parquet_folder), global_step=at, error=f"{type(exc).__name__}: {exc}",
                            fix="delete the files named after a later step by hand")
            if gone:
                log.info(f"removed {len(gone)} completions parquet file(s) of steps after the one this run starts "
                         "from (written before the run was stopped; this run writes those steps again)",
                         folder=str(self.parquet_folder), global_step=at, first=gone[0], last=gone[-1])

    def name_resumed(self, step: int) -> None:
        """Name the tracker runs of a run resumed at ``step`` apart from the one it continues:
        ``<run_name>-resumed-at-step-<step>`` (a TRL run's own name too; one it left to the tracker
        stays so, and the tracker's generated name differs anyway)."""
        self.run_name = f"{self.run_name}-resumed-at-step-{step}"
        if self.trl_run is not None and self.trl_run.run_name:
            self.trl_run = attrs.evolve(self.trl_run, run_name=f"{self.trl_run.run_name}-resumed-at-step-{step}")

    def open(self, steps_taken: int = 0, kept: Mapping[str, Any] | None = None) -> None:
        """Open every tracker, each on its own thread; one that fails to open is an error (the user
        asked for it). ``steps_taken``: the steps the run resumed after (0: a run from scratch),
        told to the trackers as ``TrackerContext.resumed_at``; ``kept``: that step's line of the
        rewound metrics.jsonl, told with its completions as ``TrackerContext.resumed_step``."""
        if not self.writer or self.trackers:
            return
        context = TrackerContext(output_dir=self.output_dir, run_name=self.run_name, project=self.project,
                                 config=self.config, trl=self.trl, trl_run=self.trl_run, started_by=self.started_by,
                                 start_dir=self.start_dir, resumed_at=steps_taken * self.step_scale,
                                 resumed_step=self._resumed_step(steps_taken, kept))
        for spec in self.specs:
            thread = Worker(name=f"polyrl-tracker-{spec.name}")
            try:
                self.trackers[spec.name] = thread.call_blocking(partial(spec.create, context), self.timeout_s)
            except (CallRaised, CallTimedOut) as exc:
                thread.close()
                self.close()
                why = (f"did not start within {self.timeout_s:g} s" if isinstance(exc, CallTimedOut)
                       else f"failed to start: {describe(exc.cause).removesuffix(' (the run goes on)')}")
                raise ConfigError(f"tracker {spec.name!r} {why}", field="logging.report_to",
                                  fix=start_fix(spec.name, exc)) from None
            self._threads[spec.name] = thread
            missing = [m for m in TRACKER_METHODS if not callable(getattr(self.trackers[spec.name], m, None))]
            if missing:  # a factory that forgot its ``return``: found now, not as a traceback at step 0
                made = type(self.trackers[spec.name]).__name__
                self.close()
                raise ConfigError(f"tracker {spec.name!r} ({spec.distribution or 'unknown dist'}): its create returned "
                                  f"a {made} without {', '.join(missing)}", field="logging.report_to",
                                  fix=f"create must return the tracker object (with {', '.join(TRACKER_METHODS)}); "
                                      f"report it to the plugin's authors, or remove {spec.name!r} from report_to")
            unawaited = unawaited_methods(self.trackers[spec.name])
            if unawaited:  # called, they return a coroutine or generator that runs none of their code
                self.close()
                raise ConfigError(f"tracker {spec.name!r} ({spec.distribution or 'unknown dist'}): "
                                  f"{', '.join(unawaited)} {'is' if len(unawaited) == 1 else 'are'} async def or a "
                                  f"generator; polyrl calls tracker methods plainly, so nothing would be logged",
                                  field="logging.report_to",
                                  fix="make them plain def methods (run any async client inside with asyncio.run); "
                                      f"report it to the plugin's authors, or remove {spec.name!r} from report_to")

    def _resumed_step(self, steps_taken: int, kept: Mapping[str, Any] | None) -> ResumedStep | None:
        """What the trackers were given at the resumed step and the resume keeps: ``kept``'s numbers
        and, where each step's table went with its step, that step's records of completions.jsonl.
        None where a step's line is not what the trackers got at it (a TRL script's run, which
        logs at ``logging_steps``) or there is no such line."""
        if steps_taken <= 0 or kept is None or kept.get("step") != steps_taken or self.window_logs \
                or self.table_at is not None:
            return None
        records: list[dict[str, Any]] = []
        if self.log_completions and self.completions_per_step > 0 and self.completions_path.exists():
            try:
                records = [r for _, r in strict_json.read_lines(self.completions_path)
                           if isinstance(r, dict) and r.get("step") == steps_taken]
            except (OSError, ValueError):  # unreadable: the step's numbers still go back
                records = []
        return ResumedStep(metrics=self._numeric(kept), records=clog.capped(records, self.cell_chars),
                           eval_records=clog.capped(self._evaluated_at(steps_taken), self.cell_chars))

    def _evaluated_at(self, step: int) -> list[dict[str, Any]]:
        """The completions table of the evaluation during training at ``step`` (``eval_completions.jsonl``
        rewound to it), which its trackers were given there; [] without one, or where they get no tables.
        Why: TensorBoard's session start at a resumed step hides what was logged at it, the
        evaluation's table too, which was not logged again."""
        from polyrl.evaluation import COMPLETIONS_FILE, shown_records

        path = self.output_dir / COMPLETIONS_FILE
        if not (self.log_completions and self.completions_per_step > 0 and path.exists()):
            return []
        try:
            records = [r for _, r in strict_json.read_lines(path) if isinstance(r, dict)
                       and r.get("phase") == "during" and r.get("after_steps") == step]
        except (OSError, ValueError):  # unreadable: the step's numbers still go back
            return []
        return shown_records(records)[:clog.EVAL_TABLE_ROWS]

    def collect(self, step: int, prompts: Sequence[Any], completions: Sequence[Any], scored: Any,
                advantages: Sequence[float] | Any, seed: int) -> None:
        """Remember this step's sample; ``publish`` writes it once the step is taken."""
        if self.writer and self.completions_per_step > 0:
            try:
                self._pending = clog.sample_records(
                    step, prompts, completions, scored.per_reward, scored.total, advantages,
                    self.completions_per_step, seed, self.redact, extra=getattr(scored, "extra", None))
            except Exception as exc:  # noqa: BLE001 - a log of samples must never cost the run
                self._pending, self.completions_per_step = [], 0
                log.warning("completions could not be sampled; the completions log is off for the rest of "
                            "this run", step=step, error=f"{type(exc).__name__}: {exc}")

    def sample(self, step: int, prompts: Sequence[Any], completions: Sequence[Any], scored: Any,
               indices: Sequence[int]) -> list[dict[str, Any]]:
        """This rank's records of the step's sample (``indices``: its completions among those drawn
        over the whole step, ``step_gather.picked_here``), their advantage not known yet. Every
        rank samples its own, the trainer gathers them, and rank 0 keeps them (``collect_records``)
        so the log shows the whole batch, as one process's does."""
        if self.completions_per_step <= 0 or not indices:
            return []
        try:
            return clog.sample_records(step, prompts, completions, scored.per_reward, scored.total,
                                       [float("nan")] * len(completions), len(indices), 0, self.redact,
                                       extra=getattr(scored, "extra", None), indices=indices)
        except Exception as exc:  # noqa: BLE001 - a log of samples must never cost the run
            self.completions_per_step = 0
            log.warning("completions could not be sampled; the completions log is off for the rest of "
                        "this run", step=step, error=f"{type(exc).__name__}: {exc}")
            return []

    def collect_records(self, records: Sequence[dict[str, Any]]) -> None:
        """The step's sampled records, gathered from every rank; ``publish`` writes them once the
        step is taken (rank 0 only)."""
        if self.writer and self.completions_per_step > 0:
            self._pending = list(records)

    def publish(self, metrics: Mapping[str, Any]) -> None:
        """The step's completions to completions.jsonl, then metrics and completions to trackers,
        at the step number metrics.jsonl and completions.jsonl use (``metrics["step"]``)."""
        if not self.writer:
            return
        step = int(metrics["step"])
        records, self._pending = self._pending, []
        if records:
            self._write_completions(step, records)
        logs = False  # whether the step's line is a TRL log whose table goes now (``table_at``)
        if self.window_logs:  # the training numbers and completions come with the run's logs (``publish_log``)
            metrics = {key: value for key, value in metrics.items() if key.startswith("eval/")}
            self._latest, records = (records if self.log_completions else []), []
        elif not self.log_completions:
            records = []
        elif self.table_at is not None:
            self._latest, records, logs = records, [], self.table_at(metrics)
        numeric, at = self._numeric(metrics), step * self.step_scale
        table = self._table(records, at) if records else []
        for name in list(self.trackers):
            if numeric:
                self._call(name, "log_metrics", numeric, at)
            if table and name in self.trackers:
                self._call(name, "log_completions", table, at)
        if logs:
            self._send_table(step)

    def publish_log(self, metrics: Mapping[str, Any], step: int) -> None:
        """One log of a TRL script's run (``window_logs``): its numbers (``publish_at``), then the
        latest step's sampled completions where ``log_completions`` asks, at the same ``step``. Why:
        TRL's ``GRPOTrainer.log`` sends its completions table with each log (``logging_steps``, the
        end of training, a script's own ``trainer.log``) and only with ``log_completions=True``,
        where polyrl sent them every step whatever the config said. The records stay for the next
        log, as TRL's table of its latest batch does (the summary at the end shows it again)."""
        self.publish_at(metrics, step)
        if self.writer and self.window_logs:
            self._send_table(step)

    def _send_table(self, step: int) -> None:
        """A TRL log's completions table, the latest step's records, at ``step``: to
        ``show_completions`` (TRL's console table and parquet file) and the trackers, each prompt
        once where ``unique_prompts`` asks; nothing before a step has records. A step sampled and
        not yet recorded (``publish``) is the latest: the log at an epoch's end (or the run's last
        step) comes before its line is recorded, as transformers' ``on_log`` precedes the step's
        evaluation, and TRL's table then holds that step's batch. Why: it showed the step before's,
        and none at all at a resumed run's first such log, so a crashed run's table and its resume's
        differed (and so did a reward's draws from ``random`` after it, as TRL's table draws its rows)."""
        latest = self._pending if self._pending and self.log_completions else self._latest
        if not latest:
            return
        if self.show_completions is not None:
            self.show_completions(latest, step * self.step_scale)
        records = clog.first_per_prompt(latest) if self.unique_prompts else latest
        table = self._table(records, step * self.step_scale)
        for name in list(self.trackers):
            self._call(name, "log_completions", table, step * self.step_scale)

    def hold_evaluation(self, records: Sequence[dict[str, Any]], step: int) -> None:
        """An evaluation's ``records`` (on the writing rank) for ``show_evaluation``, at ``step``: a
        TRL script's run (``window_logs``) shows them after the evaluation's log, as TRL's ``log``
        prints, writes and sends its table after an evaluation's entry, the training log before it at
        the same step; any other run at once. Why: polyrl kept them in ``eval_completions.jsonl`` only."""
        if not self.writer or not records or (self.show_eval_completions is None and not self._eval_tables()):
            return
        self._evaluated = (list(records), step)
        if not self.window_logs:
            self.show_evaluation()

    def _eval_tables(self) -> bool:
        """Whether the trackers get an evaluation's table: where they get the training one
        (``log_completions``, ``completions_per_step`` > 0) and one of them takes it."""
        return self.log_completions and self.completions_per_step > 0 and any(
            callable(getattr(t, "log_eval_completions", None)) for t in self.trackers.values())

    def show_evaluation(self) -> None:
        """The evaluation records held (``hold_evaluation``), once: to ``show_eval_completions`` (a
        TRL run's console table and parquet file) and as the trackers' ``eval_completions`` table,
        the latest ``eval_latest`` of them, each prompt once where ``unique_prompts`` asks. Why: TRL
        sends an evaluation's completions where it sends the training ones; polyrl kept them in
        ``eval_completions.jsonl`` only, so no dashboard showed what the held-out prompts got."""
        if self._evaluated is None:
            return
        (records, step), self._evaluated = self._evaluated, None
        # TRL's latest ``generation_batch_size``, else the first ``EVAL_TABLE_ROWS``
        records = records[-self.eval_latest:] if self.eval_latest is not None else records[:clog.EVAL_TABLE_ROWS]
        records = strict_json.sanitize(records)  # as eval_completions.jsonl holds them (a NaN reward: null)
        at = step * self.step_scale
        if self.show_eval_completions is not None:
            self.show_eval_completions(records, at)
        if not self._eval_tables():
            return
        table = clog.capped(clog.first_per_prompt(records) if self.unique_prompts else records, self.cell_chars)
        for name in list(self.trackers):
            if callable(getattr(self.trackers[name], "log_eval_completions", None)):
                self._call(name, "log_eval_completions", table, at)

    def publish_at(self, metrics: Mapping[str, Any], step: int) -> None:
        """Numbers outside a step's line to the trackers, at ``step``: an evaluation before or
        after training (at its own line's step in metrics.jsonl: 0 before, the last step taken
        after, ``metrics_file``), or a script's own ``trainer.log(...)`` during training
        (``polyrl.trl``: the steps taken so far). Nothing once the trackers are closed."""
        if not self.writer:
            return
        numeric = self._numeric(metrics)
        for name in list(self.trackers):
            self._call(name, "log_metrics", numeric, step * self.step_scale)

    def saved(self, path: Path, step: int) -> None:
        """The checkpoint folder ``path`` of ``step``, just written, to each tracker that logs
        checkpoints (its optional ``log_checkpoint``), at the step its metrics are logged at."""
        if not self.writer:
            return
        for name in list(self.trackers):
            if callable(getattr(self.trackers[name], "log_checkpoint", None)):
                self._call(name, "log_checkpoint", str(path), step * self.step_scale)

    def _numeric(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """What the trackers get of ``metrics``: its numbers, under ``rename``'s tags when set."""
        return numeric_metrics(self.rename(metrics) if self.rename is not None else metrics, self._not_numbers)

    def _write_completions(self, step: int, records: list[dict[str, Any]]) -> None:
        """Append the step's records after any a failed write left waiting. Why: one failed write (a
        full disk for a moment) turned the file off for the rest of the run, losing every later
        step. A failed append leaves no half line (``strict_json.append_lines``); the records of the
        last ``UNWRITTEN_STEPS`` failed steps wait for the next try, each failure a warning."""
        self._unwritten[step] = records
        try:
            clog.append(self.completions_path, [r for waiting in self._unwritten.values() for r in waiting])
        except Exception as exc:  # noqa: BLE001 - a log of samples must never cost the run
            dropped = sorted(self._unwritten)[:-UNWRITTEN_STEPS]
            for old in dropped:
                del self._unwritten[old]
            log.warning("completions log could not be written; its records are kept and written with the "
                        "next step's (trackers still get them)", path=str(self.completions_path),
                        waiting_steps=len(self._unwritten), error=f"{type(exc).__name__}: {exc}",
                        **({"dropped_steps": ",".join(map(str, dropped))} if dropped else {}))
        else:
            self._unwritten.clear()

    def _write_unwritten(self) -> None:
        """One last try for the records a failed write left waiting. Why: they wait for the next
        step's write, and after the last step there is none: a failed write there lost them with
        only the warning that they would be written."""
        if not self._unwritten:
            return
        steps = ",".join(map(str, sorted(self._unwritten)))
        try:
            clog.append(self.completions_path, [r for waiting in self._unwritten.values() for r in waiting])
        except Exception as exc:  # noqa: BLE001 - a log of samples must never cost the run
            log.warning("completions log could not be written at the end of the run; the waiting records are "
                        "lost (trackers got them)", path=str(self.completions_path), lost_steps=steps,
                        error=f"{type(exc).__name__}: {exc}")
        self._unwritten.clear()

    def _table(self, records: Sequence[Mapping[str, Any]], step: int) -> list[dict[str, Any]]:
        """A training completions table as the trackers get it, built once for all of them: each cell
        cut to ``cell_chars``, and a record's ``step`` the trackers' (TRL's ``global_step`` in a TRL
        script's run, as TRL's table holds it; the step metrics.jsonl counts in polyrl's own)."""
        return clog.capped([{**r, "step": step} if "step" in r else r for r in records], self.cell_chars)

    def _call(self, name: str, method: str, payload: Any, step: int) -> None:
        tracker = self.trackers[name]
        payload = copy.deepcopy(payload)  # its own: one that edits what it got must not change the next's
        began = time.monotonic()
        try:
            self._threads[name].call_blocking(lambda: getattr(tracker, method)(payload, step), self.timeout_s)
        except CallRaised as exc:  # anything it raised, SystemExit included: a tracker never stops training
            self._drop(name, step, describe(exc.cause), close=True)
        except CallTimedOut:
            self._drop(name, step, f"{method} did not return within {self.timeout_s:g} s "
                                   "(logging.tracker_timeout_s); its thread was abandoned", close=False)
        else:
            self._say_if_slow(name, method, step, time.monotonic() - began)

    def _say_if_slow(self, name: str, method: str, step: int, seconds: float) -> None:
        """One warning per tracker whose call took longer than ``SLOW_CALL_S`` (or a quarter of
        ``timeout_s``). Why: the run waits for each call, so a tracker taking seconds per step
        slowed every step in silence, short of the timeout that drops it."""
        if name in self._told_slow or seconds <= min(SLOW_CALL_S, self.timeout_s / 4):
            return
        self._told_slow.add(name)
        log.warning(f"tracker {name!r} is slow: training waits for each of its calls (said once)", step=step,
                    call=method, seconds=round(seconds, 2),
                    fix=f"if the steps slow down, remove {name!r} from logging.report_to (metrics.jsonl has every "
                        f"step); past logging.tracker_timeout_s = {self.timeout_s:g} s a call drops it")

    def _drop(self, name: str, step: int, error: str, close: bool) -> None:
        tracker = self.trackers.pop(name)
        self.dropped[name] = (step, error)
        log.warning(f"tracker {name!r} failed and was dropped; training continues", step=step, error=error)
        if close:  # a tracker stuck in a call would only block its close behind it
            self._close_one(name, tracker)
        else:
            self._threads.pop(name).close()

    def _close_one(self, name: str, tracker: Tracker, failed: bool = False, stopped: bool = False) -> None:
        thread = self._threads.pop(name)
        finish = getattr(tracker, "close_failed", None) if failed else \
            getattr(tracker, "close_stopped", None) if stopped else None
        try:  # inside the call: a missing close is the tracker's error
            thread.call_blocking(finish if callable(finish) else (lambda: tracker.close()), self.timeout_s)
        except CallRaised as exc:
            log.warning(f"tracker {name!r} failed to close", error=describe(exc.cause))
        except CallTimedOut:  # its thread is a daemon: what it had yet to write dies with the process
            log.warning(f"tracker {name!r} failed to close within logging.tracker_timeout_s = {self.timeout_s:g} s: "
                        "what it had not written yet (its last metrics, an upload still running) is lost when this "
                        "process exits. Fix: raise logging.tracker_timeout_s to give its close (a flush, an upload) "
                        "the time it takes")
        finally:
            thread.close()

    def close(self, failed: bool = False, stopped: bool = False) -> None:
        """Finish every tracker's run; ``failed``: the training run ended with an error, so a
        tracker that can say so (``close_failed``) finishes its run as failed; ``stopped``: it was
        stopped on request before its last step (``close_stopped``: killed, not finished)."""
        self._write_unwritten()
        while self.trackers:
            name, tracker = self.trackers.popitem()
            self._close_one(name, tracker, failed, stopped)
        for name, (step, error) in self.dropped.items():
            log.warning(f"tracker {name!r} stopped receiving metrics at step {step}: it failed and was dropped "
                        "(metrics.jsonl has every step)", error=error)


def for_run(config: Any, registry: Any, rank: int, start_dir: str | None = None) -> RunTracking:
    """The run's tracking, checked now (unknown or missing trackers fail before models load);
    ``start_dir``: the folder the run started in (``TrackerContext.start_dir``)."""
    section = config.logging
    output_dir = Path(config.train.output_dir)
    return RunTracking(
        specs=resolve_specs(registry, section.report_to), output_dir=output_dir,
        completions_per_step=section.completions_per_step, timeout_s=section.tracker_timeout_s,
        cell_chars=section.table_cell_chars,
        run_name=section.run_name or output_dir.resolve().name, project=section.project,
        config=hyperparameters(config), writer=rank == 0, start_dir=start_dir)


def hyperparameters(config: Any) -> dict[str, Any]:
    """The run config as plain data for a tracker's hyper-parameter view, credentials masked."""
    from polyrl import strict_json

    def value(v: Any) -> Any:
        return v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v)

    raw = attrs.asdict(config, value_serializer=lambda _i, _a, v: value(v) if not attrs.has(type(v)) else v)
    for key in ("rows", "eval_rows"):  # inline rows are data, not hyper-parameters
        raw.get("data", {}).pop(key, None)
    return strict_json.sanitize(_without_secrets(raw))




def _without_secrets(value: Any) -> Any:
    """Config values under credential-like keys masked (a judge's api_key must not reach a dashboard)."""
    if isinstance(value, dict):
        return {k: MASK if is_secret_key(k) else _without_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return Redactor()(value) if isinstance(value, str) else value
