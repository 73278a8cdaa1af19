"""Stop strings for a backend's own sampling loop: shared by every in-process generator."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class StopStrings:
    """Detects a stop string completed by the newest token, decoding only a short tail."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        # a token decodes to >= 1 char except partial UTF-8 bytes (<= 4 tokens per char)
        self.window = 4 * max((len(s) for s in self.stops), default=0) + 4

    def hit(self, ids: list[int]) -> bool:
        if not self.stops:
            return False
        tail = self.decode(ids[-self.window:])
        # earlier tokens never completed a stop string (the row would have ended already)
        return any(s in tail for s in self.stops)
