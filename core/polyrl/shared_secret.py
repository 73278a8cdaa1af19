"""Reading a shared secret (the weight-push token) from a file or an environment variable.

One reader for both ends: ``polyrl serve`` (flags) and the remote backend (config options) must
agree on what a token is (stripped, non-empty, one source) and fail with the same clear errors.
"""

from __future__ import annotations

import os

from polyrl.errors import ConfigError


def read_shared_secret(path: str | None, env: str | None, *, path_field: str, env_field: str,
                       hint: str) -> str | None:
    """The token from ``path`` or ``$env`` (None when neither is given); ``hint`` says where the
    token should come from, for the fix of each error."""
    if path and env:
        raise ConfigError("give the token one way", field=path_field,
                          fix=f"use {path_field} or {env_field}, not both")
    if env:
        token = os.environ.get(env, "").strip()
        if not token:
            raise ConfigError(f"environment variable {env} is empty", field=env_field,
                              fix=f"export {env}=<{hint}>")
        return token
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path!r}: {exc}", field=path_field,
                              fix=f"give a readable file holding {hint} on one line") from None
        if not token:
            raise ConfigError(f"{path!r} is empty", field=path_field, fix=f"write {hint} into it")
        return token
    return None
