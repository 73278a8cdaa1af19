"""What a tracker plugin provides: a ``TrackerSpec`` naming it and a ``Tracker`` the run writes to.

The core never imports a tracking library; each spec's ``create`` does, when a run asks for it, and
its ``probe`` says beforehand (cheaply) whether the library is installed, so a config that names a
missing tracker fails before any model is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs


#: the key of polyrl's own run config in a TRL run's tracker config (beside transformers' keys)
POLYRL_CONFIG_KEY = "polyrl"


@attrs.define(frozen=True)
class TrlRun:
    """What transformers' tracker integrations take from a TRL script's trainer when they open their
    run (``polyrl.trl`` builds it from the script's ``args`` and model): its name, the config they
    log and TensorBoard's text summaries. Why: a TRL user's dashboards group, filter and compare
    runs by these; polyrl's own config under polyrl's names matched none of them."""

    #: ``args.run_name``: None (transformers' default) lets the tracker name the run itself
    run_name: str | None = None
    #: ``args.project`` (transformers' default ``huggingface``): trackio's project, which alone reads it
    project: str | None = None
    #: ``{**model.config.to_dict(), **args.to_dict()}`` and ``model/num_parameters``: W&B's config
    config: Mapping[str, Any] = attrs.field(factory=dict)
    #: ``{**model.config.to_dict(), **args.to_dict()}``: the params transformers' ``MLflowCallback`` logs
    params: Mapping[str, Any] = attrs.field(factory=dict)
    #: TensorBoard's text summaries: ``args`` (``args.to_json_string()``), ``model_config``
    texts: Mapping[str, str] = attrs.field(factory=dict)
    #: under ``$MLFLOW_NESTED_RUN``, the MLflow run active in the script's thread when training
    #: started: transformers' ``MLflowCallback`` opens its run nested under it (the trackers' own
    #: threads cannot see it: MLflow keeps the active run per thread)
    mlflow_parent: str | None = None
    #: without ``$MLFLOW_NESTED_RUN`` and ``$MLFLOW_RUN_ID``, the MLflow run active in the script's
    #: thread and the tracking URI it lives at: transformers' ``MLflowCallback`` logs into that run
    #: (no run of its own) and leaves it open for the script to end
    mlflow_active: str | None = None
    mlflow_active_uri: str | None = None


@attrs.define(frozen=True)
class TrackerContext:
    """What a tracker needs to open its run."""

    output_dir: Path  # the run's output_dir; local trackers write under it
    run_name: str
    project: str
    config: Mapping[str, Any]  # the run config as plain data (hyper-parameters)
    #: a TRL script's run (``polyrl.trl``): a tracker transformers' integration sets up otherwise
    #: does as that integration does (TensorBoard's folder, W&B's step axis and run summary), so the
    #: script's dashboards and commands find its run; polyrl's own runs keep polyrl's ways
    trl: bool = False
    #: what transformers' integrations read from the TRL script's trainer (None: not a TRL
    #: script's run, or one given polyrl's own GRPOConfig)
    trl_run: TrlRun | None = None
    #: who started the run where not ``polyrl train`` (``run_plan.trl_script``'s record): how a
    #: text of the tracker's says to continue the run (``run_plan.resume_command``)
    started_by: Mapping[str, str] | None = None
    #: the folder the run started in (``run_paths``): a store the environment names by a relative path
    #: (``MLFLOW_TRACKING_URI``, ``TRACKIO_DIR``) is read from there, since the tracker libraries keep
    #: it relative and a later ``os.chdir`` by plugin code would move the store (None: as given)
    start_dir: str | None = None
    #: the last tracker step the run this one resumes had logged and keeps (its checkpoint's step,
    #: in the steps trackers are given); 0 for a run that starts from scratch. Why: a tracker that
    #: hides a crashed lineage's later points (TensorBoard's session start) must hide those past
    #: it, not those from whatever step this run happens to log first (its evaluation after
    #: training, at the resumed step itself, hid that step's training curves)
    resumed_at: int = 0
    #: what the trackers were given at ``resumed_at`` and the resumed run keeps (the step's kept
    #: metrics.jsonl line, as the trackers take it, and its sampled completions); None where this
    #: run cannot say (a fresh start, a TRL script's run whose logs follow ``logging_steps``). Why:
    #: a run stopped on request evaluates "after training" at that step, an evaluation the resume
    #: drops from metrics.jsonl (an unbroken run has none there), so TensorBoard hides the stopped
    #: run's points from ``resumed_at`` on and logs these again, reading as metrics.jsonl does
    resumed_step: ResumedStep | None = None


@attrs.define(frozen=True)
class ResumedStep:
    """The step a run resumed at, as its trackers had it (``TrackerContext.resumed_step``)."""

    metrics: Mapping[str, float] = attrs.field(factory=dict)
    records: Sequence[Mapping[str, Any]] = ()
    #: the evaluation's completions table of that step (``eval_completions``), where one ran there
    eval_records: Sequence[Mapping[str, Any]] = ()


class Tracker(Protocol):
    """One open experiment-tracker run, called on a thread of its own (``polyrl.agents.threads.Worker``).
    Every method may raise anything or hang past ``tracker_timeout_s``: the run drops that tracker."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Numeric metrics of ``step`` (already finite floats)."""

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """The step's sampled completions (``polyrl.tracking.completions.COLUMNS`` keys, ``extra`` too
        where a reward logged columns; ``completions.table`` lays them out as TRL's table), each
        text already cut to ``[logging] table_cell_chars``, ``step`` the one given here."""

    def close(self) -> None:
        """Flush and finish the run."""

    # Optional: ``log_eval_completions(self, records, step) -> None``, an evaluation's completions
    # (``polyrl.tracking.completions.EVAL_COLUMNS`` keys) at the step it evaluated, a table apart from
    # the training one (``EVAL_TABLE``); without it a tracker shows no evaluation completions.
    # Optional: ``close_failed(self) -> None``, called instead of ``close`` when the training run
    # ends with an error, to finish the tracker's run as failed (MLflow FAILED, W&B exit code 1);
    # without it a crashed run shows as a clean finish.
    # Optional: ``log_checkpoint(self, path: str, step: int) -> None``, called with each checkpoint
    # folder just written (rank 0), at the step its metrics are logged at: MLflow logs it as
    # artifacts where transformers' MLflowCallback would (``$HF_MLFLOW_LOG_ARTIFACTS``, a TRL run's).
    # Optional: ``close_stopped(self) -> None``, called instead of ``close`` when the run was stopped
    # on request (Ctrl-C, SIGTERM) before its last step, to finish the tracker's run as killed
    # (MLflow KILLED, W&B exit code 255, a trackio alert); without it a stopped run shows as one that
    # ran all its steps.


#: What every object a tracker's ``create`` returns must have.
TRACKER_METHODS = ("log_metrics", "log_completions", "close")


def _always_usable() -> str | None:
    return None


@attrs.define
class TrackerSpec:
    """A tracker as ``[logging] report_to`` names it and ``polyrl trackers`` lists it."""

    name: str
    create: Callable[[TrackerContext], Tracker]
    summary: str = ""
    probe: Callable[[], str | None] = _always_usable  # a reason string when unusable here
    install_hint: str = ""
    distribution: str = ""


@attrs.define(frozen=True)
class TrackerStatus:
    name: str
    available: bool
    reason: str | None
    summary: str
    install_hint: str
    distribution: str

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)
