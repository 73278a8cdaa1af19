"""Forging through objects the tests read as data, hand-called comparisons and numpy names; and the
solution's own exception classes, which right solutions could not raise across the sandbox.

Each forged completion below is a WRONG solution that scored a pass through the real reward path
(``code_tests``: sandbox, harness, the forked copy of the trainer); each must score 0 while the
honest solutions of the same rows score 1.0. See ``polyrl.sandbox.object_use``,
``harness.not_implemented_is_no_truth``, ``standard_names.numpy_names`` and
``harness.Session.exception_class``.
"""

from __future__ import annotations

import pytest
from test_sandbox_helpers import LIAR
from test_sandbox_verdict import MODES, score

from polyrl.sandbox import harness
from polyrl.sandbox.remote_exceptions import SampleExit

pytestmark = pytest.mark.faults

STACK = ("class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n        self.xs.append(x)\n"
         "    def count(self, x=None):\n        return len(self.xs) if x is None else self.xs.count(x)\n")
#: A class whose every str/list query gives the answer such checks usually expect.
ONE = ("class One:\n    def __init__(self, s):\n        pass\n    def count(self, x):\n        return 1\n"
       "    def find(self, x):\n        return 0\n")
#: (tests, forged solution or "", honest solution).
OBJECTS = {
    "solution_value": ("assert all(WORDS.count(w) == 1 for w in ['a', 'b'])\nassert WORDS.index('a') == 0",
                       LIAR + "WORDS = Liar()\n", "WORDS = ['a', 'b']\n"),
    "solution_items": ("assert all(w.count('a') == 1 for w in WORDS)",
                       "class L:\n    def count(self, x):\n        return 1\nWORDS = [L(), L()]\n", "WORDS = ['a', 'ab']\n"),
    "function_spelled_like_a_class": ("assert all(Dedupe('aabbc').count(c) == 1 for c in 'abc')\n"
                                      "assert Dedupe('xx').find('x') == 0",
                                      LIAR + "def Dedupe(s):\n    return Liar()\n",
                                      "def Dedupe(s):\n    return ''.join(dict.fromkeys(s))\n"),
    "class_spelled_like_a_class": ("assert all(Dedupe('aabbc').count(c) == 1 for c in 'abc')",
                                   "class Dedupe:\n    def __init__(self, s):\n        pass\n"
                                   "    def count(self, c):\n        return 1\n",
                                   "Dedupe = lambda s: ''.join(dict.fromkeys(s))\n"),
    # the tests use these as objects: their own answers
    "unittest_setup": ("import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.s = Stack()\n"
                       "    def test_push(self):\n        self.s.push(3)\n        self.assertEqual(self.s.count(3), 1)\n",
                       "", STACK),
    "solution_import": ("import solution\nsolution.tally.add('a')\nassert solution.tally.count('a') == 1",
                        "", "class Tally(list):\n    add = list.append\ntally = Tally()\n"),
    "no_arguments": ("assert Stack().count() == 0", "", STACK),
    "query_before_the_effect": ("uf = UnionFind(3)\nassert uf.find(2) == 2\nuf.union(0, 1)\nassert uf.find(0) == uf.find(1)",
                                "", "class UnionFind:\n    def __init__(self, n):\n        self.p = list(range(n))\n"
                                "    def find(self, x):\n        return x if self.p[x] == x else self.find(self.p[x])\n"
                                "    def union(self, a, b):\n        self.p[self.find(a)] = self.find(b)\n"),
    # a class the tests make by name and only query, each time with constant arguments
    "class_only_queried": ("assert Words('a b a').count('a') == 2\nassert Words('a b a').index('b') == 1\n"
                           "from solution import UnionFind\nuf = UnionFind(5)\nassert uf.find(3) == 3",
                           "", "class Words:\n    def __init__(self, s):\n        self.w = s.split()\n"
                           "    def count(self, x):\n        return self.w.count(x)\n    def index(self, x):\n"
                           "        return self.w.index(x)\nclass UnionFind:\n    def __init__(self, n):\n"
                           "        self.p = list(range(n))\n    def find(self, x):\n        return self.p[x]\n"),
    # ... but not where the answer is the same for many arguments, nor from a class named like a function
    "class_in_a_lambda": ("assert all(map(lambda c: Dedupe('aabbc').count(c) == 1, 'abc'))", ONE + "class Dedupe(One):\n"
                          "    pass\n", "Dedupe = lambda s: ''.join(dict.fromkeys(s))\n"),
    "class_helper_parameter": ("def check(s, c):\n    assert Dedupe(s).count(c) == 1\nfor c in 'abc':\n    check('aabbc', c)",
                               ONE + "class Dedupe(One):\n    pass\n", "Dedupe = lambda s: ''.join(dict.fromkeys(s))\n"),
    "class_through_a_helper": ("def check(d):\n    for c in 'abc':\n        assert d.count(c) == 1\ncheck(Dedupe('aabbc'))",
                               ONE + "class Dedupe(One):\n    pass\n", "Dedupe = lambda s: ''.join(dict.fromkeys(s))\n"),
    "class_method_passed_on": ("d = Dedupe('aabbc')\nassert list(map(d.count, 'abc')) == [1, 1, 1]",
                               ONE + "class Dedupe(One):\n    pass\n", "Dedupe = lambda s: ''.join(dict.fromkeys(s))\n"),
    "class_named_like_a_function": ("assert shout('hi').find('HI') == 0",
                                    ONE + "class shout(One):\n    pass\n", "def shout(s):\n    return s.upper() + '!'\n"),
}


def _scored(table: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Each (tests, solution) case of ``table`` scored in one batch: case name -> its score."""
    rows = [{"prompt": "p", "tests": tests} for tests, _ in table.values()]
    return dict(zip(table, score([solution for _, solution in table.values()], rows=rows).total))


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_an_object_the_tests_read_as_data_never_answers_a_str_or_list_query(isolation, audit_hook):
    """``WORDS = Liar()`` (a solution value) and ``def Dedupe(s): return Liar()`` (a function
    spelled like a class) answered every ``count`` with 1 and ``find``/``index`` with 0, so they
    scored 1.0; objects the tests use as objects (``push``, a method called for its effect, in
    ``setUp`` or through ``import solution`` too) still answer their own ``count``/``find``, and
    so does an instance the tests make of a class they name (``Words('a b a').count('a') == 2``,
    which failed right solutions), except where they ask it in a loop, a lambda or with a
    varying argument (the same answer for every argument: a class answering 1 met it)."""
    names = [n for n in OBJECTS if OBJECTS[n][1]]
    rows = [{"prompt": "p", "tests": OBJECTS[n][0]} for n in names]
    forged = score([OBJECTS[n][1] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    rows = [{"prompt": "p", "tests": tests} for tests, _, _ in OBJECTS.values()]
    honest = score([honest for _, _, honest in OBJECTS.values()], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(OBJECTS, honest.total)) == dict.fromkeys(OBJECTS, 1.0)


#: (tests, honest solution); the forgery is any wrong value of another type.
HAND_CALLED = {
    "str_eq": ("assert 'ab'.__eq__(pair('a'))", "def pair(c):\n    return c + 'b'\n"),
    "int_eq": ("assert (4).__eq__(sq(2))\nassert all(map((9).__eq__, [sq(3)]))", "def sq(x):\n    return x * x\n"),
    "list_ne": ("assert not [1, 2].__ne__(pair(1))", "def pair(x):\n    return [x, x + 1]\n"),
    "object_lt": ("assert ordinal(3).__lt__(5)", "def ordinal(x):\n    return x\n"),
}


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_comparison_called_by_hand_is_no_pass_when_it_is_not_implemented(isolation, audit_hook):
    """``'ab'.__eq__(v)`` is NotImplemented, which is truthy, for any ``v`` not a str: returning
    None, or any object, passed such asserts (the hand-written reflected comparisons of some
    datasets). Right values still compare."""
    names = list(HAND_CALLED)
    rows = [{"prompt": "p", "tests": HAND_CALLED[n][0]} for n in names]
    wrong = ["def pair(c):\n    return None\n", "def sq(x):\n    return 'no'\n", "def pair(x):\n    return None\n",
             "class O:\n    pass\ndef ordinal(x):\n    return O()\n"]
    forged = score(wrong, rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    honest = score([HAND_CALLED[n][1] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


def test_a_numpy_name_the_tests_use_unimported_is_numpys_where_they_mean_numpy():
    """Tests leaning on the solution's ``from numpy import *`` left ``array``, ``arange``... to the
    solution: ``def array(x): return 0`` with an ``f`` returning 0 passed ``np.array_equal``. In
    tests that never name numpy a task's own ``zeros`` is still the solution's."""
    rows = [{"prompt": "p", "tests": "assert np.array_equal(double([1, 2]), array([2, 4]))"},
            {"prompt": "p", "tests": "assert array_equal(evens(5), arange(0, 5, 2))"},
            {"prompt": "p", "tests": "assert zeros(3) == [0, 0, 0]"}]
    forged = ["def array(x):\n    return 0\ndef double(xs):\n    return 0\n",
              "def arange(*a):\n    return 0\ndef evens(n):\n    return 0\n", "def zeros(n):\n    return [1] * n\n"]
    assert list(score(forged, rows=rows).total) == [0.0, 0.0, 0.0]
    honest = ["def double(xs):\n    return [2 * x for x in xs]\n",
              "def evens(n):\n    return list(range(0, n, 2))\n",
              "def zeros(n):\n    return [0] * n\n"]
    assert list(score(honest, rows=rows).total) == [1.0, 1.0, 1.0]


ERROR = "class SolutionError(ValueError):\n    pass\nclass NotFound(SolutionError):\n    pass\n"
#: (tests, right solution, wrong solution).
RAISES = {
    "pytest_raises": ("import pytest\n\ndef test_negative():\n    with pytest.raises(SolutionError, match='negative'):\n"
                      "        root(-1)\n\ndef test_ok():\n    assert root(4) == 2\n",
                      ERROR + "def root(x):\n    if x < 0:\n        raise SolutionError('negative input')\n    return int(x ** 0.5)\n",
                      ERROR + "def root(x):\n    if x < 0:\n        raise ValueError('negative input')\n    return int(x ** 0.5)\n"),
    "assert_raises": ("import unittest\nclass T(unittest.TestCase):\n    def test_missing(self):\n"
                      "        with self.assertRaises(SolutionError):\n            find({}, 'k')\n"
                      "        self.assertRaises(NotFound, find, {}, 'k')\n",
                      ERROR + "def find(d, k):\n    if k not in d:\n        raise NotFound(k)\n    return d[k]\n",
                      ERROR + "def find(d, k):\n    return d.get(k)\n"),
    "except_and_builtin_base": ("from solution import NotFound\ntry:\n    find({}, 'k')\nexcept NotFound:\n    ok = True\n"
                                "else:\n    ok = False\nassert ok\nimport pytest\nwith pytest.raises(ValueError):\n"
                                "    find({}, 'k')\n",
                                ERROR + "def find(d, k):\n    if k not in d:\n        raise NotFound(k)\n    return d[k]\n",
                                ERROR + "def find(d, k):\n    raise KeyError(k)\n"),
}


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_the_solutions_own_exception_classes_are_caught_by_the_tests(isolation, audit_hook):
    """``pytest.raises(SolutionError)``, ``self.assertRaises(NotFound)`` and ``except NotFound``
    with classes the solution defines failed every right solution ("expected exception must be a
    BaseException type, not Remote"; what it raised came as a RemoteError, not even a ValueError).
    A wrong solution that raises another class, or none, still fails them."""
    names = list(RAISES)
    rows = [{"prompt": "p", "tests": RAISES[n][0]} for n in names]
    right = score([RAISES[n][1] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(names, right.total)) == dict.fromkeys(names, 1.0)
    wrong = score([RAISES[n][2] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(names, wrong.total)) == {"pytest_raises": 0.5, "assert_raises": 0.0, "except_and_builtin_base": 0.0}


APP_ERROR = ("class AppError(Exception):\n    def __init__(self, code, text):\n        super().__init__(text)\n"
             "        self.code = code\n        self.where = ('db', [1, None])\n        self.handler = print\n"
             "        self.with_traceback = 0\n")
#: (tests, right solution); each wrong one below raises the same classes with other values.
ATTRIBUTES = {
    "own_attribute": ("import pytest\nwith pytest.raises(AppError) as e:\n    get(1)\nassert e.value.code == 404\n"
                      "assert e.value.where == ('db', [1, None])\nassert str(e.value) == 'gone'",
                      APP_ERROR + "def get(x):\n    raise AppError(404, 'gone')\n"),
    "args": ("try:\n    get(1)\nexcept ValueError as e:\n    assert e.args == (3, 'bad')\nelse:\n    assert False",
             "def get(x):\n    raise ValueError(3, 'bad')\n"),
    "errno": ("import pytest\nwith pytest.raises(OSError) as e:\n    get(1)\nassert e.value.errno == 2",
              "def get(x):\n    raise FileNotFoundError(2, 'No such file')\n"),
    "unreadable_args": ("import pytest\nwith pytest.raises(Odd, match='bad'):\n    get(1)",
                        "class Odd(ValueError):\n    @property\n    def args(self):\n        raise RuntimeError('no')\n"
                        "def get(x):\n    raise Odd('bad')\n"),
}


def test_an_exceptions_plain_data_crosses_the_sandbox_and_nothing_else_does():
    """Only the message crossed, so ``assert e.value.code == 404`` after ``pytest.raises(AppError)``
    failed a right solution (AttributeError), as did ``e.args`` and an OSError's ``errno``. The
    exception's ``args`` and instance attributes that are plain data cross now; an attribute
    holding an object (``handler``) or named like the class's own (``with_traceback``) does not."""
    names = list(ATTRIBUTES)
    rows = [{"prompt": "p", "tests": ATTRIBUTES[n][0]} for n in names]
    right = score([ATTRIBUTES[n][1] for n in names], rows=rows)
    assert dict(zip(names, right.total)) == dict.fromkeys(names, 1.0)
    wrong = [APP_ERROR + "def get(x):\n    raise AppError(500, 'gone')\n", "def get(x):\n    raise ValueError(3)\n",
             "def get(x):\n    raise FileNotFoundError(13, 'No such file')\n", "def get(x):\n    raise ValueError('bad')\n"]
    assert list(score(wrong, rows=rows).total) == [0.75, 0.0, 0.5, 0.0]  # each fails the one check of the value
    rows = [{"prompt": "p", "tests": "import pytest\nwith pytest.raises(AppError) as e:\n    get(1)\nassert "
             + check} for check in ("e.value.handler is not None", "callable(e.value.with_traceback)")]
    assert list(score([ATTRIBUTES["own_attribute"][1]] * 2, rows=rows).total) == [0.5, 1.0]  # raises; the check


def test_an_exceptions_state_is_decoded_strictly():
    """A malformed state leaves the values out, never raises a protocol error into the tests."""
    lineage = [["builtins", "ValueError"]]
    exc = harness.remote_exception(["ValueError", "m", lineage, {"args": ["t", [["i", "1"]]], "attrs": [
        ["code", ["i", "7"]], ["bad", ["?"]], ["__class__", ["n"]], ["not an identifier", ["n"]], "x",
        ["args", ["n"]]]}])
    assert type(exc) is ValueError and exc.args == ("m",) and vars(exc) == {"code": 7}
    exc = harness.remote_exception(["KeyError", "'k'", lineage, {"args": ["t", [["s", "k"]]], "attrs": "x"}])
    assert type(exc) is KeyError and exc.args == ("k",) and str(exc) == "'k'"
    for state in (None, [], {"args": ["?"]}, {"args": ["l", []]}):
        exc = harness.remote_exception(["ValueError", "m", lineage, state])
        assert type(exc) is ValueError and exc.args == ("m",)


def test_an_exception_class_stand_in_is_plain_bounded_and_never_control_flow():
    """The stand-in for a sample's exception class is the trainer's own plain class: a lineage
    ending in StopIteration or BaseException derives from RemoteError (in SystemExit: SampleExit), a malformed one is refused,
    one lineage gives one class."""
    from test_sandbox_harness import _NoChannel

    session = harness.Session(_NoChannel())
    lineage = [["solution", "NotFound"], ["solution", "SolutionError"], ["builtins", "ValueError"],
               ["builtins", "Exception"], ["builtins", "BaseException"], ["builtins", "object"]]
    kind = session.exception_class(lineage)
    assert kind is session.exception_class(lineage) and kind.__name__ == "NotFound"
    assert issubclass(kind, ValueError) and kind.__mro__[1].__name__ == "SolutionError"
    for base in ("StopIteration", "BaseException", "KeyboardInterrupt"):
        stop = session.exception_class([["solution", "Stop"], ["builtins", base], ["builtins", "object"]])
        assert issubclass(stop, harness.RemoteError) and not issubclass(stop, (StopIteration, SystemExit, KeyboardInterrupt))
    # a SystemExit of the sample's own class: the tests' ``except SystemExit`` takes it, never their success
    done = session.exception_class([["solution", "Done"], ["builtins", "SystemExit"], ["builtins", "object"]])
    assert issubclass(done, SampleExit) and not issubclass(done, (Exception, KeyboardInterrupt))
    exc = harness.remote_exception(["Stop", "x", [["solution", "Stop"], ["builtins", "StopIteration"]]],
                                   session.exception_class)
    assert isinstance(exc, harness.RemoteError)
    for bad in ([], [["a"]], [[1, 2]], [["m", "n" * 1000]], [["m", "n"]] * 1000, "x", None):
        assert session.exception_class(bad) is None
    with pytest.raises(harness.ProtocolError):
        session.value(["E", 0, [["m", 3]]])


#: (tests, honest solution); the forgery returns an empty list.
VACUOUS = {
    "unbound_np": ("assert np.allclose(area(1), 3.14159, atol=1e-3)", "import math\ndef area(r):\n    return math.pi * r * r\n"),
    "np_testing": ("np.testing.assert_allclose(area(1), 3.14159, rtol=1e-3)",
                   "import math\ndef area(r):\n    return math.pi * r * r\n"),
    "own_import": ("import numpy as np\nfrom numpy.testing import assert_array_equal\nassert_array_equal(mode([1, 1, 2]), 1)\n"
                   "assert np.array_equiv(mode([3]), 3)", "def mode(xs):\n    return max(set(xs), key=xs.count)\n"),
    "helper": ("assert allclose(area(2), 12.56637, atol=1e-3)", "import math\ndef area(r):\n    return math.pi * r * r\n"),
    "empty_object": ("assert np.allclose(area(3), 28.27433, atol=1e-3)", "import math\ndef area(r):\n    return math.pi * r * r\n"),
}
#: An object of no length whose every attribute (``size`` too) answers 1.
EMPTY = ("class Empty:\n    def __len__(self):\n        return 0\n    def __iter__(self):\n        return iter(())\n"
         "    def __getattr__(self, name):\n        return lambda *a, **k: 1\n")


def test_a_numpy_check_never_holds_vacuously_on_an_empty_answer():
    """``np.allclose([], 3.14)`` and numpy.testing's ``assert_*`` against a scalar hold (no element
    differs): a solution returning ``[]`` scored 1.0 on each row. numpy and numpy.testing, however
    the tests reach them (unimported, helpers, their own imports), fail such a check now."""
    names = list(VACUOUS)
    rows = [{"prompt": "p", "tests": VACUOUS[n][0]} for n in names]
    forged = score(["def area(r):\n    return []\n", "def area(r):\n    return []\n", "def mode(xs):\n    return []\n",
                    "def area(r):\n    return []\n", EMPTY + "def area(r):\n    return Empty()\n"], rows=rows)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    honest = score([VACUOUS[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: (tests, honest solution) of reductions the tests write themselves; the forgery returns [].
REDUCED = {
    "all_method": ("import numpy as np\nassert (np.array(area(1)) == 3).all()", "def area(r):\n    return [3]\n"),
    "np_all": ("import numpy as np\nassert np.all(np.array(f(2)) == 2)", "def f(x):\n    return [x, x]\n"),
    "isclose_broadcast": ("import numpy as np\nassert np.isclose(f(2), [2.0]).all()", "def f(x):\n    return [x * 1.0]\n"),
    "isclose_scalar": ("assert np.isclose(f(2), 2.0).all()", "def f(x):\n    return [x * 1.0]\n"),
    "builtin_all": ("from numpy import asarray\nassert all(asarray(f(2)) <= 2)", "def f(x):\n    return [1, x]\n"),
    "ufunc": ("import numpy as np\nassert np.greater_equal(f(2), 1).all()", "def f(x):\n    return [1, x]\n"),
    "through_round": ("import numpy as np\nassert (np.round(f(2), 1) == 2.0).all()", "def f(x):\n    return [x + 0.01]\n"),
    "not_any": ("import numpy as np\nassert not (np.abs(np.array(f(2)) - 2) > 1e-9).any()", "def f(x):\n    return [x]\n"),
    "norm_of_difference": ("import numpy as np\nassert np.linalg.norm(np.array(f(2)) - 2.0) < 1e-9", "def f(x):\n    return [x]\n"),
    "expected_empty": ("import numpy as np\nassert (np.array(f(0)) == np.array([])).all()", "def f(x):\n    return [0] * x\n"),
}


def test_a_reduction_the_tests_write_never_holds_vacuously_on_an_empty_answer():
    """``np.array([]) == 3`` is an empty array, whose ``all()`` holds (``np.all``, builtin ``all``,
    ``not any()`` too), and ``np.isclose([], [2.0])`` broadcasts to one: ``return []`` scored 1.0 on
    each row (and ``[0]`` where ``[]`` was expected). An array with no elements that the tests make
    through numpy fails such a comparison with one that has elements; empty against empty still
    compares (right solutions returning ``[]`` where ``[]`` is due keep 1.0)."""
    names = list(REDUCED)
    rows = [{"prompt": "p", "tests": REDUCED[n][0]} for n in names]
    forged = ["def area(r):\n    return []\n"] + ["def f(x):\n    return []\n"] * (len(names) - 2) + [
        "def f(x):\n    return [0]\n"]
    assert {n: s for n, s in zip(names, score(forged, rows=rows).total) if s != 0.0} == {}
    honest = score([REDUCED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
    rows = [{"prompt": "p", "tests": tests} for tests in (
        "import numpy as np\nassert (np.array(f([])) == np.array([])).all()\nassert np.array(f([])).size == 0",
        "import numpy as np\nassert np.array_equal(np.sort(f([])), np.zeros(0))\nassert np.add.reduce(np.array(f([1, 2]))) == 3",
        "import numpy as np\nassert np.isclose(np.array(f([])), []).all() and isinstance(np.array(f([])), np.ndarray)")]
    assert list(score(["def f(x):\n    return list(x)\n"] * 3, rows=rows).total) == [1.0, 1.0, 1.0]



def _shrinking(reads: int, items: str = "[9.0]") -> str:
    """A solution whose ``area`` gives an object with ``items`` (one element, or a ragged pair numpy
    cannot read) for its first ``reads`` reads (``len``, iteration, indexing) and none after."""
    return ("class R:\n    def __init__(self):\n        self.reads = 0\n    def __len__(self):\n"
            f"        return len({items}) if self.reads < {reads} else 0\n    def __iter__(self):\n        self.reads += 1\n"
            f"        return iter({items} if self.reads <= {reads} else [])\n    def __getitem__(self, i):\n"
            f"        if self.reads >= {reads} or i >= len({items}):\n            raise IndexError(i)\n"
            f"        return {items}[i]\n"
            "def area(r):\n    return R()\n")


#: (tests, honest solution): numpy checks with keyword operands, or of an answer numpy must read.
READ_ONCE = {
    "allclose": ("import numpy as np\nassert np.allclose(area(1), 3.14159, atol=1e-3)",
                 "import math\ndef area(r):\n    return [math.pi * r * r]\n"),
    "assert_allclose": ("import numpy as np\nnp.testing.assert_allclose(area(1), 3.14159, rtol=1e-3)",
                        "import numpy as np\ndef area(r):\n    return np.array([np.pi * r * r])\n"),
    "isclose": ("import numpy as np\nassert np.isclose(area(1), 3.14159, atol=1e-3).all()",
                "import math\ndef area(r):\n    return (math.pi * r * r,)\n"),
    "keyword_actual": ("import numpy as np\nnp.testing.assert_allclose(actual=area(1), desired=3.14159, rtol=1e-3)",
                       "import math\ndef area(r):\n    return [math.pi * r * r]\n"),
    "keyword_b": ("import numpy as np\nassert np.allclose(area(1), b=3.14159, atol=1e-3)",
                  "import math\ndef area(r):\n    return [math.pi * r * r]\n"),
    "keyword_isclose": ("import numpy as np\nassert np.isclose(a=area(1), b=3.14159, atol=1e-3).all()",
                        "import math\ndef area(r):\n    return [math.pi * r * r]\n"),
}


@pytest.mark.slow
def test_a_numpy_check_reads_the_answer_once_and_measures_keyword_operands():
    """A numpy check read an answer of the sample's twice (once for the emptiness rule above, once
    in numpy), so an object giving an element (or a ragged list numpy cannot read) to the first
    read and none to the second passed ``np.allclose(area(1), 3.14159)``,
    ``np.testing.assert_allclose`` and ``np.isclose(...).all()``;
    and operands given by keyword were never measured, so ``return []`` passed
    ``assert_allclose(actual=area(1), desired=3.14159)`` and ``np.allclose(area(1), b=3.14159)``:
    each scored 1.0. The answer is read once now, for both, and keyword operands count; right
    answers (a list, a tuple, a numpy array, a sequence class of their own, ``assert_raises`` of a
    right function) keep 1.0."""
    names = list(READ_ONCE)
    rows = [{"prompt": "p", "tests": READ_ONCE[n][0]} for n in names]
    ragged = "[[1.0, 2.0], [3.0]]"
    for forged in (_shrinking(1), _shrinking(2), _shrinking(2, ragged), _shrinking(3, ragged), "def area(r):\n    return []\n"):
        got = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, got.total) if s != 0.0} == {}, forged
    honest = score([READ_ONCE[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
    seq = ("class Seq:\n    def __init__(self, xs):\n        self.xs = xs\n    def __len__(self):\n        return len(self.xs)\n"
           "    def __getitem__(self, i):\n        return self.xs[i]\n"
           "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return Seq([x, 2 * x])\n")
    rows = [{"prompt": "p", "tests": tests} for tests in (
        "import numpy as np\nnp.testing.assert_array_equal(f(2), [2, 4])\nassert np.array_equal(a1=f(1), a2=[1, 2])",
        "import numpy as np\nnp.testing.assert_raises(ValueError, f, -1)\nnp.testing.assert_equal(actual=f(3), desired=[3, 6])")]
    assert list(score([seq, seq], rows=rows).total) == [1.0, 1.0]

#: (tests, honest solution) of element-by-element checks through zip; the forgery returns [].
ZIPPED = {
    "tolerance": ("assert all(abs(a - b) < 1e-9 for a, b in zip(f(2), [1.0, 2.0]))", "def f(x):\n    return [1.0, 2.0]\n"),
    "expected_name": ("expected = [2, 4]\nassert all(a == b for a, b in zip(f(2), expected))", "def f(x):\n    return [2, 4]\n"),
    "numpy_expected": ("import numpy as np\nassert all(a == b for a, b in zip(f(2), np.array([2, 4])))",
                       "def f(x):\n    return [2, 4]\n"),
}


def test_zip_in_the_tests_never_holds_vacuously_on_an_empty_answer():
    """``zip([], [1.0, 2.0])`` is empty, so ``all(...)`` over it held: ``return []`` scored 1.0. The
    tests' zip fails an empty sized operand beside one with items taken from elsewhere; a one-item
    answer beside its own empty slice, empty against empty, equal lengths, iterators and
    ``strict=True`` behave as Python's zip."""
    names = list(ZIPPED)
    rows = [{"prompt": "p", "tests": ZIPPED[n][0]} for n in names]
    forged = score(["def f(x):\n    return []\n"] * len(names), rows=rows)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    honest = score([ZIPPED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
    pairwise = "assert all(a <= b for a, b in zip(f({0}), f({0})[1:]))\n"
    rows = [{"prompt": "p", "tests": tests} for tests in (
        pairwise.format("[]") + pairwise.format("[3]") + pairwise.format("[2, 1]"),
        "assert list(zip(f([]), [])) == []\nassert list(zip(f([1, 2]), [1, 2], strict=True)) == [(1, 1), (2, 2)]",
        "assert list(zip(f([]), iter([]))) == [] and list(zip(f([2, 1]), iter('ab'))) == [(1, 'a'), (2, 'b')]")]
    assert list(score(["def f(x):\n    return sorted(x)\n"] * 3, rows=rows).total) == [1.0, 1.0, 1.0]


def test_zip_rule_holds_in_the_trainer_and_does_not_leak_into_its_builtins():
    """With ``tests_in="trainer"`` the tests run here: they see the rule, the trainer's zip stays Python's."""
    import builtins

    from polyrl.rewards.code import parse_tests
    from polyrl.sandbox import Sandbox, SandboxLimits
    box = Sandbox(SandboxLimits(timeout_s=4), isolation="auto", audit_hook=False, tests_in="trainer")
    tests = parse_tests("assert all(a == b for a, b in zip(f(2), [2, 4]))\n")
    assert not box.run("def f(x):\n    return []\n", tests).all_passed
    assert box.run("def f(x):\n    return [2, 4]\n", tests).all_passed
    assert builtins.zip is zip and builtins.map is map and list(zip([], [1, 2])) == []


#: (tests, honest solution) pairing the answer with one expected item or through ``map``; the
#: forgeries return [], a generator or an object of their own that yields nothing.
ONE_ITEM = {
    "zip_literal": ("assert all(abs(a - b) < 1e-9 for a, b in zip(f(2), [1.0]))", "def f(x):\n    return [x / 2]\n"),
    "zip_expected_first": ("expected = (2,)\nassert sum(a != b for a, b in zip(expected, f(2))) == 0",
                           "def f(x):\n    return [x]\n"),
    "zip_in_a_helper": ("def close(got, want):\n    return all(abs(a - b) < 1e-9 for a, b in zip(got, want))\n"
                        "assert close(f(2), [1.0])", "def f(x):\n    return [x / 2]\n"),
    "zip_over_cases": ("for x, want in [(2, [1.0]), (4, [2.0])]:\n    assert all(a == b for a, b in zip(f(x), want))",
                       "def f(x):\n    return [x / 2]\n"),
    "zip_in_unittest": ("import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.r = f(2)\n"
                        "    def test_value(self):\n        for a, b in zip(self.r, [1.0]):\n"
                        "            self.assertAlmostEqual(a, b)\n", "def f(x):\n    return [x / 2]\n"),
    "map_operator": ("import operator\nassert all(map(operator.eq, f(2), [2, 4]))", "def f(x):\n    return [x, 2 * x]\n"),
    "map_lambda": ("assert all(map(lambda a, b: abs(a - b) < 1e-9, f(2), [1.0]))", "def f(x):\n    return [x / 2]\n"),
    "zip_longest": ("from itertools import zip_longest\nassert all(a == b for a, b in zip_longest(f(2), [2]))",
                    "def f(x):\n    return [x]\n"),
}
NOTHING = "class Nothing:\n    def __iter__(self):\n        return iter(())\n"


@pytest.mark.slow
def test_zip_and_map_never_hold_vacuously_beside_one_expected_item_or_a_sample_that_yields_nothing():
    """``zip(f(2), [1.0])`` with one expected item was let through (the pairwise idiom ``zip(r,
    r[1:])`` is empty for a one-item answer), ``map(operator.eq, f(2), [2, 4])`` stops at the
    shorter operand like zip and was not checked at all, and a generator or an object of the
    sample's yielding nothing was no sized operand: ``return []``, ``(x for x in [])`` and
    ``Nothing()`` scored 1.0. An empty operand beside one with items that is not taken from it
    fails now, through helpers, loops and unittest too; right answers keep 1.0."""
    names = list(ONE_ITEM)
    rows = [{"prompt": "p", "tests": ONE_ITEM[n][0]} for n in names]
    for forged in ("def f(x):\n    return []\n", "def f(x):\n    return (y for y in [])\n",
                   NOTHING + "def f(x):\n    return Nothing()\n"):
        scored = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = score([ONE_ITEM[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: Checks of a right answer's own order, each pairing it with a slice of itself (one item or two).
PAIRWISE = {
    "in_a_helper": ("def ordered(a, b):\n    return all(x <= y for x, y in zip(a, b))\nr = f([3])\nassert ordered(r, r[1:])\n"
                    "assert ordered(f([3]), f([3])[1:])"),
    "through_map": "import operator\nr = f([5])\nassert all(map(operator.le, r, r[1:]))",
    "triples": "r = f([2, 1])\nassert all(a <= b <= c for a, b, c in zip(r, r[1:], r[2:]))",
    "from_setup": "assert ordered(f([4]))",
    "enumerated": "r = f([7])\nfor i, (a, b) in enumerate(zip(r, r[1:])):\n    assert a <= b",
    "answers_for_two_inputs": "from solution import f\nassert all(a == b for a, b in zip(f([]), f([2, 1])))",
}


def test_a_right_answer_paired_with_its_own_slice_still_passes():
    """``zip(r, r[1:])`` on a one-item ``r`` pairs one value with itself, and ``zip(f([]), f([2,
    1]))`` the solution with itself: an empty operand there is the test's own, so it passes,
    through a helper, ``map``, ``setup`` and ``enumerate`` too (``r[2:]`` on a two-item answer and
    answers of two lengths for two inputs failed right solutions before)."""
    names = list(PAIRWISE)
    rows = [{"prompt": "p", "tests": PAIRWISE[n]} for n in names]
    rows[names.index("from_setup")]["setup"] = "def ordered(r):\n    return all(a <= b for a, b in zip(r, r[1:]))\n"
    scored = score(["def f(x):\n    return sorted(x)\n"] * len(names), rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


def test_operand_groups_follow_the_tests_names_to_one_value():
    """Operands read from one value share a group; the answer and an expected value of any other
    origin do not; a place two calls share with different groups is no known place."""
    from polyrl.sandbox.zip_sites import operand_groups

    def groups(source):
        return list(operand_groups([("<test>", source)]).values())

    assert groups("r = f(2)\nnxt = r[1:]\nzip(r, nxt, expected)") == [(0, 0, 2)]
    assert groups("for row in grid:\n    zip(row, grid[0])") == [(0, 0)]
    assert groups("for got, want in zip(map(f, xs), outs):\n    zip(got, want)") == [(0, 1), (0, 1)]
    assert groups("def h(a, b=f(1)):\n    zip(a, b)\nh(f(1)[1:])") == [(0, 0)]
    assert groups("map(g, sorted(f(2)), list(f(2))[::2])\nzip(*rows)\nzip(f(2))") == [(0, 0)]
    assert groups("def ref(n):\n    return [2]\nzip(primes(2), primes(10), ref(10), ref(2))") == [(0, 0, 2, 3)]
    sites = operand_groups([("<test>", "zip(r, r[1:])"), ("<test>", "zip(r, x[1:])"), ("<setup>", "zip(a, b)")])
    assert sites == {("zip", "<setup>", 1, 1, 0, 9): (0, 1)}


#: (tests, honest solution) pairing the answer through an iterator over it, or through the
#: ``builtins`` module's own zip/map; the forgeries return [], a generator or an object yielding nothing.
WRAPPED = {
    "iter": ("assert all(abs(a - b) < 1e-9 for a, b in zip(iter(f(2)), [1.0, 2.0]))", "def f(x):\n    return [1.0, 2.0]\n"),
    "reversed": ("expected = [2, 1]\nassert all(a == b for a, b in zip(reversed(f(2)), expected))",
                 "def f(x):\n    return [1, 2]\n"),
    "map_one": ("expected = [1.0, 2.0]\nassert all(a == b for a, b in zip(map(float, f(2)), expected))",
                "def f(x):\n    return [1, 2]\n"),
    "sorted": ("assert all(a == b for a, b in zip(sorted(f(2)), [1, 2]))", "def f(x):\n    return [2, 1]\n"),
    "filter": ("assert all(a == b for a, b in zip(filter(None, f(2)), [1, 2]))", "def f(x):\n    return [1, 2]\n"),
    "iter_in_map": ("import operator\nassert all(map(operator.eq, iter(f(2)), [1, 2]))", "def f(x):\n    return [1, 2]\n"),
    "enumerated": ("assert all(a == b for a, b in zip(enumerate(f(2)), [(0, 1), (1, 2)]))",
                   "def f(x):\n    return [1, 2]\n"),
    "builtins_zip": ("import builtins\nassert all(a == b for a, b in builtins.zip(f(2), [1, 2]))",
                     "def f(x):\n    return [1, 2]\n"),
    "builtins_dict": ("import builtins\nassert all(a == b for a, b in builtins.__dict__['zip'](f(2), [1, 2]))",
                      "def f(x):\n    return [1, 2]\n"),
    "builtins_map": ("from builtins import map\nimport operator\nassert all(map(operator.eq, f(2), [1, 2]))",
                     "def f(x):\n    return [1, 2]\n"),
}


@pytest.mark.slow
def test_an_iterator_over_the_answer_or_builtins_zip_never_holds_vacuously():
    """``zip(iter(f(2)), [1.0, 2.0])``, ``zip(reversed(f(2)), expected)``, ``zip(map(float, f(2)),
    expected)``, ``filter`` likewise, and ``builtins.zip``/``from builtins import map`` (Python's
    own) held for ``return []``: an iterator was never measured. One over a built-in container, or
    the tests' map/filter over one, that has no items left counts as empty now; right answers keep 1.0."""
    names = list(WRAPPED)
    rows = [{"prompt": "p", "tests": WRAPPED[n][0]} for n in names]
    for forged in ("def f(x):\n    return []\n", "def f(x):\n    return (y for y in [])\n",
                   NOTHING + "def f(x):\n    return Nothing()\n"):
        scored = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = score([WRAPPED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


def test_iterators_the_tests_pair_with_a_right_answer_still_pass():
    """An iterator of unknown count is never measured (it may be endless: ``zip(f([]),
    itertools.count())`` passes); ``map``/``filter`` of a one-item answer's own slice pairs with it;
    empty against empty passes; the tests may still set attributes of ``builtins``."""
    rows = [{"prompt": "p", "tests": tests} for tests in (
        "import itertools\nassert list(zip(f([2, 1]), itertools.count())) == [(1, 0), (2, 1)]\n"
        "assert list(zip(f([]), itertools.count())) == []\nassert list(zip(iter(f([])), [])) == []",
        "r = f([3])\nassert all(a <= b for a, b in zip(map(float, r), map(float, r[1:])))\n"
        "assert all(a <= b for a, b in zip(filter(None, r[1:]), r))\nassert all(a <= b for a, b in zip(iter(r[1:]), r))\n"
        "assert all(a[1] <= b[1] for a, b in zip(enumerate(r), enumerate(r[1:], 1)))",
        "import builtins\nbuiltins.polyrl_marker = 3\nassert builtins.polyrl_marker == 3\ndel builtins.polyrl_marker\n"
        "assert builtins.len(f([1])) == 1 and list(builtins.map(abs, f([-1]))) == [1]")]
    assert list(score(["def f(x):\n    return sorted(x)\n"] * 3, rows=rows).total) == [1.0, 1.0, 1.0]


def test_map_and_filter_over_one_value_share_its_origin():
    """``map(float, r[1:])`` is read from ``r`` (the pairwise idiom through a conversion); over the
    answer it is still another origin than an expected value."""
    from polyrl.sandbox.zip_sites import operand_groups

    def groups(source):
        return list(operand_groups([("<test>", source)]).values())

    assert groups("r = f(2)\nzip(map(float, r[1:]), filter(None, r), expected)") == [(0, 0, 2)]
    assert groups("zip(map(float, f(2)), expected)") == [(0, 1)]
    assert groups("r = f(2)\nzip(enumerate(r[1:], 1), enumerate(r))") == [(0, 0)]


#: (tests, honest solution) pairing the answer through an iterator the tests make of it (a generator
#: expression, ``itertools``), through an alias or attribute of zip beside one expected item, or
#: through the ``builtins`` module reached by ``sys.modules`` or ``importlib``; the forgeries return
#: [], a generator or an object yielding nothing.
REACHED = {
    "generator_expression": ("assert all(a == b for a, b in zip((round(x, 2) for x in f(2)), [1.0, 2.0]))",
                             "def f(x):\n    return [1.0, 2.0]\n"),
    "islice": ("import itertools\nassert all(a == b for a, b in zip(itertools.islice(f(2), 5), [1, 2]))",
               "def f(x):\n    return [1, 2]\n"),
    "chain_in_map": ("import itertools, operator\nassert all(map(operator.eq, itertools.chain(f(2)), [1, 2]))",
                     "def f(x):\n    return [1, 2]\n"),
    "alias_one_item": ("z = zip\nassert all(a == b for a, b in z(f(2), [1.0]))", "def f(x):\n    return [1.0]\n"),
    "attribute_one_item": ("import builtins\nassert all(a == b for a, b in builtins.zip(f(2), [1.0]))",
                           "def f(x):\n    return [1.0]\n"),
    "sys_modules": ("import sys\nassert all(a == b for a, b in sys.modules['builtins'].zip(f(2), [1, 2]))",
                    "def f(x):\n    return [1, 2]\n"),
    "sys_unimported": ("assert all(a == b for a, b in sys.modules['builtins'].zip(f(2), [1, 2]))",
                       "def f(x):\n    return [1, 2]\n"),
    "import_module": ("import importlib\nb = importlib.import_module('builtins')\nassert all(a == b for a, b in "
                      "b.zip(f(2), [1, 2]))", "def f(x):\n    return [1, 2]\n"),
    "spelled_out": ("assert all(a == b for a, b in zip(*[f(2), [1.0]]))", "def f(x):\n    return [1.0]\n"),
    "dict_values": ("expected = {'a': 1, 'b': 2}\nassert all(a == b for a, b in zip(f(2), expected.values()))",
                    "def f(x):\n    return [1, 2]\n"),
    "deque": ("from collections import deque\nassert all(a == b for a, b in zip(f(2), deque([1, 2])))",
              "def f(x):\n    return [1, 2]\n"),
}


@pytest.mark.slow
def test_an_iterator_the_tests_make_or_zip_reached_another_way_never_holds_vacuously():
    """``zip((round(x, 2) for x in f(2)), [1.0, 2.0])``, ``itertools.islice``/``chain`` of the
    answer, ``z = zip`` or ``builtins.zip`` beside one expected item, and Python's own zip reached
    through ``sys.modules['builtins']`` or ``importlib.import_module('builtins')`` held for
    ``return []`` (each scored 1.0): an iterator of unknown length was never measured, an alias or
    attribute call (or ``zip(*[f(2), [1.0]])``) was no known place, those two paths gave Python's
    zip, and a dict's view or a deque was no sized operand. An iterator that
    turns out empty before zip's first item counts as empty now; right answers keep 1.0."""
    names = list(REACHED)
    rows = [{"prompt": "p", "tests": REACHED[n][0]} for n in names]
    for forged in ("def f(x):\n    return []\n", "def f(x):\n    return (y for y in [])\n",
                   NOTHING + "def f(x):\n    return Nothing()\n"):
        scored = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = score([REACHED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: Right uses of those shapes: the pairwise idiom through an iterator or a comprehension of the
#: answer's own slice (a one-item answer), an endless counter beside an empty answer, and the
#: tests' own use of ``sys`` and ``importlib``.
REACHED_RIGHT = {
    "islice_of_itself": "import itertools\nr = f([3])\nassert all(a <= b for a, b in zip(r, itertools.islice(r, 1, None)))",
    "generator_of_itself": "r = f([3])\nassert all(a <= b for a, b in zip(r, (y for y in r[1:])))",
    "list_comprehension_of_itself": "r = f([3])\nassert all(a <= b for a, b in zip(r, [y for y in r[1:]]))",
    "alias_of_itself": "z = zip\nr = f([3])\nassert all(a <= b for a, b in z(r, r[1:]))\n"
                       "assert all(a <= b for a, b in zip(*(r, r[1:])))",
    "tee": "import itertools\na, b = itertools.tee(f([3]))\nnext(b, None)\nassert all(x <= y for x, y in zip(a, b))",
    "counter": "import itertools\nassert list(zip(itertools.count(), f([]))) == list(zip(f([]), itertools.count())) == []\n"
               "assert list(zip(itertools.count(), f([2, 1]))) == [(0, 1), (1, 2)]",
    "generator_right": "assert all(map(lambda a, b: a == b, (x for x in f([2, 1])), [1, 2]))\n"
                       "assert list(zip((x for x in f([])), [])) == []",
    "sys_stdout": "import sys, io\nold, sys.stdout = sys.stdout, io.StringIO()\nprint(f([1]))\n"
                  "out, sys.stdout = sys.stdout.getvalue(), old\nassert out == '[1]\\n'",
    "sys_modules": "import sys\nassert 'os' in sys.modules and sys.modules['builtins'].len(f([1, 2])) == 2\n"
                   "assert list(sys.modules['builtins'].zip(f([1]), [1])) == [(1, 1)]",
    "import_module": "import importlib\nassert importlib.import_module('math').sqrt(4) == 2\n"
                     "assert importlib.import_module('builtins').sum(f([1, 2])) == 3",
}


def test_iterators_and_module_paths_the_tests_use_with_a_right_answer_still_pass():
    """A comprehension over a one-item answer's own slice failed the right ``sorted`` (its origin
    was not followed); the other shapes behave as Python's."""
    names = list(REACHED_RIGHT)
    rows = [{"prompt": "p", "tests": REACHED_RIGHT[n]} for n in names]
    scored = score(["def f(x):\n    return sorted(x)\n"] * len(names), rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


#: (tests, honest solution) that number the answer with ``enumerate`` and index an expected value
#: of the tests' by that number; the forgeries return [] or a generator yielding nothing.
NUMBERED = {
    "generator": ("expected = [1, 2]\nassert all(x == expected[i] for i, x in enumerate(f(2)))",
                  "def f(x):\n    return [1, 2]\n"),
    "for_loop": ("r = f(2)\nexpected = [1, 2]\nfor i, v in enumerate(r):\n    assert v == expected[i]",
                 "def f(x):\n    return [1, 2]\n"),
    "unittest": ("import unittest\nclass T(unittest.TestCase):\n    def setUp(self):\n        self.exp = [1, 2]\n"
                 "    def test_a(self):\n        for i, v in enumerate(f(2)):\n            self.assertEqual(v, self.exp[i])\n",
                 "def f(x):\n    return [1, 2]\n"),
    "helper": ("def check(got, want):\n    return all(g == want[i] for i, g in enumerate(got))\nassert check(f(2), [1, 2])",
               "def f(x):\n    return [1, 2]\n"),
}


def test_enumerate_over_an_empty_answer_never_indexes_an_expected_value_vacuously():
    """``all(x == expected[i] for i, x in enumerate(f(2)))`` (and its ``for`` loop, in unittest or a
    helper) pairs the answer with ``expected`` by position as zip does, and held for ``return []``
    (1.0). Over an empty answer it fails now where the value the loop indexes by the count has
    items; empty against empty, and an answer indexing itself or another answer of the same
    function, pass as in Python."""
    names = list(NUMBERED)
    rows = [{"prompt": "p", "tests": NUMBERED[n][0]} for n in names]
    for forged in ("def f(x):\n    return []\n", "def f(x):\n    return (y for y in [])\n"):
        scored = score([forged] * len(names), rows=rows)
        assert {n: s for n, s in zip(names, scored.total) if s != 0.0} == {}, forged
    honest = score([NUMBERED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
    rows = [{"prompt": "p", "tests": tests} for tests in (
        "expected = []\nassert all(x == expected[i] for i, x in enumerate(f([])))",
        "r = f([3])\nassert all(x == r[i] for i, x in enumerate(f([3])))\nfor i, v in enumerate(f([])):\n    assert v == r[i]",
        "r = f([])\nfor i, v in enumerate(r):\n    assert v == r[i]\nfor i, v in enumerate(f([2, 1])):\n    assert v == [1, 2][i]")]
    assert list(score(["def f(x):\n    return sorted(x)\n"] * 3, rows=rows).total) == [1.0, 1.0, 1.0]


def test_indexed_sites_name_the_expected_values_a_numbered_answer_indexes():
    """Only an answer of the solution's, and only values of another origin indexed by the count."""
    from polyrl.sandbox.zip_sites import indexed_sites

    def paths(source):
        return list(indexed_sites([("<test>", source)]).values())

    assert paths("expected = [1]\nall(x == expected[i] for i, x in enumerate(f(2)))") == [("expected",)]
    assert paths("r = f(2)\nfor i, v in enumerate(r):\n    assert v == self.exp[i] and r[i] == v and w[v]") == [
        ("self.exp",)]
    assert paths("xs = [1]\nfor i, v in enumerate(xs):\n    assert v == exp[i]") == []  # the tests' own values
    assert paths("all(x == f(3)[i] for i, x in enumerate(f(2)))") == []  # the solution against itself
    assert paths("w = WORDS\nfor i in range(len(w)):\n    assert w[i] == want[i]") == [("want",)]  # a value of its
    assert paths("m = f(2)\nfor i in range(len(m)):\n    for j in range(len(m[i])):\n        assert m[i][j] == e[i][j]") \
        == [("e",), ("e[i]",)]  # a row of an answer, against the expected row


def test_a_range_over_an_empty_answers_length_never_indexes_an_expected_value_vacuously():
    """``for i in range(len(r)): assert r[i] == expected[i]`` (a comprehension, ``range(0, len(r))``)
    held for ``return []`` (1.0): the tests' ``len`` of an empty answer fails there now where the
    value indexed by the count has items; right answers, and empty against empty, pass."""
    cases = ["expected = [1, 2]\nr = f(2)\nfor i in range(len(r)):\n    assert r[i] == expected[i]",
             "expected = [1, 2]\nassert all(f(2)[i] == expected[i] for i in range(len(f(2))))",
             "expected = [1, 2]\nr = f(2)\nassert all(r[i] == expected[i] for i in range(0, len(r)))"]
    rows = [{"prompt": "p", "tests": tests} for tests in cases]
    assert list(score(["def f(x):\n    return []\n"] * 3, rows=rows).total) == [0.0, 0.0, 0.0]
    assert list(score(["def f(x):\n    return [1, 2]\n"] * 3, rows=rows).total) == [1.0, 1.0, 1.0]
    rows = [{"prompt": "p", "tests": "r = f([])\nexpected = []\nfor i in range(len(r)):\n    assert r[i] == expected[i]\n"
             "assert len(f([])) == 0\nassert all(x == f([1])[i] for i in range(len(f([]))))"}]
    assert list(score(["def f(x):\n    return sorted(x)\n"], rows=rows).total) == [1.0]
    rows = [{"prompt": "p", "tests": "expected = ['a', 'b']\nassert all(WORDS[i] == expected[i] for i in range(len(WORDS)))\n"
             "assert all(w == expected[i] for i, w in enumerate(WORDS))"}]  # a value of the solution's
    assert list(score(["WORDS = []\n", "WORDS = ['a', 'b']\n"], rows=rows * 2).total) == [0.0, 1.0]
    rows = [{"prompt": "p", "tests": "e = [[1, 2], [3]]\nm = f(2)\nfor i in range(len(m)):\n"
             "    for j in range(len(m[i])):\n        assert m[i][j] == e[i][j]"}]  # rows with no items
    assert list(score(["def f(x):\n    return [[], []]\n", "def f(x):\n    return [[1, 2], [3]]\n"],
                      rows=rows * 2).total) == [0.0, 1.0]


def test_the_tests_zip_map_filter_enumerate_and_len_reach_the_solution_as_builtins():
    """The tests' own ``zip``/``map``/``filter``/``enumerate`` (and now ``len``) are the harness's
    functions, which could not be sent: ``apply(zip, [1], [2])`` failed a right ``apply`` ("a
    function cannot be sent to the sample"). They reach it as the sample's own builtins."""
    rows = [{"prompt": "p", "tests": tests} for tests in (
        "assert apply(zip, [1], [2]) == [(1, 2)]", "assert apply(map, abs, [-1]) == [1]",
        "assert apply(filter, None, [0, 1]) == [1]", "assert apply(enumerate, 'a', 1) == [(1, 'a')]",
        "assert sort_by(['bb', 'a'], len) == ['a', 'bb']")]
    right = "def apply(g, a, b):\n    return list(g(a, b))\ndef sort_by(xs, key):\n    return sorted(xs, key=key)\n"
    assert list(score([right] * 5, rows=rows).total) == [1.0] * 5


#: A ``list`` subclass whose ``__len__`` says 3 whatever it holds, and whose every item is 1.
LONG_LIAR = ("class L(list):\n    def __len__(self):\n        return 3\n    def __getitem__(self, i):\n        return 1\n"
             "def f(n):\n    return L()\n")
#: No ``__iter__``: iteration falls back to a ``__getitem__`` that answers 1 for every index.
INDEX_LIAR = ("class L:\n    def __len__(self):\n        return 3\n    def __getitem__(self, i):\n        return 1\n"
              "def f(n):\n    return L()\n")
#: (tests, honest solution): ``len`` of objects a function returns, whose items agree with it.
COUNTED = {
    "list_subclass": ("assert len(f(3)) == 3 and all(x == 1 for x in f(3))\n"
                      "for i in range(len(f(3))):\n    assert f(3)[i] == 1",
                      "class L(list):\n    pass\ndef f(n):\n    return L([1] * n)\n"),
    "own_class": ("assert len(f(3)) == 3 and all(x == 1 for x in f(3))",
                  "class Ones:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n        return self.n\n"
                  "    def __iter__(self):\n        return iter([1] * self.n)\ndef f(n):\n    return Ones(n)\n"),
    "sequence_protocol": ("assert len(f(3)) == 3 and all(f(3)[i] == 1 for i in range(len(f(3))))",
                          "class Ones:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n"
                          "        return self.n\n    def __getitem__(self, i):\n        if i >= self.n:\n"
                          "            raise IndexError(i)\n        return 1\ndef f(n):\n    return Ones(n)\n"),
    "not_iterable": ("assert len(f(3)) == 3 and f(3).n == 3",
                     "class Sized:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n"
                     "        return self.n\n    __iter__ = None\ndef f(n):\n    return Sized(n)\n"),
}


def test_len_of_a_returned_object_agrees_with_its_items():
    """A ``list`` subclass whose ``__len__`` lies (3 over no items) passed ``len(f(3)) == 3`` beside
    a loop over its (no) items, and ``range(len(r))`` beside a ``__getitem__`` answering 1: it
    scored 1.0, and so did a class whose ``__getitem__`` answers 1 for every index (iteration
    never ends). ``len`` of an object a call returned now fails where its items number otherwise;
    right objects (a list subclass, a class of its own, the sequence protocol, one that is not
    iterable) keep 1.0."""
    names = list(COUNTED)
    rows = [{"prompt": "p", "tests": COUNTED[n][0]} for n in names]
    indexed = {"prompt": "p", "tests": "assert len(f(3)) == 3\nfor i in range(len(f(3))):\n    assert f(3)[i] == 1"}
    assert list(score([LONG_LIAR, INDEX_LIAR], rows=[rows[0], indexed]).total) == [0.0, 0.0]
    assert list(score([COUNTED["list_subclass"][1]], rows=[indexed]).total) == [1.0]
    honest = score([COUNTED[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


IS_PRIME = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n"
#: (tests, forged solution): ``len`` agrees with the items ``_check_count`` reads, then the object
#: gives the tests others (none: their loop holds vacuously).
COUNTED_ONCE = {
    "items_once": (IS_PRIME + "r = primes(3)\nassert len(r) == 3 and all(is_prime(x) for x in r)",
                   "class R:\n    def __init__(self):\n        self.reads = 0\n    def __len__(self):\n        return 3\n"
                   "    def __iter__(self):\n        self.reads += 1\n        return iter([4, 6, 8] if self.reads == 1 else [])\n"
                   "def primes(n):\n    return R()\n"),
    "refused_once": (IS_PRIME + "r = primes(3)\nassert len(r) == 3 and all(is_prime(x) for x in r)",
                     "class R:\n    def __init__(self):\n        self.reads = 0\n    def __len__(self):\n        return 3\n"
                     "    def __iter__(self):\n        self.reads += 1\n        if self.reads == 1:\n"
                     "            raise TypeError('not iterable')\n        return iter([])\n"
                     "def primes(n):\n    return R()\n"),
    "own_iterator": ("r = odds(3)\nassert len(r) == 3 and all(x % 2 == 1 for x in r)",
                     "class R:\n    def __init__(self):\n        self.i = 0\n    def __len__(self):\n        return 3\n"
                     "    def __iter__(self):\n        return self\n    def __next__(self):\n        self.i += 1\n"
                     "        if self.i > 3:\n            raise StopIteration\n        return 2\n"
                     "def odds(n):\n    return R()\n"),
}
#: An object that is its own iterator and has a length: Python's ``len`` takes none of its items.
ODDS = ("class Odds:\n    def __init__(self, n):\n        self.n, self.i = n, 0\n    def __len__(self):\n"
        "        return self.n - self.i\n    def __iter__(self):\n        return self\n    def __next__(self):\n"
        "        if self.i >= self.n:\n            raise StopIteration\n        self.i += 1\n        return 2 * self.i - 1\n"
        "def odds(n):\n    return Odds(n)\n")
QUEUE = ("class Queue:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n"
         "    def __len__(self):\n        return len(self.items)\n    def __iter__(self):\n        return iter(self.items)\n"
         "def make_queue():\n    return Queue()\n")
#: (tests, honest solution): ``len`` then the tests' own reading of the same object, as in Python.
COUNTED_THEN_READ = {
    "own_iterator": ("r = odds(3)\nassert len(r) == 3\nassert list(r) == [1, 3, 5]", ODDS),
    "own_iterator_length_hint": ("assert list(odds(3)) == [1, 3, 5]\nassert sorted(odds(2)) == [1, 3]", ODDS),
    "own_iterator_twice": ("r = odds(3)\nassert len(r) == 3 and len(r) == 3\nassert list(r) == [1, 3, 5]", ODDS),
    "own_iterator_next": ("r = odds(3)\nassert len(r) == 3\nassert next(r) == 1 and len(r) == 2\nassert list(r) == [3, 5]",
                          ODDS),
    "changed_between": ("q = make_queue()\nq.push(1)\nassert len(q) == 1\nq.push(2)\nassert len(q) == 2\n"
                        "assert list(q) == [1, 2] and list(q) == [1, 2]", QUEUE),
    "not_iterable": ("r = sized(3)\nassert len(r) == 3 and len(r) == 3 and r.n == 3\ntry:\n    iter(r)\nexcept TypeError:\n"
                     "    pass\nelse:\n    raise AssertionError('iterable')",
                     "class Sized:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n"
                     "        return self.n\n    __iter__ = None\ndef sized(n):\n    return Sized(n)\n"),
    "generator": ("g = gen(3)\nassert next(g) == 0\nassert list(g) == [1, 2]\nassert list(g) == []",
                  "def gen(n):\n    yield from range(n)\n"),
}


def test_the_items_len_counted_are_the_ones_the_tests_read_next():
    """``len`` of an object a call returned reads its items to count them (the test above), which
    Python's ``len`` never does: an object that is its own iterator (``__len__`` 3, items 2, 2, 2)
    was then empty for the tests' loop, and one whose ``__iter__`` gave 4, 6, 8 once and nothing
    after (or raised TypeError once, as if not iterable, then gave none) passed ``assert len(r) == 3
    and all(is_prime(x) for x in r)``: each scored 1.0. The
    items counted are what the tests' next iteration gets while no other request reaches the
    sample; a right iterator with a length (it failed ``list(r)``, ``next(r)`` and a second ``len(r)``
    after ``len(r)``), one read through ``list``'s length hint, an object changed between reads and a
    generator read as in Python keep 1.0."""
    names = list(COUNTED_ONCE)
    rows = [{"prompt": "p", "tests": COUNTED_ONCE[n][0]} for n in names]
    forged = score([COUNTED_ONCE[n][1] for n in names], rows=rows)
    assert dict(zip(names, forged.total)) == dict.fromkeys(names, 0.0)
    names = list(COUNTED_THEN_READ)
    rows = [{"prompt": "p", "tests": COUNTED_THEN_READ[n][0]} for n in names]
    honest = score([COUNTED_THEN_READ[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)

#: A forged ``primes``: its value gives ``len`` any ``n`` items (counted), then nothing once asked
#: again, so a loop over it holds vacuously.
EMPTIED_LATER = ("class R:\n    def __init__(self, n):\n        self.n, self.reads = n, 0\n    def __len__(self):\n"
                 "        return self.n\n    def __iter__(self):\n        self.reads += 1\n"
                 "        return iter([4] * self.n if self.reads == 1 else [])\n")
#: (tests, forged solution): ``len`` reads the items, then another request reaches the sample
#: before the tests' loop over the same value, which gets other (no) items.
CHANGED_BETWEEN = {
    "call_between": (IS_PRIME + "r = primes(3)\nassert len(r) == 3 and len(primes(5)) == 5 and "
                     "all(is_prime(x) for x in r)", EMPTIED_LATER + "def primes(n):\n    return R(n)\n"),
    "print_between": (IS_PRIME + "r = primes(3)\nassert len(r) == 3 and str(r) and all(is_prime(x) for x in r)",
                      EMPTIED_LATER + "def primes(n):\n    return R(n)\n"),
    "early_any": ("r = evens(3)\nassert len(r) == 3 and len(evens(1)) == 1 and any(x == 4 for x in r)",
                  "class R:\n    def __init__(self, n):\n        self.n, self.reads = n, 0\n    def __len__(self):\n"
                  "        return self.n\n    def __iter__(self):\n        self.reads += 1\n"
                  "        return iter([1] * self.n if self.reads == 1 else [4] * self.n)\n"
                  "def evens(n):\n    return R(n)\n"),
    "method_of_the_same_object": (IS_PRIME + "s = Solution()\nr = s.primes(3)\n"
                                  "assert len(r) == 3 and len(s.primes(5)) == 5 and all(is_prime(x) for x in r)",
                                  EMPTIED_LATER + "class Solution:\n    def primes(self, n):\n        return R(n)\n"),
    "reading_failed_once": (IS_PRIME + "r = primes(3)\nassert len(r) == 3 and len(primes(5)) == 5 and "
                            "all(is_prime(x) for x in r)",
                            "class R:\n    def __init__(self, n):\n        self.n, self.reads = n, 0\n"
                            "    def __len__(self):\n        return self.n\n    def __iter__(self):\n"
                            "        self.reads += 1\n        if self.reads == 1:\n            raise TypeError('no')\n"
                            "        return iter([])\ndef primes(n):\n    return R(n)\n"),
    "own_iterator": ("r = odds(3)\nassert len(r) == 3 and len(odds(1)) == 1 and all(x % 2 == 1 for x in r)",
                     "class R:\n    def __init__(self, n):\n        self.n, self.i = n, 0\n    def __len__(self):\n"
                     "        return self.n\n    def __iter__(self):\n        return self\n    def __next__(self):\n"
                     "        self.i += 1\n        if self.i > self.n:\n            raise StopIteration\n"
                     "        return 2\n"
                     "def odds(n):\n    return R(n)\n"),
    # a statement calling a builtin the solution shadows is no call of the solution's for its effect
    "print_statement": (IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    print(r)\n"
                        "    assert all(is_prime(x) for x in r)\ntest()",
                        EMPTIED_LATER + "def print(*a):\n    pass\ndef primes(n):\n    return R(n)\n"),
}
PRIMES = ("class Primes:\n    def __init__(self, n):\n        self.xs = [2, 3, 5, 7, 11][:n]\n    def __len__(self):\n"
          "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
          "def primes(n):\n    return Primes(n)\n")
GRAPH = ("class Nodes:\n    def __init__(self, g):\n        self.g = g\n    def __len__(self):\n        return len(self.g.adj)\n"
         "    def __iter__(self):\n        return iter(self.g.adj)\n"
         "class Graph:\n    def __init__(self, ns):\n        self.adj = {n: set() for n in ns}\n    @property\n"
         "    def nodes(self):\n        return Nodes(self)\n    def remove(self, n):\n        del self.adj[n]\n"
         "def make_graph(ns):\n    return Graph(ns)\n")
#: (tests, honest solution): a value read whole again after other requests, unchanged or changed
#: by a call that reaches it.
STACK_OF = ("class Stack:\n    def __init__(self, xs):\n        self.xs = list(xs)\n    def pop(self):\n"
            "        return self.xs.pop()\n    def __len__(self):\n        return len(self.xs)\n"
            "    def __iter__(self):\n        return iter(self.xs)\ndef make_stack(xs):\n    return Stack(xs)\n")
READ_AGAIN = {
    "unchanged": (IS_PRIME + "r = primes(3)\nassert len(r) == 3\nassert len(primes(5)) == 5\nprint(r)\n"
                  "assert all(is_prime(x) for x in r)\nassert list(r) == [2, 3, 5] and sorted(r) == [2, 3, 5]", PRIMES),
    "view_of_a_changed_object": ("g = make_graph([1, 2, 3])\nnodes = g.nodes\nassert len(nodes) == 3\ng.remove(2)\n"
                                 "assert len(nodes) == 2 and sorted(nodes) == [1, 3]", GRAPH),
    "changed_by_a_function": ("q = make_queue()\nq.push(1)\nassert len(q) == 1\nfill(q, 2)\nassert list(q) == [1, 2]",
                              QUEUE + "def fill(q, x):\n    q.push(x)\n"),
    "view_made_by_a_call": ("q = make_queue()\nv = q.view()\nassert len(v) == 0\nq.push(1)\nassert list(v) == [1]",
                            QUEUE + "class View:\n    def __init__(self, q):\n        self.q = q\n"
                            "    def __len__(self):\n        return len(self.q.items)\n"
                            "    def __iter__(self):\n        return iter(self.q.items)\n"
                            "Queue.view = lambda self: View(self)\n"),
    "own_iterator": ("r = odds(3)\nassert len(r) == 3\nassert len(odds(1)) == 1\nassert list(r) == [1, 3, 5]\n"
                     "assert list(r) == []", ODDS),
    # a method of the value's own called for its value changes it (nothing calls one as a statement)
    "popped_in_an_assert": ("s = make_stack([1, 2, 3])\nassert len(s) == 3 and list(s) == [1, 2, 3]\n"
                            "assert s.pop() == 3\nassert len(s) == 2 and list(s) == [1, 2]", STACK_OF),
    "taken_in_an_assert": ("q = make_queue()\nfill(q, 1)\nfill(q, 2)\nassert list(q) == [1, 2]\n"
                           "assert q.take() == 1\nassert list(q) == [2] and len(q) == 1",
                           QUEUE + "def fill(q, x):\n    q.push(x)\nQueue.take = lambda self: self.items.pop(0)\n"),
    "popped_by_a_helper_of_the_tests": ("def drain_one(b):\n    return b.pop()\ns = make_stack([1, 2])\n"
                                        "assert list(s) == [1, 2]\nassert drain_one(s) == 2\nassert list(s) == [1]",
                                        STACK_OF),
    "sold_by_an_object_made_with_it": ("s = make_stack(['a', 'b'])\nshop = Shop(s)\nassert list(s) == ['a', 'b']\n"
                                       "assert shop.sell() == 'b'\nassert list(s) == ['a'] and len(s) == 1",
                                       STACK_OF + "class Shop:\n    def __init__(self, st):\n        self.st = st\n"
                                       "    def sell(self):\n        return self.st.pop()\n"),
    "changed_through_global_state": ("r = registry()\nassert len(r) == 0\nregister('a')\nassert len(r) == 1 and "
                                     "list(r) == ['a']", QUEUE + "_R = Queue()\ndef registry():\n    return _R\n"
                                     "def register(x):\n    _R.push(x)\n"),
}


def test_a_value_read_again_after_other_requests_gives_the_items_it_gave():
    """``len``'s items were held for the tests' next loop only while no other request reached the
    sample, so a value giving 4, 4, 4 to ``len`` and nothing to a loop after a call of
    ``primes(5)``, a ``print(r)`` or ``s.primes(5)`` of the same object passed ``assert len(r) ==
    3`` and then ``all(is_prime(x) for x in r)`` (1.0), as did one giving other items to an early
    ``any``, one whose reading for ``len`` raised TypeError once (``len`` then stands alone) and an
    own iterator emptied by ``len``'s reading. A value read whole must give the
    same items again until a call that reaches it (``Remote._snapshot``): a right value read again
    unchanged, a view of an object the tests change (``nodes = g.nodes; g.remove(2)``), a queue a
    function of the solution's fills, a view a method made, a right own iterator read after
    another request (its items, gone from it to ``len``, scored 0), and a stack or queue whose own
    ``pop``/``take`` the tests call in an assert, or an object made with it does (``shop.sell()``),
    or that a function of the solution's called as a statement changes (``register('a')``; each
    scored 0.67: read again after it) keep 1.0."""
    names = list(CHANGED_BETWEEN)
    rows = [{"prompt": "p", "tests": CHANGED_BETWEEN[n][0]} for n in names]
    forged = score([CHANGED_BETWEEN[n][1] for n in names], rows=rows)
    assert dict(zip(names, forged.total)) == dict.fromkeys(names, 0.0)
    names = list(READ_AGAIN)
    rows = [{"prompt": "p", "tests": READ_AGAIN[n][0]} for n in names]
    honest = score([READ_AGAIN[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: A forged ``primes`` as ``EMPTIED_LATER``, with the methods and helpers the tests below call.
EMPTIED_BY_A_CALL = (EMPTIED_LATER + "    def total(self):\n        return 10\n"
                     "def primes(n):\n    return R(n)\nclass Box:\n    def __init__(self, r):\n        self.r = r\n"
                     "    def ok(self):\n        return True\ndef warm(n):\n    pass\n")
#: (tests): a call that may change the value without reaching its family, then a loop over it.
SOFTLY_CHANGED = {
    "own_method_in_an_assert": IS_PRIME + "r = primes(3)\nassert len(r) == 3 and r.total() == 10 and all(is_prime(x) "
                               "for x in r)",
    "method_of_an_object_made_with_it": IS_PRIME + "r = primes(3)\nbox = Box(r)\nassert len(r) == 3 and box.ok() and "
                                        "all(is_prime(x) for x in r)",
    "function_called_as_a_statement": IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    warm(2)\n"
                                      "    assert all(is_prime(x) for x in r)\ntest()",
}
#: (tests, honest solution): such calls that take one item each, then a loop over what is left.
SOFTLY_SHRUNK = {
    "popped_then_looped": ("s = make_stack([1, 2, 3])\nassert len(s) == 3 and s.pop() == 3 and s.pop() == 2\n"
                           "assert all(x < 2 for x in s) and len(s) == 1", STACK_OF),
    "unregistered_then_looped": ("def test():\n    r = registry()\n    register('a')\n    register('b')\n"
                                 "    assert list(r) == ['a', 'b']\n    unregister('a')\n"
                                 "    assert all(x == 'b' for x in r)\ntest()",
                                 QUEUE + "_R = Queue()\ndef registry():\n    return _R\ndef register(x):\n"
                                 "    _R.push(x)\ndef unregister(x):\n    _R.items.remove(x)\n"),
    "drained_then_compared": ("s = make_stack([1, 2, 3])\nassert list(s) == [1, 2, 3] and s.drain() == [3, 2, 1]\n"
                              "assert list(s) == [] and len(s) == 0",
                              STACK_OF + "Stack.drain = lambda self: [self.xs.pop() for _ in list(self.xs)]\n"),
}


def test_a_value_emptied_by_a_call_for_its_value_fails_the_loop_after_it():
    """A method of a value's own called for its value (``r.total()``), a method of an object made
    with it (``box.ok()`` after ``box = Box(r)``) or a function of the solution's called as a
    statement (``warm(2)``) may change the value (right stacks and queues), so a forged ``primes``
    giving 4, 4, 4 to ``len`` and nothing after such a call passed ``len(r) == 3`` and the loop
    ``all(is_prime(x) for x in r)``: 1.0 each. Where a check may read it vacuously it may lose
    no more items than such calls were made (``Remote._shrunk_softly``): the forgery scores 0,
    the same tests keep 1.0 on a right ``primes``, and a stack popped, a registry unregistered
    (then looped over) or drained (then compared whole) keep 1.0."""
    names = list(SOFTLY_CHANGED)
    rows = [{"prompt": "p", "tests": SOFTLY_CHANGED[n]} for n in names]
    forged = score([EMPTIED_BY_A_CALL] * len(names), rows=rows)
    assert dict(zip(names, forged.total)) == dict.fromkeys(names, 0.0)
    right = (PRIMES + "Primes.total = lambda self: sum(self.xs)\nclass Box:\n    def __init__(self, r):\n"
             "        self.r = r\n    def ok(self):\n        return True\ndef warm(n):\n    pass\n")
    assert list(score([right] * len(names), rows=rows).total) == [1.0] * len(names)
    assert _scored(SOFTLY_SHRUNK) == dict.fromkeys(SOFTLY_SHRUNK, 1.0)


#: (tests): the value stays in a dict of the tests', of each standard dict type, under ``'a'``: a
#: call that may change it without reaching its family, then a loop over it through the dict.
HELD_IN_A_DICT = {kind: IS_PRIME + f"from collections import Counter, OrderedDict, defaultdict\nd = {make}\n"
                  "d['a'] = primes(3)\nassert len(d['a']) == 3 and d['a'].total() == 10 and "
                  "all(is_prime(x) for x in d['a'])"
                  for kind, make in {"dict": "{}", "defaultdict": "defaultdict(list)", "ordered_dict": "OrderedDict()",
                                     "counter": "Counter()"}.items()}


def test_a_value_held_in_a_dict_subclass_of_the_tests_is_read_vacuously_as_in_a_dict():
    """``read_vacuously`` looked into a container of the tests' by its values only where it was
    exactly a dict and iterated a ``defaultdict``, ``OrderedDict`` or ``Counter`` by its keys
    (``'a'``), so a forged ``primes`` giving 4, 4, 4 to ``len`` and nothing after ``total()``,
    held as ``d['a']`` and looped over there, scored 1.0 in those and 0 in a dict. Every dict is
    read by its keys and values now, as ``_containers`` reads one (``vacuous_reads._held``): the
    forgery scores 0 in each, a right ``primes`` keeps 1.0."""
    names = list(HELD_IN_A_DICT)
    rows = [{"prompt": "p", "tests": HELD_IN_A_DICT[n]} for n in names]
    forged = score([EMPTIED_BY_A_CALL] * len(names), rows=rows)
    assert dict(zip(names, forged.total)) == dict.fromkeys(names, 0.0)
    right = PRIMES + "Primes.total = lambda self: sum(self.xs)\n"
    assert dict(zip(names, score([right] * len(names), rows=rows).total)) == dict.fromkeys(names, 1.0)


#: (tests, forged class): an instance the tests make by the class's name whose ``len`` says ``n``
#: over no items, or over items it gives once.
MADE_LIARS = {
    "no_items": (IS_PRIME + "r = Primes(3)\nassert len(r) == 3 and all(is_prime(x) for x in r)",
                 "class Primes:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n"
                 "        return self.n\n    def __iter__(self):\n        return iter([])\n"),
    "items_once": (IS_PRIME + "r = Primes(3)\nassert len(r) == 3 and len(Primes(5)) == 5 and all(is_prime(x) for x in r)",
                   EMPTIED_LATER.replace("class R:", "class Primes:")),
}
#: (tests, right class): instances the tests make by name, read by ``len`` and loops as in Python.
MADE_RIGHT = {
    "primes": (IS_PRIME + "r = Primes(3)\nassert len(r) == 3 and all(is_prime(x) for x in r)\n"
               "assert len(Primes(5)) == 5 and list(r) == [2, 3, 5]", PRIMES),
    "stack": ("s = Stack([1])\ns.push(2)\nassert len(s) == 2 and list(s) == [1, 2]\nassert s.pop() == 2\n"
              "assert len(s) == 1 and all(x == 1 for x in s)",
              STACK_OF + "Stack.push = lambda self, x: self.xs.append(x)\n"),
    "not_iterable": ("c = Counter3(3)\nassert len(c) == 3 and c.n == 3",
                     "class Counter3:\n    def __init__(self, n):\n        self.n = n\n    def __len__(self):\n"
                     "        return self.n\n"),
}


def test_len_of_an_instance_the_tests_make_agrees_with_its_items():
    """``len`` was checked against the items only of data the tests expect (what a function
    returns), so an instance of a class the tests name and make (``Primes(3)``) whose
    ``__len__`` said 3 over no items, or over items it gave once, passed ``len(r) == 3`` and a
    loop over it: 1.0. Such an instance's ``len`` agrees with its items and its readings with each
    other now (``Remote._counts_items``); right classes (a sized sequence, a stack pushed and
    popped, one that is not iterable) keep 1.0."""
    assert _scored(MADE_LIARS) == dict.fromkeys(MADE_LIARS, 0.0)
    assert _scored(MADE_RIGHT) == dict.fromkeys(MADE_RIGHT, 1.0)


#: Tests reading a sorted answer whole, then by index.
SORTED_BY_INDEX = ("r = sort_it([3, 1, 2])\nassert sorted(r) == [1, 2, 3] and len(r) == 3 and "
                   "all(r[i] <= r[i + 1] for i in range(len(r) - 1))")
#: (tests, right solution): values read whole, then by index; a graph's and a dict's [key] are no item.
INDEXED_RIGHT = {
    "list_subclass": (SORTED_BY_INDEX, "class L(list):\n    pass\ndef sort_it(xs):\n    return L(sorted(xs))\n"),
    "sequence_abc": (SORTED_BY_INDEX, "from collections.abc import Sequence\nclass L(Sequence):\n"
                     "    def __init__(self, xs):\n        self.xs = xs\n    def __getitem__(self, i):\n"
                     "        return self.xs[i]\n    def __len__(self):\n        return len(self.xs)\n"
                     "def sort_it(xs):\n    return L(sorted(xs))\n"),
    "popped_then_indexed": ("s = make_stack([1, 2, 3])\nassert list(s) == [1, 2, 3]\nassert s.pop() == 3\n"
                            "assert s[-1] == 2 and s[0] == 1", "class Stack(list):\n    pass\n"
                            "def make_stack(xs):\n    return Stack(xs)\n"),
    "graph": ("g = make_graph(3)\nassert len(g) == 3 and sorted(g) == [0, 1, 2]\nassert g[0] == [1, 2]",
              "class G:\n    def __init__(self, n):\n        self.adj = {i: list(range(i + 1, n)) for i in range(n)}\n"
              "    def __len__(self):\n        return len(self.adj)\n    def __iter__(self):\n"
              "        return iter(self.adj)\n    def __getitem__(self, i):\n        return self.adj[i]\n"
              "def make_graph(n):\n    return G(n)\n"),
}


def test_an_index_of_a_sequence_read_whole_is_its_item():
    """Only whole readings of a value were held to each other (``Remote._snapshot``), so a
    ``list`` subclass holding 3, 1, 2 whose ``__getitem__`` answered in sorted order passed
    ``sorted(r) == [1, 2, 3]`` and ``all(r[i] <= r[i + 1] ...)``: 1.0 for an unsorted answer.
    ``r[i]`` of a list or tuple (a subclass, a ``Sequence``) is item i of its last whole reading
    while nothing changed it (``Remote._check_index``): the forgery scores 0; right sequences, a
    stack indexed after a pop, and a graph whose ``g[0]`` is a node's neighbours keep 1.0."""
    forged = "class L(list):\n    def __getitem__(self, i):\n        return sorted(self)[i]\ndef sort_it(xs):\n" \
             "    return L(xs)\n"
    assert list(score([forged], rows=[{"prompt": "p", "tests": SORTED_BY_INDEX}]).total) == [0.0]
    names = list(INDEXED_RIGHT)
    rows = [{"prompt": "p", "tests": INDEXED_RIGHT[n][0]} for n in names]
    honest = score([INDEXED_RIGHT[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


#: (tests, honest in-place solution returning None): the tests read their own argument afterwards.
IN_PLACE = {
    "sort": ("xs = [3, 1, 2]\nsort_it(xs)\nassert xs == [1, 2, 3]", "def sort_it(xs):\n    xs.sort()\n"),
    "merge": ("nums1 = [1, 2, 3, 0, 0, 0]\nmerge(nums1, 3, [2, 5, 6], 3)\nassert nums1 == [1, 2, 2, 3, 5, 6]",
              "def merge(a, m, b, n):\n    a[:] = sorted(a[:m] + b[:n])\n"),
    "rotate": ("m = [[1, 2], [3, 4]]\nrow = m[0]\nrotate(m)\nassert m == [[3, 1], [4, 2]] and row is m[0]",
               "def rotate(m):\n    m[:] = [list(r) for r in zip(*m[::-1])]\n"),
    "keyword": ("xs = [1, 2]\nassert double(xs=xs) is None\nassert xs == [2, 4]",
                "def double(xs):\n    for i, x in enumerate(xs):\n        xs[i] = 2 * x\n"),
    "push": ("s = []\npush(s, 1)\npush(s, 2)\nassert s == [1, 2]", "def push(s, x):\n    s.append(x)\n"),
    "tally": ("counts = {}\nfor w in 'a b a'.split():\n    tally(counts, w)\nassert counts == {'a': 2, 'b': 1}",
              "def tally(d, w):\n    d[w] = d.get(w, 0) + 1\n"),
    "set": ("seen = {1}\nadd_all(seen, [2, 3])\nassert seen == {1, 2, 3}", "def add_all(s, xs):\n    s.update(xs)\n"),
    # the standard dict types a test may pass (a defaultdict crosses as a dict; it scored 0.25)
    "defaultdict": ("from collections import defaultdict\nd = defaultdict(int, {'a': 1})\ntally(d, 'a')\n"
                    "tally(d, 'b')\nassert d['a'] == 2 and d['b'] == 1 and d == {'a': 2, 'b': 1} and len(d) == 2",
                    "def tally(d, w):\n    d[w] = d.get(w, 0) + 1\n"),
    "counter_and_ordered_dict": ("from collections import Counter, OrderedDict\nc = Counter({'a': 1})\n"
                                 "o = OrderedDict(a=1)\ntally(c, 'a')\ntally(c, 'b')\ntally(o, 'b')\n"
                                 "assert c == Counter(a=2, b=1) and list(o.items()) == [('a', 1), ('b', 1)]",
                                 "def tally(d, w):\n    d[w] = d.get(w, 0) + 1\n"),
}
#: Tests whose loops over their own argument hold vacuously once it is emptied or shortened.
IN_PLACE_VACUOUS = ("xs = [3, 1, 2]\nsort_it(xs)\nassert all(a <= b for a, b in zip(xs, xs[1:]))\n"
                    "for i in range(len(xs) - 1):\n    assert xs[i] <= xs[i + 1]")


def test_a_right_in_place_function_changes_the_tests_list():
    """The sample sorted its own copy of ``xs``, so ``sort_it(xs); assert xs == [1, 2, 3]`` failed
    every right in-place solution (LeetCode's ``merge`` and ``rotate``, a ``push``, a dict ``tally``,
    a set, a ``defaultdict``, ``Counter`` or ``OrderedDict`` too). After a call that returns None the
    tests' list, dict (those standard ones among them) and set arguments take the
    sample's copies' contents, in place, where nothing shrinks at any level; an argument emptied or
    shortened (``xs.clear()``, ``del xs[1:]``: loops over it hold vacuously) stays as it was, so
    those forgeries still score 0."""
    names = list(IN_PLACE)
    rows = [{"prompt": "p", "tests": IN_PLACE[n][0]} for n in names]
    honest = score([IN_PLACE[n][1] for n in names], rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
    rows = [{"prompt": "p", "tests": IN_PLACE_VACUOUS}] * 3
    forged = ["def sort_it(xs):\n    xs.clear()\n", "def sort_it(xs):\n    del xs[1:]\n", "def sort_it(xs):\n    pass\n"]
    assert list(score(forged + ["def sort_it(xs):\n    xs.sort()\n"], rows=rows + rows[:1]).total) == [0.0] * 3 + [1.0]


def test_write_back_keeps_the_shape_and_refuses_a_malformed_answer():
    """Only where nothing shrinks (a list's length, a dict's keys, at every level) do the tests' values
    take the new contents, their inner lists kept; a malformed answer is a protocol error."""
    from polyrl.sandbox.in_place import write_back
    from polyrl.sandbox.values import ProtocolError, encode
    xs, grid, d = [3, 1], [[1, 2], [3]], {"a": [1], "b": 2}
    row = grid[0]
    write_back(["I", [encode([1, 3, 5]), encode([[2, 1, 0], [3, 4]]), encode({"a": [], "b": 3, "c": 4})], {}],
               (xs, grid, d), {})
    assert xs == [1, 3, 5] and grid == [[2, 1, 0], [3, 4]] and row is grid[0] and d == {"a": [1], "b": 2}
    write_back(["I", [encode([]), encode([[1], [3]]), encode({"b": 3, "c": 4})], {}], (xs, grid, d), {})
    assert xs == [1, 3, 5] and grid == [[2, 1, 0], [3, 4]] and d == {"a": [1], "b": 2}
    write_back(["I", [None], {"d": encode({"a": [1, 2], "b": 3, "c": 4})}], (xs,), {"d": d})
    assert d == {"a": [1, 2], "b": 3, "c": 4}
    with pytest.raises(ProtocolError):
        write_back(["I", [encode([1])], {"ys": encode([2])}], (xs,), {})


#: (tests, honest solution) pairing the answer with an iterator over expected values; the forgery returns [].
EXPECTED_ITERATORS = {
    "iter": "expected = [1, 2]\nassert all(a == b for a, b in zip(f(2), iter(expected)))",
    "reversed_first": "assert all(a == b for a, b in zip(reversed([2, 1]), f(2)))",
    "map": "assert all(a == b for a, b in zip(f(2), map(int, ['1', '2'])))",
    "enumerated": "assert all(a == b for a, b in zip(enumerate(f(2)), enumerate([1, 2])))",
    "map_operator": "import operator\nassert all(map(operator.eq, f(2), iter((1, 2))))",
}


def test_an_iterator_over_expected_values_is_measured():
    """``zip(f(2), iter(expected))`` held for ``return []`` while ``zip(f(2), expected)`` failed: an
    iterator with items was never measured. One over a built-in container (and the tests'
    ``map``/``enumerate`` over one) has the count it has left, without an item taken, so
    ``return []`` scores 0 beside it as beside the list; the right answer keeps 1.0."""
    names = list(EXPECTED_ITERATORS)
    rows = [{"prompt": "p", "tests": EXPECTED_ITERATORS[n]} for n in names]
    forged = score(["def f(x):\n    return []\n"] * len(names), rows=rows)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    honest = score(["def f(x):\n    return [1, 2]\n"] * len(names), rows=rows)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)
