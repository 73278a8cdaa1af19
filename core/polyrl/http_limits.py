"""A reply body read up to a byte cap, for the HTTP clients that talk to servers polyrl does not trust.

Why: the remote generation backend and the LLM judge both read replies from servers that may be
broken or hostile; one sending gigabytes must fail the request at the cap, not fill the trainer's
memory. Both read the body as it streams in and feed it here, chunk by chunk, so the rule (a
declared ``Content-Length`` over the cap fails before any byte is read; otherwise the bytes as
they arrive are counted) lives in one place. Each caller bounds the time itself (a per-chunk
deadline in a thread, ``asyncio.wait_for`` in a coroutine) and words the error for its option.
"""

from __future__ import annotations

import datetime
import email.utils
from collections.abc import Mapping

#: request headers that make the bytes counted the bytes held: a compliant server then sends the
#: body uncompressed, and no compressed chunk can expand far past the cap before it is checked
IDENTITY_ENCODING = {"Accept-Encoding": "identity"}


class ReplyTooLarge(Exception):
    """A reply body past its cap; reading stopped there. ``declared``: the ``Content-Length`` that
    announced it, or None when the bytes read passed the cap."""

    def __init__(self, limit: int, declared: int | None) -> None:
        self.limit, self.declared = limit, declared
        super().__init__(f"reply body over {limit} bytes")

    def describe(self, option: str) -> str:
        """The error as a user reads it, naming the ``option`` that sets the cap."""
        if self.declared is not None:
            return f"a reply of {self.declared} bytes is over {option} = {self.limit}"
        return f"the reply passed {option} = {self.limit}"


def header_integer(value: str) -> int | None:
    """``value`` read as the plain decimal digits HTTP headers use, or None. Why not ``str.isdigit``
    alone: it takes "²" and "١", which ``int()`` then refuses or reads as another number."""
    return int(value) if value.isascii() and value.isdigit() else None


class CappedBody:
    """The bytes of one reply body, refused (``ReplyTooLarge``) past ``limit`` bytes."""

    def __init__(self, limit: int, content_length: str | None = None) -> None:
        """``content_length``: the reply's header as sent; a number over ``limit`` fails now."""
        self.limit = limit
        self.size = 0
        self._chunks: list[bytes] = []
        declared = header_integer(content_length or "")
        if declared is not None and declared > limit:
            raise ReplyTooLarge(limit, declared)

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk``, unless it takes the body past the cap."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise ReplyTooLarge(self.limit, None)
        self._chunks.append(chunk)

    def body(self) -> bytes:
        return b"".join(self._chunks)


def refused_encoding(headers: Mapping[str, str]) -> str | None:
    """Why a reply must not be read, or None: its ``Content-Encoding`` says it is compressed though
    ``IDENTITY_ENCODING`` asked for none. A client decoding it would inflate a chunk before the cap
    counts it (6.5 KB of brotli held 10 GB), so the caller refuses it and reads raw bytes only."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return (f"the server compressed its reply (Content-Encoding: {encoding}) though polyrl asked for none: "
            "a compressed reply can expand far past the size cap before it is counted")


def retry_after_s(headers: Mapping[str, str], cap_s: float) -> float:
    """Seconds a busy server (429/503) asked to wait in ``Retry-After`` (delta-seconds or an HTTP
    date), at most ``cap_s`` (a hostile or broken value must not park the run); 0 when absent or
    unreadable. Why: retrying sooner only gets the same answer and counts against ``retries``."""
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return 0.0
    delta = header_integer(value)
    if delta is not None:
        seconds = float(delta)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return 0.0
        if when.tzinfo is None:  # an HTTP date is GMT; one without a zone is read as such
            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return min(max(seconds, 0.0), cap_s)
