"""trackio: Hugging Face's local-first tracker; its SQLite store goes under ``output_dir/trackio``
(``TRACKIO_DIR`` when set; trackio reads it once per process, at import), viewed with
``trackio show``. Completions are a ``trackio.Table``."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.tracking.completions import COLUMNS, cell
from polyrl.logs import get_logger
from polyrl.tracking.spec import TrackerContext

log = get_logger("polyrl.tracking")

STORE_DIR = "trackio"


class TrackioTracker:
    def __init__(self, context: TrackerContext) -> None:
        wanted = os.environ.setdefault("TRACKIO_DIR", str((context.output_dir / STORE_DIR).resolve()))
        import trackio
        import trackio.utils

        self._trackio = trackio
        self.store = Path(trackio.utils.TRACKIO_DIR)
        if self.store != Path(wanted):  # trackio reads TRACKIO_DIR once, when first imported
            log.warning("trackio was imported before this run chose its folder; it writes to its own",
                        store=str(self.store), fix="set TRACKIO_DIR before starting Python to choose it")
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
