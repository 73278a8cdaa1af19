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


def _reads_alone(alone: str, in_context: str) -> bool:
    """Whether tokens decoded alone (``alone``) read as they did after the text before them: the
    same, without the leading space a SentencePiece decode drops at a text's start, or with more
    U+FFFD ahead (bytes of a character cut at the window's start, which a byte-level decode reads
    on their own and then reads on as the text does)."""
    if alone == in_context or (in_context.startswith(" ") and alone == in_context[1:]):
        return True
    cut = alone.lstrip("\ufffd")
    head = in_context[:len(in_context) - len(cut)]
    return len(alone) > len(in_context) and in_context.endswith(cut) and not head.strip("\ufffd")


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
        # each kept window: (start, read, decode(lead + _spelled[start:read]), the text it added, lead);
        # the next decodes lead + _spelled[start:] (``_current``), which must read on from its window.
        # lead: () or a token from before the window that reads the window as the text does
        # (``_starts_here``: a bad byte of the ByteFallback run it starts in)
        self._kept: list[tuple[int, int, str, str, tuple[int, ...]]] = []
        self._tail = ""  # the kept text's last ``longest`` characters
        # the text each step read after the newest window while it waited (ends in U+FFFD): (where the
        # window ended, tokens then, text), to check where a window may start (``_starts_here``)
        self._waiting: list[tuple[int, int, str]] = []

    def _current(self) -> tuple[int, int, str, tuple[int, ...]]:
        """Where the next window starts, where its kept text ends, that text decoded alone (after
        its lead), and its lead."""
        if not self._kept:
            return 0, 0, "", ()
        start, read, window, _, lead = self._kept[-1]
        return start, read, window, lead

    def hit(self, ids: Sequence[int]) -> bool:
        """Whether the text of ``ids`` (this row's tokens, grown since the last call: the sampling
        loop appends) holds a stop string; only its new tokens can complete one, or the row would
        have ended. Other ``ids`` (not grown from the last ones) restart the row from them.

        Exactness: the text is decode(ids) (special tokens the text leaves out are skipped, which
        spell nothing); a character cut over byte tokens is found at its last byte (the text of a
        window ending in U+FFFD waits for the next token); each window starts where an earlier
        one's text ended, at a token whose text decoded from there reads as the text does
        (``_starts_here``: not inside a ByteFallback run a bad byte made U+FFFD), so its first
        token reads the same (SentencePiece's leading "▁" dropped in both decodes that are
        compared); and where a new window's text does not run
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
        start, read, window, lead = self._current()
        text = stops.decode([*lead, *ids[start:]])
        if not text.startswith(window):
            if text.endswith("\ufffd") and not stops.cut_stop and len(ids) - read < _PENDING:
                return False  # bytes of a character in progress (SentencePiece's <0xNN> pieces)
            return self._rewind()
        return self._take(text, len(window))

    def _take(self, text: str, window: int) -> bool:
        """Whether a stop ends in the text after the kept one (``text``, decoded from the newest
        window's start, whose first ``window`` characters it read); keep it once whole, or once it
        has waited ``_PENDING`` tokens. Its tokens start the next window only where they read alone,
        or after a lead token, as they read after the text before them (``_starts_here``); elsewhere
        the newest window grows over them."""
        stops, ids = self._stops, self._spelled
        new = text[window:]
        seen = self._tail + new
        found = self._holds(seen, len(new))
        start, read, _, lead = self._current()
        if (new and not new.endswith("\ufffd")) or len(ids) - read >= _PENDING:
            for first in ((), lead or (ids[start],)) if self._kept else ((),):
                alone = stops.decode([*first, *ids[read:]])
                if not self._kept or self._starts_here(read, first, alone, new):
                    self._kept.append((read, len(ids), alone, new, first))
                    break
            else:
                self._kept[-1] = (start, len(ids), text, self._kept[-1][3] + new, lead)
            self._tail = seen[-stops.longest:]
            self._waiting = []
        else:
            self._waiting.append((read, len(ids), new))
        return found

    def _starts_here(self, read: int, first: tuple[int, ...], alone: str, new: str) -> bool:
        """Whether a window may start at token ``read``: its tokens decoded from there (``alone``)
        read as the text does (``new``, decoded with the tokens before them), now and as tokens come.
        ByteFallback reads a run of <0xNN> pieces whole, and one bad byte makes every piece of the
        run one U+FFFD: decoded from mid-run, bytes after it read as the characters they spell, which
        the text does not hold, however far back the bad byte is. Where they read U+FFFD alone too,
        they do as long as the run goes on, unless only the last character's bytes are cut (more are
        to come): so the text the last few waiting steps read must read alone as well. Where no
        token of a run reads so (a bad byte, then <0xNN> pieces of ASCII, each valid alone), the
        window is read after a lead, ``first``: the first token of the window before (the bad byte
        or a piece after it), checked as above, so the window need not grow over the run."""
        ahead = self._stops.decode(list(first)) if first else ""
        if not alone.startswith(ahead) or not _reads_alone(alone[len(ahead):], new):
            return False
        if not alone.endswith("\ufffd"):
            return True
        decode, ids = self._stops.decode, self._spelled
        for at, end, text in reversed(self._waiting[-3:]):  # a character's bytes cut: at most 3
            if at != read:
                break
            shorter = decode([*first, *ids[read:end]])
            if not shorter.startswith(ahead) or not _reads_alone(shorter[len(ahead):], text):
                return False
            if not shorter.endswith("\ufffd"):
                break
        return True

    def _rewind(self) -> bool:
        """The newest window's text changed what its window had read (a run of <0xNN> pieces made
        invalid by a later byte, a tokenizer's clean-up): drop kept windows, 1, 2, 4, ... back,
        until the text decoded from one reads on from it, and take the text after it as new."""
        stops, ids = self._stops, self._spelled
        drop = 1
        while True:
            del self._kept[-drop:]
            start, _, window, lead = self._current()
            text = stops.decode([*lead, *ids[start:]])
            if text.startswith(window):
                break
            drop *= 2
        parts: list[str] = []
        size = 0
        for *_, kept, _ in reversed(self._kept):
            if size >= stops.longest:
                break
            parts.append(kept)
            size += len(kept)
        self._tail = "".join(reversed(parts))[-stops.longest:]
        self._waiting = []
        return self._take(text, len(window))

    def _holds(self, seen: str, new: int) -> bool:
        """Whether a stop ends in the last ``new`` characters of ``seen`` (one comparison per
        stop and end, most decided by its first character)."""
        if new > _SCAN:
            return any(s in seen for s in self._stops.stops)
        end = len(seen)
        return any(seen.endswith(s, 0, e) for e in range(end - new + 1, end + 1) for s in self._stops.stops)
