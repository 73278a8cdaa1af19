"""``type(s) is Stack``, ``s.__class__.__name__`` and ``repr(p)`` of a solution's value: false zeros on main.

A value of the sample's is a stand-in (``Remote``) in the tests, so ``type(s)`` was ``Remote``:
``type(s) is Stack``, ``type(s) == Stack``, ``s.__class__ is Stack`` and ``type(s).__name__ ==
'Stack'`` failed a right solution, and ``repr(p)`` was the harness's ``<P in the sample>``. The
tests' ``type`` and a ``__class__`` they read now ask the sample for the value's real type (read
from ``type`` there: a ``__class__`` the object claims never answers) and give the stand-in of the
solution's name bound to it; ``repr`` gives the sample's own text, as a plain str
(``polyrl.sandbox.sample_types``). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_STACK = ("class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n        self.xs.append(x)\n"
          "class MinStack(Stack):\n    pass\n"
          "class P:\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n        return f'P({self.x})'\n"
          "def make():\n    return MinStack()\n")
_RIGHT = {
    "type_is": "s = Stack()\nassert type(s) is Stack\n",
    "type_eq_in_one_step": "assert type(Stack()) == Stack and type(make()) is MinStack and type(make()) != Stack\n",
    "type_name": "assert type(make()).__name__ == 'MinStack'\n",
    "class_is": "s = Stack()\ns.push(1)\nassert s.__class__ is Stack\n",
    "class_name": "assert make().__class__.__name__ == 'MinStack'\n",
    "unittest": ("import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n"
                 "        self.assertIs(type(make()), MinStack)\n        self.assertEqual(type(Stack()), Stack)\n"),
    "imported_then_called": "from solution import Stack\ns = Stack()\ns.push(1)\nassert type(s) is Stack\n",
    "imported_in_a_test": ("def test_it():\n    from solution import MinStack\n    s = make()\n    s.push(1)\n"
                           "    assert type(s) is MinStack and s.__class__ is MinStack\ntest_it()\n"),
    "repr": "assert repr(P(1)) == 'P(1)' and repr([1]) == '[1]'\n",
    #: the tests' own uses of ``type`` stay Python's
    "pythons_type": ("class M(type):\n    pass\nclass C(metaclass=M):\n    pass\nK = type('K', (), {'a': 1})\n"
                     "assert type(C) is M and isinstance(C, type) and issubclass(M, type) and K.a == 1\n"
                     "assert type(3) is int and type([]) == list and not isinstance(3, type)\n"
                     "assert Stack().xs == []\n"),
}
#: Wrong ``make``s: an object that is no Stack, claiming to be one. Each scores 0.
_FORGED = {
    "class_property": ("class Stack:\n    pass\nclass Fake:\n    @property\n    def __class__(self):\n        return Stack\n"
                       "def make():\n    return Fake()\n"),
    "metaclass_eq": ("class M(type):\n    def __eq__(cls, other):\n        return getattr(other, '__name__', '') in ('Stack', 'Fake')\n"
                     "    __hash__ = type.__hash__\n"
                     "class Stack(metaclass=M):\n    pass\nclass Fake(metaclass=M):\n    pass\ndef make():\n    return Fake()\n"),
    "renamed_class": ("class Stack:\n    pass\nclass Fake:\n    pass\nFake.__name__ = Fake.__qualname__ = 'Stack'\n"
                      "def make():\n    return Fake()\n"),
    "unnamed_class_of_that_name": ("class Stack:\n    pass\ndef make():\n    class Stack:\n        pass\n"
                                   "    return Stack()\n"),
    "plain_value": "class Stack(list):\n    pass\ndef make():\n    return [1]\n",
}
_CHECKS = ("assert type(make()) is Stack\n", "assert type(make()) == Stack\n", "assert make().__class__ is Stack\n",
           "assert make().__class__ == Stack\n")
#: A ``__repr__`` giving a str subclass equal to anything: scores 0.
_LYING_REPR = ("class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
               "class P:\n    def __repr__(self):\n        return S('zz')\n")


def test_type_and_class_of_a_solutions_value_are_its_class():
    """Each scored 0 on main (``type(s)`` was the harness's ``Remote``; ``repr`` its own text)."""
    assert _each_scored({name: (tests, _STACK) for name, tests in _RIGHT.items()}) == dict.fromkeys(_RIGHT, 1.0)


def test_a_value_claiming_a_class_it_is_not_of_scores_zero():
    cases = {f"{name}/{n}": (check, code) for name, code in _FORGED.items() for n, check in enumerate(_CHECKS)}
    cases["lying_repr"] = ("assert repr(P()) == 'P(1)'\n", _LYING_REPR)
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)


_GENERATORS = "def gen(n):\n    yield from range(n)\ndef make_adder(k):\n    return lambda x: x + k\n"
#: The tests' ``isinstance`` of a value that stays in the sample against Python's class of it
#: (KodCode's "write a generator" tests): each scored 0 on integ (the stand-in is no generator).
_PYTHONS_CLASSES = {
    "generator": "import types\ng = gen(3)\nassert isinstance(g, types.GeneratorType)\nassert list(g) == [0, 1, 2]\n",
    "abc_in_a_helper": ("from collections.abc import Generator, Iterator\ndef lazy(g):\n"
                        "    return isinstance(g, (Generator, Iterator))\nassert lazy(gen(2))\n"),
    "function": "import types\nassert isinstance(make_adder(2), types.FunctionType) and make_adder(2)(1) == 3\n",
}
#: Wrong ones: a list where a generator was asked, a class of its own named ``generator`` or
#: ``int`` (a name never makes an object one of Python's data types), a function for a generator.
_PYTHONS_FORGED = {
    "list": ("def gen(n):\n    return list(range(n))\n", "import types\nassert isinstance(gen(3), types.GeneratorType)\n"),
    "named_int": ("class int:\n    def __index__(self):\n        return 3\ndef gen(n):\n    return int()\n",
                  "assert isinstance(gen(3), (int, type(None)))\n"),
    "function": ("def gen(n):\n    return lambda: n\n", "import types\nassert isinstance(gen(3), types.GeneratorType)\n"),
}


def test_the_tests_isinstance_of_a_generator_or_function_of_the_samples_holds():
    assert _each_scored({n: (t, _GENERATORS) for n, t in _PYTHONS_CLASSES.items()}) == dict.fromkeys(_PYTHONS_CLASSES,
                                                                                                         1.0)


def test_a_value_posing_as_pythons_class_by_name_is_not_one():
    assert _each_scored({n: (t, c) for n, (c, t) in _PYTHONS_FORGED.items()}) == dict.fromkeys(_PYTHONS_FORGED, 0.0)
