"""MLflow: a local file store under ``output_dir/mlruns`` (or ``MLFLOW_TRACKING_URI`` when set;
``mlflow ui --backend-store-uri output_dir/mlruns`` shows it),
through a client of its own (no global active run). Completions are a JSON artifact per step,
``completions/step_<n>.json``, in the column layout ``mlflow.log_table`` writes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.strict_json import dumps
from polyrl.tracking.completions import COLUMNS, cell
from polyrl.tracking.spec import TrackerContext

STORE_DIR = "mlruns"


def _flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat_params(value, f"{name}."))
        else:
            out[name] = json.dumps(value, default=str)[:500]  # MLflow caps a param's length
    return out


class MlflowTracker:
    def __init__(self, context: TrackerContext) -> None:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric = Metric
        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or ""
        if not self.uri:
            # MLflow 3 keeps the file store working but asks for an opt-in; its database stores
            # need SQLAlchemy, which the skinny build leaves out
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            self.uri = (context.output_dir / STORE_DIR).resolve().as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(context.project)
        exp_id = experiment.experiment_id if experiment else self.client.create_experiment(context.project)
        self.run_id = self.client.create_run(exp_id, run_name=context.run_name).info.run_id
        params = [Param(k, v) for k, v in _flat_params(context.config).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self._metric(k, v, now, step) for k, v in metrics.items()])

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        table = {"columns": list(COLUMNS), "data": [[cell(r[c]) for c in COLUMNS] for r in records]}
        self.client.log_text(self.run_id, dumps(table), f"completions/step_{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)
