"""Caps on what one request may ask for, checked before the server allocates anything for it.

Why caps at all: without them one request (a 100 MB prompt, ``n = 10**6``, ``max_tokens = 10**9``)
makes the server allocate until the kernel kills it, taking every other client down with it.
Each cap is a ``polyrl serve`` flag; the defaults fit a model with a few thousand tokens of context.
"""

from __future__ import annotations

import math

import attrs

from polyrl.serving.api_error import ApiError

SEED_LIMIT = 2 ** 63  # seeds are signed 64-bit on some backends; [0, 2**63) is safe on all


@attrs.frozen
class Limits:
    """What one request and the server as a whole accept (see ``polyrl serve --help``)."""

    max_length: int = 2048  # the model's context: prompt + completion tokens
    max_body_bytes: int = 2 * 1024 * 1024
    max_prompt_chars: int = 65536  # all of one prompt's text, before tokenizing it
    max_tokens_limit: int = 2048  # a request's max_tokens
    max_n: int = 128
    max_prompts: int = 64  # prompts in one /v1/completions request
    max_completions: int = 512  # prompts x n in one request
    max_stops: int = 16
    max_queue: int = 128  # generation requests waiting or running; more get 503 + Retry-After
    max_connections: int = 128  # open connections (one thread each); more get 503 + Retry-After
    read_timeout_s: float = 30.0  # to receive a whole request, and idle time on a kept-alive connection

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(Limits):
            value = getattr(self, field.name)
            if not (0 < value < math.inf):  # written so that nan fails too (nan <= 0 is False)
                from polyrl.errors import ConfigError

                flag = "--" + field.name.replace("_", "-")
                raise ConfigError(f"must be a finite number > 0, got {value}", field=flag,
                                  fix=f"give {flag} a positive value")
        from polyrl.validators import MAX_WAIT_S

        if self.read_timeout_s > MAX_WAIT_S:  # each connection's socket timeout: past ~9.2e9 s it overflowed
            from polyrl.errors import ConfigError  # in every handler thread, and no request was ever answered

            raise ConfigError(f"must be at most {MAX_WAIT_S:g} seconds, got {self.read_timeout_s:g}",
                              field="--read-timeout-s", fix="e.g. --read-timeout-s 30")


def content_length(header: str | None, limits: Limits) -> int:
    """The declared body size, or the 4xx that refuses it (411 missing, 400 malformed, 413 too big).

    The body is never read when this raises, so those errors close the connection: the next bytes
    on it are not the start of a request.
    """
    if header is None:
        raise ApiError(411, "Content-Length is required (chunked bodies are not accepted); send the "
                       "body with a Content-Length header", "Content-Length", close=True)
    text = header.strip()
    if not text.isdigit() or not text.isascii():  # rejects "-1", "abc", "1e3", "+5", ""
        raise ApiError(400, f"Content-Length must be a non-negative integer, got {header[:40]!r}",
                       "Content-Length", close=True)
    length = int(text[:20]) if len(text) <= 20 else limits.max_body_bytes + 1
    if length > limits.max_body_bytes:
        raise ApiError(413, f"the body is {length} bytes; this server accepts at most {limits.max_body_bytes} "
                       "(polyrl serve --max-body-bytes)", "Content-Length", code="body_too_large", close=True)
    return length
