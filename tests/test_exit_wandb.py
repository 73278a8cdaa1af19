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


#: Both ends of W&B at once: polyrl's thread (``wandb.teardown``) and W&B's own atexit hook, which
#: calls its ``ServiceConnection.teardown`` directly. Slowed here as a busy machine or a slow disk
#: slows them, so the two overlap, ``first``'s entering the teardown ahead of the other's.
OVERLAP = textwrap.dedent("""
    import atexit, os, sys, threading, time
    os.environ["WANDB_SILENT"] = "true"
    import wandb
    from wandb.sdk import wandb_setup
    from wandb.sdk.lib.service import service_connection
    from polyrl import cli

    first, limit = sys.argv[2], float(sys.argv[3])

    def ours():
        return threading.current_thread().name == "polyrl-exit-wandb"

    if first == "hook":  # polyrl's thread gets to W&B after W&B's hook is in its teardown
        teardown = wandb.teardown

        def late(*args, **kwargs):
            time.sleep(0.8)
            return teardown(*args, **kwargs)

        wandb.teardown = late
    else:  # the teardown takes a while; the hook comes in while polyrl's is in it
        original = service_connection.ServiceConnection.teardown

        def slowed(self, exit_code):
            time.sleep(0.8)
            return original(self, exit_code)

        service_connection.ServiceConnection.teardown = slowed
    run = wandb.init(project="p", dir=sys.argv[1], mode="offline",
                     settings=wandb.Settings(console="off", x_disable_stats=True))
    if first == "polyrl":
        atexit.register(time.sleep, 0.3)  # runs before W&B's hook (last in, first out)
    else:
        connection = wandb_setup.singleton()._connection
        unhook = connection._cleanup

        def slow_unhook():  # the hook's teardown, once in, takes longer than the exit waits
            unhook()
            if not ours():
                time.sleep(5)

        connection._cleanup = slow_unhook
    for step in range(1, 2001):
        run.log({"loss": float(step)}, step=step)
    cli._run_exit_handlers(limit)
    os._exit(0)
""")


def _overlapping(tmp_path: Path, first: str, limit: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "overlap.py"
    script.write_text(OVERLAP)
    result = subprocess.run([sys.executable, str(script), str(tmp_path), first, str(limit)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    return result, run_file


def test_wandbs_atexit_hook_beside_polyrls_teardown_ends_the_run_once_without_a_traceback(tmp_path):
    """polyrl's thread tears W&B down while W&B's atexit hook does too: W&B's teardown sets its
    flag without a lock and raises "Already torn down." to the later call, so the program left
    printing that AssertionError's traceback ("Exception ignored in atexit callback"). The later
    call now waits for the first and answers as it did: one end, every step written."""
    result, run_file = _overlapping(tmp_path, "polyrl", 10.0)
    assert "Traceback" not in result.stderr and "Already torn down" not in result.stderr, result.stderr
    kinds = _records(run_file)
    assert kinds["history"] == 2000 and kinds["exit"] == 1


def test_wandbs_own_teardown_still_running_at_the_limit_is_warned_of(tmp_path):
    """W&B's atexit hook enters the teardown first and is still in it when the exit's time is up.
    polyrl's thread got "Already torn down." at once and ended, so the exit took W&B as finished:
    no warning, and the program left while W&B still wrote its run (its last records lost). The
    thread now waits for that teardown, and the warning says what is lost."""
    result, run_file = _overlapping(tmp_path, "hook", 1.5)
    assert "warning: W&B did not finish within 1.5 s" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
