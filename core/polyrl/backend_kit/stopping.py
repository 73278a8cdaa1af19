"""Stop strings for a backend's own sampling loop: shared by every in-process generator."""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: characters a window's first tokens may spell differently than in the whole text: up to three
#: U+FFFD for the bytes of a character cut at the window's start, or a leading space dropped; and
#: one more the newest token may add in context (completing a character, its leading space)
_SLACK = 4


class StopStrings:
    """Detects a stop string completed by the newest token, decoding only a short tail."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)
        # a token decodes to >= 1 char except partial UTF-8 bytes (<= 4 tokens per char) and the
        # special tokens the text leaves out (no char: ``hit`` counts and decodes only the others)
        self.window = 4 * self.longest + 4
        #: token id -> whether the text leaves it out (``_silent``), decoded once per id
        self._silent_ids: dict[int, bool] = {}

    def _silent(self, token: int) -> bool:
        """Whether ``token`` spells nothing, alone or repeated: a special token the text leaves out
        (<|im_end|> sampled under ignore_eos). A piece that spells nothing alone but a space next to
        another (SentencePiece's "▁") spells something twice, so it is kept."""
        silent = self._silent_ids.get(token)
        if silent is None:
            silent = self.decode([token]) == "" and self.decode([token, token]) == ""
            self._silent_ids[token] = silent
        return silent

    def hit(self, ids: list[int]) -> bool:
        """Whether the text of ``ids`` holds a stop string (only the newest token can complete one:
        the row would have ended at an earlier one).

        Why silent tokens are skipped, not decoded: a row sampling them (ignore_eos) would widen
        its window over the whole run on every token, decoding the row each time (quadratic). A
        silent newest token adds no text, so it completes nothing; any other window decodes the
        newest tokens that spell text, which is the same text as the tokens with the silent ones."""
        if not self.stops or not ids or self._silent(int(ids[-1])):
            return False
        want = self.window
        kept: list[int] = []  # the tokens that spell text, newest first
        i = len(ids)
        while True:
            while len(kept) < want and i > 0:
                i -= 1
                if not self._silent(int(ids[i])):
                    kept.append(int(ids[i]))
            window = kept[::-1]
            tail = self.decode(window)
            if any(s in tail for s in self.stops):
                return True
            if i == 0:
                return False
            # the tokens before the newest must spell the longest stop (and what a window's start may
            # garble); fewer characters (byte tokens): look further back
            if len(tail) - len(self.decode(window[-1:])) >= self.longest + _SLACK:
                return False
            want *= 2
