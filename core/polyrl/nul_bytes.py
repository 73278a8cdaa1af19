"""NUL bytes in a CSV file, and NUL characters in JSON or Parquet/Arrow text: refused, naming the
file, line or row, and column, never kept in the prompts.

Why: pandas (which 🤗 datasets, and so TRL, reads CSV with) keeps a NUL byte inside a cell's text,
quoted or not: ``What is\\x00 2+2?`` reached the model as that, a byte every tokenizer encodes as a
token of its own, with nothing said. UTF-8 text holds no NUL byte but a NUL character, which no
one types: it is a file damaged on the way (a crash's zero-filled tail, a binary column pasted
in), or one saved as UTF-16, which ``polyrl.wide_text`` names as that before this runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from polyrl.errors import ConfigError
from polyrl.text_validity import find_char

#: bytes read at a time past the head the caller already holds
_BLOCK = 1 << 20


def first_nul(head: bytes, fh: BinaryIO) -> tuple[int, int] | None:
    """(line, byte of that line), both 1-based, of the first NUL byte in a file whose first bytes
    are ``head`` and whose rest ``fh`` reads from where ``head`` ended; None when it holds none.
    Read block by block (``bytes.find`` is a memchr: a GB file costs well under a second)."""
    lines, line_start, offset = 1, 0, 0  # line_start: where the current line starts, in the file
    block = head
    while block:
        at = block.find(b"\0")
        end = len(block) if at < 0 else at
        ends = block.count(b"\n", 0, end)
        if ends:
            lines += ends
            line_start = offset + block.rindex(b"\n", 0, end) + 1
        if at >= 0:
            return lines, offset + at - line_start + 1
        offset += len(block)
        block = fh.read(_BLOCK)
    return None


def refuse_nul_bytes(path: Path, head: bytes, fh: BinaryIO, field: str) -> None:
    """Raise naming the first NUL byte of the CSV ``path`` (``first_nul``) and the command that
    removes them all."""
    found = first_nul(head, fh)
    if found is None:
        return
    line, byte = found
    new = path.with_name(f"{path.stem}.clean{path.suffix}")
    raise ConfigError(
        f"{path} line {line} holds a NUL byte (0x00) at byte {byte} of the line: pandas, which 🤗 datasets "
        "reads CSV with, would keep it in the cell's text, and the model would read it", field=field,
        fix=f"remove the NUL bytes: tr -d '\\000' < {shlex.quote(str(path))} > {shlex.quote(str(new))} "
            "(or re-export the file; if the file is damaged, check its rows)")


# --- NUL characters in text already decoded: a JSON "\u0000" escape, a Parquet/Arrow string ------
#
# Why the same rule as the bytes: a JSON escape "\u0000" decodes to the very character a CSV's NUL
# byte is, and a Parquet or Arrow string can hold it as is. It reached the prompt as that, which a
# tokenizer encodes as a token of its own (or drops, or ends a C string at); no one writes it.


def nul_at(text: str) -> int | None:
    """The position of the first NUL character in ``text``, or None (one memchr)."""
    at = text.find("\0")
    return None if at < 0 else at


def find_nul(value: Any) -> tuple[str, int, str] | None:
    """The first NUL character in a cell (text, or the lists and dicts of a chat): where inside
    it, its position and the character (``text_validity.find_char``)."""
    return find_char(value, nul_at)


def row_nul(row: Mapping[str, Any]) -> tuple[str, tuple[str, int, str]] | None:
    """The first column of ``row`` holding a NUL character, and where in it; None when none does."""
    for column, value in row.items():
        found = find_nul(value)
        if found is not None:
            return column, found
    return None


def nul_error(where: str, what: str, found: tuple[str, int, str], fix: str, field: str = "data") -> ConfigError:
    """The one error for a NUL character ``find_nul`` found in ``what`` (``column 'prompt'``, ``the
    prompt``) at ``where`` (a file's line or row, a row given from Python, the command line)."""
    inner, at, _ = found
    at_inner = f" at {inner}" if inner else ""
    return ConfigError(f"{where}: {what}{at_inner} holds a NUL character (U+0000) at character {at}: "
                       "no one writes it (text damaged on the way, or a binary value), and the model would "
                       "read it as a token of its own", field=field, fix=fix)


def json_nul_fix(path: Path) -> str:
    """How to remove the ``\\u0000`` escapes of a JSON/JSON-lines file."""
    new = path.with_name(f"{path.stem}.clean{path.suffix}")
    return (f"remove the \\u0000 escapes: sed 's/\\\\u0000//g' {shlex.quote(str(path))} > {shlex.quote(str(new))} "
            "(or re-export the file; if it is damaged, check that row)")


#: How to remove NUL characters from a Parquet/Arrow file's text.
ARROW_NUL_FIX = ("remove the NUL characters and write the file again (pandas: df[column] = "
                 "df[column].str.replace('\\x00', '', regex=False)); if the data is damaged, check that row")

#: How to remove NUL characters from text given from Python (rows passed to ``polyrl.api.run`` or
#: ``polyrl.trl.GRPOTrainer``, a prompt passed to an engine).
TEXT_NUL_FIX = ("remove the NUL characters from that text (Python: text.replace('\\x00', ''); a 🤗 Dataset: "
                "dataset.map(...) doing that on the column); if the data is damaged, check where that row came from")
