"""What tests can do against a solution that lives in another process (``polyrl.sandbox.harness``)."""

from __future__ import annotations

import collections.abc
import importlib
import math
import types

import pytest

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, harness
from polyrl.sandbox.remote_exceptions import IteratorEnd, SampleExit
from polyrl.sandbox.values import MAX_DEPTH, ProtocolError, encode


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return Sandbox(SandboxLimits(timeout_s=6, memory_mb=512))


def run(box, code, tests, setup=""):
    return box.run(code, parse_tests(tests), setup)


def test_objects_methods_iteration_and_exceptions(box):
    code = ("class Stack:\n    def __init__(self):\n        self.items = []\n"
            "    def push(self, x):\n        self.items.append(x)\n        return self\n"
            "    def pop(self):\n        if not self.items:\n            raise IndexError('empty')\n"
            "        return self.items.pop()\n    def __len__(self):\n        return len(self.items)\n"
            "    def __iter__(self):\n        return iter(list(self.items))\n"
            "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n")
    tests = ("s = Stack()\ns.push(1).push(2)\nassert len(s) == 2\nassert list(s) == [1, 2]\n"
             "assert s.pop() == 2\nassert s.items == [1]\n"
             "try:\n    check(-1)\nexcept ValueError:\n    raised = True\nelse:\n    raised = False\nassert raised\n"
             "assert all(check(i) == i for i in range(5))\nassert [check(i) for i in range(3)] == [0, 1, 2]\n"
             "assert Stack().pop() == 0\n")
    result = run(box, code, tests)
    assert result.status == "ok", result
    assert result.passed == [True, True, True, True, True, True, True, False]


def test_globals_changed_by_calls_are_seen(box):
    code = "count = 0\ndef bump():\n    global count\n    count += 1\n    return count\n"
    result = run(box, code, "bump()\nbump()\nassert count == 2\nassert bump() == 3\nassert count == 3\n")
    assert result.passed == [True, True, True]


def test_setup_runs_on_both_sides_and_helpers_from_the_tests_work(box):
    setup = "import math\nfrom collections import Counter\n"
    code = "def area(r):\n    return math.pi * r * r\ndef letters(s):\n    return Counter(s)\n"
    tests = ("def close(a, b):\n    return abs(a - b) < 1e-9\nassert close(area(1), math.pi)\n"
             "assert letters('aab')['a'] == 2\n")
    result = run(box, code, tests, setup=setup)
    assert result.status == "ok" and result.passed == [True, True], result


def test_snippet_lists_bytes_sets_and_dicts(box):
    code = "def f(x):\n    return {'x': x, 'b': bytes([x]), 's': {x, x + 1}, 't': (x,)}\n"
    tests = ["assert f(1) == {'x': 1, 'b': b'\\x01', 's': {1, 2}, 't': (1,)}", "f(2)['missing']", "f(3)"]
    result = box.run(code, parse_tests(tests))
    assert result.passed == [True, False, True]


def test_a_tests_lambda_is_called_back_and_a_tests_object_fails_only_its_test(box):
    code = "def apply(f, x):\n    return f(x)\ndef ident(x):\n    return x\n"
    tests = "class T:\n    pass\nassert apply(lambda v: v + 1, 1) == 2\nassert ident(T()) is None\nassert ident(5) == 5\n"
    assert run(box, code, tests).passed == [True, False, True]


def test_numpy_solutions_behind_bubblewrap(box):
    if box.level != "bwrap":
        pytest.skip("ctypes (numpy) is refused by the audit hook without bubblewrap")
    code = "import numpy as np\ndef total(xs):\n    return np.asarray(xs).sum()\ndef arr():\n    return np.arange(3)\n"
    result = run(box, code, "assert total([1, 2, 3]) == 6\nassert isinstance(total([1]), int)\n"
                            "assert list(arr()) == [0, 1, 2]\nassert arr() == [0, 1, 2]\n")
    assert result.status == "ok", result
    assert result.passed == [True, True, True, False]  # an array is no list: it stays in the sample


def test_a_function_the_sample_redefines_is_the_one_called_next(box):
    code = ("def f():\n    global f\n    def f():\n        return 2\n    return 1\n"
            "def make():\n    global g\n    g = lambda: 3\n    return 0\n")
    result = run(box, code, "assert f() == 1\nassert f() == 2\nassert make() == 0\nassert g() == 3\n")
    assert result.passed == [True, True, True, True], result


def test_a_module_the_sample_hands_over_is_a_read_only_view(box):
    """The tests get the trainer's module for a sample's ``import math``, never as an object they
    could change for every later sample."""
    original = math.isclose
    code = "import math\ndef mod():\n    return math\n"
    tests = ("m = mod()\nassert m.isclose(m.sqrt(4), 2.0) and m.pi > 3\n"
             "try:\n    m.isclose = lambda *a, **k: True\nexcept TypeError:\n    pass\n"  # refused
             "assert not m.isclose(0.0, 1.0)\nassert math.sqrt(9) == 3\n")
    try:
        result = run(box, code, tests)
        assert math.isclose is original
    finally:
        math.isclose = original
    assert result.passed == [True, True, True], result


HOSTILE_MODULES = ["unittest.__main__", "lib2to3.__main__", "test.__main__", "json.tool", "__main__", "os", "sys",
                   "subprocess", "shutil", "importlib", "builtins", "polyrl.cli", "antigravity", "this", "random",
                   "math.__main__", "math.", ".math", "", "?", "x" * 10_000]


@pytest.mark.parametrize("name", HOSTILE_MODULES)
def test_a_module_answer_never_imports_or_hands_over_what_the_sample_named(monkeypatch, name):
    imported: list[str] = []
    monkeypatch.setattr(importlib, "import_module", lambda n, *a: imported.append(n))
    stand_in = harness.local_module(name)
    assert imported == []
    assert not isinstance(stand_in, types.ModuleType)
    with pytest.raises(harness.RemoteError, match="not available to the tests"):
        stand_in.path  # noqa: B018


def test_allowlisted_modules_are_the_trainers_own_read_only():
    view = harness.local_module("math")
    assert view.isclose is math.isclose and view.pi == math.pi
    with pytest.raises(TypeError):
        view.isclose = None
    assert harness.local_module("collections.abc").Mapping is collections.abc.Mapping
    assert all("__main__" not in name for name in harness.SAFE_MODULES)


class _NoChannel:
    dead = None


def test_malformed_stand_ins_are_protocol_errors():
    session = harness.Session(_NoChannel())
    deep: list = ["n"]
    for _ in range(MAX_DEPTH + 2):
        deep = ["L", [deep]]
    assert len(repr(session.value(["r", 0, "callable", "x" * 10_000]))) < 200
    for bad in (deep, ["r", 0, "callable", ["l", []]], ["r", 0, ["x"], "int"],
                ["m", ["s", "math"]]):
        with pytest.raises(ProtocolError):
            session.value(bad)


def test_a_sample_exception_is_never_control_flow_or_a_trainer_crash():
    assert isinstance(harness.remote_exception(["ValueError", "no"]), ValueError)
    for name in ("StopIteration", "StopAsyncIteration", "KeyboardInterrupt", "GeneratorExit",
                 "__import__", "object"):
        exc = harness.remote_exception([name, "x"])
        # the sample's StopIteration is a RemoteError too, one the tests' ``next(g, default)`` knows
        assert type(exc) is (IteratorEnd if name == "StopIteration" else harness.RemoteError), name
        assert isinstance(exc, harness.RemoteError) and not isinstance(exc, (StopIteration, StopAsyncIteration))
    # the sample's exit is one the tests' ``except SystemExit`` takes, never the tests' own success
    exited = harness.remote_exception(["SystemExit", "2", [["builtins", "SystemExit"]], {"args": encode((2,))}])
    assert type(exited) is SampleExit and exited.code == 2
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    for bad in (["ValueError", deep], [deep, "m"], deep, {"a": 1}, None, ["ValueError", "m" * 100_000]):
        exc = harness.remote_exception(bad)
        assert len(str(exc)) < 1000


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt, GeneratorExit, RecursionError, MemoryError])
@pytest.mark.parametrize("where", ["top_level", "in_a_call"])
def test_anything_raised_while_decoding_an_answer_ends_only_that_sample(box, monkeypatch, kind, where):
    """However decoding a sample's answer fails here (even with a BaseException), that sample stops
    with the reason recorded and the next one is scored as usual."""
    real = harness.decode

    def decode(data, depth=0):
        if data == ["s", "boom"]:
            raise kind(2) if kind is SystemExit else kind()
        return real(data, depth)

    monkeypatch.setattr(harness, "decode", decode)
    code = "boom = 'boom'\n" if where == "top_level" else "def add(a, b):\n    return 'boom'\n"
    result = run(box, code, "assert add(1, 2) == 3\n")
    assert result.status == "crashed" and result.fraction == 0.0, result
    assert kind.__name__ in (result.error or ""), result
    assert run(box, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n").all_passed


def test_a_forged_hello_is_bounded(box):
    code = ("import __main__, os\n_orig = __main__._Channel.send\ndef send(self, m):\n    if 'fds' in m:\n"
            "        os.write(self.wfd, b'{\"ok\": false, \"fds\": [' + b'7,' * 100000 + b'7], \"exc\": [[[1]], {\"a\": 1}]}\\n')\n"
            "        return\n    _orig(self, m)\n__main__._Channel.send = send\n")
    result = run(box, code, "assert add(1, 2) == 3\n")
    assert result.status == "error" and result.fraction == 0.0, result
    assert len(result.inherited_fds) <= 64 and len(result.error or "") < 500, result.error


def test_anything_else_raised_while_scoring_ends_only_that_sample(box, monkeypatch):
    from polyrl.sandbox import runner

    def raising(*args, **kwargs):
        raise SystemExit(3)

    monkeypatch.setattr(runner, "run_tests", raising)
    result = run(box, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n")
    assert result.status == "crashed" and result.fraction == 0.0 and "SystemExit" in (result.error or ""), result
