"""Running one reward call in a forked child that can be killed (``[[rewards]] isolation = "process"``).

Why: a reward thread (``polyrl.rewards.guard``) cannot be killed, and Python allows
``signal.alarm`` only on the main thread, so TRL's ``accuracy_reward`` switches math-verify's time
limits off there: one completion like ``\\boxed{(10^{10})!}`` keeps sympy busy until the reward's
``timeout_s`` and stops the run. A child made with ``os.fork()`` has the forking thread as its
main thread (CPython makes it so), so math-verify's limits work as under TRL; and a child can be
killed, so nothing keeps running after a timeout or a stop.

Why ``fork`` and not ``multiprocessing``: the child inherits the function and its arguments, so
closures, lambdas and objects that cannot be pickled work as on a thread; only the result (the
reward hook's answer: scores, plus what ``log_metric``/``log_extra`` reported) comes back, as JSON
over a pipe (never pickle: polyrl unpickles nothing; an exception comes back as its type's name and
message, which is all the error line shows). The price of fork: the child works on a copy of the process, so a reward that keeps
state across calls loses each call's changes, and one that holds torch/GPU state or runs OpenMP
code must stay on a thread (CUDA cannot be used after fork, and OpenMP after fork can deadlock).
POSIX only (``FORK_AVAILABLE``).

The child keeps stdin/stdout/stderr, its answer pipe and regular files (a reward's log, cache or
word list opened before the call), and lets go of every other inherited descriptor (``keep_files``):
the pipes of sandboxed samples other threads run (holding one kept the sample from its EOF) and
the connections of servers and collectives (a copy must not read or write them) are not the
reward's to use.

The child is no sandbox: it is the trainer's user with the trainer's privileges, so code in it
reaches every descriptor the trainer holds through ``/proc/<trainer pid>/fd`` (closing its own
copies changes nothing: ``tests/test_reward_isolation.py`` shows it), the trainer's files by
path and, as root, its memory. A reward that runs a completion's code must run it in the
``code_tests`` sandbox (``polyrl.sandbox``), never in this child or on a reward thread.

The child runs in its own process group (a terminal's Ctrl-C reaches the trainer only, which
decides, as for a thread: 5 s of grace, then the child is killed) and the whole group is killed
with SIGKILL on a timeout or a stop, then reaped; on Linux the child is also killed if the trainer
itself dies while it runs.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import stat
import sys
import time
import warnings
from collections.abc import Callable, Collection
from typing import Any, NoReturn

from polyrl.errors import RewardError
from polyrl.rewards import guard
from polyrl.rewards.trl_compat import NotScores
from polyrl.tracking.completions import plain_extra
from polyrl.types import RewardScores

FORK_AVAILABLE = hasattr(os, "fork")

_CHUNK = 1 << 16


class RewardProcessFailed(Exception):
    """The reward's child process ended without a usable answer (killed by a signal, or garbage)."""


def call_forked(fn: Callable[[], Any], *, label: str, timeout_s: float,
                should_stop: Callable[[], bool] = lambda: False, poll_s: float = 0.05,
                stop_grace_s: float | None = None, keep_fds: Collection[int] | None = None,
                keep_files: bool = False) -> Any:
    """``fn()`` in a forked child; its result (sent back as JSON data), or the errors of ``guard.call_guarded``:

    RewardCallFailed  it raised, exited (``sys.exit``/``os._exit``), crashed or sent garbage
    RewardTimedOut    it ran longer than ``timeout_s`` (the child was killed)
    RewardCancelled   ``should_stop()`` was true for ``stop_grace_s`` while it ran (killed)

    ``keep_fds``: the only descriptors ``fn`` needs besides stdin/stdout/stderr; the child lets go
    of every other one it inherited (``_release_fds``). None keeps them all. ``keep_files``: with
    ``keep_fds``, regular files stay open too (a function reward's own log, cache or word list
    opened before the call); pipes, sockets and the rest are let go all the same.
    """
    grace = guard.STOP_GRACE_S if stop_grace_s is None else stop_grace_s
    for stream in (sys.stdout, sys.stderr):  # else the child's exit would write the parent's buffer again
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream is not this call's problem
            pass
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns on fork in a threaded process: the child execs nothing
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(fn, write_fd, parent, None if keep_fds is None else {*keep_fds, write_fd}, keep_files)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)  # also done by the child: whichever runs first
    except OSError:
        pass
    status: int | None = None
    try:
        watch = guard.CallWatch(label, timeout_s, should_stop, grace, fate=" (its process was killed)")
        data, status = _wait(pid, read_fd, watch, poll_s)
    finally:
        os.close(read_fd)
        if status is None:
            _kill(pid)
    return _answer(data, status)


def _wait(pid: int, fd: int, watch: guard.CallWatch, poll_s: float) -> tuple[bytes, int]:
    """The child's bytes and wait status, reading as it writes (a large answer fills the pipe)."""
    chunks: list[bytes] = []
    eof = False
    with selectors.DefaultSelector() as selector:  # not select.select: an fd past 1023 is fine
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if eof:
                time.sleep(poll_s)
            elif selector.select(poll_s):
                chunk = os.read(fd, _CHUNK)
                chunks.append(chunk)
                eof = not chunk
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                while not eof and selector.select(0):  # the rest (a process it started may hold the pipe)
                    chunk = os.read(fd, _CHUNK)
                    chunks.append(chunk)
                    eof = not chunk
                return b"".join(chunks), status
            watch.check()


def _kill(pid: int) -> None:
    """SIGKILL the child's process group (the child alone if it has none yet), then reap it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _answer(data: bytes, status: int) -> Any:
    if not data:
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = str(number)
            raise guard.RewardCallFailed(RewardProcessFailed(f"its process was killed by {name} before it "
                                                             "answered"))
        raise guard.RewardCallFailed(guard.RewardExit(os.waitstatus_to_exitcode(status)))
    try:
        message = json.loads(data)
        kind = message["kind"]
    except Exception as exc:  # noqa: BLE001 - anything unreadable is the reward's error
        raise guard.RewardCallFailed(RewardProcessFailed(
            f"its process sent back {len(data)} unreadable bytes ({type(exc).__name__})")) from None
    if kind == "ok" and "answer" in message:
        return _from_wire(message["answer"])
    if kind == "raised":
        raise guard.RewardCallFailed(_exception(message))
    raise guard.RewardCallFailed(RewardProcessFailed(f"its process sent back an unknown answer {kind!r}"))


def _to_wire(answer: Any) -> Any:
    """The reward hook's answer (``{name: scores}``, scores a list or ``RewardScores``) as JSON data;
    numpy scalars (a reward's ``log_extra`` values) as numbers. TypeError for anything else."""
    def plain(value: Any) -> Any:
        item = getattr(value, "item", None)
        if callable(item) and getattr(value, "shape", None) == ():
            return item()
        raise TypeError(f"{type(value).__name__} is not JSON data")

    if isinstance(answer, dict):
        answer = {name: {"scores": list(v), "metrics": v.metrics, "extra": _extra_to_wire(v.extra),
                         "metric_counts": v.metric_counts}
                  if isinstance(v, RewardScores) else {"not_scores": v.what} if isinstance(v, NotScores) else v
                  for name, v in answer.items()}
    return json.loads(json.dumps({"answer": answer}, default=plain))["answer"]


def _extra_to_wire(extra: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The ``log_extra`` columns as the completions log holds them (``tracking.completions``: an
    object JSON cannot hold is its repr there). Why: a math-verify reward, run here by default,
    that logged math-verify's parsed answers (sympy objects) as they are, as TRL's table takes
    them, failed with "its answer could not be sent back", where the same reward on a thread ran."""
    return {column: [plain_extra(value) for value in values] for column, values in extra.items()}


def _from_wire(answer: Any) -> Any:
    if not isinstance(answer, dict):
        return answer
    return {name: RewardScores(v["scores"], metrics=v["metrics"], extra=v["extra"], metric_counts=v["metric_counts"])
            if isinstance(v, dict) and set(v) == {"scores", "metrics", "extra", "metric_counts"}
            else NotScores(str(v["not_scores"])) if isinstance(v, dict) and set(v) == {"not_scores"} else v
            for name, v in answer.items()}


def _exception(message: dict[str, Any]) -> BaseException:
    """What the child raised, rebuilt from its name and message: the classes the reward error
    line treats apart (``sys.exit``, ``os._exit``, a ``RewardError`` with its fix) as themselves,
    any other as an exception of the same name."""
    name, text, code = str(message.get("type")), str(message.get("text")), message.get("code")
    if name == "SystemExit":
        return SystemExit(code)
    if name == "RewardExit" and isinstance(code, int):
        return guard.RewardExit(code)
    if message.get("reward_error"):
        return RewardError(text)
    return type(name, (Exception,), {})(text)


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel SIGKILLs this child when the thread that forked it ends (a trainer that
    is killed itself leaves no reward running). Elsewhere the parent's kill on timeout/stop is all."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: no libc prctl to call
        return
    if os.getppid() != parent:  # it died before the prctl took hold
        guard.real_exit(1)


def _release_fds(keep: Collection[int], keep_files: bool = False) -> None:
    """Let go of every inherited descriptor but stdin/stdout/stderr and ``keep`` (and, with
    ``keep_files``, regular files: ``call_forked`` says why). Why: the fork
    copies the whole descriptor table, with the pipes of every sandboxed sample other threads run
    at that moment; holding a sample's stdin kept the EOF that ends it from coming, so it was killed
    and its printed output lost (the python tool answered "" for a program that printed), 0.5 s
    later. Each is pointed at /dev/null (``dup2``), not closed: an object of the parent that owns
    the number may still close it, and must not close a descriptor this child opened later."""
    try:
        numbers = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc (macOS): the descriptors a process usually has
        numbers = list(range(3, min(os.sysconf("SC_OPEN_MAX"), 4096)))
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for number in numbers:
            if number <= 2 or number == null or number in keep:
                continue
            try:
                mode = os.fstat(number).st_mode  # open? (the listing's own descriptor is closed by now)
                if keep_files and stat.S_ISREG(mode):
                    continue
                os.dup2(null, number)
            except OSError:
                pass
    finally:
        os.close(null)


def _child(fn: Callable[[], Any], fd: int, parent: int, keep_fds: Collection[int] | None = None,
           keep_files: bool = False) -> NoReturn:
    """Run ``fn`` on this (the child's main) thread, send its answer, exit without cleanup."""
    code = 0
    # The objects the trainer holds stay where they are: the collector in this copy would write
    # to each one's header and so copy its page, duplicating the trainer's whole heap in this
    # process (hundreds of MB for each sample's tests, which no address-space cap sees).
    gc.freeze()
    try:
        if keep_fds is not None:
            _release_fds(keep_fds, keep_files)
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        _die_with_parent(parent)
        payload: dict[str, Any]
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, which reports it
            payload = _raised(exc)
        else:
            try:
                payload = {"kind": "ok", "answer": _to_wire(result)}
            except Exception as exc:  # noqa: BLE001 - the answer holds something that cannot be sent
                payload = _raised(RewardProcessFailed(
                    f"its answer could not be sent back ({type(exc).__name__}: {exc})"))
        try:
            data = json.dumps(payload).encode()
        except Exception as exc:  # noqa: BLE001 - the answer holds something that cannot be sent
            data = json.dumps(_raised(RewardProcessFailed(
                f"its answer could not be sent back ({type(exc).__name__}: {exc})"))).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        for stream in (sys.stdout, sys.stderr):  # what the reward printed
            stream.flush()
    except BaseException:  # noqa: BLE001 - the parent sees no answer: an error naming the exit code
        code = 70
    finally:
        guard.real_exit(code)


def _raised(exc: BaseException) -> dict[str, Any]:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        text = repr(type(exc))
    code = exc.code if isinstance(exc, (SystemExit, guard.RewardExit)) else None
    if code is not None and not isinstance(code, (int, str)):
        code = str(code)
    return {"kind": "raised", "type": type(exc).__name__, "text": text, "code": code,
            "reward_error": isinstance(exc, RewardError)}
