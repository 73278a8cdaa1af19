"""Stdin/stdout cases (APPS, CodeContests, open-r1): a program reading its input at its top level.

On main a tests cell could not give a whole program its input: the sample's module ran once,
before the tests, with an empty stdin, so ``n = int(input())`` at the top raised EOFError and
every right Codeforces-style program scored 0 (and APPS's ``{"inputs": [...], "outputs": [...]}``
was read as Python: a dict display that checks nothing, one test any program running passed). Such
cases now run the program afresh per case on its input, and the trainer compares the lines it
printed with the expected ones, which never enter the sample (``polyrl.sandbox.program_cases``).
Scored through the real reward path (``code_tests``), every sample of a test in one reward call."""

from __future__ import annotations

import json

import pytest
from test_sandbox_emptied_values import _each_scored

from polyrl.errors import RewardError

pytestmark = pytest.mark.faults

_IN, _OUT = ["1 2\n", "10 -3\n"], ["3\n", "7\n"]
_APPS = json.dumps({"inputs": _IN, "outputs": _OUT})  # APPS's input_output column: a JSON string
_SHAPES = {"apps": _APPS, "code_contests": {"input": _IN, "output": _OUT},
           "open_r1": [{"input": i, "output": o} for i, o in zip(_IN, _OUT)]}
#: Right programs, each reading its input its own way.
_RIGHT = {
    "input_at_top": "a, b = map(int, input().split())\nprint(a + b)\n",
    "stdin_read": "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n",
    "open_0": "print(sum(map(int, open(0).read().split())))  \n\n",
    "buffer_and_write": "import sys\nr = sys.stdin.buffer.readline\nsys.stdout.write(str(sum(map(int, r().split()))) + '\\n')\n",
    "main_guard_exit": ("import sys\ndef main():\n    print(sum(map(int, input().split())))\n    sys.exit(0)\n"
                        "if __name__ == '__main__':\n    main()\n"),
    "thread": ("import threading\ndef main():\n    print(sum(map(int, input().split())))\n"
               "threading.Thread(target=main).start()\n"),
}
#: Wrong programs trying the new path: ending with success before printing, ending the process,
#: echoing the input, raising after printing, claiming an answer by rewriting the server's reply,
#: and printing every request field the server gets (the expected output is never among them).
_FORGED = {
    "exit_zero_first": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "echo": "print(input())\n",
    "raise_after_print": "print(sum(map(int, input().split())))\nraise ValueError('late')\n",
    "claims_output": ("import sys\nm = sys.modules['solution'] if False else None\nimport gc\n"
                      "for o in gc.get_objects():\n    if isinstance(o, type) and o.__name__ == '_Printed':\n"
                      "        end = o.end\n        def claim(self, answer, _end=end):\n            _end(self, answer)\n"
                      "            answer['out'] = 'yes'\n            answer['ok'] = True\n        o.end = claim\n"),
    "prints_the_request": ("import sys\nf = sys._getframe()\nwhile f is not None:\n    if 'req' in f.f_locals:\n"
                           "        print(repr(f.f_locals['req']))\n    f = f.f_back\n"),
}


def test_a_program_reading_its_input_passes_stdin_stdout_cases():
    """Each scored 0 on main (EOFError at the top: the sample's module ran first, stdin empty)."""
    cases = {f"{shape}/{name}": (tests, code) for shape, tests in _SHAPES.items() for name, code in _RIGHT.items()
             if shape == "apps" or name == "input_at_top"}
    assert _each_scored(cases) == dict.fromkeys(cases, 1.0)


def test_a_wrong_program_through_the_cases_scores_zero():
    """Also on main these scored 0 (by EOFError); what matters is that the new path pays none."""
    assert _each_scored({name: (_APPS, code) for name, code in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)


def test_cases_are_read_from_each_shape_and_bad_ones_are_errors():
    from polyrl.sandbox import program_cases  # here: the tests above run on main's code too

    for tests in _SHAPES.values():
        assert program_cases.cases(tests) == list(zip(_IN, _OUT))
    assert program_cases.cases({"inputs": [["1 2", "3"]], "outputs": [["3", "x"]]}) == [("1 2\n3\n", "3\nx\n")]
    assert program_cases.cases({"fn_name": "f", "inputs": [[1]], "outputs": [1]}) is None  # call_cases'
    assert program_cases.cases("assert f(1) == 2\n") is None and program_cases.cases(["assert f(1) == 2"]) is None
    assert program_cases.lines("3  \n7\n\n") == program_cases.lines("3\n7") != program_cases.lines("3\n\n7")
    for bad, says in (({"inputs": ["1"], "outputs": []}, "same length"), ([{"in": "1"}], "'input'"),
                      ({"inputs": [1], "outputs": ["1"]}, "not text")):
        with pytest.raises(RewardError, match=says):
            program_cases.cases(bad, " of row 0")


#: a / b: the first answer a decimal (printed here with 6 digits), the second an integer.
_DIVIDE = json.dumps({"inputs": ["1 3\n", "2000000000 2\n"], "outputs": ["0.333333\n", "1000000000\n"]})
_READ = "a, b = map(int, input().split())\n"


def test_a_printed_decimal_within_float_tolerance_passes_and_an_integer_stays_exact():
    """On integ ``more_digits`` scored 0.5 (its 0.3333333333 compared as text); the near misses
    (a decimal off in its fourth digit, an integer off by one, nan, inf, an extra token) pay nothing."""
    cases = {
        "more_digits": _READ + "print(f'{a / b:.10f}' if a % b else a // b)\n",
        "exponent": _READ + "print(f'{a / b:e}' if a % b else a // b)\n",
        "near_miss": _READ + "print('0.3334' if a % b else a // b + 1)\n",
        "nan": _READ + "print('nan' if a % b else 'inf')\n",
        "extra_token": _READ + "print(f'{a / b:.10f} 0' if a % b else f'{a // b} 0')\n",
    }
    assert _each_scored({name: (_DIVIDE, code) for name, code in cases.items()}) == {
        "more_digits": 1.0, "exponent": 1.0, "near_miss": 0.0, "nan": 0.0, "extra_token": 0.0}


def test_same_compares_tokens_and_decimals_only():
    from polyrl.sandbox.program_cases import close, same

    assert same(["0.3333333 2", "x"], ["0.333333 2", "x"]) and same(["1  2"], ["1 2"])
    assert not same(["1000000001"], ["1000000000"]) and not same(["0.33"], ["0.333333"])
    assert not same(["0.333333"], ["0.333333", "1"]) and not same(["0.333333 1"], ["0.333333"])
    assert close("1.0000000001e9", "1e9") and not close("1_0.0", "10.0") and not close("inf", "1e999")


#: CodeContests-sized output: 2.4 MB (past the old 1 MiB ``MAX_PRINTED`` and the 64 KiB
#: ``max_output_bytes`` that printing to descriptor 1, then a copy of 2, counted against), as
#: 20 000 lines of ten numbers: 200 000 short lines took half the time limit on a loaded machine.
_BIG_IN = "20000\n"
_BIG_OUT = "".join(" ".join(str(10**10 + i + k) for k in range(10)) + "\n" for i in range(20000))
_BIG_TESTS = {"input": [_BIG_IN], "output": [_BIG_OUT]}
_LINE = "' '.join(str(10**10 + i + k) for k in range(10))"
_BIG_RIGHT = {
    "print_loop": "for i in range(int(input())):\n    print(*(10**10 + i + k for k in range(10)))\n",
    "one_write": f"import sys\nn = int(input())\nsys.stdout.write('\\n'.join({_LINE} for i in range(n)) + '\\n')\n",
}
_BIG_WRONG = {
    "one_line_off": f"n = int(input())\nprint('\\n'.join({_LINE} for i in range(n - 1)))\nprint(1)\n",
    "twice": f"n = int(input())\nfor _ in range(2):\n    print('\\n'.join({_LINE} for i in range(n)))\n",
    "flood": "import sys\nint(input())\nfor _ in range(8):\n    sys.stdout.write('9' * (1 << 20) + '\\n')\n",
}


def test_a_program_printing_megabytes_is_read_and_a_longer_output_is_wrong():
    """The right programs scored 0 on integ (their 2.4 MB went over the output limits); output
    longer than a right answer can be (twice the expected bytes and a margin) is wrong unread."""
    cases = {name: (_BIG_TESTS, code) for name, code in {**_BIG_RIGHT, **_BIG_WRONG}.items()}
    assert _each_scored(cases) == {**dict.fromkeys(_BIG_RIGHT, 1.0), **dict.fromkeys(_BIG_WRONG, 0.0)}


#: Right programs writing to descriptor 1 other ways than ``print``, ``sys.stdout(.buffer)`` and ``os.write``.
_FD1_RIGHT = {
    "open_1": "a, b = map(int, input().split())\nopen(1, 'w').write(f'{a + b}\\n')\n",
    "open_1_kept": "a, b = map(int, input().split())\nout = open(1, 'w')\nout.write(f'{a + b}\\n')\n",
    "dunder_stdout": "import sys\na, b = map(int, input().split())\nsys.__stdout__.write(f'{a + b}\\n')\n",
    "fdopen": ("import os\ndef main():\n    a, b = map(int, input().split())\n    f = os.fdopen(1, 'w')\n"
               "    f.write(str(a + b) + '\\n')\n    f.flush()\nmain()\n"),
    "stdout_replaced": "import io, sys\nsys.stdout = io.TextIOWrapper(open(1, 'wb', 0), write_through=True)\nprint(sum(map(int, input().split())))\n",
}
#: Wrong programs writing server answer frames on descriptor 1 (as the channel's stdout was once):
#: claiming "3" (hex 33), the first case's answer, as JSON lines the trainer would read as answers.
_FD1_FORGED = {
    "frame_open_1": "f = open(1, 'w')\nf.write('{\"ok\": true, \"v\": \"33\"}\\n')\nf.flush()\n",
    "frame_os_write": "import os\nos.write(1, b'{\"ok\": true, \"v\": \"33\"}\\n{\"ok\": true, \"v\": \"37\"}\\n')\n",
    "frame_dunder": "import sys\nsys.__stdout__.write('{\"ok\": true, \"out\": \"3\\\\n\"}\\n')\nsys.__stdout__.flush()\n",
}


def test_output_written_to_descriptor_1_itself_is_the_programs_output():
    """The right programs scored 0 on integ (``open(1, 'w')``, ``sys.__stdout__``, ``os.fdopen(1)``
    bypassed the capture); answer frames written there are output, compared and wrong."""
    cases = {name: (_APPS, code) for name, code in {**_FD1_RIGHT, **_FD1_FORGED}.items()}
    assert _each_scored(cases) == {**dict.fromkeys(_FD1_RIGHT, 1.0), **dict.fromkeys(_FD1_FORGED, 0.0)}
