"""The completions log: a sample of each step's prompts, completions, rewards and advantages.

Why: metrics say a reward went up, not how; reading what the policy writes is how reward hacking
is caught. Each step appends ``completions_per_step`` records to ``output_dir/completions.jsonl``
(strict JSON) and hands them to the trackers. Text passes through ``polyrl.redact`` first: a prompt
or completion that quotes a credential must not end up in a dashboard. Each text is then cut to
``MAX_TEXT_CHARS`` (a runaway 5 MB completion would otherwise add its size, times the sample, to the
file and every dashboard each step) and made valid Unicode, since trackers' formats (TensorBoard's
protobufs, JSON) cannot carry a lone surrogate.
"""

from __future__ import annotations

import itertools
import json
import re

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.metrics_file import is_step_number
from polyrl.redact import Redactor

FILE_NAME = "completions.jsonl"
#: The keys of every record, in table-column order.
COLUMNS = ("step", "prompt", "completion", "rewards", "reward", "advantage", "finish_reason")
#: The columns of an evaluation's table (``eval_completions.jsonl``'s keys, in table-column order);
#: ``rewards`` is empty unless the evaluation scores with the run's own rewards (``eval.reward = "run"``).
EVAL_COLUMNS = ("phase", "after_steps", "prompt_index", "sample", "greedy", "prompt", "completion", "rewards",
                "reward", "correct")
#: The table name of an evaluation's completions in every tracker (W&B and trackio key, TensorBoard text
#: tag, MLflow artifact folder): apart from the training ``completions``, so neither hides the other at a step.
EVAL_TABLE = "eval_completions"
#: The most records of one evaluation its table holds (the first, in prompt order): an evaluation of
#: ``eval.count`` x ``eval.samples`` completions can be hundreds of thousands, each tracker's copy of
#: them at every evaluation; ``eval_completions.jsonl`` keeps them all.
EVAL_TABLE_ROWS = 256
#: Characters of one text (a prompt, a completion, a message's content) kept in a record.
MAX_TEXT_CHARS = 65_536
#: Characters of one table cell the trackers get by default (``[logging] table_cell_chars``): a
#: multi-turn episode is one cell holding the whole conversation, each message's text cut only to
#: ``MAX_TEXT_CHARS``, so a 100,000-character episode went whole into every row of every dashboard.
TABLE_CELL_CHARS = 16_384
#: The columns TRL's ``GRPOTrainer`` gives its completions table, which polyrl's tracker tables keep
#: under these names (a TRL user's notebook reads them): ``rewards`` and ``extra`` stand for one
#: column per reward function and per ``log_extra`` column, named as TRL names them.
TRL_COLUMNS = ("step", "prompt", "completion", "rewards", "extra", "advantage")
#: The tracker table's columns of a training record: TRL's, then polyrl's own (the weighted total
#: and why the completion ended).
TABLE_COLUMNS = (*TRL_COLUMNS, "reward", "finish_reason")
#: Record keys a table spreads over one column per name they hold.
_SPREAD = ("rewards", "extra")


def cut_marker(dropped: int) -> str:
    """What ends a text cut to ``MAX_TEXT_CHARS`` (``dropped``: the characters left out)."""
    return f" [... {dropped} more characters cut by polyrl]"


def cell_cut_marker(dropped: int) -> str:
    """What ends a tracker table's cell cut to ``[logging] table_cell_chars``: says where the rest is."""
    return f" [... {dropped} more characters cut by polyrl: logging.table_cell_chars; completions.jsonl keeps them]"


def _capped_cell(value: Any, limit: int) -> Any:
    """``value`` as is where its cell holds at most ``limit`` characters, else that cell's text cut
    to ``limit`` and marked (a conversation's JSON text then, no longer its messages)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (Mapping, list, tuple)):
        text = cell(value)
    else:
        return value
    return value if len(text) <= limit else text[:limit] + cell_cut_marker(len(text) - limit)


def capped(records: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """``records`` with each table cell cut to ``limit`` characters (0: uncut), as the trackers get
    them. Why: a multi-turn agent's record holds its whole conversation, tool results included, and
    went unbounded into every tracker's table (TensorBoard event files, W&B tables) each step.
    ``rewards`` stays a table of numbers; each ``extra`` column is a cell of its own."""
    if limit <= 0:
        return [dict(r) for r in records]
    out = []
    for record in records:
        kept: dict[str, Any] = {}
        for key, value in record.items():
            if key == "extra" and isinstance(value, Mapping):
                kept[key] = {c: _capped_cell(v, limit) for c, v in value.items()}
            else:
                kept[key] = value if key == "rewards" else _capped_cell(value, limit)
        out.append(kept)
    return out


#: Characters of a text read by the redactor before it is cut to ``MAX_TEXT_CHARS``: a secret that
#: starts inside the kept part and ends past it is still seen whole, unless it is longer than this.
REDACT_CHARS = 4 * MAX_TEXT_CHARS


def _shown_text(text: str, redact: Redactor) -> str:
    """``text`` valid, redacted and cut to ``MAX_TEXT_CHARS``, the marker counting what the text
    had past them. Only its first ``REDACT_CHARS`` are redacted (the rest is cut anyway). Why: a
    reward's 50 MB ``log_extra`` text (a program's whole output) took the redactor's patterns 6 s
    per record, every step."""
    past = max(len(text) - REDACT_CHARS, 0)
    text = redact(strict_json.valid_text(text[:REDACT_CHARS] if past else text))
    if len(text) + past > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + cut_marker(len(text) - MAX_TEXT_CHARS + past)
    return text


def shown_value(value: Any, redact: Redactor) -> Any:
    """``value`` with every text redacted, valid and cut to ``MAX_TEXT_CHARS``."""
    if isinstance(value, str):
        return _shown_text(value, redact)
    if isinstance(value, Mapping):
        return {str(k): shown_value(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_value(v, redact) for v in value]
    return value


def _number(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def pick(count: int, total: int, seed: int) -> list[int]:
    """``count`` distinct indices of ``total``, drawn with ``seed`` (repeatable on resume), in order."""
    if count >= total:
        return list(range(total))
    return sorted(np.random.default_rng(seed).choice(total, size=count, replace=False).tolist())


#: How deep a ``log_extra`` value's lists and tables are kept as such; deeper, a part is its repr.
EXTRA_DEPTH = 16
#: Items of one ``log_extra`` list, table or array kept; the rest are one marker saying how many.
EXTRA_ITEMS = 10_000
#: Bits of a ``log_extra`` int written as a number: past them Python refuses to spell it (its 4300
#: digits limit: ``json.dumps`` and ``repr`` raise), so it is written as a text naming its size.
_INT_BITS = 13_000


def plain_extra(value: Any) -> Any:
    """A reward's extra value as JSON holds it: numbers, text, lists and tables stay (numpy's made
    plain by ``strict_json.sanitize``), any other object becomes its repr. Never raises. Why: a
    reward's ``log_extra`` value that was self-referencing or nested thousands deep, or whose
    ``repr`` raised, raised out of the step's sampling (the completions log went off for the rest
    of the run) or, in a forked reward, failed the reward ("its answer could not be sent back")
    where the same reward ran on a thread; an int of more than 4300 digits failed the file's JSON.
    A list or table of more than ``EXTRA_ITEMS`` items keeps that many and says how many more there
    were; one nested past ``EXTRA_DEPTH`` is its repr there; one that holds itself shows ``[...]``
    (``{...}``) where it does, as Python's repr does. What it returns it returns unchanged (a
    forked reward's values pass it in the child and again in the log)."""
    return _plain(value, 0, frozenset())


def _plain(value: Any, depth: int, within: frozenset[int]) -> Any:
    if value is None or isinstance(value, (str, float, bool, np.integer, np.floating, np.bool_, np.str_)):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= _INT_BITS else f"<int of {value.bit_length()} bits>"
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return _plain(value[()], depth, within)  # its one item (a numpy scalar, or the object it holds)
    if isinstance(value, np.ndarray) and value.dtype != object:
        if value.size > EXTRA_ITEMS or depth + value.ndim > EXTRA_DEPTH:
            return safe_repr(value)  # numpy's repr sums a large array up ("...")
        if value.dtype.kind in "biuf":
            return value.tolist()
        value = value.tolist()
    if not isinstance(value, (Mapping, list, tuple, np.ndarray)):
        return safe_repr(value)
    if id(value) in within:
        return "{...}" if isinstance(value, Mapping) else "[...]"
    if depth >= EXTRA_DEPTH:
        return safe_repr(value)
    within = within | {id(value)}
    if isinstance(value, Mapping):
        cut = len(value) > EXTRA_ITEMS + 1  # + 1: what a first pass left (its marker) is kept as it is
        out = {_key(k): _plain(v, depth + 1, within)
               for k, v in itertools.islice(value.items(), EXTRA_ITEMS if cut else None)}
        if cut:
            out[_more_key(out)] = f"{len(value) - EXTRA_ITEMS} more entries cut by polyrl"
        return out
    items = value.tolist() if isinstance(value, np.ndarray) else value  # an object array
    cut = len(items) > EXTRA_ITEMS + 1
    out_list = [_plain(v, depth + 1, within) for v in itertools.islice(items, EXTRA_ITEMS if cut else None)]
    if cut:
        out_list.append(f"[... {len(items) - EXTRA_ITEMS} more items cut by polyrl]")
    return out_list


def _more_key(table: Mapping[str, Any]) -> str:
    key = "..."
    while key in table:
        key += "."
    return key


def _key(key: Any) -> str:
    """A table key as text (JSON's keys are text), never raising."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and key.bit_length() > _INT_BITS:
        return f"<int of {key.bit_length()} bits>"
    try:
        text = str(key)
    except Exception:  # noqa: BLE001 - the reward's object
        return safe_repr(key)
    return text if isinstance(text, str) else safe_repr(key)


def safe_repr(value: Any) -> str:
    """``repr(value)``, or a text naming its type when the repr raises (a RecursionError for a
    structure nested thousands deep, a bug in the reward's class)."""
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - RecursionError too: the reward's object, not the run's error
        return f"<{type(value).__name__} object whose repr raised {type(exc).__name__}>"
    return text if isinstance(text, str) else f"<{type(value).__name__} object>"


def sample_records(step: int, prompts: Sequence[Any], completions: Sequence[Any],
                   per_reward: Mapping[str, Sequence[float]], total: Sequence[float],
                   advantages: Sequence[float], count: int, seed: int,
                   redact: Redactor = Redactor(),
                   extra: Mapping[str, Sequence[Any]] | None = None,
                   indices: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Up to ``count`` records of this step; ``prompts`` aligned with ``completions``. ``extra``
    (columns reward functions logged with TRL's ``log_extra``) adds an ``extra`` table to each.
    ``indices``: the completions to show, drawn over the whole step by the caller (a launched
    rank holds part of it), instead of ``count`` drawn here with ``seed``."""
    records = []
    for i in pick(count, len(completions), seed) if indices is None else indices:
        records.append({
            "step": step,
            "prompt": shown_value(prompts[i], redact),
            "completion": shown_value(_shown(completions[i]), redact),
            "rewards": {name: _number(scores[i]) for name, scores in per_reward.items()},
            "reward": _number(total[i]),
            "advantage": _number(advantages[i]),
            "finish_reason": completions[i].finish_reason,
        })
        if extra:
            records[-1]["extra"] = {str(k): shown_value(plain_extra(v[i]), redact) for k, v in extra.items()}
    return strict_json.sanitize(records)  # trackers get exactly what the file holds


def _shown(completion: Any) -> Any:
    """The completion's text, or for a multi-turn episode its whole conversation after the prompt
    (assistant turns, tool calls, tool results, observations): reward hacking hides in any turn."""
    messages = getattr(completion, "messages", None)
    if not messages:
        return completion.text
    return [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "name")} for m in messages]


def cell(value: Any) -> Any:
    """A record value as a table cell: text and numbers stay, structures become JSON text."""
    if isinstance(value, (Mapping, list, tuple)):
        return strict_json.dumps(value, ensure_ascii=False)
    return value


#: Characters Markdown would read as formatting, shown as written with a backslash before each.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|>])")
#: Line endings as Markdown reads them: ``\r`` alone ends a line too (Python-Markdown's reading).
_LINE_END = re.compile(r"\r\n?|\n")
#: Control characters other than a tab and line endings: dropped or shown as ``?`` by the renderer.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _control_picture(match: re.Match[str]) -> str:
    r"""The Unicode picture of a control character (U+2400 block: ``\x1b`` reads ␛, DEL ␡)."""
    code = ord(match.group())
    return chr(0x2421 if code == 0x7F else 0x2400 + code)


def table(records: Sequence[Mapping[str, Any]],
          columns: Sequence[str] = TABLE_COLUMNS) -> tuple[list[str], list[list[Any]]]:
    """``records`` as a tracker table: its column names and rows (``cell`` values; a key a record
    lacks is None). ``rewards`` and ``extra`` spread over one column per reward and per ``log_extra``
    column, named as TRL's ``GRPOTrainer`` names its table's (the function's name), so a TRL user's
    notebook reading the W&B or trackio table finds ``step``, ``prompt``, ``completion``, each
    reward's name and ``advantage`` where it looks; polyrl kept every score in one ``rewards`` cell
    of JSON text. A name taken already (a reward named ``prompt``) reads ``rewards/<name>``
    (``extra/<name>``), and a polyrl column whose name a reward took ``polyrl/<name>``."""
    taken = {c for c in columns if c in TRL_COLUMNS and c not in _SPREAD}
    names: list[str] = []
    reads: list[tuple[str, Any]] = []  # (record key, the key within it of a spread column)
    for column in columns:
        if column in _SPREAD:
            for key in dict.fromkeys(k for r in records for k in (r.get(column) or {})):
                names.append(str(key) if str(key) not in taken else f"{column}/{key}")
                reads.append((column, key))
                taken.add(names[-1])
            continue
        names.append(column if column in TRL_COLUMNS or column not in taken else f"polyrl/{column}")
        reads.append((column, None))
        taken.add(names[-1])
    rows = [[cell((r.get(key) or {}).get(inner) if inner is not None else r.get(key)) for key, inner in reads]
            for r in records]
    for i in range(len(names)):  # a column of text and numbers alike is text: W&B refuses the mix
        if len({_kind(row[i]) for row in rows} - {None}) > 1:
            for row in rows:
                row[i] = None if row[i] is None else str(row[i])
    return names, rows


def _kind(value: Any) -> str | None:
    """What a table column's type checker (W&B's) takes ``value`` for: numbers go together, a bool
    and a text are kinds of their own. Why: a ``log_extra`` column holding ``"42"`` in one row and
    ``42`` in another made ``wandb.Table`` raise, which dropped the W&B tracker for the run."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def markdown_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    r"""The records as a Markdown table (TensorBoard's Text dashboard renders it), every character
    of the texts shown as written: ``2*3*4`` rendered as 2<em>3</em>4 and ``**24**`` in bold, so a
    format reward's markup could not be checked there. Why line endings, ``&`` and control
    characters too: a ``\r`` in a completion ended the table row (its rewards drawn under the
    wrong columns, in a row of their own), ``&amp;`` read as ``&``, and an ANSI escape ``\x1b[31m``
    as ``?[31m``: each is now shown as written (a line break, ``&amp;``, ``␛[31m``)."""
    def escape(value: Any) -> str:
        text = "" if value is None else str(cell(value))
        text = _CONTROL.sub(_control_picture, _MARKDOWN_PUNCTUATION.sub(r"\\\1", text).replace("&", "&amp;"))
        return _LINE_END.sub("<br>", text)

    names, rows = table(records, columns)
    head = "| " + " | ".join(escape(n) for n in names) + " |\n|" + "---|" * len(names) + "\n"
    return head + "".join("| " + " | ".join(escape(v) for v in row) + " |\n" for row in rows)


def append(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Append ``records`` as strict-JSON lines, flushed (the step is checkpointed after this)."""
    strict_json.append_lines(path, records)


def rewind(path: Path, last_step: int, from_zero: bool = False) -> int:
    """Keep the records of steps 1 to ``last_step`` only, each step's from its last writing (a
    crashed run wrote later steps; the resumed run writes them again). Atomic rewrite; returns how
    many records remain. Mirrors ``metrics_file.rewound`` for a file with many lines a step.

    A file of an earlier polyrl numbered steps from 0 (only it has records at step 0), and so does
    the file of a run whose ``metrics.jsonl`` did (``from_zero``: its records may start later):
    its records are renumbered one step later first, as ``metrics.jsonl``'s lines are."""
    if not path.exists():
        return 0
    read = [(line, record) for line, record in strict_json.read_lines(path)]
    shift = from_zero or any(isinstance(r, dict) and is_step_number(r.get("step")) and r["step"] == 0 for _, r in read)
    by_step: dict[int, list[str]] = {}
    previous: int | None = None
    for line, record in read:
        step = record.get("step") if isinstance(record, dict) else None
        if not is_step_number(step):  # cut short by the crash, or not a step (``true`` is no step 1)
            previous = None
            continue
        if shift:
            step += 1
            line = strict_json.dumps({**record, "step": step}, ensure_ascii=False)
        if not 1 <= step <= last_step:  # later than the checkpoint
            previous = None
            continue
        if step != previous:  # a new block of this step: an earlier one belonged to a dead lineage
            by_step[step] = []
        by_step[step].append(line)
        previous = step
    kept = [line for step in sorted(by_step) for line in by_step[step]]
    strict_json.rewrite_lines(path, kept)
    return len(kept)


#: A completions parquet file polyrl writes for a TRL run (``polyrl.trl_completions``), as TRL names
#: it: ``completions_00012.parquet``, an evaluation's ``eval_completions_00012.parquet`` (any prefix).
_PARQUET_NAME = re.compile(r"^(?:\w+_)?completions_(\d{5,})\.parquet$")


def rewind_parquet(folder: Path, global_step: int) -> list[str]:
    """Delete the completions parquet files in ``folder`` of TRL steps after ``global_step``; returns
    their names. Why: a run resumed at a checkpoint left the files its crashed run wrote after it
    beside the ones it writes again (a notebook reading the folder read those steps twice, or the
    dead run's rows for steps the resume had not reached), where ``completions.jsonl`` and
    ``metrics.jsonl`` are rewound to the checkpoint."""
    if not folder.is_dir():
        return []
    gone = []
    for path in sorted(folder.iterdir()):
        match = _PARQUET_NAME.match(path.name)
        if match and int(match.group(1)) > global_step and path.is_file():
            path.unlink()
            gone.append(path.name)
    return gone


def first_per_prompt(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``records`` with each prompt's first only, prompts compared by their text (a chat by its
    messages), as TRL's ``log_unique_prompts`` keeps its table's rows."""
    seen: set[str] = set()
    out = []
    for record in records:
        key = json.dumps(record.get("prompt"), sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out
