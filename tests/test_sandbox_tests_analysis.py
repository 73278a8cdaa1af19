"""The tests' text is analysed once per distinct tests, not once per sample (``polyrl.sandbox.tests_analysis``).

Why it matters: the samples of one prompt share its tests, and each sample's run parsed and walked
them some dozen times (~70 ms a sample on CI's machine). The verdicts must not change: a forged
sample beside honest ones of the same tests still scores 0.
"""

from __future__ import annotations

import ast

import pytest
from test_sandbox_verdict import score

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits

TESTS = "assert add(1, 2) == 3\nfor a, b in [(1, 2), (3, 4)]:\n    assert add(a, b) == a + b\n"
HONEST = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def in_trainer() -> Sandbox:
    return Sandbox(SandboxLimits(timeout_s=6, memory_mb=512), tests_in="trainer")


def test_a_second_sample_of_the_same_tests_parses_none_of_them(in_trainer, monkeypatch):
    """Where the tests run in this process, the second sample's run parses none of the tests'
    steps (its first one did: the analysis is kept, keyed by their text)."""
    steps = parse_tests(TESTS + "assert add(0, 7) == 7  # this test's own text\n")
    assert in_trainer.run(HONEST, steps).fraction == 1.0
    texts = {source for source, _ in steps}
    parsed: list[str] = []
    real_parse = ast.parse

    def counting(source, *args, **kwargs):
        if isinstance(source, str) and source.strip() in {t.strip() for t in texts}:
            parsed.append(source)
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    result = in_trainer.run(HONEST, steps)
    assert result.fraction == 1.0, result
    assert parsed == []


def test_one_call_analyses_its_shared_tests_once_and_forgeries_still_score_zero(monkeypatch):
    """A call of several samples of one row's tests (the tests in forked copies, the default):
    the trainer analyses them once before forking, and a forged sample among honest ones still scores 0."""
    from polyrl.sandbox import tests_analysis

    calls: list[int] = []
    real = tests_analysis.analyse

    def counted(steps, setup):
        calls.append(1)
        return real(steps, setup)

    monkeypatch.setattr(tests_analysis, "analyse", counted)
    tests = TESTS + "assert add(2, 9) == 11  # unseen before this test\n"
    forged = "class Always:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Always()\n"
    rows = [{"prompt": "p", "tests": tests}] * 4
    assert score([HONEST, forged, HONEST, "def add(a, b):\n    return a - b\n"], rows=rows).total.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert calls == [1]


def test_the_cache_is_bounded_and_drops_the_least_recently_used(monkeypatch):
    from polyrl.sandbox import tests_analysis

    monkeypatch.setattr(tests_analysis, "MAX_KEPT", 2)
    tests_analysis.clear()
    one, two, three = ([(f"assert f({i}) == {i}", True)] for i in range(3))
    first = tests_analysis.analysed(one, "")
    tests_analysis.analysed(two, "")
    assert tests_analysis.analysed(one, "") is first  # used again: now the most recent
    tests_analysis.analysed(three, "")
    kept = [steps for steps, _ in tests_analysis._kept]
    assert kept == [tuple(one), tuple(three)]
    assert tests_analysis.analysed(one, "setup = 1") is not first  # the setup is part of the key


def test_an_analysis_that_raises_costs_that_sample_only(monkeypatch):
    """Analysing the tests raising in the trainer (before the fork) is the sample's crash, as it
    was when the tests' copy analysed them: 0, never the reward call's error."""
    from polyrl.sandbox import tests_analysis

    def broken(steps, setup):
        raise RecursionError("nested too deep")

    monkeypatch.setattr(tests_analysis, "analyse", broken)
    rows = [{"prompt": "p", "tests": TESTS + "assert add(5, 5) == 10  # unseen\n"}]
    assert score([HONEST], rows=rows).total.tolist() == [0.0]
