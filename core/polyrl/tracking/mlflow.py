"""MLflow: a local file store under ``output_dir/mlruns`` (or ``MLFLOW_TRACKING_URI`` when set;
``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri output_dir/mlruns`` shows it: MLflow 3
refuses to open a file store without that opt-in, and the start logs the command),
through a client of its own (no global active run). Completions are a JSON artifact per step,
``completions/step_<n>.json`` (``step_000001.json``), in the column layout ``mlflow.log_table`` writes.

MLflow refuses a whole batch over one name it does not take (``eval/pass@4``, a reward named
with ``@`` or ``(``, a name past 250 characters), which dropped the tracker at its first step:
names are mapped to ones it takes (``mlflow_name``), said once each in the log.

Only MLflow's file store keeps a metric as a file named by it, so only there can TRL's ``reward``
not sit beside ``reward/<f>/mean`` (a file where a folder is needed). A database store (sqlite,
postgresql...) holds both, so both are logged there. Behind a tracking server the store is the
server's: it says which in ``/api/3.0/mlflow/server-info`` (MLflow 3); one that does not say is
taken for a file store, since ``mlflow server`` falls back to one and a refused name there
would cost the tracker (the REST client retries the error for minutes first).

A TRL script's run (``TrackerContext.trl_run``) opens as transformers' ``MLflowCallback`` opens it:
in ``$MLFLOW_EXPERIMENT_NAME`` (else ``$MLFLOW_EXPERIMENT_ID``, else MLflow's ``Default``), named
``args.run_name`` (unset: MLflow names it), tagged with ``$MLFLOW_TAGS``, with its params
(``trl_params``), nested under the script's active run with ``$MLFLOW_NESTED_RUN``, or reattached
to ``$MLFLOW_RUN_ID``; without either, a script's active run is the run itself (logged into, left
open for the script to end). ``$HF_MLFLOW_LOG_ARTIFACTS`` true logs each checkpoint as it is saved, as
transformers' ``MLflowCallback.on_save`` does, under ``checkpoint-N/`` (N: TRL's ``global_step``),
and the trained model folder as ``model/`` at the end. transformers wraps each checkpoint in a pyfunc
model of that name (``pyfunc.log_model``: a copy, its pip requirements inferred in a subprocess);
polyrl logs the folder's files as the run's artifacts (``log_artifacts``), which the start says."""

from __future__ import annotations

import json
import os
import re
import shlex
import time
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from polyrl import run_paths
from polyrl.logs import get_logger
from polyrl.strict_json import dumps
from polyrl.tracking.completions import EVAL_COLUMNS, EVAL_TABLE, table
from polyrl.tracking.spec import TrackerContext

log = get_logger("polyrl.tracking")

STORE_DIR = "mlruns"
#: MLflow's longest metric or param name.
MAX_NAME_CHARS = 250
#: What MLflow takes in a name on every platform (its own rule, without the colon Windows refuses).
_REFUSED = re.compile(r"[^/\w.\- ]")


def mlflow_name(name: str) -> str:
    """``name`` as MLflow takes it: ``@`` read as ``_at_`` (``pass@4`` -> ``pass_at_4``), any other
    refused character ``_``, cut to ``MAX_NAME_CHARS``, and no empty, ``.`` or ``..`` path part
    (MLflow refuses a name that a path normalisation would change)."""
    text = _REFUSED.sub("_", name.replace("@", "_at_"))[:MAX_NAME_CHARS]
    return "/".join("_" if part in (".", "..") else part for part in text.split("/") if part) or "_"


class MetricNames:
    """Each metric's MLflow name, decided once (None: left out). Names are mapped part by part
    (the ``/``-separated parts): a part that reads as another part's under the same parent once
    refused characters are ``_`` gets ``_2``, ``_3``... Why: two rewards labelled ``judge (gpt)`` and
    ``judge [gpt]`` both became ``reward/judge _gpt_/...``, and the second one's every metric was
    left out of MLflow (a warning in the log, no curve); now it is ``reward/judge _gpt__2/...``,
    each of its metrics under the one folder, said once. On a file store (``file_store``), which
    keeps each metric as a file named by it, a name that is a folder of another's (or whose
    folder another's is) is still left out: TRL's ``reward`` beside polyrl's ``reward/<f>/mean``
    was an "Is a directory" error that dropped the tracker at the first step. A file store also
    tells parts apart only as its disk does: parts equal but for case or Unicode normalisation
    (``Judge`` and ``judge``) are one folder on macOS's and Windows' disks, where the two rewards'
    values went into one metric's history, a zigzag of both; there such a part is suffixed too."""

    def __init__(self, file_store: bool) -> None:
        self.file_store = file_store
        self._names: dict[str, str | None] = {}  # metric name -> MLflow's (None: left out)
        self._taken: dict[str, str] = {}  # MLflow name -> the metric name that has it
        self._parts: dict[tuple[str, str], str] = {}  # (MLflow parent, part) -> its MLflow part
        self._part_of: dict[tuple[str, str], str] = {}  # (MLflow parent, MLflow part) -> the part that has it

    def _part(self, parent: str, part: str) -> str:
        """``part``'s MLflow name under ``parent`` (an MLflow name): its own, or suffixed when another
        part there already reads so."""
        chosen = self._parts.get((parent, part))
        if chosen is not None:
            return chosen
        base = mlflow_name(part)
        chosen, k = base, 1
        while (parent, self._as_stored(chosen)) in self._part_of:
            k += 1
            chosen = f"{base}_{k}"
        if chosen != base:
            log.warning("mlflow: a name part reads as another's once the characters MLflow refuses are '_' (or, in "
                        "a file store, on a disk that ignores case); suffixed to keep both", part=part,
                        mlflow_part=chosen, other=self._part_of[(parent, self._as_stored(base))],
                        under=parent or "(top)")
        self._parts[(parent, part)] = chosen
        self._part_of[(parent, self._as_stored(chosen))] = part
        return chosen

    def _as_stored(self, part: str) -> str:
        """``part`` as a disk that ignores case and Unicode normalisation compares it (a file store's
        folders); as it is elsewhere."""
        return unicodedata.normalize("NFC", part).casefold() if self.file_store else part

    def name(self, name: str) -> str | None:
        """The MLflow name of metric ``name``; None when it is left out (see the class)."""
        if name in self._names:
            return self._names[name]
        parent = ""
        for part in (p for p in name.replace("@", "_at_").split("/") if p):
            chosen = self._part(parent, part)
            parent = f"{parent}/{chosen}" if parent else chosen
        wanted = mlflow_name(parent)  # cut to MAX_NAME_CHARS
        nested = None if not self.file_store else next(
            (owner for taken, owner in self._taken.items()
             if taken.startswith(wanted + "/") or wanted.startswith(taken + "/")), None)
        owner = nested or self._taken.setdefault(wanted, name)
        self._names[name] = wanted if owner == name else None
        if nested is not None:
            log.info("mlflow: metric left out, its name is a folder of another metric's (or that name is "
                     "a folder of it), which MLflow's file store cannot hold (a database store holds both: "
                     "MLFLOW_TRACKING_URI=sqlite:///mlflow.db, with SQLAlchemy installed)",
                     metric=name, other=nested)
        elif owner != name:
            log.warning("mlflow: metric left out, its MLflow name is another metric's", metric=name,
                        mlflow_name=wanted, other=owner)
        elif wanted != name:
            log.info("mlflow: metric renamed to a name MLflow takes", metric=name, mlflow_name=wanted)
        return self._names[name]


#: the SQLAlchemy dialects of MLflow's database store (``postgresql+psycopg2://`` too)
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
#: where an MLflow 3 tracking server says what store it keeps runs in (no login needed)
SERVER_INFO = "/api/3.0/mlflow/server-info"

StoreKind = Literal["file", "database", "server"]


def store_kind(uri: str) -> StoreKind:
    """What keeps the metrics of tracking ``uri``: MLflow's file store (a path, ``file:``, a Windows
    drive), a database store (``sqlite:``, ``postgresql:``...), or anything else: a tracking server
    or a managed service (``http(s):``, ``databricks``), whose store only it knows."""
    if uri.partition(":")[0] in ("databricks", "databricks-uc"):  # "databricks" alone has no scheme
        return "server"
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:
        return "file"
    return "database" if scheme.partition("+")[0] in DATABASE_SCHEMES else "server"


def file_store_path(uri: str) -> str:
    """The folder of file-store ``uri`` (``file:///x/mlruns``, a plain path) as a shell reads it."""
    if urlsplit(uri).scheme.lower() == "file":
        from urllib.request import url2pathname

        return url2pathname(urlsplit(uri).path)
    return uri


def anchored_uri(uri: str, start: str | None) -> str:
    """``uri`` with a relative local store (a plain path, ``file:mlruns``, ``sqlite:///mlflow.db``)
    named from ``start``, the folder the run started in. Why: MLflow keeps such a store relative
    (``MlflowClient``'s file store root, SQLAlchemy's sqlite file on each connection), so a reward or
    tool that moved the working folder while the tracker's thread wrote sent the run's metrics into
    another store. Anything else (absolute, a server, another database) is left as it is."""
    if start is None or not uri:
        return uri
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if store_kind(uri) == "file":
        if scheme == "":
            return run_paths.anchored(uri, start)
        if scheme == "file" and not parts.netloc and parts.path and not parts.path.startswith("/"):
            from urllib.request import url2pathname

            return Path(run_paths.anchored(url2pathname(parts.path), start)).as_uri()
        return uri  # absolute, a host's, or a Windows drive
    head, sep, rest = uri.partition(":///")
    if scheme.partition("+")[0] == "sqlite" and sep and rest and rest[0] not in "/?" and \
            not rest.startswith(":memory:"):
        return f"{head}:///{run_paths.anchored(rest, start)}"
    return uri


def view_command(store: str) -> str:
    """The command that opens file store ``store`` in MLflow's UI. Why the variable: MLflow 3's
    file store refuses to open without it (this tracker sets it for itself, a user's shell has not)."""
    return f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {shlex.quote(store)}"


def server_store(uri: str, timeout_s: float = 5.0) -> StoreKind:
    """The store of the tracking server at ``uri`` as its server-info says (``SqlStore``:
    database); anything else, no answer included, is taken for a file store."""
    if urlsplit(uri).scheme.lower() not in ("http", "https"):
        return "file"  # databricks and other services: not asked
    import httpx

    try:
        reply = httpx.get(uri.rstrip("/") + SERVER_INFO, timeout=timeout_s, trust_env=False)
        said = reply.json().get("store_type") if reply.status_code == 200 else None
    except Exception:  # noqa: BLE001 - an older server, a proxy's page, no answer: unknown
        said = None
    return "database" if said == "SqlStore" else "file"


def _flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat_params(value, f"{name}."))
        else:
            out.setdefault(mlflow_name(name), json.dumps(value, default=str)[:500])  # MLflow caps a value
    return out


def trl_params(combined: Mapping[str, Any]) -> dict[str, str]:
    """The params transformers' ``MLflowCallback`` logs for a TRL run from ``combined`` (the model
    config's dict under ``args.to_dict()``): flattened with dots under ``$MLFLOW_FLATTEN_PARAMS``,
    each value as ``str()`` (as MLflow stores it), one longer than MLflow takes
    (``MAX_PARAM_VAL_LENGTH``) left out, the first ``$MLFLOW_MAX_LOG_PARAMS`` only. Why: polyrl
    logged its own config under polyrl's names, which no TRL user's MLflow comparison matched."""
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    flat = dict(combined)
    if os.environ.get("MLFLOW_FLATTEN_PARAMS", "FALSE").upper() in _TRUE:
        flat = _dotted(flat)
    items = [(mlflow_name(str(k)), str(v)) for k, v in flat.items() if len(str(v)) <= MAX_PARAM_VAL_LENGTH]
    cap = os.environ.get("MLFLOW_MAX_LOG_PARAMS")
    if cap and cap.isdigit():
        items = items[:int(cap)]
    return dict(items)


#: transformers' ``MLflowCallback`` logs model artifacts when this is true
LOG_ARTIFACTS = "HF_MLFLOW_LOG_ARTIFACTS"
#: where polyrl's trainer exports the trained model (``Trainer.final_model_dir``)
FINAL_MODEL_DIR = "model"
#: transformers' ``ENV_VARS_TRUE_VALUES``
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


def _dotted(d: Mapping[Any, Any], parent: str = "") -> dict[str, Any]:
    """transformers' ``flatten_dict``: nested non-empty mappings as ``parent.key``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{parent}.{k}" if parent else k
        if v and isinstance(v, Mapping):
            out.update(_dotted(v, str(key)))
        else:
            out[key] = v
    return out


class MlflowTracker:
    def __init__(self, context: TrackerContext) -> None:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        self._metric = Metric
        trl_run = context.trl_run
        #: the script's active run, logged into as transformers' MLflowCallback does, and left open
        self.adopted = trl_run is not None and trl_run.mlflow_active is not None
        self.uri = (trl_run.mlflow_active_uri if self.adopted and trl_run is not None else None) or \
            os.environ.get("MLFLOW_TRACKING_URI") or ""
        self.uri = anchored_uri(self.uri, context.start_dir)
        if not self.uri:
            # MLflow 3 keeps the file store working but asks for an opt-in; its database stores
            # need SQLAlchemy, which the skinny build leaves out
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            self.uri = (context.output_dir / STORE_DIR).resolve().as_uri()
        kind = store_kind(self.uri)
        if kind == "file":
            store = file_store_path(self.uri)
            log.info("mlflow: file store", store=store, view=view_command(store))
        #: whether the store keeps metrics as files named by them (``_name``)
        self.file_store = (server_store(self.uri) if kind == "server" else kind) == "file"
        self.client = MlflowClient(tracking_uri=self.uri)
        self._names = MetricNames(self.file_store)  # each metric's MLflow name
        run_name: str | None
        if context.trl_run is None:
            exp_id, run_name, tags = self._experiment(context.project), context.run_name, {}
        else:  # as transformers' MLflowCallback opens a TRL run
            exp_id = "" if self.adopted else self._trl_experiment()  # the script's run has its experiment
            run_name, tags = context.trl_run.run_name, trl_tags()
            if context.trl_run.mlflow_parent:  # MLflow's own tag of a nested run (start_run(nested=True))
                tags = {**tags, "mlflow.parentRunId": context.trl_run.mlflow_parent}
        reattach = os.environ.get("MLFLOW_RUN_ID") if context.trl_run is not None else None
        if self.adopted and trl_run is not None and trl_run.mlflow_active is not None:
            # MLflowCallback logs its params and $MLFLOW_TAGS into the script's run, names it nothing
            self.run_id = trl_run.mlflow_active
            if tags:
                self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        elif reattach:  # as MLflowCallback's start_run resumes $MLFLOW_RUN_ID: the run's own name, tags kept
            self.run_id = self.client.get_run(reattach).info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            if tags:
                self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        #: the trained model folder logged at close (``$HF_MLFLOW_LOG_ARTIFACTS``, a TRL run's), else None
        self.model_artifacts = context.output_dir / FINAL_MODEL_DIR \
            if context.trl and os.environ.get(LOG_ARTIFACTS, "FALSE").upper() in _TRUE else None
        if self.model_artifacts is not None:
            log.info(f"{LOG_ARTIFACTS}: each checkpoint is logged as the run's checkpoint-N/ artifacts (N: TRL's "
                     "global_step; transformers' MLflowCallback logs a pyfunc model of that name holding the same "
                     "folder) and the trained model as model/ at the end")
        flat = _flat_params(context.config)
        if context.trl_run is not None:  # TRL's params, then polyrl's own config under polyrl.
            flat = {**trl_params(context.trl_run.params), **_flat_params(context.config, "polyrl.")}
        params = [Param(k, v) for k, v in flat.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def _experiment(self, name: str) -> str:
        """The id of experiment ``name``, made when the store has none of that name."""
        experiment = self.client.get_experiment_by_name(name)
        return experiment.experiment_id if experiment else self.client.create_experiment(name)

    def _trl_experiment(self) -> str:
        """A TRL run's experiment as transformers' ``MLflowCallback`` (through MLflow's own
        ``start_run``) chooses it: ``$MLFLOW_EXPERIMENT_NAME`` (made when missing), else
        ``$MLFLOW_EXPERIMENT_ID``, else MLflow's ``Default`` experiment. Why: polyrl put a TRL
        script's run in experiment ``polyrl``, where its user's MLflow UI (opened on their
        experiment) did not list it."""
        from mlflow.tracking.default_experiment import DEFAULT_EXPERIMENT_ID

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if name:
            return self._experiment(name)
        return os.environ.get("MLFLOW_EXPERIMENT_ID") or DEFAULT_EXPERIMENT_ID

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        named = ((self._names.name(k), v) for k, v in metrics.items())
        self.client.log_batch(self.run_id, metrics=[self._metric(k, v, now, step) for k, v in named if k])

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        columns, rows = table(records)
        self.client.log_text(self.run_id, dumps({"columns": columns, "data": rows}), f"completions/step_{step:06d}.json")

    def log_eval_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """An evaluation's completions, artifact ``eval_completions/step_<n>.json`` (the step in six digits)."""
        columns, rows = table(records, EVAL_COLUMNS)
        self.client.log_text(self.run_id, dumps({"columns": columns, "data": rows}), f"{EVAL_TABLE}/step_{step:06d}.json")

    def close(self) -> None:
        self._end("FINISHED")

    def _end(self, status: str) -> None:
        try:
            if self.model_artifacts is not None:
                self._log_model()
        finally:  # an artifact that fails (a full disk) still ends the run: nothing else lost
            if not self.adopted:  # the script's run: the script ends it (MLflowCallback's _auto_end_run False)
                self.client.set_terminated(self.run_id, status=status)

    def _log_model(self) -> None:
        """The trained model (``output_dir/model``, exported before the trackers close) as the run's
        ``model/`` artifacts. Why: a TRL user's ``HF_MLFLOW_LOG_ARTIFACTS=1`` run ended with no
        model in MLflow and no word."""
        folder = self.model_artifacts
        if folder is None or not folder.is_dir():  # a run stopped before its first step saved none
            log.warning(f"{LOG_ARTIFACTS}: no trained model in {folder} to log as MLflow artifacts",
                        fix="log the model you keep with mlflow.log_artifacts(folder) yourself")
            return
        self.client.log_artifacts(self.run_id, str(folder), artifact_path=FINAL_MODEL_DIR)

    def log_checkpoint(self, path: str, step: int) -> None:
        """The checkpoint folder ``path`` as the run's ``checkpoint-{step}/`` artifacts
        (``$HF_MLFLOW_LOG_ARTIFACTS``), where transformers' ``MLflowCallback.on_save`` logs its
        checkpoint-N. Why: only the final model was logged, so a run's checkpoints never reached a
        remote store. The start folders a checkpoint keeps (``kept_inputs``: a KL reference, a full
        model, and the initial adapter) are the run's inputs, not its state: left out."""
        if self.model_artifacts is None:
            return
        from polyrl import kept_inputs

        where = f"checkpoint-{step}"
        for entry in sorted(Path(path).iterdir()):
            if entry.name in (kept_inputs.ADAPTER, kept_inputs.REFERENCE):
                continue
            if entry.is_dir():
                self.client.log_artifacts(self.run_id, str(entry), artifact_path=f"{where}/{entry.name}")
            else:
                self.client.log_artifact(self.run_id, str(entry), artifact_path=where)

    def close_failed(self) -> None:
        if not self.adopted:  # the script's `with mlflow.start_run()` marks its own run failed on the error
            self.client.set_terminated(self.run_id, status="FAILED")

    def close_stopped(self) -> None:
        """Ctrl-C or SIGTERM before the last step: MLflow's KILLED, as its own client marks a run its
        user interrupted (FINISHED read as a run that took all its steps). The model the stop
        exported is still logged (``$HF_MLFLOW_LOG_ARTIFACTS``), as ``close`` logs it."""
        self._end("KILLED")


def trl_tags() -> dict[str, str]:
    """The tags transformers' ``MLflowCallback`` sets on a TRL run: ``$MLFLOW_TAGS``, a JSON object
    of tag -> value (each value as text, as MLflow keeps it). Not an object: a ValueError naming
    the variable (the run then stops before training, as the tracker cannot open)."""
    raw = os.environ.get("MLFLOW_TAGS")
    if not raw:
        return {}
    try:
        tags = json.loads(raw)
    except ValueError:
        tags = None
    if not isinstance(tags, dict):
        raise ValueError(f"MLFLOW_TAGS is not a JSON object of tags: {raw[:200]!r}; set it as e.g. "
                         """MLFLOW_TAGS='{"release": "rc1"}', or unset it""")
    return {str(k): str(v) for k, v in tags.items()}  # as mlflow.set_tags writes a value
