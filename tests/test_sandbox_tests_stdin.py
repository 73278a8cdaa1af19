"""A solution reading ``input()``/``sys.stdin`` under tests that set ``sys.stdin = io.StringIO(...)``.

APPS/CodeContests-style tasks read their input; tests written as Python give it by replacing
``sys.stdin``. The sample runs in its own process, whose stdin is /dev/null, so ``input()`` raised
EOFError and a right solution scored 0. Now a call the tests make while their ``sys.stdin`` is an
``io.StringIO`` sends the text left in it; the call reads that as its ``sys.stdin`` and the tests'
stream moves on by what it read (``harness.Session.ask``; a count the sample claims is clamped to
the text sent). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_RIGHT = ("import sys\ndef main():\n    a, b = map(int, input().split())\n    print(a + b)\n"
          "def total():\n    n = int(sys.stdin.readline())\n    return sum(int(x) for x in sys.stdin.readline().split()[:n])\n")
_TESTS = {
    "printed_answer": ("import io, sys, contextlib\nsys.stdin = io.StringIO('1 2\\n')\nout = io.StringIO()\n"
                       "with contextlib.redirect_stdout(out):\n    main()\nassert out.getvalue().strip() == '3'\n"),
    "two_calls_read_on": ("import io, sys, contextlib\nsys.stdin = io.StringIO('1 2\\n3 4\\n')\nout = io.StringIO()\n"
                          "with contextlib.redirect_stdout(out):\n    main()\n    main()\n"
                          "assert out.getvalue().split() == ['3', '7']\nassert sys.stdin.read() == ''\n"),
    "readline": "import io, sys\nsys.stdin = io.StringIO('3\\n1 2 3\\nrest\\n')\nassert total() == 6\nassert sys.stdin.read() == 'rest\\n'\n",
    "capsys": ("import io, sys\ndef test_main(capsys):\n    sys.stdin = io.StringIO('2 5\\n')\n    main()\n"
               "    assert capsys.readouterr().out == '7\\n'\n"),
}
#: Wrong solutions: one ignoring its input, one that also claims to have read all of it, or past it,
#: by rewriting the server's answer (``server._Printed.end``). Each scores 0 on the readline tests.
_CLAIMS = ("import __main__\n_end = __main__._Printed.end\ndef _claim(self, answer):\n    _end(self, answer)\n"
           "    answer['in'] = {claim}\n__main__._Printed.end = _claim\n")
_WRONG = "def total():\n    return 5\n"
_FORGED = {"ignores_input": _WRONG, **{f"claims_{name}": _CLAIMS.format(claim=claim) + _WRONG
                                        for name, claim in (("everything", 10 ** 9), ("less_than_none", -(10 ** 9)),
                                                            ("text", "'x'"))}}


def test_a_solution_reading_the_tests_stdin_passes():
    """Each scored 0 on main (EOFError: the sample's own stdin is empty)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_claiming_what_it_read_scores_zero():
    tests = _TESTS["readline"]
    assert _each_scored({name: (tests, code) for name, code in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)
