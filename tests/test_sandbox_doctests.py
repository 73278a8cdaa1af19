"""Doctest-style tests: ``doctest.testmod()`` over examples in the tests' own docstrings.

On main ``doctest.testmod()`` with no module tested the trainer's ``__main__``, never the tests', so
a right ``add`` scored 0 (the tests never asked the sample anything). It now tests the tests' own
module, and a ``testmod`` whose examples fail raises AssertionError: a bare ``doctest.testmod()``
only prints, so once it asks the solution a wrong one would otherwise pass
(``tests_modules.doctest_view``). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_DOC = '    """\n    >>> add(1, 2)\n    3\n    >>> [add(i, i) for i in range(3)]\n    [0, 2, 4]\n    """\n'
_TESTS = {
    "assert_failed_zero": f"def _examples():\n{_DOC}import doctest\nassert doctest.testmod().failed == 0\n",
    "bare": f"import doctest\ndef _examples():\n{_DOC}doctest.testmod()\n",
    "main_guard": f"from doctest import testmod\ndef _examples():\n{_DOC}if __name__ == '__main__':\n    testmod()\n",
}
_RIGHT = "def add(a, b):\n    return a + b\n"
#: Wrong ones: an ``add`` that subtracts, one exiting with success first, one whose own docstring
#: and ``__test__`` hold examples that pass (the tests' ``testmod`` never reads the sample's), and
#: one printing a plausible answer.
_FORGED = {
    "wrong": "def add(a, b):\n    return a - b\n",
    "exits_first": "import sys\nsys.exit(0)\n",
    "own_examples": ('__test__ = {"t": ">>> 1 + 1\\n2\\n"}\ndef add(a, b):\n    """\n    >>> 2\n    2\n    """\n'
                     "    return 0\n"),
    "prints": "def add(a, b):\n    print(3)\n",
}


def test_doctest_testmod_runs_the_tests_own_examples():
    """Each scored 0 on main (testmod read the trainer's __main__: the tests never asked the sample)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_fails_the_doctests():
    cases = {f"{name}/{tests_name}": (tests, code) for name, code in _FORGED.items()
             for tests_name, tests in _TESTS.items() if tests_name == "bare" or name == "wrong"}
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)
