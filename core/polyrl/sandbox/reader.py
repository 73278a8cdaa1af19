"""The tests' iteration of a value that lives in the sample: its items, read as the tests ask for them.

Why: the whole value was read at the first item, so a right generator without end failed
``list(islice(fib(), 5)) == [0, 1, 1, 2, 3]`` and ``zip(range(3), fib())`` (its reading stopped
past ``MAX_ITEMS``), as ``python tests.py`` passes. Why a module of its own: ``remote`` makes a
reader and ``pairing`` asks whether an operand is one; neither needs the other's rules for it.

The first ``PER_ITEM`` items come one request each, so a test that takes a few (``next`` a few
times, ``islice``, ``zip`` beside a short list) runs no more of the sample's code than Python
would; past them a request takes as many items as were taken so far (up to ``MAX_BATCH``), so a
long finite value costs a few dozen requests, not one per item. Not covered: past ``PER_ITEM``,
items read ahead of the tests are held here, so the sample's own code (or another stand-in of the
same generator, as a global name of the sample's is after a step) does not see them; and an
iterator that hangs between items past them may hang where Python would have stopped first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from polyrl.sandbox.channel import SampleStopped
from polyrl.sandbox.values import MAX_ITEMS, ProtocolError, item_key, same_hash

if TYPE_CHECKING:
    from polyrl.sandbox.harness import Session

#: Items read one request each before a request takes more (see the module doc).
PER_ITEM = 16
#: Most items one request takes.
MAX_BATCH = 4096


class Reader:
    """An iterator over a sample's iterator (``ref``): its items as the tests take them.

    ``own``: the value the tests iterate is its own iterator (a generator), so this reader is kept
    with it (``Remote._reader``) and a later ``next``/``for`` goes on where this one stopped.
    Items given are checked as one value's are (``values.same_hash``) and end past ``MAX_ITEMS``
    with OverflowError, as the whole read did: an honest test reads fewer. ``kin``: the value's
    family (``Remote._kin``), its items' too. ``whole``: called with all its items once they end
    (``Remote._snapshot``); ``expect``: the items they must be, as they come (AssertionError where
    one differs: an early ``any`` or ``break`` never reaches the end)."""

    __slots__ = ("_session", "_ref", "_data", "_root", "own", "buffer", "taken", "failed", "_classes", "_kin",
                 "_whole", "_expect", "_given")

    def __init__(self, session: Session, ref: int, data: bool, root: str | None, own: bool, kin: int | None = None,
                 whole: Callable[[list[Any]], object] | None = None, expect: list[Any] | None = None) -> None:
        self._session = session
        self._ref = ref
        self._data = data
        self._root = root
        self.own = own
        self._kin = kin
        self._whole = whole
        self._expect = expect
        self._given: list[Any] = []
        self.buffer: deque[Any] = deque()
        self.taken = 0
        self.failed: Exception | None = None  # what reading on raised, after the items read ahead
        self._classes: dict[int, list[Any]] = {}

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Any:
        if not self.buffer:
            self._fill()
            if not self.buffer:
                raise StopIteration
        return self.take()

    def empty(self) -> bool:
        """Whether it has no items left, reading one ahead to see (``pairing``: an empty answer
        beside expected values; Python's zip or enumerate would take it next)."""
        if not self.buffer:
            self._fill()
        return not self.buffer

    def read_ahead(self, items: list[Any] | Exception) -> None:
        """Hold the rest of its items (or what reading them raised), read by ``len``'s check
        (``Remote._check_count``), for the tests' next items: the sample has given them."""
        if isinstance(items, Exception):
            self.failed = items
        else:
            self.buffer.extend(items)

    def take(self) -> Any:
        """The next item read ahead (the caller saw ``buffer`` has one)."""
        self.taken += 1
        return self.buffer.popleft()

    def _fill(self) -> None:
        failed, self.failed = self.failed, None
        if failed is not None:
            raise failed
        if self.taken >= MAX_ITEMS:
            raise OverflowError(f"more than {MAX_ITEMS} items")
        n = 1 if self.taken < PER_ITEM else min(self.taken, MAX_BATCH, MAX_ITEMS - self.taken)
        s = self._session
        items = s.ask("take", self._data, root=self._root, ref=self._ref, kin=self._kin, n=n)
        try:
            if type(items) is not list or len(items) > n:
                raise ProtocolError("a read of items that is no list of at most the items asked")
            for item in items:
                same_hash(self._classes, item)
        except ProtocolError as exc:  # the sample broke the protocol: it ends, no test catches it
            s.channel.dead = SampleStopped("crashed", f"protocol: {exc}")
            raise s.channel.dead from None
        self.buffer.extend(items)
        if self._whole is not None:
            self._compare(items)

    def _compare(self, items: list[Any]) -> None:
        """``items``, the next the sample gave, against ``expect``; at their end, all to ``whole``."""
        start = len(self._given)
        self._given.extend(items)
        expect = self._expect
        if expect is not None and not same_items(expect[start:start + len(items)], items):
            raise AssertionError(f"the sample's value gave other items than its last reading ({len(expect)} items), "
                                 "with nothing called that changes it between")
        if not items and self._whole is not None:
            whole, self._whole = self._whole, None
            whole(self._given)


def same_items(seen: list[Any], items: list[Any]) -> bool:
    """Whether two readings of one value gave the same items: as many, each the same item
    (``values.item_key``: plain data exactly, an object of the sample's by its type)."""
    return len(seen) == len(items) and all(item_key(a) == item_key(b) for a, b in zip(seen, items))
