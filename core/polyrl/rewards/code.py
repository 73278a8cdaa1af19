"""``code_tests``: run the completion's Python isolated by the OS; compute its tests' verdict outside it.

The reward is the fraction of the row's tests that pass (``mode = "fraction"``) or 1/0 for all
passing or not (``mode = "binary"``). A sample that breaks a sandbox rule or limit (time, memory,
output, a forbidden operation at top level) scores 0 and costs nothing else.

Options (``[[rewards]] name = "code_tests"``); unknown options are an error:

``column``            dataset column with the tests (default "tests"): a string of Python whose
                      top-level ``assert`` statements are the tests, as is each top-level statement
                      that checks (a loop or ``if`` holding an assert or a ``raise``, an ``assert*``
                      call such as ``np.testing.assert_allclose``, a use of the tests' own function
                      or class that checks, ``check(f)``) and each case of a pytest ``test_*``
                      function; other statements — imports, helpers — run in order between them
                      and fail closed: one that raises is a failed check and the tests after it
                      fail (``polyrl.rewards.test_cells``), or a list of snippets, one test each
                      (a snippet passes when it runs without an exception), or stdin/stdout cases
                      (APPS ``{"inputs": [...], "outputs": [...]}``, its JSON string, CodeContests,
                      open-r1: ``polyrl.sandbox.program_cases``) or APPS's call-based cases
                      (``"fn_name"``: ``polyrl.sandbox.call_cases``). No tests -> score None.
``entry_point_column`` column naming the solution's function for a HumanEval-style
                      ``check(candidate)`` that the tests define and never call (default
                      "entry_point"; the tests then end with ``check(<entry point>)``)
``setup_column``      optional column of code run before the solution (e.g. imports), in the
                      sample and, for the tests, in the trainer; None
``mode``              "fraction" (default) or "binary"
``extract``           "auto" (default: the last ```python fenced block, else the last plain fence,
                      else an unterminated fence, else the raw text), "all_blocks" (every python
                      block, joined), "raw"
``timeout_s``         wall-clock limit per sample (default 5). The whole batch is one reward call,
                      whose limit (``[[rewards]] timeout_s`` unset: 600) is raised to fit the
                      batch when every sample loops: ceil(n / max_workers) x (timeout_s + 4) + 60
                      seconds (``call_time_s``), so looping samples score 0 and never stop the
                      run; a ``[[rewards]] timeout_s`` set by the user is the cap, never raised
``cpu_s``             CPU-seconds limit (default: ceil(timeout_s) + 1)
``memory_mb``         address-space limit (default 1024)
``file_size_mb``      largest file the sample may write (default 16)
``disk_mb``           size of the sample's private tmpfs, all its files together (default 64; bwrap)
``max_open_files``    (default 64)
``max_processes``     RLIMIT_NPROC (default 16; see the table: the kernel ignores it for root);
                      with the seccomp filter (bwrap and unshare levels) it starts no process
``max_output_bytes``  stdout+stderr kept; more kills the sample, score 0 (default 65536)
``max_workers``       samples run at once (default 2)
``python``            interpreter for the sample (default: this one; its folders are bound read-only)
``isolation``         "auto" (default: bubblewrap or nothing: where it cannot run, the run is refused
                      at setup with an error naming what to install or enable; without libseccomp it
                      runs with a warning), "require" (bubblewrap and the seccomp filter), "weak" (an
                      explicit opt-in to the old fallback: unshare or a plain subprocess where bubblewrap
                      is missing, where a sample may run as the trainer's uid, read its files and keys
                      and reach 127.0.0.1), "off" (a plain subprocess). ``namespaces`` is the old name.
``user``              "auto" (default: as root, each running sample has a uid of its own from a pool,
                      ``polyrl.sandbox.uids``; ``nobody`` where the pool is not mapped), "none", or a
                      user/uid
``audit_hook``        true (default); false only to test the kernel layers alone
``tests_in``          "process" (default: the tests run in a forked copy of the trainer, killed at
                      the sample's deadline, its address space capped at ``memory_mb`` (at least
                      1024) over the trainer's; a fork costs more the more memory the trainer holds) or
                      "trainer" (no fork per sample; a C call on a value the sample returns,
                      ``sum(range(f(x)))``, then holds the trainer until it returns)

What is isolated, and how (layers are independent; ``isolation_report()`` says which are active;
``polyrl.sandbox.isolation`` describes the levels bwrap / unshare / off):

==========================  ==================================================================
resource / attack           protection (bwrap level; fallbacks noted)
==========================  ==================================================================
forging the verdict         the tests never run in the sample: the trainer runs them, calling
                            the solution's functions over a pipe and rebuilding results from
                            exact built-in types (``polyrl.sandbox.harness``). Patching
                            builtins, writing to descriptors, printing "passed", ``__eq__``
                            tricks, exiting early or killing itself give a value or a failure,
                            never a pass; names the tests or setup bind are never the sample's.
                            Expected values never enter the sample's process
files outside its folder    a fresh mount namespace: the only writable place is a private
                            tmpfs of ``disk_mb``; /usr and the interpreter are read-only;
                            /root, /work, /etc, /home do not exist there. No descriptor but
                            stdin/stdout/stderr is inherited (the server checks). Fallbacks:
                            kernel permissions of the sample's unprivileged uid and the audit
                            hook
secrets                     no view of other processes (PID namespace, fresh /proc), an
                            environment of a few fixed variables, and an unprivileged uid
network                     a network namespace with only its own loopback; seccomp refuses
                            ``setns``/``unshare``, so another namespace cannot be entered, and
                            socket families other than unix/inet/inet6 (AF_VSOCK is not
                            namespaced: the hypervisor's side on a VM; AF_NETLINK is kernel
                            attack surface); audit hook refuses
                            ``socket.*`` events
privilege                   no capabilities (an empty bounding set), no_new_privs, an
                            unprivileged uid; seccomp refuses
                            mount, ptrace, keyctl, bpf, module loading, namespace creation,
                            io_uring; /proc is read-only (a uid-0 sample cannot write /proc/sys)
fork bomb / subprocesses    audit hook refuses fork/exec/spawn/subprocess (and ctypes, except
                            behind bubblewrap, where numpy needs it); seccomp refuses fork,
                            vfork and clone without CLONE_THREAD (clone3: ENOSYS), so the
                            sample is one process, threads still start; fallbacks: RLIMIT_NPROC
                            per sample uid; the PID namespace dies with the sample
infinite loop               wall-clock timeout -> SIGKILL (process group, PID namespace);
                            RLIMIT_CPU as a backstop
memory bomb                 RLIMIT_AS (``memory_mb``) per process: allocations fail with
                            MemoryError; with seccomp the sample is one process (its threads
                            share it), so ``memory_mb`` bounds the whole sample; every sample
                            process has oom_score_adj 1000 (``choom``), so the OOM killer takes
                            samples, not the trainer
huge output / full disk     the trainer reads output through a pipe and kills the sample past
                            ``max_output_bytes``; the tmpfs holds ``disk_mb`` in all; RLIMIT_FSIZE
==========================  ==================================================================

What is NOT isolated, or only partly:
    * The tests and ``setup`` run outside the sample, in a forked copy of the trainer (they are
      the dataset's code, trusted like a reward function; ``tests_in = "trainer"`` runs them in
      the trainer itself). Only the sample's answers reach them, as plain values of at most 8 MB
      each; the copy is killed at the deadline (plus a second), whatever the tests compute.
      Tests that hand such a value to Python itself (``pickle`` loading ``dump(x)``, ``eval(expr(x))``)
      ran the sample's code in that copy, as the trainer's user: the copy's audit hook
      (``polyrl.sandbox.tests_guard``) refuses code the tests compile but did not write, code
      objects they make from bytes, unpickling anything but plain data types, and writing files,
      new processes, signals, connections and ctypes. Python-level (a library that compiles a
      string the tests pass it, ``timeit.timeit(f(x))``, is not covered) and absent with
      ``tests_in = "trainer"``.
    * What the tests can express: arguments must be plain data, values the sample returned, a
      ``range`` or ``slice``, a builtin or standard function (``sort_by(xs, len)``, sent by
      name), or a function or object of the tests' own (a lambda, a ``def``, a ``TreeNode`` of
      theirs: the sample can only call it back, read and set its attributes, or have the
      tests' process take its length, items, truth, hash or comparisons,
      ``polyrl.sandbox.tests_callbacks``); a
      ``Counter``, ``OrderedDict``, ``deque``, ``Fraction`` or ``Decimal`` is rebuilt in the
      sample from its data, a ``defaultdict`` arrives as a dict, and the same types the solution
      returns come back as themselves, as does a namedtuple, as the trainer's own of that name); one
      of a ``dict``/``list``/``set``/``tuple`` subclass of the solution's compares with the tests'
      containers and answers ``get``/``count``/``index`` by its items as that type
      (``remote.Remote._container_data``); any other object the solution returns compares equal
      only to itself, so ``assert make_point() == Point(1, 2)`` fails even when the
      solution is right, and it never answers the yes/no methods of str, bytes, sets and numbers
      (``startswith``, ``isdigit``, ``issubset``, ``is_integer``: ``remote.DATA_PREDICATES``),
      which a str or set it returns answers; one a solution's function returns (``f(s)``, named
      like a function in the tests) never answers ``count``/``find``/``index``/``rfind``/``rindex``/``get``
      either (``remote.DATA_QUERIES``), while objects made from the solution's classes
      (``UnionFind(3).find(0)``) do, asked with constant arguments outside loops (numpy scalars come back as numbers; an array stays in the
      sample, ``list(arr)`` works; a generator's ``next()`` works, its end raising an error, not
      StopIteration, or giving ``next(g, default)``'s default); in-place changes to a list,
      dict (``defaultdict``, ``Counter``, ``OrderedDict`` too) or set passed as argument are seen
      by the tests after a call (one returning a value: those it changed), one that shrank only where
      no check of theirs may read it vacuously (``sandbox.in_place``, ``sandbox.vacuous_reads``: an
      emptied list would make their loops and ``xs == sorted(xs)`` hold); a list, dict or set the
      tests read from the sample is a copy, so a change the sample makes to it later is not seen
      through their name (``h = b.history; b.withdraw(10); assert h == [...]`` fails a right
      answer), nor is a tests' own dict or list subclass sendable (only standard ones are).
      A module the tests use without importing it is the trainer's real module when
      its name is a well-known one used only as a module (``math.isclose``, ``np.allclose``:
      ``tests_modules.TEST_MODULES``), and so is a standard function, class or constant of a pure
      standard-library module (``permutations``, ``reduce``, ``Counter``, ``ascii_lowercase``,
      ``assert_allclose``) that the statements it flows through use beside another name of the
      solution's (``polyrl.sandbox.standard_names``: where the tests check it on its own,
      ``assert gcd(12, 8) == 4``, it is the task's and the solution's); one the trainer cannot
      import is unusable, never the solution's. Any other name the tests use unbound is whatever
      the solution bound to it: a read-only view of the trainer's module for a pure
      standard-library one (``tests_modules.SAFE_MODULES``), else the solution's object or nothing;
      tests (or ``setup``) should import what they use.
    * Without bubblewrap only ``isolation = "weak"`` or ``"off"`` run (the default refuses): the
      unshare level has network, PID, IPC, UTS and mount namespaces and the seccomp filter (loaded by
      its setup program; ``polyrl.sandbox.new_root`` gives it a root of its own, and where that
      is refused the fallback view is this one); the host's files are read-only,
      ``/run``, ``/var/tmp``, ``/dev/shm``, ``/dev/pts``, the homes and the trainer's working
      folder are hidden (``polyrl.sandbox.host_view``), but the rest is readable with the
      sample's uid's permissions: its pooled uid's for a root trainer (every world-readable file left
      visible, a dataset outside the working folder among them), the trainer's OWN uid for a
      non-root trainer (its files outside the hidden folders), and a unix socket outside them
      accepts it. Where the kernel refuses those mounts the files are also writable and the
      disk is capped per file only (``isolation_report()["filesystem"]`` says so). "off" is the
      Python audit hook, rlimits and the timeout, and a non-root trainer's sample there also reads
      its /proc/<pid>/environ and memory. The audit hook runs inside the
      sample, which can switch it off (``gc`` reaches it). Hostile samples (an RL policy) need
      bubblewrap. The trainer's environment variables never reach the sample at any level: it
      starts with a fixed environment of a few variables.
    * seccomp needs the ``pyseccomp`` package (a dependency) and the system's libseccomp.so
      (``apt-get install libseccomp2``); without them namespaces and the dropped capabilities
      remain, ``isolation_report()["seccomp"]`` says OFF, a warning is logged when the sandbox is
      built, and ``isolation = "require"`` refuses.
    * CPU share and disk bandwidth are not throttled (only bounded in time and size), and memory
      has no cgroup: ``max_workers`` samples at once hold up to ``max_workers`` x ``memory_mb``.
      Without the seccomp filter (off level, or no libseccomp) a sample can fork (the
      audit hook is Python inside it), its processes together hold up to ``max_processes`` x
      ``memory_mb``, and with uid 0 (``user = "none"``, or no pooled uid nor user ``nobody``) RLIMIT_NPROC does
      not apply, so only the timeout bounds its process count. With the seccomp filter a
      root sample's real uid is one of the pool's (its euid stays 0), so ``max_processes`` caps its
      threads; elsewhere only ``memory_mb`` does, and the report and a warning say so. The OOM killer takes samples
      first (without ``choom`` installed the report says so and the trainer may be its choice).
      No option lets a sample start processes (``audit_hook = false`` lifts the Python guard,
      not the filter).
    * With a root trainer, each sample running at once has a uid (and gid) of its own from an
      unused range (``polyrl.sandbox.uids``), so RLIMIT_NPROC (``max_processes``: threads count,
      since the filter allows no process) counts that sample's threads alone: a sample holding
      its threads cannot make a concurrent honest sample's ``ThreadPoolExecutor`` fail. Where that
      range is not mapped (a container whose root has a short uid map) samples share ``nobody``
      and its one count again, and ``isolation_report()`` says so; ``max_workers = 1`` avoids it.
      A non-root trainer's samples each have bubblewrap's user namespace and their own count.
    * Inodes on the private tmpfs are not capped: ``disk_mb`` is the tmpfs's size in bytes, and
      bubblewrap (``--size``) passes no other mount option (``nr_inodes``), so empty directories,
      which take no tmpfs blocks, cost about 1 KB of kernel memory (slab, mostly unreclaimable)
      each, counted by neither ``memory_mb`` nor ``disk_mb``: a few hundred MB per sample in its
      ``timeout_s`` (126k-318k directories in 3.5 s on 2 cores), times ``max_workers``. It is freed
      when the sample ends.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from polyrl.errors import RewardError
from polyrl.hookspecs import hookimpl
from polyrl.logs import get_logger
from polyrl.rewards.async_hook import await_scores, sync_reward
from polyrl.rewards.inputs import completion_text
from polyrl.rewards.options import merged, positive_number
from polyrl.rewards.test_cells import parse_tests
from polyrl.sandbox import MARKER_ENV, Sandbox, SandboxLimits, SandboxResult, isolation_report
from polyrl.sandbox.isolation import LEVELS
from polyrl.sandbox.runner import TESTS_IN, TESTS_KILL_GRACE_S
from polyrl.sandbox.tests_bytecode import READ_ON, unsupported_python
from polyrl.types import Completion, RewardScores, RewardSpec

__all__ = ["MARKER_ENV", "Sandbox", "SandboxLimits", "SandboxResult", "extract_code", "isolation_report",
           "parse_tests", "score_code"]

NAME = "code_tests"
log = get_logger("polyrl.rewards.code")


_LANG = re.compile(r"[ \t]*([\w+-]*)")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each closed ```` ``` ```` block, as ``re.findall(r"```[ \\t]*([\\w+-]*)[^\\n]*\\n(.*?)```",
    text, re.DOTALL)`` finds them, in linear time. Why not that regex: ``[\\w+-]*`` and ``[^\\n]*`` backtrack
    into each other, at every opener, so a completion of 40 000 ```` ```a ```` (160 kB) took 5 s of the
    trainer's reward thread, and the time grows with the square of the length."""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            return blocks
        newline = text.find("\n", start + 3)
        if newline < 0:
            return blocks  # no later opener has a body either
        close = text.find("```", newline + 1)
        if close < 0:
            return blocks
        lang = _LANG.match(text, start + 3, newline)
        blocks.append(((lang.group(1) if lang else "").lower(), text[newline + 1:close]))
        pos = close + 3


def extract_code(text: str, mode: str = "auto") -> str:
    """The Python to run from a completion (see the ``extract`` option)."""
    if mode == "raw":
        return text
    blocks = _fenced_blocks(text)
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    if mode == "all_blocks" and python:
        return "\n\n".join(python)
    if python:
        return python[-1]
    plain = [body for lang, body in blocks if lang == ""]
    if plain:
        return plain[-1]
    body = _open_fence_body(text)
    return text if body is None else body  # a generation cut off before its closing fence


#: What may follow an opening fence on its line: blanks, at most one python tag, blanks. Why this
#: spelling: ``[ \t]*(?:python3?|py)?[ \t]*`` means the same but splits a blank run between its two
#: ``[ \t]*`` in every way before failing, so ```` ``` ```` and 160 000 blanks held the trainer (and
#: the GIL) 15 s; here a blank run is read once.
_OPEN_FENCE_TAIL = re.compile(r"[ \t]*(?:(?:python3?|py)[ \t]*)?\n")


def _open_fence_body(text: str) -> str | None:
    """What follows the first fence opening a python (or untagged) block, to the end: what
    ``re.search(r"```[ \\t]*(?:python3?|py)?[ \\t]*\\n(.*)\\Z", text, re.DOTALL)`` finds, in
    linear time (each attempt reads only up to the next non-blank after its fence)."""
    start = text.find("```")
    while start >= 0:
        tail = _OPEN_FENCE_TAIL.match(text, start + 3)
        if tail:
            return text[tail.end():]
        start = text.find("```", start + 1)
    return None


# --- the reward ----------------------------------------------------------------------------------

DEFAULTS: dict[str, Any] = {
    "column": "tests", "setup_column": None, "entry_point_column": "entry_point", "mode": "fraction", "extract": "auto",
    "timeout_s": 5.0, "cpu_s": None, "memory_mb": 1024, "file_size_mb": 16, "disk_mb": 64, "max_open_files": 64,
    "max_processes": 16, "max_output_bytes": 65536, "max_workers": 2, "python": None,
    "isolation": "auto", "namespaces": None, "user": "auto", "audit_hook": True, "tests_in": "process",
}
_POSITIVE = ("timeout_s", "memory_mb", "file_size_mb", "disk_mb", "max_open_files", "max_processes",
             "max_output_bytes", "max_workers")

#: The most ``timeout_s`` / ``cpu_s`` (a day) and ``memory_mb`` (1 PiB) take. Why: past what the
#: kernel's limits hold (``RLIMIT_CPU`` and ``RLIMIT_AS`` are int64: ``timeout_s = 1e20``,
#: ``memory_mb = 1e13``) every sample's sandbox failed to start and every completion scored 0,
#: a warning each, while the run trained on the zeros. No test of one sample runs a day.
_AT_MOST = {"timeout_s": 86400, "cpu_s": 86400, "memory_mb": 1 << 30}

_sandboxes: dict[str, Sandbox] = {}
_sandboxes_lock = threading.Lock()


def _options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = merged(NAME, given, DEFAULTS)
    for key in _POSITIVE + (("cpu_s",) if opts["cpu_s"] is not None else ()):
        positive_number(NAME, opts, key, DEFAULTS[key] or 2)
        if key in _AT_MOST and opts[key] > _AT_MOST[key]:
            raise RewardError(f"{NAME}: option {key} must be at most {_AT_MOST[key]}, got {opts[key]!r} (past the "
                              "kernel's limit every sample's sandbox fails, so every completion scores 0). "
                              f"Fix: e.g. {key} = {DEFAULTS[key] or 10}")
    if opts["mode"] not in ("fraction", "binary"):
        raise RewardError(f"{NAME}: mode must be \"fraction\" or \"binary\", got {opts['mode']!r}")
    if opts["extract"] not in ("auto", "last_block", "all_blocks", "raw"):
        raise RewardError(f"{NAME}: extract must be auto, all_blocks or raw, got {opts['extract']!r}")
    if opts["namespaces"] is not None:  # the old name of ``isolation``
        if "isolation" in (given or {}):
            raise RewardError(f"{NAME}: both isolation and namespaces are set. Fix: keep only isolation "
                              "(namespaces is its old name)")
        opts["isolation"] = opts["namespaces"]
    if opts["isolation"] not in LEVELS:
        raise RewardError(f"{NAME}: option isolation must be \"auto\", \"require\", \"weak\" or \"off\", got "
                          f"{opts['isolation']!r}. Fix: isolation = \"auto\"")
    if opts["tests_in"] not in TESTS_IN:
        raise RewardError(f"{NAME}: option tests_in must be \"process\" or \"trainer\", got {opts['tests_in']!r}. "
                          "Fix: tests_in = \"process\"")
    return opts


def sandbox_for(opts: Mapping[str, Any]) -> Sandbox:
    """A (cached) ``Sandbox`` for validated options; its isolation is logged once."""
    limits = SandboxLimits(timeout_s=float(opts["timeout_s"]), cpu_s=None if opts["cpu_s"] is None else int(opts["cpu_s"]),
                           memory_mb=int(opts["memory_mb"]), file_size_mb=int(opts["file_size_mb"]),
                           max_open_files=int(opts["max_open_files"]), max_processes=int(opts["max_processes"]),
                           max_output_bytes=int(opts["max_output_bytes"]), disk_mb=int(opts["disk_mb"]))
    key = json.dumps([attrs.asdict(limits), opts["python"], opts["isolation"], str(opts["user"]), opts["audit_hook"],
                      opts["tests_in"]])
    with _sandboxes_lock:
        if key not in _sandboxes:
            box = Sandbox(limits, python=opts["python"], isolation=opts["isolation"], user=opts["user"],
                          audit_hook=bool(opts["audit_hook"]), tests_in=opts["tests_in"])
            _sandboxes[key] = box
            log.info("code sandbox isolation", **box.report)
        return _sandboxes[key]


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
        steps = parse_tests(row[column], f" of row {i}", _entry_point(row, opts["entry_point_column"], i))
        if not steps:
            continue
        setup = ""
        if setup_column is not None:
            setup = row.get(setup_column) or ""
            if not isinstance(setup, str):
                raise RewardError(f"{NAME}: setup column {setup_column!r} of row {i} is not a string of code")
        jobs.append((i, extract_code(completion_text(completion), opts["extract"]), steps, setup))
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
        if _vacuous(result):
            _warn_unconsulted(i)
    n = max(1, len(results))
    metrics = {
        "pass_rate": sum(1 for _, r in results if r.all_passed) / n,
        "failures": float(sum(v for k, v in counts.items() if k not in ("ok",))),
        "timeouts": float(counts.get("timeout", 0)),
        "violations": float(counts.get("output_limit", 0) + counts.get("crashed", 0)),
        "unconsulted": float(sum(1 for _, r in results if _vacuous(r))),
    }
    return RewardScores(scores, metrics=metrics)


def _entry_point(row: Mapping[str, Any], column: Any, i: int) -> str | None:
    """The row's entry point, checked to be a plain name (HumanEval's ``add``) or a method of a
    class made with no arguments (LeetCodeDataset's ``Solution().reverseList``, refused before)."""
    value = row.get(column) if isinstance(column, str) else None
    if value is None:
        return None
    made, dot, method = value.partition("().") if isinstance(value, str) else ("", "", "")
    if dot and made.isidentifier() and method.isidentifier():
        return value
    if not isinstance(value, str) or not value.isidentifier():
        raise RewardError(f"{NAME}: column {column!r} of row {i} is {value!r}, not a function name. Fix: store the "
                          "solution's function name there (e.g. \"add\"), or set option entry_point_column to another "
                          "column")
    return value


_warned_unconsulted = False


def _vacuous(result: SandboxResult) -> bool:
    """Tests passed without ever asking the sample anything (so they scored 0)."""
    return result.status == "ok" and not result.consulted and any(result.passed)


def _warn_unconsulted(i: int) -> None:
    """Once a run: a sample passed tests that never asked it anything, so it scored 0. Said
    because it is usually the dataset: a check named like a builtin the tests call (the builtin
    wins), or tests that never reach the solution's names."""
    global _warned_unconsulted
    if _warned_unconsulted:
        return
    _warned_unconsulted = True
    log.warning("code_tests: a sample passed tests that never called its code nor read its values; it scores 0 "
                "(metric reward/code_tests/unconsulted counts them)", row=i,
                fix="check that the tests call the solution's function by the name the prompt asks for, and that "
                    "the name is not a builtin's (the tests always see Python's own sum, pow, max...)")


def check_options(name: str, options: Mapping[str, Any], columns: Collection[str] | None = None) -> None:
    """Check ``code_tests``' options when the run is set up (``RewardSet`` calls this), before any
    model loads: each one of them was read only at the first step, after the model loaded, a
    rollout and a step-0 checkpoint, and a bad ``python`` stopped the run with a bare
    ``FileNotFoundError`` naming no option. Builds the sandbox too, so ``isolation = "auto"`` or
    ``"require"`` without bubblewrap, an unknown ``user`` or an interpreter that does not run are
    refused here."""
    if name != NAME:
        return
    unsupported = unsupported_python()
    if unsupported is not None:
        raise RewardError(f"{NAME}: {unsupported}. Fix: run the trainer under Python "
                          f"{' or '.join(f'{a}.{b}' for a, b in sorted(READ_ON))}")
    opts = _options(options)
    for key in ("column", "setup_column"):
        column = opts[key]
        if key == "setup_column" and column is None:
            continue
        if not isinstance(column, str):
            raise RewardError(f"{NAME}: option {key} must be a column name, got {column!r}. Fix: e.g. {key} = \"tests\"")
        if columns is not None and column not in columns:
            raise RewardError(f"{NAME}: option {key} names column {column!r}, which the dataset does not have "
                              f"(its columns: {', '.join(map(str, columns)) or 'none'}). Fix: add that column, or "
                              f"set {key} to one of the dataset's columns")
    if opts["python"] is not None and not isinstance(opts["python"], str):
        raise RewardError(f"{NAME}: option python must be a path, got {opts['python']!r}. Fix: e.g. python = \"/usr/bin/python3\"")
    try:
        sandbox_for(opts)
    except OSError as exc:
        raise RewardError(f"{NAME}: option python = {opts['python']!r} cannot be run: {exc}. Fix: set python to a "
                          "working interpreter, or remove it to use the trainer's own") from None


#: Seconds a sample may take beyond its ``timeout_s``: the tests' copy is killed
#: ``TESTS_KILL_GRACE_S`` past the deadline, then the sample is killed and reaped (about a second
#: in all; the rest is margin for a loaded machine).
SAMPLE_OVERHEAD_S = TESTS_KILL_GRACE_S + 3.0
#: Seconds a call may take beyond its samples: building the sandbox (probing bwrap at the first
#: call), reading the completions and parsing the tests.
CALL_SLACK_S = 60.0


def call_time_s(name: str, options: Mapping[str, Any], n: int) -> float | None:
    """The longest one call scoring ``n`` completions can take when every sample runs to its
    ``timeout_s``: the core raises the reward's call limit (600 s unless the user set ``[[rewards]]
    timeout_s``, which it keeps) to this, so
    a batch of looping samples scores 0 each instead of stopping the run (256 x 5 s on 2 workers
    is 640 s, past the 600 s default), and a stuck call is still an error."""
    if name != NAME:
        return None
    opts = _options(options)
    rounds = math.ceil(n / max(1, int(opts["max_workers"])))
    return rounds * (float(opts["timeout_s"]) + SAMPLE_OVERHEAD_S) + CALL_SLACK_S


# --- the plugin hooks ----------------------------------------------------------------------------

#: RewardComputer awaits ``await_reward`` concurrently with the step's other async rewards.
is_async = True


@hookimpl
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec(name=NAME, summary="fraction of the row's tests (column \"tests\") the completion's "
                        "Python passes, run in a sandboxed subprocess", distribution="polyrl"))


#: the code reward's ``await_reward``: its tests are in the rows, so the prompts go unread
await_reward = await_scores(NAME, lambda _prompts, completions, rows, options: score_code(completions, rows, options))


reward = sync_reward(NAME, await_reward)
