"""A solution's ``__doc__`` and ``__name__`` as the sample has them: a forgery and a false zero.

Every value of the sample's had the harness's own class docstring as its ``__doc__``, so tests
asking for a docstring (``assert add.__doc__``) passed a solution without one (1.0); and
``add.__name__`` raised AttributeError (dunder lookups stay in the harness), so a right one failed
``add.__name__ == 'add'``. Both are read from the sample now (``remote._SampleDoc``, ``_NAMING``).
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_DOC_TESTS = "assert add.__doc__ is not None and len(add.__doc__) > 0\nassert add(1, 2) == 3\n"
CASES = {
    "no_docstring": ((_DOC_TESTS, "def add(a, b):\n    return a + b\n"), 0.5),
    "docstring": ((_DOC_TESTS, "def add(a, b):\n    '''Add two numbers.'''\n    return a + b\n"), 1.0),
    "names": (("assert add.__name__ == 'add'\nassert add.__qualname__ == 'add'\n",
               "def add(a, b):\n    return a + b\n"), 1.0),
    "method_name": (("assert Solution().add.__name__ == 'add'\n",
                     "class Solution:\n    def add(self, a, b):\n        return a + b\n"), 1.0),
    "class_docstring": (("assert Stack.__doc__.startswith('A stack')\n", "class Stack:\n    '''A stack.'''\n"), 1.0),
}


def test_a_solutions_docstring_and_name_are_its_own():
    """``no_docstring`` scored 1.0 (its docstring test held); ``names``, ``method_name`` and
    ``class_docstring`` (the harness's docstring does not start so) scored 0."""
    assert _each_scored({name: case for name, (case, _) in CASES.items()}) == {
        name: score for name, (_, score) in CASES.items()}


def test_the_class_keeps_its_docstring():
    from polyrl.sandbox.remote import Remote

    assert Remote.__doc__ is not None and Remote.__doc__.startswith("A value that lives in the sample")
