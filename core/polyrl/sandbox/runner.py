"""``Sandbox``: start one sample under the chosen isolation, run the tests against it, clean up."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from polyrl import sandbox_hidden
from polyrl.errors import RewardError
from polyrl.logs import get_logger
from polyrl.rewards import forked, guard
from polyrl.sandbox import (isolation, leftovers, memfd_filter, process_tree, program_cases, scratch, server_code,
                            tests_analysis, tests_guard, uids)
from polyrl.sandbox.isolation import STRONG_LEVELS
from polyrl.sandbox.channel import Channel, SampleStopped
from polyrl.sandbox.harness import Session, run_tests
from polyrl.sandbox import tests_header
from polyrl.sandbox.tests_analysis import Analysis
from polyrl.sandbox.remote_exceptions import exception_parts, exception_text
from polyrl.sandbox.values import ProtocolError

log = get_logger("polyrl.sandbox")

#: Environment variable set in every sample's process, to the id of the process that started the
#: sandbox: leftovers are found by it, and told apart from another trainer's samples on the machine.
MARKER_ENV = "POLYRL_SANDBOX"
#: Most inherited descriptors a sample's report is believed about (the list is the sample's to forge).
MAX_REPORTED_FDS = 64
#: Where the tests run: "process" (a forked copy of the trainer, killed at the sample's deadline)
#: or "trainer" (this process: no fork per sample, but a C call on a sample's value holds it).
TESTS_IN = ("process", "trainer")
#: Seconds past the sample's deadline before the tests' process is killed (their Python lines stop
#: at the deadline themselves and report "timeout"; the kill is for a C call that does not return).
TESTS_KILL_GRACE_S = 1.0
#: The least address space the tests' copy may add over the trainer's, whatever ``memory_mb`` (the
#: sample's limit) is: a tight limit on samples made the dataset's own tests fail with MemoryError
#: (a reference solution's list of a few million ints at memory_mb = 64), silently scoring 0.
TESTS_MIN_MEMORY_MB = 1024

_HERE = Path(__file__).parent
#: ``memfd_filter``'s program for this machine (hex), which the server loads where the full filter is off.
_MEMFD_HEX = (memfd_filter.program() or b"").hex() or None
#: The same at the ``off`` level, also refusing the calls that change what a path names (renames,
#: links, ``chdir``, mounts): there the audit hook's path checks are the only wall, and they raced.
_OFF_HEX = (memfd_filter.program(paths=True) or b"").hex() or None
#: The same where the audit hook judges paths strictly (``off`` with the hook on): ``rename`` and
#: ``chdir`` allowed, the hook keeping them in the sample's folder (``memfd_filter``).
_OFF_HOOKED_HEX = (memfd_filter.program(paths=True, renames=True) or b"").hex() or None
#: Where ``pandas_values.py``'s part the sample runs too begins (its imports above are the trainer's).
_SHARED_MARK = "# ---- shared with the sample's program from here (runner.SERVER_SOURCE) ----\n"
#: The program the sample's interpreter runs: the value encoder, pandas values' (``pandas_values``), then the server loop.
SERVER_SOURCE = ((_HERE / "values.py").read_text() + "\n\n"
                 + (_HERE / "pandas_values.py").read_text().split(_SHARED_MARK, 1)[1] + "\n\n"
                 + (_HERE / "server.py").read_text())


@attrs.define(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0
    cpu_s: int | None = None  # None -> ceil(timeout_s) + 1
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_open_files: int = 64
    max_processes: int = 16
    max_output_bytes: int = 65536
    disk_mb: int = 64

    def for_server(self) -> dict[str, int]:
        return {
            "cpu_s": int(self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1),
            "memory_bytes": int(self.memory_mb) * 1024 * 1024,
            "file_size_bytes": int(min(self.file_size_mb, self.disk_mb)) * 1024 * 1024,
            "max_open_files": int(self.max_open_files),
            "max_processes": int(self.max_processes),
        }


@attrs.define
class SandboxResult:
    """What one sample gave: ``status`` is "ok" (ran; ``passed`` per test), "error" (the solution
    or setup raised: every test failed), "timeout", "output_limit" or "crashed" (ended, or broke
    the protocol, before the tests were done). ``consulted`` False: the tests never looked at the
    sample (no request to it, no plain value of its read), so their passes count for nothing."""

    status: str
    passed: list[bool] = attrs.field(factory=list)
    error: str | None = None
    output: str = ""
    returncode: int | None = None
    duration_s: float = 0.0
    inherited_fds: list[int] = attrs.field(factory=list)
    consulted: bool = True

    @property
    def fraction(self) -> float:
        if self.status not in ("ok", "error") or not self.passed or not self.consulted:
            return 0.0
        return sum(self.passed) / len(self.passed)

    @property
    def all_passed(self) -> bool:
        return self.status == "ok" and bool(self.passed) and all(self.passed) and self.consulted


class Sandbox:
    """Runs a solution in an isolated process and its tests here (see ``polyrl.rewards.code``)."""

    def __init__(self, limits: SandboxLimits | None = None, *, python: str | None = None,
                 isolation: str = "auto", user: Any = "auto", audit_hook: bool = True,
                 tests_in: str = "process") -> None:
        if tests_in not in TESTS_IN:
            raise ValueError(f"tests_in must be one of {TESTS_IN}, got {tests_in!r}")
        self.limits = limits or SandboxLimits()
        self.python = python or sys.executable
        self.audit_hook = bool(audit_hook)
        self.tests_forked = tests_in == "process" and forked.FORK_AVAILABLE
        self.launch = _choose(isolation, user, self.python, self.limits.disk_mb)
        #: what ``launch`` was chosen for, and the run's folders to hide then (``_hide_new_folders``)
        self._choice = (isolation, user, self.python, self.limits.disk_mb)
        self._hidden = sandbox_hidden.state()
        uncounted = os.geteuid() == 0 and self.launch.ids is None and not self.launch.uid_pool  # real uid 0
        rlimits = ("on: CPU, address space, file size, open files, core, POSIX message queues, queued signals, "
                   "real-time and nice priority (0: no raising its own); processes ") + (
            "(not enforced: root)" if uncounted else "on") + (
            "; out of memory, samples die first (oom_score_adj 1000)" if self.launch.oom
            else "; oom_score_adj: off (no choom), the trainer may be the OOM killer's choice") + (
            "; I/O priority: best-effort, lowest level (ionice -c 2 -n 7)" if self.launch.io
            else "; I/O priority: the trainer's (no ionice)")
        self.report = {**self.launch.report,
                       "audit_hook": "on" if self.audit_hook else "off (audit_hook = false)",
                       "tests": (f"in a forked copy of the trainer: killed {TESTS_KILL_GRACE_S:g} s past the sample's "
                                 f"deadline, address space capped at max(memory_mb, {TESTS_MIN_MEMORY_MB}) MB over "
                                 "the trainer's") if self.tests_forked
                       else "in the trainer's process (" + ("tests_in = \"trainer\"" if tests_in == "trainer"
                                                            else "no fork on this platform") +
                       "): a C call on a value the sample returns runs until it returns",
                       "rlimits": rlimits,
                       "timeout": f"on: {self.limits.timeout_s:g} s wall clock, then SIGKILL to the sample's "
                                  "process group" + (" and PID namespace" if self.launch.level != "off" else "")}
        self._small_filter = ((_OFF_HOOKED_HEX if self.audit_hook else _OFF_HEX) if self.launch.level == "off"
                              else _MEMFD_HEX) \
            if self.launch.seccomp_program is None else None
        if self._small_filter:
            if (memfd_off := memfd_filter.refused(self.python, self._small_filter)) is None:
                self.report["seccomp"] += ("; memfd_create, memfd_secret, socketpair, pidfd_send_signal and io_setup "
                                           "refused all "
                                           "the same, and openat writing relative to a folder's descriptor" + (
                                               (", links, symlinks, fchdir and mounts (off: renames and chdir "
                                                "only within the sample's folder, by paths without '..', "
                                                "so what a path names stays inside where the audit hook judged it)"
                                                if self.audit_hook else ", renames, links, symlinks, chdir and "
                                                "mounts (off: what a path names stays what the kernel opens)")
                                               if self.launch.level == "off" else "") +
                                           " (a filter of "
                                           "their own, built without libseccomp: memfd pages are memory no rlimit counts; "
                                           "the rest are what the audit hook never hears of or judges)")
            else:
                self.report["seccomp"] += (f"; memfd filter OFF ({memfd_off}): memfd_create is open, a sample holds "
                                           "up to max_open_files x file_size_mb in memfds, memory no rlimit counts, "
                                           "socketpair makes sockets, pidfd_send_signal signals the trainer's "
                                           "uid's processes and openat writes relative to a folder's descriptor, "
                                           "which the audit hook never hears of or judges")
        if uncounted:
            log.warning("code sandbox: samples run with real uid 0, which max_processes (RLIMIT_NPROC) never binds: "
                        "a sample's threads are bounded by memory_mb only", user=self.report["user"],
                        fix="user = \"auto\", or bubblewrap with the seccomp filter (then a root sample's real uid "
                            "is one of the pool's)")
        if self.launch.level not in STRONG_LEVELS and isolation == "weak":
            log.warning("code sandbox runs without full OS isolation (isolation = \"weak\"): samples may read the "
                        "trainer's files" + ("" if self.launch.private_tmp else " and write its run folder"),
                        isolation_level=self.launch.level,
                        why=self.report["isolation"], filesystem=self.report["filesystem"])
        if self.launch.level == "bwrap" and not self.launch.wrapper:
            log.warning("code sandbox: the sample's network namespace has the host's TCP settings (buffers "
                        "autotuned up to tcp_wmem's maximum, long accept queues): kernel memory no rlimit counts",
                        isolation=self.report["isolation"])
        if self.launch.level == "bwrap" and self.launch.seccomp_program is None:
            log.warning("code sandbox runs without its seccomp filter: a sample can fork and hold max_processes x "
                        "memory_mb; isolation = \"require\" refuses this", seccomp=self.report["seccomp"],
                        fix="install libseccomp (apt-get install libseccomp2) and the pyseccomp package")

    @property
    def level(self) -> str:
        return self.launch.level

    def _hide_new_folders(self) -> None:
        """Choose the launch again where the run's folders to hide changed since (``sandbox_hidden``):
        the setup check built this sandbox before the run made its output_dir, which could not be
        hidden while it did not exist."""
        if (hidden := sandbox_hidden.state()) != self._hidden:
            self.launch = _choose(*self._choice)
            self._hidden = hidden
            self.report["filesystem"] = self.launch.report["filesystem"]

    def run(self, code: str, steps: Sequence[tuple[str, bool]], setup: str = "") -> SandboxResult:
        """Run the sample and its tests; once more where bubblewrap stopped before the sample ran
        because a dataset file it was to cover had vanished (``isolation.covers_gone``)."""
        result = self._run_once(code, steps, setup)
        if result.status == "crashed" and (gone := isolation.covers_gone(self.launch, result.output)):
            log.info("code sandbox: a dataset file to cover vanished as the sample started; starting it again",
                     files=gone[:4])
            result = self._run_once(code, steps, setup)
            if result.status == "crashed" and (gone := isolation.covers_gone(self.launch, result.output)):
                result.error = (f"code sandbox: bubblewrap could not cover the run's dataset files {', '.join(gone[:4])}: "
                                "they vanished as the sample started, twice; the sample did not run")
        return result

    def _run_once(self, code: str, steps: Sequence[tuple[str, bool]], setup: str = "") -> SandboxResult:
        t0 = time.monotonic()
        self._hide_new_folders()
        folder = home = None  # the trainer's folder holding the sample's home, where /tmp is not its own
        seccomp_r = args_fd = -1
        uid = None
        try:
            uid = uids.acquire() if self.launch.uid_pool else None
            if uid is not None and not self.launch.private_tmp:
                _remove_leftovers(uid)  # of a trainer killed mid-sample (it could not clean up after its own)
            if self.launch.wrapper:
                isolation.ensure_mount_dir(self.launch.wrapper[-1])
            if not self.launch.private_tmp:  # a pooled uid's gid is its own number
                folder, home = scratch.make((uid, uid) if uid is not None else self.launch.ids)
            env = {**isolation.sandbox_env(home or isolation.SANDBOX_HOME), MARKER_ENV: str(os.getpid())}
            pass_fds: tuple[int, ...] = ()
            if self.launch.seccomp_program is not None and self.launch.level == "bwrap":  # unshare's: the setup's
                seccomp_r, w = os.pipe()
                os.write(w, self.launch.seccomp_program)  # a few hundred bytes: fits the pipe
                os.close(w)
                pass_fds = (seccomp_r,)
            framed = server_code.framed(self.python, SERVER_SOURCE) is not None  # sent ahead of the job (``_talk``)
            python_args = ["-I", "-S", "-B", "-c", server_code.BOOTSTRAP if framed else SERVER_SOURCE]
            argv = self.launch.argv(python_args, seccomp_r if pass_fds else None, uid)
            if self.launch.level == "bwrap":  # right after bwrap itself
                at = len(self.launch.oom) + len(self.launch.io) + len(self.launch.userns) + len(self.launch.wrapper) + 1
                argv[at:at] = ["--setenv", MARKER_ENV, env[MARKER_ENV]]
                end = len(argv) - len(self.launch.suffix) - 1 - len(python_args)  # bubblewrap's options end
                args_fd = isolation.options_fd(argv[at:end])
                if args_fd >= 0:
                    argv[at:end] = ["--args", str(args_fd)]
                    pass_fds += (args_fd,)
            try:
                proc = subprocess.Popen(argv, cwd=home or tempfile.gettempdir(), env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        close_fds=True, pass_fds=pass_fds, start_new_session=True)
            except OSError as exc:
                raise RewardError(f"code_tests: cannot start {argv[0]!r}: {exc}. Fix: set options.python to a "
                                  "working interpreter, or isolation = \"off\"") from exc
            finally:
                if seccomp_r >= 0:
                    os.close(seccomp_r)
                if args_fd >= 0:
                    os.close(args_fd)
            channel = Channel(proc, t0 + self.limits.timeout_s, self.limits.max_output_bytes)
            below = self.launch.level != "bwrap"  # bubblewrap's PID 1 dies with the group (_kill)
            result = None
            try:
                result = (self._talk_forked if self.tests_forked else self._talk)(channel, code, steps, setup)
            finally:
                if result is not None and result.status in ("ok", "error"):  # done: let it flush its output
                    _finish(proc, min(t0 + self.limits.timeout_s, time.monotonic() + 0.5), below)
                else:
                    _kill(proc, below)
                channel.collect_rest()
                channel.close()
                if proc.stderr is not None:
                    proc.stderr.close()
            if result.inherited_fds:  # the server closed them before the solution ran; still, something leaks them
                log.warning("descriptors beyond stdin/stdout/stderr reached a sample", fds=result.inherited_fds)
            if result.status == "crashed" and (result.error or "").startswith("harness:"):
                log.warning("code sandbox: scoring a sample raised; it scores 0", error=(result.error or "")[9:])
            result.output = channel.text()
            result.returncode = proc.returncode
            result.duration_s = time.monotonic() - t0
            return result
        finally:
            # at the off level nothing else ends a setsid daemon that left the process group (at the
            # others the PID namespace did: _kill waited for it); first, so nothing writes the folder below
            clean = _kill_uid(uid, uid) if uid is not None and self.launch.level == "off" else True
            if folder is not None and not leftovers.remove_tree(folder):  # before the uid's leftovers
                log.error("could not remove a sample's folder; its uid is not given out again", folder=folder)
                clean = False
            if uid is not None:
                gid = uid  # a pooled sample's gid is its uid's number (isolation._pooled)
                if not self.launch.private_tmp:  # host folders and IPC: the next sample with this uid sees them
                    clean = _remove_leftovers(uid) and clean
                if clean and not leftovers.clear_keys(uid, gid):
                    log.error("could not empty a sample's kernel keyrings; its uid is not given out again", uid=uid)
                    clean = False
                if clean:  # else this process keeps the uid, so no later sample on the host gets it
                    uids.release(uid)

    def _talk(self, channel: Channel, code: str, steps: Sequence[tuple[str, bool]], setup: str,
              analysis: Analysis | None = None) -> SandboxResult:
        session = Session(channel)
        try:
            if (framed := server_code.framed(self.python, SERVER_SOURCE)) is not None:
                channel.send_bytes(framed)  # the compiled server its ``BOOTSTRAP`` waits for
            hello = channel.ask({"code": code, "setup": setup or "",
                                 # the tests' node classes and imports: the sample runs those its code reads
                                 "header": [] if program_cases.is_program(steps) else tests_header.statements(steps),
                                 "limits": self.limits.for_server(),
                                 "audit": self.audit_hook, "site": list(self.launch.site_dirs),
                                 "native": self.launch.level == "bwrap",
                                 # off: renames and chdir allowed, the hook judges their paths strictly
                                 "strict": self.launch.level == "off" and self.audit_hook,
                                 # stdin/stdout cases: the program runs per case, on its input, not first
                                 "program": program_cases.is_program(steps),
                                 # without the filter keyctl is open: the sample leaves the trainer's session keyring
                                 "keyring": leftovers.keyctl_number() if self.launch.seccomp_program is None else None,
                                 "memfd": self._small_filter})
            fds = hello.get("fds")  # every field of the hello is the sample's to forge: bounded
            fds = [fd for fd in fds[:MAX_REPORTED_FDS] if type(fd) is int and 0 <= fd < 1 << 20] \
                if isinstance(fds, list) else []
            if hello.get("ok") is not True:
                error = ": ".join(exception_parts(hello.get("exc")))
                return SandboxResult("error", [False] * sum(1 for _, t in steps if t), error=error, inherited_fds=fds)
            passed, consulted = run_tests(session, hello, steps, setup, analysis)
            return SandboxResult("ok", passed, inherited_fds=fds, consulted=consulted)
        except SampleStopped as stop:
            return SandboxResult(stop.status, error=stop.detail or None)
        except ProtocolError as exc:
            return SandboxResult("crashed", error=f"protocol: {exc}")
        except KeyboardInterrupt:
            raise  # the person at the keyboard: a sample's answer cannot raise it (Session._decoded)
        except BaseException as exc:  # noqa: BLE001 - a sample must cost its score, never the run
            return SandboxResult("crashed", error=f"harness: {exception_text(exc)}")


    def _talk_forked(self, channel: Channel, code: str, steps: Sequence[tuple[str, bool]],
                     setup: str) -> SandboxResult:
        """``_talk`` in a forked copy of this process. Why: the tests compute on values the sample
        chose, and one C call on such a value (``sum(range(f(x)))``, ``[0] * f(x)``) cannot be
        stopped from Python: in the trainer it held the step (or its memory) for as long as the
        sample wanted. The copy is killed past the deadline and its address space is capped at
        ``memory_mb`` over the trainer's; only the verdict and the sample's output come back."""
        allowance = max(self.limits.memory_mb, TESTS_MIN_MEMORY_MB) * 1024 * 1024
        try:  # here, once per distinct tests, so every copy inherits it (``tests_analysis``)
            analysis: Analysis | None = tests_analysis.analysed(steps, setup)
        except Exception:  # noqa: BLE001 - the copy finds it again and fails there, costing this sample only
            analysis = None

        def work() -> dict[str, Any]:
            channel.renew_selector()
            _cap_address_space(allowance)
            tests_guard.install([setup, *(source for source, _ in steps)])  # this copy only: it ends with the verdict
            # never ``analysed`` here: its lock may have been held by another thread at the fork
            found = analysis if analysis is not None else tests_analysis.analyse(steps, setup)  # raises again: this sample crashes
            result = self._talk(channel, code, steps, setup, found)
            return {"status": result.status, "passed": result.passed, "error": result.error,
                    "consulted": result.consulted,
                    "fds": result.inherited_fds, "output": bytes(channel.output).decode("latin-1"),
                    "err_open": channel.err_open}

        wait = max(0.0, channel.deadline - time.monotonic()) + TESTS_KILL_GRACE_S
        try:
            answer = forked.call_forked(work, label="code_tests", timeout_s=wait, poll_s=0.002,
                                        keep_fds=(channel.to_fd, channel.from_fd, channel.err_fd))
        except guard.RewardTimedOut:
            return SandboxResult("timeout", error="the tests ran past timeout_s on the sample's values "
                                                  "(their process was killed)")
        except guard.RewardCallFailed as exc:  # it died (a signal, the kernel) or could not send its verdict
            return SandboxResult("crashed", error=f"harness: {exception_text(exc.cause)}")
        channel.output[:] = answer["output"].encode("latin-1")
        channel.err_open = bool(answer["err_open"])
        return SandboxResult(str(answer["status"]), [bool(p) for p in answer["passed"]], error=answer["error"],
                             inherited_fds=list(answer["fds"]), consulted=bool(answer["consulted"]))


def _cap_address_space(extra_bytes: int) -> None:
    """Limit this (forked) process to its current address space plus ``extra_bytes``: a test's
    ``[0] * f(x)`` then raises MemoryError here instead of taking the trainer's memory. Linux only
    (elsewhere /proc/self/statm is missing and the kill at the deadline is the bound)."""
    import resource

    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + extra_bytes if hard == resource.RLIM_INFINITY else min(size + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _finish(proc: subprocess.Popen, until: float, below: bool = True) -> None:
    """Close the sample's input (it flushes its output and exits), wait a moment, then kill."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=max(0.0, until - time.monotonic()))
    except (OSError, subprocess.TimeoutExpired):
        pass
    _kill(proc, below)


def _kill(proc: subprocess.Popen, below: bool = True) -> None:
    """SIGKILL to the whole process group of the one started and, with ``below``, to every process
    below it (``process_tree``: at the ``unshare`` level the sample's PID 1 had left the group and
    outlived ``unshare``), and wait until they are gone (what they forked dies with its PID
    namespace, the off level's pooled uid with ``_kill_uid``). Not ``below`` under bubblewrap,
    whose PID 1 stays in the group (a /proc scan per sample saved), nor once the one started has
    ended and been reaped (``_finish``'s wait): what it left is another's child by then, and its
    pid may name an unrelated process, whose children the scan would have killed."""
    # before the group's kill: then unshare's child is another's
    held = process_tree.hold(proc.pid) if below and proc.poll() is None else {}
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if left := process_tree.kill(held):
        log.error("a sample's process did not die", pids=left[:16])
    try:
        proc.wait(timeout=10)  # our child (bwrap, or the interpreter): reaped here
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        log.error("sandboxed process did not die", pid=proc.pid)
    end = time.monotonic() + 2.0
    while time.monotonic() < end and _alive_in_group(proc.pid):
        time.sleep(0.002)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


#: Rounds of ``_kill_uid`` before it gives up on a uid (then the pool skips it while anything of it runs).
KILL_UID_ROUNDS = 5


def _kill_uid(uid: int, gid: int) -> bool:
    """End every process of ``uid``, a pooled sample's own (``polyrl.sandbox.uids``); whether none
    is left. Each round, this (root) process SIGKILLs each one it finds in /proc: a sample can
    neither stop nor trace root. Then a helper that is ``uid`` itself sends ``kill(-1)``, which
    reaches exactly that uid's processes at once, children forked since the scan too. The helper
    alone was not enough: a daemon that sends SIGSTOP to every process of its uid in a loop
    stopped it before its ``kill`` (the trainer waited 10 s, the daemon ran on and the uid went
    to the next sample), and it is the root sweep before it that ends such a daemon."""
    setpriv, kill = shutil.which("setpriv"), shutil.which("kill", path="/usr/bin:/bin")  # never the trainer's PATH
    for _ in range(KILL_UID_ROUNDS):
        pids = uids.processes(uid)
        if not pids:
            return True
        for pid in pids:
            _sigkill(pid, uid)
        if setpriv is not None and kill is not None:
            try:
                subprocess.run([setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
                                kill, "-KILL", "-1"], timeout=2, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"},
                               cwd="/")
            except (OSError, subprocess.SubprocessError):
                pass  # stopped or refused: the next round's sweep kills it and what it was after
        time.sleep(0.01)
    left = uids.processes(uid)
    if left:
        log.error("could not kill what a sample left running; its uid stays out of the pool while it runs",
                  uid=uid, pids=left[:16])
    return not left


def _remove_leftovers(uid: int) -> bool:
    """``leftovers.remove``, logged; whether all of it went (a failure never costs the sample's
    result: its uid is kept out of the pool instead)."""
    try:
        removed, failed = leftovers.remove(uid)
    except (OSError, subprocess.SubprocessError) as exc:
        removed, failed = [], [str(exc)]
    if removed:
        log.info("removed what a sample left on the host", uid=uid, count=len(removed), first=removed[:4])
    if failed:
        log.error("could not remove what a sample left on the host; its uid is not given out again",
                  uid=uid, left=failed[:4])
    return not failed


def _sigkill(pid: int, uid: int) -> None:
    """SIGKILL ``pid`` if it (still) runs with ``uid``: through a pidfd, so a pid reused between
    the scan and the signal is never hit (os.kill where the kernel has no pidfds)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        if uid in (uids.status_uids(str(pid)) or ()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return
    try:
        if uid in (uids.status_uids(str(pid)) or ()):  # the process the pidfd holds, checked after opening it
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def _alive_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (zombies waiting for the host's init to
    reap them do not count: they hold nothing)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


_launches: dict[tuple[Any, ...], isolation.Launch] = {}
_launch_lock = threading.Lock()


def _choose(level: str, user: Any, python: str, disk_mb: int) -> isolation.Launch:
    key = (level, str(user), python, disk_mb, sandbox_hidden.state())
    with _launch_lock:
        if key not in _launches:
            _launches[key] = isolation.choose(level, user, python, disk_mb)
        return _launches[key]


def refusal(limits: SandboxLimits | None = None, *, python: str | None = None, isolation: str = "auto",
            user: Any = "auto") -> str | None:
    """Why a ``Sandbox`` with these options is refused here (the RewardError building it raises), or
    None. The same check, cached: a listing (``polyrl environments``) says what setup would refuse."""
    try:
        _choose(isolation, user, python or sys.executable, (limits or SandboxLimits()).disk_mb)
    except RewardError as exc:
        return str(exc)
    return None


def isolation_report(**options: Any) -> dict[str, str]:
    """Which isolation layers a ``Sandbox`` with these options gets on this machine, and why."""
    return Sandbox(**options).report
