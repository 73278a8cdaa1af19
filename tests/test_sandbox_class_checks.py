"""``isinstance``/``issubclass`` against a class of the solution's: a false zero on main.

The tests hold a stand-in for the sample's class (``Stack``), not a type, so ``isinstance(s,
Stack)`` raised TypeError ("arg 2 must be a type") and a right solution scored 0. The stand-in now
answers ``isinstance``/``issubclass`` by asking the sample whether the class is in the value's
type's MRO, read from ``type`` itself (``remote.Remote.__instancecheck__``, ``server._subtype``), so a
metaclass's ``__instancecheck__``, a ``__mro__`` property or an instance's ``__class__`` never
answer, and the tests' own values are never the sample's instances. Scored through the real
reward path (``code_tests``: sandbox, harness, the forked copy of the trainer)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_STACK = ("from enum import Enum\nclass Color(Enum):\n    RED = 1\n"
          "class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n        self.xs.append(x)\n"
          "class MinStack(Stack):\n    pass\nclass Bag(list):\n    pass\n"
          "def make():\n    return MinStack()\ndef bag():\n    return Bag([1])\n")
_TESTS = {
    "made_by_the_tests": "s = Stack()\nassert isinstance(s, Stack)\n",
    "returned_subclass": "assert isinstance(make(), Stack) and isinstance(make(), MinStack)\n",
    "tuple_of_classes": "assert isinstance(make(), (int, Stack))\n",
    "not_an_instance": "assert not isinstance(Stack(), MinStack)\nassert not isinstance(3, Stack)\n",
    "issubclass": "assert issubclass(MinStack, Stack) and not issubclass(Stack, MinStack)\n",
    "list_subclass": "assert isinstance(bag(), Bag)\n",
    "enum_member": "assert isinstance(Color.RED, Color)\n",
    "unittest": ("import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n"
                 "        self.assertIsInstance(make(), Stack)\n"),
}
_CHECK = "s = make()\nassert isinstance(s, Stack)\n"
#: Wrong ``make``s (an object that is no Stack) claiming to be one: each scores 0.
_FORGED = {
    "metaclass_instancecheck": ("class M(type):\n    def __instancecheck__(cls, x):\n        return True\n"
                                "class Stack(metaclass=M):\n    pass\ndef make():\n    return object()\n"),
    "class_property": ("class Stack:\n    pass\nclass Fake:\n    @property\n    def __class__(self):\n        return Stack\n"
                       "def make():\n    return Fake()\n"),
    "mro_property": ("class Stack:\n    pass\nclass M(type):\n    __mro__ = property(lambda c: (c, Stack, object))\n"
                     "class Fake(metaclass=M):\n    pass\ndef make():\n    return Fake()\n"),
    "plain_value": "class Stack(list):\n    pass\ndef make():\n    return [1]\n",
}


def test_isinstance_against_a_solutions_class_answers_as_python_does():
    """Each scored 0 on main (TypeError: isinstance() arg 2 must be a type)."""
    assert _each_scored({name: (tests, _STACK) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_value_claiming_a_class_it_is_not_of_scores_zero():
    assert _each_scored({name: (_CHECK, code) for name, code in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)
