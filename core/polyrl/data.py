"""Prompt datasets and the deterministic, resumable sampler that feeds the trainer.

A ``Dataset`` holds prompt rows; the prompt column holds a string (used verbatim) or a chat (a
list of ``{"role", "content"}`` messages); every other column is passed to reward functions.
Sources (``load_dataset``): a built-in task (``polyrl.tasks``), in-memory rows, or anything
``polyrl.data_sources`` reads: JSON/JSONL, CSV, Parquet, Arrow files (a list or a glob), a
``save_to_disk`` folder, or a dataset in the local 🤗 cache by name. JSON rows live in memory; the
others stay memory-mapped Arrow and a batch gathers its rows by index (``polyrl.data_arrow``).

Held-out evaluation
    Built-in tasks split by problem (disjoint by construction, see ``polyrl.tasks``). For other
    sources, ``options.eval_count`` rows are held out by a seeded permutation (``options.seed``):
    ``split="train"`` returns the rest, ``split="eval"`` the held-out rows (capped by
    ``options.count``). Asking for an eval split without ``eval_count`` is an error rather than a
    silent overlap with the training rows. ``eval_path`` / ``eval_split`` name a separate source.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from polyrl.data_arrow import (CHAT_ROLES, IMAGE_COLUMNS, ITER_BLOCK, ArrowRows, all_blank, arrow_holds_images,
                               bare_tool_call, check_prompt_column, check_text_columns, holds_images, image_column_error,
                               unknown_role, warn_final_assistant)
from polyrl.data_sources import RowOrigins, cached_split_rows, load_cached, load_files, read_json_files
from polyrl.control_chars import ControlProbe
from polyrl.csv_chats import refuse_chat_text
from polyrl.errors import ConfigError
from polyrl.late_columns import refuse_needed
from polyrl.nul_bytes import TEXT_NUL_FIX, nul_error, row_nul
from polyrl.one_conversation import message_row_fix
from polyrl.logs import get_logger
from polyrl.path_loops import missing_problem
from polyrl.split_overlap import check_disjoint
from polyrl.stored_rows import with_asked
from polyrl.tasks import SPLITS, TASK_CHECKS, TASK_OPTIONS, TASKS
from polyrl.template_roles import MODEL_FIX, ROLE_FIX, TemplateRoles
from polyrl.text_validity import blank, blank_problem, row_surrogate, surrogate_error
from polyrl.types import Prompt

log = get_logger("polyrl.data")


def _shown(value: Any) -> str:
    """A bad value as the user wrote it, with its type: ``0 (int)``, not ``'0'``."""
    text = repr(value)
    return f"{text[:80]}{'...' if len(text) > 80 else ''} ({type(value).__name__})"


def _check_prompt(value: Any, where: str, column: str) -> bool:
    """Refuse a prompt that is neither non-blank text nor a chat in known roles; whether it is a
    chat ending with an assistant message (``data_arrow.warn_final_assistant``)."""
    if isinstance(value, str):
        if blank(value):
            raise ConfigError(f"{where}: the prompt in column {column!r} {blank_problem(value)}", field="data",
                              fix="remove empty prompts from the dataset")
        return False
    problem = _chat_problem(value)
    if problem is not None:
        detail, fix = problem
        raise ConfigError(
            f"{where}: column {column!r} must hold a string or a list of "
            f"{{\"role\": ..., \"content\": ...}} messages, got {_shown(value)}{detail}", field="data", fix=fix)
    for m in value:
        if m["role"] not in CHAT_ROLES:
            raise unknown_role(m["role"], where, column)
    return value[-1]["role"] == "assistant"


def _chat_problem(value: Any) -> tuple[str, str] | None:
    """Why a non-text prompt is not a list of ``{"role": str, "content": str}`` messages (what is
    wrong with its first bad message, if any) and the fix; None when it is one."""
    generic = "store plain text or chat messages in the prompt column"
    if isinstance(value, (bytes, bytearray)):  # a Sequence too: its "messages" were its byte values
        return "", "decode the bytes to text first (value.decode('utf-8'))"
    if not isinstance(value, Sequence) or len(value) == 0:
        return "", generic
    for i, m in enumerate(value):
        if not isinstance(m, Mapping):
            return f"; message {i} is a {type(m).__name__}, not a table", generic
        if not isinstance(m.get("role"), str):
            return f"; message {i} has no string \"role\"", generic
        if isinstance(m.get("content"), list):
            return (f"; message {i}'s content is a list of parts (a multimodal message), not a string",
                    'write each message\'s content as one string: join the text of its {"type": "text", '
                    '"text": ...} parts (image parts are not supported)')
        if m.get("content") is None and bare_tool_call(m):
            continue  # the template writes it from its calls, or the start-up check names the row
        if not isinstance(m.get("content"), str):
            return f"; message {i} has no string \"content\"", generic
    return None


def _hidden_column(target: str, column: str, where: str) -> ConfigError:
    """The error for ``data.columns`` mapping ``column`` onto ``target``, a column the rows have of
    their own (the prompt column aside: no reward reads it by name, TRL passes ``prompts``). Why: the
    mapped values replaced that column's in every row, so the rewards (a reward function's ``target``
    argument, as TRL passes the dataset's own column) read ``column``'s values under its name, and
    the dataset's own were gone, unsaid."""
    return ConfigError(f"data.columns maps {target!r} to the column {column!r}, but {where} has a {target!r} column "
                       f"of its own, which the mapping would hide: the rewards would read {column!r}'s values under "
                       f"the name {target!r}", field=f"data.columns.{target}",
                       fix=f"read {column!r} by its own name in place of the mapping (a built-in reward's "
                           f"options.column = {column!r}, a reward function's parameter {column!r}), or rename the "
                           f"dataset's {target!r} column")


class Dataset:
    """Validated prompt rows: non-empty, every row with a well-formed prompt.

    ``rows`` is a list of dicts (JSON, tasks, the Python API) or ``ArrowRows`` (memory-mapped).
    ``columns`` maps the names rows are seen under to source columns (``{"prompt": "question"}``;
    source columns stay visible too); ``system_prompt`` is prepended to every chat prompt (a
    text prompt becomes the user turn) unless the chat already starts with a system message. That
    chat is what the model is asked (and what an environment's ``reset`` builds from); rewards get
    the row's own value of the prompt column (``polyrl.stored_rows``), as TRL passes the original
    row's columns.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]] | ArrowRows, prompt_column: str = "prompt", name: str = "",
                 *, columns: Mapping[str, str] | None = None, system_prompt: str | None = None,
                 origins: RowOrigins | None = None, _source_rows: np.ndarray | None = None,
                 _checked: bool = False) -> None:
        self.prompt_column = prompt_column
        self.name = name
        self.column_map = dict(columns or {})
        self.system_prompt = system_prompt
        self._arrow = rows if isinstance(rows, ArrowRows) else None
        self._rows: list[Any] | None = None if isinstance(rows, ArrowRows) else list(rows)
        #: JSON rows: where each source row came from; which source row each of ours is (None: the same)
        self._origins = origins
        self._source_rows = _source_rows
        self._print: str | None = None  # ``fingerprint``, once computed (the rows never change)
        if len(self) == 0:
            what = f"dataset {self.name!r}" if self.name else "the dataset"
            raise ConfigError(f"{what} has no rows", field="data",
                              fix="point at a non-empty data file or task")
        if not _checked:
            self._check()

    # --- validation --------------------------------------------------------------------------

    @property
    def _source_prompt(self) -> str:
        return self.column_map.get(self.prompt_column, self.prompt_column)

    def _check(self) -> None:
        source = self._source_prompt
        if self._arrow is not None:
            names = self._arrow.column_names
            for target, column in self.column_map.items():
                if column not in names:
                    raise ConfigError(f"{self.name} has no column {column!r} (its columns: {', '.join(names)})",
                                      field=f"data.columns.{target}", fix="map it to one of those columns")
                if target not in (column, self.prompt_column) and target in names:
                    raise _hidden_column(target, column, self.name)
            for column in IMAGE_COLUMNS:
                if column in names and arrow_holds_images(column, self._arrow_column(column)):
                    raise image_column_error(column, self.name)
            check_prompt_column(self._arrow.table.data.table, source, self.name, self._arrow.missing_cell)
            if self._arrow.csv is not None:  # a cell is text: chat messages there are JSON the model would read
                refuse_chat_text(self._arrow.table.data.table, source, self.name)
            check_text_columns(self._arrow.table.data.table, self.name)
            return
        prompt_field = "data.columns." + self.prompt_column if self.prompt_column in self.column_map else \
            "data.prompt_column"
        refuse_needed([(source, prompt_field), *((column, f"data.columns.{target}")
                                                 for target, column in self.column_map.items())],
                      self.late_columns, self.name)
        final_assistant: list[int] = []
        for i, row in enumerate(self._rows or ()):
            if not isinstance(row, Mapping):
                raise ConfigError(f"{self.where(i)} is a {type(row).__name__}, not an object", field="data",
                                  fix='each row must be a JSON object such as {"prompt": "...", "answer": "..."}')
            for column in IMAGE_COLUMNS:
                if column in row and holds_images(column, row[column]):
                    raise image_column_error(column, self.where(i))
            for target, column in self.column_map.items():
                if column not in row and target != self.prompt_column:
                    raise ConfigError(f"{self.where(i)} has no column {column!r}", field=f"data.columns.{target}",
                                      fix="map it to a column every row has")
                if target not in (column, self.prompt_column) and target in row:
                    raise _hidden_column(target, column, self.where(i))
            if row.get(source) is None:  # absent, or null (datasets gives a line without it None)
                present = ", ".join(sorted(str(k) for k, v in row.items() if v is not None)) or "none"
                mapped = self.prompt_column in self.column_map
                # the key is there, null (or, from JSON, missing on this line while other lines have
                # it): renaming the prompt column, the fix below alone, would not help that row
                null_prompt_fix = (f"give this row a prompt in column {source!r} (it is null or missing here, "
                                   "while the dataset has that column), or remove the row")
                raise ConfigError(
                    f"{self.where(i)} has no column {source!r} (its columns: {present})",
                    field=f"data.columns.{self.prompt_column}" if mapped else "data.prompt_column",
                    fix=null_prompt_fix if source in row else (
                        f"map {self.prompt_column} to the column that holds the prompts, one of those: "
                        f'data.columns = {{{self.prompt_column} = "..."}}') if mapped
                    else message_row_fix(row, source) or "set data.prompt_column to the column that holds the prompts",
                )
            if _check_prompt(row[source], self.where(i), source):
                final_assistant.append(i)
        if final_assistant:
            warn_final_assistant(self.where(final_assistant[0]), source, len(final_assistant))

    def null_everywhere(self, column: str) -> bool:
        """Whether ``column`` (a mapped name: its source column) is there and null in every row: a
        Parquet column of type null, JSON lines all writing it null, a CSV column left blank. Read
        from the Arrow column's null count (no row is materialised) or the JSON rows as parsed."""
        source = self.column_map.get(column, column)
        if self._arrow is not None:
            values = self._arrow_column(source)
            return values is not None and bool(values.null_count == len(values))
        rows = self._rows or ()
        return any(source in row for row in rows) and all(row.get(source) is None for row in rows)

    def blank_everywhere(self, column: str) -> bool:
        """Whether ``column`` is there and, in every row, null or text that shows nothing ("", spaces:
        ``text_validity.blank``): a column no row holds an answer in, as ``exact_match`` reads one."""
        source = self.column_map.get(column, column)
        if self._arrow is not None:
            values = self._arrow_column(source)
            return values is not None and all_blank(values)
        rows = self._rows or ()
        return any(source in row for row in rows) and all(
            row.get(source) is None or (isinstance(row[source], str) and blank(row[source])) for row in rows)

    def _arrow_column(self, source: str) -> Any:
        """The Arrow file's ``source`` column as this dataset's rows hold it (its selection taken); None
        where the file lacks it."""
        assert self._arrow is not None
        if source not in self._arrow.column_names:
            return None
        values = self._arrow.table.data.table.column(source)
        return values if self._arrow.indices is None else values.take(self._arrow.indices)

    @property
    def late_columns(self) -> dict[str, str]:
        """{column: where it first appears} for the columns the first rows of a JSON file that 🤗
        datasets could not read lack (``polyrl.late_columns``); {} for every other source."""
        origins = self._origins
        if origins is None or not origins.late:
            return {}
        return {column: origins.describe(row) for column, row in origins.late.items()}

    def where(self, index: int) -> str:
        """Where row ``index`` lives in its source, for errors: ``data/x.jsonl line 7 (row 5)`` for
        JSON files, ``row 5 of x.parquet`` otherwise (0-based, counted before any hold-out)."""
        if self._arrow is not None:
            return f"row {int(self._arrow._base([index])[0])} of {self.name}"
        row = int(self._source_rows[index]) if self._source_rows is not None else index
        return self._origins.describe(row) if self._origins is not None else f"row {row} of {self.name}"

    # --- rows as the trainer and rewards see them -----------------------------------------------

    def _present(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for target, column in self.column_map.items():
            out[target] = row[column]
        if self.system_prompt is not None:
            prompt = out[self.prompt_column]
            chat = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            if not (chat and chat[0].get("role") == "system"):
                chat = [{"role": "system", "content": self.system_prompt}, *chat]
            with_asked(out, self.prompt_column, chat)  # rewards still read the column's own value
        return out

    def take(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Fresh row dicts at ``indices`` (Arrow-backed: gathered from the mapped files)."""
        if self._arrow is not None:
            raw = self._arrow.take(indices)
        else:
            raw = [self._rows[int(i)] for i in indices]  # type: ignore[index]
        return [self._present(r) for r in raw]

    def __len__(self) -> int:
        return len(self._arrow) if self._arrow is not None else len(self._rows or ())

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.take([index])[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for start in range(0, len(self), ITER_BLOCK):
            yield from self.take(range(start, min(start + ITER_BLOCK, len(self))))

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every row (materialised: meant for small datasets and tests; batches use ``take``)."""
        if self._rows is not None and not self.column_map and self.system_prompt is None:
            return self._rows
        return list(self)

    @property
    def arrow_backed(self) -> bool:
        return self._arrow is not None

    @property
    def columns(self) -> list[str]:
        """Every column name present in some row, in first-seen order (mapped names included)."""
        seen: dict[str, None] = {}
        if self._arrow is not None:
            seen.update(dict.fromkeys(self._arrow.column_names))
        else:
            for row in self._rows or ():
                seen.update(dict.fromkeys(row))
        seen.update(dict.fromkeys(self.column_map))
        return list(seen)

    def prompts(self) -> list[Prompt]:
        return [row[self.prompt_column] for row in self]

    def select(self, indices: Sequence[int] | np.ndarray) -> Dataset:
        rows: list[Any] | ArrowRows
        source_rows = None
        if self._arrow is not None:
            rows = self._arrow.select(indices)
        else:
            rows = [self._rows[int(i)] for i in indices]  # type: ignore[index]
            picked = np.asarray(indices, dtype=np.int64).reshape(-1)
            source_rows = picked if self._source_rows is None else self._source_rows[picked]
        return Dataset(rows, self.prompt_column, self.name, columns=self.column_map,
                       system_prompt=self.system_prompt, origins=self._origins, _source_rows=source_rows,
                       _checked=True)

    def fingerprint(self) -> str:
        """A content hash: a resumed run checks it is reading the same data.

        JSON rows hash their content; Arrow rows hash the source files and the selected indices
        (no row is read). The column mapping and system prompt count when set. Computed once: the
        trainer checks the rows as read at resume, and the sampler takes the same rows' again.
        """
        if self._print is None:
            self._print = self._content_hash()
        return self._print

    def _content_hash(self) -> str:
        extra = ""
        if self.column_map or self.system_prompt is not None:
            extra = json.dumps({"columns": self.column_map, "system_prompt": self.system_prompt}, sort_keys=True)
        if self._arrow is not None:
            return self._arrow.fingerprint(extra)
        h = hashlib.sha256()
        for row in self._rows or ():
            h.update(json.dumps(row, sort_keys=True, default=str).encode())
            h.update(b"\n")
        if extra:
            h.update(extra.encode())
        return h.hexdigest()[:16]


# --- loaders -----------------------------------------------------------------------------------


def from_rows(rows: Sequence[Mapping[str, Any]], prompt_column: str = "prompt", name: str = "rows", *,
              columns: Mapping[str, str] | None = None, system_prompt: str | None = None) -> Dataset:
    """A dataset from in-memory row dicts (copied, so later edits do not leak in)."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ConfigError(f"rows must be a list of dicts, got {type(rows).__name__}", field="data.rows")
    source = (columns or {}).get(prompt_column, prompt_column)
    for i, row in enumerate(rows):  # JSON files are checked as read (read_json_rows), Arrow by column
        if not isinstance(row, Mapping):
            continue  # Dataset names it
        # the file readers' rules for text (polyrl.text_validity, polyrl.nul_bytes), every column
        bad = row_surrogate(row)
        if bad is not None:
            raise surrogate_error(f"row {i} of {name}", f"column {bad[0]!r}", bad[1])
        nul = row_nul(row)
        if nul is not None:
            raise nul_error(f"row {i} of {name}", f"column {nul[0]!r}", nul[1], TEXT_NUL_FIX)
        if source in row and row[source] is None:  # given as None: a JSON line may lack it (Dataset's error)
            raise ConfigError(f"row {i} of {name}: the prompt in column {source!r} is None, not text or chat "
                              "messages: that row has no prompt at all", field="data",
                              fix="give that row a prompt, or leave the row out (a 🤗 Dataset: "
                                  f"dataset.filter(lambda row: row[{source!r}] is not None))")
    return Dataset([dict(r) if isinstance(r, Mapping) else r for r in rows], prompt_column, name,
                   columns=columns, system_prompt=system_prompt)


def load_jsonl(path: str | os.PathLike[str], prompt_column: str = "prompt") -> Dataset:
    """A dataset from a JSON-lines file (one object per line; blank lines are skipped), typed as
    🤗 datasets types it (``polyrl.data_sources.typed_as_datasets``)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data file {str(p)!r} {missing_problem(p)}", field="data.path",
                          fix="give the path of an existing .jsonl file")
    rows, origins = read_json_files([p])
    return Dataset(rows, prompt_column, p.name, origins=origins)


def load_source(
    path: str | Sequence[str] | None = None,
    name: str | None = None,
    *,
    config: str | None = None,
    source_split: str | None = None,
    cache_dir: str | None = None,
    prompt_column: str = "prompt",
    columns: Mapping[str, str] | None = None,
    system_prompt: str | None = None,
    field: str = "data.path",
    split_field: str = "data.split",
) -> Dataset:
    """Every row of a file source (``path``: files, a glob, a save_to_disk folder) or of a cached
    Hub dataset (``name`` + ``config`` + ``source_split``), before any hold-out."""
    origins = None
    if name is not None:
        rows: list[Any] | ArrowRows = load_cached(name, config, source_split, cache_dir, split_field)
        label = f"{name}:{source_split or 'train'}"
    else:
        rows, label, origins = load_files(path, split=source_split, cache_dir=cache_dir,  # type: ignore[arg-type]
                                          field=field, split_field=split_field)
    return Dataset(rows, prompt_column, label, columns=columns, system_prompt=system_prompt, origins=origins)


def load_task(
    name: str, options: Mapping[str, Any] | None = None, split: str = "train", prompt_column: str = "prompt"
) -> Dataset:
    """A built-in task's split (see ``polyrl.tasks``)."""
    check_options(name, options or {})
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
#: how many prompts are held out for evaluation, in a run
_EVAL_COUNT_FIX = "the held-out prompts of a run are eval.count: write count = N under [eval]"
#: data.options keys a user writes for a setting of another table; ``configtools.unknown_key_fix``
#: names the table of any other polyrl key (``prompt_column`` -> data.prompt_column)
OPTION_HINTS = {key: _EVAL_COUNT_FIX for key in ("eval_count", "test_size", "eval_size", "num_eval")}


def _check_option_keys(task: str | None, options: Mapping[str, Any]) -> None:
    """Every ``data.options`` key one that the source reads (a built-in task's options, or a file's or
    rows' ``FILE_OPTIONS``), else one error naming the key and, where there is one, the setting to
    write instead (``eval_count`` beside a task is ``eval.count``). Why: each source read its own
    keys at load time only, and the fix listed them without the setting the user meant."""
    from polyrl.config import DataSection  # it reads data.options with this function
    from polyrl.configtools import unknown_key_fix

    valid = TASK_OPTIONS[task] if task is not None else FILE_OPTIONS
    unknown = sorted(map(str, set(options) - set(valid)))
    if not unknown:
        return
    key = unknown[0]
    source = f"the {task} task takes" if task is not None else "data files and rows take"
    own = {f.name for f in attrs.fields(DataSection) if f.name not in ("options", "rows", "eval_rows")}
    fix = (f"{key} is a key of [data] itself: write {key} = ... beside options, not inside it" if key in own
           else unknown_key_fix(key, options[key], list(valid), OPTION_HINTS))
    raise ConfigError(f"{source} no option {key!r}", field=f"data.options.{key}", fix=fix)


def check_options(task: str | None, options: Mapping[str, Any]) -> None:
    """``data.options`` checked as the config is read, before any row is: a built-in task's name,
    its options' keys and values, or a file's or rows' keys and values."""
    if task is not None:
        if task not in TASKS:
            raise ConfigError(f"unknown task {task!r}", field="data.task",
                              fix=f"use one of: {', '.join(sorted(TASKS))}, or data.path / data.name for your own rows")
        _check_option_keys(task, options)
        TASK_CHECKS[task](options)
    else:
        _check_file_options(options)


def _check_file_options(options: Mapping[str, Any]) -> None:
    """A file's or rows' ``data.options``: known keys, each an integer >= 0 (TOML's ``true`` is not 1)."""
    _check_option_keys(None, options)
    for key in FILE_OPTIONS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"must be an integer >= 0, got {_shown(value)}", field=f"data.options.{key}",
                              fix=f"e.g. options = {{{key} = {0 if key == 'seed' else 100}}}, or remove it")
    if options.get("count") == 0 and not isinstance(options.get("count"), bool):  # was read as "no cap": every row
        raise ConfigError("is 0, which would keep no training rows", field="data.options.count",
                          fix="give the training rows to keep, e.g. options = {count = 100}, or remove it to keep "
                              "every row")


def _file_split(dataset: Dataset, options: Mapping[str, Any], split: str) -> Dataset:
    _check_file_options(options)
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
    path: str | Sequence[str] | os.PathLike[str] | None = None,
    rows: Sequence[Mapping[str, Any]] | None = None,
    *,
    name: str | None = None,
    config: str | None = None,
    source_split: str | None = None,
    cache_dir: str | None = None,
    prompt_column: str = "prompt",
    columns: Mapping[str, str] | None = None,
    system_prompt: str | None = None,
    options: Mapping[str, Any] | None = None,
    split: str = "train",
) -> Dataset:
    """The ``split`` (train/eval hold-out) of a built-in ``task``, a file ``path``, a cached Hub
    dataset ``name`` or in-memory ``rows`` (exactly one)."""
    if sum(x is not None for x in (task, path, rows, name)) != 1:
        raise ConfigError("give exactly one of data.task, data.path, data.name or data.rows", field="data",
                          fix='e.g. task = "arithmetic" or path = "prompts.parquet"')
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}", field="split", fix=f"use one of {', '.join(SPLITS)}")
    if task is not None:
        if columns or system_prompt is not None:
            raise ConfigError("built-in tasks take no column mapping or system prompt", field="data.task",
                              fix="set task options in data.options instead")
        return load_task(task, options, split, prompt_column)
    if rows is not None:
        dataset = from_rows(rows, prompt_column, columns=columns, system_prompt=system_prompt)
    else:
        dataset = load_source(os.fspath(path) if isinstance(path, os.PathLike) else path, name, config=config, source_split=source_split, cache_dir=cache_dir,
                              prompt_column=prompt_column, columns=columns, system_prompt=system_prompt)
    return _file_split(dataset, dict(options or {}), split)


def load_train_and_eval(data: Any, eval_count: int) -> tuple[Dataset, Dataset | None]:
    """The training rows and the evaluation rows (``eval_count`` of them; 0: none) of a
    ``[data]`` section: a separate eval source (``eval_path`` / ``eval_split`` / ``eval_rows``) when given, the
    task's own eval split, or rows held out of the training source by a seeded permutation.
    A file or cached source is read once; both splits select from it."""
    options = dict(data.options)
    if data.task is not None:
        train = load_task(data.task, options, "train", data.prompt_column)
        if eval_count <= 0:
            return train, None
        return train, load_task(data.task, {**options, "count": eval_count}, "eval", data.prompt_column)
    common = {"prompt_column": data.prompt_column, "columns": dict(data.columns) or None,
              "system_prompt": data.system_prompt}
    if data.rows is not None:
        everything = from_rows(data.rows, **common)
    else:
        everything = load_source(data.path, data.name, config=data.config, source_split=data.split,
                                 cache_dir=data.cache_dir, **common)
    eval_rows = getattr(data, "eval_rows", None)
    separate_eval = data.eval_path is not None or data.eval_split is not None or eval_rows is not None
    if eval_count <= 0 or separate_eval:
        train = _file_split(everything, options, "train")
        if eval_count <= 0:
            return train, None
        if eval_rows is not None:
            held = from_rows(eval_rows, name="eval_rows", **common)
        elif data.eval_path is not None:
            held = load_source(data.eval_path, cache_dir=data.cache_dir, field="data.eval_path", **common)
        else:
            held = load_source(data.path, data.name, config=data.config, source_split=data.eval_split,
                               cache_dir=data.cache_dir, split_field="data.eval_split", **common)
            if data.name is not None:  # a slice of the training split may name its rows again
                check_disjoint(data.split, data.eval_split,
                               lambda split: cached_split_rows(data.name, data.config, split, data.cache_dir))
        return train, held.select(range(min(eval_count, len(held))))
    _check_file_options(options)  # as written: ``eval_count = true`` was replaced below without a word
    options["eval_count"] = eval_count  # hold eval_count rows out of the training source
    # options.count caps the training rows; the run evaluates on eval.count rows (a count of 100 cut an
    # eval.count of 200 to 100 without a word), as a task's eval split takes eval.count whatever its count
    eval_options = {key: value for key, value in options.items() if key != "count"}
    return _file_split(everything, options, "train"), _file_split(everything, eval_options, "eval")


def _counted(count_tokens: Callable[[Prompt], int | None], prompt: Prompt, dataset: Dataset, i: int) -> int | None:
    """``count_tokens(prompt)`` (None: this prompt cannot be counted here); a chat template raising
    on the row (Gemma's and Mistral's refuse a system message or roles that do not alternate: a
    jinja2 traceback) is one error naming it."""
    try:
        return count_tokens(prompt)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the template is the model folder's code
        calls = isinstance(prompt, list) and any(m.get("content") is None and bare_tool_call(m) for m in prompt)
        raise ConfigError(f"{dataset.where(i)}: the model's chat template refused the prompt: "
                          f"{type(exc).__name__}: {str(exc)[:300]}", field="data",
                          fix=("the prompt holds an assistant tool call with null content, which this template "
                               "cannot render: use a model whose chat template renders tool calls, or write the "
                               "call as text in the message's content") if calls else
                              ("make the row's messages what the template accepts (some templates take no "
                               "system message, or need user and assistant turns to alternate; "
                               "data.system_prompt adds a system message to every row)")) from None


def _check_roles(roles: TemplateRoles, render: Callable[[Prompt], Any], prompt: Prompt, dataset: Dataset,
                 i: int) -> None:
    """A chat prompt's message in a role the chat template drops is an error naming its row
    (``polyrl.template_roles``): the model would never read it, and nothing else says so."""
    if isinstance(prompt, str):
        return
    found = roles.problem(prompt, render)  # type: ignore[arg-type]
    if found is not None:
        j, what = found
        raise ConfigError(f"{dataset.where(i)}: message {j} of column {dataset.prompt_column!r} {what}", field="data",
                          fix=ROLE_FIX + MODEL_FIX)
    call = roles.dropped_call(prompt, render)  # type: ignore[arg-type]
    if call is not None:
        raise ConfigError(f"{dataset.where(i)}: message {call} of column {dataset.prompt_column!r} is an assistant "
                          "tool call that the model's chat template does not render (it writes no tool_calls): the "
                          "model would never read that call", field="data",
                          fix="use a model whose chat template renders tool calls, or write the call as text in "
                              "the message's content")


def check_prompt_roles(dataset: Dataset, render: Callable[[Prompt], Any] | None,
                       probe: ControlProbe | None = None) -> None:
    """Every chat prompt's roles checked against those the chat template renders
    (``_check_roles``; None: no template to ask), and with ``probe`` its control characters
    (``polyrl.control_chars``), without counting lengths: the dry run's check, on the model
    folder's tokenizer alone (``polyrl.dry_run_roles``). A few renderings per conversation shape."""
    roles = TemplateRoles()
    for start in range(0, len(dataset), ITER_BLOCK):
        block = dataset.take(range(start, min(start + ITER_BLOCK, len(dataset))))
        for i, row in enumerate(block, start):
            prompt = row[dataset.prompt_column]
            if probe is not None:
                probe.check(prompt, dataset.where(i), f"column {dataset.prompt_column!r}")
            if render is not None:
                _check_roles(roles, render, prompt, dataset, i)


def _block_counts(count_many: Callable[[list[Prompt]], Sequence[int | None]] | None,
                  prompts: list[Prompt]) -> Sequence[int | None] | None:
    """``count_many(prompts)``; None (no batch counter, or it failed: a chat template refusing one
    row, a row the engine refuses) to count the block one row at a time, where the error names it."""
    if count_many is None:
        return None
    try:
        counts = count_many(prompts)
    except Exception:  # noqa: BLE001 - counted again row by row, which names the row and the cause
        return None
    return counts if len(counts) == len(prompts) else None


def check_prompt_lengths(dataset: Dataset, count_tokens: Callable[[Prompt], int | None], max_length: int,
                         *, drop: bool = False, counted: str = "chat template included",
                         render: Callable[[Prompt], Any] | None = None,
                         max_new_tokens: int | None = None, probe: ControlProbe | None = None,
                         count_many: Callable[[list[Prompt]], Sequence[int | None]] | None = None,
                         ) -> tuple[Dataset, int]:
    """(dataset, rows dropped): every prompt must be shorter than ``max_length`` tokens as
    ``count_tokens`` measures it (the generate engine's own encoding, chat template included;
    ``counted`` says what else it adds, e.g. an episode's tool instructions). ``render`` (the
    prompt's ids, as ``count_tokens`` counts them): every chat prompt's roles must be ones the
    template renders (``_check_roles``), checked in the same pass. A prompt ``count_tokens`` cannot
    count (None: a third-party backend's text prompt, ``polyrl.hook_prompts``) is left unchecked.
    ``max_new_tokens``: the prompts that fit but leave a completion fewer tokens than that are
    counted in one warning (generation cuts those completions at ``max_length``: TRL, which bounds
    no prompt + completion, gives them all ``max_completion_length``).

    Why at startup, in one pass: generation refuses an overlong prompt only when its batch is
    drawn, possibly hours in, and names it by its place in the batch. Here the first one is an
    error naming its file and line (and how many there are); with ``drop`` they are left out.
    ``probe``: a prompt holding a control character the tokenizer cannot encode as itself is an
    error naming its row, in the same pass (``polyrl.control_chars``). ``count_many``: the same
    counts for a block of prompts in one call (one tokenizer call per row was most of the check's
    time at 100k rows); a block it fails on is counted row by row, so an error names its row.
    """
    t0 = time.perf_counter()
    over: list[int] = []
    first = uncounted = 0
    short: list[int] = []  # rows that fit but leave a completion fewer than max_new_tokens tokens
    roles = TemplateRoles()
    for start in range(0, len(dataset), ITER_BLOCK):
        block = dataset.take(range(start, min(start + ITER_BLOCK, len(dataset))))
        counts = _block_counts(count_many, [row[dataset.prompt_column] for row in block])
        for i, row in enumerate(block, start):
            if probe is not None:
                probe.check(row[dataset.prompt_column], dataset.where(i), f"column {dataset.prompt_column!r}")
            tokens = counts[i - start] if counts is not None else \
                _counted(count_tokens, row[dataset.prompt_column], dataset, i)
            if tokens is None:
                uncounted += 1
                continue
            if render is not None:
                _check_roles(roles, render, row[dataset.prompt_column], dataset, i)
            if tokens >= max_length:
                first = first or tokens
                over.append(i)
            elif max_new_tokens is not None and tokens + max_new_tokens > max_length:
                short.append(i)
    log.info("prompt lengths checked", dataset=dataset.name, rows=len(dataset), overlong=len(over),
             **({"uncounted": uncounted} if uncounted else {}), seconds=round(time.perf_counter() - t0, 2))
    if short:
        log.warning(f"{len(short)} of {len(dataset)} prompts of {dataset.name} leave fewer than generation.max_new_tokens "
                    f"= {max_new_tokens} tokens below model.max_length = {max_length}: their completions are cut "
                    "there", first=dataset.where(short[0]),
                    fix="raise model.max_length (prompt + completion tokens) or shorten those prompts")
    if not over:
        return dataset, 0
    if not drop:
        more = f" ({len(over)} of {len(dataset)} prompts are that long)" if len(over) > 1 else ""
        raise ConfigError(
            f"{dataset.where(over[0])}: the prompt has {first} tokens as the model sees it ({counted}), "
            f"not below model.max_length = {max_length}{more}", field="model.max_length",
            fix="raise model.max_length (prompt + completion tokens), shorten or remove that row, "
                "or set data.drop_overlong = true to leave overlong rows out")
    if len(over) == len(dataset):
        raise ConfigError(f"every prompt of {dataset.name} has {max_length} tokens or more", field="model.max_length",
                          fix="raise model.max_length, or use shorter prompts")
    log.warning(f"dropped {len(over)} of {len(dataset)} prompts of {dataset.name}: {max_length} tokens or "
                "more (model.max_length)", first=dataset.where(over[0]))
    return dataset.select(np.setdiff1d(np.arange(len(dataset)), over)), len(over)


# --- sampling ----------------------------------------------------------------------------------


def dataset_changed_error() -> ConfigError:
    """The refusal of a resume whose training rows differ from its checkpoint's: one message
    whether the trainer finds it before any model loads or the sampler does at ``load_state``."""
    return ConfigError("the dataset differs from the one the checkpoint was trained on", field="data",
                       fix="resume with the same data section, or start a new run (different output_dir)")


class PromptSampler:
    """Batches of rows in shuffled epochs; deterministic from ``seed`` and exactly resumable.

    Epoch ``e`` visits the rows in the order ``default_rng([seed, e]).permutation(n)``; a batch
    that runs past the end of an epoch continues into the next. The whole state is therefore
    (epoch, position): ``state()`` is a small JSON-able dict and ``load_state`` restores it.
    Rows are fetched only when a batch is drawn, so an Arrow-backed dataset is never read whole.
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

    def end_epoch(self, epoch: int) -> None:
        """Leave epoch ``epoch``'s remaining rows (transformers' ``control.should_epoch_stop``): the
        next batch starts epoch ``epoch + 1``. Nothing when the sampler has left it already (the
        last batch ran to or past its end). The state stays (epoch, position): a resume continues
        exactly."""
        if self.epoch == epoch and self.position:
            self.epoch, self.position, self._order = epoch + 1, 0, None

    def next_batch(self) -> list[dict[str, Any]]:
        """The next ``batch_size`` rows (shallow copies)."""
        return self.dataset.take(self.next_indices())

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
            raise dataset_changed_error()
        if int(state["seed"]) != self.seed or bool(state.get("shuffle", True)) != self.shuffle:
            raise ConfigError(f"the checkpoint's data order used seed {state['seed']}, this run {self.seed}",
                              field="train.seed", fix="resume with the same train.seed")
        if not 0 <= int(state["position"]) < len(self.dataset) or int(state["epoch"]) < 0:
            raise ConfigError("sampler state is out of range", field="--resume", fix="use an intact checkpoint")
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None
