"""The error every endpoint answers with, in OpenAI's ``{"error": {...}}`` shape."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An HTTP error with a reason a client can act on; ``headers`` go out with it (Retry-After)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}
        self.close = close  # the connection cannot be reused (the body was not read)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def overloaded(message: str, retry_after_s: int = 1) -> ApiError:
    """503 with Retry-After: the server is busy, the request was fine; the client should retry."""
    return ApiError(503, message, kind="server_error", code="overloaded",
                    headers={"Retry-After": str(max(1, int(retry_after_s)))})


def shutting_down() -> ApiError:
    """503 with Retry-After for requests a stopping server will not run: another replica, or this
    one restarted, can answer them."""
    return ApiError(503, "the server is shutting down; retry after the Retry-After seconds (on a "
                    "restarted or another server)", kind="server_error", code="shutting_down",
                    headers={"Retry-After": "5"})
