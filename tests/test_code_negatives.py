"""Right answers that scored 0 and forged answers that must not pass: the sample's objects against the tests' numbers.

Each row is scored through the real reward path (``code_tests``: sandbox, harness, the forked copy
of the trainer), as ``tests/test_sandbox_sample_objects.py`` does. The rule under test: the tests'
values never reach the sample; an object of the sample's meets a number of the tests' only through
its own exact ``int()``/``float()``, asked once per request (``remote.Remote._plain_answer``), so an
object equal to everything, or one whose conversions count up, passes nothing a function returning
that number would not.
"""

from __future__ import annotations

import pytest
from test_sandbox_sample_objects import assert_right_scores_1_and_wrong_0
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

#: A number class of the solution's without ``__add__``: the task's ``add`` adds its values.
NUM_NO_ADD = ("class Num:\n    def __init__(self, v):\n        self.v = v\n"
              "    def __eq__(self, o):\n        return self.v == (o.v if isinstance(o, Num) else o)\n"
              "    def __hash__(self):\n        return hash(self.v)\n    def __int__(self):\n        return self.v\n"
              "def add(a, b):\n    return Num(a.v + b.v)\n")
#: A number class with orderings and operators that take ints, as a right solution writes it.
NUM = ("class Num:\n    def __init__(self, v):\n        self.v = v\n"
       "    def _o(self, o):\n        return o.v if isinstance(o, Num) else o\n"
       "    def __eq__(self, o):\n        return self.v == self._o(o)\n"
       "    def __lt__(self, o):\n        return self.v < self._o(o)\n"
       "    def __le__(self, o):\n        return self.v <= self._o(o)\n"
       "    def __gt__(self, o):\n        return self.v > self._o(o)\n"
       "    def __ge__(self, o):\n        return self.v >= self._o(o)\n"
       "    def __hash__(self):\n        return hash(self.v)\n    def __int__(self):\n        return self.v\n"
       "    def __float__(self):\n        return float(self.v)\n"
       "    def __add__(self, o):\n        return Num(self.v + self._o(o))\n    __radd__ = __add__\n"
       "    def __sub__(self, o):\n        return Num(self.v - self._o(o))\n"
       "    def __rsub__(self, o):\n        return Num(self._o(o) - self.v)\n"
       "def smaller(a, b):\n    return a if a.v <= b.v else b\n")
#: A fraction class whose operators take ints (``Fraction`` inside, so its float is exact for halves).
FRAC = ("from fractions import Fraction\nclass Frac:\n    def __init__(self, n, d=1):\n        self.f = Fraction(n, d)\n"
        "    def __eq__(self, o):\n        return self.f == (o.f if isinstance(o, Frac) else o)\n"
        "    def __hash__(self):\n        return hash(self.f)\n"
        "    def __add__(self, o):\n        r = self.f + (o.f if isinstance(o, Frac) else o)\n"
        "        return Frac(r.numerator, r.denominator)\n    __radd__ = __add__\n"
        "    def __sub__(self, o):\n        return float(self) - float(o)\n"
        "    def __float__(self):\n        return float(self.f)\n")
#: Objects equal to everything whose comparisons all say yes, with no conversion, a constant one,
#: one counting up at each call, and one hunting the sample's memory for the tests' numbers.
FORGED = {
    "no_conversion": "",
    "constant": "    def __int__(self):\n        return 7\n    def __float__(self):\n        return 7.0\n",
    "counting": "    def __int__(self):\n        N[0] += 1\n        return N[0]\n",
    "int_and_float_apart": "    def __int__(self):\n        return 3\n    def __float__(self):\n        return 7.5\n",
    "reading_memory": "    def __float__(self):\n        import gc\n"
                      "        fs = [o for o in gc.get_objects() if type(o) is float and 12 < o < 14]\n"
                      "        return fs[0] if fs else 0.0\n",
}
#: The forgery's class: every comparison and operator says yes or gives an object of its own.
LIAR = ("N = [9]\nclass Liar:\n    def __init__(self, *a):\n        pass\n    def __eq__(self, o):\n        return True\n"
        "    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    __hash__ = object.__hash__\n"
        "    def __add__(self, o):\n        return Liar()\n"
        "    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __add__\n")


def forged_scores(tests: list[str], solution_tail: str) -> dict[tuple[str, str], float]:
    """Each forgery of ``FORGED`` (``LIAR`` with its conversions) plus ``solution_tail`` against each
    row of ``tests``: the scores that are not 0, keyed (forgery, tests)."""
    names = sorted(FORGED)
    texts = [LIAR + FORGED[n] + solution_tail for n in names for _ in tests]
    rows = [{"prompt": "p", "tests": t} for _ in names for t in tests]
    got = score(texts, rows=rows).total
    keys = [(n, t) for n in names for t in tests]
    return {key: s for key, s in zip(keys, got) if s != 0.0}


def test_a_task_function_named_like_operator_add_takes_the_solutions_objects_against_data():
    """``assert add(Num(1), Num(2)) == 3`` where the solution defines ``add`` and a ``Num`` without
    ``__add__``: the tests got ``operator.add`` (a standard helper beside the solution's ``Num``),
    which raised TypeError, so a right solution scored 0. Everything on the call's side is the
    sample's now and the other side is data: what passes is what the solution's ``add`` answers
    (``operator.add`` where it defines none), met only through its own exact conversion. A wrong
    ``add`` and answers equal to everything still score 0."""
    table = {
        "int": ("assert add(Num(1), Num(2)) == 3", NUM_NO_ADD, NUM_NO_ADD.replace("a.v + b.v", "a.v * b.v")),
        "reflected_and_ne": ("assert 5 == add(Num(2), Num(3)) and add(Num(1), Num(1)) != 3", NUM_NO_ADD,
                             NUM_NO_ADD.replace("a.v + b.v", "a.v + b.v + 1")),
        # no add of its own, a Num with __add__: the trainer's operator.add, which adds by its __add__
        "no_add_of_its_own": ("assert add(Num(1), Num(2)) == 3", NUM.replace("def smaller", "def _smaller"),
                              NUM.replace("self.v + self._o(o)", "self.v * self._o(o)")),
    }
    assert_right_scores_1_and_wrong_0(table)
    tests = ["assert add(Num(1), Num(2)) == 3", "assert add(Num(1), Num(2)) == 12.5",
             "assert add(Num(1), Num(2)) in [4, 5, 6]", "x = add(Num(1), Num(2))\nassert x == 3 and x == 7.5"]
    assert forged_scores(tests, "def Num(v):\n    return Liar()\ndef add(a, b):\n    return Liar()\n") == {}


def test_the_samples_object_orders_against_the_tests_numbers_by_one_number():
    """``Num(3) < 5`` raised TypeError (only two of the sample's values compared), so right
    solutions scored 0. Its own exact number, asked once per request, is compared here now; an
    object whose every comparison says yes passes ``x < 5`` or ``x >= 5``, never both, and one
    without an ordering of its own raises as in Python."""
    table = {
        "lt_and_ge": ("assert Num(3) < 5 and Num(7) >= 5 and not (Num(7) < 5) and Num(5) <= 5", NUM,
                      NUM.replace("def __int__(self):\n        return self.v", "def __int__(self):\n        return 0")
                      .replace("return float(self.v)", "return 0.0")),
        "reflected": ("assert 5 > smaller(Num(3), Num(9)) and 2 <= smaller(Num(3), Num(9)) < 4.5", NUM,
                      NUM.replace("a if a.v <= b.v else b", "b if a.v <= b.v else a")),
        "sorted_with_ints": ("assert sorted([4, smaller(Num(3), Num(9)), 1]) == [1, 3, 4]", NUM,
                             NUM.replace("a if a.v <= b.v else b", "b if a.v <= b.v else a")),
        # no ordering of its own: TypeError, as in Python
        "no_order": ("import pytest\nwith pytest.raises(TypeError):\n    Num(3) < 5", NUM_NO_ADD, NUM),
    }
    assert_right_scores_1_and_wrong_0(table)
    tests = ["x = f()\nassert x < 5 and x >= 5", "x = f()\nassert x > 12.5 and x <= 12.5",
             "x = f()\nassert 5 > x and 5 <= x", "x = f()\nassert x < 5 and x == 7.5"]
    assert forged_scores(tests, "def f():\n    return Liar()\n") == {}


@pytest.mark.slow
def test_the_samples_object_combines_with_and_equals_the_tests_numbers_by_its_own_number():
    """``Frac(1, 2) + 1``, ``1 + Frac(1, 2)``, ``sum(fracs)`` (which starts at the int 0) and
    ``Num(1) == True`` raised TypeError or were False, so right solutions scored 0. The tests'
    number never reaches the sample: the sum's 0 is the object itself, and otherwise its own
    exact number is combined here. An object whose ``__sub__`` gives 0, or that is equal to
    everything, still fails ``abs(area(2) - 12.566) < 1e-3``."""
    wrong = FRAC.replace("self.f = Fraction(n, d)", "self.f = Fraction(n, d + 1)")
    table = {
        "plus_int": ("assert Frac(1, 2) + 1 == Frac(3, 2) and Frac(1, 2) + 1 == 1.5", FRAC, wrong),
        "int_plus": ("assert 1 + Frac(1, 2) == Frac(3, 2) and 2 - Num(1) == 1 and Num(5) - 2 == 3",
                     FRAC + NUM, wrong + NUM),
        "sum": ("assert sum([Frac(1, 3), Frac(1, 3), Frac(1, 3)]) == Frac(1, 1)\n"
                "assert sum([Frac(1, 2), Frac(1, 4)]) == 0.75", FRAC, wrong),
        "bool": ("assert Num(1) == True and Num(0) == False and Num(2) != True", NUM,
                 NUM.replace("def __int__(self):\n        return self.v", "def __int__(self):\n        return 1")
                 .replace("return float(self.v)", "return 1.0").replace("return self.v == self._o(o)", "return True")),
        "isclose_of_a_difference": ("assert abs(area(2) - 12.566) < 1e-3", FRAC + "def area(r):\n    return Frac(12566, 1000)\n",
                                    FRAC + "def area(r):\n    return Frac(12, 1)\n"),
    }
    assert_right_scores_1_and_wrong_0(table)
    tests = ["assert abs(area(2) - 12.566) < 1e-3", "assert abs(12.566 - area(2)) < 1e-3", "assert area(2) + 1 == 13.566",
             "assert sum([area(1), area(1)]) == 6.283", "assert area(2) * 2 == 25.132", "assert area(2) == True"]
    assert forged_scores(tests, "def area(r):\n    return Liar()\n") == {}


def test_a_constant_get_answers_only_where_the_tests_use_the_object_as_one():
    """An object of the sample's whose ``get`` gave 1 for any key passed ``all(freq(s).get(c) == 1
    for c in s)``: ``get`` is one of the queries (``remote.DATA_QUERIES``) that an answer the
    tests expect as data never answers with arguments; a dict the sample returns answers it here,
    and so does an object the tests use as one (``cache.put(1, 1); cache.get(1)``)."""
    freq = "def freq(s):\n    d = {}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d\n"
    lru = ("class LRUCache:\n    def __init__(self, n):\n        self.n, self.d = n, {}\n"
           "    def put(self, k, v):\n        self.d.pop(k, None)\n        self.d[k] = v\n"
           "        if len(self.d) > self.n:\n            self.d.pop(next(iter(self.d)))\n"
           "    def get(self, k):\n        return self.d.get(k, -1)\n")
    table = {
        "dict": ("assert all(freq('abc').get(c) == 1 for c in 'abc') and freq('aab').get('a') == 2", freq,
                 freq.replace("d.get(c, 0) + 1", "1")),
        "object": ("cache = LRUCache(1)\ncache.put(1, 1)\none = cache.get(1)\ncache.put(2, 2)\n"
                   "assert one == 1 and cache.get(1) == -1 and cache.get(2) == 2", lru, lru.replace("> self.n", "> self.n + 1")),
    }
    assert_right_scores_1_and_wrong_0(table)
    constant = ("class Liar:\n    def get(self, k, default=None):\n        return 1\n"
                "def freq(s):\n    return Liar()\n")
    rows = [{"prompt": "p", "tests": t} for t in ("assert all(freq('abc').get(c) == 1 for c in 'abc')",
                                                  "assert freq('abc').get('a') == 1")]
    assert list(score([constant] * len(rows), rows=rows).total) == [0.0] * len(rows)


def test_an_in_place_function_returning_a_value_changes_the_tests_list():
    """LeetCode 26: ``k = removeDuplicates(nums)`` then ``nums[:k] == [1, 2]``: the tests' list took
    what the solution did to its copy only after a call returning None, so a right solution
    scored 0. The lists it changed come back after any call now, where nothing shrinks: one
    emptied or shortened stays as it was, so a loop over it is never vacuous."""
    lc26 = ("def removeDuplicates(nums):\n    k = 0\n    for x in nums:\n"
            "        if k == 0 or nums[k - 1] != x:\n            nums[k] = x\n            k += 1\n    return k\n")
    tests = ("nums = [0, 0, 1, 1, 1, 2, 2, 3, 3, 4]\nk = removeDuplicates(nums)\n"
             "assert k == 5 and nums[:k] == [0, 1, 2, 3, 4]")
    table = {
        "lc26": (tests, lc26, lc26.replace("nums[k] = x\n", "")),
        "kwargs": ("xs = [3, 1, 2]\nassert sort_count(xs=xs) == 3 and xs == [1, 2, 3]",
                   "def sort_count(xs):\n    xs.sort()\n    return len(xs)\n",
                   "def sort_count(xs):\n    return len(sorted(xs))\n"),
    }
    assert_right_scores_1_and_wrong_0(table)
    # a list emptied in place stays as the tests had it: the loop over it is not vacuous
    cleared = "def removeDuplicates(nums):\n    nums.clear()\n    return 5\n"
    rows = [{"prompt": "p", "tests": "nums = [0, 0, 1]\nk = removeDuplicates(nums)\n"
                                     "assert all(a < b for a, b in zip(nums, nums[1:]))"}]
    assert list(score([cleared], rows=rows).total) == [0.0]
