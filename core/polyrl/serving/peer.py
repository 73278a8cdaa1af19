"""Whether the client of a queued request is still there to read its answer.

Why it is not just "end-of-file on the socket": a client may send its whole request and then shut
down its write side (``shutdown(SHUT_WR)``, ``nc -N``, a pipe into ``socat``) and wait for the
answer, which HTTP allows; to the server that end-of-file looks the same as a client that closed
the connection (a client timeout before a retry), and such requests were dropped unanswered. The
difference shows only once something is written: a closed socket answers it with a reset. So a
handler that sees end-of-file writes an interim ``100 Continue`` (every HTTP/1.1 client must read
and skip 1xx answers before the final one) and takes the client for gone only if that is reset.
"""

from __future__ import annotations

import select
import socket
from typing import Literal

PeerState = Literal["there", "ended", "gone"]

#: the interim answer written to tell a half-closed client (still reading) from a closed one
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\n"


def peer_state(conn: socket.socket) -> PeerState:
    """``gone``: the connection was reset (by the client, or in answer to something written to a
    socket it closed); ``ended``: the client sent end-of-file, having closed the connection or only
    its write side; ``there``: neither (bytes of a next request it already sent are left unread)."""
    try:
        if hasattr(select, "poll"):  # select.select refuses descriptors past 1023 (--max-connections 2000)
            poller = select.poll()
            poller.register(conn, select.POLLIN)
            events = poller.poll(0)
            flags = events[0][1] if events else 0
            if flags & select.POLLERR:
                return "gone"
            hung_up = bool(flags & select.POLLHUP)  # both directions down: a reset, or an AF_UNIX peer's close
            readable = bool(flags & select.POLLIN)
        else:
            readable = bool(select.select([conn], [], [], 0)[0])
            hung_up = conn.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
        if not readable:
            return "gone" if hung_up else "there"
        if conn.recv(1, socket.MSG_PEEK):
            return "there"
        return "gone" if hung_up else "ended"
    except (OSError, ValueError):  # reset, or already closed
        return "gone"
