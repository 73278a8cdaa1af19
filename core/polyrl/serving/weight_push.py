"""``POST /polyrl/weights``: who may replace the served model's weights, and with what.

Why a shared secret: whoever can push weights decides every answer the server gives, so the
endpoint needs more than network reachability. The token comes from a file or an environment
variable (never the command line, which other users see in ``ps``) and is compared in constant
time. Why check the payload first: a file with the wrong names, shapes, dtypes or non-finite
values must be refused while the model is untouched, not fail halfway through a copy.
"""

from __future__ import annotations

import hmac
import os
import stat
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from polyrl.errors import ConfigError
from polyrl.folder_links import NOT_REGULAR
from polyrl.shared_secret import read_shared_secret
from polyrl.serving.api_error import ApiError

TOKEN_HEADER = "X-Polyrl-Weight-Token"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": None,
                      "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
                      "BOOL": np.bool_}


def load_token(token_file: str | None, token_env: str | None) -> str | None:
    """The shared secret from ``--weight-push-token-file`` or ``--weight-push-token-env``."""
    return read_shared_secret(token_file, token_env, path_field="--weight-push-token-file",
                              env_field="--weight-push-token-env",
                              hint="a token, e.g. from `openssl rand -hex 32`")


def check_startup(allow: bool, token: str | None, insecure: bool, host: str) -> None:
    """Weight push needs a token; without one only on a loopback address with an explicit opt-in."""
    if token is not None and not allow:
        raise ConfigError("a weight-push token was given but weight push is off", field="--allow-weight-push",
                          fix="add --allow-weight-push, or drop the token option")
    if insecure and not allow:
        raise ConfigError("--insecure-weight-push without --allow-weight-push", field="--insecure-weight-push",
                          fix="add --allow-weight-push or drop --insecure-weight-push")
    if not allow or token is not None:
        return
    if not insecure:
        raise ConfigError("--allow-weight-push needs a shared secret: anyone reaching the port could replace "
                          "the model", field="--weight-push-token-file",
                          fix="give --weight-push-token-file FILE or --weight-push-token-env NAME (the trainer "
                          "sends it: backends.options.weight_push_token_env), or, on 127.0.0.1 only, "
                          "--insecure-weight-push")
    if host not in LOOPBACK:
        raise ConfigError(f"--insecure-weight-push is refused on {host!r}: it only binds a loopback address",
                          field="--insecure-weight-push",
                          fix="give a token (--weight-push-token-file/--weight-push-token-env) or --host 127.0.0.1")


def check_token(sent: str | None, token: str | None) -> None:
    """401 when no token was sent, 403 when it is wrong (constant-time comparison)."""
    if token is None:
        return
    if not sent:
        raise ApiError(401, f"weight push needs the shared secret in the {TOKEN_HEADER} header",
                       TOKEN_HEADER, kind="authentication_error", code="missing_token")
    if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), token.encode("utf-8")):
        raise ApiError(403, f"wrong {TOKEN_HEADER}", TOKEN_HEADER, kind="permission_error", code="invalid_token")


@attrs.frozen
class WeightSpec:
    """Names, shapes and dtypes of the model's weights as ``export_weights`` gives them."""

    tensors: Mapping[str, tuple[tuple[int, ...], str]]

    @classmethod
    def of(cls, weights: Mapping[str, Any]) -> WeightSpec:
        return cls({k: (tuple(int(d) for d in v.shape), np.dtype(v.dtype).name) for k, v in weights.items()})


def push_path(body: dict[str, Any]) -> Any:
    """The body's ``path``; any other field is a 400 (a trainer that meant something by it, e.g. a
    dtype or a version to load, must not have it silently ignored)."""
    unknown = sorted(set(body) - {"path"})
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0][:60]!r}: a weight push takes only {{\"path\": "
                       "DIR_OR_FILE}", unknown[0][:60])
    return body.get("path")


def safetensors_files(path: Any) -> list[str]:
    if not isinstance(path, str) or not path:
        raise ApiError(400, "give the path of a .safetensors file or a folder of them", "path")
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    else:
        files = [path] if path.endswith(".safetensors") and os.path.isfile(path) else []
    if not files:
        raise ApiError(400, f"no .safetensors file at {path!r} (the path is read on the server's machine)", "path")
    for f in files:  # a FIFO named *.safetensors blocked the read holding the lock: /health froze too
        try:
            regular = stat.S_ISREG(os.stat(f).st_mode)
        except OSError as exc:
            raise ApiError(400, f"cannot read {f!r}: {exc.strerror}", "path") from None
        if not regular:
            raise ApiError(400, f"{f!r} is {NOT_REGULAR}", "path")
    return files


def _header(files: list[str]) -> dict[str, tuple[tuple[int, ...], str, str]]:
    from safetensors import safe_open

    found: dict[str, tuple[tuple[int, ...], str, str]] = {}
    for f in files:
        try:
            with safe_open(f, framework="numpy") as st:
                for name in st.keys():
                    if name in found:  # which copy would load is an accident of file order
                        raise _mismatch(f"{name} is in both {found[name][2]!r} and {f!r}")
                    piece = st.get_slice(name)
                    found[name] = (tuple(int(d) for d in piece.get_shape()), str(piece.get_dtype()), f)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise ApiError(400, f"{f!r} is not a readable safetensors file: {type(exc).__name__}: {exc}",
                           "path") from None
    return found


def _mismatch(message: str) -> ApiError:
    return ApiError(422, f"the pushed weights do not fit the served model: {message}; nothing was loaded",
                    "path", code="weights_mismatch")


def read_checked(path: Any, spec: WeightSpec) -> dict[str, np.ndarray]:
    """The tensors at ``path`` after checking names, shapes, dtypes (from the header, before
    reading any data) and that every value is finite."""
    files = safetensors_files(path)
    header = _header(files)
    unknown = sorted(set(header) - set(spec.tensors))
    missing = sorted(set(spec.tensors) - set(header))
    if unknown:
        raise _mismatch(f"{len(unknown)} names unknown to it, e.g. {unknown[:3]}")
    if missing:
        raise _mismatch(f"{len(missing)} of its weights missing, e.g. {missing[:3]}")
    for name, (shape, dtype) in spec.tensors.items():
        got_shape, got_dtype, _ = header[name]
        if got_shape != shape:
            raise _mismatch(f"{name} has shape {list(got_shape)}, the model's is {list(shape)}")
        numpy_dtype = SAFETENSORS_DTYPES.get(got_dtype)
        if numpy_dtype is None or np.dtype(numpy_dtype).name != dtype:
            raise _mismatch(f"{name} is {got_dtype}, the model's is {dtype}")
    from safetensors.numpy import load_file

    weights: dict[str, np.ndarray] = {}
    for f in files:
        try:
            weights.update(load_file(f))
        except Exception as exc:  # noqa: BLE001 - a truncated file passes the header check
            raise ApiError(400, f"{f!r} cannot be read: {type(exc).__name__}: {exc}", "path") from None
    for name, value in weights.items():
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            raise _mismatch(f"{name} holds NaN or infinite values")
    return weights
