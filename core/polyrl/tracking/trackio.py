"""trackio: Hugging Face's local-first tracker; its SQLite store goes under ``output_dir/trackio``
(``TRACKIO_DIR`` when set), viewed with ``trackio show``. Completions are a ``trackio.Table``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.tracking.completions import COLUMNS, cell
from polyrl.tracking.spec import TrackerContext

STORE_DIR = "trackio"


class TrackioTracker:
    def __init__(self, context: TrackerContext) -> None:
        os.environ.setdefault("TRACKIO_DIR", str((context.output_dir / STORE_DIR).resolve()))
        import trackio

        self._trackio = trackio
        self.run = trackio.init(project=context.project, name=context.run_name, config=dict(context.config),
                                embed=False, auto_log_gpu=False, auto_log_cpu=False)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        import pandas as pd

        frame = pd.DataFrame([[cell(r[c]) for c in COLUMNS] for r in records], columns=list(COLUMNS))
        self.run.log({"completions": self._trackio.Table(dataframe=frame)}, step=step)

    def close(self) -> None:
        self.run.finish()
