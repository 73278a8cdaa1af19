"""A solution's object used as a context manager (``with Timer() as t:``): a false zero on main.

A value of the sample's is a stand-in in the tests, with no ``__enter__``/``__exit__``, so the
``with`` raised TypeError ("does not support the context manager protocol") and a right class or
``@contextmanager`` function scored 0. The stand-in now calls the sample's own ``__enter__`` and
``__exit__`` (given a built-in exception's class, never the tests' exception object), and never
lets ``__exit__`` swallow what the block raised (``remote.Remote.__exit__``). Scored through the
real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_RIGHT = ("import time\nfrom contextlib import contextmanager\nclass Timer:\n    def __enter__(self):\n"
          "        self.t = time.perf_counter()\n        return self\n    def __exit__(self, kind, exc, tb):\n"
          "        self.elapsed = time.perf_counter() - self.t\n        self.kind = kind.__name__ if kind else None\n"
          "        return False\nlog = []\n@contextmanager\ndef opened(name):\n    log.append('enter')\n"
          "    yield name + '!'\n    log.append('exit')\ndef f():\n    return 3\n")
_TESTS = {
    "class": "with Timer() as t:\n    pass\nassert t.elapsed >= 0 and t.kind is None\n",
    "raised_inside": ("import pytest\nwith pytest.raises(ValueError):\n    with Timer() as t:\n        raise ValueError('x')\n"
                      "assert t.kind == 'ValueError'\n"),
    "generator_function": "with opened('x') as v:\n    assert v == 'x!'\nassert log == ['enter', 'exit']\n",
}
_CHECK = "with CM() as v:\n    assert f() == 3\n"
#: Wrong ``f``s inside a context manager of the sample's that would swallow the failure, or end
#: the sample with success, or an entered value equal to anything. Each scores 0.
_FORGED = {
    "exit_says_true": ("class CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
                       "        return True\ndef f():\n    return 4\n", _CHECK),
    "generator_swallows": ("from contextlib import contextmanager\n@contextmanager\ndef CM():\n    try:\n        yield\n"
                           "    except BaseException:\n        pass\ndef f():\n    return 4\n", _CHECK),
    "exit_zero": ("import sys\nclass CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
                  "        sys.exit(0)\ndef f():\n    return 4\n", _CHECK),
    "entered_equal_to_anything": ("class CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
                                  "        return False\n    def __eq__(self, other):\n        return True\n",
                                  "with CM() as v:\n    assert v == 3\n"),
}


def test_a_solutions_context_manager_works_in_the_tests_with():
    """Each scored 0 on main (TypeError: the stand-in does not support the context manager protocol)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_context_manager_never_swallows_a_wrong_solutions_failure():
    assert _each_scored({name: (tests, code) for name, (code, tests) in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)


_SUPPRESSING = ("from contextlib import contextmanager\nclass suppress_errors:\n    def __init__(self, *kinds):\n"
                "        self.kinds = kinds or (Exception,)\n    def __enter__(self):\n        return self\n"
                "    def __exit__(self, kind, exc, tb):\n        return kind is not None and issubclass(kind, self.kinds)\n"
                "@contextmanager\ndef ignoring(*kinds):\n    try:\n        yield\n    except kinds:\n        pass\n")
_SUPPRESSED = {
    "bare": "with suppress_errors():\n    raise ValueError('x')\nassert suppress_errors is not None\n",
    "by_kind": "n = 0\nwith suppress_errors(ZeroDivisionError):\n    n = 1\n    1 / 0\n    n = 2\nassert n == 1\n",
    "generator": "d = {}\nwith ignoring(KeyError):\n    d['k']\nassert ignoring is not None\n",
    "in_a_test_function": "def test_it():\n    with suppress_errors(ValueError):\n        int('x')\n",
}
#: Context managers saying True to everything, around a wrong ``f``'s failure that is no assert:
#: a conditional raise of the tests', one in a helper of theirs, and the solution's own error.
_SWALLOWING = ("class CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n        return True\n"
               "def f():\n    raise ValueError('wrong')\ndef g():\n    return 4\n")
_UNSUPPRESSED = {
    "conditional_raise": "with CM():\n    if g() != 3:\n        raise ValueError('wrong')\n",
    "helper_raises": "def check():\n    if g() != 3:\n        raise ValueError('wrong')\nwith CM():\n    check()\n",
    "solutions_error": "def test_f():\n    with CM():\n        f()\n",
    "assert_after_raise": "with CM():\n    x = [][0]\n    assert g() == 3\n",
    "their_code_raising_on_the_answer": "def must(v):\n    return {3: 'ok'}[v]\ndef test_g():\n    with CM():\n        must(g())\n",
}


def test_a_solutions_context_manager_suppresses_what_the_tests_raise():
    """Each scored 0 on main (the stand-in never suppressed: the ValueError failed the cell)."""
    assert _each_scored({n: (t, _SUPPRESSING) for n, t in _SUPPRESSED.items()}) == dict.fromkeys(_SUPPRESSED, 1.0)


def test_a_suppressing_context_manager_never_hides_a_check_or_the_solutions_error():
    assert _each_scored({n: (t, _SWALLOWING) for n, t in _UNSUPPRESSED.items()}) == dict.fromkeys(_UNSUPPRESSED, 0.0)


#: A command-line ``main`` exiting 2 on no arguments (argparse's way), and a subclass of SystemExit.
_EXITING = ("import sys\ndef main(argv):\n    if not argv:\n        sys.exit(2)\n    return sum(map(int, argv))\n"
            "class Done(SystemExit):\n    pass\ndef done():\n    raise Done('bye')\n")
_EXIT_CAUGHT = {
    "pytest_raises": ("import pytest\ndef test_exit():\n    with pytest.raises(SystemExit) as e:\n        main([])\n"
                      "    assert e.value.code == 2\n"),
    "assert_raises": ("import unittest\nclass T(unittest.TestCase):\n    def test_exit(self):\n"
                      "        with self.assertRaises(SystemExit) as c:\n            main([])\n"
                      "        self.assertEqual(c.exception.code, 2)\n"),
    "except": "try:\n    main([])\n    code = None\nexcept SystemExit as e:\n    code = e.code\nassert code == 2\n",
    "subclass": "import pytest\nwith pytest.raises(SystemExit, match='bye'):\n    done()\n",
}


def test_the_tests_catch_the_solutions_own_exit():
    """Each scored 0 on integ: the solution's ``sys.exit(2)`` reached the tests as a ``RemoteError``,
    which no ``pytest.raises(SystemExit)``, ``assertRaises`` or ``except SystemExit`` takes."""
    assert _each_scored({n: (t, _EXITING) for n, t in _EXIT_CAUGHT.items()}) == dict.fromkeys(_EXIT_CAUGHT, 1.0)


def test_the_solutions_exit_never_ends_the_tests_as_a_success():
    """A wrong ``main`` that does not exit fails the same tests; the solution's ``sys.exit(0)`` (a
    success where the tests' own script calls it) fails the test it leaves, and one the tests'
    ``except Exception`` does not take ends the test as in one process (1.0 on integ)."""
    cases = {n: (t, "def main(argv):\n    return 0\ndef done():\n    pass\n") for n, t in _EXIT_CAUGHT.items()}
    quits = "import sys\ndef main(argv):\n    sys.exit(0)\n"
    cases["exit_0_in_the_script"] = ("main(['1'])\nassert False\n", quits)
    cases["exit_0_in_a_test"] = ("def test_it():\n    main(['1'])\n    assert False\n", quits)
    cases["not_an_exception"] = ("try:\n    main([])\nexcept Exception:\n    pass\nassert main(['2']) == 2\n", _EXITING)
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)
