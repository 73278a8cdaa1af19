"""Each of the tests' steps runs at its own lines: no two steps' code shares a place.

A module-level cell runs statement by statement, each compiled on its own, and what a check reads
is judged by its place (line, column) in the tests' code. Numbered from line 1 each, ``assert
len(r) == 3`` and a later ``assert len(r) >= 0`` had their ``len(r)`` at one place, so the real
count was taken for the vacuous one: a forged ``primes`` emptied by ``r.reset()`` passed the loop
over no items after them (1.0, while the same body in a function scored 0), and a right queue
the tests cleared and saw empty (``len(q) == 0``) lost the loop after it where another step
counted it vacuously (``len(q) >= 0``). Scored through the real reward path (``code_tests``:
sandbox, harness, the forked copy of the trainer); see ``polyrl.sandbox.step_lines``.
"""

from __future__ import annotations

import ast

import pytest
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.code import parse_tests
from polyrl.rewards.combine import RewardComputer
from polyrl.sandbox.step_lines import laid_out
from polyrl.types import Completion, RewardContext
from test_sandbox_emptied_values import FORGED, QUEUE_CLEARED, RIGHT, _scored
from test_sandbox_forging import IS_PRIME
from test_sandbox_verdict import user_for

pytestmark = pytest.mark.faults

_BODY = "r = primes(3)\nassert len(r) == 3\nr.reset()\nassert len(r) >= 0\nassert all(is_prime(x) for x in r)\n"
#: The forged body at the top of the cell: three steps that are tests, the last a loop over ``r``.
MODULE_LEVEL = IS_PRIME + _BODY
#: The same body in a test function: one test.
IN_A_FUNCTION = IS_PRIME + "def test():\n" + "".join(f"    {line}\n" for line in _BODY.splitlines()) + "test()\n"
_FILLED = "q = make_queue()\nq.push(1)\nq.push(2)\n"
#: A right queue seen with items (``2 == len(q)``), cleared, seen empty (``len(q) == 0``), looped
#: over; a later step's ``len(q) >= 0`` stood at the place of ``len(q) == 0``.
SEEN_EMPTY_BESIDE_A_VACUOUS_COUNT = (_FILLED + "assert 2 == len(q)\nq.clear()\nassert len(q) == 0\n"
                                     "assert all(x > 5 for x in q)\nassert len(q) >= 0\n")


def _binary_scored(tests: str, solution: str) -> float:
    """``solution`` scored on ``tests`` by ``code_tests`` with ``mode = "binary"`` (1 only if all pass)."""
    options = {"timeout_s": 4, "memory_mb": 512, "max_output_bytes": 16384, "isolation": "auto",
               "audit_hook": False, "extract": "raw", "user": user_for("auto"), "mode": "binary"}
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, options)])
    rows = [{"prompt": "write primes", "tests": tests}]
    scores = computer(["write primes"], [Completion(0, [1], [2], [0.0], text=solution)],
                      RewardContext(rows=rows, wanted=("code_tests",)))
    return float(scores.total[0])


def test_a_module_level_count_is_not_judged_by_another_steps_count_at_the_same_place():
    """The forged ``primes`` (three 4s, nothing after ``r.reset()``) passed every step of the body
    at the top of the cell (1.0), though in a function it scored 0: ``len(r) == 3`` was taken for
    the vacuous ``len(r) >= 0`` of a later step, so the tests never saw ``r`` with items and the
    loop over no items held. Now the loop fails it (the two counts it answers truly still pass:
    2/3, and 0 where all must pass), and the right ``primes`` keeps 1.0 both ways."""
    assert _scored([MODULE_LEVEL, IN_A_FUNCTION], [FORGED, FORGED]) == [pytest.approx(2 / 3), 0.0]
    assert _binary_scored(MODULE_LEVEL, FORGED) == 0.0
    assert _scored([MODULE_LEVEL, IN_A_FUNCTION], [RIGHT, RIGHT]) == [1.0, 1.0]
    assert _binary_scored(MODULE_LEVEL, RIGHT) == 1.0


def test_a_real_module_level_reading_is_not_taken_for_another_steps_vacuous_count():
    """A right queue the tests count, clear and see empty (``len(q) == 0``) before looping over it
    lost the loop (0.75) where a later step counted it vacuously (``len(q) >= 0``) at the same
    place, which made ``len(q) == 0`` no reading of theirs. It keeps 1.0 now, as it did in a function."""
    in_a_function = "def test():\n" + "".join(f"    {line}\n" for line in
                                             SEEN_EMPTY_BESIDE_A_VACUOUS_COUNT.splitlines()) + "test()\n"
    assert _scored([SEEN_EMPTY_BESIDE_A_VACUOUS_COUNT, in_a_function], [QUEUE_CLEARED] * 2) == [1.0, 1.0]


def _spans(steps: list[tuple[str, bool]]) -> list[tuple[int, int]]:
    """Each step's first and last line of code."""
    spans = []
    for source, _ in steps:
        lines = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(ast.parse(source)) if hasattr(n, "lineno")]
        spans.append((min(a for a, _ in lines), max(b for _, b in lines)))
    return spans


def test_each_step_starts_on_its_line_of_the_cell_and_after_the_step_before():
    """A statement keeps its line of the cell (blank lines and comments between included); one that
    runs longer once rewritten (``for x in r: assert x`` on one line becomes two) pushes the next
    one down rather than share a line; snippets of a list, each from line 1, follow one another;
    found tests (``test_a()``) come after the cell; a step that does not parse is left as it is."""
    cell = ("import math\n\n# the cases\nr = [1, 2]\nfor x in r: assert x\nassert len(r) == 2\n"
            "def test_a():\n    assert math.pi > 3\n")
    steps = laid_out(parse_tests(cell))
    assert [s.lstrip("\n") for s, _ in steps] == [
        "import math", "r = [1, 2]", "for x in r:\n    assert x", "assert len(r) == 2",
        "def test_a():\n    assert math.pi > 3", "test_a()"]
    assert _spans(steps) == [(1, 1), (4, 4), (5, 6), (7, 7), (8, 9), (10, 10)]
    snippets = laid_out(parse_tests(["assert f(1) == 1", "y = f(2)\nassert y == 4", "\nassert f(3) == 9"]))
    assert _spans(snippets) == [(1, 1), (2, 3), (4, 4)]
    assert laid_out([("assert f(1) == 1", True), ("assert (", True)]) == [("assert f(1) == 1", True), ("assert (", True)]
    decorated = laid_out([("x = 1", False), ("@staticmethod\ndef g():\n    pass", False)])
    assert _spans(decorated) == [(1, 1), (2, 4)]  # the decorator's line is the step's first


def test_a_long_cell_is_laid_out_within_a_window_of_lines_not_n_squared_blank_lines():
    """Moved down without end, a cell of n one-line asserts was n^2 / 2 blank lines (200 million
    characters at 20,000 asserts, sent to the sandbox and parsed there); within ``WINDOW`` lines the
    steps are at their own lines, each after the one before, and past it they start again from the top."""
    from polyrl.sandbox.step_lines import WINDOW

    count = 3 * WINDOW
    steps = laid_out(parse_tests("".join(f"assert f({i}) == {i}\n" for i in range(count))))
    first_lines = [len(source) - len(source.lstrip("\n")) + 1 for source, _ in steps]
    assert first_lines[:WINDOW] == list(range(1, WINDOW + 1))  # the cell's own lines
    assert first_lines[WINDOW:WINDOW + 3] == [1, 2, 3]  # from the top again
    assert max(first_lines) <= WINDOW
    assert sum(len(source) for source, _ in steps) < count * (WINDOW + 40)


def _past_the_window(body: str) -> str:
    """``IS_PRIME`` and ``body`` at the top of a cell, then one long step to the window's end, then
    ``assert len(r) >= 0`` laid out (from the top again) at the line and columns of ``body``'s
    ``assert len(r) == 3``."""
    from polyrl.sandbox.step_lines import WINDOW

    head = IS_PRIME + body
    at = head.splitlines().index("assert len(r) == 3")
    filler = "def _filler():\n" + "    pass\n" * (WINDOW - head.count("\n") - 1)
    return head + filler + "x = 0\n" * at + "assert len(r) >= 0\n"


def test_steps_past_the_window_share_no_place_with_the_steps_before():
    """Past ``WINDOW`` lines the steps start again from the top: a vacuous ``assert len(r) >= 0``
    there stood at the place of the cell's ``assert len(r) == 3``, which was then no reading of the
    tests', and a forged ``primes`` emptied by ``r.reset()`` passed the loop over no items (1.0).
    Each window is a file of its own now (``tests_guard.WINDOW_FILES``): the loop fails (two of the
    three tests pass, as with no step past the window), the right one keeps 1.0."""
    tests = _past_the_window("r = primes(3)\nassert len(r) == 3\nr.reset()\nassert all(is_prime(x) for x in r)\n")
    assert _scored([tests], [FORGED]) == [pytest.approx(2 / 3)]
    assert _scored([tests], [RIGHT]) == [1.0]


def test_each_window_of_steps_is_a_file_of_its_own():
    from polyrl.sandbox.step_lines import WINDOW, laid_out_in_files
    from polyrl.sandbox.tests_guard import TESTS_FILES, WINDOW_FILES

    placed = laid_out_in_files(parse_tests("".join(f"assert f({i}) == {i}\n" for i in range(3 * WINDOW))))
    files = [file for _, _, file in placed]
    assert files == [WINDOW_FILES[0]] * WINDOW + [WINDOW_FILES[1]] * WINDOW + [WINDOW_FILES[2]] * WINDOW
    assert WINDOW_FILES[0] == "<test>" and len(set(WINDOW_FILES)) == len(WINDOW_FILES)
    assert set(WINDOW_FILES) <= TESTS_FILES
    places = {(file, len(source) - len(source.lstrip("\n"))) for source, _, file in placed}
    assert len(places) == len(placed)  # no two steps at one line of one file
