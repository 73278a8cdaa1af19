"""The address ``polyrl serve`` binds, checked before the model loads.

Why: a port out of range, a host that does not resolve or is not this machine's, or a port another
process holds used to end in a socket traceback after a model load of seconds to minutes. A
trial bind (closed at once) turns each into one ``error:`` line naming the flag, before anything
loads; a port taken in the moment between the trial and the real bind is named the same way.
"""

from __future__ import annotations

import errno
import socket

from polyrl.errors import ConfigError

_FIX_HOST = "an address of this machine, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"


def bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    """The flag at fault and its fix for a failed bind of ``host:port``."""
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"{host!r} does not resolve to an IPv4 address ({exc.strerror})", field="--host",
                           fix=_FIX_HOST)
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"port {port} on {host} is in use by another process", field="--port",
                           fix="stop that process or choose another port (--port 0 picks a free one)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"{host} is not an address of this machine", field="--host", fix=_FIX_HOST)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ConfigError(f"binding port {port} is not permitted ({exc.strerror})", field="--port",
                           fix="use a port from 1024 up, e.g. --port 8000")
    return ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc})", field="--host",
                       fix=f"{_FIX_HOST}, and a free --port")


def check_address(host: str, port: int) -> None:
    """Raise the ConfigError a bind of ``host:port`` would end in; binds nothing that stays."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"must be from 0 to 65535, got {port}", field="--port",
                          fix="e.g. --port 8000 (0 picks a free port)")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as trial:
            trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            trial.bind((host, port))
    except (OSError, UnicodeError, ValueError) as exc:
        if isinstance(exc, OSError):
            raise bind_error(host, port, exc) from None
        raise ConfigError(f"{host!r} is not a host name or address ({exc})", field="--host", fix=_FIX_HOST) from None
