"""trackio: Hugging Face's local-first tracker; its SQLite store goes under ``output_dir/trackio``
(``TRACKIO_DIR`` when set; trackio reads it once per process, at import), viewed with
``TRACKIO_DIR=<store> trackio show``. Completions are a ``trackio.Table``.

The start says where the store is and the command that shows it: trackio's own banner says
``trackio show --project P``, which in another shell (no ``TRACKIO_DIR``) opens trackio's default
store under the HF cache, not this run's, and it prints nothing at all for a second run of the
same project in one process."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from urllib.parse import urlsplit
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.tracking.completions import EVAL_COLUMNS, EVAL_TABLE, table
from polyrl import run_paths
from polyrl.logs import get_logger
from polyrl.run_plan import resume_command
from polyrl.tracking.spec import POLYRL_CONFIG_KEY, TrackerContext

log = get_logger("polyrl.tracking")

STORE_DIR = "trackio"
#: the alerts a run not ended by its last step gets (trackio keeps no finished/failed state)
STOPPED_ALERT = "polyrl: run stopped on request before its last step"
FAILED_ALERT = "polyrl: run ended with an error"


def alert_text(started_by: Mapping[str, str] | None) -> str:
    """The alerts' text: where to see how far the run went, and how to continue it (a TRL script's
    run has no config for ``polyrl train CONFIG --resume``: ``run_plan.resume_command``)."""
    resume = resume_command(None if started_by is None else dict(started_by))
    return f"metrics.jsonl and polyrl report RUN_DIR say which step it reached; {resume} continues it"


class TrackioTracker:
    def __init__(self, context: TrackerContext) -> None:
        wanted = os.environ.setdefault("TRACKIO_DIR", str((context.output_dir / STORE_DIR).resolve()))
        if context.start_dir is not None and not os.path.isabs(wanted):
            # trackio keeps it relative (every database path is made from it when used): named
            # from the run's start, its store no longer moves with a plugin's os.chdir
            wanted = os.environ["TRACKIO_DIR"] = run_paths.anchored(wanted, context.start_dir)
        import trackio
        import trackio.utils

        self._trackio = trackio
        self.store = Path(trackio.utils.TRACKIO_DIR)
        if not self.store.is_absolute():  # imported earlier, from the relative TRACKIO_DIR then set
            log.warning("trackio holds its store as the relative TRACKIO_DIR it was imported with: it moves with "
                        "the working folder (os.chdir by a reward or tool)", store=str(self.store),
                        fix="set TRACKIO_DIR to an absolute path")
        elif self.store != Path(wanted):  # trackio reads TRACKIO_DIR once, when first imported
            log.warning("trackio was imported before this run chose its folder; it writes to its own",
                        store=str(self.store), fix="set TRACKIO_DIR before starting Python to choose it")
        if not (os.environ.get("TRACKIO_SPACE_ID") or os.environ.get("TRACKIO_SERVER_URL")):
            check_writable(self.store)
        self._alert_text = alert_text(context.started_by)
        project, name, config = run_identity(context)
        self.run = trackio.init(project=project, name=name, config=config,
                                embed=False, auto_log_gpu=False, auto_log_cpu=False)
        say_where(self.store, project)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        import pandas as pd

        columns, rows = table(records)
        frame = pd.DataFrame(rows, columns=columns)
        self.run.log({"completions": self._trackio.Table(dataframe=frame)}, step=step)

    def log_eval_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """An evaluation's completions, a ``trackio.Table`` under ``eval_completions``."""
        import pandas as pd

        columns, rows = table(records, EVAL_COLUMNS)
        frame = pd.DataFrame(rows, columns=columns)
        self.run.log({EVAL_TABLE: self._trackio.Table(dataframe=frame)}, step=step)

    def close(self) -> None:
        self.run.finish()

    def close_stopped(self) -> None:
        """Ctrl-C or SIGTERM before the last step: trackio keeps no run state, so the run gets a
        warning alert (shown on the dashboard and by ``trackio`` alert queries) before it finishes;
        without it a stopped run read as one that took all its steps."""
        self._finish_with_alert(STOPPED_ALERT, "warn")

    def close_failed(self) -> None:
        """The run ended with an error: an error alert, then finish (trackio has no failed state)."""
        self._finish_with_alert(FAILED_ALERT, "error")

    def _finish_with_alert(self, title: str, level: str) -> None:
        try:
            from trackio.alerts import AlertLevel

            self.run.alert(title=title, text=self._alert_text, level=AlertLevel(level))
        finally:  # an alert that fails still ends the run
            self.run.finish()


def check_writable(store: Path) -> None:
    """Make the local store folder and write a file in it, raising the OSError if that fails. Why:
    trackio writes from a thread of its own, so a store it cannot write (read-only, a file where
    its folder goes) started the run as tracked and lost every metric with one warning of
    trackio's own at the end; TensorBoard, W&B and MLflow refuse such a folder at start."""
    store.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.NamedTemporaryFile(dir=store, prefix=".polyrl-write-check-"):
            pass
    except OSError as exc:  # named by the store, not by the check's own file
        raise OSError(exc.errno, exc.strerror, str(store)) from None


def run_identity(context: TrackerContext) -> tuple[str, str | None, dict[str, Any]]:
    """The trackio run's project, name and config. A TRL script's run (``context.trl_run``) as
    transformers' ``TrackioCallback`` opens it: project ``args.project`` (default ``huggingface``),
    name ``args.run_name`` (None: trackio names it), the model config and ``args.to_dict()`` (and
    ``model/num_parameters``) as the config, polyrl's own under ``polyrl``. polyrl's own runs:
    ``[logging] project``, ``run_name`` and the run config."""
    trl_run = context.trl_run
    if trl_run is None:
        return context.project, context.run_name, dict(context.config)
    return (trl_run.project or context.project, trl_run.run_name,
            {**trl_run.config, POLYRL_CONFIG_KEY: dict(context.config)})


def say_where(store: Path, project: str) -> None:
    """One line at the start: the folder trackio writes and the command that shows it, or where
    trackio sends the metrics instead (``TRACKIO_SPACE_ID`` or ``TRACKIO_SERVER_URL``, which its
    ``init`` reads; the server URL without its query, which may carry a write token)."""
    space, server = os.environ.get("TRACKIO_SPACE_ID"), os.environ.get("TRACKIO_SERVER_URL")
    if space:
        log.info("trackio: metrics go to a Hugging Face Space (TRACKIO_SPACE_ID)", space=space, project=project)
    elif server:
        parts = urlsplit(server)
        log.info("trackio: metrics go to a trackio server (TRACKIO_SERVER_URL)", project=project,
                 server=f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}")
    else:
        log.info("trackio: metrics in a local store", store=str(store),
                 view=f"TRACKIO_DIR={shlex.quote(str(store))} trackio show --project {shlex.quote(project)}")
