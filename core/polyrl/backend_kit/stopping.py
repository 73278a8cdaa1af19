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
        # special tokens the text leaves out (no char: ``hit`` widens the window past them)
        self.window = 4 * self.longest + 4

    def hit(self, ids: list[int]) -> bool:
        """Whether the text of ``ids`` holds a stop string (only the newest token can complete one:
        the row would have ended at an earlier one)."""
        if not self.stops:
            return False
        window = self.window
        while True:
            tail = self.decode(ids[-window:])
            if any(s in tail for s in self.stops):
                return True
            if window >= len(ids):
                return False
            # the tokens before the newest must spell the longest stop; special tokens the text leaves
            # out (<|im_end|> sampled under ignore_eos) spell nothing, and a stop spanning them was missed
            if len(tail) - len(self.decode(ids[-1:])) >= self.longest + _SLACK:
                return False
            window *= 2
