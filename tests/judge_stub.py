"""A scripted OpenAI-compatible chat server on 127.0.0.1 (stdlib ``http.server`` in a thread).

Why besides ``polyrl serve``: the tiny served model writes random text, so tests about *which*
answers are cached, what a hostile reply costs to parse and what an error body echoes need a server
whose replies the test chooses. It is a real HTTP server on a real socket; the judge talks to it
through httpx exactly as it talks to any endpoint.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedJudge:
    """Answers each ``POST .../chat/completions`` with the next scripted reply.

    A reply is ``str`` (a 200 chat completion with that content) or ``(status, body)`` (that
    HTTP status with ``body`` as JSON). When the script runs out, ``default`` is used.
    """

    def __init__(self, default: Any = "Score: 7/10") -> None:
        self.default = default
        self.script: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with judge.lock:
                    judge.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    reply = judge.script.popleft() if judge.script else judge.default
                status, payload = (reply if isinstance(reply, tuple) else
                                   (200, {"choices": [{"message": {"role": "assistant", "content": reply}}]}))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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

    def close(self) -> None:
        """Stop answering (the port then refuses connections); safe to call twice."""
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()
