"""Arrow-backed prompt rows: validated column-wise, read row by row only when a batch is drawn.

Why: a 1,000,000-row Parquet file must start training in seconds. 🤗 datasets keeps its rows in
memory-mapped Arrow files, so we keep that table, check the prompt column with Arrow compute
kernels (no Python dict per row), and gather the few rows a batch needs by index.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.one_conversation import message_row_fix
from polyrl.nul_bytes import ARROW_NUL_FIX, find_nul, nul_error
from polyrl.text_validity import BLANK_RE2, blank_problem, not_utf8_error

#: Rows gathered per call when iterating over a whole dataset (bounded memory).
ITER_BLOCK = 1024

#: Roles a prompt's messages may take: those chat templates render (``developer``: OpenAI-style
#: templates; ``ipython``: Llama 3.x tool results) and the ones episodes write. Anything else is
#: a typo ("usr", "User") that a template would render as a turn of its own, silently.
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer", "ipython")

log = get_logger("polyrl.data")


def unknown_role(role: Any, where: str, column: str) -> ConfigError:
    """The error for a message whose role no chat template knows, with a did-you-mean."""
    close = difflib.get_close_matches(str(role).lower(), CHAT_ROLES, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(f"{where}: a message in column {column!r} has the role {role!r}", field="data",
                       fix=f"{hint}use one of {', '.join(CHAT_ROLES)} (lower case)")


def _pa() -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def _is_text(t: Any) -> bool:
    pa, _ = _pa()
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _chat_struct(t: Any) -> Any | None:
    """The message struct type when ``t`` is a list of {role, content} structs, else None."""
    pa, _ = _pa()
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    inner = t.value_type
    if not pa.types.is_struct(inner):
        return None
    names = {inner.field(i).name: inner.field(i).type for i in range(inner.num_fields)}
    if all(k in names and _is_text(names[k]) for k in ("role", "content")):
        return inner
    return None


def _blank(texts: Any) -> np.ndarray:
    """Whether each text is null or shows nothing (``text_validity.blank``, as ``BLANK_RE2``: the
    JSON rows' check and this one refuse the same prompts)."""
    _, pc = _pa()
    blank = pc.or_kleene(pc.is_null(texts), pc.match_substring_regex(texts, BLANK_RE2))
    return np.asarray(pc.fill_null(blank, True).to_numpy(zero_copy_only=False), dtype=bool)


def all_blank(values: Any, block: int = 65536) -> bool:
    """Whether every value of an Arrow (chunked) array is null or text that shows nothing (``_blank``);
    read ``block`` rows at a time, stopping at the first that shows something (most columns: at once)."""
    if values.null_count == len(values):
        return True
    if not _is_text(values.type):
        return False
    return all(bool(_blank(values.slice(start, block)).all()) for start in range(0, len(values), block))


def _bad_rows(chunk: Any) -> tuple[np.ndarray, str]:
    """Indices (within ``chunk``) of rows whose prompt is unusable, and why (the first one's)."""
    pa, pc = _pa()
    if _is_text(chunk.type):
        bad = np.flatnonzero(_blank(chunk))
        first = chunk[int(bad[0])].as_py() if len(bad) else None
        return bad, "" if first is None else blank_problem(first)  # a null: the caller names it
    lengths = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy(zero_copy_only=False)
    bad = lengths == 0
    messages = pc.list_flatten(chunk)
    parents = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False)
    broken = pc.or_kleene(pc.is_null(pc.struct_field(messages, "role")), _null_content(messages))
    broken = pc.or_kleene(broken, pc.is_null(messages))
    broken_np = pc.fill_null(broken, True).to_numpy(zero_copy_only=False)
    if broken_np.any():
        bad[parents[broken_np]] = True
    # a chat prompt of blank messages stays: with an environment its reset writes the prompt (TRL's
    # rows without a train_dataset are one empty user message each)
    rows = np.flatnonzero(bad)
    return rows, _chat_problem(chunk, int(rows[0]), lengths) if len(rows) else ""


def bare_tool_call(m: Mapping[str, Any]) -> bool:
    """An assistant message with tool calls; with ``content`` null or absent it is tool calls alone
    (OpenAI's and TRL's shape), which a chat template writes from its calls (``template_roles.dropped_call``
    checks that the model's does, whatever the content)."""
    calls = m.get("tool_calls")
    return m.get("role") == "assistant" and isinstance(calls, list) and len(calls) > 0


def _null_content(messages: Any) -> Any:
    """Whether each message's content is null, where that is not an assistant's bare tool call
    (``template_roles.bare_tool_call``: content null, calls given, as OpenAI and TRL write it)."""
    pa, pc = _pa()
    null = pc.is_null(pc.struct_field(messages, "content"))
    fields = {messages.type.field(i).name: messages.type.field(i).type for i in range(messages.type.num_fields)}
    calls_type = fields.get("tool_calls")
    if calls_type is None or not (pa.types.is_list(calls_type) or pa.types.is_large_list(calls_type)):
        return null
    calls = pc.fill_null(pc.greater(pc.list_value_length(pc.struct_field(messages, "tool_calls")), 0), False)
    assistant = pc.fill_null(pc.equal(pc.struct_field(messages, "role"), "assistant"), False)
    return pc.and_kleene(null, pc.invert(pc.and_(calls, assistant)))


def _chat_problem(chunk: Any, row: int, lengths: np.ndarray) -> str:
    """What is wrong with chat ``row`` of ``chunk`` (one ``_bad_rows`` found): no messages, or which
    message is null or lacks its role or content. Why: "a message without role/content" sent users
    through every message of a long chat for the one null a Parquet writer left."""
    if lengths[row] == 0:
        return "has no messages" if chunk[row].is_valid else ""  # a null: the caller names it
    for j, message in enumerate(chunk[row].as_py()):
        if message is None:
            return f"holds a null where message {j} belongs, not a {{role, content}} message"
        missing = [key for key in ("role", "content") if message.get(key) is None
                   and not (key == "content" and bare_tool_call(message))]
        if missing:
            return f"has message {j} without a {' or '.join(missing)} (null)"
    return "has a message without role/content"


def _parts_content(t: Any) -> bool:
    """``t`` is a list of {role, content} structs whose content is a list (TRL's typed parts)."""
    pa, _ = _pa()
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    inner = t.value_type
    names = {inner.field(i).name: inner.field(i).type for i in range(inner.num_fields)}
    content = names.get("content")
    return "role" in names and content is not None and (pa.types.is_list(content) or pa.types.is_large_list(content))


def null_prompt(row: int, column: str) -> tuple[str, str]:
    """(why, fix) for a prompt that is null in a Parquet/Arrow table. Why its own words: Arrow keeps
    "no value" apart from ``""``, and "is empty" sent users looking for an empty string not there."""
    return ("is null (missing), not an empty value: that row has no prompt at all",
            f"write a prompt in that row, or drop the rows without one (pandas: df.dropna(subset=[{column!r}]))")


def check_prompt_column(table: Any, column: str, name: str,
                        missing: Callable[[int, str], tuple[str, str]] | None = None) -> None:
    """Every row of ``column`` is non-empty text or a non-empty chat; checked chunk by chunk (chats
    ending with an assistant message warned of once: ``warn_final_assistant``).
    ``missing(row, column)``: (why, fix) for a text row with no value, where the source says more
    than that it is null (a CSV cell pandas read as missing: ``ArrowRows.csv``)."""
    if column not in table.column_names:
        present = ", ".join(table.column_names) or "none"
        raise ConfigError(f"{name} has no column {column!r} (its columns: {present})",
                          field="data.prompt_column",
                          fix=message_row_fix(dict.fromkeys(table.column_names), column)
                          or f'set data.prompt_column, or map one: data.columns = {{{column} = "..."}}')
    data = table.column(column)
    if _parts_content(data.type):
        raise ConfigError(
            f"column {column!r} of {name} holds chat messages whose content is a list of parts (multimodal "
            "messages), not a string", field="data.prompt_column",
            fix='write each message\'s content as one string: join the text of its {"type": "text", "text": ...} '
                "parts (image parts are not supported)")
    if len(data) and data.null_count == len(data):  # pandas types a CSV column of empty cells double
        why = (missing or null_prompt)(0, column)[0]
        raise ConfigError(f"column {column!r} of {name} holds no prompt in any of its {len(data)} rows (row 0's "
                          f"{why})", field="data.prompt_column",
                          fix="set data.prompt_column (or map it in data.columns) to the column that holds the "
                              "prompts, or write them in this one")
    if not (_is_text(data.type) or _chat_struct(data.type) is not None):
        raise ConfigError(
            f"column {column!r} of {name} holds {data.type}, not text or chat messages", field="data.prompt_column",
            fix='store plain text, or a list of {"role": ..., "content": ...} messages, in the prompt column')
    offset, first_assistant, assistants = 0, -1, 0  # chats ending with an assistant message: the first, how many
    for chunk in data.chunks:
        bad, why = _bad_rows(chunk)
        if len(bad):
            row, fix = offset + int(bad[0]), "remove or fix that row"
            if not chunk[int(bad[0])].is_valid:  # null, text or chat: no value, not an empty one
                why, fix = (missing if missing is not None and _is_text(chunk.type) else null_prompt)(row, column)
            raise ConfigError(f"row {row} of {name}: the prompt in column {column!r} {why}", field="data", fix=fix)
        if not _is_text(chunk.type):
            first, count = _check_roles(chunk, offset, name, column)
            first_assistant = first if first_assistant < 0 else first_assistant
            assistants += count
        offset += len(chunk)
    if assistants:
        warn_final_assistant(f"row {first_assistant} of {name}", column, assistants)


def _check_roles(chunk: Any, offset: int, name: str, column: str) -> tuple[int, int]:
    """Every message's role is one of ``CHAT_ROLES`` (checked with one Arrow kernel per chunk);
    the first row whose prompt ends with an assistant message (-1: none) and how many do."""
    pa, pc = _pa()
    roles = pc.struct_field(pc.list_flatten(chunk), "role")
    parents = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False)
    known = pc.fill_null(pc.is_in(roles, value_set=pa.array(CHAT_ROLES)), True).to_numpy(zero_copy_only=False)
    if not known.all():
        first = int(np.flatnonzero(~known)[0])
        raise unknown_role(roles[first].as_py(), f"row {offset + int(parents[first])} of {name}", column)
    if len(parents):  # each row's last message: where the next message belongs to another row
        last = np.append(parents[1:] != parents[:-1], True)
        assistant = pc.fill_null(pc.equal(roles, "assistant"), False).to_numpy(zero_copy_only=False) & last
        ends = np.flatnonzero(assistant)
        return (offset + int(parents[ends[0]]) if len(ends) else -1), len(ends)
    return -1, 0


def check_text_columns(table: Any, name: str) -> None:
    """Every column's text is valid UTF-8 and holds no NUL character. Arrow text must be UTF-8, but
    a lax writer can store a lone surrogate's bytes in a Parquet/Arrow file, and nothing checks them
    until a batch drawn hours in cannot be decoded (a ``UnicodeDecodeError`` traceback). Validated
    with Arrow's own full check (about 10 ms per million short strings); a NUL, which a CSV file may
    not hold either (``polyrl.nul_bytes``), is looked for with Arrow's substring kernel, in chats'
    messages too. Only a failing chunk is read row by row to name one."""
    pa, _ = _pa()
    for column in table.column_names:
        offset = 0
        for chunk in table.column(column).chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid:
                _raise_at_undecodable(chunk, offset, name, column)
            if _may_hold_nul(chunk):
                _raise_at_nul(chunk, offset, name, column)
            offset += len(chunk)


def _may_hold_nul(values: Any) -> bool:
    """Whether text in ``values`` (an Arrow array; in its lists and structs too) may hold a NUL
    character. May: a sliced list's or struct's children can reach past the slice, so a True is
    confirmed row by row (``_raise_at_nul``)."""
    pa, pc = _pa()
    kind = values.type
    if _is_text(kind):
        return bool(pc.any(pc.match_substring(values, "\0")).as_py())
    if pa.types.is_dictionary(kind):
        return _may_hold_nul(values.dictionary)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _may_hold_nul(values.flatten())
    if pa.types.is_struct(kind):
        return any(_may_hold_nul(values.field(i)) for i in range(kind.num_fields))
    return False


def _raise_at_nul(chunk: Any, offset: int, name: str, column: str) -> None:
    """Raise naming the first row of ``chunk`` whose text holds a NUL character, read a block at a time."""
    for start in range(0, len(chunk), ITER_BLOCK):
        for row, value in enumerate(chunk.slice(start, ITER_BLOCK).to_pylist(), start):
            found = find_nul(value)
            if found is not None:
                raise nul_error(f"row {offset + row} of {name}", f"column {column!r}", found, ARROW_NUL_FIX)


def _raise_at_undecodable(chunk: Any, offset: int, name: str, column: str) -> None:
    """Raise naming the first row of ``chunk`` whose text does not decode (a block, then its rows)."""
    for start in range(0, len(chunk), ITER_BLOCK):
        try:
            chunk.slice(start, ITER_BLOCK).to_pylist()
            continue
        except UnicodeDecodeError:
            pass
        for row in range(start, min(start + ITER_BLOCK, len(chunk))):
            try:
                chunk.slice(row, 1).to_pylist()
            except UnicodeDecodeError as exc:
                raise not_utf8_error(f"row {offset + row} of {name}", column, exc) from None


#: Columns TRL feeds a vision-language model (its GRPOTrainer's signature columns).
IMAGE_COLUMNS = ("image", "images")
#: The one of ``IMAGE_COLUMNS`` whose empty list TRL 1.16 reads as no image at all: a batch whose every
#: ``images`` is ``[]`` trains text-only (``_generate_and_score_completions``: ``images = None``), the
#: column still passed to the reward functions
LIST_IMAGES = "images"


def holds_images(column: str, value: Any) -> bool:
    """Whether a row's ``value`` of the image column ``column`` is refused (``image_column_error``):
    anything but an empty list in ``images``. Why: TRL trains a dataset whose every ``images`` is ``[]``
    as a text-only one (a text subset of a mixed vision dataset keeps the column), and polyrl refused
    it as if it held images; a None there (TRL's vision path, which fails on a text model) or any
    ``image`` value stays refused."""
    return not (column == LIST_IMAGES and isinstance(value, (list, tuple)) and not value)


def arrow_holds_images(column: str, values: Any) -> bool:
    """``holds_images`` for a whole Arrow column: False only for an ``images`` list column whose every
    row is an empty list (no null)."""
    pa, pc = _pa()
    if column != LIST_IMAGES or values.null_count or not (pa.types.is_list(values.type)
                                                           or pa.types.is_large_list(values.type)):
        return True
    longest = pc.max(pc.list_value_length(values)).as_py()
    return bool(longest)


def image_column_error(column: str, name: str) -> ConfigError:
    """The error for TRL's VLM input columns: polyrl trains text-only models, and training on the
    text alone while the images are quietly dropped would be another experiment than asked."""
    return ConfigError(
        f"{name} has a column {column!r}: TRL passes it to a vision-language model as its input, but "
        "polyrl trains text-only models and would drop the images silently", field="data",
        fix=f"remove the {column!r} column, or rename it (e.g. {column}_path) if only a reward reads it")


def warn_final_assistant(where: str, column: str, count: int) -> None:
    """Said once per dataset: ``count`` chat prompts end with an assistant message, the first at
    ``where``. TRL 1.16's GRPOTrainer takes them and renders them with ``add_generation_prompt=True``
    (``_tokenize_prompts``): the message closed, a new assistant turn opened after it, as polyrl's
    chat encoding does, so polyrl trains them as TRL does (they were refused). Why warned: a prefill
    is not continued, and a 'messages' column of whole conversations shows the model its answer."""
    log.warning(f"{where}: the prompt in column {column!r} ends with an assistant message ({count} "
                f"prompt{'s' if count != 1 else ''} do): as TRL's GRPOTrainer renders it, that message is "
                "closed and the model answers in a new assistant turn after it (a prefill is not continued)",
                fix="end each prompt with a user or tool message if the model should not read that message; "
                    "a 'messages' column of whole conversations holds the answer: move it to an answer column")


class ArrowRows:
    """The rows of a 🤗 ``datasets.Dataset`` seen through an optional index array.

    Selections (hold-out, ``count``) compose index arrays instead of copying rows, and the
    fingerprint hashes the source files' digest with those indices, so it costs no row reads.
    """

    def __init__(self, table: Any, source_digest: str, indices: np.ndarray | None = None,
                 csv: tuple[tuple[Path, ...], str] | None = None) -> None:
        self.table = table  # a datasets.Dataset without an indices mapping
        self.source_digest = source_digest
        self.indices = indices
        #: (the CSV files, their separator) the table was read from: a cell pandas read as no value
        #: is read again as written, for its error (``csv_missing``)
        self.csv = csv

    def missing_cell(self, row: int, column: str) -> tuple[str, str]:
        """(why, fix) for table row ``row`` whose ``column`` holds no value (CSV: ``csv_missing``)."""
        if self.csv is None:
            return null_prompt(row, column)
        from polyrl.csv_missing import missing_prompt

        return missing_prompt(self.csv[0], self.csv[1], row, column)

    def __len__(self) -> int:
        return len(self.table) if self.indices is None else len(self.indices)

    @property
    def column_names(self) -> list[str]:
        return list(self.table.column_names)

    def _base(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        """Row numbers in the underlying table for ``positions`` (vectorised: a hold-out of a
        million rows is one numpy gather, not a Python loop)."""
        pos = np.asarray(positions if len(positions) else [], dtype=np.int64).reshape(-1)
        n = len(self)
        if pos.size and (int(pos.min()) < -n or int(pos.max()) >= n):
            raise IndexError(f"row index out of range for {n} rows")
        pos = pos % n if n else pos
        return pos if self.indices is None else self.indices[pos]

    def take(self, positions: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Fresh row dicts for ``positions``, gathered from the memory-mapped table, each value as 🤗
        datasets (and so TRL) gives it: a chat message keeps the None keys Arrow's struct unification
        gave it (``{"role": "user", "content": "hi", "name": None}``), as TRL hands it to the chat
        template and the rewards. Why not cleaned: a reward then saw other messages from the same
        Parquet file under polyrl than under TRL (JSON lines, which datasets reads as its ``Json``
        type, have no such keys on either side)."""
        base = self._base(positions)
        if not base.size:
            return []
        columns = self.table[base.tolist()]
        names = list(columns)
        return [dict(zip(names, values)) for values in zip(*(columns[k] for k in names))]

    def select(self, positions: Sequence[int] | np.ndarray) -> ArrowRows:
        return ArrowRows(self.table, self.source_digest, self._base(positions), self.csv)

    def fingerprint(self, extra: str = "") -> str:
        h = hashlib.sha256(f"arrow:{self.source_digest}:{extra}".encode())
        if self.indices is None:
            h.update(f"all:{len(self.table)}".encode())
        else:
            h.update(np.ascontiguousarray(self.indices, dtype="<i8").tobytes())
        return h.hexdigest()[:16]
