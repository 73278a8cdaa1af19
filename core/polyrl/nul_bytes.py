"""NUL bytes in a CSV file: refused, naming the file, line and byte, never kept in the prompts.

Why: pandas (which 🤗 datasets, and so TRL, reads CSV with) keeps a NUL byte inside a cell's text,
quoted or not: ``What is\\x00 2+2?`` reached the model as that, a byte every tokenizer encodes as a
token of its own, with nothing said. UTF-8 text holds no NUL byte but a NUL character, which no
one types: it is a file damaged on the way (a crash's zero-filled tail, a binary column pasted
in), or one saved as UTF-16, which ``polyrl.wide_text`` names as that before this runs.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import BinaryIO

from polyrl.errors import ConfigError

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
