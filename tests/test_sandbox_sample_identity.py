"""``Color(1) is Color.RED`` and ``get() is get()`` of a solution's values: false zeros on integ.

Every reach of a sample's value is a stand-in of its own in the tests, so ``is`` between two
reaches of one object (an Enum member by value, by name, returned by a function; a singleton; a
method returning ``self``) was False and a right solution scored 0. The sample's server now names
the first handle it gave an object again, every request goes to that handle, and the tests' ``is``
of two non-literal operands holds for two stand-ins of one handle (``polyrl.sandbox.sample_identity``).
Scored through the real reward path (``code_tests``), all samples of a test in one reward call."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_ENUM = ("from enum import Enum\nclass Color(Enum):\n    RED = 1\n    GREEN = 2\ndef first():\n    return Color.RED\n"
         "class Config:\n    _it = None\n    @classmethod\n    def get(cls):\n        if cls._it is None:\n"
         "            cls._it = cls()\n        return cls._it\n"
         "class Stack:\n    def __init__(self):\n        self.xs = []\n    def push(self, x):\n        self.xs.append(x)\n"
         "        return self\n"
         "def make(_kinds=[type('Hidden', (), {})]):\n    return _kinds[0]()\n")
#: Each scored 0 on integ.
_RIGHT = {
    "by_value": "assert Color(1) is Color.RED\n",
    "by_name": "assert Color['RED'] is Color.RED\n",
    "returned": "assert first() is Color.RED and first() is first()\n",
    "kept_then_compared": "c = Color(2)\nassert c is Color.GREEN and c is not Color.RED\n",
    "looped": "assert [c for c in Color][0] is Color.RED and list(Color)[1] is Color.GREEN\n",
    "in_their_helper": "def check(a, b):\n    assert a is b\ncheck(Color(1), Color.RED)\n",
    "singleton": "assert Config.get() is Config.get()\n",
    "fluent": "s = Stack()\nassert s.push(1) is s and s.push(2).push(3) is s\n",
    "unnamed_class": "assert type(make()) is type(make())\n",
    "still_pythons": "a = [1]\nb = [1]\nassert a is not b and a is a and (None is None) and Color.RED is not None\n",
}
#: A ``Color`` of its own whose every call makes a new object: wrong, and scores 0.
_NOT_ENUM = ("class Color:\n    def __init__(self, value):\n        self.value = value\n"
             "Color.RED = Color(1)\nColor.GREEN = Color(2)\n")
#: The same wrong ``Color`` with a server claiming objects are ones they are not (``out`` patched):
#: every Color is the first one it sent, each new handle the one before it, a first handle it has
#: not given yet. Each scores 0: a claim sends every later request to the object claimed.
_CLAIMS = {
    "every_color_the_first": ("firsts = {}\ndef out(self, v):\n    r = _out(self, v)\n"
                              "    if type(r) is list and r[:1] == ['r'] and r[3] == 'Color':\n"
                              "        f = firsts.setdefault('Color', r[1])\n        r = r[:4] + ([f] if f != r[1] else [])\n"
                              "    return r\n"),
    "each_the_one_before": ("def out(self, v):\n    r = _out(self, v)\n"
                            "    if type(r) is list and r[:1] == ['r'] and r[1] > 0:\n        r = r[:4] + [r[1] - 1]\n"
                            "    return r\n"),
    "a_handle_not_given": ("def out(self, v):\n    r = _out(self, v)\n"
                           "    if type(r) is list and r[:1] == ['r']:\n        r = r[:4] + [r[1] + 1]\n    return r\n"),
}
_CHECK = "assert Color(1) is Color.RED and Color(2) is Color.GREEN and Color(1) is not Color.GREEN\n"


def test_two_reaches_of_one_object_of_the_solutions_are_one_object():
    assert _each_scored({name: (tests, _ENUM) for name, tests in _RIGHT.items()}) == dict.fromkeys(_RIGHT, 1.0)


def test_two_objects_of_the_solutions_are_never_one_even_where_its_server_claims_so():
    cases = {name: (_CHECK, _NOT_ENUM + "import __main__\n_out = __main__._Session.out\n" + patch
                    + "__main__._Session.out = out\n") for name, patch in _CLAIMS.items()}
    cases["claimed_then_read"] = ("assert Color(1) is Color.RED and Color(2).value == 2\n",  # Color(2) reads the first
                                  cases["every_color_the_first"][1])
    cases["not_an_enum"] = (_CHECK, _NOT_ENUM)
    cases["new_each_get"] = ("assert Config.get() is Config.get()\n",
                             "class Config:\n    @classmethod\n    def get(cls):\n        return cls()\n")
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)


#: ``unittest``'s ``assertIs``/``assertIsNot`` (``is`` in unittest's code) and a chain of ``is``:
#: each scored 0 with the right solution on integ (``copy`` aside: it passed, and so did the wrong one).
_UNITTEST = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        {}\n"
_COPYING = ("class Stack:\n    def __init__(self, xs=()):\n        self.xs = list(xs)\n"
            "    def copy(self):\n        return Stack(self.xs)\n")
_IS_CHECKS = {
    "assert_is": _UNITTEST.format("self.assertIs(Color(1), Color.RED)\n        "
                                  "self.assertIsNot(Color(2), Color.RED, 'two members')"),
    "chain": "assert Color(1) is Color['RED'] is Color.RED\nassert not (first() is Color.RED is Color.GREEN)\n",
    "chain_is_not": "assert Color(2) is not Color.RED is not Color.GREEN and not (Color(1) is not first() is not None)\n",
    "copy": _UNITTEST.format("s = Stack([1])\n        self.assertIsNot(s.copy(), s)\n        "
                             "self.assertEqual(s.copy().xs, [1])"),
    "still_pythons": ("a = [1]\nb = a\nassert a is b is a and [1] is not a is b and Color.RED is Color.RED\n"
                      "unittest.TestCase().assertIs(a, b)\nunittest.TestCase().assertIsNot(a, [1])\n"),
}


def test_unittests_assert_is_and_a_chain_of_is_see_one_object_of_the_solutions_as_one():
    cases = {name: (tests, _ENUM + _COPYING) for name, tests in _IS_CHECKS.items()}
    cases["still_pythons"] = ("import unittest\n" + _IS_CHECKS["still_pythons"], _ENUM)
    assert _each_scored(cases) == dict.fromkeys(cases, 1.0)


def test_assert_is_and_a_chain_of_is_never_pass_two_objects_of_the_solutions():
    """``assertIsNot(s.copy(), s)`` of a ``copy`` returning ``s`` scored 1.0 on integ."""
    cases = {"assert_is": (_IS_CHECKS["assert_is"], _NOT_ENUM),
             "chain": ("assert Color(1) is Color['RED'] is Color.RED\n",
                       _NOT_ENUM + "Color.__class_getitem__ = classmethod(lambda c, k: getattr(c, k))\n"),
             "copy": (_IS_CHECKS["copy"], _COPYING.replace("return Stack(self.xs)", "return self"))}
    cases["chain_claimed"] = (_CHECK.replace("Color(1) is Color.RED", "Color(1) is Color.RED is Color(1)"),
                              _NOT_ENUM + "import __main__\n_out = __main__._Session.out\n"
                              + _CLAIMS["each_the_one_before"] + "__main__._Session.out = out\n")
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)


def test_a_rewritten_chain_of_is_evaluates_as_pythons():
    """Each operand once, left to right, stopping at the first False; ``assertIs``'s message kept."""
    import unittest

    from polyrl.sandbox import sample_identity

    source = ("calls = []\ndef f(v):\n    calls.append(v)\n    return v\nx = object()\n"
              "same = f(x) is f(x) is not f(None)\nfirst = list(calls)\nstopped = f(x) is f(None) is f(x)\n"
              "unittest.TestCase().assertIs(x, x, 'kept')\n")
    namespace = {"unittest": unittest, sample_identity.CHAIN: sample_identity.Chained,
                 sample_identity.IS_ARGS: sample_identity.is_args}
    exec(sample_identity.compiled(source, "<test>"), namespace)
    x = namespace["x"]
    assert namespace["same"] is True and namespace["first"] == [x, x, None]
    assert namespace["stopped"] is False and namespace["calls"] == [x, x, None, x, None]
    with pytest.raises(AssertionError, match="kept"):
        exec(sample_identity.compiled("unittest.TestCase().assertIs(x, [], 'kept')\n", "<test>"), namespace)
