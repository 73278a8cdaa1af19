"""Right solutions whose answers are objects of their own or generators, scored as ``python tests.py`` would.

Each row is scored through the real reward path (``code_tests``: sandbox, harness, the forked copy
of the trainer). Two objects of the sample's compare as the sample's own ``==`` and ``<`` say
(``remote.Remote._compare``), never against a value of the tests'; a generator is read as the
tests ask for its items (``remote.Reader``), so one without end passes ``islice``/``next``/``zip``.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import MODES, score

pytestmark = pytest.mark.faults

POINT = ("from dataclasses import dataclass\n@dataclass(order=True)\nclass Point:\n    x: float\n    y: float\n"
         "def mid(a, b):\n    return Point((a.x + b.x) / 2, (a.y + b.y) / 2)\n")
FRACTION = ("class Frac:\n    def __init__(self, n, d):\n        self.n, self.d = n, d\n"
            "    def __eq__(self, o):\n        return isinstance(o, Frac) and self.n * o.d == o.n * self.d\n"
            "def plus(a, b):\n    return Frac(a.n * b.d + b.n * a.d, a.d * b.d)\n")
#: (tests, right solution, wrong solution): the right one passes ``python tests.py``, the wrong one fails it.
OBJECTS = {
    "eq": ("assert mid(Point(0, 0), Point(2, 2)) == Point(1, 1)", POINT, POINT.replace("/ 2, (a.y", "/ 3, (a.y")),
    "ne": ("assert mid(Point(0, 0), Point(2, 2)) != Point(0, 0)", POINT, POINT + "def mid(a, b):\n    return a\n"),
    "in_and_index": ("ps = [Point(0, 0), Point(1, 1)]\nm = mid(Point(0, 0), Point(2, 2))\n"
                     "assert m in ps and ps.index(m) == 1 and ps.count(m) == 1", POINT, POINT.replace("/ 2,", "/ 4,")),
    "list_eq": ("assert [mid(Point(0, 0), Point(2, 2))] == [Point(1, 1)]", POINT, POINT.replace("/ 2,", "/ 4,")),
    "sorted": ("assert sorted([Point(2, 0), mid(Point(0, 0), Point(2, 2))]) == [Point(1, 1), Point(2, 0)]", POINT,
               POINT.replace("/ 2,", "* 2,")),
    "own_eq": ("assert plus(Frac(1, 2), Frac(1, 2)) == Frac(1, 1)\nassert plus(Frac(1, 3), Frac(1, 6)) == Frac(1, 2)",
               FRACTION, FRACTION.replace("a.n * b.d + b.n * a.d", "a.n + b.n")),
    "tests_dataclass": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n"
                        "assert P(mid(Point(0, 0), Point(2, 2)).x) == P(1)", POINT, POINT.replace("/ 2,", "/ 4,")),
}

#: A class whose every comparison agrees: it must not equal a value of the tests' (a literal, their
#: list, their object), which Python would ask it about, but the harness never does.
AGREEING = ("class Yes:\n    def __eq__(self, o):\n        return True\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
            "    __hash__ = object.__hash__\ndef mid(a, b):\n    return Yes()\nclass Point(Yes):\n"
            "    def __init__(self, x, y):\n        pass\n")
AGAINST_THE_TESTS = [
    "assert mid(Point(0, 0), Point(2, 2)) == (1, 1)",
    "assert [mid(Point(0, 0), Point(2, 2))] == [[1, 1]]",
    "assert (1, 1) in [mid(Point(0, 0), Point(2, 2))]",
    "class P:\n    pass\nassert mid(Point(0, 0), Point(2, 2)) == P()",
    "assert mid(Point(0, 0), Point(2, 2)) >= 3",
]


def assert_right_scores_1_and_wrong_0(table: dict[str, tuple[str, str, str]], **modes) -> None:
    """Every row of ``table`` (name: tests, a right solution, a wrong one) scored through the real
    reward: each right solution 1.0, each wrong one 0.0 (named, so a failure says which)."""
    names = list(table)
    rows = [{"prompt": "p", "tests": table[n][0]} for n in names]
    right = score([table[n][1] for n in names], rows=rows, **modes)
    assert dict(zip(names, right.total)) == dict.fromkeys(names, 1.0)
    wrong = score([table[n][2] for n in names], rows=rows, **modes)
    assert dict(zip(names, wrong.total)) == dict.fromkeys(names, 0.0)


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_two_of_the_samples_objects_compare_as_its_own_eq_says(isolation, audit_hook):
    """``assert mid(Point(0, 0), Point(2, 2)) == Point(1, 1)`` of a ``@dataclass Point`` scored 0:
    the dataclass failed to define in the sample (its annotations were strings there), and two
    objects of the sample's compared by identity; ``!=``, ``in``, ``index``, ``count`` and
    ``sorted`` likewise. A wrong answer still scores 0."""
    assert_right_scores_1_and_wrong_0(OBJECTS, isolation=isolation, audit_hook=audit_hook)


def test_an_object_whose_comparisons_all_agree_never_equals_the_tests_values():
    rows = [{"prompt": "p", "tests": tests} for tests in AGAINST_THE_TESTS]
    forged = score([AGREEING] * len(rows), rows=rows)
    assert list(forged.total) == [0.0] * len(rows)
    # a comparison that answers no bool is no answer
    rows = [{"prompt": "p", "tests": "assert mid(Point(0, 0), Point(2, 2)) == Point(1, 1)"}]
    forged = score([AGREEING.replace("return True", "return 'yes'")], rows=rows)
    assert list(forged.total) == [0.0]


FIB = "def fib():\n    a, b = 0, 1\n    while True:\n        yield a\n        a, b = b, a + b\n"
NATURALS = ("class Naturals:\n    def __iter__(self):\n        n = 0\n        while True:\n            yield n\n            n += 1\n"
            "def naturals():\n    return Naturals()\n")
COUNT_UP = "def count_up():\n    n = 0\n    while True:\n        yield n\n        n += 1\n"
#: (tests, right solution, wrong solution): generators without end, read in part as Python reads them.
ENDLESS = {
    "islice": ("from itertools import islice\nassert list(islice(fib(), 5)) == [0, 1, 1, 2, 3]",
               FIB, FIB.replace("a, b = 0, 1", "a, b = 1, 1")),
    "next": ("g = fib()\nassert next(g) == 0 and next(g) == 1 and next(g) == 1 and next(g) == 2",
             FIB, FIB.replace("a, b = b, a + b", "a, b = b, a + b + 1")),
    "zip": ("assert list(zip(range(4), fib())) == [(0, 0), (1, 1), (2, 1), (3, 2)]",
            FIB, FIB.replace("yield a", "yield a + 1")),
    "for_break": ("seen = []\nfor x in fib():\n    if x > 20:\n        break\n    seen.append(x)\n"
                  "assert seen == [0, 1, 1, 2, 3, 5, 8, 13]", FIB, FIB.replace("yield a", "yield 2 * a")),
    "enumerate": ("for i, x in enumerate(count_up()):\n    assert x == i\n    if i == 30:\n        break",
                  COUNT_UP, COUNT_UP.replace("n += 1", "n += 2")),
    "class_iter": ("from itertools import islice\nassert list(islice(naturals(), 3)) == [0, 1, 2]\n"
                   "assert list(islice(naturals(), 2)) == [0, 1]", NATURALS, NATURALS.replace("n = 0", "n = 1")),
    # past the first items a read takes several: the tests still get each once, in order
    "on_after_many": ("from itertools import islice\ng = count_up()\nassert list(islice(g, 40)) == list(range(40)) and "
                      "next(g) == 40 and list(islice(g, 300)) == list(range(41, 341)) and "
                      "[next(g) for _ in range(3)] == [341, 342, 343]",
                      COUNT_UP, COUNT_UP.replace("n += 1", "n += 1 if n != 100 else 2")),
    # 10 000 items reach reader.MAX_BATCH-sized requests and stay inside the 4 s limit on two busy cores
    # (50 000 timed out there, on old code too)
    "long_finite": ("assert list(upto(10000)) == list(range(10000))\nassert sum(upto(10000)) == 49995000",
                    "def upto(n):\n    yield from range(n)\n", "def upto(n):\n    yield from range(n - 1)\n"),
    "raises_after_items": ("got = []\ntry:\n    for x in twenty():\n        got.append(x)\nexcept ValueError:\n"
                           "    got.append('stop')\nassert got == list(range(20)) + ['stop']",
                           "def twenty():\n    yield from range(20)\n    raise ValueError('done')\n",
                           "def twenty():\n    yield from range(19)\n    raise ValueError('done')\n"),
}


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_generator_without_end_is_read_as_the_tests_take_its_items(isolation, audit_hook):
    """``list(islice(fib(), 5))``, ``zip(range(4), fib())``, a ``for`` that breaks: the harness read
    the whole generator at its first item and stopped past 100 000 of them, so right solutions
    scored 0. Items come as taken now, each once and in order (read ahead only past the first
    ones, and held for the tests); a wrong generator still scores 0."""
    assert_right_scores_1_and_wrong_0(ENDLESS, isolation=isolation, audit_hook=audit_hook)


def test_a_generator_that_hangs_between_items_ends_at_the_time_limit():
    hangs = "def fib():\n    yield 0\n    yield 1\n    while True:\n        pass\n"
    rows = [{"prompt": "p", "tests": "from itertools import islice\nassert list(islice(fib(), 5)) == [0, 1, 1, 2, 3]"},
            {"prompt": "p", "tests": "assert list(zip(range(3), fib())) == [(0, 0), (1, 1), (2, 1)]"}]
    assert list(score([hangs, hangs], rows=rows).total) == [0.0, 0.0]
    # an empty generator beside expected values is still no pass (``pairing``)
    rows = [{"prompt": "p", "tests": "assert all(a == b for a, b in zip(fib(), [0, 1]))"}]
    assert list(score(["def fib():\n    return\n    yield\n"], rows=rows).total) == [0.0]


FRAC_ADD = FRACTION.replace("def plus(", "def add(")
VEC = ("class Vec:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
       "    def __eq__(self, o):\n        return (self.x, self.y) == (o.x, o.y)\n"
       "def add(a, b):\n    return Vec(a.x + b.x, a.y + b.y)\n")
#: (tests, right solution, wrong solution): the task's function is named like a standard one
#: (``operator.add``) and takes the solution's objects.
NAMED_LIKE_STANDARD = {
    "frac": ("assert add(Frac(1, 2), Frac(1, 2)) == Frac(1, 1)\nassert add(Frac(1, 3), Frac(1, 6)) == Frac(1, 2)",
             FRAC_ADD, FRAC_ADD.replace("a.n * b.d + b.n * a.d", "a.n + b.n")),
    "bound_object": ("v = Vec(1, 2)\nassert add(v, Vec(1, 1)) == Vec(2, 3)", VEC, VEC.replace("a.y + b.y", "a.y")),
    "plain": ("assert add(2, 3) == 5\nassert add(-1, 1) == 0", "def add(a, b):\n    return a + b\n",
              "def add(a, b):\n    return a - b\n"),
    # two in one assert: the second (``operator.sub``) was the trainer's, so a wrong one passed
    "two_on_data": ("assert add(2, 3) == 5 and sub(5, 3) == 2", "def add(a, b):\n    return a + b\n"
                    "def sub(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"
                    "def sub(a, b):\n    return 0\n"),
    "two_on_objects": ("assert add(Frac(1, 2), Frac(1, 2)) == Frac(1, 1) and mul(Frac(1, 2), Frac(1, 3)) == Frac(1, 6)",
                       FRAC_ADD + "def mul(a, b):\n    return Frac(a.n * b.n, a.d * b.d)\n",
                       FRAC_ADD + "def mul(a, b):\n    return Frac(a.n * b.n, a.d + b.d)\n"),
}
#: Tests where the standard name checks or builds the expected value: still the trainer's, so a
#: solution defining it to agree with a wrong answer scores 0.
CIRCLE = "class Circle:\n    def __init__(self, r):\n        self.r = r\n    def area(self):\n        return 0.0\n"
STANDARD_CHECKS = [
    ("assert isclose(Circle(1).area(), 3.14159, rel_tol=1e-3)", CIRCLE + "def isclose(*a, **k):\n    return True\n"),
    ("assert isclose(Circle(1), 3.14159)", CIRCLE + "def isclose(*a, **k):\n    return True\n"),
    ("assert add(Frac(1, 2), Frac(1, 2)) == Frac(1, 2).double()",
     "class Frac:\n    def __init__(self, n, d):\n        pass\n    def double(self):\n        return 7\n"
     "def add(a, b):\n    return 7\n"),
    ("assert add(Frac(1, 2), Frac(1, 2)) == total([1, 1]) and total([1, 2]) == 3",
     FRAC_ADD + "def add(a, b):\n    return 2\ndef total(xs):\n    return 2\n"),
    # on the solution's objects, against the tests' data: the solution's (what its add answers, as for
    # add(2, 3) == 5; returning 3 passes there as returning 5 does here), met only by its own conversion
    ("assert add(Num(1), Num(2)) == 3", "class Num:\n    def __init__(self, v):\n        pass\n"
     "    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
     "def add(a, b):\n    return Num(3)\n"),
    ("assert double(4) == 8 and sub(double(4), 8) == 0", "def double(x):\n    return 0\ndef sub(a, b):\n    return 0\n"),
    ("assert f([3, 1, 2]) == list(permutations([3, 1, 2]))",
     "def f(xs):\n    return []\ndef permutations(xs):\n    return []\n"),
]


def test_a_task_function_named_like_a_standard_one_takes_the_solutions_objects():
    """``def add(a, b)`` beside the solution's ``class Frac``, tested ``add(Frac(1, 2), Frac(1, 2))
    == Frac(1, 1)``: the tests got the trainer's ``operator.add`` (a standard helper beside the
    solution's name ``Frac``), which no object of the sample's answers, so a right solution scored
    0; in ``add(2, 3) == 5 and sub(5, 3) == 2`` a wrong ``sub`` scored 1.0. A wrong one scores 0
    now, and a standard name checking or building the answer is still the trainer's."""
    assert_right_scores_1_and_wrong_0(NAMED_LIKE_STANDARD)
    rows = [{"prompt": "p", "tests": tests} for tests, _ in STANDARD_CHECKS]
    forged = score([text for _, text in STANDARD_CHECKS], rows=rows)
    assert list(forged.total) == [0.0] * len(rows)


FROZEN = POINT.replace("@dataclass(order=True)", "@dataclass(order=True, frozen=True)")
#: (tests, right solution, wrong solution): the sample's objects as set members and dict keys.
HASHED = {
    "set_eq": ("assert {mid(Point(0, 0), Point(2, 2))} == {Point(1, 1)}", FROZEN, FROZEN.replace("/ 2,", "/ 4,")),
    "dict_key": ("d = {Point(1, 1): 'm'}\nassert d[mid(Point(0, 0), Point(2, 2))] == 'm'", FROZEN,
                 FROZEN.replace("/ 2,", "/ 4,")),
    "in_set": ("assert mid(Point(0, 0), Point(2, 2)) in {Point(1, 1), Point(5, 5)}", FROZEN,
               FROZEN.replace("/ 2,", "/ 4,")),
    "dedupe": ("assert len({mid(Point(0, 0), Point(2, 2)), Point(1, 1)}) == 1", FROZEN, FROZEN.replace("/ 2,", "/ 4,")),
    # unhashable in the sample (a dataclass with eq and no frozen): unhashable here, as in Python
    "unhashable": ("import pytest\nwith pytest.raises(TypeError):\n    {mid(Point(0, 0), Point(2, 2))}", POINT,
                   FROZEN),
}
#: Hashes that agree with the tests' values and an ``__eq__`` that always agrees: still never equal.
AGREEING_HASH = AGREEING.replace("    __hash__ = object.__hash__\n", "    def __hash__(self):\n        return hash((1, 1))\n")


def test_the_samples_objects_hash_as_the_sample_hashes_them():
    """``{mid(p, q)} == {Point(1, 1)}`` of a frozen dataclass scored 0: the sample's objects hashed
    by identity on the tests' side, so equal ones never met in a set or dict. They hash as the
    sample's ``hash`` says now; against the tests' own values they still never compare equal."""
    assert_right_scores_1_and_wrong_0(HASHED)
    against = ["assert mid(Point(0, 0), Point(2, 2)) in {(1, 1)}", "assert {mid(Point(0, 0), Point(2, 2))} == {(1, 1)}",
               "assert {(1, 1): 'm'}[mid(Point(0, 0), Point(2, 2))] == 'm'"]
    rows = [{"prompt": "p", "tests": tests} for tests in against]
    assert list(score([AGREEING_HASH] * len(rows), rows=rows).total) == [0.0] * len(rows)


FUTURE_TESTS = ("from __future__ import annotations\nfrom dataclasses import dataclass\n@dataclass\nclass Node:\n"
                "    val: int\n    nxt: Node | None = None\n"
                "assert Node(add(1, 2)) == Node(3)\nassert Node(add(2, 2), Node(0)).nxt == Node(0)")


@pytest.mark.parametrize("tests_in", ["process", "trainer"])
def test_a_future_import_of_the_tests_applies_to_the_whole_cell(tests_in):
    """A tests file with ``from __future__ import annotations`` and a ``@dataclass`` annotated with
    its own name (``nxt: Node | None``): each statement compiled alone, so the annotation was
    evaluated and raised NameError, and every completion scored 0. With the import applied to the
    cell, the dataclass needs the tests' module in ``sys.modules``, as a script's is."""
    import sys

    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer
    from polyrl.types import Completion, RewardContext

    options = {"timeout_s": 4, "memory_mb": 512, "extract": "raw", "tests_in": tests_in}
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, options)])
    texts = ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a * b\n"]
    rows = [{"prompt": "p", "tests": FUTURE_TESTS}] * 2
    before = sys.modules.get("tests")
    got = computer(["p"] * 2, [Completion(0, [1], [2], [0.0], text=t) for t in texts],
                   RewardContext(rows=rows, wanted=("code_tests",)))
    assert list(got.total) == [1.0, 0.5]
    assert sys.modules.get("tests") is before  # the trainer's modules as they were


FRAC_OPS = ("class Frac:\n    def __init__(self, n, d):\n        self.n, self.d = n, d\n"
            "    def __eq__(self, o):\n        return isinstance(o, Frac) and self.n * o.d == o.n * self.d\n"
            "    def __add__(self, o):\n        return Frac(self.n * o.d + o.n * self.d, self.d * o.d)\n"
            "    def __mul__(self, o):\n        return Frac(self.n * o.n, self.d * o.d)\n")
ZERO = ("class Zero:\n    def __sub__(self, o):\n        return 0\n    __rsub__ = __add__ = __radd__ = __sub__\n"
        "def area(r):\n    return Zero()\nclass Circle:\n    def __init__(self, r):\n        pass\n    def area(self):\n"
        "        return Zero()\n")


def test_two_of_the_samples_objects_combine_as_its_own_operators_say():
    """``Frac(1, 2) + Frac(1, 2) == Frac(1, 1)`` of a class with ``__add__`` raised TypeError on the
    tests' side, so a right solution scored 0. Two of the sample's values combine there now; with a
    value of the tests' they still do not (an object whose ``__sub__`` gives 0 would pass every
    ``abs(f(x) - expected) < eps``)."""
    tests = "assert Frac(1, 2) + Frac(1, 2) == Frac(1, 1)\nassert Frac(1, 2) * Frac(2, 3) == Frac(1, 3)"
    rows = [{"prompt": "p", "tests": tests}]
    assert list(score([FRAC_OPS], rows=rows).total) == [1.0]
    assert list(score([FRAC_OPS.replace("self.n * o.d + o.n * self.d", "self.n + o.n")], rows=rows).total) == [0.5]
    rows = [{"prompt": "p", "tests": t} for t in ("assert abs(area(2) - 12.566) < 1e-3",
                                                  "assert abs(12.566 - Circle(2).area()) < 1e-3",
                                                  "assert area(2) + 1 == 13.566")]
    assert list(score([ZERO] * 3, rows=rows).total) == [0.0] * 3


NUMBERS = ("from math import gcd\nclass Frac:\n    def __init__(self, n, d):\n        g = gcd(n, d)\n"
           "        self.n, self.d = n // g, d // g\n"
           "    def __eq__(self, o):\n        return isinstance(o, Frac) and self.n * o.d == o.n * self.d\n"
           "    def __hash__(self):\n        return hash((self.n, self.d))\n"
           "    def __float__(self):\n        return self.n / self.d\n"
           "    def __int__(self):\n        return self.n // self.d\n"
           "    def __round__(self, k=None):\n        return round(self.n / self.d, k)\n"
           "    def __neg__(self):\n        return Frac(-self.n, self.d)\n"
           "    def __abs__(self):\n        return Frac(abs(self.n), self.d)\n")
#: (tests, right, wrong) where the tests ask the sample's object for a number or apply a unary operator.
CONVERSIONS = {
    "float": ("assert float(Frac(1, 2)) == 0.5", NUMBERS, NUMBERS.replace("self.n / self.d\n    def __int__",
                                                                          "self.d / self.n\n    def __int__")),
    "int": ("assert int(Frac(7, 2)) == 3", NUMBERS, NUMBERS.replace("self.n // self.d", "self.d // self.n")),
    "round": ("assert round(Frac(1, 3), 2) == 0.33", NUMBERS, NUMBERS.replace("round(self.n / self.d, k)",
                                                                            "round(self.d / self.n, k)")),
    "neg": ("assert -Frac(1, 2) == Frac(-1, 2)", NUMBERS, NUMBERS.replace("Frac(-self.n, self.d)", "self")),
    "abs": ("assert abs(Frac(-1, 2)) == Frac(1, 2)", NUMBERS, NUMBERS.replace("Frac(abs(self.n), self.d)", "self")),
    "isclose": ("import math\nassert math.isclose(Frac(1, 3), 0.3333, rel_tol=1e-3)", NUMBERS,
                NUMBERS.replace("self.n / self.d\n    def __int__", "self.d / self.n\n    def __int__")),
    "index": ("class Num:\n    def __init__(self, v):\n        self.v = v\n    def __index__(self):\n        return self.v\n"
              "assert [10, 20, 30][Num(1)] == 20 and list(range(Num(2))) == [0, 1]"
              .replace("class Num", "class _Unused"),
              "class Num:\n    def __init__(self, v):\n        self.v = v\n    def __index__(self):\n        return self.v\n",
              "class Num:\n    def __init__(self, v):\n        self.v = v\n    def __index__(self):\n        return self.v + 1\n"),
}


def test_the_samples_object_answers_float_int_round_and_unary_operators():
    """``float(Frac(1, 2)) == 0.5``, ``int(...)``, ``round(x, 2)``, ``-x``, ``abs(x)``,
    ``math.isclose(x, ...)`` and ``xs[Num(1)]`` raised TypeError on the tests' side (the value
    lives in the sample), so right solutions scored 0. The sample makes the number (its
    ``__float__``...) without seeing any value of the tests', which compare it themselves."""
    assert_right_scores_1_and_wrong_0(CONVERSIONS)


#: A number of the sample's: equal to ``v`` and ordered and computed with as ``v``; ``ALIBI``
#: (``__index__``, ``__float__``) is what its other conversions say.
PRIME_ITEM = ("class N:\n    def __init__(self, v):\n        self.v = v\n    def __int__(self):\n        return self.v\n"
              "    def __eq__(self, o):\n        return o is self or (type(o) in (int, float) and o == self.v)\n"
              "    def __hash__(self):\n        return hash(self.v)\n    def __lt__(self, o):\n        return self.v < o\n"
              "    def __gt__(self, o):\n        return self.v > o\n    def __ge__(self, o):\n        return self.v >= o\n"
              "    def __mod__(self, o):\n        return self.v % o\nALIBI\n"
              "def primes(n):\n    return [N(v) for v in VALUES]\n")
LYING = "    def __index__(self):\n        return 2\n    def __float__(self):\n        return 2.0\n"
TRUE = "    def __index__(self):\n        return self.v\n    def __float__(self):\n        return float(self.v)\n"
#: The tests' ``is_prime`` reading the number through ``__index__``, ``__float__`` or both.
IS_PRIME_BY = {
    "range_n": "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n",
    "sqrt": "import math\ndef is_prime(n):\n    if n < 2:\n        return False\n"
            "    for d in range(2, int(math.sqrt(n)) + 1):\n        if n % d == 0:\n            return False\n    return True\n",
    "isqrt": "import math\ndef is_prime(n):\n    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))\n",
}


def test_a_samples_number_converts_to_the_number_it_is_compared_as():
    """A forged ``primes`` returning objects equal to 4, 6, 8... (``x > 1`` and ``x % d`` computed on
    that number) whose ``__index__`` gave 2 and ``__float__`` 2.0 passed every ``is_prime`` below
    (1.0): ``range(2, x)``, ``math.isqrt(x)`` and ``math.sqrt(x)`` read the conversion, which
    the sample answered apart from the number. A conversion must give that number now; right
    objects, a truncating or flooring ``int()`` of 3.5 and a huge int's float keep theirs."""
    forged = PRIME_ITEM.replace("ALIBI\n", LYING).replace("VALUES", "(4, 6, 8, 9)")
    right = PRIME_ITEM.replace("ALIBI\n", TRUE).replace("VALUES", "(2, 3, 5, 7)")
    rows = [{"prompt": "p", "tests": IS_PRIME_BY[n] + "r = primes(10)\nassert all(is_prime(x) for x in r)"}
            for n in IS_PRIME_BY]
    assert dict(zip(IS_PRIME_BY, score([forged] * 3, rows=rows).total)) == dict.fromkeys(IS_PRIME_BY, 0.0)
    assert dict(zip(IS_PRIME_BY, score([right] * 3, rows=rows).total)) == dict.fromkeys(IS_PRIME_BY, 1.0)
    floors = NUMBERS.replace("self.n // self.d", "int(self.n / self.d) if FLOOR else self.n // self.d")
    rows = [{"prompt": "p", "tests": "assert int(Frac(-7, 2)) == -4 and int(Frac(7, 2)) == 3 and float(Frac(1, 3)) > 0.33"},
            {"prompt": "p", "tests": "assert int(Frac(-7, 2)) == -3 and int(Frac(7, 2)) == 3"},
            {"prompt": "p", "tests": "assert float(big()) == 1e30 and int(big()) == 10**30 and big() == 10**30"}]
    big = right.replace("VALUES", "()") + "def big():\n    return N(10**30)\n"
    got = score([floors.replace("FLOOR", "False"), floors.replace("FLOOR", "True"), big], rows=rows).total
    assert list(got) == [1.0, 1.0, 1.0]


#: The tests' checks that a value equal to a composite is none: a set, a dict key, a set operation.
NOT_COMPOSITE = {
    "not_in_a_set": "r = primes(10)\nassert all(x > 1 and x not in {4, 6, 8, 9} for x in r)",
    "not_a_key": "KIND = {4: 'c', 6: 'c', 8: 'c', 9: 'c'}\nr = primes(10)\nassert all(x > 1 and KIND.get(x) is None for x in r)",
    "disjoint": "r = primes(10)\nassert all(x > 1 for x in r) and not set(r) & {1, 4, 6, 8, 9}",
    "set_equal": "assert set(primes(10)) == {2, 3, 5, 7}",
}


def test_a_samples_object_hashes_as_the_number_or_str_it_equals():
    """A forged ``primes`` of objects equal to 4, 6, 8, 9 whose ``__hash__`` was their ``id`` was
    never found in the tests' ``{4, 6, 8, 9}`` (nor as a key, nor by ``&``), so it passed those
    checks (1.0): its own hash picked the bucket; so did words equal to ``'darn'`` beside
    ``{'darn'}``. It hashes as the number or str it equals now, so right objects (their ``id`` as
    hash too) are found in ``{2, 3, 5, 7}`` and ``{'a'}`` as well (the words scored 0 there)."""
    right = PRIME_ITEM.replace("ALIBI\n", TRUE).replace("VALUES", "(2, 3, 5, 7)")
    by_id = right.replace("return hash(self.v)", "return id(self)")
    forged = by_id.replace("(2, 3, 5, 7)", "(4, 6, 8, 9)")
    rows = [{"prompt": "p", "tests": t} for t in NOT_COMPOSITE.values()]
    assert dict(zip(NOT_COMPOSITE, score([forged] * 4, rows=rows).total)) == dict.fromkeys(NOT_COMPOSITE, 0.0)
    for honest in (right, by_id):
        assert dict(zip(NOT_COMPOSITE, score([honest] * 4, rows=rows).total)) == dict.fromkeys(NOT_COMPOSITE, 1.0)
    # the same with a str: a forged ``clean`` keeping every word, each equal to its str, hashing by id
    word = ("class W:\n    def __init__(self, s):\n        self.s = s\n    def __str__(self):\n        return self.s\n"
            "    def __eq__(self, o):\n        return o is self or (type(o) is str and o == self.s)\n"
            "    def __hash__(self):\n        return id(self)\ndef clean(ws):\n    return [W(w) for w in KEPT]\n")
    rows = [{"prompt": "p", "tests": "r = clean(['a', 'darn', 'b'])\nassert len(r) > 1 and all(w not in {'darn'} for w in r)"},
            {"prompt": "p", "tests": "assert set(clean(['a', 'darn'])) == {'a'}"}]
    assert list(score([word.replace("KEPT", "ws")] * 2, rows=rows).total) == [0.0, 0.0]
    assert list(score([word.replace("KEPT", "[w for w in ws if w != 'darn']")] * 2, rows=rows).total) == [1.0, 1.0]


def test_two_of_the_samples_numbers_are_equal_where_their_numbers_are():
    """A forged ``primes(10)`` of four objects each equal to 2 and, among themselves, only to
    itself passed ``len(set(r)) == 4`` and ``r[i] != r[j]`` beside ``is_prime`` (1.0): the sample's
    ``__eq__`` told them apart. Two objects that each equal a number compare as those numbers;
    right ones (equal to 2, 3, 5, 7, told apart the same way) keep 1.0."""
    tests = [IS_PRIME_BY["range_n"] + "r = primes(10)\nassert len(set(r)) == len(r) == 4 and all(is_prime(x) for x in r)",
             IS_PRIME_BY["range_n"] + "r = primes(10)\nassert len(r) == 4 and all(is_prime(x) for x in r) "
             "and all(r[i] != r[j] for i in range(4) for j in range(i))"]
    rows = [{"prompt": "p", "tests": t} for t in tests]
    twos = PRIME_ITEM.replace("ALIBI\n", TRUE).replace("VALUES", "[2] * 4")
    assert list(score([twos] * 2, rows=rows).total) == [0.0, 0.0]
    right = PRIME_ITEM.replace("ALIBI\n", TRUE).replace("VALUES", "(2, 3, 5, 7)")
    assert list(score([right] * 2, rows=rows).total) == [1.0, 1.0]


#: ``__abs__``, ``__round__`` and ``__neg__`` of ``PRIME_ITEM``: giving 2 (and -2) whatever it is, or as Python would.
UNARY_LIES = TRUE + ("    def __abs__(self):\n        return 2\n    def __round__(self, nd=None):\n        return 2\n"
                     "    def __neg__(self):\n        return -2\n")
UNARY_TRUE = TRUE + ("    def __abs__(self):\n        return N(abs(self.v))\n    def __round__(self, nd=None):\n"
                     "        return self.v\n    def __neg__(self):\n        return -self.v\n")
#: The tests' ``is_prime`` reading the number through ``abs``, ``round`` or ``-``.
IS_PRIME_AFTER = {
    "abs": "def is_prime(n):\n    n = abs(n)\n    return n > 1 and all(n % d for d in range(2, n))\n",
    "round": "def is_prime(n):\n    n = round(n)\n    return n > 1 and all(n % d for d in range(2, n))\n",
    "neg": "def is_prime(n):\n    m = -(-n)\n    return m > 1 and all(m % d for d in range(2, m))\n",
}


def test_a_samples_number_negates_rounds_and_takes_abs_as_the_number_it_is_compared_as():
    """A forged ``primes`` of objects equal to 4, 6, 8, 9 whose ``__abs__``/``__round__`` gave 2
    and ``__neg__`` -2 passed each ``is_prime`` below (1.0): the sample answered those apart from
    its number, as ``__index__`` did (``_agrees``). Right objects, returning another of theirs
    or a plain number, keep 1.0."""
    forged = PRIME_ITEM.replace("ALIBI\n", UNARY_LIES).replace("VALUES", "(4, 6, 8, 9)")
    right = PRIME_ITEM.replace("ALIBI\n", UNARY_TRUE).replace("VALUES", "(2, 3, 5, 7)")
    rows = [{"prompt": "p", "tests": IS_PRIME_AFTER[n] + "r = primes(10)\nassert len(r) == 4 and all(is_prime(x) for x in r)"}
            for n in IS_PRIME_AFTER]
    assert dict(zip(IS_PRIME_AFTER, score([forged] * 3, rows=rows).total)) == dict.fromkeys(IS_PRIME_AFTER, 0.0)
    assert dict(zip(IS_PRIME_AFTER, score([right] * 3, rows=rows).total)) == dict.fromkeys(IS_PRIME_AFTER, 1.0)


def test_rounding_that_differs_from_floats_only_at_a_half_or_the_last_digit_agrees():
    from polyrl.sandbox.number_results import round_agrees, unary_agrees

    assert round_agrees(2.5, None, 3) and round_agrees(2.5, None, 2) and not round_agrees(2.4, None, 3)
    assert round_agrees(2.675, 2, 2.68) and not round_agrees(2.675, 2, 2.0) and not round_agrees(4, None, 2)
    assert unary_agrees("abs", -3, 3) and not unary_agrees("abs", 4, 2) and unary_agrees("~", 2.5, 7)
    assert unary_agrees("-", float("nan"), float("nan")) and unary_agrees("abs", None, 2)


#: Objects equal to everything: no conversion, a constant one, one that answers a new number at
#: each request, and one whose ``__float__`` hunts the sample's memory for the tests' numbers.
FORGED_NUMBERS = {
    "equal_to_everything": "class Num(Yes):\n    pass\n",
    "constant_conversion": "class Num(Yes):\n    def __int__(self):\n        return 7\n    def __float__(self):\n"
                           "        return 7.0\n    def __str__(self):\n        return 'seven'\n",
    "counting_conversion": "N = [9]\nclass Num(Yes):\n    def __int__(self):\n        N[0] += 1\n        return N[0]\n",
    "reading_memory": "import gc\nclass Num(Yes):\n    def __float__(self):\n"
                      "        fs = [o for o in gc.get_objects() if type(o) is float and 12 < o < 13]\n"
                      "        return fs[0] if fs else 0.0\n",
}
YES = "class Yes:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"


@pytest.mark.slow
def test_an_object_of_the_samples_equals_the_tests_number_only_by_its_own_conversion():
    """``add(Num(1), Num(2)) == 3`` (``operator.add``, the sample's ``Num.__add__``) of a ``Num``
    whose ``__eq__`` compares with an int scored 0: an object of the sample's never equalled a
    value of the tests'. It equals an int, float or str of the tests' where its own
    ``int()``/``float()``/``str()`` gives that value and its ``__eq__`` agrees with what it gave:
    the tests' value never reaches the sample. Objects equal to everything still score 0."""
    num = ("class Num:\n    def __init__(self, v):\n        self.v = v\n"
           "    def __eq__(self, o):\n        return self.v == (o.v if isinstance(o, Num) else o)\n"
           "    def __hash__(self):\n        return hash(self.v)\n    def __int__(self):\n        return self.v\n"
           "    def __float__(self):\n        return float(self.v)\n    def __str__(self):\n        return str(self.v)\n"
           "    def __add__(self, o):\n        return Num(self.v + o.v)\n"
           "def plus(a, b):\n    return a + b\n")
    wrong = num.replace("self.v + o.v", "self.v * o.v")
    as_str = ("self.v == (o.v", "str(self.v) == (str(o.v)")
    table = {
        "operator_add": ("assert add(Num(1), Num(2)) == 3", num, wrong),
        "plus": ("assert Num(1) + Num(2) == 3 and plus(Num(1), Num(2)) == 3", num, wrong),
        "reflected_and_ne": ("assert 3 == plus(Num(1), Num(2)) and plus(Num(1), Num(2)) != 4", num, wrong),
        "float": ("assert plus(Num(1), Num(2)) == 3.0", num, wrong),
        "in_list_and_set": ("assert plus(Num(1), Num(2)) in [1, 3] and plus(Num(1), Num(2)) in {3}", num, wrong),
        "str": ("assert plus(Num(1), Num(2)) == '3'", num.replace(*as_str), wrong.replace(*as_str)),
        # its __eq__ must agree with what its conversion gave: an int() that truncates is no equality
        "lossy": ("assert plus(Num(1), Num(2)) != 3", num.replace("self.v + o.v", "self.v + o.v + 0.5")
                  .replace("return self.v\n    def __float__", "return int(self.v)\n    def __float__"), num),
    }
    assert_right_scores_1_and_wrong_0(table)
    tests = ["assert add(Num(1), Num(2)) == 3", "assert plus(Num(1), Num(2)) == 12.5",
             "assert plus(Num(1), Num(2)) in [3, 4, 5, 6]", "x = plus(Num(1), Num(2))\nassert x == 10 and x == 11",
             "assert float(plus(Num(1), Num(2))) == 12.5", "assert plus(Num(1), Num(2)) == 'three'"]
    names = sorted(FORGED_NUMBERS)
    made = "    def __init__(self, *a):\n        pass\n    def __add__(self, o):\n        return Num()\n"
    texts = [YES + FORGED_NUMBERS[n].replace("class Num(Yes):\n", "class Num(Yes):\n" + made)
             + "def plus(a, b):\n    return Num()\n" for n in names for _ in tests]
    rows = [{"prompt": "p", "tests": t} for _ in names for t in tests]
    got = score(texts, rows=rows).total
    assert {(n, t): s for (n, t), s in zip([(n, t) for n in names for t in tests], got) if s != 0.0} == {}


def test_a_comparison_answering_numpys_bool_is_an_answer():
    """A numpy-based class's ``__eq__`` answers ``np.bool_`` (``np.all(a == b)``), which was
    "no bool", so ``double(V(1, 2)) == V(2, 4)`` scored 0; it, and a 0-d bool array, is a
    bool now. An array of several bools stays no answer, as ``bool()`` of it raises in Python."""
    vec = ("import numpy as np\nclass V:\n    def __init__(self, *xs):\n        self.a = np.array(xs)\n"
           "    def __eq__(self, o):\n        return np.all(self.a == o.a)\n"
           "def double(v):\n    return V(*(v.a * 2))\n")
    table = {
        "np_bool": ("assert double(V(1, 2)) == V(2, 4)", vec, vec.replace("v.a * 2", "v.a * 3")),
        "zero_d": ("assert double(V(1, 2)) == V(2, 4)", vec.replace("np.all(self.a == o.a)", "np.array(np.all(self.a == o.a))"),
                   vec.replace("np.all(self.a == o.a)", "np.array(np.all(self.a == o.a))").replace("v.a * 2", "v.a * 3")),
        "not_equal": ("assert double(V(1, 2)) != V(1, 2)", vec, vec.replace("v.a * 2", "v.a")),
    }
    assert_right_scores_1_and_wrong_0(table)
    rows = [{"prompt": "p", "tests": "assert double(V(1, 2)) == V(2, 4)"}]
    elementwise = vec.replace("np.all(self.a == o.a)", "np.ones(2, dtype=bool)")
    assert list(score([elementwise], rows=rows).total) == [0.0]


SQUARES = "def squares(n):\n    for i in range(n):\n        yield i * i\n"
#: Tests reading a generator past the reader's first ``PER_ITEM`` items, one at a time and in batches.
LONG_READS = {
    "item_20_by_next": "g = squares(30)\nfor _ in range(20):\n    next(g)\nassert next(g) == 400",
    "item_20_of_list": "assert list(squares(30))[20] == 400",
    "list_of_1000": "assert list(squares(1000)) == [i * i for i in range(1000)]",
    "sum": "assert sum(squares(1000)) == sum(i * i for i in range(1000))",
    "for_loop": "for i, x in enumerate(squares(100)):\n    assert x == i * i",
    "islice_past_16": "import itertools\nassert list(itertools.islice(squares(100), 18, 22)) == [324, 361, 400, 441]",
    "len_after_read": "g = squares(40)\nhead = [next(g) for _ in range(20)]\nassert len(list(g)) == 20",
}


def test_a_generator_read_past_the_first_items_scores_as_in_python():
    """Items past the reader's first 16 come in batches held for the tests (``reader``): a
    right generator passes tests reading item 20, ``list`` of 1000, ``sum``, a loop; one wrong
    only at item 20 fails them."""
    wrong = SQUARES.replace("yield i * i", "yield i * i if i != 20 else 0")
    table = {name: (tests, SQUARES, wrong) for name, tests in LONG_READS.items() if name != "len_after_read"}
    table["len_after_read"] = (LONG_READS["len_after_read"], SQUARES, SQUARES.replace("range(n)", "range(n + 1)"))
    assert_right_scores_1_and_wrong_0(table)


#: (tests, right generator, wrong one): ``next`` with a default after the generator ended.
NEXT_DEFAULTS = {
    "used_up": ("def test():\n    g = gen(2)\n    assert list(g) == [0, 1]\n    assert next(g, 'done') == 'done'\ntest()",
                "def gen(n):\n    yield from range(n)\n", "def gen(n):\n    yield from range(n + 1)\n"),
    "before_its_end": ("g = gen(2)\nassert next(g, 'done') == 0 and next(g, None) == 1 and next(g, None) is None",
                       "def gen(n):\n    yield from range(n)\n", "def gen(n):\n    yield from range(1, n + 1)\n"),
    "without_a_default": ("def test():\n    g = gen(1)\n    assert next(g) == 0\n    try:\n        next(g)\n"
                          "    except Exception:\n        return\n    raise AssertionError('no end')\ntest()",
                          "def gen(n):\n    yield from range(n)\n", "def gen(n):\n    yield from range(n + 1)\n"),
}


def test_next_with_a_default_ends_a_used_up_generator_as_in_python():
    """The sample's StopIteration crosses as an error, never as control flow (``EXCEPTIONS``), so
    ``next(g, 'done')`` of a right generator used up raised instead of giving ``'done'``: it
    scored 0.5. The tests' ``next`` gives the default where the sample's iterator really ended
    (``remote.tests_next``); without a default its end is still an error the tests catch."""
    assert_right_scores_1_and_wrong_0(NEXT_DEFAULTS)
