"""``polyrl.http_limits.CappedBody``: the byte cap the remote backend and the LLM judge read replies under."""

from __future__ import annotations

import pytest

from polyrl.http_limits import CappedBody, ReplyTooLarge, retry_after_s


def test_a_declared_length_over_the_cap_fails_before_any_byte_is_read():
    with pytest.raises(ReplyTooLarge) as err:
        CappedBody(100, "101")
    assert err.value.declared == 101
    assert err.value.describe("options.max_reply_bytes") == "a reply of 101 bytes is over options.max_reply_bytes = 100"
    for header in ("100", None, "", "not-a-number", "-5", "\u00b2", "\u0661\u0660\u0660\u0660"):  # at the cap, absent or unreadable: count the bytes
        CappedBody(100, header)


def test_the_bytes_read_are_kept_up_to_the_cap_and_refused_one_past_it():
    body = CappedBody(10, None)
    for chunk in (b"abcd", b"", b"efghij"):
        body.feed(chunk)
    assert body.body() == b"abcdefghij" and body.size == 10
    with pytest.raises(ReplyTooLarge) as err:
        body.feed(b"k")
    assert err.value.declared is None
    assert err.value.describe("backends.options.max_reply_bytes") == "the reply passed backends.options.max_reply_bytes = 10"
    assert body.body() == b"abcdefghij"  # the chunk past the cap is not held


def test_a_retry_after_of_other_than_ascii_digits_is_unreadable_not_an_error():
    """``"²"`` passed ``str.isdigit`` and ``float()`` raised: a busy server's 503 with it failed the
    attempt with a ValueError instead of being retried; ``"١"`` (Arabic-Indic one) read as 1 s."""
    for header in ("\u00b2", "\u0661", "\uff11\uff12"):
        assert retry_after_s({"retry-after": header}, 10.0) == 0.0
        CappedBody(1, header)  # an unreadable Content-Length: the bytes are counted instead
    assert retry_after_s({"retry-after": "3"}, 10.0) == 3.0 and retry_after_s({"retry-after": "99"}, 10.0) == 10.0


def test_header_integers_are_ascii_digits_only():
    from polyrl.http_limits import header_integer

    assert [header_integer(v) for v in ("120", "0", "", " 5", "-5", "1.5", "\u00b2", "\u0661")] == [
        120, 0, None, None, None, None, None, None]
