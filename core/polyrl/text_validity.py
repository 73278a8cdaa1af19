"""Text no tokenizer can encode (lone surrogates, invalid UTF-8), found where it enters polyrl.

A JSON escape such as ``"\\ud800"`` decodes to a lone surrogate (``json.loads`` accepts it), and
a command-line argument that is not UTF-8 reaches Python as ``"\\udce9"``: UTF-8, and so every
tokenizer, refuses such a string (the fast tokenizers with a bare ``TypeError``). A Parquet or
Arrow file written by a lax writer can hold the same thing as bytes that are not UTF-8.

The rule, one for the whole project: such text in data or a prompt is refused where it is read,
as one error naming the row, column and character. It is never replaced with U+FFFD: the reward
would then score a prompt other than the one the dataset holds, and the run would train on text
nobody wrote. (A tool's output, which the model's own call produced mid-episode, is the one place
text is repaired: ``polyrl.agents.tools.clean_text``; ``polyrl serve`` refuses it with a 400.)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from polyrl.errors import ConfigError

_SURROGATE = re.compile("[\ud800-\udfff]")

#: What every error about such text tells the user to do.
FIX = ("write the character itself (in JSON, a whole pair such as \\ud83d\\ude00 is one character), or "
       "remove it; text read from bytes: decode it as UTF-8 with errors='replace'")


def surrogate_at(text: str) -> int | None:
    """The position of the first surrogate code point in ``text``, or None (ASCII: no scan)."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def find_char(value: Any, char_at: Callable[[str], int | None]) -> tuple[str, int, str] | None:
    """The first character ``char_at`` finds in ``value`` (text, or lists and dicts of it, as a
    row's cell or a chat holds): (where inside ``value``, e.g. ``[1]['content']``; its position;
    the character)."""
    if isinstance(value, str):
        at = char_at(value)
        return None if at is None else ("", at, value[at])
    if isinstance(value, Mapping):
        items: Any = ((f"[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = find_char(item, char_at)
        if found is not None:
            return key + found[0], found[1], found[2]
    return None


def find_surrogate(value: Any) -> tuple[str, int, str] | None:
    """The first surrogate in ``value`` (``find_char``)."""
    return find_char(value, surrogate_at)


def surrogate_error(where: str, what: str, found: tuple[str, int, str], field: str = "data",
                    fix: str = FIX) -> ConfigError:
    """The one error for a surrogate ``find_surrogate`` found in ``what`` (``column 'prompt'``)."""
    inner, at, char = found
    at_inner = f" at {inner}" if inner else ""
    return ConfigError(f"{where}: {what}{at_inner} holds a lone surrogate ({char!r} at character {at}), which is not "
                       "valid UTF-8 text, so no tokenizer can encode it", field=field, fix=fix)


def row_surrogate(row: Mapping[str, Any]) -> tuple[str, tuple[str, int, str]] | None:
    """The first column of a row (the prompt, and what rewards read) holding a surrogate, and
    where (``find_surrogate``); None for the usual row, checked at about a microsecond a cell."""
    for column, value in row.items():
        if value.__class__ is str and value.isascii():  # the common cell: no call, no scan
            continue
        found = find_surrogate(value)
        if found is not None:
            return column, found
    return None


def check_prompt(value: Any, where: str, field: str = "prompt", fix: str = FIX) -> None:
    """A prompt (text or chat) given directly, not from a dataset (``polyrl generate``, the
    Python API's engines): ``where`` names it. Refused before any tokenizer sees it, which would
    raise a ``TypeError`` that blames the backend (a surrogate; ``fix`` is for that), or encode a
    NUL character as a token of its own with nothing said (``polyrl.nul_bytes``: the data files'
    rule)."""
    from polyrl.nul_bytes import TEXT_NUL_FIX, find_nul, nul_error  # (it imports this module)

    found = find_surrogate(value)
    if found is not None:
        raise surrogate_error(where, "the prompt", found, field=field, fix=fix)
    found = find_nul(value)
    if found is not None:
        raise nul_error(where, "the prompt", found, TEXT_NUL_FIX, field=field)


#: Unicode's default-ignorable code points outside the Cc and Cf categories (a combining grapheme
#: joiner, the Hangul fillers, variation selectors): drawn as nothing, as whitespace, controls and
#: format characters (U+200B ZERO WIDTH SPACE, U+2060 WORD JOINER, U+FEFF) are.
_IGNORABLE = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
              (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF))
_INVISIBLE_CATEGORIES = ("Cc", "Cf", "Zs", "Zl", "Zp")
#: Text of invisible characters alone (``blank``) as an RE2 pattern, for Arrow's compute kernels
#: (RE2's ``\s`` is ASCII only; ``\p{Z}`` adds the Unicode spaces).
BLANK_RE2 = r"^[\s\p{Z}\p{Cc}\p{Cf}" + "".join(rf"\x{{{a:x}}}-\x{{{b:x}}}" for a, b in _IGNORABLE) + "]*$"


def _invisible(char: str) -> bool:
    return (char.isspace() or unicodedata.category(char) in _INVISIBLE_CATEGORIES
            or any(low <= ord(char) <= high for low, high in _IGNORABLE))


def blank(text: str) -> bool:
    """``text`` shows nothing: empty, or whitespace and invisible characters only. Why not
    ``str.strip``: a prompt of a zero-width space (U+200B) passed it and was trained on as if it
    asked something. (Stops at the first visible character: the usual prompt costs one.)"""
    return all(_invisible(char) for char in text)


def blank_problem(text: str) -> str:
    """What is wrong with a ``blank`` prompt, for its error: "is empty", naming the invisible
    characters a user cannot see in an editor."""
    hidden = list(dict.fromkeys(char for char in text if not char.isspace()))
    if not hidden:
        return "is empty"
    names = ", ".join(f"U+{ord(char):04X} {unicodedata.name(char, 'control')}" for char in hidden[:3])
    return f"is empty: it holds only invisible characters ({names}{', ...' if len(hidden) > 3 else ''})"


def not_utf8_error(where: str, column: str, exc: UnicodeDecodeError) -> ConfigError:
    """The error for a cell of an Arrow/Parquet file whose bytes are not UTF-8 (the form a lone
    surrogate takes there)."""
    return ConfigError(f"{where}: column {column!r} holds text that is not valid UTF-8 (byte {exc.start}: "
                       f"{exc.reason}), so no tokenizer can encode it", field="data",
                       fix="re-export the file with valid UTF-8 text (a lone surrogate cannot be encoded)")
