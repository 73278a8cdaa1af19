"""The LLM judge red-teamed (session 60), against the scripted OpenAI-compatible server on
127.0.0.1 (``judge_stub.ScriptedJudge``): a cache shared by two servers, a content filter's
refusal of one sample, a verdict that names two scores, a hostile ``Retry-After``, a row without
the value its rubric quotes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from polyrl.errors import RewardError
from polyrl.rewards.judge import judge, parse_score

from judge_stub import ScriptedJudge

pytestmark = pytest.mark.faults


@pytest.fixture()
def stub() -> Iterator[ScriptedJudge]:
    server = ScriptedJudge()
    yield server
    server.close()


def scores(base_url: str, texts: list[str], rows: list[dict[str, Any]] | None = None, **options: Any) -> list:
    opts = {"base_url": base_url, "model": "judge", "backoff_s": 0.01, "retries": 0, "cache_path": "", **options}
    return asyncio.run(judge([f"question {i}" for i in range(len(texts))], texts,
                             rows if rows is not None else [{} for _ in texts], opts))


def test_two_servers_serving_the_same_model_name_do_not_share_cached_scores(tmp_path):
    cache = str(tmp_path / "judge.sqlite3")
    strict, lenient = ScriptedJudge("Score: 2/10"), ScriptedJudge("Score: 9/10")
    try:
        assert scores(strict.base_url, ["an answer"], cache_path=cache) == [pytest.approx(0.2)]
        assert scores(lenient.base_url, ["an answer"], cache_path=cache) == [pytest.approx(0.9)]
        assert lenient.count() == 1  # asked, not served the other server's score
        assert scores(strict.base_url, ["an answer"], cache_path=cache) == [pytest.approx(0.2)]
        assert strict.count() == 1  # its own entry still hits
    finally:
        strict.close()
        lenient.close()


@pytest.mark.parametrize("reply", ["Score: 7, 8", "Score: 7 or 8", "Score: 7-8", "Score: 7 to 8/10", "Score: 7 8",
                                   "Score 0-10: 7"])
def test_a_verdict_naming_two_scores_is_ambiguous_not_its_first(reply):
    assert parse_score(reply) is None


@pytest.mark.parametrize(("reply", "expected"), [("Score: 7, 7", 0.7), ("Score: 8/10 - 2 minor issues", 0.8),
                                                 ("Score: 7. 3 issues remain.", 0.7), ("Score: 7 (10 is best)", 0.7),
                                                 ("Score: 7\n2. Clarity: fine", 0.7), ("Rating (0-10): 6", 0.6)])
def test_a_verdict_followed_by_other_text_still_reads(reply, expected):
    assert parse_score(reply) == pytest.approx(expected)
