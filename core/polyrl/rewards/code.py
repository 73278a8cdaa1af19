"""``code_tests``: run the completion's Python against the row's tests in a sandboxed subprocess.

The reward is the fraction of the row's tests that pass (``mode = "fraction"``) or 1/0 for all
passing or not (``mode = "binary"``). A sample that breaks a sandbox rule or limit (time, memory,
output, a forbidden operation at top level) scores 0 and costs nothing else.

Options (``[[rewards]] name = "code_tests"``); unknown options are an error:

``column``            dataset column with the tests (default "tests"): a string of Python whose
                      top-level ``assert`` statements are the tests (other statements — imports,
                      helpers — run in order between them), or a list of snippets, one test each
                      (a snippet passes when it runs without an exception). No tests -> score None.
``setup_column``      optional column of code run before the solution (e.g. imports); None
``mode``              "fraction" (default) or "binary"
``extract``           "auto" (default: the last ```python fenced block, else the last plain fence,
                      else an unterminated fence, else the raw text), "all_blocks" (every python
                      block, joined), "raw"
``timeout_s``         wall-clock limit per sample (default 5)
``cpu_s``             CPU-seconds limit (default: ceil(timeout_s) + 1)
``memory_mb``         address-space limit (default 1024)
``file_size_mb``      largest file the sample may write (default 16)
``max_open_files``    (default 64)
``max_processes``     RLIMIT_NPROC (default 16; see the table: the kernel ignores it for root)
``max_output_bytes``  stdout+stderr kept; more kills the sample, score 0 (default 65536)
``max_workers``       samples run at once (default 2)
``python``            interpreter for the sample (default: this one)
``namespaces``        "auto" (default: use ``unshare`` when it works here), "off", "require"
``user``              "auto" (default: when running as root, run the sample as ``nobody`` if that
                      user can execute ``python``), "none", or a user name / uid
``audit_hook``        true (default); false only to test the kernel layers alone

What is isolated, and how (layers are independent; ``isolation_report()`` says which are active):

==========================  ==================================================================
resource / attack           protection
==========================  ==================================================================
infinite loop               wall-clock timeout -> SIGKILL to the whole process group (and the
                            PID namespace); RLIMIT_CPU as a backstop
memory bomb                 RLIMIT_AS (``memory_mb``): allocations fail with MemoryError
huge output                 the parent reads stdout+stderr through a pipe and kills the sample
                            past ``max_output_bytes``; RLIMIT_FSIZE caps files it writes
fork bomb / subprocesses    audit hook refuses os.fork/forkpty/system/exec*/posix_spawn/spawn*,
                            subprocess.Popen and importing ``_posixsubprocess``/``ctypes``;
                            RLIMIT_NPROC (only enforced for non-root users); a PID namespace
                            (``unshare --pid --fork --kill-child``) kills every descendant when
                            the sample ends; process-group SIGKILL otherwise
network                     audit hook refuses every ``socket.*`` event (creation, connect, DNS);
                            a network namespace (``unshare --net``: no interface but a down
                            loopback) when ``unshare`` works
files outside its folder    audit hook refuses writing, creating, deleting, renaming, chmod/
                            chown/utime/xattr and rmtree on paths that resolve (symlinks
                            followed) outside the sample's temp folder; ``dir_fd`` variants
                            are refused. As ``nobody`` (``user``), kernel permissions too
environment and secrets     cwd, HOME and TMPDIR are a fresh temp folder (deleted after); a
                            minimal environment (no API keys, no PYTHON* variables: ``-I``)
other processes             audit hook refuses os.kill/killpg of anything but itself; PID
                            namespace hides other processes' ids
==========================  ==================================================================

What is NOT isolated:
    * Reading files: the sample can read anything the user running polyrl can read (it cannot
      send it anywhere: no network, and its output only reaches the reward log).
    * The audit hook is a Python-level guard: native code, e.g. an extension module that is
      importable from the interpreter's site-packages, can bypass it. The kernel layers
      (rlimits, namespaces, uid) hold regardless; without namespaces and as root (this project's
      dev machines run as root and the venv's interpreter lives under /root, so ``nobody`` cannot
      run it) a native-code fork bomb is bounded only by the wall-clock kill. For untrusted models
      at scale, also run the trainer in a container with a pids/memory cgroup.
    * CPU share and disk bandwidth are not throttled (only bounded in time and size).
    * The reward's integrity: the sample shares its interpreter with the harness that runs the
      tests, so a solution written to forge its own result (introspecting the harness) could. The
      harness snapshots what it needs and tags its result with a per-run nonce, which stops naive
      tricks (printing "passed", exiting early, redefining ``json.dumps``); it scores
      ``sys.exit()``/``os._exit`` and crashes as failures.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from polyrl.errors import RewardError
from polyrl.rewards.options import merged, positive_number
from polyrl.hookspecs import hookimpl
from polyrl.logs import get_logger
from polyrl.types import Completion, Prompt, RewardContext, RewardScores, RewardSpec

NAME = "code_tests"
log = get_logger("polyrl.rewards.code")

#: Environment variable set in every sandboxed process (tests look for leftovers by it).
MARKER_ENV = "POLYRL_SANDBOX"

# --- the harness: runs inside the sandbox (``python -I -B -c HARNESS <result fd>``) ---------------

HARNESS = r'''
import sys, os, json, resource

def _main():
    result_fd = int(sys.argv[1])
    payload = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if result_fd != 3:
        os.dup2(result_fd, 3)
        os.close(result_fd)
    lim = payload["limits"]
    for name, soft, hard in (("RLIMIT_CPU", lim["cpu_s"], lim["cpu_s"] + 1),
                             ("RLIMIT_AS", lim["memory_bytes"], lim["memory_bytes"]),
                             ("RLIMIT_FSIZE", lim["file_size_bytes"], lim["file_size_bytes"]),
                             ("RLIMIT_NOFILE", lim["max_open_files"], lim["max_open_files"]),
                             ("RLIMIT_NPROC", lim["max_processes"], lim["max_processes"]),
                             ("RLIMIT_CORE", 0, 0)):
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    nonce = payload["nonce"]
    dumps, write, exit_ = json.dumps, os.write, os._exit
    root = os.path.realpath(os.getcwd())
    code_error = None
    try:
        setup = compile(payload["setup"], "<setup>", "exec") if payload["setup"] else None
        solution = compile(payload["code"], "<solution>", "exec")
        steps = [(compile(src, "<test %d>" % i, "exec"), is_test) for i, (src, is_test) in enumerate(payload["steps"])]
    except BaseException as exc:
        code_error = "%s: %s" % (type(exc).__name__, exc)
        steps = [(None, is_test) for _, is_test in payload["steps"]]
    if payload["audit"]:
        _install_audit_hook(root)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    passed = []
    if code_error is None:
        try:
            if setup is not None:
                exec(setup, namespace)
            exec(solution, namespace)
        except BaseException as exc:
            try:
                code_error = "%s: %s" % (type(exc).__name__, exc)
            except BaseException:
                code_error = "error"
    for step, is_test in steps:
        ok = False
        if code_error is None:
            try:
                exec(step, namespace)
                ok = True
            except BaseException:
                ok = False
        if is_test:
            passed.append(ok)
    namespace.clear()
    try:
        data = dumps({"nonce": nonce, "error": None if code_error is None else str(code_error)[:500],
                      "passed": passed})
        write(3, (data + "\n").encode("utf-8"))
    finally:
        exit_(0)


def _install_audit_hook(root):
    realpath, join, getcwd, fsdecode, getpid = (os.path.realpath, os.path.join, os.getcwd,
                                                os.fsdecode, os.getpid)
    prefix = root + os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    allowed_writes = frozenset({"/dev/null"})
    denied = frozenset({
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "subprocess.Popen", "pty.spawn", "os.startfile", "os.killpg",
        "resource.setrlimit", "resource.prlimit", "sys.remote_exec", "os.setns", "os.unshare",
        "webbrowser.open", "urllib.Request", "http.client.connect", "ftplib.connect",
        "smtplib.connect", "imaplib.open", "nntplib.connect", "poplib.connect", "telnetlib.Telnet.open",
    })
    denied_prefixes = ("socket.", "ctypes.", "_ctypes.")
    blocked_modules = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
    # event -> indices of path arguments, and of dir_fd-like arguments that must be None
    path_events = {
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.rename": ((0, 1), (2, 3)),
        "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)), "os.mkdir": ((0,), (2,)),
        "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.chflags": ((0,), ()),
        "os.lchflags": ((0,), ()), "os.truncate": ((0,), ()), "os.utime": ((0,), (3,)),
        "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)),
        "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
    }

    def inside(path):
        if isinstance(path, int):
            return True  # a file descriptor: checked when it was opened
        try:
            full = realpath(join(getcwd(), fsdecode(path)))
        except Exception:
            return False
        return full == root or full.startswith(prefix)

    def deny(event, detail=""):
        raise PermissionError("sandbox: %s is not allowed%s" % (event, detail))

    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(flags, int) and flags & write_flags) or (
                isinstance(mode, str) and any(c in mode for c in "wax+"))
            if writing and path is not None and not inside(path):
                if not (isinstance(path, str) and path in allowed_writes):
                    deny("writing outside the sandbox folder", ": %r" % (path,))
            return
        spec = path_events.get(event)
        if spec is not None:
            paths, fds = spec
            for i in fds:
                if i < len(args) and args[i] is not None and args[i] != -1:
                    deny(event + " with dir_fd")
            for i in paths:
                if i < len(args) and not inside(args[i]):
                    deny(event + " outside the sandbox folder", ": %r" % (args[i],))
            return
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] in blocked_modules or name.rsplit(".", 1)[-1] in blocked_modules:
                deny("importing " + name)
            return
        if event == "os.kill":
            if args and args[0] != getpid():
                deny("signalling other processes")
            return
        if event in denied or event.startswith(denied_prefixes):
            deny(event)

    sys.addaudithook(hook)


_main()
'''


# --- limits, results, isolation probing ----------------------------------------------------------


@attrs.define(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0
    cpu_s: int | None = None  # None -> ceil(timeout_s) + 1
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_open_files: int = 64
    max_processes: int = 16
    max_output_bytes: int = 65536

    def harness(self) -> dict[str, int]:
        return {
            "cpu_s": int(self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1),
            "memory_bytes": int(self.memory_mb) * 1024 * 1024,
            "file_size_bytes": int(self.file_size_mb) * 1024 * 1024,
            "max_open_files": int(self.max_open_files),
            "max_processes": int(self.max_processes),
        }


@attrs.define
class SandboxResult:
    """What one sandboxed run gave: ``status`` is "ok" (ran; ``passed`` per test), "error" (the
    solution or setup raised: every test failed), "timeout", "output_limit" or "crashed" (killed
    by a signal or ended without a result)."""

    status: str
    passed: list[bool] = attrs.field(factory=list)
    error: str | None = None
    output: str = ""
    returncode: int | None = None
    duration_s: float = 0.0

    @property
    def fraction(self) -> float:
        if self.status not in ("ok", "error") or not self.passed:
            return 0.0
        return sum(self.passed) / len(self.passed)

    @property
    def all_passed(self) -> bool:
        return self.status == "ok" and bool(self.passed) and all(self.passed)


_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, ...], str | None] = {}


def _probe(cmd: list[str], expect: str | None = None) -> str | None:
    """None when ``cmd`` exits 0 (and prints ``expect`` when given), else why not; cached."""
    key = tuple(cmd) + (expect or "",)
    with _probe_lock:
        if key in _probe_cache:
            return _probe_cache[key]
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                                  cwd=tempfile.gettempdir(), env={"PATH": "/usr/bin:/bin"})
            if done.returncode != 0:
                lines = done.stderr.decode(errors="replace").strip().splitlines()
                reason: str | None = lines[-1] if lines else f"exit {done.returncode}"
            elif expect is not None and done.stdout.decode(errors="replace").strip() != expect:
                reason = f"it runs a different Python there ({done.stdout.decode(errors='replace').strip()!r})"
            else:
                reason = None
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        _probe_cache[key] = reason
        return reason


_VERSION = "import sys; print(sys.version, sys.base_prefix)"


def _drop_privileges(ids: tuple[int, int]) -> list[str]:
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups"]


def _resolve_user(user: Any, python: str) -> tuple[tuple[int, int] | None, str]:
    """(uid, gid) to run samples as, or None; and a sentence saying why."""
    if user in (None, "none", False):
        return None, "off (user = none)"
    import pwd

    auto = user == "auto"
    if auto:
        if os.geteuid() != 0:
            return None, f"off: already unprivileged (uid {os.geteuid()})"
        user = "nobody"
    try:
        entry = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
    except (KeyError, ValueError):
        if auto:
            return None, "off: no user 'nobody'"
        raise RewardError(f"{NAME}: user {user!r} does not exist. Fix: user = \"auto\", \"none\" or an existing user") from None
    ids = (entry.pw_uid, entry.pw_gid)
    if entry.pw_uid == os.geteuid():
        return None, f"off: already running as {entry.pw_name}"
    if os.geteuid() != 0:
        raise RewardError(f"{NAME}: only root can run samples as {user!r}. Fix: user = \"auto\" or \"none\"")
    if not shutil.which("setpriv"):
        reason: str | None = "setpriv (util-linux) not found"
    else:
        expected = subprocess.run([python, "-I", "-c", _VERSION], capture_output=True, timeout=20,
                                  stdin=subprocess.DEVNULL).stdout.decode(errors="replace").strip()
        reason = _probe(_drop_privileges(ids) + [python, "-I", "-c", _VERSION], expect=expected)
    if reason is not None:
        if not auto:
            raise RewardError(f"{NAME}: cannot run {python} as {entry.pw_name}: {reason}. Fix: install an "
                              f"interpreter that user can run and set options.python, or set user = \"none\"")
        return None, f"off: {entry.pw_name} cannot run {python} ({reason})"
    return ids, f"on: samples run as {entry.pw_name} (uid {ids[0]})"


def _namespace_prefix(mode: str, python: str) -> tuple[list[str], str]:
    if mode == "off":
        return [], "off (namespaces = off)"
    unshare = shutil.which("unshare")
    candidates: list[list[str]] = []
    if unshare:
        base = [unshare, "--net", "--pid", "--fork", "--kill-child"]
        candidates = [base] if os.geteuid() == 0 else []
        candidates.append([unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"])
    reasons = []
    for prefix in candidates:
        reason = _probe(prefix + [python, "-I", "-c", "pass"])
        if reason is None:
            return prefix, "on: network and PID namespaces (" + " ".join(os.path.basename(p) for p in prefix[:1]) + \
                " " + " ".join(prefix[1:]) + ")"
        reasons.append(reason)
    why = "; ".join(reasons) if reasons else "unshare not found"
    if mode == "require":
        raise RewardError(f"{NAME}: namespaces = \"require\" but unshare does not work here ({why}). "
                          "Fix: allow user namespaces (or run as root), or set namespaces = \"auto\"")
    return [], f"off: {why}"


def extract_code(text: str, mode: str = "auto") -> str:
    """The Python to run from a completion (see the ``extract`` option)."""
    if mode == "raw":
        return text
    blocks = [(lang.lower(), body) for lang, body in re.findall(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", text, re.DOTALL)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    if mode == "all_blocks" and python:
        return "\n\n".join(python)
    if python:
        return python[-1]
    plain = [body for lang, body in blocks if lang == ""]
    if plain:
        return plain[-1]
    open_fence = re.search(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*)\Z", text, re.DOTALL)
    if open_fence:  # a generation cut off before its closing fence
        return open_fence.group(1)
    return text


def parse_tests(tests: Any, where: str = "") -> list[tuple[str, bool]]:
    """Steps ``(source, is_test)`` from a tests cell (see the ``column`` option)."""
    if isinstance(tests, str):
        try:
            tree = ast.parse(tests)
        except SyntaxError as exc:
            raise RewardError(f"{NAME}: the tests{where} are not valid Python ({exc.msg}, line {exc.lineno}). "
                              "Fix: correct the dataset's tests column") from None
        steps = [(ast.unparse(node), isinstance(node, ast.Assert)) for node in tree.body]
        if steps and not any(is_test for _, is_test in steps):
            return [(tests, True)]  # no assert: the whole script is one test
        return steps
    if isinstance(tests, (list, tuple)):
        out = []
        for i, item in enumerate(tests):
            if not isinstance(item, str):
                raise RewardError(f"{NAME}: test {i}{where} is {type(item).__name__}, not Python source. "
                                  "Fix: store tests as a string of asserts or a list of strings")
            try:
                ast.parse(item)
            except SyntaxError as exc:
                raise RewardError(f"{NAME}: test {i}{where} is not valid Python ({exc.msg}). "
                                  "Fix: correct the dataset's tests column") from None
            out.append((item, True))
        return out
    raise RewardError(f"{NAME}: the tests{where} are a {type(tests).__name__}. "
                      "Fix: store tests as a string of asserts or a list of strings")


# --- the sandbox ---------------------------------------------------------------------------------


class Sandbox:
    """Runs Python source against tests in a locked-down subprocess (see the module docstring)."""

    def __init__(self, limits: SandboxLimits | None = None, *, python: str | None = None,
                 namespaces: str = "auto", user: Any = "auto", audit_hook: bool = True) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python or sys.executable
        self.audit_hook = bool(audit_hook)
        if namespaces not in ("auto", "off", "require"):
            raise RewardError(f"{NAME}: namespaces must be auto, off or require, got {namespaces!r}")
        self.prefix, ns_report = _namespace_prefix(namespaces, self.python)
        self.ids, user_report = _resolve_user(user, self.python)
        self.report = {
            "namespaces": ns_report,
            "user": user_report,
            "audit_hook": "on" if self.audit_hook else "off (audit_hook = false)",
            "rlimits": "on: CPU, address space, file size, open files, core; processes "
                       + ("(not enforced: root)" if os.geteuid() == 0 and self.ids is None else "on"),
            "timeout": f"on: {self.limits.timeout_s:g} s wall clock, process-group SIGKILL",
        }

    def _command(self, result_fd: int) -> list[str]:
        cmd = list(self.prefix)
        if self.ids is not None:
            cmd += _drop_privileges(self.ids)
        return cmd + [self.python, "-I", "-B", "-c", HARNESS, str(result_fd)]

    def run(self, code: str, steps: Sequence[tuple[str, bool]], setup: str = "") -> SandboxResult:
        nonce = secrets.token_hex(16)
        payload = json.dumps({"code": code, "setup": setup or "", "steps": [list(s) for s in steps],
                              "limits": self.limits.harness(), "nonce": nonce,
                              "audit": self.audit_hook}).encode("utf-8")
        folder = tempfile.mkdtemp(prefix="polyrl-sandbox-")
        t0 = time.monotonic()
        try:
            if self.ids is not None:
                os.chown(folder, *self.ids)
            read_fd, write_fd = os.pipe()
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "TMP": folder,
                   "TEMP": folder, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1",
                   "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", MARKER_ENV: nonce[:8]}
            try:
                proc = subprocess.Popen(self._command(write_fd), cwd=folder, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                        start_new_session=True)
            except OSError as exc:
                os.close(read_fd)
                raise RewardError(f"{NAME}: cannot start {self.python!r}: {exc}. Fix: set options.python "
                                  "to a working interpreter") from exc
            finally:
                os.close(write_fd)
            try:
                return self._collect(proc, read_fd, payload, nonce, t0)
            finally:
                self._kill(proc)
                os.close(read_fd)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            log.error("sandboxed process did not die", pid=proc.pid)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _collect(self, proc: subprocess.Popen, read_fd: int, payload: bytes, nonce: str,
                 t0: float) -> SandboxResult:
        limits = self.limits
        deadline = t0 + limits.timeout_s
        writer = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
        writer.start()
        assert proc.stdout is not None
        out_fd = proc.stdout.fileno()
        output, result = bytearray(), bytearray()
        status: str | None = None
        with selectors.DefaultSelector() as sel:
            sel.register(out_fd, selectors.EVENT_READ)
            sel.register(read_fd, selectors.EVENT_READ)
            open_fds = {out_fd, read_fd}
            while read_fd in open_fds:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    status = "timeout"
                    break
                for key, _ in sel.select(min(remaining, 0.25)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fd)
                        open_fds.discard(key.fd)
                    elif key.fd == out_fd:
                        output += data
                        if len(output) > limits.max_output_bytes:
                            status = "output_limit"
                    else:
                        result += data
                        if len(result) > 1_000_000:
                            status = "crashed"
                if status:
                    break
            if status is None:  # the harness is done: keep what output is already there
                try:
                    os.set_blocking(out_fd, False)
                    while len(output) <= limits.max_output_bytes:
                        data = os.read(out_fd, 65536)
                        if not data:
                            break
                        output += data
                except (BlockingIOError, OSError):
                    pass
        duration = time.monotonic() - t0
        text = bytes(output[: limits.max_output_bytes]).decode("utf-8", errors="replace")
        if status is not None:
            return SandboxResult(status=status, output=text, duration_s=duration)
        try:
            returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            returncode = None
        parsed = _parse_result(result, nonce)
        if parsed is None:
            return SandboxResult(status="crashed", output=text, returncode=returncode, duration_s=duration)
        error = parsed.get("error")
        passed = [bool(x) for x in parsed.get("passed", [])]
        return SandboxResult(status="error" if error else "ok", passed=passed, error=error, output=text,
                             returncode=returncode, duration_s=duration)


def _feed(stream: Any, payload: bytes) -> None:
    try:
        stream.write(payload)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _parse_result(raw: bytes, nonce: str) -> dict[str, Any] | None:
    lines = [line for line in bytes(raw).decode("utf-8", errors="replace").splitlines() if line.strip()]
    if len(lines) != 1:
        return None  # nothing, or something else wrote to the result channel too
    try:
        data = json.loads(lines[0])
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("nonce") != nonce or not isinstance(data.get("passed"), list):
        return None
    return data


def isolation_report(**options: Any) -> dict[str, str]:
    """Which isolation layers a ``Sandbox`` with these options gets on this machine, and why."""
    return Sandbox(**options).report


# --- the reward ----------------------------------------------------------------------------------

DEFAULTS: dict[str, Any] = {
    "column": "tests", "setup_column": None, "mode": "fraction", "extract": "auto",
    "timeout_s": 5.0, "cpu_s": None, "memory_mb": 1024, "file_size_mb": 16, "max_open_files": 64,
    "max_processes": 16, "max_output_bytes": 65536, "max_workers": 2, "python": None,
    "namespaces": "auto", "user": "auto", "audit_hook": True,
}
_POSITIVE = ("timeout_s", "memory_mb", "file_size_mb", "max_open_files", "max_processes", "max_output_bytes",
             "max_workers")

_sandboxes: dict[str, Sandbox] = {}
_sandboxes_lock = threading.Lock()
_reported: set[str] = set()


def _options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = merged(NAME, given, DEFAULTS)
    for key in _POSITIVE + (("cpu_s",) if opts["cpu_s"] is not None else ()):
        positive_number(NAME, opts, key, DEFAULTS[key] or 2)
    if opts["mode"] not in ("fraction", "binary"):
        raise RewardError(f"{NAME}: mode must be \"fraction\" or \"binary\", got {opts['mode']!r}")
    if opts["extract"] not in ("auto", "last_block", "all_blocks", "raw"):
        raise RewardError(f"{NAME}: extract must be auto, all_blocks or raw, got {opts['extract']!r}")
    return opts


def sandbox_for(opts: Mapping[str, Any]) -> Sandbox:
    """A (cached) ``Sandbox`` for validated options."""
    limits = SandboxLimits(timeout_s=float(opts["timeout_s"]), cpu_s=None if opts["cpu_s"] is None else int(opts["cpu_s"]),
                           memory_mb=int(opts["memory_mb"]), file_size_mb=int(opts["file_size_mb"]),
                           max_open_files=int(opts["max_open_files"]), max_processes=int(opts["max_processes"]),
                           max_output_bytes=int(opts["max_output_bytes"]))
    key = json.dumps([attrs.asdict(limits), opts["python"], opts["namespaces"], str(opts["user"]), opts["audit_hook"]])
    with _sandboxes_lock:
        if key not in _sandboxes:
            box = Sandbox(limits, python=opts["python"], namespaces=opts["namespaces"], user=opts["user"],
                          audit_hook=bool(opts["audit_hook"]))
            _sandboxes[key] = box
            if key not in _reported:
                _reported.add(key)
                log.info("code sandbox isolation", **box.report)
        return _sandboxes[key]


def _text(completion: Completion | str) -> str:
    return completion if isinstance(completion, str) else completion.text


async def score_code(completions: Sequence[Completion | str], rows: Sequence[Mapping[str, Any]],
                     options: Mapping[str, Any] | None) -> RewardScores:
    """Run every completion against its row's tests; scores and metrics (see the module doc)."""
    opts = _options(options)
    column, setup_column = opts["column"], opts["setup_column"]
    jobs: list[tuple[int, str, list[tuple[str, bool]], str]] = []
    scores: list[float | None] = [None] * len(completions)
    for i, completion in enumerate(completions):
        row = rows[i]
        if column not in row:
            present = ", ".join(sorted(map(str, row))) or "none"
            raise RewardError(f"reward {NAME!r} needs column {column!r} but dataset row {i} has only: {present}. "
                              f"Fix: add a {column!r} column with the tests, or set option column = \"<tests column>\"")
        if row[column] is None:
            continue
        steps = parse_tests(row[column], f" of row {i}")
        if not steps:
            continue
        setup = ""
        if setup_column is not None:
            setup = row.get(setup_column) or ""
            if not isinstance(setup, str):
                raise RewardError(f"{NAME}: setup column {setup_column!r} of row {i} is not a string of code")
        jobs.append((i, extract_code(_text(completion), opts["extract"]), steps, setup))
    box = sandbox_for(opts)
    sem = asyncio.Semaphore(int(opts["max_workers"]))

    async def one(job: tuple[int, str, list[tuple[str, bool]], str]) -> tuple[int, SandboxResult]:
        async with sem:
            return job[0], await asyncio.to_thread(box.run, job[1], job[2], job[3])

    results = await asyncio.gather(*(one(job) for job in jobs))
    counts: dict[str, int] = {}
    for i, result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
        scores[i] = result.fraction if opts["mode"] == "fraction" else float(result.all_passed)
    n = max(1, len(results))
    metrics = {
        "pass_rate": sum(1 for _, r in results if r.all_passed) / n,
        "failures": float(sum(v for k, v in counts.items() if k not in ("ok",))),
        "timeouts": float(counts.get("timeout", 0)),
        "violations": float(counts.get("output_limit", 0) + counts.get("crashed", 0)),
    }
    return RewardScores(scores, metrics=metrics)


# --- the plugin hooks ----------------------------------------------------------------------------

#: RewardComputer awaits ``await_reward`` concurrently with the step's other async rewards.
is_async = True


@hookimpl
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec(name=NAME, summary="fraction of the row's tests (column \"tests\") the completion's "
                        "Python passes, run in a sandboxed subprocess", distribution="polyrl"))


async def await_reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
                       context: RewardContext) -> dict[str, RewardScores] | None:
    if NAME not in context.wanted:
        return None
    return {NAME: await score_code(completions, context.rows, context.options.get(NAME))}


@hookimpl
def reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
           context: RewardContext) -> dict[str, RewardScores] | None:
    if NAME not in context.wanted:
        return None
    from polyrl.rewards.functions import run_coroutine

    return run_coroutine(await_reward(prompts, completions, context))
