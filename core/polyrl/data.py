"""Prompt datasets and the deterministic, resumable sampler that feeds the trainer.

A ``Dataset`` is a list of row dicts; the prompt column holds a string (used verbatim) or a chat
(a list of ``{"role", "content"}`` messages); every other column is passed to reward functions.
Sources (``load_dataset``): a built-in task by name (``polyrl.tasks``), a JSONL file, or rows.

Held-out evaluation
    Built-in tasks split by problem (disjoint by construction, see ``polyrl.tasks``). For a file
    or rows, ``options.eval_count`` rows are held out by a seeded permutation (``options.seed``):
    ``split="train"`` returns the rest, ``split="eval"`` the held-out rows (capped by
    ``options.count``). Asking for an eval split without ``eval_count`` is an error rather than a
    silent overlap with the training rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from polyrl.errors import ConfigError
from polyrl.tasks import SPLITS, TASKS
from polyrl.types import Prompt


def _check_prompt(value: Any, index: int, column: str) -> None:
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(f"row {index}: the prompt in column {column!r} is empty", field="data",
                              fix="remove empty prompts from the dataset")
        return
    ok = isinstance(value, Sequence) and len(value) > 0 and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )
    if not ok:
        raise ConfigError(
            f"row {index}: column {column!r} must hold a string or a list of "
            f"{{\"role\": ..., \"content\": ...}} messages, got {str(value)[:80]!r}",
            field="data", fix="store plain text or chat messages in the prompt column",
        )


@attrs.define(frozen=True)
class Dataset:
    """Validated prompt rows: non-empty, every row a dict with a well-formed prompt."""

    rows: list[dict[str, Any]] = attrs.field(converter=list)
    prompt_column: str = "prompt"
    name: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.rows:
            what = f"dataset {self.name!r}" if self.name else "the dataset"
            raise ConfigError(f"{what} has no rows", field="data",
                              fix="point at a non-empty JSONL file or task")
        for i, row in enumerate(self.rows):
            if not isinstance(row, Mapping):
                raise ConfigError(f"row {i} is a {type(row).__name__}, not an object", field="data",
                                  fix='each row must be a JSON object such as {"prompt": "...", "answer": "..."}')
            if self.prompt_column not in row:
                present = ", ".join(sorted(map(str, row))) or "none"
                raise ConfigError(
                    f"row {i} has no column {self.prompt_column!r} (its columns: {present})",
                    field="data.prompt_column",
                    fix="set data.prompt_column to the column that holds the prompts",
                )
            _check_prompt(row[self.prompt_column], i, self.prompt_column)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    @property
    def columns(self) -> list[str]:
        """Every column name present in some row, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def prompts(self) -> list[Prompt]:
        return [row[self.prompt_column] for row in self.rows]

    def select(self, indices: Sequence[int] | np.ndarray) -> Dataset:
        return Dataset([self.rows[int(i)] for i in indices], self.prompt_column, self.name)

    def fingerprint(self) -> str:
        """A content hash: a resumed run checks it is reading the same data."""
        h = hashlib.sha256()
        for row in self.rows:
            h.update(json.dumps(row, sort_keys=True, default=str).encode())
            h.update(b"\n")
        return h.hexdigest()[:16]


# --- loaders -----------------------------------------------------------------------------------


def from_rows(rows: Sequence[Mapping[str, Any]], prompt_column: str = "prompt", name: str = "rows") -> Dataset:
    """A dataset from in-memory row dicts (copied, so later edits do not leak in)."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ConfigError(f"rows must be a list of dicts, got {type(rows).__name__}", field="data.rows")
    return Dataset([dict(r) if isinstance(r, Mapping) else r for r in rows], prompt_column, name)


def load_jsonl(path: str | os.PathLike[str], prompt_column: str = "prompt") -> Dataset:
    """A dataset from a JSON-lines file (one object per line; blank lines are skipped)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data file {str(p)!r} not found", field="data.path",
                          fix="give the path of an existing .jsonl file")
    rows: list[Any] = []
    with p.open("rb") as fh:  # decoded line by line so that bad bytes are reported with their line
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{p}:{lineno} is not valid UTF-8 (byte {raw[exc.start]:#04x})", field="data.path",
                                  fix="save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{p}:{lineno} is not valid JSON ({exc.msg})", field="data.path",
                                  fix="write one JSON object per line") from None
            except RecursionError:
                raise ConfigError(f"{p}:{lineno} nests JSON too deeply to parse", field="data.path",
                                  fix="write flat objects like {\"prompt\": \"...\", \"answer\": \"...\"}") from None
            if not isinstance(rows[-1], dict):
                raise ConfigError(f"{p}:{lineno} is a JSON {type(rows[-1]).__name__}, not an object",
                                  field="data.path", fix='write objects like {"prompt": "...", "answer": "..."}')
    if not rows:
        raise ConfigError(f"data file {str(p)!r} has no rows", field="data.path", fix="add JSON lines to it")
    return Dataset(rows, prompt_column, p.name)


def load_task(
    name: str, options: Mapping[str, Any] | None = None, split: str = "train", prompt_column: str = "prompt"
) -> Dataset:
    """A built-in task's split (see ``polyrl.tasks``)."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}", field="data.task",
                          fix=f"use one of: {', '.join(sorted(TASKS))}, or data.path for a JSONL file")
    return Dataset(TASKS[name](options, split, prompt_column), prompt_column, f"{name}:{split}")


def split_dataset(dataset: Dataset, eval_count: int, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, eval): ``eval_count`` rows held out by a seeded permutation; disjoint by index."""
    if isinstance(eval_count, bool) or not isinstance(eval_count, int) or not 0 < eval_count < len(dataset):
        raise ConfigError(f"eval_count must be an integer in [1, {len(dataset) - 1}], got {eval_count!r}",
                          field="data.options.eval_count", fix="hold out fewer rows than the dataset has")
    order = np.random.default_rng([seed, 0x5EED]).permutation(len(dataset))
    held = np.sort(order[:eval_count])
    rest = np.sort(order[eval_count:])
    return dataset.select(rest), dataset.select(held)


FILE_OPTIONS = ("count", "eval_count", "seed")


def _file_split(dataset: Dataset, options: Mapping[str, Any], split: str) -> Dataset:
    unknown = sorted(set(options) - set(FILE_OPTIONS))
    if unknown:
        raise ConfigError(f"data files take no option {unknown[0]!r}", field=f"data.options.{unknown[0]}",
                          fix=f"valid options for a file or rows: {', '.join(FILE_OPTIONS)}")
    for key in FILE_OPTIONS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"must be an integer >= 0, got {value!r}", field=f"data.options.{key}")
    eval_count = int(options.get("eval_count") or 0)
    if eval_count:
        train, held = split_dataset(dataset, eval_count, int(options.get("seed") or 0))
        dataset = train if split == "train" else held
    elif split == "eval":
        raise ConfigError("evaluation needs held-out rows, but none are held out", field="data.options.eval_count",
                          fix="set data.options.eval_count = N to hold out N rows for evaluation, "
                          "or set eval.count = 0")
    count = options.get("count")
    if count:
        dataset = dataset.select(range(min(int(count), len(dataset))))
    return dataset


def load_dataset(
    task: str | None = None,
    path: str | os.PathLike[str] | None = None,
    rows: Sequence[Mapping[str, Any]] | None = None,
    *,
    prompt_column: str = "prompt",
    options: Mapping[str, Any] | None = None,
    split: str = "train",
) -> Dataset:
    """The ``split`` of a built-in ``task``, a JSONL ``path`` or in-memory ``rows`` (exactly one)."""
    if sum(x is not None for x in (task, path, rows)) != 1:
        raise ConfigError("give exactly one of data.task, data.path or data.rows", field="data",
                          fix='e.g. task = "arithmetic" or path = "prompts.jsonl"')
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}", field="split", fix=f"use one of {', '.join(SPLITS)}")
    if task is not None:
        return load_task(task, options, split, prompt_column)
    if path is not None:
        dataset = load_jsonl(path, prompt_column)
    else:
        dataset = from_rows(rows, prompt_column)  # type: ignore[arg-type]
    return _file_split(dataset, dict(options or {}), split)


# --- sampling ----------------------------------------------------------------------------------


class PromptSampler:
    """Batches of rows in shuffled epochs; deterministic from ``seed`` and exactly resumable.

    Epoch ``e`` visits the rows in the order ``default_rng([seed, e]).permutation(n)``; a batch
    that runs past the end of an epoch continues into the next. The whole state is therefore
    (epoch, position): ``state()`` is a small JSON-able dict and ``load_state`` restores it.
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch size must be an integer >= 1, got {batch_size!r}",
                              field="train.prompts_per_step")
        self.dataset = dataset
        self.batch_size = batch_size
        self.seed = int(seed)
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order: np.ndarray | None = None
        self._fingerprint = dataset.fingerprint()

    def _epoch_order(self) -> np.ndarray:
        if self._order is None:
            n = len(self.dataset)
            self._order = (
                np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else np.arange(n)
            )
        return self._order

    def next_indices(self) -> list[int]:
        """Row indices of the next batch (advances the sampler)."""
        out: list[int] = []
        while len(out) < self.batch_size:
            order = self._epoch_order()
            take = min(self.batch_size - len(out), len(order) - self.position)
            out += [int(i) for i in order[self.position:self.position + take]]
            self.position += take
            if self.position >= len(order):
                self.epoch, self.position, self._order = self.epoch + 1, 0, None
        return out

    def next_batch(self) -> list[dict[str, Any]]:
        """The next ``batch_size`` rows (shallow copies)."""
        return [dict(self.dataset.rows[i]) for i in self.next_indices()]

    def state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "shuffle": self.shuffle,
            "size": len(self.dataset),
            "fingerprint": self._fingerprint,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where ``state`` was taken (same dataset and seed required)."""
        missing = [k for k in ("seed", "epoch", "position", "size", "fingerprint") if k not in state]
        if missing:
            raise ConfigError(f"sampler state lacks {', '.join(missing)}", field="--resume",
                              fix="resume from a checkpoint written by this version of polyrl")
        if state["size"] != len(self.dataset) or state["fingerprint"] != self._fingerprint:
            raise ConfigError(
                "the dataset differs from the one the checkpoint was trained on", field="data",
                fix="resume with the same data section, or start a new run (different output_dir)",
            )
        if int(state["seed"]) != self.seed or bool(state.get("shuffle", True)) != self.shuffle:
            raise ConfigError(f"the checkpoint's data order used seed {state['seed']}, this run {self.seed}",
                              field="train.seed", fix="resume with the same train.seed")
        if not 0 <= int(state["position"]) < len(self.dataset) or int(state["epoch"]) < 0:
            raise ConfigError("sampler state is out of range", field="--resume", fix="use an intact checkpoint")
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None
