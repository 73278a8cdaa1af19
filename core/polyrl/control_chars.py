"""Control characters the model's tokenizer cannot encode as themselves: refused, naming where.

Why: a byte-level vocabulary may lack some bytes' tokens. SmolLM2's (polyrl's default model) has
none for U+0004, U+0006, U+0013, U+0014, U+0016 and U+001D, and encodes each as its unknown token,
``<|endoftext|>``: a prompt holding one (pasted from a terminal, a PDF's text layer) was trained on
as text with an end of text in the middle, with nothing said (TRL's tokenizer does the same). Which
characters a tokenizer misreads is asked of the tokenizer itself, once per character: the other
controls (tab, line ends, form feed, U+001C...) encode as themselves there and are kept as text.
(NUL has its own rule, ``polyrl.nul_bytes``; tab, LF and CR are never asked.) The same probe
asks of the text an episode inserts (an environment's messages, a tool's result:
``polyrl.agents.episodes``), which no startup check sees, and, once at startup, of the text the
run adds to every prompt (tool schemas, ``data.system_prompt``: ``polyrl.control_setup``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.text_validity import find_char

log = get_logger(__name__)

#: the C0 and C1 controls and DEL, less NUL (refused everywhere) and tab, LF and CR (text's own)
_CONTROL = re.compile("[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class ControlProbe:
    """Which control characters a tokenizer gives back as themselves, asked once per character.

    ``encode``: a text prompt's ids as generation encodes it (None: this text cannot be encoded
    here, so nothing is refused); ``decode``: ids back to text, special tokens kept."""

    def __init__(self, encode: Callable[[str], Sequence[int] | None], decode: Callable[[list[int]], str]) -> None:
        self._encode = encode
        self._decode = decode
        self._read_as: dict[str, str | None] = {}

    def read_as(self, char: str) -> str | None:
        """None when ``char`` between two letters decodes back as written; else what the model
        reads in its place (``<|endoftext|>``; "" for a character the tokenizer drops)."""
        if char not in self._read_as:
            text = f"a{char}b"
            ids = self._encode(text)
            if ids is None or text in self._decode([int(i) for i in ids]):
                self._read_as[char] = None
            else:
                self._read_as[char] = self._between(char)
        return self._read_as[char]

    def _between(self, char: str) -> str:
        """What ``a{char}b`` decodes to between its two letters, less what encoding adds to any
        text (a BOS): ``<|endoftext|>`` for an unknown token, "" for a character dropped."""
        decoded = self._decode([int(i) for i in self._encode(f"a{char}b") or ()])
        letter = self._decode([int(i) for i in self._encode("a") or ()])
        decoded = decoded.removeprefix(letter[:letter.rfind("a")] if "a" in letter else "")
        return decoded[1:-1] if decoded.startswith("a") and decoded.endswith("b") else decoded

    def _misread_at(self, text: str) -> int | None:
        for found in _CONTROL.finditer(text):
            if self.read_as(found.group()) is not None:
                return found.start()
        return None

    def find(self, prompt: Any) -> tuple[str, int, str] | None:
        """The first control character in ``prompt`` (text or chat) the tokenizer misreads: (where
        inside it, e.g. ``[1]['content']``; its position; the character), or None."""
        return find_char(prompt, self._misread_at)

    def check(self, prompt: Any, where: str, what: str, field: str = "data") -> None:
        """Raise ``error`` for the first control character in ``prompt`` the tokenizer misreads."""
        found = self.find(prompt)
        if found is not None:
            raise self.error(where, what, found, field)

    def error(self, where: str, what: str, found: tuple[str, int, str], field: str = "data",
              fix: str | None = None) -> ConfigError:
        """The one error for ``found`` (``find``) in ``what`` (``column 'prompt'``) at ``where``;
        ``fix``: the fix's opening where the text is not a file's (an environment's answer)."""
        inner, at, char = found
        shown = self.read_as(char)
        return ConfigError(
            f"{where}: {what}{f' at {inner}' if inner else ''} holds the control character U+{ord(char):04X} "
            f"({char!r}) at character {at}, which the model's tokenizer cannot encode: "
            + (f"the model would read {shown!r} in its place" if shown else "it drops it"), field=field,
            fix=(fix or "remove it, or write what it stands for") + f" (Python: text.replace({char!r}, ''))"
                + ("" if fix else f"; in a file: tr -d '\\{ord(char):03o}' < FILE > NEW"))


def engine_probe(raw: Any) -> ControlProbe | None:
    """A probe on a backend engine's own encoding (``encode_prompt``) and its tokenizer's decoding,
    or None when the engine offers neither (a third-party backend's: nothing refused)."""
    encode = getattr(raw, "encode_prompt", None)
    # the tokenizer's own decode keeps special tokens (an engine's drops them, as completions are read)
    decode = getattr(getattr(raw, "tokenizer", None), "decode", None) or getattr(raw, "decode", None)
    if not (callable(encode) and callable(decode)):
        return None
    return ControlProbe(encode, decode)


def engines_probe(engines: Sequence[Any], say: bool = True) -> ControlProbe | None:
    """The first of ``engines``' probes (``engine_probe`` on each ``Engine``'s backend object), or
    None, said in one warning (``say``) naming the backends. Why said: a third-party backend's
    engine without ``encode_prompt`` left every prompt, observation and tool result unchecked
    without a word, so a U+0004 its tokenizer reads as an end of text went into training unseen."""
    for engine in engines:
        probe = engine_probe(engine.raw)
        if probe is not None:
            return probe
    if say:
        names = ", ".join(dict.fromkeys(str(e.backend) for e in engines))
        log.warning("control characters the model's tokenizer cannot encode (SmolLM2 reads U+0004 as <|endoftext|>) "
                    "are not checked in prompts, observations or tool results: no engine of this run offers "
                    "encode_prompt and a tokenizer's decode to ask", backends=names,
                    fix="give the backend's engine encode_prompt(text) -> ids and a tokenizer with decode "
                        "(polyrl.control_chars), or check the data for such characters yourself")
    return None


__all__ = ["ControlProbe", "engine_probe", "engines_probe"]
