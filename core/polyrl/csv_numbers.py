"""CSV cells whose digits pandas drops: a number written with leading zeros, refused, naming the cell.

Why: 🤗 datasets reads CSV with ``pandas.read_csv``, which reads a column of digits as numbers,
quoted or not: an answer ``007`` (or ``"007"``, or ``0042`` as an id) reached the rewards as ``7``,
silently (TRL's too), and no reward can know the zeros were there. Other renderings of a number
(``1.50``, ``5`` read as ``5.0`` beside an empty cell) keep its value and are left as datasets reads them.

A column of text is no guard: pandas types each file, and each block of ``PANDAS_BLOCK`` rows of a
file, on its own, and datasets then casts a block's numbers to the text type of the first block. So
``007`` in a block (or a later file of a glob) whose cells are all numbers reached the rewards as the
text ``"7"``, while a file read whole would have kept ``"007"``: such a cell is refused too.

An integer of more digits than a float64 holds (past 2**53) is refused too where pandas read its
column as floats (beside a fraction or an empty cell): ``12345678901234567`` reached the rewards as
``1.2345678901234568e+16``. One past 64 bits stopped the read with "Python int too large to convert
to C long. Fix: check that the file is a valid csv file": the cell is named instead.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Generator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from polyrl.csv_layout import records
from polyrl.errors import ConfigError

#: a field that starts (after a quote, a sign or spaces) with a zero and another digit
_LEADING_ZERO = re.compile(rb'(?:^|[^0-9.eE])[ "]*[+-]?0[0-9]', re.MULTILINE)
_CELL = re.compile(r"\s*[+-]?0[0-9]")
#: a run of 16 or more digits: only such an integer may be past what a float64 holds exactly (2**53)
_LONG_DIGITS = re.compile(rb"[0-9]{16,}")
#: a cell that is an integer as written (pandas' reading of it, quotes or not)
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
#: what pandas reads a column of integers as: int64, or uint64 for larger non-negative ones
_INT_RANGE = (-(2**63), 2**64)
#: the fix for a long integer in a CSV
LONG_FIX = ("give the rows as JSONL (that value quoted as a string) or Parquet with that column as strings "
            "(in a CSV, quotes do not keep it text)")
#: rows pandas types at a time in 🤗 datasets' CSV reader (``CsvConfig.chunksize``)
PANDAS_BLOCK = 10_000


def refuse_leading_zeros(table: Any, paths: Sequence[Path], sep: str, field: str) -> None:
    """Raise naming the first cell of a numeric column (as pandas typed ``table``) written with a
    leading zero. Files are first searched for one as bytes (C speed); only a file that may hold
    one is read record by record."""
    import pyarrow as pa

    numeric = {name for name, kind in zip(table.column_names, table.schema.types)
               if pa.types.is_integer(kind) or pa.types.is_floating(kind)}
    # text columns: typed as a number in one file or block, then cast to text (see the module's doc)
    blocks = len(paths) > 1 or table.num_rows > PANDAS_BLOCK
    text = {name for name, kind in zip(table.column_names, table.schema.types)
            if blocks and (pa.types.is_string(kind) or pa.types.is_large_string(kind))}
    if not numeric and not text:
        return
    maybe = [_may_hold_one(path) for path in paths]
    if not any(maybe):
        return
    last = len(maybe) - maybe[::-1].index(True)  # up to the last file that may hold one
    with closing(_cells(table, paths[:last], sep, numeric | text)) as cells:
        for path, line, name, cell, row in cells:
            if not _CELL.match(cell) or (value := table.column(name)[row].as_py()) is None:
                continue
            if name in text and value == cell:  # a text block keeps the cell as written
                continue
            read = (f"the number {value!r}" if name in numeric else
                    f"the number {value}, then as the text {value!r} (the column holds text elsewhere: "
                    f"pandas types each file, and each {PANDAS_BLOCK:,} rows of a file, on its own)")
            raise ConfigError(
                f"{path}:{line}: column {name!r} holds {cell!r}, which pandas (🤗 datasets' CSV reader, "
                f"and so TRL) reads as {read}, its leading zeros dropped", field=field,
                fix="give the rows as JSONL or Parquet with that column as strings (in a CSV, quotes do "
                    "not keep it text), or write the numbers without leading zeros")


def _cells(table: Any, paths: Sequence[Path], sep: str, names: set[str]) -> Generator[tuple[Path, int, str, str, int], None, None]:
    """(file, line, column, cell as written, its row in ``table``) of every cell of the columns
    ``names``, in the order pandas read the rows; ends where ``table`` has no row left (pandas read
    fewer rows than were written: no cell left to name)."""
    row = 0
    for path in paths:
        with closing(records(path, sep)) as rows:
            header = next(rows, (0, None))[1]
            if header is None:
                continue
            columns = [(at, name) for at, name in enumerate(header) if name in names]
            for line, record in rows:
                if _skipped_by_pandas(record):
                    continue
                if row >= table.num_rows:
                    return
                for at, name in columns:
                    yield path, line, name, (record[at] if at < len(record) else ""), row
                row += 1


def refuse_rounded_integers(table: Any, paths: Sequence[Path], sep: str, field: str) -> None:
    """Raise naming the first cell written as an integer that a float column of ``table`` (as
    pandas typed it) holds as another number: its last digits rounded away."""
    import pyarrow as pa

    floats = {name for name, kind in zip(table.column_names, table.schema.types) if pa.types.is_floating(kind)}
    if not floats or not any(_has_long_digits(path) for path in paths):
        return
    with closing(_cells(table, paths, sep, floats)) as cells:
        for path, line, name, cell, row in cells:
            if not _INTEGER.fullmatch(cell) or (value := table.column(name)[row].as_py()) is None:
                continue
            if _digits(cell) > _FLOAT_DIGITS or value != int(cell):  # float == int compares exactly
                raise ConfigError(
                    f"{path}:{line}: column {name!r} holds the integer {_shown(cell)}, which pandas (🤗 "
                    f"datasets' CSV reader, and so TRL) reads as the number {value!r}: the column holds "
                    "fractions or empty cells too, and a float64 keeps about 16 digits", field=field,
                    fix=LONG_FIX)


def first_integer_past_64_bits(paths: Sequence[Path], sep: str) -> tuple[Path, int, str, str] | None:
    """(file, line, column, cell) of the first cell written as an integer that neither int64 nor
    uint64 holds, which pandas cannot read; None when there is none."""
    for path in paths:
        if not _has_long_digits(path):
            continue
        with closing(records(path, sep)) as rows:
            header = next(rows, (0, None))[1]
            if header is None:
                continue
            for line, record in rows:
                for at, cell in enumerate(record):
                    if _INTEGER.fullmatch(cell) and (_digits(cell) > _FLOAT_DIGITS
                                                     or not _INT_RANGE[0] <= int(cell) < _INT_RANGE[1]):
                        name = header[at] if at < len(header) else f"field {at + 1}"
                        return path, line, name, _shown(cell)
    return None


#: more significant digits than any finite float64 has (its largest is about 1.8e308): no need
#: for ``int()``, which refuses a cell past 4300 digits (a ValueError out of the load)
_FLOAT_DIGITS = 309


def _digits(cell: str) -> int:
    """The significant digits of an integer cell (``_INTEGER``)."""
    return len(cell.strip().lstrip("+-").lstrip("0"))


def _shown(cell: str) -> str:
    """An integer cell for an error: its first 40 characters when longer."""
    text = cell.strip()
    return text if len(text) <= 40 else f"{text[:40]}... ({_digits(cell)} digits)"


def _has_long_digits(path: Path) -> bool:
    """Whether ``path``'s bytes hold a run of 16 or more digits (memory-mapped, as ``_may_hold_one``)."""
    if path.stat().st_size == 0:
        return False
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _LONG_DIGITS.search(data) is not None


def _skipped_by_pandas(record: list[str]) -> bool:
    """Whether pandas skips this record as a blank line: a line of spaces and tabs only (one field,
    no separator in it). Why: counted as a row here, every later row was paired with the next
    row's value, and a leading zero in the last row was an IndexError traceback."""
    return len(record) == 1 and record[0] != "" and not record[0].strip(" \t")


def _may_hold_one(path: Path) -> bool:
    """Whether ``path``'s bytes hold a field starting with a zero and a digit (memory-mapped: the
    file is not read into memory)."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _LEADING_ZERO.search(data) is not None
