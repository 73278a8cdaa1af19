"""Stdin/stdout cases: a tests cell that gives a program its input and checks what it prints.

Why: APPS, TACO, CodeContests and the open-r1 / verifiable-coding-problems sets test whole
programs (Codeforces, AtCoder) by the text they print for a given stdin, and a right program
reads that input when it runs (``n = int(input())`` at its top level). Written as Python tests it
could not pass: the sample's module runs once, before the tests, with an empty stdin, so every
right program raised EOFError and scored 0. Such a cell is now read as cases (``cases``), each one
test step calling ``PROGRAM``: the sample runs the program afresh as ``__main__`` on that case's
input (``server._Session.program``) and only its printed text comes back; the trainer compares it
with the expected output here (``lines``, ``same``: tokens, decimals within APPS's float tolerance).
The expected output never enters the sample. APPS's call-based rows (``fn_name``) are ``call_cases``'.

Shapes read (a JSON string of the first two as well, as APPS stores ``input_output``):
``{"inputs": [...], "outputs": [...]}`` (APPS, TACO), ``{"input": [...], "output": [...]}``
(CodeContests' public/private tests) and ``[{"input": "...", "output": "..."}, ...]`` (open-r1's
``test_cases``). An input or output given as a list of lines is those lines joined.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from polyrl.errors import RewardError

NAME = "code_tests"
#: The tests' name for "run the program on this input, give its output lines" (bound by the harness).
PROGRAM = "__polyrl_program__"
_PAIRS = (("inputs", "outputs"), ("input", "output"))


def cases(tests: Any, where: str = "") -> list[tuple[str, str]] | None:
    """(stdin, expected stdout) of each case when ``tests`` is one of the shapes above, else None."""
    tests = decoded(tests)
    if isinstance(tests, dict):
        if tests.get("fn_name"):
            return None  # call-based: ``call_cases``
        for ins, outs in _PAIRS:
            if ins in tests and outs in tests:
                given, wanted = tests[ins], tests[outs]
                if not isinstance(given, list) or not isinstance(wanted, list) or len(given) != len(wanted):
                    raise RewardError(f"{NAME}: the tests{where} have {ins!r} and {outs!r} that are not two lists of "
                                      "the same length. Fix: one output per input")
                return [(_text(i, ins, where), _text(o, outs, where)) for i, o in zip(given, wanted)]
        return None
    if isinstance(tests, (list, tuple)) and tests and all(isinstance(case, dict) for case in tests):
        out = []
        for n, case in enumerate(tests):
            if "input" not in case or "output" not in case:
                raise RewardError(f"{NAME}: test {n}{where} has keys {sorted(map(str, case))}, not 'input' and "
                                  "'output'. Fix: give each case its stdin as 'input' and its stdout as 'output'")
            out.append((_text(case["input"], "input", where), _text(case["output"], "output", where)))
        return out
    return None


def decoded(tests: Any) -> Any:
    """``tests`` read as JSON where it is a string holding a JSON object (APPS stores
    ``input_output`` so), else as given: Python (a dict display in a cell is no JSON), or one
    nested past the decoder's depth (RecursionError), is left to be read as tests."""
    if isinstance(tests, str) and tests.lstrip().startswith("{"):
        try:
            return json.loads(tests)
        except (ValueError, RecursionError):
            return tests
    return tests


def _text(value: Any, key: str, where: str) -> str:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value) + "\n"  # APPS writes some as their lines
    if not isinstance(value, str):
        raise RewardError(f"{NAME}: an {key!r} of the tests{where} is a {type(value).__name__}, not text. "
                          "Fix: store each case's stdin and stdout as strings")
    return value


def step(stdin: str, stdout: str) -> str:
    """The test step for one case: whether the program's printed lines are the expected ones (``same``).
    Both texts stay one string literal each: as a list of its lines, a CodeContests output of 200 000
    lines was 200 000 nodes each analysis of the tests walked (``tests_analysis``), past the timeout."""
    return f"assert {PROGRAM}({stdin!r}, {stdout!r})\n"


def is_program(steps: Sequence[tuple[str, bool]]) -> bool:
    """Whether these steps are stdin/stdout cases (``step``): the sample then runs no module first."""
    return bool(steps) and all(source.startswith(f"assert {PROGRAM}(") for source, _ in steps)


#: Most bytes of a program's printed output read back for one case, whatever the expected output:
#: the sample's file limit (``SandboxLimits.file_size_mb``'s default) bounds what it can write there.
MAX_PROGRAM_BYTES = 16 * 1024 * 1024


def most_printed(expected: str) -> int:
    """Most bytes of output read back for a case expecting ``expected``. Why:
    CodeContests and TACO expect outputs of megabytes (200 000 lines), past what one answer used to
    carry (a right program scored 0), yet a longer output than a right one can be (twice the
    expected bytes, for a blank or ``\\r`` after every token, plus a margin) is wrong unread, so a
    sample's flood never reaches the trainer's memory."""
    size = len(expected.encode("utf-8", "surrogatepass"))
    return min(2 * size + 4096, MAX_PROGRAM_BYTES)


def lines(text: str) -> list[str]:
    """What is compared of a printed text: its lines, blanks around each and blank lines at the
    end left out (as APPS's and open-r1's checkers compare them: a trailing space or newline is no
    wrong answer)."""
    return [line.strip() for line in text.strip().split("\n")]


def same(printed: list[str], expected: list[str]) -> bool:
    """Whether printed lines (``lines``) answer the expected ones: line by line, their blank-split
    tokens equal, or, where the expected token is a decimal with a fraction or exponent
    (``0.333333``, ``1e-9``), the printed decimal within APPS's float tolerance of it (``close``).
    Why: a right program printing ``0.3333333333`` for ``0.333333`` failed. An integer answer stays
    exact (APPS's ``allclose`` let ``1000000001`` pass for ``1000000000``)."""
    if printed == expected:
        return True
    if len(printed) != len(expected):
        return False
    for mine, theirs in zip(printed, expected):
        if mine != theirs:
            tokens, wanted = mine.split(), theirs.split()
            if len(tokens) != len(wanted) or not all(t == w or close(t, w) for t, w in zip(tokens, wanted)):
                return False
    return True


#: A decimal as a program prints one: no ``nan``, ``inf``, ``_`` or hex that ``float()`` also reads.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")


def close(token: str, wanted: str) -> bool:
    """Whether a printed decimal is within ``numpy.allclose``'s default tolerance (relative 1e-5,
    absolute 1e-8, as APPS compares float outputs) of an expected one written with a fraction or
    exponent; both finite."""
    if not (_DECIMAL.fullmatch(token) and _DECIMAL.fullmatch(wanted) and any(c in wanted for c in ".eE")):
        return False
    mine, theirs = float(token), float(wanted)
    return math.isfinite(mine) and math.isfinite(theirs) and abs(mine - theirs) <= 1e-8 + 1e-5 * abs(theirs)

