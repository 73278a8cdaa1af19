"""APPS's call-based cases: ``{"fn_name": "f", "inputs": [[args...], ...], "outputs": [...]}``.

On integ such a row was an ``error:`` line ("call-based APPS cases, which code_tests does not
read"), and since APPS mixes them with stdin/stdout rows in one column a real APPS dataset stopped
at setup. Each case now calls the sample's function (or ``Solution().<fn_name>``) with the inputs
as positional arguments and compares what came back in the trainer, accepting an output written as
a one-element list unwrapped and a returned tuple as a list, as the APPS/TACO evaluators do
(``polyrl.sandbox.call_cases``). Scored through the real reward path, every sample of a test in one
reward call."""

from __future__ import annotations

import json

import pytest
from test_sandbox_emptied_values import _each_scored

from polyrl.errors import RewardError

pytestmark = pytest.mark.faults

#: add(a, b): outputs wrapped in a one-element list (APPS's usual shape), one bare, one a tuple's list.
_ADD = json.dumps({"fn_name": "add", "inputs": [[1, 2], [10, -3]], "outputs": [[3], 7]})
_PAIR = json.dumps({"fn_name": "pair", "inputs": [[1], [5]], "outputs": [[[1, 2]], [[5, 6]]]})
_PAIRS = json.dumps({"fn_name": "pairs", "inputs": [[2]], "outputs": [[[[0, 1], [1, 2]]]]})
_COUNT = json.dumps({"fn_name": "count", "inputs": [[{"1": "a", "2": "b"}]], "outputs": [{"1": 1, "2": 1}]})
_RIGHT = {
    "function": (_ADD, "def add(a, b):\n    return a + b\n"),
    "solution_class": (_ADD, "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"),
    "returns_a_tuple": (_PAIR, "def pair(x):\n    return (x, x + 1)\n"),
    "returns_tuples": (_PAIRS, "def pairs(n):\n    return [(i, i + 1) for i in range(n)]\n"),
    "int_keys": (_COUNT, "def count(d):\n    assert all(type(k) is int for k in d)\n    return {k: 1 for k in d}\n"),
    "stdin_row_beside": (json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), "print(sum(map(int, input().split())))\n"),
}
#: Wrong samples trying the new path: an answer equal to everything (a function's, a Solution's),
#: a list subclass equal to everything, one binding the tests' checker's name,
#: one reading the request the server got (the expected output is not in it), exiting early (with
#: success, or killing itself), printing the answer instead of returning it, and one right answer
#: of two (half).
_FORGED = {
    "eq_always": "class A:\n    __eq__ = lambda self, other: True\n    __hash__ = object.__hash__\n"
                 "def add(a, b):\n    return A()\n",
    "eq_always_list": "class A:\n    __eq__ = lambda self, other: True\ndef add(a, b):\n    return [A()]\n",
    "eq_always_solution": "class A(int):\n    __eq__ = lambda self, other: True\nclass Solution:\n"
                          "    def add(self, a, b):\n        return A(0)\n",
    "reads_the_request": ("import sys\ndef add(a, b):\n    f = sys._getframe()\n    while f is not None:\n"
                          "        for v in f.f_locals.values():\n            if isinstance(v, dict) and 'op' in v:\n"
                          "                return v\n        f = f.f_back\n"),
    "exits_zero": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "os_exit": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "prints": "def add(a, b):\n    print([a + b])\n    print(a + b)\n",
    "eq_always_list_subclass": "class L(list):\n    __eq__ = lambda self, other: True\ndef add(a, b):\n    return L()\n",
    "defines_the_checker": "__polyrl_call__ = lambda *args: True\ndef add(a, b):\n    return 0\n",
}


def test_call_based_rows_call_the_function_and_compare_as_apps_does():
    """On integ each was an error: line at setup (call-based rows not read)."""
    assert _each_scored(_RIGHT) == dict.fromkeys(_RIGHT, 1.0)


def test_a_wrong_sample_through_call_based_cases_scores_zero():
    """On integ every one was the same setup error; the new path pays none (and half for one right of two)."""
    cases = {name: (_ADD, code) for name, code in _FORGED.items()}
    cases["one_of_two"] = (_ADD, "def add(a, b):\n    return 3\n")
    assert _each_scored(cases) == {**dict.fromkeys(_FORGED, 0.0), "one_of_two": 0.5}


def test_call_based_cases_are_read_and_bad_ones_are_errors():
    from polyrl.sandbox import call_cases

    assert call_cases.steps(_ADD) == [f"assert {call_cases.CALL}('add', '[1, 2]', '[3]')\n",
                                      f"assert {call_cases.CALL}('add', '[10, -3]', '7')\n"]
    assert call_cases.steps({"inputs": ["1"], "outputs": ["1"]}) is None and call_cases.steps("assert f(1)") is None
    assert call_cases.returns(3, "[3]") and call_cases.returns([3], "[3]") and not call_cases.returns([[3]], "[3]")
    assert call_cases.returns((1, 2), "[1, 2]") and call_cases.returns((1, 2), "[[1, 2]]")
    assert not call_cases.returns(None, "[]") and call_cases.returns([], "[]") and not call_cases.returns(3, "[]")
    assert not call_cases.returns(1, "[1, 2]") and call_cases.returns([(0, 1), (1, 2)], "[[0, 1], [1, 2]]")
    assert call_cases.returns({1: 1}, '{"1": 1}') and call_cases.returns({1: 1}, '[{"1": 1}]')
    assert call_cases.arguments('[{"1": 2}, {"a": 1}]') == [{1: 2}, {"a": 1}]
    for bad, says in (({"fn_name": "f", "inputs": [[1]], "outputs": []}, "same length"),
                      ({"fn_name": "f x", "inputs": [], "outputs": []}, "no Python name"),
                      ({"fn_name": "f", "inputs": [1], "outputs": [1]}, "list of the function's arguments"),
                      ({"fn_name": "f", "inputs": [[{1, 2}]], "outputs": [1]}, "not JSON data")):
        with pytest.raises(RewardError, match=says):
            call_cases.steps(bad, " of row 0")


def test_tests_nested_past_the_json_decoders_depth_are_one_error_line():
    """On integ a tests cell starting with "{" nested some thousand deep raised RecursionError out of
    ``json.loads`` (call_cases, program_cases), and a case nested so deep out of ``json.dumps``: a
    traceback at setup where main named the row ("not valid Python")."""
    from polyrl.rewards.test_cells import parse_tests

    deep_text = '{"fn_name": "f", "inputs": [' + "[" * 100_000 + "]" * 100_000 + '], "outputs": [1]}'
    with pytest.raises(RewardError, match="of row 3 are not valid Python"):
        parse_tests(deep_text, " of row 3")
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RewardError, match="of row 3 .* holds a value that is not JSON data"):
        parse_tests({"fn_name": "f", "inputs": [[deep]], "outputs": [1]}, " of row 3")
