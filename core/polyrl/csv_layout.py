"""CSV layouts pandas reads without a word, but not as written: refused, naming the file and line.

Why: 🤗 datasets reads CSV with ``pandas.read_csv`` (so TRL users' rows come from it too). When a
file's data rows hold more fields than its header line names (a trailing comma on each data line
does it), pandas takes each row's first fields as row labels and moves every named column along:
``prompt`` held the answers, ``answer`` the next field, and the prompts went to an
``__index_level_0__`` column. Training then ran on the wrong text, with nothing said.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Generator, Sequence
from contextlib import closing
from pathlib import Path

from polyrl.errors import ConfigError

#: The columns pyarrow makes of pandas' row labels.
ROW_LABEL_PREFIX = "__index_level_"
_FIX = ("give every field a name in the header line, or remove the extra field from each row (often a "
        "trailing separator at the end of the data lines)")


def records(path: Path, sep: str) -> Generator[tuple[int, list[str]], None, None]:
    """(line, fields) of each record of ``path`` as written, blank lines skipped as pandas skips
    them (a BOM dropped, undecodable bytes replaced): what the file says, beside pandas' reading."""
    with open(path, encoding="utf-8-sig", newline="", errors="replace") as fh:
        reader = csv.reader(fh, delimiter=sep)
        for record in reader:
            if record:
                yield reader.line_num, record


def _layout(path: Path, sep: str) -> tuple[list[str], int, int, int]:
    """(header names, its line, line of the first data row, its fields) of ``path``, as pandas
    decides its layout from them (blank lines skipped); 0, 0 for a file without a data row."""
    with closing(records(path, sep)) as rows:
        header = next(rows, None)
        if header is None:
            return [], 0, 0, 0
        data = next(rows, None)
    header_line, names = header
    return (names, header_line, 0, 0) if data is None else (names, header_line, data[0], len(data[1]))


def _names(header: list[str], shown: int = 6) -> str:
    """The header's first names, quoted: a wide file's error stays one readable line."""
    names = ", ".join(repr(name[:40]) for name in header[:shown])
    return names + (f", ... {len(header) - shown} more" if len(header) > shown else "")


def _other_separator(header: list[str], sep: str) -> str | None:
    """The fix for a file written with another separator (a spreadsheet's ``;`` CSV): its header
    is one field holding that separator, and a comma in a text of the first row looked like an extra
    field. Why: the general fix (name every field) sent its user to edit a header that was right."""
    other = next((c for c in ";\t|" if c != sep and len(header) == 1 and c in header[0]), None)
    if other is None:
        return None
    return (f"the header line is one field holding {other!r}: polyrl reads a .csv file with {sep!r} between "
            "fields (a .tsv file with tabs); save it as comma-separated CSV (a spreadsheet's 'CSV UTF-8', "
            "not its semicolon CSV), or as .tsv")


def refuse_long_rows(paths: Sequence[Path], sep: str, field: str) -> bool:
    """An error naming the first of ``paths`` whose first data row has more fields than its header
    names; else whether some header names a row-label column itself (read as written)."""
    named = False
    for path in paths:
        try:
            header, _, line, fields = _layout(path, sep)
        except (OSError, csv.Error):  # pandas' own reading decides
            continue
        named = named or any(name.startswith(ROW_LABEL_PREFIX) for name in header)
        if fields > len(header):
            extra = fields - len(header)
            first = "first field" if extra == 1 else f"first {extra} fields"
            raise ConfigError(
                f"{path} line {line} has {fields} fields, but its header line names {len(header)} "
                f"({_names(header)}): pandas, which 🤗 datasets reads CSV with, would take each row's {first} "
                f"as a row label and shift every column (column {header[0]!r} would hold field {extra + 1})",
                field=field, fix=_other_separator(header, sep) or _FIX)
    return named


def refuse_row_labels(columns: Sequence[str], paths: Sequence[Path], sep: str, field: str) -> None:
    """An error when 🤗 datasets' read of the CSV ``paths`` (``columns``) holds pandas' row labels."""
    if not any(column.startswith(ROW_LABEL_PREFIX) for column in columns):
        return
    if not refuse_long_rows(paths, sep, field):
        raise ConfigError(f"the rows of {', '.join(str(p) for p in paths)} hold more fields than the header line "
                          "names: pandas, which 🤗 datasets reads CSV with, would take the first of each row as a row "
                          "label and shift every column", field=field, fix=_FIX)


def refuse_repeated_names(columns: Sequence[str], paths: Sequence[Path], sep: str, field: str) -> None:
    """An error naming the first of the CSV ``paths`` whose header line names a column twice.

    Why: pandas renames the second ``answer`` to ``answer.1`` without a word, so a reward reading
    ``answer`` got one of two columns the file holds under that name. Looked for only when
    🤗 datasets' ``columns`` hold such a name, and told apart from a header that wrote it."""
    if not any((m := re.fullmatch(r"(.+)\.[0-9]+", column)) and m[1] in columns for column in columns):
        return
    for path in paths:
        try:
            header, line, _, _ = _layout(path, sep)
        except (OSError, csv.Error):  # pandas read it: the names are as datasets gives them
            continue
        first: dict[str, int] = {}
        for i, name in enumerate(header):
            if name and name in first:  # pandas names empty ones "Unnamed: N", each its own
                raise ConfigError(
                    f"{path} line {line} names the column {name!r} twice (fields {first[name] + 1} and {i + 1}): "
                    f"pandas, which 🤗 datasets reads CSV with, would rename the second to {name + '.1'!r}",
                    field=field, fix="give each column its own name in the header line")
            first.setdefault(name, i)


#: separators spreadsheets write that a ``.csv`` read with commas (or a ``.tsv`` with tabs) keeps in one column
_OTHER_SEPARATORS = {"\t": "tabs", ";": "semicolons", "|": "bars", ",": "commas"}


def refuse_other_separator(columns: Sequence[str], paths: Sequence[Path], sep: str, field: str) -> None:
    """An error when the whole header is one column whose name holds another separator
    (``prompt;answer``). Why: a European spreadsheet's CSV (semicolons) or a TSV named ``.csv`` read
    as one column, and the error then said the file had no ``prompt`` column, listing
    ``prompt;answer`` as if it were a name."""
    if len(columns) != 1:
        return
    found = next((other for other in _OTHER_SEPARATORS if other != sep and other in columns[0]), None)
    if found is None:
        return
    suffix = ".csv" if sep == "," else ".tsv"
    fix = ("name the file .tsv (tab-separated)" if found == "\t" else "name the file .csv (comma-separated)"
           if found == "," else "save it with commas as the separator (a spreadsheet's 'CSV UTF-8'), or tabs as a .tsv")
    raise ConfigError(f"{paths[0]}: its header line {columns[0][:80]!r} reads as one column: it is separated by "
                      f"{_OTHER_SEPARATORS[found]}, and a {suffix} file is read with {_OTHER_SEPARATORS[sep]}",
                      field=field, fix=fix)
