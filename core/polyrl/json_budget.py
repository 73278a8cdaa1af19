"""How many values a JSON reply holds, counted on its bytes before it is parsed.

Why: a byte cap does not bound the memory a reply costs once parsed. ``[{},{},...]`` spends 3
bytes per value and each becomes a 64-byte dict (plus its slot in the list), so a 64 MiB reply
parsed into about 1.5 GB of Python objects, once per request in flight. A caller that knows how
many values an honest reply can hold (``polyrl.remote_replies.reply_value_budget``) refuses a
reply over that before ``json.loads`` sees it; parsed, each counted value costs at most about
``BYTES_PER_VALUE`` plus its own text.
"""

from __future__ import annotations

import re

#: what one parsed JSON value costs at most, beyond its text: a dict or list of one item and its
#: slot in the list holding it (a str's header is smaller), on 64-bit CPython
BYTES_PER_VALUE = 128
#: a JSON string once the escapes that could hide a quote are gone (``\\\\`` and ``\\"``)
_STRING = re.compile(rb'"[^"]*"')


def json_values(raw: bytes) -> int:
    """An upper bound on the values (scalars, arrays, objects, keys) of the JSON text ``raw``:
    its commas, colons and twice its ``[`` and ``{``, outside strings. Linear in ``len(raw)``
    and run in C (a regex over strings with escapes in them backtracked for seconds on 64 MiB)."""
    bare = _STRING.sub(b'""', raw.replace(b"\\\\", b"").replace(b'\\"', b""))
    return bare.count(b",") + bare.count(b":") + 2 * (bare.count(b"[") + bare.count(b"{")) + 1


def over_budget(raw: bytes, limit: int) -> int | None:
    """The values ``raw`` holds when more than ``limit``, else None. A reply too short to hold
    more (each value takes at least half a byte: ``[[]]``) is not scanned."""
    if 2 * len(raw) + 1 <= limit:
        return None
    count = json_values(raw)
    return count if count > limit else None
