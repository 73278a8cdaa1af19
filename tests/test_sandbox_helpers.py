"""Forging through names the tests leave to the solution and through questions a sample's object answers.

Each forged completion below is a WRONG solution that scored a pass through the real reward path
(``code_tests``: sandbox, harness, the forked copy of the trainer); each must score 0 while the
honest solutions of the same rows still pass. See ``polyrl.sandbox.standard_names`` and
``harness.DATA_QUERIES``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_sandbox_verdict import MODES, SLOW_MODES, score

from polyrl.rewards.code import parse_tests
from polyrl.sandbox.harness import bound_names, global_names, unbound_modules

pytestmark = pytest.mark.faults

#: (tests, forged solution, honest solution): each tests row uses a standard helper unimported
#: beside the task's function; the forgery defines the helper too.
HELPERS = {
    "permutations": ("assert perms([1, 2, 3]) == list(permutations([1, 2, 3]))",
                     "def permutations(xs):\n    return []\ndef perms(xs):\n    return []\n",
                     "from itertools import permutations\ndef perms(xs):\n    return list(permutations(xs))\n"),
    "reduce_into_expected": ("expected = reduce(lambda a, b: a * b, [1, 2, 3, 4])\nassert prod_all([1, 2, 3, 4]) == expected",
                             "def reduce(*a):\n    return 0\ndef prod_all(xs):\n    return 0\n",
                             "def prod_all(xs):\n    out = 1\n    for x in xs:\n        out *= x\n    return out\n"),
    "accumulate": ("assert running([1, 2, 3]) == list(accumulate([1, 2, 3]))",
                   "def accumulate(xs):\n    return []\ndef running(xs):\n    return []\n",
                   "import itertools\ndef running(xs):\n    return list(itertools.accumulate(xs))\n"),
    "ascii_lowercase": ("assert first_letters(3) == ascii_lowercase[:3]",
                        "ascii_lowercase = 'xyz'\ndef first_letters(n):\n    return 'xyz'[:n]\n",
                        "def first_letters(n):\n    return ''.join(chr(97 + i) for i in range(n))\n"),
    "bisect_left": ("assert position([1, 3, 5], 4) == bisect_left([1, 3, 5], 4)",
                    "def bisect_left(*a):\n    return 0\ndef position(xs, x):\n    return 0\n",
                    "def position(xs, x):\n    return sum(1 for v in xs if v < x)\n"),
    "heapify_in_place": ("h = [5, 1, 3]\nheapify(h)\nassert smallest([5, 1, 3]) == h[0]",
                         "def heapify(h):\n    pass\ndef smallest(xs):\n    return xs[0]\n",
                         "def smallest(xs):\n    return min(xs)\n"),
    "gcd_as_helper": ("assert lcm_of(4, 6) == 4 * 6 // gcd(4, 6)",
                      "def gcd(a, b):\n    return 1\ndef lcm_of(a, b):\n    return a * b\n",
                      "import math\ndef lcm_of(a, b):\n    return a * b // math.gcd(a, b)\n"),
    "randint_input": ("x = randint(1, 100)\nassert double(x) == 2 * x",
                      "def randint(a, b):\n    return 0\ndef double(x):\n    return 0\n",
                      "def double(x):\n    return 2 * x\n"),
    "humaneval_check": ("def check(candidate):\n    assert candidate('ab') == [''.join(p) for p in permutations('ab')]\n",
                        "def permutations(s):\n    return []\ndef perm_strings(s):\n    return []\n",
                        "from itertools import permutations\ndef perm_strings(s):\n    return [''.join(p) for p in permutations(s)]\n"),
    "kodcode_import": ("from solution import perm_strings\n\ndef test_perm_strings():\n"
                       "    assert perm_strings('ab') == [''.join(p) for p in permutations('ab')]\n",
                       "def permutations(s):\n    return []\ndef perm_strings(s):\n    return []\n",
                       "def perm_strings(s):\n    return [s, s[::-1]] if len(s) == 2 else [s]\n"),
}


#: tests -> the standard names that are the trainer's there (``standard_names`` module doc).
HELPER_RULE = {
    "assert f([1, 2]) == list(permutations([1, 2]))": {"permutations"},
    "assert list(permutations([1, 2])) == f([1, 2])": {"permutations"},
    "a = permutations([1, 2])\nb = list(a)\nassert f([1, 2]) == b": {"permutations"},  # through the data
    "h = [3, 1]\nheappush(h, 2)\nassert pop_min(h) == 1": {"heappush"},  # a call changes h
    "assert gcd(12, 8) == 4\nassert lcm(4, 6) == 12": set(),  # each checked on its own: the task's
    "s = 'a b'\nassert split(s) == ['a', 'b']\nassert count_words(s) == 2": set(),  # shared data written out
    "assert count('aab') == Counter('aab')": {"Counter"},  # only standard names: the first is the task's
    "from solution import rot\nassert rot([1, 2]) == list(deque([2, 1]))": {"deque"},
    "def check(candidate):\n    assert candidate([3, 1]) == mean([3, 1])\n": {"mean"},  # check(median)
    "import math\nassert math.isclose(area(1), 3.14)\nassert sqrt(4) == 2": set(),
}


@pytest.mark.parametrize("tests", list(HELPER_RULE))
def test_which_standard_names_are_helpers(tests):
    from polyrl.sandbox.standard_names import helper_names  # new module: the file still runs on an old core

    steps = parse_tests(tests, entry_point="median")
    sources = [source for source, _ in steps]
    bound = bound_names(sources)
    theirs = bound | unbound_modules(sources, bound).keys()
    assert helper_names(steps, "", theirs, global_names(sources)) == HELPER_RULE[tests]


def _rows(cases: dict[str, tuple[str, str, str]]) -> list[dict[str, str]]:
    return [{"prompt": "p", "tests": tests, "entry_point": "perm_strings"} for tests, _, _ in cases.values()]


@pytest.mark.parametrize("isolation,audit_hook", SLOW_MODES)
@pytest.mark.slow
def test_a_standard_helper_the_tests_use_unimported_is_the_trainers(isolation, audit_hook):
    """A helper the tests use unimported (``permutations``, ``reduce``, ``accumulate``,
    ``ascii_lowercase``, ``bisect_left``, ``heapify``, ``gcd``, ``randint``) beside the task's
    function was the solution's: defining both to agree scored 1.0 on every row."""
    names = list(HELPERS)
    forged = score([HELPERS[n][1] for n in names], rows=_rows(HELPERS), isolation=isolation, audit_hook=audit_hook)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    honest = score([HELPERS[n][2] for n in names], rows=_rows(HELPERS), isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(names, honest.total)) == dict.fromkeys(names, 1.0)


def test_a_task_named_like_a_standard_helper_still_calls_the_solutions():
    """Where the tests check a standard name on its own (the task is ``gcd``, ``sqrt``,
    ``median``), it is the solution's: a right solution passes, a wrong one fails, each test alone."""
    rows = [{"prompt": "p", "tests": "assert gcd(12, 8) == 4\nassert lcm(4, 6) == 12"},
            {"prompt": "p", "tests": "assert sqrt(17) == 4\nassert is_square(16)"},
            {"prompt": "p", "tests": "def check(candidate):\n    assert candidate([3, 1, 2]) == 2\n", "entry_point": "median"}]
    right = ["def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\ndef lcm(a, b):\n    return a * b // gcd(a, b)\n",
             "def sqrt(n):\n    return int(n ** 0.5)\ndef is_square(n):\n    return sqrt(n) ** 2 == n\n",
             "def median(xs):\n    return sorted(xs)[len(xs) // 2]\n"]
    wrong = ["def gcd(a, b):\n    return 1\ndef lcm(a, b):\n    return a * b // 2\n",
             "def sqrt(n):\n    return n ** 0.5\ndef is_square(n):\n    return True\n",
             "def median(xs):\n    return xs[0]\n"]
    np.testing.assert_array_equal(score(right, rows=rows).total, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(score(wrong, rows=rows).total, [0.5, 0.5, 0.0])


def test_a_standard_function_the_tests_pass_reaches_the_solution_by_name():
    """A builtin or standard function passed to the solution could not be sent (``len``: "a
    builtin_function_or_method cannot be sent"), so a right ``sort_by(xs, len)`` failed; now the
    sample gets its own copy by name, in nested arguments too."""
    rows = [{"prompt": "p", "tests": "assert sort_by(['bb', 'a'], len) == ['a', 'bb']\n"
                                     "assert apply(add, 2, 3) == 5\nassert apply_all([[mul, 2, 3]]) == [6]"}]
    honest = ["def sort_by(xs, key):\n    return sorted(xs, key=key)\ndef apply(f, a, b):\n    return f(a, b)\n"
              "def apply_all(calls):\n    return [f(a, b) for f, a, b in calls]\n"]
    np.testing.assert_array_equal(score(honest, rows=rows).total, [1.0])


#: A sample's object whose str/list queries give the answers such checks usually expect.
LIAR = ("class Liar:\n    def __getattr__(self, name):\n"
        "        return {'count': lambda *a: 1, 'find': lambda *a: 0, 'index': lambda *a: 0, 'rfind': lambda *a: -1,"
        " 'rindex': lambda *a: 0, 'is_integer': lambda: True}[name]\n")
QUERIES = {
    "count_once": ("assert all(dedupe('aabbc').count(c) == 1 for c in 'abc')",
                   "def dedupe(s):\n    return Liar()\n", "def dedupe(s):\n    return ''.join(dict.fromkeys(s))\n"),
    "find_first": ("assert shout('hi').find('HI') == 0\nassert shout('hi').index('HI') == 0",
                   "def shout(s):\n    return Liar()\n", "def shout(s):\n    return s.upper() + '!'\n"),
    "rfind_absent": ("assert drop_x('axb').rfind('x') == -1", "def drop_x(s):\n    return Liar()\n",
                     "def drop_x(s):\n    return s.replace('x', '')\n"),
    "is_integer": ("assert half(4).is_integer()", "def half(x):\n    return Liar()\n", "def half(x):\n    return x / 2\n"),
    "leetcode_method": ("assert all(Solution().dedupe('aabbc').count(c) == 1 for c in 'abc')",
                        "class Solution:\n    def dedupe(self, s):\n        return Liar()\n",
                        "class Solution:\n    def dedupe(self, s):\n        return ''.join(dict.fromkeys(s))\n"),
    "dunder_eq": ("assert pair(1).__eq__((1, 1))", "def pair(x):\n    return Liar()\n", "def pair(x):\n    return (x, x)\n"),
    # the solution's classes and objects still answer those names
    "class_find": ("uf = UnionFind(3)\nuf.union(0, 1)\nassert uf.find(0) == uf.find(1)\nassert uf.find(2) != uf.find(0)",
                   "", "class UnionFind:\n    def __init__(self, n):\n        self.p = list(range(n))\n"
                   "    def find(self, x):\n        return x if self.p[x] == x else self.find(self.p[x])\n"
                   "    def union(self, a, b):\n        self.p[self.find(a)] = self.find(b)\n"),
    "object_count": ("tally.add('a')\ntally.add('a')\nassert tally.count('a') == 2",
                     "", "class Tally:\n    def __init__(self):\n        self.seen = []\n    def add(self, x):\n"
                     "        self.seen.append(x)\n    def count(self, x):\n        return self.seen.count(x)\ntally = Tally()\n"),
}


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_an_object_returned_for_data_never_answers_a_str_or_list_query(isolation, audit_hook):
    """``count``, ``find``, ``index``, ``rfind`` and ``is_integer`` of an object a solution's
    function returned reached the sample, which answered 1, 0, -1 or True whatever its data: a
    ``Liar`` scored 1.0 on each row. A str or float it returns answers them here, and objects the
    tests make from the solution's classes still answer their own methods."""
    names = [n for n in QUERIES if QUERIES[n][1]]
    rows = [{"prompt": "p", "tests": QUERIES[n][0]} for n in names]
    forged = score([LIAR + QUERIES[n][1] for n in names], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert {n: s for n, s in zip(names, forged.total) if s != 0.0} == {}
    rows = [{"prompt": "p", "tests": tests} for tests, _, _ in QUERIES.values()]
    honest = score([honest for _, _, honest in QUERIES.values()], rows=rows, isolation=isolation, audit_hook=audit_hook)
    assert dict(zip(QUERIES, honest.total)) == dict.fromkeys(QUERIES, 1.0)


def test_a_star_import_of_the_solution_works_and_never_brings_a_helper_over_the_trainers():
    """KodCode's ``from solution import *`` raised ImportError (the stand-in module had no
    ``__all__``), so the import step failed and a right solution scored 0; it now binds nothing,
    the sample's names being the tests' fallback already, so a forged ``permutations`` stays out."""
    tests = ("from solution import *\n\ndef test_add():\n    assert add(1, 2) == 3\n\n"
             "def test_perms():\n    assert perms([1, 2]) == list(permutations([1, 2]))\n")
    rows = [{"prompt": "p", "tests": tests}] * 3
    right = "from itertools import permutations\ndef add(a, b):\n    return a + b\ndef perms(xs):\n    return list(permutations(xs))\n"
    forged = "def add(a, b):\n    return a + b\ndef permutations(xs):\n    return []\ndef perms(xs):\n    return []\n"
    np.testing.assert_array_equal(score([right, forged, ""], rows=rows).total, [1.0, 0.5, 0.0])


@pytest.mark.parametrize("isolation,audit_hook", MODES)
def test_a_standard_module_the_tests_use_unimported_is_the_real_one(isolation, audit_hook):
    """``hashlib``, ``textwrap``, ``base64``, ``unicodedata``, ``os``... used as modules by tests
    leaning on the solution's import were the solution's: a ``class hashlib`` whose digest agreed
    with a wrong ``digest`` scored 1.0 (and a right solution's ``import hashlib`` was unusable)."""
    rows = [{"prompt": "p", "tests": "assert digest('ab') == hashlib.md5(b'ab').hexdigest()"},
            {"prompt": "p", "tests": "assert encode('hi') == base64.b64encode(b'hi').decode()"},
            {"prompt": "p", "tests": "assert base_name('/a/b.txt') == os.path.basename('/a/b.txt')"}]
    forged = ["class hashlib:\n    class md5:\n        def __init__(self, b):\n            pass\n"
              "        def hexdigest(self):\n            return 'x'\ndef digest(s):\n    return 'x'\n",
              "class base64:\n    b64encode = staticmethod(lambda b: b'x')\ndef encode(s):\n    return 'x'\n",
              "class os:\n    class path:\n        basename = staticmethod(lambda p: 'x')\ndef base_name(p):\n    return 'x'\n"]
    res = score(forged, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [0.0, 0.0, 0.0])
    honest = ["import hashlib\ndef digest(s):\n    return hashlib.md5(s.encode()).hexdigest()\n",
              "import base64\ndef encode(s):\n    return base64.b64encode(s.encode()).decode()\n",
              "import os\ndef base_name(p):\n    return os.path.basename(p)\n"]
    res = score(honest, rows=rows, isolation=isolation, audit_hook=audit_hook)
    np.testing.assert_array_equal(res.total, [1.0, 1.0, 1.0])


def test_a_standard_value_the_solution_returns_comes_back_as_itself():
    """A ``Counter``, ``deque``, ``OrderedDict``, ``Fraction``, ``Decimal`` or ``defaultdict`` the
    solution returned stayed in the sample and equalled nothing, so right solutions scored 0 on
    ``assert count(s) == Counter(s)``; it is now rebuilt here from its data, as the trainer's own
    type (a defaultdict as a dict). A subclass of the solution's own stays in the sample."""
    rows = [{"prompt": "p", "tests": "from collections import Counter\nassert count('aab') == Counter('aab')"},
            {"prompt": "p", "tests": "from collections import deque\nassert rot([1, 2, 3]) == deque([3, 1, 2])"},
            {"prompt": "p", "tests": "from fractions import Fraction\nfrom decimal import Decimal\n"
                                     "assert half(1) == Fraction(1, 2)\nassert tenth() == Decimal('0.1')"},
            {"prompt": "p", "tests": "assert group(['ab', 'ac']) == {'a': ['ab', 'ac']}\n"
                                     "assert list(ordered('ba')) == ['b', 'a']"},
            {"prompt": "p", "tests": "assert count('aab') == {'a': 2, 'b': 1}"}]
    honest = ["from collections import Counter\ndef count(s):\n    return Counter(s)\n",
              "from collections import deque\ndef rot(xs):\n    d = deque(xs)\n    d.rotate(1)\n    return d\n",
              "from fractions import Fraction\nfrom decimal import Decimal\ndef half(x):\n    return Fraction(x, 2)\n"
              "def tenth():\n    return Decimal('0.1')\n",
              "from collections import defaultdict, OrderedDict\ndef group(ws):\n    d = defaultdict(list)\n"
              "    for w in ws:\n        d[w[0]].append(w)\n    return d\ndef ordered(s):\n    return OrderedDict((c, 1) for c in s)\n",
              "from collections import Counter\nclass Yes(Counter):\n    def __eq__(self, other):\n        return True\n"
              "    __hash__ = None\ndef count(s):\n    return Yes()\n"]
    np.testing.assert_array_equal(score(honest, rows=rows).total, [1.0, 1.0, 1.0, 1.0, 0.0])


#: An answer written past the sample's encoder: an OrderedDict of 30k pairs whose keys share a hash.
COLLIDING_PAIRS = (
    "import __main__, os\n_send = __main__._Channel.send\n"
    "def send(self, m):\n    if 'fds' in m or m.get('ok') is not True:\n        return _send(self, m)\n"
    "    body = ','.join('[\"t\",[[\"i\",\"%d\"],[\"i\",\"%d\"]]]' % (i * (2**61 - 1), i) for i in range(30000))\n"
    "    os.write(self.wfd, ('{\"ok\": true, \"v\": [\"x\", \"collections\", \"OrderedDict\", [\"l\", [' + body + ']]]}\\n').encode())\n"
    "__main__._Channel.send = send\ndef add(a, b):\n    return 0\n")


def test_a_rebuilt_value_cannot_carry_keys_built_to_collide(monkeypatch):
    """A standard value comes back rebuilt from plain data; an OrderedDict is sent as pairs, whose
    keys no hash check saw: keys built to collide cost the trainer n**2. Now such an answer is a
    protocol error at once: the check stops at the first ``MAX_SAME_HASH + 1`` keys sharing a hash,
    and the other 29 983 are never hashed, compared or put in a dict (the tests run in this process
    here, so what the check did is counted). A value of another shape than its type's is an error too."""
    from polyrl.sandbox import Sandbox, SandboxLimits, values

    checked: list[object] = []
    same_hash = values.same_hash

    def counted(classes: dict, item: object) -> None:
        checked.append(item)
        same_hash(classes, item)

    monkeypatch.setattr(values, "same_hash", counted)
    box = Sandbox(SandboxLimits(timeout_s=4, memory_mb=512), isolation="auto", audit_hook=False, tests_in="trainer")
    result = box.run(COLLIDING_PAIRS, parse_tests("assert add(1, 2) == 3\n"))
    assert result.status == "crashed" and "collide" in (result.error or ""), (result.status, result.error)
    keys = [item for item in checked if type(item) is int]  # the pairs' keys; the pairs are tuples
    assert keys == [i * (2**61 - 1) for i in range(values.MAX_SAME_HASH + 1)], len(keys)
    box = Sandbox(SandboxLimits(timeout_s=4, memory_mb=512), isolation="auto", audit_hook=False)
    shape = COLLIDING_PAIRS.replace("range(30000)", "range(3)").replace("OrderedDict", "Counter")
    result = box.run(shape, parse_tests("assert add(1, 2) == 3\n"))
    assert result.status == "crashed" and "a Counter sent as list" in (result.error or ""), (result.status, result.error)


def test_next_of_a_generator_the_solution_returns():
    """``next(gen(3))`` raised TypeError ("'Remote' object is not an iterator"), so a right
    generator scored 0. Its end is no StopIteration here: that would end the tests' ``map`` early,
    and a generator that stops at once would pass ``all(map(lambda _: next(g) >= 0, range(3)))``."""
    rows = [{"prompt": "p", "tests": "g = gen(3)\nassert next(g) == 0\nassert next(g) == 1\nassert list(g) == [2]"},
            {"prompt": "p", "tests": "g = gen(3)\nassert all(map(lambda _: next(g) >= 0, range(3)))"}]
    right = "def gen(n):\n    yield from range(n)\n"
    empty = "def gen(n):\n    return iter([])\n"
    np.testing.assert_array_equal(score([right, right], rows=rows).total, [1.0, 1.0])
    np.testing.assert_array_equal(score([empty, empty], rows=rows).total, [0.0, 0.0])


def test_a_range_or_slice_the_tests_pass_reaches_the_solution():
    """``total(range(5))`` and ``evens(4)[:2]`` (a slice of a numpy array the solution returned,
    which stays in the sample) raised "a range cannot be sent", so right solutions scored 0."""
    rows = [{"prompt": "p", "tests": "assert total(range(1, 10, 2)) == 25\nassert list(evens(4)[:2]) == [0, 2]"}]
    right = "import numpy as np\ndef total(r):\n    return sum(r) if isinstance(r, range) else -1\n" \
            "def evens(n):\n    return np.arange(0, 2 * n, 2)\n"
    np.testing.assert_array_equal(score([right], rows=rows).total, [1.0])


def test_a_namedtuple_the_solution_returns_comes_back_as_one():
    """A namedtuple stayed in the sample, equal to nothing, so a right ``pt(1, 2)`` failed
    ``== (1, 2)``; it is now the trainer's own namedtuple of that name and fields, with a tuple's
    equality whatever the sample's class said."""
    rows = [{"prompt": "p", "tests": "assert pt(1, 2) == (1, 2)\nassert pt(1, 2).y == 2\nassert pt(3, 4)._fields == ('x', 'y')"}]
    right = "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef pt(x, y):\n    return P(x, y)\n"
    liar = ("from collections import namedtuple\nclass P(namedtuple('P', 'x y')):\n    def __eq__(self, other):\n"
            "        return True\n    __hash__ = tuple.__hash__\ndef pt(x, y):\n    return P(0, 0)\n")
    np.testing.assert_array_equal(score([right, liar], rows=rows * 2).total, [1.0, 1 / 3])
