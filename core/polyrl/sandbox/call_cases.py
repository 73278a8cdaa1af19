"""Call-based cases: APPS's ``{"fn_name": "f", "inputs": [[1, 2], ...], "outputs": [[3], ...]}``.

Why: APPS (and TACO) mix two kinds of rows in one ``input_output`` column: stdin/stdout programs
(``program_cases``) and rows naming a function, each input the list of its positional arguments.
Such a row was an ``error:`` line, so a real APPS dataset stopped at setup. Each (inputs, output)
pair is now one test step calling ``CALL``: the harness finds the sample's function (its top-level
``fn_name``, else the method of that name of ``Solution()``, as LeetCode rows are written), calls it
over the pipe like any test's call, and compares what came back here (``returns``). The expected
output stays in the trainer.

Comparison, as the APPS/TACO evaluators accept an answer: a returned tuple is read as a list (JSON
has no tuples), an output given as a one-element list also matches its one item unwrapped (APPS
writes ``[3]`` for a function returning 3; APPS's evaluator unwrapped the first item of any list,
so returning 1 passed for ``[1, 2]``: not here), a list of tuples also matches as a list of lists,
and a dict whose JSON keys all read as ints is also compared with int keys (JSON made them str).
"""

from __future__ import annotations

import json
from typing import Any

from polyrl.errors import RewardError
from polyrl.sandbox import program_cases

NAME = "code_tests"
#: The tests' name for "call the sample's function on these arguments, compare its answer" (bound by the harness).
CALL = "__polyrl_call__"


def steps(tests: Any, where: str = "") -> list[str] | None:
    """One test step per case when ``tests`` (or its JSON string) is a call-based APPS row, else None."""
    tests = program_cases.decoded(tests)
    if not isinstance(tests, dict) or not tests.get("fn_name"):
        return None
    name, given, wanted = tests["fn_name"], tests.get("inputs"), tests.get("outputs")
    if not isinstance(name, str) or not name.isidentifier():
        raise RewardError(f"{NAME}: the tests{where} name the function {name!r}, which is no Python name. "
                          "Fix: give fn_name as the solution's function's name")
    if not isinstance(given, list) or not isinstance(wanted, list) or len(given) != len(wanted):
        raise RewardError(f"{NAME}: the call-based tests{where} (fn_name {name!r}) have 'inputs' and 'outputs' that "
                          "are not two lists of the same length. Fix: one output per input")
    out = []
    for args, want in zip(given, wanted):
        if not isinstance(args, (list, tuple)):
            raise RewardError(f"{NAME}: an input of the call-based tests{where} (fn_name {name!r}) is a "
                              f"{type(args).__name__}, not the list of the function's arguments. Fix: write "
                              "each input as a list ([[1, 2]] for f(1, 2))")
        try:
            args_text, want_text = json.dumps(list(args)), json.dumps(want)
        except (TypeError, ValueError, RecursionError):
            raise RewardError(f"{NAME}: a case of the call-based tests{where} (fn_name {name!r}) holds a value "
                              "that is not JSON data. Fix: store inputs and outputs as JSON values") from None
        out.append(f"assert {CALL}({name!r}, {args_text!r}, {want_text!r})\n")
    return out


def arguments(text: str) -> list[Any]:
    """A case's arguments; a first one that is a dict of int-like keys gets int keys (APPS's rule:
    JSON made them str)."""
    args = json.loads(text)
    if args and isinstance(args[0], dict):
        args[0] = _int_keyed(args[0]) or args[0]
    return args


def returns(value: Any, text: str) -> bool:
    """Whether ``value``, what the sample's function returned, is the case's output (module doc)."""
    want = json.loads(text)
    if type(value) is tuple:
        value = list(value)
    mine = [value]
    if type(value) is list and value and all(type(item) is tuple for item in value):
        mine.append([list(item) for item in value])
    accepted = [want]
    if isinstance(want, list) and len(want) == 1:
        accepted.append(want[0])  # never the first of several: returning 1 is no answer to [1, 2]
    accepted += [keyed for one in accepted if isinstance(one, dict) and (keyed := _int_keyed(one)) is not None]
    return any(_same(answer, one) for answer in mine for one in accepted)


def _same(value: Any, want: Any) -> bool:
    """``value == want`` as a plain bool (a sample's value compares by the harness's rules)."""
    answer = value == want
    return answer is True or (type(answer).__module__ == "numpy" and type(answer).__name__ in ("bool_", "bool")
                              and bool(answer))


def _int_keyed(d: dict[Any, Any]) -> dict[int, Any] | None:
    try:
        return {int(k): v for k, v in d.items()}
    except (TypeError, ValueError):
        return None
