"""Stop strings for a backend's own sampling loop: shared by every in-process generator.

A row keeps its text as it grows (``StopRow``): each step decodes only its newest tokens, with the
few before them as context, so a step costs the same whether the stop string is 5 characters or
100,000 and the completion 10 tokens or 10,000. Decoding a window of tokens sized by the stop
decoded the whole completion at every step once the stop was long (~500 characters and up)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: tokens a row's newest text may wait while it ends in U+FFFD (a character's bytes cut over byte
#: tokens: at most 4) before it is kept as it reads (a U+FFFD the model spelled, or bytes no later
#: token completes); a token completing it later sends the row back over its kept windows (``_rewind``)
_PENDING = 8
#: at most this many new characters are checked end by end; more (a row's first check after a
#: restart) are searched whole
_SCAN = 64


class StopStrings:
    """A request's stop strings and its tokenizer's decode, shared by the rows of a batch: each row
    checks its own tokens with a ``row()`` of its own."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)
        #: a stop spelling U+FFFD: found in a character's bytes in progress, which read as U+FFFD
        self.cut_stop = any("\ufffd" in s for s in self.stops)
        #: token id -> whether the text leaves it out (``_silent``), decoded once per id
        self._silent_ids: dict[int, bool] = {}
        self._default = StopRow(self)

    def _silent(self, token: int) -> bool:
        """Whether ``token`` spells nothing, alone or repeated: a special token the text leaves out
        (<|im_end|> sampled under ignore_eos). A piece that spells nothing alone but a space next to
        another (SentencePiece's "▁") spells something twice, so it is kept."""
        silent = self._silent_ids.get(token)
        if silent is None:
            silent = self.decode([token]) == "" and self.decode([token, token]) == ""
            self._silent_ids[token] = silent
        return silent

    def row(self) -> StopRow:
        """A check for one completion, holding its text as it grows: one per row of a batch."""
        return StopRow(self)

    def hit(self, ids: Sequence[int]) -> bool:
        """``StopRow.hit`` on one row held here: cheap for a caller checking one row as it grows;
        rows checked in turn each restart it (a whole decode), so a batch holds a ``row()`` each."""
        return self._default.hit(ids)


class StopRow:
    """One completion's stop check: its text so far is kept (the last ``longest`` characters of
    it), so a new token costs a decode of the few newest tokens, not of the completion."""

    def __init__(self, stops: StopStrings) -> None:
        self._stops = stops
        self._restart()

    def _restart(self) -> None:
        """Forget the row's tokens: the next ``hit`` reads its ids from the first."""
        self._seen: list[int] = []  # the caller's ids checked so far
        self._list: Sequence[int] | None = None  # the caller's list they were read from
        self._found = False
        self._spelled: list[int] = []  # the ids that spell text (``StopStrings._silent`` left out)
        # each kept window: (start, read, decode(_spelled[start:read]), the text it added); the next
        # decodes _spelled[read_before:] (``_current``), which must read on from its window
        self._kept: list[tuple[int, int, str, str]] = []
        self._tail = ""  # the kept text's last ``longest`` characters

    def _current(self) -> tuple[int, int, str]:
        """Where the next window starts, where its kept text ends, and that text decoded alone."""
        if not self._kept:
            return 0, 0, ""
        start, read, window, _ = self._kept[-1]
        return start, read, window

    def hit(self, ids: Sequence[int]) -> bool:
        """Whether the text of ``ids`` (this row's tokens, grown since the last call: the sampling
        loop appends) holds a stop string; only its new tokens can complete one, or the row would
        have ended. Other ``ids`` (not grown from the last ones) restart the row from them.

        Exactness: the text is decode(ids) (special tokens the text leaves out are skipped, which
        spell nothing); a character cut over byte tokens is found at its last byte (the text of a
        window ending in U+FFFD waits for the next token); each window starts where an earlier
        one's text ended whole, so its first token reads the same (SentencePiece's leading "▁"
        dropped in both decodes that are compared); and where a new window's text does not run
        on from its start's (<0xNN> pieces a later byte makes invalid, a clean-up of spaces) the
        row goes back over its kept windows until one does (``_rewind``)."""
        stops = self._stops
        if not stops.stops:
            return False
        n = len(self._seen)
        if len(ids) < n or (n and (ids[n - 1] != self._seen[-1] if ids is self._list
                                   else list(ids[:n]) != self._seen)):
            self._restart()
            n = 0
        self._list = ids
        new = [int(t) for t in ids[n:]]
        self._seen.extend(new)
        spelled = [t for t in new if not stops._silent(t)]
        if spelled and not self._found:
            self._spelled.extend(spelled)
            self._found = self._advance()
        return self._found

    def _advance(self) -> bool:
        """Decode the newest window; whether a stop ends in its new text."""
        stops, ids = self._stops, self._spelled
        start, read, window = self._current()
        text = stops.decode(ids[start:])
        if not text.startswith(window):
            if text.endswith("\ufffd") and not stops.cut_stop and len(ids) - read < _PENDING:
                return False  # bytes of a character in progress (SentencePiece's <0xNN> pieces)
            return self._rewind()
        return self._take(text[len(window):])

    def _take(self, new: str) -> bool:
        """Whether a stop ends in ``new`` (the text after the kept one); keep it once whole."""
        stops, ids = self._stops, self._spelled
        seen = self._tail + new
        found = self._holds(seen, len(new))
        _, read, _ = self._current()
        if (new and not new.endswith("\ufffd")) or len(ids) - read >= _PENDING:
            self._kept.append((read, len(ids), stops.decode(ids[read:]), new))
            self._tail = seen[-stops.longest:]
        return found

    def _rewind(self) -> bool:
        """The newest window's text changed what its window had read (a run of <0xNN> pieces made
        invalid by a later byte, a tokenizer's clean-up): drop kept windows, 1, 2, 4, ... back,
        until the text decoded from one reads on from it, and take the text after it as new."""
        stops, ids = self._stops, self._spelled
        drop = 1
        while True:
            del self._kept[-drop:]
            start, _, window = self._current()
            text = stops.decode(ids[start:])
            if text.startswith(window):
                break
            drop *= 2
        parts: list[str] = []
        size = 0
        for *_, kept in reversed(self._kept):
            if size >= stops.longest:
                break
            parts.append(kept)
            size += len(kept)
        self._tail = "".join(reversed(parts))[-stops.longest:]
        return self._take(text[len(window):])

    def _holds(self, seen: str, new: int) -> bool:
        """Whether a stop ends in the last ``new`` characters of ``seen`` (one comparison per
        stop and end, most decided by its first character)."""
        if new > _SCAN:
            return any(s in seen for s in self._stops.stops)
        end = len(seen)
        return any(seen.endswith(s, 0, e) for e in range(end - new + 1, end + 1) for s in self._stops.stops)
