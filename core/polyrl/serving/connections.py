"""Connection cap and read deadlines, so slow or idle clients cannot hold the server's threads.

Why a deadline and not only a socket timeout: a socket timeout bounds each ``recv``, so a
slowloris client that sends one byte every few seconds never trips it while holding a thread
forever. The ``Deadlines`` watcher gives each connection a time by which the request it is
receiving must be complete (and an idle kept-alive connection a time by which the next one must
start); past it the socket is shut down for reading, which wakes the blocked handler thread with
end-of-file and leaves it the write side to answer 408 on. A response the client takes too slowly
(``set(..., sending=True)``) is shut down both ways: nothing more can be said to it.
"""

from __future__ import annotations

import socket
import threading
import time

REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           b"Connection: close\r\nContent-Length: %d\r\n\r\n%s")
REFUSED_BODY = (b'{"error": {"message": "too many open connections (polyrl serve --max-connections); retry '
                b'after the Retry-After seconds", "type": "server_error", "param": null, "code": "overloaded"}}')


def refuse(conn: socket.socket) -> None:
    """Answer 503 + Retry-After on a connection over the cap and close it, without a thread.
    The request is not read: closing with unread data would reset the connection and lose the
    answer, so the socket is half-closed for writing first and drained briefly."""
    try:
        conn.settimeout(1.0)
        conn.sendall(REFUSED % (len(REFUSED_BODY), REFUSED_BODY))
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and conn.recv(65536):
            pass
    except OSError:
        pass
    finally:
        conn.close()


class Refuser:
    """Refuses connections on threads of their own, at most ``slots`` at once (beyond that a
    connection is closed unanswered): the accept loop itself never waits on a client."""

    def __init__(self, slots: int = 256) -> None:
        self._slots = threading.BoundedSemaphore(slots)

    def __call__(self, conn: socket.socket) -> None:
        if not self._slots.acquire(blocking=False):
            conn.close()
            return

        def work() -> None:
            try:
                refuse(conn)
            finally:
                self._slots.release()

        threading.Thread(target=work, name="polyrl-serve-refuse", daemon=True).start()


class Deadlines:
    """One thread that shuts down connections whose deadline has passed."""

    def __init__(self, tick_s: float = 0.25) -> None:
        self._lock = threading.Lock()
        #: connection -> (when, how to shut it down then)
        self._due: dict[socket.socket, tuple[float, int]] = {}
        #: connections shut down for their deadline and not yet cleared (``cut``)
        self._cut: set[socket.socket] = set()
        self._tick_s = tick_s
        threading.Thread(target=self._watch, name="polyrl-serve-deadlines", daemon=True).start()

    def set(self, conn: socket.socket, seconds: float, *, sending: bool = False) -> None:
        """Cut ``conn`` in ``seconds``: its read side while a request is received (its handler can
        still answer 408: shut both ways, the 408 was never sent and a slow client read only the
        connection closing), both sides while a response is sent (``sending``: a blocked send wakes)."""
        how = socket.SHUT_RDWR if sending else socket.SHUT_RD
        with self._lock:
            self._due[conn] = (time.monotonic() + seconds, how)

    def clear(self, conn: socket.socket) -> None:
        with self._lock:
            self._due.pop(conn, None)
            self._cut.discard(conn)

    def cut(self, conn: socket.socket) -> bool:
        """Whether ``conn`` was shut down for its deadline. Why ask: to its handler both that and the
        client closing (or resetting) it look like end-of-file, and a body cut short by the client was
        answered "not received within N s", as if the server had waited on it."""
        with self._lock:
            return conn in self._cut

    def _watch(self) -> None:
        while True:
            time.sleep(self._tick_s)
            now = time.monotonic()
            with self._lock:
                late = [(c, how) for c, (due, how) in self._due.items() if due <= now]
                for c, _ in late:
                    del self._due[c]
                    self._cut.add(c)
            for c, how in late:
                try:
                    c.shutdown(how)
                except OSError:
                    pass
