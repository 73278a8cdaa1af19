"""Forging the verdict: wrong solutions that attack the harness instead of solving the task.

Each sample below defines a WRONG ``add`` (or none) plus a trick; every one must score exactly 0.
The tricks run with the audit hook OFF, under full OS isolation ("auto" -> bubblewrap here) and
under none at all ("off"): the verdict's integrity comes from where it is computed (the trainer,
on typed values), not from the walls around the sample.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import parse_tests
from polyrl.rewards.combine import RewardComputer
from polyrl.sandbox import Sandbox, SandboxLimits, harness
from polyrl.types import Completion, RewardContext

pytestmark = pytest.mark.faults

TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(-1, 1) == 0\n"
WRONG = "def add(a, b):\n    return None\n"
FORGED_LINES = ('{"ok": true, "v": ["b", true]}', '{"ok": true, "v": {"add": ["b", true]}, "fds": []}',
                '{"nonce": "x", "error": null, "passed": [true, true, true]}', "3 passed", "PASSED", "ok")
FORGE_WRITE = "b''.join(line.encode() + b'\\n' for line in " + repr(FORGED_LINES) + ")"

FORGERIES = {
    "patch_builtins": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                      "builtins.__dict__['abs'] = lambda x: 0\nbuiltins.int = lambda *a: 3\n"
                      "builtins.Exception = type('Nope2', (BaseException,), {})\n" + WRONG,
    "always_equal": "class Yes:\n    def __eq__(self, other):\n        return True\n"
                    "    def __ne__(self, other):\n        return False\n    def __bool__(self):\n        return True\n"
                    "    __hash__ = object.__hash__\ndef add(a, b):\n    return Yes()\n",
    "int_subclass": "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                    "def add(a, b):\n    return I(7)\n",
    "str_subclass": "class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
                    "def add(a, b):\n    return S('no')\n",
    "print_results": f"import sys\nsys.stdout.buffer.write({FORGE_WRITE})\nsys.stdout.flush()\n" + WRONG,
    "write_every_descriptor": f"import os\nfor fd in range(0, 64):\n    try:\n        os.write(fd, {FORGE_WRITE})\n"
                              "    except OSError:\n        pass\n" + WRONG,
    "exit_zero": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "exit_inside_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "system_exit_inside_call": "def add(a, b):\n    raise SystemExit(0)\n",
    "kill_itself": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "patch_the_server": "import __main__\n__main__._Session.handle = lambda self, req: "
                        "self.names() if req['op'] == 'names' else ['b', True]\n" + WRONG,
    "patch_the_channel": "import __main__\n_orig = __main__._Channel.send\n"
                         "def send(self, message):\n    message = {'ok': True, 'v': ['b', True]} if 'v' in message and "
                         "not isinstance(message['v'], dict) else message\n    _orig(self, message)\n"
                         "__main__._Channel.send = send\n" + WRONG,
    "malformed_answer": "import __main__\n__main__._Session.handle = lambda self, req: "
                        "self.names() if req['op'] == 'names' else ['i', '1e99999']\n" + WRONG,
    "deep_json": "import __main__, os\n_orig = __main__._Channel.send\n"
                 "def send(self, message):\n    if 'fds' in message:\n        return _orig(self, message)\n"
                 "    os.write(self.wfd, b'{\"ok\": true, \"v\": ' + b'[' * 200000 + b']' * 200000 + b'}\\n')\n"
                 "__main__._Channel.send = send\n" + WRONG,
    "trainer_module": "import __main__\n_names = __main__._Session.names\n"
                      "__main__._Session.names = lambda self: {**_names(self), 'add': ['m', 'polyrl.cli'], "
                      "'__builtins__': ['d', []]}\n",
    "handle_lookalike": "def add(a, b):\n    return ['r', 0, 'callable', 'int']\n",
    "background_writer": "import os, threading, time\ndef spam():\n    while True:\n        for fd in (3, 4, 1):\n"
                         f"            try:\n                os.write(fd, {FORGE_WRITE})\n            except OSError:\n"
                         "                pass\n        time.sleep(0.001)\nthreading.Thread(target=spam, daemon=True).start()\n"
                         + WRONG,
}
#: Only where the sample cannot reach the trainer (PID namespace): as root with no isolation and
#: no audit hook these would kill the test runner, which is the point of the walls.
KILLERS = {
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + WRONG,
    "kill_everything": "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n" + WRONG,
}

#: The isolation levels the verdict tests score under. Only "auto": the verdict is the trainer's
#: harness reading the sample's typed values, whatever started the sample, so each table run again
#: at the "off" level (no namespaces, the sample's own user) took the suite's time on the same
#: code (~100 worker-seconds). ``test_the_tables_score_alike_at_the_off_level`` keeps a row of each
#: table at "off"; the slow forgery sweeps keep both levels in full (``SLOW_MODES``).
MODES = [("auto", False)]
SLOW_MODES = [("auto", False), ("off", False)]


def user_for(isolation: str) -> str:
    """``isolation = "off"`` as root refuses samples running as root unless asked (user = "none")."""
    return "none" if isolation == "off" else "auto"


def score(texts, rows=None, isolation="auto", audit_hook=False):
    pm = get_plugin_manager(entry_points=False)
    options = {"timeout_s": 4, "memory_mb": 512, "max_output_bytes": 16384, "isolation": isolation,
               "audit_hook": audit_hook, "extract": "raw", "setup_column": "setup", "user": user_for(isolation)}
    computer = RewardComputer(pm, [("code_tests", 1.0, options)])
    rows = rows if rows is not None else [{"prompt": "write add", "tests": TESTS}] * len(texts)
    comps = [Completion(0, [1], [2], [0.0], text=t) for t in texts]
    return computer([r["prompt"] for r in rows], comps, RewardContext(rows=rows, wanted=("code_tests",)))


@pytest.mark.parametrize("isolation,audit_hook", SLOW_MODES)
@pytest.mark.slow
def test_forgeries_score_zero(isolation, audit_hook):
    names = sorted(FORGERIES)
    controls = ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a + b if a > 0 else 5\n"]
    res = score([FORGERIES[n] for n in names] + controls, isolation=isolation, audit_hook=audit_hook)
    got = dict(zip(names, res.total[: len(names)]))
    assert {n: s for n, s in got.items() if s != 0.0} == {}
    np.testing.assert_allclose(res.total[len(names):], [1.0, 2 / 3])  # the harness still scores honestly


def test_killing_the_harness_scores_zero_behind_the_walls():
    box = Sandbox(SandboxLimits(timeout_s=4), isolation="auto", audit_hook=False)
    if box.level == "off":
        pytest.skip("needs a PID namespace: " + box.report["isolation"])
    for name, code in KILLERS.items():
        result = box.run(code, parse_tests(TESTS))
        assert result.fraction == 0.0 and not result.all_passed, (name, result)
    assert box.run("def add(a, b):\n    return a + b\n", parse_tests(TESTS)).all_passed


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_shadowed_builtins_and_fake_modules_do_not_reach_the_tests(isolation, audit_hook):
    rows = [
        {"prompt": "p", "tests": "assert sorted(triple()) == [1, 2, 3]\nassert len(triple()) == 3"},
        {"prompt": "p", "tests": "import math\nassert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)"},
        {"prompt": "p", "tests": "assert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)"},
        {"prompt": "p", "tests": "assert isinstance(triple(), list) and triple() == [1, 2, 3]"},
    ]
    texts = [
        "def sorted(x):\n    return [1, 2, 3]\ndef len(x):\n    return 3\ndef triple():\n    return [3, 3]\n",
        "import sys, types\nfake = types.ModuleType('math')\nfake.isclose = lambda *a, **k: True\n"
        "sys.modules['math'] = fake\nmath = fake\ndef area(r):\n    return 0.0\n",
        "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 0.0\n",
        "def isinstance(*a):\n    return True\nclass L(list):\n    def __eq__(self, o):\n        return True\n"
        "def triple():\n    return L()\n",
    ]
    res = score(texts, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [0.0] * len(texts))
    honest = ["def triple():\n    return [3, 1, 2]\n", "import math\ndef area(r):\n    return math.pi * r * r\n",
              "import math\ndef area(r):\n    return math.pi * r * r\n", "def triple():\n    return [1, 2, 3]\n"]
    res = score(honest, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [1.0] * len(honest))


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_module_the_tests_use_unimported_is_the_real_one(isolation, audit_hook):
    """MBPP keeps ``import math`` in a column of its own and numpy cells lean on the solution's
    ``import numpy as np``: the name was the sample's, so a class named ``math`` whose
    ``isclose`` always agrees scored 1.0 with a volume of 0."""
    rows = [
        {"prompt": "p", "tests": "assert math.isclose(volume(10), 4188.790204786391, rel_tol=0.001)\n"
                                 "assert math.isclose(volume(25), 65449.84694978735, rel_tol=0.001)\n"},
        {"prompt": "p", "tests": "assert np.allclose(solve([1, 2]), [2, 4])\n"},
        {"prompt": "p", "tests": "assert copy([1, 2]) == [1, 2]\n"},  # called: the solution's, not the module
    ]
    forged = ["class math:\n    @staticmethod\n    def isclose(*a, **k):\n        return True\n"
              "def volume(r):\n    return 0.0\n",
              "class np:\n    allclose = staticmethod(lambda *a, **k: True)\ndef solve(x):\n    return None\n",
              "def copy(xs):\n    return []\n"]
    res = score(forged, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [0.0] * len(forged))
    honest = ["import math\ndef volume(r):\n    return 4 / 3 * math.pi * r ** 3\n",
              "import numpy as np\ndef solve(x):\n    return [2 * v for v in x]\n",  # np was unusable to the tests
              "def copy(xs):\n    return list(xs)\n"]
    res = score(honest, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [1.0] * len(honest))


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_standard_name_the_tests_use_unimported_is_the_real_one(isolation, audit_hook):
    """``Counter``, ``pi``, ``isclose``, ... with their import in another column (or the
    solution's): the name was the sample's, so a ``Counter`` and a ``count`` that both return 1
    passed ``assert count(s) == Counter(s)``, as did ``pi = 0`` with an area of 0 and an
    ``isclose`` that always agrees. Bound only where the tests use another name of the solution's:
    a task whose function is itself named ``Counter`` still calls the solution's."""
    rows = [
        {"prompt": "p", "tests": "assert count('aab') == Counter('aab')\nassert count('xy') == Counter({'x': 1, 'y': 1})"},
        {"prompt": "p", "tests": "assert area(2) == pi * 4\nassert abs(area(3) - pi * 9) < 1e-9"},
        {"prompt": "p", "tests": "assert isclose(area(1.0), 3.14159, rel_tol=1e-3)"},
        {"prompt": "p", "tests": "from solution import rot\nassert rot([1, 2, 3]) == list(deque([3, 1, 2]))"},
        {"prompt": "p", "tests": "assert Counter('aab') == {'a': 2, 'b': 1}"},  # the task's own function
        {"prompt": "p", "tests": "assert copy('ab') == Counter('ab')"},  # a function named like a module
    ]
    forged = ["def Counter(*a, **k):\n    return 1\ndef count(s):\n    return 1\n",
              "pi = 0.0\ndef area(r):\n    return 0.0\n",
              "def isclose(*a, **k):\n    return True\ndef area(r):\n    return -1.0\n",
              "def deque(*a):\n    return 7\ndef rot(xs):\n    return 7\n",
              "def Counter(s):\n    return {'x': 0}\n", "def Counter(*a):\n    return 1\ndef copy(s):\n    return 1\n"]
    res = score(forged, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [0.0] * len(forged))
    counting = "def {}(s):\n    d = {{}}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d\n"
    honest = [counting.format("count"), "import math\ndef area(r):\n    return math.pi * r * r\n",
              "import math\ndef area(r):\n    return math.pi * r * r\n", "def rot(xs):\n    return xs[-1:] + xs[:-1]\n",
              counting.format("Counter"), counting.format("copy")]
    res = score(honest, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [1.0] * len(honest))


def test_standard_values_the_tests_make_reach_the_solution_as_their_own_type():
    """With ``deque``, ``Counter``, ``Fraction``... the trainer's own (``standard_names``), a value a
    test builds with one is sent to the sample as plain data that the sample makes into the same
    type: ``rotate(deque([1, 2, 3]), 1)`` worked while ``deque`` was the solution's, and must still."""
    rows = [{"prompt": "p", "tests": "assert rotate(deque([1, 2, 3]), 1) == [3, 1, 2]"},
            {"prompt": "p", "tests": "assert top(Counter('aab')) == 'a'\nassert top(Counter({'x': 3, 'y': 1})) == 'x'"},
            {"prompt": "p", "tests": "assert half(Fraction(1, 3)) == '1/6'\nassert half(Decimal('0.5')) == '0.25'"},
            {"prompt": "p", "tests": "assert keys([OrderedDict([('b', 1), ('a', 2)])]) == [['b', 'a']]"}]
    honest = ["from collections import deque\ndef rotate(d, k):\n    d.rotate(k)\n    return list(d)\n",
              "def top(c):\n    return c.most_common(1)[0][0]\n",
              "def half(f):\n    return str(f / 2)\n",
              "def keys(xs):\n    return [list(x) for x in xs if type(x).__name__ == 'OrderedDict']\n"]
    np.testing.assert_array_equal(score(honest, rows=rows).total, [1.0] * len(honest))


def test_a_test_module_the_trainer_cannot_import_is_never_the_samples(monkeypatch):
    """A ``TEST_MODULES`` name whose module the trainer lacks (pandas not installed) was left to
    the solution: a ``class pd`` whose ``testing.assert_frame_equal`` accepts anything passed."""
    monkeypatch.setitem(harness.TEST_MODULES, "pdx", "polyrl_no_such_module")
    rows = [{"prompt": "p", "tests": "pdx.testing.assert_frame_equal(f(1), pdx.DataFrame({'a': [1]}))"}]
    forged = ["class pdx:\n    class testing:\n        assert_frame_equal = staticmethod(lambda *a, **k: None)\n"
              "    DataFrame = staticmethod(lambda *a, **k: 0)\ndef f(x):\n    return 0\n"]
    res = score(forged, rows=rows)
    np.testing.assert_array_equal(res.total, [0.0])


def test_the_tests_never_run_a_samples_bytes_as_code_in_the_trainer(tmp_path):
    """Tests that unpickle, ``eval`` or ``marshal.loads`` a value the solution returns ran the
    sample's code in the trainer's forked copy, outside every wall, as the trainer's user: the
    pickle wrote a file on the host and its test passed. The copy now refuses such code (and
    writes, processes, signals, connections: ``polyrl.sandbox.tests_guard``); the same tests still
    pass honest data and the tests' own ``eval`` of a literal, and a ``namedtuple`` still builds."""
    marker = tmp_path / "WRITTEN_BY_THE_SAMPLE"
    payload = f"open({str(marker)!r}, 'w').write('x')"
    rows = [{"prompt": "p", "tests": "import pickle\nassert pickle.loads(dump([1, 2])) is not None"},
            {"prompt": "p", "tests": "assert eval(to_expr([1, 2])) is not None"},
            {"prompt": "p", "tests": "import marshal\nexec(marshal.loads(dump([1, 2])))\nassert dump([1, 2])"}]
    forged = ["import pickle\nclass P:\n    def __reduce__(self):\n        return (exec, (" + repr(payload) + ",))\n"
              "def dump(x):\n    return pickle.dumps(P())\n",
              f"def to_expr(x):\n    return {payload!r}\n",
              f"import marshal\ndef dump(x):\n    return marshal.dumps(compile({payload!r}, 's', 'exec'))\n"]
    res = score(forged, rows=rows)
    np.testing.assert_array_equal(res.total, [0.0, 0.0, 0.0])
    assert not marker.exists()
    honest_rows = [{"prompt": "p", "tests": "import pickle\nassert pickle.loads(dump({1: 2.5j, 'a': {3}})) == "
                                            "{1: 2.5j, 'a': {3}}"},
                   {"prompt": "p", "tests": "import collections\nP = collections.namedtuple('P', 'x y')\n"
                                            "assert P(add(1, 2), 0).x == eval('1 + 2')"}]
    honest = ["import pickle\ndef dump(x):\n    return pickle.dumps(x)\n", "def add(a, b):\n    return a + b\n"]
    np.testing.assert_array_equal(score(honest, rows=honest_rows).total, [1.0, 1.0])


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_samples_object_never_answers_a_str_or_set_yes_no_question(isolation, audit_hook):
    """A method call on an object the sample returns is a request to the sample, which sees the
    question before it answers: a class whose every method says yes passed ``startswith``,
    ``endswith``, ``is*`` and ``issubset`` checks. Those belong to str, bytes and set values,
    which come over as themselves; a class's own methods (``isempty``) still answer."""
    liar = "class Liar:\n    def __getattr__(self, name):\n        return lambda *a, **k: True\n"
    rows = [{"prompt": "p", "tests": "assert greet('Bob').startswith('Hello')\nassert greet('Bob').endswith('Bob!')\n"
                                     "assert greet('x').isprintable()"},
            {"prompt": "p", "tests": "assert evens([1, 2, 3, 4]).issubset({2, 4})\nassert evens([1, 3]).isdisjoint({1, 3})"},
            {"prompt": "p", "tests": "s = Stack()\ns.push(2)\nassert s.pop() == 2\nassert s.isempty()"}]
    forged = [liar + "def greet(name):\n    return Liar()\n", liar + "def evens(xs):\n    return Liar()\n",
              liar + "Stack = Liar\n"]
    res = score(forged, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [0.0, 0.0, 0.0])  # pop() == 2 needs the answer, and fails the rest
    honest = ["def greet(name):\n    return 'Hello ' + name + '!'\n", "def evens(xs):\n    return {x for x in xs if x % 2 == 0}\n",
              "class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n        self.xs.append(x)\n"
              "    def pop(self):\n        return self.xs.pop()\n    def isempty(self):\n        return not self.xs\n"]
    res = score(honest, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_malformed_answer_is_no_exception_a_test_can_expect(isolation, audit_hook):
    """Garbage on the channel ends the sample; it is not an exception a test's ``except`` catches."""
    rows = [{"prompt": "p", "tests": "try:\n    add(1, 2)\nexcept Exception:\n    raised = True\nelse:\n"
                                     "    raised = False\nassert raised\n"}]
    res = score([FORGERIES["malformed_answer"]], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert res.total[0] == 0.0
    honest = "def add(a, b):\n    raise ValueError('no')\n"  # raising really is what this test wants
    assert score([honest], rows=rows, isolation=isolation, audit_hook=audit_hook).total[0] == 1.0


#: Wrong solutions that reach for a name the tests or their setup bound themselves, or that steer
#: the tests' own control flow: (solution, tests, setup). Each must score 0.
SHARED_NAME_FORGERIES = {
    # a module the tests imported is the same object as the one the sample's import names
    "rebind_the_tests_module": (
        "import math\nclass _M:\n    def isclose(self, *a, **k):\n        return True\n"
        "def sqrt2(x):\n    global math\n    math = _M()\n    return 0.0\n",
        "import math\nr = sqrt2(2)\nassert math.isclose(r, 1.41421356, rel_tol=1e-6)\nassert math.isclose(sqrt2(9), 3.0)", ""),
    # small ints are cached: the tests' ``tol = 1`` is the sample's ``tol = 1``
    "rebind_the_tests_small_int": (
        "tol = 1\ndef sq(x):\n    global tol\n    tol = 10**9\n    return 0\n",
        "tol = 1\nr = sq(2)\nassert abs(r - 4) < tol\nassert abs(sq(3) - 9) < tol", ""),
    # setup runs on both sides, so the sample starts with setup's very objects
    "rebind_a_setup_name": (
        "def sq(x):\n    global tol\n    tol = 10**9\n    return 0\n",
        "r = sq(2)\nassert abs(r - 4) < tol\nassert abs(sq(3) - 9) < tol", "tol = 1"),
    # the tests' ``r = sqrt2(2)`` fails (not a test step), so ``r`` would be the sample's
    "fill_a_name_whose_binding_failed": (
        "r = 1.41421356\ndef sqrt2(x):\n    raise ValueError('no')\n",
        "import math\nr = sqrt2(2)\nassert math.isclose(r, 1.41421356, rel_tol=1e-6)", ""),
    # StopIteration out of a call ends ``map`` early: ``all`` of nothing is True, ``any`` False
    "stop_iteration_ends_the_tests_loop": (
        "def is_even(x):\n    raise StopIteration\n",
        "assert all(map(is_even, [2, 4]))\nassert not any(map(is_even, [1, 3]))", ""),
}
SHARED_NAME_HONEST = {
    "rebind_the_tests_module": "import math\ndef sqrt2(x):\n    return math.sqrt(x)\n",
    "rebind_the_tests_small_int": "tol = 1\ndef sq(x):\n    global tol\n    tol = 10**9\n    return x * x\n",
    "rebind_a_setup_name": "def sq(x):\n    global tol\n    tol = 10**9\n    return x * x\n",
    "fill_a_name_whose_binding_failed": "r = 0\ndef sqrt2(x):\n    return x ** 0.5\n",
    "stop_iteration_ends_the_tests_loop": "def is_even(x):\n    return x % 2 == 0\n",
}


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_names_the_tests_bound_are_never_the_samples(isolation, audit_hook):
    """The tests' and setup's own names stay theirs whatever the sample binds, returns or raises;
    the same tests still pass an honest solution that rebinds the same names."""
    names = sorted(SHARED_NAME_FORGERIES)
    rows = [{"prompt": "p", "tests": SHARED_NAME_FORGERIES[n][1], "setup": SHARED_NAME_FORGERIES[n][2]}
            for n in names]
    res = score([SHARED_NAME_FORGERIES[n][0] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert {n: s for n, s in zip(names, res.total) if s != 0.0} == {}
    honest = score([SHARED_NAME_HONEST[n] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: A test that expects a raise and accepts any exception; the last step, so no later request
#: would notice that the sample had stopped.
CATCH_ALL = ["try:\n    r = add(1, 2)\nexcept Exception:\n    r = 'raised'\nassert r == 'raised'"]
STOPPED = {
    "timeout": "def add(a, b):\n    while True:\n        pass\n",
    "exit_inside_call": FORGERIES["exit_inside_call"],
    "malformed_answer": FORGERIES["malformed_answer"],
}


@pytest.mark.parametrize("isolation", ["auto", "off"])
def test_a_sample_that_stopped_scores_zero_whatever_the_test_caught(isolation):
    """Timing out, dying or breaking the protocol inside a call is no exception a test's
    ``except Exception`` turns into a pass (it was, on the last step: status "ok", score 1)."""
    box = Sandbox(SandboxLimits(timeout_s=1.5, memory_mb=512), isolation=isolation, audit_hook=False,
                  user=user_for(isolation))
    for name, code in STOPPED.items():
        result = box.run(code, parse_tests(CATCH_ALL))
        assert (result.status, result.fraction) == ({"timeout": "timeout"}.get(name, "crashed"), 0.0), (name, result)
    assert box.run("def add(a, b):\n    raise ValueError('no')\n", parse_tests(CATCH_ALL)).all_passed


#: Ints that all share hash 0 (multiples of 2**61 - 1): a set of them costs n**2 comparisons.
COLLIDING = 30_000
COLLIDE_FORGED = (  # a set on the wire, written past the sample's own encoder
    "import __main__, os\n_send = __main__._Channel.send\n"
    "def send(self, m):\n    if 'fds' in m or m.get('ok') is not True:\n        return _send(self, m)\n"
    f"    body = ','.join('[\"i\",\"%d\"]' % (i * (2**61 - 1)) for i in range({COLLIDING}))\n"
    "    os.write(self.wfd, ('{\"ok\": true, \"v\": [\"S\", [' + body + ']]}\\n').encode())\n"
    "__main__._Channel.send = send\ndef add(a, b):\n    return 0\n")
COLLIDE_LIST = f"def add(a, b):\n    return [i * (2**61 - 1) for i in range({COLLIDING})]\n"


def test_values_built_to_collide_cost_the_sample_not_the_trainer():
    """Decoding a forged set of colliding ints took the trainer ~6 s here (~8 min at the 8 MB
    answer cap, holding the GIL) after a 4 s timeout; a plain list of them did the same in a
    test's ``set(...)``. Now the answer is a protocol error: the sample is "crashed", at once."""
    box = Sandbox(SandboxLimits(timeout_s=4, memory_mb=512), isolation="auto", audit_hook=False)
    tests = parse_tests("assert add(1, 2) == 3\nassert len(set(add(1, 2))) == 3\n")
    for name, code in {"forged_set": COLLIDE_FORGED, "plain_list": COLLIDE_LIST}.items():
        result = box.run(code, tests)
        assert result.status == "crashed" and "collide" in (result.error or ""), (name, result.status, result.error)
    honest = "def add(a, b):\n    return a + b if b != 2 else [0] * 50000 + list(range(3)) + [-1, -2, (1, 2)]\n"
    assert box.run(honest, parse_tests("assert add(1, 1) == 2\nassert len(set(add(1, 2))) == 6\n")).all_passed


def test_a_size_the_sample_returns_cannot_keep_the_tests_running_past_the_timeout():
    """The tests run in the trainer on values the sample chose: a loop over ``range(add(...))``
    ran there for as long as the sample wanted, past every timeout (also in a helper function,
    and when the test caught the stop). Now the tests' own lines stop at the sample's deadline. Seen,
    not timed (was < 10 s elapsed per cell): stopped by their own lines, the error does not say their
    process was killed (the kill 1 s past the deadline is for a C call only); and the loops would run
    for days, so returning within the liveness bound is the stop."""
    from liveness import returns

    box = Sandbox(SandboxLimits(timeout_s=1.5, memory_mb=512), isolation="auto", audit_hook=False)
    huge = "def add(a, b):\n    return 10 ** 15\n"
    cells = ["total = 0\nfor _ in range(add(1, 2)):\n    total += 1\nassert total == 3\n",
             "def count(n):\n    return sum(1 for _ in range(n))\nassert count(add(1, 2)) == 3\n",
             "try:\n    for _ in range(add(1, 2)):\n        pass\nexcept Exception:\n    pass\nassert True\n"]
    for cell in cells:
        result = returns(lambda: box.run(huge, parse_tests(cell)))  # noqa: B023 - called at once
        assert (result.status, result.fraction) == ("timeout", 0.0), (cell, result)
        assert result.error == "the tests ran past timeout_s on the sample's values", (cell, result.error)
    honest = "def add(a, b):\n    return a + b\n"
    assert all(box.run(honest, parse_tests(cell)).all_passed for cell in cells[:2])



def test_a_c_call_or_an_allocation_on_a_sample_value_costs_the_sample_not_the_trainer():
    """One C call on a size the sample returns (``sum(range(f(x)))``, ``[0] * f(x)``) cannot be
    stopped from Python: with the tests in the trainer it held the step for as long as the sample
    wanted, and an allocation took the trainer's memory. The tests now run in a forked copy of the
    trainer, killed past the deadline and capped at max(memory_mb, 1 GiB) over the trainer's address space.
    Seen, not timed (was < 6 s elapsed): the error says their process was killed, and the sum would
    run for hours, so returning within the liveness bound is the kill."""
    import resource

    from liveness import returns

    box = Sandbox(SandboxLimits(timeout_s=1.5, memory_mb=256), isolation="auto", audit_hook=False)
    assert box.tests_forked and "forked copy" in box.report["tests"]
    huge = "def add(a, b):\n    return 10 ** 13\n"
    result = returns(lambda: box.run(huge, parse_tests("assert sum(range(add(1, 2))) == 3\n")))
    assert (result.status, result.fraction) == ("timeout", 0.0), result
    assert result.error == "the tests ran past timeout_s on the sample's values (their process was killed)", result
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = "def add(a, b):\n    return 3 * 10 ** 8\n"  # a 2.4 GB list, ten times memory_mb
    result = box.run(big, parse_tests("assert len([0] * add(1, 2)) == 3\nassert add(0, 3) == 3\n"))
    assert (result.status, result.passed) == ("ok", [False, False]), result
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024  # KiB: nothing held here
    honest = "def add(a, b):\n    return a + b\n"
    assert box.run(honest, parse_tests("assert sum(range(add(1, 2))) == 3\nassert len([0] * add(1, 2)) == 3\n")).all_passed
    in_trainer = Sandbox(SandboxLimits(timeout_s=1.5), isolation="auto", audit_hook=False, tests_in="trainer")
    assert not in_trainer.tests_forked and in_trainer.run(honest, parse_tests("assert add(1, 2) == 3\n")).all_passed

def test_asserts_count_under_python_dash_o():
    """``python -O`` (or PYTHONOPTIMIZE) compiled the tests' asserts away: every wrong solution
    scored 1."""
    script = ("import asyncio, sys\nfrom polyrl.rewards.code import score_code\n"
              f"rows = [{{'tests': {TESTS!r}}}] * 2\n"
              f"r = asyncio.run(score_code([{WRONG!r}, 'def add(a, b):\\n    return a + b\\n'], rows, "
              "{'extract': 'raw', 'timeout_s': 4}))\nprint(sys.flags.optimize, list(r))\n")
    done = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1 [0.0, 1.0]"


def test_the_tables_score_alike_at_the_off_level():
    """One row of each table the verdict tests score at "auto" (``MODES``), scored at the "off"
    level in one batch: each forged or wrong solution 0, each right one 1.0, as there."""
    import test_sandbox_forging as forging
    import test_sandbox_helpers as helpers
    import test_sandbox_sample_objects as objects

    cases = {  # name: (tests, solution, its score)
        "liar_value": (forging.OBJECTS["solution_value"][0], forging.OBJECTS["solution_value"][1], 0.0),
        "right_value": (forging.OBJECTS["solution_value"][0], forging.OBJECTS["solution_value"][2], 1.0),
        "hand_called_eq": (forging.HAND_CALLED["str_eq"][0], "def pair(c):\n    return None\n", 0.0),
        "right_eq": (*forging.HAND_CALLED["str_eq"], 1.0),
        "own_exception": (*forging.RAISES["assert_raises"][:2], 1.0),
        "other_exception": (forging.RAISES["assert_raises"][0], forging.RAISES["assert_raises"][2], 0.0),
        "liar_query": (helpers.QUERIES["count_once"][0], helpers.LIAR + helpers.QUERIES["count_once"][1], 0.0),
        "right_query": (helpers.QUERIES["count_once"][0], helpers.QUERIES["count_once"][2], 1.0),
        "own_eq": (*objects.OBJECTS["eq"][:2], 1.0),
        "wrong_eq": (objects.OBJECTS["eq"][0], objects.OBJECTS["eq"][2], 0.0),
        "endless": (*objects.ENDLESS["islice"][:2], 1.0),
        "wrong_endless": (objects.ENDLESS["islice"][0], objects.ENDLESS["islice"][2], 0.0),
        "patched_builtins": (TESTS, FORGERIES["patch_builtins"], 0.0),
        "right_add": (TESTS, "def add(a, b):\n    return a + b\n", 1.0),
    }
    rows = [{"prompt": "p", "tests": tests} for tests, _, _ in cases.values()]
    got = score([solution for _, solution, _ in cases.values()], rows=rows, isolation="off")
    assert dict(zip(cases, got.total)) == {name: want for name, (_, _, want) in cases.items()}
