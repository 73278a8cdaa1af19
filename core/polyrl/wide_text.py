"""Text files saved as UTF-16 (or UTF-32), told apart from UTF-8 by their first bytes.

Why: Windows tools save "Unicode" text as UTF-16 (Excel's "Unicode Text", PowerShell 5's ``>``,
Notepad's "UTF-16 LE"). Such a JSON-lines file was refused as "not valid UTF-8 (byte 0)", or,
without a byte order mark, as line 1 not being valid JSON; a CSV as a column that would not cast.
None named the encoding, nor how to convert the file.
"""

from __future__ import annotations

import codecs
import shlex
from pathlib import Path

from polyrl.errors import ConfigError

#: (first bytes, what the text is, iconv's name for it). UTF-32's marks come first: its
#: little-endian one begins with UTF-16's.
_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32 (little-endian, with a byte order mark)", "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32 (big-endian, with a byte order mark)", "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16 (little-endian, with a byte order mark)", "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16 (big-endian, with a byte order mark)", "UTF-16"),
)

#: How many of a file's first bytes ``wide_encoding`` reads.
HEAD_BYTES = 4


def _ascii(byte: int) -> bool:
    return 0 < byte < 0x80


def wide_encoding(head: bytes) -> tuple[str, str] | None:
    """(what the text is, iconv's name for it) when ``head``, a file's first ``HEAD_BYTES``, starts
    UTF-16 or UTF-32 text: a byte order mark, or (UTF-16 without one) two ASCII characters each
    beside a NUL byte, which no UTF-8 text file starts with. None otherwise."""
    for mark, what, name in _MARKS:
        if head.startswith(mark):
            return what, name
    if len(head) >= 4:
        if head[1] == head[3] == 0 and _ascii(head[0]) and _ascii(head[2]):
            return "UTF-16 (little-endian, without a byte order mark)", "UTF-16LE"
        if head[0] == head[2] == 0 and _ascii(head[1]) and _ascii(head[3]):
            return "UTF-16 (big-endian, without a byte order mark)", "UTF-16BE"
    return None


def refuse_wide_text(path: Path, field: str) -> None:
    """Raise one error naming the encoding and the command that converts the file, when ``path``
    is UTF-16 or UTF-32 text (``wide_encoding``); polyrl reads text files as UTF-8."""
    with open(path, "rb") as fh:
        found = wide_encoding(fh.read(HEAD_BYTES))
    if found is None:
        return
    what, name = found
    new = path.with_name(f"{path.stem}.utf8{path.suffix}")
    raise ConfigError(f"{path} is saved as {what}, not UTF-8", field=field,
                      fix=f"save it as UTF-8: iconv -f {name} -t UTF-8 {shlex.quote(str(path))} > "
                          f"{shlex.quote(str(new))} (or, in an editor or spreadsheet, save it with the encoding UTF-8)")
