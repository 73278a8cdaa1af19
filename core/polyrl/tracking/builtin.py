"""The core's own tracker plugin: TensorBoard, W&B (offline), MLflow (local store) and trackio.

Each library is an optional extra (``pip install polyrl[tensorboard]``...); the probe only looks
the package up, so listing trackers imports none of them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from polyrl.hookspecs import hookimpl
from polyrl.tracking.spec import TrackerContext, TrackerSpec


def _installed(module: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"the {module!r} package is not installed"
        return None

    return probe


def _lazy(module: str, cls: str) -> Callable[[TrackerContext], Any]:
    def create(context: TrackerContext) -> Any:
        return getattr(importlib.import_module(f"polyrl.tracking.{module}"), cls)(context)

    return create


#: (name, implementing module, class, library module, extra, summary)
BUILTIN_TRACKERS = (
    ("tensorboard", "tensorboard", "TensorBoardTracker", "tensorboard", "tensorboard",
     "TensorBoard event files in output_dir/tensorboard (`tensorboard --logdir`)"),
    ("wandb", "wandb", "WandbTracker", "wandb", "wandb",
     "Weights & Biases, offline run in output_dir/wandb (`wandb sync` uploads it)"),
    ("mlflow", "mlflow", "MlflowTracker", "mlflow", "mlflow",
     "MLflow local store in output_dir/mlruns, or MLFLOW_TRACKING_URI "
     "(`MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri output_dir/mlruns`)"),
    ("trackio", "trackio", "TrackioTracker", "trackio", "trackio",
     "trackio local store in output_dir/trackio, or TRACKIO_DIR (`TRACKIO_DIR=output_dir/trackio trackio show`)"),
)


@hookimpl
def polyrl_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    for name, module, cls, library, extra, summary in BUILTIN_TRACKERS:
        register(TrackerSpec(name=name, create=_lazy(module, cls), summary=summary,
                             probe=_installed(library), install_hint=f"pip install 'polyrl[{extra}]'",
                             distribution="polyrl"))
