"""The sandboxed code reward: scoring, and malicious samples that must cost a zero reward and nothing else."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import MARKER_ENV, Sandbox, SandboxLimits, extract_code, parse_tests
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext, RewardSpec
from regex_shape import meeting_runs
from work_meter import measured

TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(-1, 1) == 0\n"
GOOD = "def add(a, b):\n    return a + b\n"
#: Samples meant to end get a generous wall clock (a starved CI worker took over 1.5 s for a memory
#: bomb to reach its MemoryError); a test of the timeout itself uses a sample that never ends
FAST = {"timeout_s": 20, "memory_mb": 256, "max_output_bytes": 4096}
#: The timeout for samples that loop forever: any value works for them
LOOP_TIMEOUT_S = 1.5


def sandbox_processes() -> int:
    """Processes anywhere on the machine that carry this test process's sandbox marker (not another
    test worker's samples running at the same time)."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARKER_ENV}={os.getpid()}\0".encode() in f.read():
                    count += 1
        except OSError:
            continue
    return count


def my_children() -> int:
    try:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(os.getpid())], capture_output=True, text=True)
    except OSError:  # pragma: no cover
        return 0
    return len([line for line in out.stdout.split() if line.strip() and int(line) != 0]) - 1  # minus ps


def score(texts, rows=None, **options):
    pm = get_plugin_manager(entry_points=False)
    computer = RewardComputer(pm, [("code_tests", 1.0, {**FAST, **options})])
    rows = rows if rows is not None else [{"prompt": "write add", "tests": TESTS}] * len(texts)
    comps = [Completion(0, [1], [2], [0.0], text=t) for t in texts]
    return computer([r["prompt"] for r in rows], comps, RewardContext(rows=rows, wanted=("code_tests",)))


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}```\nIt adds."


# --- extraction and parsing ----------------------------------------------------------------------


def test_extract_code_rules():
    assert extract_code(fenced(GOOD)) == GOOD
    two = "```python\nx = 1\n```\ntext\n```py\ny = 2\n```"
    assert extract_code(two) == "y = 2\n"
    assert extract_code(two, "all_blocks") == "x = 1\n\n\ny = 2\n"
    assert extract_code("```\nz = 3\n```") == "z = 3\n"
    assert extract_code("intro\n```python\ncut = 'off") == "cut = 'off"
    assert extract_code("def f(): pass") == "def f(): pass"
    assert extract_code(fenced(GOOD), "raw") == fenced(GOOD)


def test_parse_tests_shapes():
    steps = parse_tests("import math\nassert math.pi > 3\nx = 2\nassert x == 2\n")
    assert [is_test for _, is_test in steps] == [False, True, False, True]
    assert parse_tests(["assert f(1) == 1", "y = f(2)\nassert y == 4"]) == [
        ("assert f(1) == 1", True), ("y = f(2)\nassert y == 4", True)]
    assert parse_tests("f(1)\nf(2)") == [("f(1)\nf(2)", True)]  # no assert: one test
    # asserts below the top level count: a loop, an if or try around them, a checker function's call
    # (also through another function), and pytest-style test functions nothing calls
    mixed = ("def check(c):\n    assert c(3) == 6\ndef run_all():\n    check(f)\nassert f(0) == 0\n"
             "for x in range(3):\n    assert f(x) == 2 * x\nif True:\n    assert f(4) == 8\nrun_all()\n")
    assert [is_test for _, is_test in parse_tests(mixed)] == [False, False, True, True, True, True]
    assert parse_tests("def test_a():\n    assert f(1) == 2\ndef test_b():\n    assert f(2) == 4\ntest_b()\n")[-2:] == [
        ("\n" * 4 + "test_b()", True), ("test_a()", True)]  # a statement starts on its line (5); a found test has none
    with pytest.raises(RewardError, match="not valid Python"):
        parse_tests("assert (")


class _Scanned(str):
    """A completion that counts the characters its ``find`` passes over."""

    passed = 0

    def find(self, sub, start=0, end=None):  # type: ignore[override,no-untyped-def]
        end = len(self) if end is None else end
        found = str.find(self, sub, start, end)
        self.passed += (found if found >= 0 else end) - start
        return found


def _fence_scan_work(monkeypatch, text: str, mode: str = "auto") -> tuple[str, int]:
    """``extract_code(text)`` and the characters it scanned, counted, not timed: those ``find``
    passes over, and, for the regexes that read a fence's tag, what each was handed, which must
    be the text itself (a copy of the rest at every fence is quadratic, one C call the work
    meter cannot see). Its Python work is capped by ``work_meter`` at a few steps a character.
    What no counter sees: a regex backtracking over a run of single characters (``[ \\t]*`` twice)
    inside one match; the oracle tests above pin the behaviour, these the scans around it."""
    from polyrl.rewards import code

    handed: list[str] = []
    for name in ("_LANG", "_OPEN_FENCE_TAIL"):
        real = getattr(code, name)

        class Seen:
            def match(self, string: str, *span: int, _real=real):  # type: ignore[no-untyped-def]
                handed.append(string)
                return _real.match(string, *span)

        monkeypatch.setattr(code, name, Seen())
    scanned = _Scanned(text)
    got, _ = measured(functools.partial(extract_code, scanned, mode), budget=4 * len(text) + 1000)
    assert all(string is scanned for string in handed), "a fence's tag was read from a copy of the rest"
    return got, scanned.passed


def test_extract_code_matches_the_fence_pattern_in_linear_time(monkeypatch):
    """Fences found by a scan, as the regex ``` ```[ \\t]*([\\w+-]*)[^\\n]*\\n(.*?)``` ``` finds them: that
    pattern backtracked at every opener, quadratic in the length (a 160 kB completion took 5 s)."""
    import random
    import re

    from polyrl.rewards.code import _fenced_blocks

    pattern = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
    rng = random.Random(0)
    pieces = ["`", "```", "\n", " ", "\t", "py", "python", "x", "+", "-", "é"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(30)))
        assert _fenced_blocks(text) == [(lang.lower(), body) for lang, body in pattern.findall(text)], repr(text)
    for hostile in ("```a" * 50_000, "```" + "x" * 200_000, "```\n" * 50_000):  # the regex took minutes on these
        _, passed = _fence_scan_work(monkeypatch, hostile)
        assert passed <= 2 * len(hostile), passed  # once for closed blocks, once for an open fence; a rescan from every opener passes over n * n / 2


def _open_fence_before(text: str) -> str | None:
    """What follows a fence never closed as the quadratic regex found it (None: no such fence):
    the oracle ``_open_fence_body`` answers as."""
    import re

    found = re.search(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*)\Z", text, re.DOTALL)
    return found.group(1) if found else None


def test_an_unterminated_fence_is_found_as_before_in_linear_time(monkeypatch):
    """The fallback for a fence never closed read ```` ``` ```` and a blank run without a newline in
    quadratic time, holding the GIL: 160 000 blanks froze the whole trainer 15 s. Same answers, now
    linear (the open fences, tags, blanks and newlines below are what the regex tells apart)."""
    import random

    from polyrl.rewards.code import _open_fence_body

    rng = random.Random(1)
    pieces = ["`", "``", "```", "\n", "\r\n", " ", "\t", "  \t ", "py", "python", "python3", "Python", "pyx",
              "3", "x", "\u00e9", "```python\n", "``` py \n", "```\n"]
    for _ in range(6000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 24)))
        assert _open_fence_body(text) == _open_fence_before(text), repr(text)
    # no block closed: extract_code answers with what follows the open fence's line, else the text
    for text, expected in (("intro\n```python  \ncut", "cut"), ("``` \t python3\t \nbody\n", "body\n"),
                           ("````py\nx", "x"), ("``` \n", ""), ("```py thon\nx", "```py thon\nx"),
                           ("```Python\nx", "```Python\nx"), ("```python\r\nx", "```python\r\nx"), ("a```", "a```")):
        assert extract_code(text) == expected, repr(text)
    hostile = ["```" + " " * 160_000 + "x", "```" + " \t" * 80_000 + "x", "```py" + " " * 160_000 + "x",
               ("```" + " " * 1000) * 160]
    for text in hostile:  # the regex took 15 s on the first alone
        got, passed = _fence_scan_work(monkeypatch, text)
        assert got == text, "no fence line ends: the raw text, as before"
        assert passed <= 2 * len(text), passed  # once for closed blocks, once for an open fence


def test_the_fence_regexes_have_no_runs_that_meet():
    """The regexes that read a fence's line hand no run of blanks or tag characters to another run:
    ``[ \\t]*(?:python3?|py)?[ \\t]*`` tried every split of 160 000 blanks, 15 s in one match, and
    ``[\\w+-]*[^\\n]*`` every split at every opener. Read from the shape (tests/regex_shape.py):
    that backtracking runs in C loops no counter sees, so the counted tests above cannot."""
    from polyrl.rewards import code

    assert meeting_runs(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```") and meeting_runs(r"[ \t]*(?:python3?|py)?[ \t]*\n")
    for regex in (code._LANG, code._OPEN_FENCE_TAIL):
        assert meeting_runs(regex.pattern) == [], regex.pattern

# --- scoring --------------------------------------------------------------------------------------


def test_fraction_binary_none_and_columns():
    half = "def add(a, b):\n    return a + b if a >= 0 else 99\n"
    res = score([fenced(GOOD), fenced(half), "no code at all", GOOD])
    np.testing.assert_allclose(res.total, [1.0, 2 / 3, 0.0, 1.0])
    res = score([fenced(GOOD), fenced(half)], mode="binary")
    np.testing.assert_allclose(res.total, [1.0, 0.0])
    rows = [{"prompt": "p", "tests": None}, {"prompt": "p", "checks": ["assert add(1, 1) == 2", "assert add(0, 0) == 1"]}]
    res = score([GOOD, GOOD], rows=[rows[0], {"prompt": "p", "tests": rows[1]["checks"]}])
    assert np.isnan(res.per_reward["code_tests"][0]) and res.per_reward["code_tests"][1] == 0.5
    assert res.metrics["code_tests"]["none_count"] == 1
    res = score([GOOD], rows=[rows[1]], column="checks")
    assert res.total[0] == 0.5
    with pytest.raises(RewardError, match="needs column 'tests'"):
        score([GOOD], rows=[{"prompt": "p"}])
    with pytest.raises(ConfigError, match="no option 'timeout'"):  # refused when the run is set up
        score([GOOD], timeout=3)


def test_options_and_columns_are_checked_before_any_model_loads(tmp_path):
    """Read only at the first step (after the model load, a rollout and a checkpoint), a bad option
    stopped the run late, and a bad ``python`` as a bare FileNotFoundError naming no option."""
    pm = get_plugin_manager(entry_points=False)

    def setup(columns=("prompt", "tests"), **options):
        return RewardComputer(pm, [("code_tests", 1.0, {**FAST, **options})], columns=list(columns))

    setup()  # fine
    cases = [({"python": str(tmp_path / "missing")}, r"option python = .*missing.* cannot be run.*Fix: "),
             ({"python": 5}, r"option python must be a path, got 5"),
             ({"cpu_s": "x"}, r"cpu_s must be a number > 0"),
             ({"column": "checks"}, r"option column names column 'checks', which the dataset does not have "
                                    r"\(its columns: prompt, tests\)"),
             ({"setup_column": "setup"}, r"setup_column names column 'setup'")]
    for options, match in cases:
        with pytest.raises(ConfigError, match=match) as info:
            setup(**options)
        assert info.value.field == "rewards[0].options", options


@pytest.mark.parametrize(("key", "value"), [("timeout_s", 1e20), ("cpu_s", 10**19), ("memory_mb", 10**13)])
def test_a_limit_past_what_the_kernel_holds_is_refused_when_the_run_is_set_up(key, value):
    """Past int64 for RLIMIT_CPU / RLIMIT_AS every sample's sandbox failed to start: every
    completion, a right one too, scored 0 with a warning each, and the run trained on the zeros."""
    pm = get_plugin_manager(entry_points=False)
    with pytest.raises(ConfigError, match=rf"code_tests: option {key} must be at most \d+, got .*Fix: e.g. {key} = ") \
            as info:
        RewardComputer(pm, [("code_tests", 1.0, {**FAST, key: value})], columns=["prompt", "tests"])
    assert info.value.field == "rewards[0].options"


def test_a_wrong_solution_fails_the_asserts_below_the_top_level():
    """Mixed tests (one top-level assert, the rest in a loop, in a checker function, in pytest-style
    functions): a solution passing only the first case scored 1.0, now the share it passes."""
    wrong, right = "def f(x):\n    return 0\n", "def f(x):\n    return 2 * x\n"
    cells = ["assert f(0) == 0\nfor x in range(1, 10):\n    assert f(x) == 2 * x\n",
             "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(5) == 10\nassert f(0) == 0\ncheck(f)\n",
             "def test_zero():\n    assert f(0) == 0\ndef test_three():\n    assert f(3) == 6\n"]
    rows = [{"prompt": "p", "tests": cell} for cell in cells]
    np.testing.assert_allclose(score([wrong] * 3, rows=rows).total, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(score([right] * 3, rows=rows).total, [1.0, 1.0, 1.0])


def test_setup_column_and_sandbox_home_is_private():
    rows = [{"prompt": "p", "tests": "assert helper() == 7\nassert home_ok", "setup": "def helper():\n    return 7\n"}]
    code = ("import os\nhome_ok = os.path.expanduser('~') == os.getcwd() and 'API_KEY' not in os.environ\n"
            "open('scratch.txt', 'w').write('fine')\nos.remove('scratch.txt')\n")
    os.environ["API_KEY"] = "secret"
    try:
        res = score([code], rows=rows, setup_column="setup")
    finally:
        del os.environ["API_KEY"]
    assert res.total[0] == 1.0


def test_forged_results_and_early_exits_score_zero():
    cheats = [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        'import os\nos.write(3, b\'{"nonce": "x", "error": null, "passed": [true, true, true]}\\n\')\n' + GOOD,
        "import json\njson.dumps = lambda *a, **k: '{\"passed\": [true, true, true]}'\n" + GOOD.replace("a + b", "None"),
        "print('passed: 3/3')\n",
    ]
    res = score(cheats)
    np.testing.assert_array_equal(res.total, [0.0] * len(cheats))


def test_module_answers_never_run_code_in_the_trainer(tmp_path, monkeypatch):
    """A module-typed value is answered by its name; the trainer never imports a name the sample
    chose (``unittest.__main__`` ran test discovery here, ``lib2to3.__main__`` raised SystemExit
    out of the reward). Each such sample scores 0 and the batch is scored as usual."""
    marker = tmp_path / "PWNED_BY_TRAINER_SIDE_IMPORT"
    (tmp_path / "test_innocent.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["trainer"])
    for name in ("unittest.__main__", "lib2to3.__main__", "test_innocent"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    texts = ["import types\ndef add(a, b):\n    return types.ModuleType('unittest.__main__')\n",
             "import types\nm = types.ModuleType('lib2to3.__main__')\n" + GOOD.replace("a + b", "None"),
             "import types\nm = types.ModuleType('lib2to3.__main__')\n" + GOOD]
    res = score(texts + [GOOD])
    np.testing.assert_array_equal(res.total, [0.0, 0.0, 1.0, 1.0])
    assert not marker.exists()
    assert "unittest.__main__" not in sys.modules and "lib2to3.__main__" not in sys.modules


# --- malicious samples: zero reward, nothing else -----------------------------------------------

MALICIOUS = {
    "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", "error", "os.fork"),
    "shell_fork_bomb": ("import os\nos.system(':(){ :|:& };:')\n", "error", "os.system"),
    "subprocess": ("import subprocess\nsubprocess.Popen(['sleep', '60'])\n", "error", "subprocess.Popen"),
    "infinite_loop": (GOOD + "while True:\n    pass\n", "timeout", None),
    "huge_output": (GOOD + "while True:\n    print('x' * 100000)\n", "output_limit", None),
    "memory_bomb": (GOOD + "hog = []\nwhile True:\n    hog.append(bytearray(10**7))\n", "error", "MemoryError"),
    "ctypes": ("import ctypes\nctypes.CDLL(None).fork()\n", "error", "ctypes"),
    "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "error", "signalling"),
}


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_malicious_sample_is_contained(name):
    code, status, detail = MALICIOUS[name]
    if name == "ctypes" and LEVEL.level == "bwrap":  # allowed behind bubblewrap (numpy needs it): contained
        status, detail = "ok", None
    before = my_children()
    timeout_s = LOOP_TIMEOUT_S if status == "timeout" else FAST["timeout_s"]  # the others end by themselves
    result = Sandbox(SandboxLimits(timeout_s=timeout_s, memory_mb=256, max_output_bytes=4096)).run(code, parse_tests(TESTS))
    assert result.status == status, (result.status, result.error, result.output[:200])
    assert result.fraction == 0.0
    if detail:
        assert detail in (result.error or ""), result.error
    assert len(result.output) <= 4096
    assert sandbox_processes() == 0
    assert my_children() == before


def test_files_outside_the_sandbox_survive(tmp_path):
    protected = tmp_path / "protected.txt"
    protected.write_text("keep me")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "inner.txt").write_text("me too")
    attacks = [
        f"import os\nos.remove({str(protected)!r})\n",
        f"import pathlib\npathlib.Path({str(protected)!r}).unlink()\n",
        f"open({str(protected)!r}, 'w').write('pwned')\n",
        f"open({str(protected)!r}, 'a').write('pwned')\n",
        f"import shutil\nshutil.rmtree({str(folder)!r})\n",
        f"import os\nos.rename({str(protected)!r}, 'stolen.txt')\n",
        f"import os\nos.symlink({str(protected)!r}, 'link')\nopen('link', 'w').write('pwned')\n",
        f"import os\nos.chmod({str(protected)!r}, 0)\n",
        f"import os\nfd = os.open({str(tmp_path)!r}, os.O_RDONLY)\nos.unlink('protected.txt', dir_fd=fd)\n",
    ]
    res = score([a + GOOD for a in attacks])
    np.testing.assert_array_equal(res.total, [0.0] * len(attacks))
    assert protected.read_text() == "keep me"
    assert (folder / "inner.txt").read_text() == "me too"
    assert oct(protected.stat().st_mode & 0o777) != "0o0"


def test_no_network():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    attacks = [
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n",
        "import socket\nsocket.getaddrinfo('example.com', 80)\n",
        f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1)\n",
    ]
    try:
        res = score([a + GOOD for a in attacks])
        np.testing.assert_array_equal(res.total, [0.0] * len(attacks))
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_a_batch_of_looping_samples_scores_zero_instead_of_stopping_the_run(monkeypatch):
    """Every looping sample costs its own timeout_s, and code_tests scores the batch in one call:
    256 of them (5 s, 2 workers) need 640 s, past the call's 600 s limit, and the run stopped
    with RewardError. The call's default limit grows with the batch. Scaled down: a 2 s default
    call limit, 8 samples of 1 s on 2 workers (4 s at least)."""
    from polyrl.rewards import combine

    monkeypatch.setattr(combine, "DEFAULT_TIMEOUT_S", 2.0)
    pm = get_plugin_manager(entry_points=False)
    computer = RewardComputer(pm, [("code_tests", 1.0, {"timeout_s": 1, "extract": "raw", "memory_mb": 256})],
                              timeouts={"code_tests": None})  # [[rewards]] timeout_s unset
    n = 8
    rows = [{"prompt": "p", "tests": "assert f() == 1"}] * n
    comps = [Completion(0, [1], [2], [0.0], text="def f():\n    while True:\n        pass\n") for _ in range(n)]
    res = computer(["p"] * n, comps, RewardContext(rows=rows, wanted=("code_tests",)))
    np.testing.assert_array_equal(res.per_reward["code_tests"], [0.0] * n)
    assert res.metrics["code_tests"]["timeouts"] == n


class Hangs:
    """An async reward that answers nothing for 60 s (never, to the limits here) and declares
    ``need`` seconds per completion."""

    is_async = True

    def __init__(self, name, need):
        self.name, self.need = name, need

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name=self.name))

    @hookimpl
    def reward(self, prompts, completions, context):  # pragma: no cover - await_reward answers
        return None

    async def await_reward(self, prompts, completions, context):
        await asyncio.sleep(60)

    def call_time_s(self, name, options, n):
        if self.need == "raise":
            raise ValueError("bad options")
        return self.need * n


def test_a_stuck_reward_is_still_caught_at_the_limit_its_work_needs(monkeypatch):
    """A plugin's ``call_time_s`` raises its call's default limit to what its batch needs; a call
    that hangs is still an error, at that limit. A ``call_time_s`` that raises or answers less
    keeps the configured limit."""
    from polyrl.rewards import combine

    monkeypatch.setattr(combine, "DEFAULT_TIMEOUT_S", 0.5)

    for need, limit in ((0.75, 1.5), ("raise", 0.5), (0.1, 0.5)):
        plugin = Hangs("hangs", need)
        computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [("hangs", 1.0, {})])
        start = time.monotonic()
        with pytest.raises(RewardError, match=f"did not answer within {limit:g} s"):
            computer(["p", "p"], [Completion(0, [1], [2], [0.0], text="x")] * 2,
                     RewardContext(rows=[{}, {}], wanted=("hangs",)))
        assert limit <= time.monotonic() - start < limit + 10  # waited its limit, then cut off: the call never answers


def test_a_users_own_timeout_is_the_cap_even_when_the_batch_needs_more(capsys):
    """A plugin's ``call_time_s`` raised the call's limit past the user's explicit [[rewards]]
    timeout_s (a budget for the step): 0.5 s set, 1.5 s waited. The user's value is the cap now;
    one warning, and the timeout error's fix, name the minimum the batch may need. Seen, not timed:
    the batch's 100 s is past the hang's own 60 s, so a call given it would end with no scores
    instead of "did not answer" (a bound of 4 s on the elapsed time measured the machine)."""
    computer = RewardComputer(get_plugin_manager(extra=[Hangs("hangs", 50)], entry_points=False),
                              [("hangs", 1.0, {})], timeouts={"hangs": 0.5})
    with pytest.raises(RewardError, match=r"did not answer within 0.5 s.*Fix: raise timeout_s in its "
                                          r"\[\[rewards\]\] entry to at least 100 \(what 2 completions need"):
        computer(["p", "p"], [Completion(0, [1], [2], [0.0], text="x")] * 2,
                 RewardContext(rows=[{}, {}], wanted=("hangs",)))
    logged = capsys.readouterr()
    assert "reward call limit kept at your timeout_s" in logged.out + logged.err


def test_a_concurrent_sample_keeps_its_output():
    """Each sample's tests run in a forked copy of the trainer, which held every descriptor of the
    trainer, the stdin pipes of the samples other threads ran included: a sample whose tests were
    done never saw EOF while another sample's copy lived, so it was killed and what it printed was
    lost (the python tool answered "" for a program that printed), 0.5 s later."""
    import threading

    box = Sandbox(SandboxLimits(timeout_s=10, memory_mb=256, max_output_bytes=4096))
    results: dict[str, object] = {}
    finished: dict[str, float] = {}

    def run(name: str, code: str) -> None:
        results[name] = box.run(code, [])
        finished[name] = time.monotonic()

    short = threading.Thread(target=run, args=("short", "import time\ntime.sleep(1.5)\nprint('short-output')\n"))
    long = threading.Thread(target=run, args=("long", "import time\ntime.sleep(5)\nprint('long-output')\n"))
    short.start()
    time.sleep(0.3)  # the long sample (and its tests' copy) starts while the short one runs
    long.start()
    short.join()
    long.join()
    assert results["short"].status == "ok", results["short"]
    assert results["short"].output == "short-output\n", results["short"]
    assert results["long"].output == "long-output\n", results["long"]
    assert finished["long"] - finished["short"] > 1.5


def test_malicious_batch_costs_zero_and_good_samples_still_score():
    before = my_children()
    texts = [fenced(code) for code, _, _ in MALICIOUS.values()] + [fenced(GOOD)]
    t0 = time.perf_counter()
    res = score(texts, max_workers=2, timeout_s=5)  # one timeout for the loop and the samples that end
    assert time.perf_counter() - t0 < 50  # far below the 60 s the subprocess sample's sleep would hold
    np.testing.assert_array_equal(res.total, [0.0] * len(MALICIOUS) + [1.0])
    m = res.metrics["code_tests"]
    assert m["timeouts"] == 1 and m["violations"] >= 1 and m["pass_rate"] == pytest.approx(1 / len(texts))
    assert sandbox_processes() == 0 and my_children() == before


# --- the kernel layers alone (audit hook off) -------------------------------------------------------

LEVEL = Sandbox(SandboxLimits(timeout_s=1), isolation="weak")  # "auto" refuses where bwrap cannot run
needs_ns = pytest.mark.skipif(LEVEL.level == "off", reason=f"no namespaces here: {LEVEL.report['isolation']}")


@needs_ns
def test_pid_namespace_kills_every_descendant():
    """With the Python guard off, forked children (bounded here) all die when the sample ends;
    behind bubblewrap's seccomp filter there are none (new processes are refused)."""
    code = ("import os, time\nforked = 0\nfor _ in range(8):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        continue\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
            "    forked += 1\nprint('forked', forked, flush=True)\nwhile True:\n    pass\n")
    box = Sandbox(SandboxLimits(timeout_s=1.5, max_processes=64), audit_hook=False)
    result = box.run(code, parse_tests(TESTS))
    expected = 0 if box.launch.seccomp_program is not None else 8
    assert result.status == "timeout" and f"forked {expected}\n" in result.output, result
    deadline = time.monotonic() + 5
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == 0


@needs_ns
def test_network_namespace_blocks_connections_without_the_audit_hook():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=1)\n"
    try:
        result = Sandbox(SandboxLimits(timeout_s=3), audit_hook=False).run(code, parse_tests(TESTS))
        assert result.status == "error", result
        assert "unreachable" in result.error.lower() or "refused" in result.error.lower(), result.error
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


def _nobody_box() -> Sandbox | None:
    if os.geteuid() != 0 or SYSTEM_PYTHON is None:
        return None
    try:
        return Sandbox(SandboxLimits(timeout_s=2, max_processes=4), python=SYSTEM_PYTHON, user="nobody",
                       audit_hook=False, isolation="off")
    except RewardError:
        return None


def test_unprivileged_user_layer(tmp_path):
    """As root, samples run as ``nobody`` even without namespaces (isolation = "off"): kernel file
    permissions and RLIMIT_NPROC then hold."""
    box = _nobody_box()
    if box is None:
        pytest.skip("needs root and an interpreter user nobody can run")
    assert box.report["user"].startswith("on")
    protected = tmp_path / "protected.txt"
    protected.write_text("keep me")
    tmp_path.chmod(0o755)
    result = box.run(f"import os\nos.remove({str(protected)!r})\n", parse_tests(TESTS))
    assert result.status == "error" and "Permission" in (result.error or "")
    assert protected.read_text() == "keep me"
    bomb = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n"
    result = box.run(bomb, parse_tests(TESTS))
    assert result.status == "error" and "Resource temporarily unavailable" in (result.error or "")
    assert sandbox_processes() == 0


def test_isolation_report_names_every_layer():
    report = Sandbox(SandboxLimits(timeout_s=1)).report
    assert set(report) == {"isolation", "filesystem", "seccomp", "descriptors", "user", "audit_hook", "rlimits",
                           "timeout", "verdict", "tests"}
    assert report["audit_hook"] == "on"
    assert report["tests"].startswith("in a forked copy of the trainer")
    assert report["verdict"].startswith("computed by the trainer")
