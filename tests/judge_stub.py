"""A scripted OpenAI-compatible chat server on 127.0.0.1 (stdlib ``http.server`` in a thread).

Why besides ``polyrl serve``: the tiny served model writes random text, so tests about *which*
answers are cached, what a hostile reply costs to parse and what an error body echoes need a server
whose replies the test chooses. It is a real HTTP server on a real socket; the judge talks to it
through httpx exactly as it talks to any endpoint.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

#: A reply the test writes byte by byte (a hostile server): called with the request's handler.
RawReply = Callable[[BaseHTTPRequestHandler], None]


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Write ``payload`` as a JSON response with ``status`` (what a scripted reply sends)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class ScriptedJudge:
    """Answers each ``POST .../chat/completions`` with the next scripted reply.

    A reply is ``str`` (a 200 chat completion with that content), ``(status, body)`` (that
    HTTP status with ``body`` as JSON) or a ``RawReply`` (``raw_reply``, ``trickle_reply``) that
    writes the response itself. When the script runs out, ``default`` is used.
    """

    def __init__(self, default: Any = "Score: 7/10") -> None:
        self.default = default
        self.script: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            record: dict[str, Any]

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                # this request's own record, for a RawReply to read: requests[-1] may be another
                # one's by then (the server answers each request on its own thread)
                self.record = {"path": self.path, "headers": dict(self.headers), "body": body,
                                "at": time.monotonic()}
                with judge.lock:
                    judge.requests.append(self.record)
                    reply = judge.script.popleft() if judge.script else judge.default
                if callable(reply):
                    try:
                        reply(self)
                    except (BrokenPipeError, ConnectionResetError):  # the client gave up on it
                        pass
                    return
                status, payload = (reply if isinstance(reply, tuple) else
                                   (200, {"choices": [{"message": {"role": "assistant", "content": reply}}]}))
                send_json(self, status, payload)

            def log_message(self, *args: Any) -> None:  # keep the test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reply(self, *replies: Any) -> None:
        with self.lock:
            self.script.extend(replies)

    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    def count_at_least(self, n: int, bound_s: float = 30.0) -> int:
        """``count()`` once it is ``n`` or more (or ``bound_s`` passed). After a client gave up on a
        request, the server's thread may not have logged it yet (a loaded machine): ``count()``
        right away can miss it. Answered requests need no wait (logged before their reply)."""
        deadline = time.monotonic() + bound_s
        while self.count() < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.count()

    def close(self) -> None:
        """Stop answering (the port then refuses connections); safe to call twice."""
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()


def chat_body(content: Any) -> dict[str, Any]:
    """An OpenAI chat completion answering ``content``."""
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


def raw_reply(status: int, body: bytes, *, length: bool = True, headers: dict[str, str] | None = None) -> RawReply:
    """``body`` as is, in 64 KiB writes, with ``headers`` besides; without ``length`` there is no
    Content-Length header and the body ends when the connection closes (HTTP/1.0), so only the
    bytes read can bound it."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if length:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for i in range(0, len(body), 65536):
            handler.wfile.write(body[i:i + 65536])

    return write


def trickle_reply(every_s: float, give_up_s: float, outlasted: list[float] | None = None) -> RawReply:
    """A 200 that promises 100 kB and sends one byte every ``every_s`` seconds, closing after
    ``give_up_s`` (a per-read timeout longer than ``every_s`` never trips on it). ``outlasted``
    gets ``give_up_s`` when a client was still connected then: noted before the connection closes,
    so a client that waited for the end sees the note (one that left made the writes fail first)."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        end = time.monotonic() + give_up_s
        while time.monotonic() < end:
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(every_s)
        if outlasted is not None:
            outlasted.append(give_up_s)

    return write


class HeldReply:
    """A 200 answering ``content`` only once the test calls ``release()``: a server slower than any
    client timeout by as much as the test needs, with no clock in it. A client that gave up left
    before it was released; one that waited gets its reply only at ``bound_s`` (so a broken timeout
    ends the test instead of hanging it), and ``outlasted`` then counts it."""

    def __init__(self, content: str = "Score: 7/10", bound_s: float = 120.0) -> None:
        self.content, self.bound_s = content, bound_s
        self.released = threading.Event()
        self.outlasted = 0
        self._lock = threading.Lock()

    def release(self) -> None:
        self.released.set()

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        if not self.released.wait(self.bound_s):
            with self._lock:
                self.outlasted += 1
        data = json.dumps(chat_body(self.content)).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def emptied(server: ScriptedJudge, default: str = "Score: 7/10") -> ScriptedJudge:
    """``server`` (one per test module) with an empty script, ``default`` as its reply and no requests recorded."""
    with server.lock:
        server.script.clear()
        server.requests.clear()
        server.default = default
    return server


def module_fixtures() -> tuple[Any, Any]:
    """The ``server`` (one scripted judge for the test module) and ``stub`` (it emptied for each
    test) fixtures, for a module to bind as ``server, stub = module_fixtures()``."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[ScriptedJudge]:
        judge = ScriptedJudge()
        yield judge
        judge.close()

    @pytest.fixture()
    def stub(server: ScriptedJudge) -> ScriptedJudge:
        """The module's server with an empty script, its default reply and no requests recorded."""
        return emptied(server)

    return server, stub


def scores_in_order(base_url: str, texts: list[str], **options: Any) -> Any:
    """The judge reward's scores of ``texts`` (prompts "question i"), one request at a time, so
    the scripted replies reach the samples in order."""
    from polyrl.rewards.judge import judge

    opts = {"base_url": base_url, "model": "judge", "backoff_s": 0.01, "retries": 0, "cache_path": "",
            "max_concurrency": 1, **options}
    return asyncio.run(judge([f"question {i}" for i in range(len(texts))], texts, [{} for _ in texts], opts))
