"""A stop signal never deadlocks the process it stops.

The trainer's SIGINT/SIGTERM handler logged "stop requested" itself. A handler runs on the main
thread between two bytecodes, and structlog's per-file write lock is not re-entrant: a signal
landing while the main thread was writing a log line blocked the handler on a lock its own thread
held, forever. Under ``polyrl launch`` that was a rank torchrun had to SIGKILL after 30 s, with
no checkpoint, and its peer's "Connection reset by peer" as the run's error.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time, types

    import structlog
    from structlog._output import _get_lock_for_file

    from polyrl.logs import configure
    from polyrl.trainer import Trainer

    configure()
    lock = _get_lock_for_file(structlog.get_config()["logger_factory"]._file)
    fake = types.SimpleNamespace(stop_requested=False, _phase="step 0")
    with Trainer._graceful_signals(fake):
        with lock:  # the main thread mid-write, as when it logs a step line
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here
            print("handler returned", fake.stop_requested, flush=True)
    # the deferred line is written once the lock is free, by a short thread: wait for it to end (a
    # fixed 0.5 s was outlived by a starved thread, and the process exited without the line)
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(30)
""")


@pytest.mark.faults
def test_a_stop_signal_during_a_log_write_neither_deadlocks_nor_loses_the_message():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "handler returned True"
    assert "stop requested" in done.stderr and "SIGTERM" in done.stderr
