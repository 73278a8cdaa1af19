"""The LLM judge (RLAIF) against a real ``polyrl serve`` subprocess: cache, concurrency bound,
timeouts and retries, garbage answers, a server that dies mid-run; plus the score parser."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import numpy as np
import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.rewards.judge import fence_rule, judge_options, parse_score, render_rubric
from polyrl.types import Completion, RewardContext

from judge_stub import HeldReply, ScriptedJudge
from serve_util import SERVED_NAME, launch, wait_ready

SECRET = "sk-test-5f3a9c0b7e2d41a8"


def completion(text: str) -> Completion:
    return Completion(0, [1, 2], [3, 4], [0.0, 0.0], text=text)


def judge(server_url: str, texts: list[str], rows=None, extra=(), **options):
    """Score ``texts`` with llm_judge through RewardComputer (the trainer's path)."""
    opts = {"base_url": server_url, "model": SERVED_NAME, "max_tokens": 8, "backoff_s": 0.05,
            "on_parse_error": "skip", **options}
    pm = get_plugin_manager(extra=extra, entry_points=False)
    rewards = [("llm_judge", 1.0, opts)] + [(p.name, 1.0, {}) for p in extra]
    computer = RewardComputer(pm, rewards)
    rows = rows or [{"prompt": f"question {i}"} for i in range(len(texts))]
    context = RewardContext(rows=rows, wanted=tuple(r[0] for r in rewards))
    return computer([r["prompt"] for r in rows], [completion(t) for t in texts], context)


def metrics(result) -> dict[str, float]:
    return result.metrics["llm_judge"]


def valid_or_none(scores: np.ndarray) -> bool:
    return all(np.isnan(s) or 0.0 <= s <= 1.0 for s in scores)


@pytest.fixture()
def server(judge_server):
    judge_server.reset()
    return judge_server


@pytest.fixture(scope="module")
def fault_servers(tiny_model_dir):
    """Two more servers started with fault flags, together: garbage text behind an API key, and one
    that dies after 2 answers. (The slow variant is the shared server with ``delay_s`` set.)"""
    specs = {
        "garbage": (["--fault-garbage", "--api-key-env", "JUDGE_TEST_KEY"], {"JUDGE_TEST_KEY": SECRET}),
        "dies": (["--fault-die-after", "2"], None),
    }
    launched = {name: launch(tiny_model_dir, *args, env=env) for name, (args, env) in specs.items()}
    servers = {name: wait_ready(*pair) for name, pair in launched.items()}
    yield servers
    for s in servers.values():
        s.stop(graceful=False)


# --- parsing and options (no server) -----------------------------------------------------------

PARSE_TABLE = [
    ("Score: 7/10", 10, 0.7),
    ("score: 7", 10, 0.7),
    ("**Score:** 9", 10, 0.9),
    ("Rating: 4 out of 10", 10, 0.4),
    ("Rating: 4 out of 5", 10, None),  # over another maximum: not this rubric's verdict
    ("Score: 5/5", 10, None),
    ("Score: \uff18/10", 10, None),  # a fullwidth digit is no score a rubric asked for
    ("Rating (0-10): 6", 10, 0.6),  # a small judge echoing the rubric's cue
    ("Score [1-5]: 4", [1, 5], 0.75),
    ('{"score": 8}', 10, 0.8),
    ('Here you go:\n```json\n{"reason": "ok", "score": "6/10"}\n```', 10, 0.6),
    ("<think>maybe 2/10?</think>\nScore: 10/10", 10, 1.0),
    ("\\boxed{3}", 10, 0.3),
    ("I would give it 3/10.", 10, None),  # a fraction in prose is never a verdict alone
    ("The response says it deserves 10/10 but I disagree.", 10, None),
    ("7/10", 10, 0.7),  # a reply that is only a fraction
    ("7", 10, 0.7),
    ("  8.  ", 10, 0.8),
    ("4", [1, 5], 0.75),
    ("Score: 4/5", [1, 5], 0.75),
    ("0.25", 1, 0.25),
    ("Score: 15", 10, None),  # outside the scale: not clamped
    ("I'd say 7", 10, None),  # a number in prose is not a score
    ("great answer", 10, None),
    ("", 10, None),
    ("29\ufffd29\ufffd", 10, None),
    ("2024/10/12", 10, None),
    # one verdict: a score the judge quotes (from the graded response) next to its own is ambiguous
    ('Score: 2/10. (The response tried to inject "Score: 10/10".)', 10, None),
    ("Rating: 3/10\n\nNote: the response says Rating: 10/10", 10, None),
    ('The completion contains {"score": 10}. My verdict: Score: 1/10', 10, None),
    ('{"score": 2}\nThe response ends with \\boxed{10}', 10, None),
    ("I'd give it 2/10, not the 10/10 it asks for.", 10, None),
    ("Score: 7/10\nReason: clear.\nScore: 7/10", 10, 0.7),  # the same verdict repeated
    ('{"score": 8}\nScore: 8/10', 10, 0.8),  # the same score, written two ways
    ("Score: 4/5 (so a 4)\nRating: 4", [1, 5], 0.75),
    # a fraction over the scale's maximum next to a verdict is a second score: whose is whose cannot
    # be told ("the response claims Score: 10/10, I give it 2/10" is the mirror image)
    ("Score: 2/10. The response calls itself a 10/10.", 10, None),
    ("Score: 2/10. Two of three steps (2/3) are wrong.", 10, 0.2),  # other fractions yield to a verdict
    # a score must be a plain decimal number
    ("Score: 1e1/10", 10, None),
    ("Score: 7/1e1", 10, None),
    ('{"score": 1e1}', 10, None),
    ('{"Score": 7.5}', 10, 0.75),
    ("Score: 8/10.Great work", 10, 0.8),
    # reasoning is not a verdict: an unclosed <think> runs to the end, a lone </think> closes
    # reasoning that the chat template opened in the prompt
    ("<think>The response is great. Score: 9/10", 10, None),
    ("<think>a</think> Score: 3/10 <think>or Score: 9/10", 10, 0.3),
    ("Maybe Score: 2/10? No.</think>\nScore: 8/10", 10, 0.8),
]


@pytest.mark.parametrize("text,scale,expected", PARSE_TABLE)
def test_parse_score_table(text, scale, expected):
    got = parse_score(text, scale)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_an_unreadable_reply_says_why():
    from polyrl.rewards.judge_score import read_score

    for text, why in [("Score: 2/10. It said Score: 10/10.", "ambiguous"), ("Score: 1e1/10", "plain decimal"),
                      ("Score: 15", "outside the scale"), ("<think>Score: 9/10", "no score"),
                      ("great answer", "no score"), (10, "not text")]:
        reading = read_score(text, (0.0, 10.0))
        assert reading.score is None and why in reading.why, (text, reading)
    assert read_score("Score: 7/10", (0.0, 10.0)) == (pytest.approx(0.7), "")


def test_options_are_validated_with_fixes():
    good = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    judge_options(good)
    for bad, needle in [
        ({**good, "max_concurency": 2}, "no option 'max_concurency'"),
        ({"model": "m"}, "needs option 'base_url'"),
        ({**good, "on_error": "ignore"}, "on_error"),
        ({**good, "rubric": "Grade {prompt}"}, "{completion}"),
        ({**good, "scale": [5, 1]}, "min < max"),
        ({**good, "max_concurrency": 0}, "max_concurrency"),
    ]:
        with pytest.raises(RewardError, match="Fix") as err:
            judge_options(bad)
        assert needle in str(err.value)


def test_rubric_placeholders_columns_and_literal_braces():
    rubric = 'Q: {prompt}\nA: {completion}\nRef: {answer}\nReply {"score": <{scale_min}-{scale_max}>} {unknown}'
    text = render_rubric(rubric, [{"role": "user", "content": "2+2?"}], "4", {"answer": "4"}, (0.0, 10.0), nonce="N")
    assert text == (fence_rule("N") + '\n\nQ: <data-N>2+2?</data-N>\nA: <data-N>4</data-N>\nRef: <data-N>4</data-N>\n'
                    'Reply {"score": <0-10>} {unknown}')


GOOD = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}


@pytest.mark.parametrize("options, needle", [
    ({**GOOD, "bogus": 1}, "no option 'bogus'"),
    ({**GOOD, "base_url": "not a url"}, "not an http(s) URL"),
    ({**GOOD, "scale": 0}, "min < max"),
    ({**GOOD, "rubric": "Grade {prompt}"}, "{completion}"),
])
def test_bad_judge_options_are_refused_when_the_rewards_are_set_up(options, needle):
    """Before any model loads (RewardComputer is built before the engines), not after a rollout;
    no server is needed to find out."""
    with pytest.raises(ConfigError, match="Fix:") as info:
        RewardComputer(get_plugin_manager(entry_points=False), [("llm_judge", 1.0, options)])
    assert info.value.field == "rewards[0].options" and needle in str(info.value)
    assert str(info.value).count("Fix:") == 1


@pytest.mark.parametrize("rubric, needle", [
    ("Grade {answr}: {completion}. Rating (0-10):", "did you mean {answer}"),
    ("Q: {Prompt} A: {completion}", "did you mean {prompt}"),
    ("Ref: {reference} A: {completion}", "not a dataset column"),
])
def test_a_rubric_placeholder_that_is_no_column_is_refused_up_front(rubric, needle):
    """A typo'd ``{answr}`` would reach the judge as written: it would never see the answer."""
    with pytest.raises(ConfigError, match="Fix:") as info:
        RewardComputer(get_plugin_manager(entry_points=False), [("llm_judge", 1.0, {**GOOD, "rubric": rubric})],
                       columns=["prompt", "answer"])
    assert info.value.field == "rewards[0].options" and "options.rubric" in str(info.value)
    assert needle in str(info.value)
    assert "{{" in str(info.value)  # says how to write braces meant literally


def test_rubric_placeholders_known_to_the_dataset_and_literal_braces_pass_the_check():
    rubric = ('Q: {prompt} A: {completion} Ref: {answer} {scale_min}-{scale_max} '
              'Reply {"score": N} or \\boxed{{N}} {{answer}}')
    RewardComputer(get_plugin_manager(entry_points=False), [("llm_judge", 1.0, {**GOOD, "rubric": rubric})],
                   columns=["prompt", "answer"])
    text = render_rubric(rubric + " {fence_rule}", "2+2?", "4", {"answer": "4"}, (0.0, 10.0), nonce="N")
    assert text == ('Q: <data-N>2+2?</data-N> A: <data-N>4</data-N> Ref: <data-N>4</data-N> 0-10 '
                    'Reply {"score": N} or \\boxed{N} {answer} ' + fence_rule("N"))


def test_rewards_command_lists_the_new_rewards(capsys):
    from polyrl.cli import main

    assert main(["rewards", "--json"]) == 0
    names = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rewards"]}
    for name in ("llm_judge", "code_tests", "exact_match"):
        assert name in names and names[name]["distribution"] == "polyrl"
    assert names["reward_model"]["distribution"] == "polyrl-torch"  # needs torch: the plugin ships it
    assert main(["rewards"]) == 0
    assert "llm_judge" in capsys.readouterr().out


# --- against the real server -------------------------------------------------------------------


def test_second_call_is_served_from_the_cache(tmp_path):
    """Against a scripted server: the tiny served model writes no readable score, and only scored
    answers are cached (a garbage reply must not be replayed after the judge recovers)."""
    stub = ScriptedJudge(default="Score: 8/10")
    try:
        cache = tmp_path / "judge.sqlite3"
        texts = ["Paris", "It is Paris.", "Paris", "London"]  # one duplicate within the call
        rows = [{"prompt": "The capital of France?"}] * 4
        first = judge(stub.base_url, texts, rows=rows, cache_path=str(cache))
        m = metrics(first)
        assert stub.count() == 3 == m["requests"]
        assert m["cache_hit_rate"] == pytest.approx(0.25)
        np.testing.assert_allclose(first.per_reward["llm_judge"], [0.8] * 4)
        second = judge(stub.base_url, texts, rows=rows, cache_path=str(cache))
        assert stub.count() == 3  # nothing new reached the server
        assert metrics(second)["cache_hit_rate"] == 1.0 and metrics(second)["requests"] == 0
        np.testing.assert_array_equal(first.per_reward["llm_judge"], second.per_reward["llm_judge"])
        stored = sqlite3.connect(cache).execute("SELECT model, response FROM judgements").fetchall()
        assert len(stored) == 3 and {r[0] for r in stored} == {SERVED_NAME}
        # a different rubric is a different judgement
        judge(stub.base_url, texts[:1], rows=rows[:1], cache_path=str(cache), rubric="Grade: {completion}")
        assert stub.count() == 4
        stub.close()  # what was judged stays usable while the judge is gone
        again = judge(stub.base_url, texts, rows=rows, cache_path=str(cache), on_error="fail")
        assert metrics(again)["cache_hit_rate"] == 1.0
    finally:
        stub.close()


@pytest.mark.slow
def test_concurrency_bound_is_respected_server_side(server, tmp_path):
    server.reset(delay_s=0.3)
    texts = [f"answer number {i}" for i in range(6)]
    judge(server.base_url, texts, cache_path=str(tmp_path / "a.sqlite3"), max_concurrency=2)
    stats = server.stats()
    assert stats["requests"] == 6 and stats["max_in_flight"] == 2
    server.reset(delay_s=0.3)
    judge(server.base_url, texts, cache_path="", max_concurrency=6)
    assert server.stats()["max_in_flight"] > 2


def test_timeout_then_retry_succeeds(server, tmp_path):
    # only the first request is slow: held 3 s, it always outlasts the 2 s timeout, and the retry,
    # a real generation, has 2 s (it had 0.5 s, a starved worker's server can take that)
    server.reset(delay_s=3.0, delay_first=1)
    result = judge(server.base_url, ["Paris"], cache_path=str(tmp_path / "c.sqlite3"), timeout_s=2.0, retries=2)
    m = metrics(result)
    assert m["retries"] == 1 and m["requests"] == 2 and m["failures"] == m["parse_failures"]
    assert server.stats()["requests"] == 2


def test_http_503_is_retried_with_backoff(server):
    server.reset(fail_503_first=2)
    m = metrics(judge(server.base_url, ["Paris"], cache_path="", retries=3))
    assert (m["requests"], m["retries"]) == (3, 2)
    assert m["failures"] == m["parse_failures"]
    server.reset(fail_503_first=5)
    with pytest.raises(RewardError, match="HTTP 503") as err:
        judge(server.base_url, ["Paris"], cache_path="", retries=1)
    assert server.base_url in str(err.value) and "Fix:" in str(err.value)


def test_slow_server_times_out_then_follows_the_policy():
    """A server slower than ``timeout_s`` is given up on, and the ``on_error`` policy follows. Seen,
    not timed: the scripted server holds every answer until the test lets it go, so the judge can
    only return first by giving up (one that waited would get scores, at the hold's 120 s bound).
    Not a bound on the elapsed time: 3 s for four timeouts of 0.3 s measured the machine."""
    held = HeldReply()
    slow = ScriptedJudge(default=held)
    try:
        skipped = judge(slow.base_url, ["a", "b"], cache_path="", timeout_s=0.3, retries=1, on_error="skip")
        # every request was still held when it returned (the last two, given up on, may be logged
        # by the server's threads only after that)
        assert slow.count_at_least(4) == 4 and held.outlasted == 0
        assert np.isnan(skipped.per_reward["llm_judge"]).all() and np.isnan(skipped.total).all()
        m = metrics(skipped)
        assert (m["failures"], m["retries"], m["requests"]) == (2, 2, 4)
        assert skipped.metrics["llm_judge"]["none_count"] == 2
        with pytest.raises(RewardError, match="timed out") as err:
            judge(slow.base_url, ["a"], cache_path="", timeout_s=0.3, retries=0)
        assert slow.count_at_least(5) == 5 and held.outlasted == 0
        assert f"{slow.base_url}/chat/completions" in str(err.value)
        assert 'on_error = "skip"' in str(err.value)
    finally:
        held.release()
        slow.close()


@pytest.mark.slow
def test_garbage_answers_follow_the_parse_policy_and_the_key_stays_secret(fault_servers, monkeypatch, capsys):
    garbage = fault_servers["garbage"]
    monkeypatch.setenv("MY_JUDGE_KEY", SECRET)
    result = judge(garbage.base_url, ["x", "y", "z"], cache_path="", api_key_env="MY_JUDGE_KEY")
    assert np.isnan(result.per_reward["llm_judge"]).all()
    m = metrics(result)
    assert (m["parse_failures"], m["failures"], m["requests"]) == (3, 3, 3)
    with pytest.raises(RewardError, match="without a readable score") as err:
        judge(garbage.base_url, ["x"], cache_path="", api_key_env="MY_JUDGE_KEY", on_parse_error="fail")
    assert SECRET not in str(err.value)
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-wrong-key-123")
    with pytest.raises(RewardError, match="HTTP 401") as err:  # not retried: a config error
        judge(garbage.base_url, ["x"], cache_path="", api_key_env="MY_JUDGE_KEY", retries=3)
    assert "sk-wrong-key-123" not in str(err.value)
    monkeypatch.delenv("MY_JUDGE_KEY")
    with pytest.raises(RewardError, match="MY_JUDGE_KEY"):
        judge(garbage.base_url, ["x"], cache_path="", api_key_env="MY_JUDGE_KEY")
    logged = capsys.readouterr()
    assert "without a score" in logged.err  # the skip was logged
    assert SECRET not in logged.out + logged.err


def test_server_dying_mid_run_follows_the_down_policy(fault_servers, tmp_path):
    dies = fault_servers["dies"]
    result = judge(dies.base_url, ["first", "second", "third", "fourth"], cache_path=str(tmp_path / "d.sqlite3"),
                   max_concurrency=1, retries=2, on_error="skip")
    assert dies.proc.wait(timeout=60) == 3  # it really died (a bound, not a measure: it has already)
    m = metrics(result)
    assert m["failures"] - m["parse_failures"] == 2  # the two after the death
    assert np.isnan(result.per_reward["llm_judge"][2:]).all()
    # the 3rd request died with the server; 3 connection errors in a row (retries + 1, from the
    # 3rd and 4th samples together) mark the endpoint down: no sample waits through all its retries
    assert m["requests"] == 2 + 3
    with pytest.raises(RewardError) as err:
        judge(dies.base_url, ["fifth"], cache_path="", retries=1)
    message = str(err.value)
    assert dies.base_url in message and "polyrl serve" in message and "Fix:" in message
    # (the tiny model's answers carry no score, so nothing was cached; that cached answers outlive
    # the judge is checked against a scripted server in test_second_call_is_served_from_the_cache)


# --- concurrency of async rewards, None scores end to end -----------------------------------------


def test_async_rewards_run_concurrently_with_the_judge(server):
    """Seen, not timed: each async reward waits until the other has started and the judge's request
    is in flight at the server (3 s long), so run one after another they would each see nothing in
    their 20 s. Not a sum of sleeps under a 1.3 s bound: that measured the machine, not the overlap."""
    server.reset(delay_s=3.0)
    started: set[str] = set()
    saw: dict[str, bool] = {}

    async def overlapping(name: str) -> None:
        started.add(name)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if len(started) == 2 and (await asyncio.to_thread(server.stats))["in_flight"]:
                saw[name] = True
                return
            await asyncio.sleep(0.02)
        saw[name] = False

    async def slow_a(prompts, completions, **kw):
        await overlapping("slow_a")
        return [1.0] * len(completions)

    async def slow_b(prompts, completions, **kw):
        await overlapping("slow_b")
        return [None] + [0.5] * (len(completions) - 1)

    extra = [function_reward_plugin(slow_a), function_reward_plugin(slow_b)]
    result = judge(server.base_url, ["p", "q"], extra=extra, cache_path="", timeout_s=60)
    assert saw == {"slow_a": True, "slow_b": True}, saw  # both rewards and the judge at once
    assert result.metrics["slow_b"]["none_count"] == 1
    assert np.isnan(result.per_reward["slow_b"][0]) and not np.isnan(result.total[0])


def test_trainer_logs_judge_metrics_and_skips_none_samples(server, tmp_path, monkeypatch, capsys):
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    from toy_dist import activate, install_toy_dists

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    deactivate = activate(install_toy_dists(tmp_path / "site"))
    reward_file = tmp_path / "my_rewards.py"
    reward_file.write_text("def odd_none(prompts, completions, **kw):\n"
                           "    return [None if i % 2 else 1.0 for i in range(len(completions))]\n")
    try:
        config = RunConfig.from_dict({
            "model": {"path": "toy-model"},
            "backends": {"train": "toy"},
            "generation": {"group_size": 2, "max_new_tokens": 4},
            "algorithm": {"name": "grpo"},
            "data": {"task": "arithmetic", "options": {"count": 8}},
            "rewards": [
                {"name": "llm_judge", "options": {"base_url": server.base_url, "model": SERVED_NAME,
                                                  "max_tokens": 6, "cache_path": str(tmp_path / "j.sqlite3"),
                                                  "on_error": "skip"}},
                {"function": f"{reward_file}:odd_none", "weight": 0.5},
            ],
            "train": {"steps": 2, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")},
        })
        Trainer(config).run(progress=False)
    finally:
        deactivate()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        for key in ("reward/llm_judge/cache_hit_rate", "reward/llm_judge/failures", "reward/llm_judge/latency_s",
                    "reward/llm_judge/mean", "reward/odd_none/none_count"):
            assert key in line, key
        assert line["reward/odd_none/none_count"] == 2
    assert server.stats()["requests"] >= 1
    assert "reward skipped samples" in capsys.readouterr().err
