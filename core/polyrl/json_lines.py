"""The lines of a JSON-lines file: where one row ends and the next begins, and how long one may be.

Why a module of its own: 🤗 datasets (pyarrow) takes ``\\n``, ``\\r\\n`` and a lone ``\\r`` as row
ends, and a file may mix them (two files joined, one from an old Mac exporter); Python's binary
line iterator knows ``\\n`` alone. And a row is read whole before it is parsed, so a file without
line ends (a multi-GB single line) was read into memory at once: lines are capped here instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from polyrl.errors import ConfigError

#: how much of a JSON-lines file is looked at to tell its line ends (``raw_lines``)
LINE_END_PROBE = 1 << 20

#: The longest JSON line read (bytes): a row is parsed whole, so a longer one, which is a file
#: without line ends far more often than a prompt (a million tokens are ~4 MB), would be held in
#: memory several times over before any error could be said.
MAX_LINE_BYTES = 64 << 20

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_PLAIN = json.JSONDecoder()


def _too_long(path: Path, lineno: int, field: str) -> ConfigError:
    cap = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES >= 1 << 20 else f"{MAX_LINE_BYTES} bytes"
    return ConfigError(
        f"{path}:{lineno} is longer than {cap} without a line end; a JSON-lines row "
        "is read whole, so polyrl reads rows up to that size", field=field,
        fix="write one JSON object per line (a file holding one JSON array: name it .json), or shorten the row")


def raw_lines(fh: BinaryIO, path: Path, field: str) -> Iterator[bytes]:
    """The lines of a JSON-lines file opened in binary, none longer than ``MAX_LINE_BYTES``: at
    ``\\n`` as usual, or at ``\\r`` in a file whose line ends are an old Mac's (``\\r`` alone: no
    ``\\n`` in its first MiB but a ``\\r``). Why: 🤗 datasets (pyarrow) reads such a file row by
    row; read at ``\\n`` it was one line, refused as "line 1 is not valid JSON (Extra data)". A
    ``\\r`` is never inside a JSON string (it must be escaped there), so splitting at it cuts no value."""
    cap = MAX_LINE_BYTES
    head = fh.read(LINE_END_PROBE)
    fh.seek(0)
    lineno = 0
    if b"\n" in head or b"\r" not in head:
        while line := fh.readline(cap + 1):
            lineno += 1
            if len(line) > cap and not (len(line) == cap + 1 and line.endswith(b"\n")):
                raise _too_long(path, lineno, field)
            yield line
        return
    rest = b""
    while block := fh.read(LINE_END_PROBE):
        *whole, rest = (rest + block).split(b"\r")
        for line in whole:
            lineno += 1
            if len(line) > cap:
                raise _too_long(path, lineno, field)
            yield line + b"\r"
        if len(rest) > cap:
            raise _too_long(path, lineno + 1, field)
    if rest:
        yield rest


def values_at_cr(line: str) -> list[str] | None:
    """The texts of the JSON values in ``line`` when it holds several, each ended by whitespace
    with a lone ``\\r`` in it (a line end of an old Mac's, e.g. two files joined): 🤗 datasets
    reads each as a row. None when the line holds one value, or values not parted by a ``\\r``
    (``{} {}``: refused as "Extra data" like any line of two objects). A value that does not parse
    after a ``\\r`` is given as the rest of the line, so its own error is the one said."""
    out: list[str] = []
    pos = 0
    while True:
        start = _WHITESPACE.match(line, pos).end()  # type: ignore[union-attr]  # matches ""
        if start >= len(line):
            break
        if out and "\r" not in line[pos:start]:
            return None
        try:
            end = _PLAIN.raw_decode(line, start)[1]
        except (ValueError, RecursionError):  # a syntax error, int()'s digit limit, too deep
            if not out:
                return None
            out.append(line[start:])
            break
        out.append(line[start:end])
        pos = end
    return out if len(out) > 1 else None
