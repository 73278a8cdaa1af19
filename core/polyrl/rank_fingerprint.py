"""Every rank of a launched run checks, before step 0, that it runs the same experiment as rank 0.

Why: each rank loads the config, the data and the reward code itself, from its own disk and
environment. A reward file edited between two ranks' starts, a dataset that differs on another
node, or a config file changed mid-launch made the ranks train one "global" batch that is not
one (other prompts, other scores) without a word. The parts are hashed here and compared across
ranks in one gather; a difference is one ConfigError naming the part and the ranks, on every rank.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from polyrl.errors import ConfigError


class Rows(Protocol):
    """A dataset: its length and rows by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


#: What the fix says for each part that differs.
_FIXES = {
    "config": "start every rank from the same config file and --set options",
    "reward code": "give every rank the same reward function files (do not edit them while a run starts)",
    "train data": "give every rank the same data files (the same path must hold the same rows on every node)",
    "eval data": "give every rank the same eval data files",
}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def _code(code: Any) -> list[Any]:
    """A code object's bytecode, names and constants (nested functions' too), comparable across processes."""
    consts = [_code(c) if inspect.iscode(c) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), list(code.co_names), consts]


def reward_code(fn: Any) -> str:
    """What was loaded for a reward function: its code, and its file's bytes as found when loaded."""
    target = inspect.unwrap(fn)
    code = getattr(target, "__code__", None)
    try:
        with open(inspect.getfile(target), "rb") as f:
            text = hashlib.sha256(f.read()).hexdigest()
    except (OSError, TypeError):
        text = ""
    return _digest([_code(code) if code is not None else repr(target), text])


#: Rows hashed per dataset at most (evenly spaced, plus the count): startup stays quick on millions.
SAMPLED_ROWS = 4096


def _rows(dataset: Rows | None) -> str:
    if dataset is None:
        return "-"
    n = len(dataset)
    picks = range(n) if n <= SAMPLED_ROWS else (i * n // SAMPLED_ROWS for i in range(SAMPLED_ROWS))
    rows = (dataset[i] for i in picks)  # each row read once (an Arrow dataset decodes it per access)
    return _digest([n, [dict(row) if isinstance(row, Mapping) else row for row in rows]])


def fingerprint(snapshot: Mapping[str, Any], reward_codes: Sequence[str],
                train: Rows, eval_set: Rows | None) -> dict[str, str]:
    """{part: short hash} of what must match on every rank. ``snapshot``: the resolved config
    (``resume_config.snapshot``); ``reward_codes``: ``reward_code`` of each function reward, taken
    when it was loaded."""
    return {
        "config": _digest(dict(snapshot)),
        "reward code": _digest(list(reward_codes)),
        "train data": _rows(train),
        "eval data": _rows(eval_set),
    }


def check_same(prints: Sequence[object]) -> None:
    """Raise one ConfigError naming the first part where a rank differs from rank 0."""
    first = prints[0]
    if not isinstance(first, dict):
        return
    for part in first:
        differ = [rank for rank, p in enumerate(prints) if not isinstance(p, dict) or p.get(part) != first[part]]
        if differ:
            ranks = ", ".join(str(r) for r in differ)
            raise ConfigError(f"rank(s) {ranks} loaded another {part} than rank 0 (of {len(prints)} ranks): their "
                              "batches would not form one global batch", field="polyrl launch",
                              fix=_FIXES.get(part, "start every rank on the same files"))
