"""Text files saved as UTF-16 (or UTF-32), told apart from UTF-8 by their first bytes.

Why: Windows tools save "Unicode" text as UTF-16 (Excel's "Unicode Text", PowerShell 5's ``>``,
Notepad's "UTF-16 LE"). Such a JSON-lines file was refused as "not valid UTF-8 (byte 0)", or,
without a byte order mark, as line 1 not being valid JSON; a CSV as a column that would not cast,
or (its first character not ASCII: a header ``énoncé``) as Latin-1 to convert with the wrong
command. None named the encoding, nor how to convert the file.
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

#: How many of a file's first bytes ``wide_encoding`` looks at: enough for a line end, a comma
#: or a brace (ASCII, so one NUL byte beside it in UTF-16) even after a header of CJK names.
HEAD_BYTES = 4096

#: (which side of a code unit its high byte is on, what the text is, iconv's and Python's name)
_UNMARKED = ((1, "UTF-16 (little-endian, without a byte order mark)", "UTF-16LE", "utf-16-le"),
             (0, "UTF-16 (big-endian, without a byte order mark)", "UTF-16BE", "utf-16-be"))


def _decodes(head: bytes, codec: str) -> bool:
    """Whether ``head`` is text in ``codec`` (a character cut at its end aside)."""
    try:
        codecs.getincrementaldecoder(codec)().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _utf8(head: bytes) -> bool:
    return _decodes(head, "utf-8")


def wide_encoding(head: bytes) -> tuple[str, str] | None:
    """(what the text is, iconv's name for it) when ``head``, a file's first ``HEAD_BYTES``, starts
    UTF-16 or UTF-32 text: a byte order mark, or (UTF-16 without one) NUL bytes on one side of its
    code units, as the high byte of every ASCII character puts them there. UTF-8 text holds a NUL
    byte only as a NUL character: many of them (one unit in eight), or a few in text that is not
    UTF-8 (``énoncé`` or CJK in UTF-16), tell the file apart from UTF-8 text with a stray NUL,
    which ``polyrl.nul_bytes`` refuses as that. None otherwise."""
    for mark, what, name in _MARKS:
        if head.startswith(mark):
            return what, name
    units = len(head) // 2
    head = head[:2 * units]
    for side, what, name, codec in _UNMARKED:
        nuls, others = head[side::2].count(0), head[1 - side::2].count(0)
        if nuls < 2 or others * 4 > nuls or not _decodes(head, codec):
            continue
        if nuls * 8 >= units or not _utf8(head):
            return what, name
    return None


def refuse_wide_text(path: Path, head: bytes, field: str) -> None:
    """Raise one error naming the encoding and the command that converts the file, when ``head``
    (``path``'s first ``HEAD_BYTES``, read by the caller's own open) is UTF-16 or UTF-32 text
    (``wide_encoding``); polyrl reads text files as UTF-8."""
    found = wide_encoding(head)
    if found is None:
        return
    what, name = found
    new = path.with_name(f"{path.stem}.utf8{path.suffix}")
    raise ConfigError(f"{path} is saved as {what}, not UTF-8", field=field,
                      fix=f"save it as UTF-8: iconv -f {name} -t UTF-8 {shlex.quote(str(path))} > "
                          f"{shlex.quote(str(new))} (or, in an editor or spreadsheet, save it with the encoding UTF-8)")
