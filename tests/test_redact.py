"""``polyrl.redact``: credentials masked by value and by shape, URLs fit to print, linear time."""

from __future__ import annotations

import functools

import pytest

from polyrl.redact import Redactor, display_url, is_secret_key, url_secrets
from work_meter import measured

pytestmark = pytest.mark.faults


@pytest.mark.parametrize(("text", "secret"), [
    ("Incorrect API key provided: zz-custom-key-991.", "zz-custom-key-991"),  # known: masked by value
    ("Authorization: Bearer abc.def-123", "abc.def-123"),
    ('{"authorization": "Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz"),
    ("bearer tok_abcdef", "tok_abcdef"),
    ('{"api_key": "k-98765"}', "k-98765"),
    ("x-api-key: abcd1234", "abcd1234"),
    ("password=hunter2", "hunter2"),
    ("GET /v1?key=q1w2e3&model=m", "q1w2e3"),
    ("see https://user:pw-4455@host/v1", "pw-4455"),
    ("see https://tok9876@host/v1", "tok9876"),
    ("sk-proj-ABCDEFGHIJKL leaked", "sk-proj-ABCDEFGHIJKL"),
    ("hf_abcdefghijklmnopqrstuv leaked", "hf_abcdefghijklmnopqrstuv"),
])
def test_credentials_are_masked(text, secret):
    out = Redactor.of(["zz-custom-key-991"])(text)
    assert secret not in out and "***" in out, out


def test_ordinary_text_is_left_alone():
    text = "the token limit is 64; max_tokens: 64; Score: 7/10; a basic answer"
    assert Redactor.of([])(text) == text
    assert Redactor.of(["a", "ab"])("a basic answer") == "a basic answer"  # too short to be a secret


def test_display_url_and_url_secrets():
    url = "https://bob:pw-1@judge.example:8443/v1?api-version=2024&sig=s1"
    assert display_url(url) == "https://***@judge.example:8443/v1?api-version=***&sig=***"
    assert sorted(url_secrets(url)) == sorted(["bob", "pw-1", "2024", "s1"])
    assert display_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_redaction_is_linear_on_hostile_text():
    text = "http://" * 20_000 + "a" * 100_000 + "token: " * 10_000 + "Bearer " * 10_000 + "sk-" * 30_000
    redact = Redactor.of(["secret-value"])
    # counted, not timed (tests/work_meter.py): ~21,000 signal checks for these 470 kB today; a
    # pattern that rescans the rest of the text at each "http://" or "Bearer " runs past the budget
    measured(functools.partial(redact, text), budget=len(text) // 2)


@pytest.mark.parametrize(("key", "secret"), [
    ("api_key", True), ("OPENAI_API_KEY", True), ("token", True), ("hf_token", True), ("access_token", True),
    ("client_secret", True), ("password", True), ("private_key", True), ("credentials", True),
    ("max_new_tokens", False), ("max_episode_tokens", False), ("tokenizer", False), ("pad_token", False),
    ("eos_token", False), ("token_budget", False), ("model", False),
])
def test_a_key_is_a_credentials_name_or_not(key, secret):
    """Token counts once were masked as credentials: every tracker's config showed ``***`` for a run's budgets."""
    assert is_secret_key(key) is secret


def test_logs_mask_credentials_by_key_and_keep_token_counts():
    from polyrl.logs import _redact

    event = _redact(None, "info", {"event": "start", "max_new_tokens": "64", "hf_token": "hf-secret-1",
                                   "options": {"access_token": "abc", "tokenizer": "smollm2"}})
    assert event["max_new_tokens"] == "64" and event["hf_token"] == "***"
    assert event["options"] == {"access_token": "***", "tokenizer": "smollm2"}
