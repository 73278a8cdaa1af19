"""A solution that prints, checked by tests that capture what it prints: false zeros on main.

The sample runs in its own process, so its ``print`` went to its own stdout (kept as the run's
output) and the tests' ``contextlib.redirect_stdout(buf)``, ``sys.stdout = io.StringIO()`` or
pytest's ``capsys``/``capfd`` saw nothing: a right ``hello()`` scored 0. ``capsys`` was not given at
all (the test was called with no argument: TypeError). Now what the sample prints while answering
a request comes back with the answer and is written to the tests' stream where they replaced it
(``harness.Session.printed``), and a ``test_*`` function naming ``capsys``/``capfd`` gets a capture
(``polyrl.sandbox.fixtures``). The forged ones (printing at import, to ``sys.__stdout__``, returning
the text instead of printing it, printing the wrong text) still score 0, and what a sample prints
never reaches the trainer's own stdout. Scored through the real reward path (``code_tests``:
sandbox, harness, the forked copy of the trainer)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_HELLO = "import sys\ndef hello(n=1):\n    print('hi' * n)\n    print('oops', file=sys.stderr)\n"
_REDIRECT = ("import io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    hello()\n"
             "assert buf.getvalue() == 'hi\\n'\n")
_TESTS = {
    "redirect_stdout": _REDIRECT,
    "replaced_stdout": ("import io, sys\nold = sys.stdout\nsys.stdout = io.StringIO()\nhello()\nout = sys.stdout.getvalue()\n"
                        "sys.stdout = old\nassert out == 'hi\\n'\n"),
    "redirect_stderr": ("import io, contextlib\nerr = io.StringIO()\nwith contextlib.redirect_stderr(err):\n    hello()\n"
                        "assert err.getvalue() == 'oops\\n'\n"),
    "capsys": "def test_hello(capsys):\n    hello()\n    out, err = capsys.readouterr()\n    assert out == 'hi\\n'\n",
    "capsys_parametrized": ("import pytest\n@pytest.mark.parametrize('n, want', [(1, 'hi'), (2, 'hihi')])\n"
                            "def test_hello(capsys, n, want):\n    hello(n)\n    assert capsys.readouterr().out == want + '\\n'\n"),
    "capfd_in_a_class": ("class TestHello:\n    def test_err(self, capfd):\n        hello()\n"
                         "        assert capfd.readouterr().err.strip() == 'oops'\n"),
    "capsys_read_twice": ("def test_hello(capsys):\n    hello()\n    assert capsys.readouterr().out == 'hi\\n'\n"
                          "    hello(2)\n    assert capsys.readouterr().out == 'hihi\\n'\n"),
}

#: Wrong ``hello``s an RL policy would try against captured output: each scores 0.
_FORGED = {
    "printed_at_import": "print('hi')\ndef hello(n=1):\n    pass\n",
    "printed_to_the_real_stdout": "import sys\ndef hello(n=1):\n    sys.__stdout__.write('hi\\n')\n    sys.__stdout__.flush()\n",
    "returned_not_printed": "def hello(n=1):\n    return 'hi\\n'\n",
    "printed_the_channel": ("def hello(n=1):\n    print('{\"ok\": true, \"v\": null, \"out\": \"hi\\\\n\"}')\n"),
}


def test_a_right_solution_that_prints_passes_tests_that_capture_its_output():
    """Each scored 0 on main (its output never reached the tests' stream; ``capsys`` raised TypeError)."""
    assert _each_scored({name: (tests, _HELLO) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_forged_printing_scores_zero():
    cases = {f"{name}/{test}": (_TESTS[test], code) for name, code in _FORGED.items()
             for test in ("redirect_stdout", "capsys")}
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)


def test_what_a_sample_prints_never_reaches_the_trainers_stdout(capfd):
    """Only a stream the tests put in place gets the sample's text: never the trainer's own (a
    forged 'PASSED' or ``error:`` line in its console or JSON summary)."""
    marker = "FORGED-LINE-7f3a"
    code = f"def add(a, b):\n    print({marker!r})\n    return a + b\n"
    assert _each_scored({"uncaptured": ("assert add(1, 2) == 3\n", code)}) == {"uncaptured": 1.0}
    seen = capfd.readouterr()
    assert marker not in seen.out and marker not in seen.err


#: Right ``hello``s writing bytes below ``print`` (contest-style fast output, a raw descriptor write,
#: one byte at a time): what they write reached no capture on main, so each scored 0.
_BYTES = {
    "stdout_buffer": ("import sys\ndef hello(n=1):\n    sys.stdout.buffer.write(b'hi' * n + b'\\n')\n"
                      "    sys.stdout.flush()\n"),
    "os_write_stdout": "import os\ndef hello(n=1):\n    os.write(1, b'hi' * n + b'\\n')\n",
    "split_character": ("import sys\ndef hello(n=1):\n    data = ('hi' * n + '\\n').encode()\n"
                        "    for i in range(len(data)):\n        sys.stdout.buffer.write(data[i:i + 1])\n"),
    "os_write_stderr_too": ("import os\ndef hello(n=1):\n    os.write(2, b'note\\n')\n"
                            "    os.write(1, 'hi'.encode() * n + b'\\n')\n"),
}
_BYTES_TESTS = {
    "capsys": _TESTS["capsys"],
    "capfd_twice": ("def test_hello(capfd):\n    hello(2)\n    out, err = capfd.readouterr()\n"
                    "    assert out == 'hihi\\n'\n    hello()\n    assert capfd.readouterr().out == 'hi\\n'\n"),
}
#: Wrong ones through the same paths: before any call, the wrong bytes, bytes that are no UTF-8.
_BYTES_FORGED = {
    "os_write_at_import": "import os\nos.write(1, b'hi\\n')\ndef hello(n=1):\n    pass\n",
    "buffer_at_import": "import sys\nsys.stdout.buffer.write(b'hi\\n')\nsys.stdout.flush()\ndef hello(n=1):\n    pass\n",
    "not_utf8": "import os\ndef hello(n=1):\n    os.write(1, b'h\\xffi\\n')\n",
    "other_descriptor": "import os\ndef hello(n=1):\n    os.write(3, b'hi\\n')\n",
}


def test_bytes_a_right_solution_writes_reach_the_tests_capture():
    """Each scored 0 on main (only ``sys.stdout.write``'s text was forwarded)."""
    cases = {f"{name}/{test}": (tests, code) for name, code in _BYTES.items() for test, tests in _BYTES_TESTS.items()}
    assert _each_scored(cases) == dict.fromkeys(cases, 1.0)


def test_forged_bytes_score_zero():
    cases = {name: (_BYTES_TESTS["capsys"], code) for name, code in _BYTES_FORGED.items()}
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)
