"""Every rank of a launched run checks, before step 0, that it runs the same experiment as rank 0.

Why: each rank loads the config, the data, the reward code and the model itself, from its own disk
and environment. A reward file edited between two ranks' starts, a dataset that differs on another
node, a config file changed mid-launch, or a ``model.path`` that holds another checkpoint on another
node's disk made the ranks train one "global" batch that is not one (other prompts, other scores,
other weights averaged into one update) without a word. The parts are hashed here and compared across
ranks in one gather; a difference is one ConfigError naming the part and the ranks, on every rank.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
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
    "model checkpoint": "give every rank the same model files (model.path and model.reference_path must hold the "
                     "same checkpoint on every node)",
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


#: Bytes hashed per model file at most: its head (a safetensors/GGUF header lists every tensor's
#: name, dtype, shape and offset), then blocks spread evenly over the rest, and its size.
HEAD_BYTES = 1 << 16
BLOCKS, BLOCK_BYTES = 64, 1 << 12


def _file_sample(path: Path) -> list[Any]:
    """A file's size and sampled bytes: about 320 KiB read whatever the file's size (a 135M
    model's 540 MB safetensors costs a few milliseconds, a 70B model's shards as little each).

    What it catches: another checkpoint or model (other header, other size, or weights that
    differ all over, as any training step leaves them), a truncated or partly copied file. What
    it can miss: a change confined between the sampled blocks (one edited tensor); checkpoints
    polyrl writes carry full checksums for that (``polyrl.checkpoint.verify``)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        parts = [f.read(HEAD_BYTES)]
        if size > HEAD_BYTES:
            for i in range(BLOCKS):
                f.seek(HEAD_BYTES + i * (size - HEAD_BYTES) // BLOCKS)
                parts.append(f.read(BLOCK_BYTES))
    return [size, hashlib.sha256(b"".join(parts)).hexdigest()]


def model_files(path: str | os.PathLike[str] | None) -> str:
    """A short hash of a model as found on this rank's disk: every file of its folder (weights,
    config, tokenizer; hidden download caches left out) by relative name, or the one file (GGUF).
    ``-`` for no model; a path that is neither hashes its name (the backend loaded it otherwise)."""
    if path is None:
        return "-"
    root = Path(path)
    if root.is_file():
        return _digest(_file_sample(root))
    if not root.is_dir():
        return _digest(str(path))
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    return _digest([[str(p.relative_to(root)), _file_sample(p)] for p in files])


#: The ``[[rewards]]`` options that name a model or tokenizer folder (``reward_model``'s, and the
#: folders the TRL route saves reward model objects to).
REWARD_FOLDER_OPTIONS = ("path", "tokenizer")


def reward_files(rewards: Sequence[Any]) -> dict[str, str]:
    """``model_files`` of each folder or file a ``[[rewards]]`` entry's options name
    (``REWARD_FOLDER_OPTIONS``), by field (``rewards[0].options.path``). Why: a reward model
    retrained in place (same path, other weights) scored a resumed run's steps with another model
    without a word, where the policy's own folder was already checked. A name that is no local path
    (a plugin's alias) is left out: the saved config compares it as text."""
    found: dict[str, str] = {}
    for i, entry in enumerate(rewards):
        options = getattr(entry, "options", None) or {}
        for key in REWARD_FOLDER_OPTIONS:
            value = options.get(key)
            if isinstance(value, str) and value and os.path.exists(os.path.expanduser(value)):
                found[f"rewards[{i}].options.{key}"] = model_files(os.path.expanduser(value))
    return found


def fingerprint(snapshot: Mapping[str, Any], reward_codes: Sequence[str],
                train: Rows, eval_set: Rows | None, weights: str = "-") -> dict[str, str]:
    """{part: short hash} of what must match on every rank. ``snapshot``: the resolved config
    (``resume_config.snapshot``); ``reward_codes``: ``reward_code`` of each function reward, taken
    when it was loaded; ``weights``: ``model_files`` of the models loaded."""
    return {
        "config": _digest(dict(snapshot)),
        "reward code": _digest(list(reward_codes)),
        "train data": _rows(train),
        "eval data": _rows(eval_set),
        "model checkpoint": weights,
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
