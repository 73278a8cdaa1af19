"""Strict JSON for every file polyrl writes: NaN and infinities become ``null``, lone
surrogates U+FFFD.

Why: ``json.dumps`` writes bare ``NaN``/``Infinity`` tokens by default, which are not JSON; jq,
JavaScript and most readers then fail on the whole file. A metric that is not a number (a skipped
step's loss) is honestly "no value", so it is written as ``null``. A Python string may hold a lone
surrogate (``"\\ud800"`` is valid JSON from a server), which UTF-8 cannot encode: writing it
raised mid-run, and escaping it would only move the failure to every strict reader.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: a surrogate pair becomes its character, a lone one U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def sanitize(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None, text made valid Unicode (``valid_text``)
    and numpy scalars/arrays made plain."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {valid_text(str(k)): sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if isinstance(value, np.generic):
        return sanitize(value.item())
    if isinstance(value, np.ndarray):
        return sanitize(value.tolist())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that can only produce strict JSON (``allow_nan=False`` after sanitising)."""
    return json.dumps(sanitize(value), allow_nan=False, **kwargs)


def append_lines(path: Path, records: Iterable[Any]) -> None:
    """Append ``records`` to a JSON-lines file, one strict line each, flushed and fsynced: a step's
    lines are on disk before the step is checkpointed (the checkpoint is fsynced; after a power
    loss a metrics file only flushed could lack steps the checkpoint holds, and the resume would
    not notice). A write that fails part-way (a full disk) is cut off again before the error goes
    on: the half line it left was glued to the next line written, losing both."""
    data = memoryview("".join(dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8"))
    with open(path, "ab", buffering=0) as fh:
        start = os.fstat(fh.fileno()).st_size
        try:
            while data:
                data = data[fh.write(data):]
            os.fsync(fh.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fh.fileno(), start)
            raise


def read_lines(path: Path) -> list[tuple[str, Any]]:
    """Each line of a JSON-lines file with its value; None for a line a crash cut short.

    Each line is decoded on its own: text is written unescaped (``ensure_ascii=False``), so a kill
    or a full disk can cut the last line inside a character, and decoding the whole file raised
    ``UnicodeDecodeError`` out of the resume that should have dropped that line."""
    pairs: list[tuple[str, Any]] = []
    # "\n" only: splitlines() also breaks at U+2028 / U+0085, which a completion's text may hold
    # (written unescaped), and would cut that record in two
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:  # cut inside a character, or not written by polyrl
            pairs.append((raw.decode("utf-8", errors="replace"), None))
            continue
        try:
            pairs.append((line, json.loads(line)))
        except (ValueError, RecursionError):  # cut short, or nested past the parser's depth
            pairs.append((line, None))
    return pairs


def rewrite_lines(path: Path, lines: Iterable[str]) -> None:
    """Replace a JSON-lines file by ``lines`` atomically (temp file, fsync, rename), so a crash
    during a resume's rewind leaves the old file or the new one, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
