"""TensorBoard: event files under ``output_dir/tensorboard`` written with tensorboard's own writer
(no torch or TensorFlow needed). Completions go to the Text dashboard as one table per step. A TRL
script's run (``TrackerContext.trl``) writes where transformers' ``TensorBoardCallback`` would
(``trl_log_dir``), with its ``args`` and ``model_config`` text summaries.

Each writer starts with a session-start event just past the steps its run resumed after (step 0
for a run from scratch): TensorBoard then hides what the folder's earlier files hold from that step
on, so after a ``--resume`` (or a fresh start in the same output_dir) the curves show this run's
steps once, not also the lineage that crashed, and keep the steps the resume kept. Why not at the
first step logged: a run resumed at its last step (killed in its evaluation after training) logs
that evaluation first, at the resumed step, and the start there hid that step's training curves.
Where the run says what it keeps of the resumed step (``TrackerContext.resumed_step``: polyrl's own
runs), the start is at that step and its kept numbers and completions are logged again after it:
a run stopped on request had also logged its evaluation after training there, which the resume's
metrics.jsonl drops, and TensorBoard showed it beside the resumed run's points."""

from __future__ import annotations

import os
import shlex
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from polyrl.logs import get_logger
from polyrl.tracking.completions import EVAL_COLUMNS, EVAL_TABLE, markdown_table
from polyrl.tracking.spec import TrackerContext

log = get_logger("polyrl.tracking")

LOG_DIR = "tensorboard"
#: the largest magnitude a TensorBoard scalar (a float32) holds: numpy's ``finfo(float32).max``
FLOAT32_MAX = 3.4028234663852886e38
#: the variable transformers' TensorBoardCallback takes its folder from (its ``logging_dir`` field
#: is deprecated and unread)
TRL_LOG_DIR_VARIABLE = "TENSORBOARD_LOGGING_DIR"


def trl_log_dir(output_dir: Path) -> Path:
    """The folder transformers' ``TensorBoardCallback`` writes a run's event files to:
    ``$TENSORBOARD_LOGGING_DIR`` (``~`` expanded) when set, else ``output_dir/runs/<Mon DD_HH-MM-SS>_<host>``
    at the start of training. Why: a TRL script's user runs ``tensorboard --logdir OUTPUT_DIR/runs``
    (or their variable's folder), where polyrl's ``output_dir/tensorboard`` showed nothing."""
    chosen = os.environ.get(TRL_LOG_DIR_VARIABLE)
    if chosen:  # (an empty value: unset)
        return Path(os.path.expanduser(chosen))
    return output_dir / "runs" / f"{datetime.now().strftime('%b%d_%H-%M-%S')}_{socket.gethostname()}"


def _quiet_writer_threads() -> None:
    """Keep tensorboard's writer thread from printing its own traceback. Why: when the disk fills,
    that thread stores the OSError for the next write or flush (which raises it here, in the
    caller's thread, where the run drops the tracker with one warning) and also raises it in
    itself, so a 30-line traceback reached the terminal (or a "critical" line under --log-json)
    beside the documented warning. Other threads' exceptions go to the hook as before."""
    if getattr(threading.excepthook, "polyrl_quiets_tensorboard", False):
        return  # installed already (and still the hook: a test harness may have put its own back)
    from tensorboard.summary.writer import event_file_writer

    writer_thread = getattr(event_file_writer, "_AsyncWriterThread", None)
    if writer_thread is None:  # another tensorboard: its thread reports as it likes
        return
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.thread, writer_thread) and isinstance(args.exc_value, Exception):
            return  # kept by the thread and raised at the next write, in the run's thread
        previous(args)

    hook.polyrl_quiets_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoardTracker:
    def __init__(self, context: TrackerContext) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary, self._text_pb = event_pb2.Event, summary_pb2.Summary, text_pb
        self._session_log = event_pb2.SessionLog
        self._too_large: set[str] = set()  # metrics said to be past float32's range (``_values``)
        self._started = False
        #: the resumed step as the trackers had it, logged again just after the session start
        self._resumed = context.resumed_step if context.resumed_at > 0 else None
        self._resumed_at = context.resumed_at
        #: where this run's session starts (``_add``): past the steps the resume kept, or at the
        #: resumed step itself when its kept numbers are logged there again (``_resumed``)
        self._start_step = (context.resumed_at if self._resumed is not None else context.resumed_at + 1) \
            if context.resumed_at > 0 else 0
        self.log_dir = trl_log_dir(context.output_dir) if context.trl else context.output_dir / LOG_DIR
        _quiet_writer_threads()
        self._writer = EventFileWriter(str(self.log_dir))
        #: a TRL run's text summaries (``trl_texts``), written with its first event
        self._texts = trl_texts(context)
        log.info("tensorboard: event files", logdir=str(self.log_dir),
                 view=f"tensorboard --logdir {shlex.quote(str(self.log_dir))}")

    def _add(self, summary: Any, step: int) -> None:
        self._start()
        self._writer.add_event(self._event(wall_time=time.time(), step=step, summary=summary))

    def _start(self) -> None:
        """The session start, once, before this run's first event (or at its close: ``close``)."""
        if not self._started:  # a restart: earlier files' events from ``_start_step`` on are stale
            start = self._session_log(status=self._session_log.START)
            self._writer.add_event(self._event(wall_time=time.time(), step=self._start_step, session_log=start))
            self._started = True
            self._write_texts()  # after the start: it hides what came before it from its step on
            self._write_resumed()

    def _values(self, metrics: Mapping[str, float]) -> list[Any]:
        """``metrics`` as scalar summary values, those past float32's range left out with one warning per
        tag. Why: a scalar event holds a float32 (``simple_value``), so a finite 1e100 (a reward's mean:
        polyrl trains on any finite score) was written, and read back by TensorBoard, as inf."""
        kept = {}
        for key, value in metrics.items():
            if abs(value) <= FLOAT32_MAX:
                kept[key] = value
            elif key not in self._too_large:
                self._too_large.add(key)
                log.warning("metric left out of TensorBoard: past the float32 range its scalars hold, it would read as "
                            "inf (metrics.jsonl and the other trackers keep it; said once per metric)",
                            metric=key, value=value)
        return [self._summary.Value(tag=k, simple_value=v) for k, v in kept.items()]

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        values = self._values(metrics)
        self._add(self._summary(value=values), step)
        self._writer.flush()

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        self._add(self._text_pb("completions", markdown_table(records)), step)
        self._writer.flush()

    def log_eval_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """An evaluation's completions, as text ``eval_completions`` beside the training table."""
        self._add(self._text_pb(EVAL_TABLE, markdown_table(records, EVAL_COLUMNS)), step)
        self._writer.flush()

    def _write_resumed(self) -> None:
        """The resumed step's kept numbers and completions, at that step, after the session start
        that hid what the folder's earlier files hold there (a stopped run's evaluation after
        training, which the resume's metrics.jsonl dropped, among them)."""
        if self._resumed is None:
            return
        at, resumed, self._resumed = self._resumed_at, self._resumed, None
        if resumed.metrics:
            values = self._values(resumed.metrics)
            self._writer.add_event(self._event(wall_time=time.time(), step=at, summary=self._summary(value=values)))
        if resumed.records:
            self._writer.add_event(self._event(wall_time=time.time(), step=at,
                                               summary=self._text_pb("completions", markdown_table(resumed.records))))
        if resumed.eval_records:
            self._writer.add_event(self._event(wall_time=time.time(), step=at, summary=self._text_pb(
                EVAL_TABLE, markdown_table(resumed.eval_records, EVAL_COLUMNS))))

    def _write_texts(self) -> None:
        """The text summaries, at step 0 as transformers' ``add_text`` without a step writes them."""
        for tag, text in self._texts.items():
            self._writer.add_event(self._event(wall_time=time.time(), step=0, summary=self._text_pb(tag, text)))
        self._texts = {}

    def close(self) -> None:
        """The session start if nothing was logged, then the files closed. Why the start: a resume
        that failed or was stopped before its first step had rewound metrics.jsonl and moved the
        later checkpoints aside, while TensorBoard still drew the dead lineage's steps past the
        resumed one as the run's. A run that logged nothing still shows its args (``_start``)."""
        self._start()
        self._writer.close()


#: the suffix torch's ``SummaryWriter.add_text`` (transformers' writer) gives a text summary's tag
TEXT_TAG_SUFFIX = "/text_summary"


def trl_texts(context: TrackerContext) -> dict[str, str]:
    """A TRL script's run's text summaries under the tags transformers' ``TensorBoardCallback``
    writes them with at the start of training (``args/text_summary``: ``args.to_json_string()``,
    ``model_config/text_summary``: the model config's JSON); none for polyrl's own runs."""
    if context.trl_run is None:
        return {}
    return {f"{name}{TEXT_TAG_SUFFIX}": text for name, text in context.trl_run.texts.items()}
