"""Why a CSV prompt cell reads as no value: the cell is empty, or holds a word pandas reads as missing.

Why: 🤗 datasets reads CSV with ``pandas.read_csv``, whose default ``na_values`` turn a cell
``NA``, ``N/A``, ``null``, ``None``, ``NaN``... into no value, quoted or not. A prompt that was
such a word was then refused as "is empty", naming a cell the user could see was not. The cell is
read again as written (Python's ``csv``, as ``csv_layout`` reads the layout) to say which it was.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from polyrl.csv_layout import records

#: pandas' default missing-value words (``pandas._libs.parsers.STR_NA_VALUES``, pandas 2/3)
NA_WORDS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                      "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


def cell_text(paths: Sequence[Path], sep: str, row: int, column: str) -> str | None:
    """The text of ``column`` in data row ``row`` (0-based, counted over ``paths`` in order, blank
    lines skipped as pandas skips them); None where it cannot be found so."""
    left = row
    for path in paths:
        try:
            with closing(records(path, sep)) as rows:
                header = next(rows, (0, None))[1]
                if header is None or column not in header:
                    return None
                at = header.index(column)
                for _, record in rows:
                    if left == 0:
                        return record[at] if at < len(record) else None
                    left -= 1
        except (OSError, csv.Error):
            return None
    return None


def missing_prompt(paths: Sequence[Path], sep: str, row: int, column: str) -> tuple[str, str]:
    """(what is wrong, the fix) for data row ``row`` whose prompt cell pandas read as no value."""
    text = cell_text(paths, sep, row, column)
    if text is not None and text.strip() and text.strip() in NA_WORDS:
        return (f"holds {text!r}, which pandas (🤗 datasets' CSV reader) reads as a missing value",
                f"give that prompt other text, or the rows as JSONL or Parquet, which keep {text.strip()!r} as text")
    if text is not None and not text.strip():
        return "is empty", "remove or fix that row"
    return ("is missing: the cell is empty, or holds a word pandas (🤗 datasets' CSV reader) reads as a missing "
            "value (NA, N/A, null, None, NaN...)",
            "write the prompt in that row, or give the rows as JSONL or Parquet, which keep such words as text")
