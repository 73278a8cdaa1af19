"""A rendering tokenized whole, in which only the template's own markers are markers.

Why: ``literal_chat`` reads a message's spelled marker (``<|im_end|>`` in a tool result) as text and
the template's own as its token. It cut the rendering at the template's markers and encoded the
text between them piece by piece, redoing in Python what the tokenizer does at a marker: that was
exact for the common tokenizers only. A marker with ``lstrip``/``rstrip`` ate the characters Python
calls whitespace (``\\x1c``-``\\x1f`` too), which the tokenizer keeps, so a message ending in one lost
it; a ``normalized`` marker (``tokenizer.add_tokens``' default) is matched after the normalizer ran
on the text around it, so a piece encoded on its own got a SentencePiece ``▁`` it does not get in
the whole rendering; ``single_word`` was not read at all.

Here each of the template's markers in the rendering is written as a private-use character (its
alias) that a private copy of the fast tokenizer holds as an added token with the marker's flags
(``lstrip``, ``rstrip``, ``normalized``, ``single_word``), while the markers' own strings are text
to that copy; the whole string is encoded in one call and each alias's id is the marker's. So the
tokenizer itself does what it does at each marker, exactly as on the plain rendering. An alias the
copy did not read as its token (a ``normalized`` marker whose pattern does not match there: the
tokenizer reads the marker's string as text there too) gets the marker's string back, as text.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

_lock = threading.Lock()
#: per HF tokenizer: (its size, the markers, the first alias) -> (the copy, alias id -> marker id)
_copies: weakref.WeakKeyDictionary[Any, dict[tuple[int, tuple[str, ...], int], tuple[Any, dict[int, int]]]] = \
    weakref.WeakKeyDictionary()
_KEPT = 8  # copies kept per tokenizer (marker sets, alias ranges) before the oldest goes
#: where aliases are taken from: Unicode's supplementary private-use planes, which no text a
#: tokenizer was trained on holds
_PLANES = (0xF0000, 0x100000)
_PLANE_SIZE = 0xFFFE
_ROUNDS = 4  # encodings at most: aliases not read as their token are put back as text, then again


def _first_alias(count: int, used: set[str]) -> int | None:
    """The first code point of ``count`` private-use characters of which ``used`` holds none."""
    for plane in _PLANES:
        for base in range(plane, plane + _PLANE_SIZE - count, max(count, 1)):
            if not any(chr(base + k) in used for k in range(count)):
                return base
    return None


def _copy(tokenizer: Any, markers: tuple[str, ...], base: int) -> tuple[Any, dict[int, int]] | None:
    """A private copy of ``tokenizer``'s Rust tokenizer reading every marker's string as text and
    ``chr(base + k)`` as marker ``k`` (its flags kept), and the copy's id of each alias -> the
    marker's id; None for a tokenizer without a Rust one."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return None
    from tokenizers import AddedToken, Tokenizer

    size = int(backend.get_vocab_size(with_added_tokens=True))
    key = (size, markers, base)
    with _lock:
        try:
            cached = _copies.get(tokenizer, {}).get(key)
        except TypeError:  # not weakly referenceable: made each time
            cached = None
        if cached is not None:
            return cached
        added = {tok.content: (int(i), tok) for i, tok in tokenizer.added_tokens_decoder.items()}
        config = json.loads(backend.to_str())
        for entry in config.get("added_tokens") or ():
            if entry.get("content") in markers:  # special in the copy: text under encode_special_tokens
                entry["special"] = True
        copy = Tokenizer.from_str(json.dumps(config))
        copy.no_truncation()
        copy.no_padding()
        copy.encode_special_tokens = True
        translate: dict[int, int] = {}
        for k, content in enumerate(markers):
            marker_id, tok = added[content]
            alias = chr(base + k)
            copy.add_tokens([AddedToken(alias, single_word=bool(tok.single_word), lstrip=bool(tok.lstrip),
                                        rstrip=bool(tok.rstrip), normalized=bool(tok.normalized), special=False)])
            alias_id = copy.token_to_id(alias)
            if alias_id is None:
                return None
            translate[int(alias_id)] = marker_id
        made = (copy, translate)
        try:
            shapes = _copies.setdefault(tokenizer, {})
            if len(shapes) >= _KEPT:
                shapes.pop(next(iter(shapes)))
            shapes[key] = made
        except TypeError:
            pass
        return made


def _spans(text: str, added: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    """Where ``text`` holds added tokens' strings, as the tokenizer finds them: leftmost-longest,
    the tokens read before normalization first, then the ``normalized`` ones in the text between."""
    def found(pattern: list[str], start: int, stop: int) -> list[tuple[int, int, str]]:
        if not pattern:
            return []
        regex = re.compile("|".join(re.escape(s) for s in sorted(pattern, key=len, reverse=True)))
        return [(m.start(), m.end(), m.group(0)) for m in regex.finditer(text, start, stop)]

    raw = [s for s, tok in added.items() if not getattr(tok, "normalized", False)]
    normalized = [s for s, tok in added.items() if getattr(tok, "normalized", False)]
    spans = found(raw, 0, len(text))
    out: list[tuple[int, int, str]] = []
    at = 0
    for start, stop, content in [*spans, (len(text), len(text), "")]:
        out += found(normalized, at, start)
        if content:
            out.append((start, stop, content))
        at = stop
    return out


def encode_with_markers(tokenizer: Any, rendered: str, markers: Mapping[str, Any],
                        reveal: Callable[[str], str]) -> list[int] | None:
    """``rendered``'s ids, its ``markers`` (content -> AddedToken) where the template wrote them read
    as those tokens and their strings elsewhere (``reveal`` puts a message's spelled ones back into
    the text between) read as text; None for a tokenizer without a Rust one."""
    added = {tok.content: tok for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
             if isinstance(getattr(tok, "content", None), str) and tok.content}
    names = tuple(sorted(markers))
    index = {content: k for k, content in enumerate(names)}
    spans = [(a, b, content) for a, b, content in _spans(rendered, added) if content in index]
    pieces: list[str] = []
    at = 0
    for start, stop, content in spans:
        pieces.append(reveal(rendered[at:start]))
        pieces.append(content)
        at = stop
    pieces.append(reveal(rendered[at:]))
    base = _first_alias(len(names), set("".join(pieces)))
    made = _copy(tokenizer, names, base) if base is not None else None
    if base is None or made is None:
        return None
    copy, translate = made
    # the template's markers (odd pieces) as their aliases; one the copy does not read as its token
    # gets its string back (the tokenizer reads it as text there too) and the text is encoded again
    aliased = [chr(base + index[p]) if k % 2 else p for k, p in enumerate(pieces)]
    as_alias = [k % 2 == 1 for k in range(len(pieces))]
    for _ in range(_ROUNDS):
        encoding = copy.encode("".join(aliased), add_special_tokens=False)
        read: set[int] = set()
        for token_id, (start, stop) in zip(encoding.ids, encoding.offsets):
            if token_id in translate:
                read.update(range(start, stop))
        unread, position = False, 0
        for k, part in enumerate(aliased):
            if as_alias[k] and position not in read:
                aliased[k], as_alias[k], unread = pieces[k], False, True
            position += len(part)
        if not unread:
            return [translate.get(int(i), int(i)) for i in encoding.ids]
    return None
