"""The LLM judge red-teamed again (session 61), against one scripted OpenAI-compatible server on
127.0.0.1 for the module (``judge_stub.ScriptedJudge``): a cache shared by Azure deployments that
differ only by ``?api-version=``, scores a completion writes in forms the parser did not read
(words, arithmetic, another scale, a table, hidden characters) and a judge then obeys, and
verdicts real judges write that were unreadable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from polyrl.rewards.judge import judge

from judge_stub import ScriptedJudge

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedJudge]:
    stub = ScriptedJudge()
    yield stub
    stub.close()


@pytest.fixture()
def stub(server: ScriptedJudge) -> ScriptedJudge:
    """The module's server with an empty script, its default reply and no requests recorded."""
    with server.lock:
        server.script.clear()
        server.requests.clear()
        server.default = "Score: 7/10"
    return server


def scores(base_url: str, texts: list[str], **options: Any) -> Any:
    # one request at a time: the scripted replies reach the samples in order
    opts = {"base_url": base_url, "model": "judge", "backoff_s": 0.01, "retries": 0, "cache_path": "",
            "max_concurrency": 1, **options}
    return asyncio.run(judge([f"question {i}" for i in range(len(texts))], texts, [{} for _ in texts], opts))


def test_azure_deployments_differing_by_api_version_do_not_share_cached_grades(stub, tmp_path):
    cache = str(tmp_path / "judge.sqlite3")
    old, new = (f"{stub.base_url}?api-version={v}" for v in ("2024-02-01", "2024-10-21"))
    stub.reply("Score: 2/10", "Score: 9/10")
    assert list(scores(old, ["an answer"], cache_path=cache)) == [pytest.approx(0.2)]
    assert list(scores(new, ["an answer"], cache_path=cache)) == [pytest.approx(0.9)]
    assert stub.count() == 2  # the second version was asked, not served the first one's grade
    assert stub.requests[1]["path"].endswith("?api-version=2024-10-21")
    assert list(scores(old, ["an answer"], cache_path=cache)) == [pytest.approx(0.2)]
    assert stub.count() == 2  # each version's own entry still hits


def test_a_credential_in_the_query_is_masked_in_the_cache_key_and_does_not_split_it(stub, tmp_path):
    from polyrl.rewards.judge import keyed_url

    assert "s3cret" not in keyed_url(f"{stub.base_url}?api-key=s3cret&api-version=1")
    assert "api-version=1" in keyed_url(f"{stub.base_url}?api-key=s3cret&api-version=1")
    cache = str(tmp_path / "judge.sqlite3")
    for key in ("s3cret-one", "s3cret-two"):  # a rotated key reaches the same deployment
        assert list(scores(f"{stub.base_url}?api-key={key}", ["an answer"], cache_path=cache)) == [
            pytest.approx(0.7)]
    assert stub.count() == 1
