"""Run torchrun inside ``polyrl launch``'s own process, quietly, and end a failed run with one line.

Why in this process: torchrun's agent installs its signal handlers here, so SIGTERM/SIGINT to the
launcher reach it exactly as when the launcher replaced itself by torchrun (Slurm and Kubernetes
stop a job that way; the ranks then finish their step and checkpoint). Why quiet: torchrun's own
messages (its ChildFailedError traceback, its "failed (exitcode: 2)" table) repeat what the ranks
already said, in a wall of text. They go to ``torchrun.log`` in a folder of this launch; the
ranks keep writing to this terminal (they inherit its file descriptors, not ``sys.stderr``), and
their error lines come back through ``polyrl.launch_errors``. A run that fails prints one
``error:`` line and where the log is; a run that succeeds removes the folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from polyrl.launch_errors import ENV, OWNER_ENV, first_error, full_text, new_folder

#: The exit code of a failed run whose ranks reported an error (as ``polyrl train`` returns).
ERROR_EXIT = 2


def _stream_handlers() -> Iterator[logging.StreamHandler[Any]]:
    loggers = [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                yield handler


def _repoint(old: Any, new: TextIO) -> None:
    for handler in _stream_handlers():
        if handler.stream is old and not isinstance(type(handler).__dict__.get("stream"), property):
            handler.setStream(new)  # a handler whose stream is a property (logging's last resort) reads sys.stderr


@contextmanager
def _quiet_into(log: TextIO) -> Iterator[None]:
    """This process's Python-level stderr (and logging handlers writing to it, torch's included,
    which bind it when torch is imported in here) into ``log``; file descriptor 2, which the
    ranks inherit, stays the terminal."""
    console = sys.stderr
    _repoint(console, log)
    sys.stderr = log
    try:
        yield
    finally:
        sys.stderr = console
        _repoint(log, console)  # the log closes next: nothing may write to it after


def _torchrun(argv: list[str]) -> tuple[int, str]:
    """(exit code, what went wrong when no rank said it) of ``torchrun argv``."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(argv)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with code {failure.exitcode}")
        return 1, f"rank {rank} {how} without an error line of its own (its output above says why)"
    except SignalException as exc:
        return 128 + int(exc.sigval), f"stopped by {signal.Signals(exc.sigval).name}"
    except SystemExit as exc:  # torchrun's own argument errors
        code = exc.code if isinstance(exc.code, int) else 1
        return code, f"torchrun refused its arguments (exit code {code})"
    except Exception as exc:  # noqa: BLE001 - rendezvous or agent failures: one line, the rest in the log
        return 1, f"torchrun failed: {type(exc).__name__}: {exc}".splitlines()[0]
    return 0, ""


def run(argv: list[str]) -> int:
    """Run ``python -m torch.distributed.run argv`` here; its exit code. A failure ends with one
    ``error:`` line (the first failing rank's) and the log's path on stderr."""
    folder = new_folder()
    log_path = folder / "torchrun.log"
    console = sys.stderr
    before = {name: os.environ.get(name) for name in (ENV, OWNER_ENV, "OMP_NUM_THREADS")}
    os.environ[ENV], os.environ[OWNER_ENV] = str(folder), str(os.getpid())
    # torchrun defaults OMP_NUM_THREADS to 1 per process (with a warning); train.threads still wins
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        with open(log_path, "a", buffering=1) as log, _quiet_into(log):
            code, problem = _torchrun(argv)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if code == 0:
        shutil.rmtree(folder, ignore_errors=True)
        return 0
    said = first_error(folder)
    if said is None and code > 128:  # a stop signal: the ranks stopped after a step, with a checkpoint
        console.write(f"polyrl launch: {problem}; the ranks' output above says where they stopped "
                      f"(torchrun's own log: {log_path})\n")
        return code
    console.write(f"error: {said or problem}\n")
    if said and (full := full_text(folder)) is not None:  # the line above, as the rank raised it
        with open(log_path, "a") as log:
            log.write(f"error (full text): {full}\n")
    console.write(f"logs: the ranks' output is above; torchrun's own is in {log_path}\n")
    console.flush()
    return ERROR_EXIT if said and code == 1 else code
