"""The tests' ``zip``/``map``/``filter``/``enumerate`` as classes, dict views and ``iter(g) is g``.

Why: the tests' builtins bind these four names to stand-ins (functions of ``pairing`` that catch
vacuous truths), so ``isinstance(r, (filter, map))`` raised TypeError (a function is no class),
``type(r) is map`` compared Python's ``map`` with the stand-in, and a right solution returning a
``filter`` object failed both, as did the tests' own ``isinstance(map(str, xs), map)``. A sample's
``d.keys()`` never equalled the tests' ``{'a': 1}.keys()`` (each side's ``__eq__`` declined), and
``iter(g) is g`` of a right generator was False (the tests iterate a reader of it). Each forging
case below is a wrong solution trying to pass through one of these: it scores 0."""

from __future__ import annotations

import pytest
from test_code_cells import score

pytestmark = pytest.mark.faults

RIGHT = {
    "filter": "def evens(xs):\n    return filter(lambda x: x % 2 == 0, xs)\n",
    "map": "def evens(xs):\n    return map(lambda x: x, [x for x in xs if x % 2 == 0])\n",
    "zip": "def evens(xs):\n    return zip([x for x in xs if x % 2 == 0])\n",
    "enumerate": "def evens(xs):\n    return enumerate([x for x in xs if x % 2 == 0])\n",
}
#: per kind: the tests' check of the class, then of the items
TESTS = {
    "filter": "r = evens([1, 2, 3, 4])\nassert isinstance(r, (filter, map, zip))\nassert list(r) == [2, 4]\n"
              "assert type(evens([2])) is filter and type(evens([2])) == filter\n"
              "assert issubclass(type(evens([2])), filter)\n",
    "map": "r = evens([1, 2, 3, 4])\nassert isinstance(r, map) and not isinstance(r, filter)\nassert list(r) == [2, 4]\n"
           "assert type(evens([2])) is map\nassert isinstance(evens([2]), type(map(str, [1])))\n",
    "zip": "r = evens([1, 2, 3, 4])\nassert isinstance(r, zip)\nassert list(r) == [(2,), (4,)]\n"
           "assert type(evens([2])) is zip\n",
    "enumerate": "r = evens([1, 2, 3, 4])\nassert isinstance(r, enumerate)\nassert list(r) == [(0, 2), (1, 4)]\n"
                 "assert type(evens([2])).__name__ == 'enumerate' and type(evens([2])) is enumerate\n",
}
WRONG_LIST = {
    "filter": "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
    "map": "def evens(xs):\n    return filter(lambda x: x % 2 == 0, xs)\n",
    "zip": "def evens(xs):\n    return [(x,) for x in xs if x % 2 == 0]\n",
    "enumerate": "def evens(xs):\n    return list(enumerate(x for x in xs if x % 2 == 0))\n",
}


@pytest.mark.parametrize("kind", list(RIGHT))
def test_a_right_iterator_object_passes_its_class_checks(kind):
    scores, metrics = score(TESTS[kind], [RIGHT[kind], WRONG_LIST[kind], ""])
    assert scores[0] == 1.0, scores
    assert scores[1] < 1.0 and scores[2] == 0.0, scores  # a list (or another class) fails its class checks
    assert metrics["unconsulted"] == 0


def test_the_tests_own_iterator_objects_are_of_their_classes():
    cell = ("assert isinstance(map(str, [1]), map) and type(map(str, [1])) is map\n"
            "assert isinstance(zip([1], [2]), zip) and isinstance(zip(iter([1]), (x for x in [2])), zip)\n"
            "assert isinstance(filter(None, [1]), filter) and isinstance(enumerate([1]), enumerate)\n"
            "assert issubclass(map, map) and not issubclass(filter, map) and isinstance(len, type(print))\n"
            "assert list(evens([1, 2])) == [2]\n")
    scores, _ = score(cell, [RIGHT["filter"], "def evens(xs):\n    return [1]\n"])
    assert scores == [1.0, 0.8]


def test_dict_views_compare_as_python_compares_them():
    cell = ("assert keys({'a': 1, 'b': 2}) == {'a': 0, 'b': 0}.keys()\nassert pairs({'a': 1}) == {'a': 1}.items()\n"
            "assert keys({'a': 1}) != {'b': 1}.keys()\n")
    right = "def keys(d):\n    return d.keys()\n\ndef pairs(d):\n    return d.items()\n"
    wrong = "def keys(d):\n    return {k: 0 for k in list(d)[:1]}.keys()\n\ndef pairs(d):\n    return {'a': 2}.items()\n"
    scores, _ = score(cell, [right, wrong])
    assert scores == [1.0, pytest.approx(1 / 3)]


def test_a_generator_is_its_own_iterator():
    cell = "g = gen(3)\nassert iter(g) is g\nassert next(g) == 0\nassert list(g) == [1, 2]\n"
    right = "def gen(n):\n    yield from range(n)\n"
    wrong = "def gen(n):\n    return list(range(n))\n"
    scores, _ = score(cell, [right, wrong])
    assert scores == [1.0, 0.0]


FORGED = {
    # a class of its own named like Python's passes the class check by its name alone, and no more
    "named_filter": ("r = evens([1, 2, 3, 4])\nassert isinstance(r, filter) and list(r) == [2, 4]\n",
                     "class filter:\n    def __init__(self, *a):\n        pass\n    def __iter__(self):\n"
                     "        return iter([2, 4, 6])\n    def __eq__(self, other):\n        return True\n"
                     "def evens(xs):\n    return filter()\n"),
    # an object equal to everything, claiming to be a dict_keys, against a view
    "eq_true_keys": ("assert keys({'a': 1}) == {'a': 1}.keys()\n",
                     "class K:\n    __class__ = type({}.keys())\n    def __eq__(self, other):\n        return True\n"
                     "    __hash__ = None\ndef keys(d):\n    return K()\n"),
    # a set-like class whose items are wrong, whatever its __eq__ says
    "set_like_keys": ("assert keys({'a': 1}) == {'a': 1}.keys()\n",
                      "import collections.abc\nclass K(collections.abc.Set):\n    def __contains__(self, x):\n"
                      "        return True\n    def __iter__(self):\n        return iter(['b'])\n    def __len__(self):\n"
                      "        return 1\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                      "def keys(d):\n    return K()\n"),
    # an iterator whose __iter__ answers another object: iter(g) is g must not hold
    "not_its_own_iterator": ("g = gen(3)\nassert iter(g) is g and list(g) == [0, 1, 2]\n",
                             "class G:\n    def __iter__(self):\n        return iter([0, 1, 2])\n"
                             "    def __next__(self):\n        return 0\ndef gen(n):\n    return G()\n"),
    # a solution shadowing the tests' builtins: they are never the sample's
    "shadowed_isinstance": ("r = evens([1, 2])\nassert isinstance(r, map)\nassert type(r) is map\n",
                            "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: map\n"
                            "isinstance = builtins.isinstance\ntype = builtins.type\ndef evens(xs):\n    return [2]\n"),
}


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_iterator_or_view_scores_0(case):
    tests, forged = FORGED[case]
    scores, _ = score(tests, [forged])
    assert scores == [0.0], scores


def test_a_numpy_array_is_an_ndarray_and_a_forged_one_gains_nothing_by_its_name():
    """A right array failed ``isinstance(r, np.ndarray)``; a class of the sample's named ``ndarray`` passes
    that check by its name alone, and its values are still compared as they are."""
    np = pytest.importorskip("numpy")
    assert np is not None
    cell = "import numpy as np\nr = f(3)\nassert isinstance(r, np.ndarray) and np.array_equal(r, [0, 2, 4])\n"
    right = "import numpy as np\ndef f(n):\n    return np.arange(n) * 2\n"
    forged = ("class ndarray(list):\n    def __eq__(self, other):\n        return True\n    def all(self):\n"
              "        return True\ndef f(n):\n    return ndarray([9, 9, 9])\n")
    scores, _ = score(cell, [right, forged, "def f(n):\n    return [0, 2, 4]\n"])
    assert scores == [1.0, 0.0, 0.0]
