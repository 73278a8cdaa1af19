"""W&B at polyrl's forced exit (``cli._run_exit_handlers``): a real offline W&B run, not finished
(its tracker's close timed out, or the run's code started it), keeps every step it logged even when
an exit handler registered after W&B's hangs past the limit. A subprocess: the exit is ``os._exit``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("wandb")

PROGRAM = textwrap.dedent("""
    import atexit, os, sys, time
    os.environ["WANDB_SILENT"] = "true"
    import wandb
    from polyrl import cli

    run = wandb.init(project="p", dir=sys.argv[1], mode="offline",
                     settings=wandb.Settings(console="off", x_disable_stats=True))
    for step in range(1, 2001):
        run.log({"loss": float(step)}, step=step)
    atexit.register(time.sleep, 60)  # a handler that hangs, run before W&B's own (atexit: last in, first out)
    cli._run_exit_handlers(3.0)
    os._exit(0)
""")


def _records(run_file: Path) -> Counter[str]:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    kinds: Counter[str] = Counter()
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kinds[record.WhichOneof("record_type")] += 1
    return kinds


def test_a_hanging_exit_handler_does_not_cost_wandb_its_last_steps(tmp_path):
    """W&B writes its run file in 32 KiB blocks and ends the run in its atexit hook; a handler that
    hung ahead of that hook kept it from running, and the program left with the last block unwritten
    (1934 of 2000 steps, no exit record). W&B's end runs on its own thread at the exit now."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    kinds = _records(run_file)
    assert kinds["history"] == 2000  # old code: 1934, the last block lost
    assert kinds["exit"] == 1
