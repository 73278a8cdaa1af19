"""``/v1/completions``' ``logprobs.text_offset``: where each token starts in the reply's ``text``.

Why not the running sum of each token's own decoded length: a token holding part of a character
(byte-level BPE splits "é" into two tokens) decodes alone to U+FFFD, one character each, while the
text holds the one character they make together; every later offset then pointed past its token,
some past the end of the text. Here the tokens' bytes go through one UTF-8 decoder, as the text
was decoded, and a token starting inside a character gets that character's offset.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


def text_offsets(pieces: Sequence[bytes], text_length: int) -> list[int]:
    """Character offset of each token (its bytes ``pieces[i]``) in a text of ``text_length``
    characters; never past its end (special tokens the text leaves out add no characters there)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    offsets, emitted = [], 0
    for piece in pieces:
        offsets.append(min(emitted, text_length))
        emitted += len(decoder.decode(piece))
    return offsets
