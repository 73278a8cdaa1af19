"""Where prompt rows come from: local files, globs, ``save_to_disk`` folders, cached Hub datasets.

JSON / JSON-lines files are checked here line by line (a bad line is reported by number), then
their values are taken as 🤗 ``datasets``' json loader gives them, which is what TRL hands a reward
function (``typed_as_datasets``); the rows stay in memory. CSV, Parquet and Arrow files, folders
written by ``save_to_disk`` and datasets in the local 🤗 cache go through 🤗 ``datasets``, which
keeps them as memory-mapped Arrow (see ``polyrl.data_arrow``). ``datasets`` is imported only
here, when such a source is read, so the core still starts without touching it.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import glob
import hashlib
import json
import os
import re
import shlex
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl import json_keys, json_lines, long_numbers
from polyrl.csv_layout import refuse_long_rows, refuse_other_separator, refuse_repeated_names, refuse_row_labels
from polyrl.csv_numbers import LONG_FIX, first_integer_past_64_bits, refuse_leading_zeros, refuse_rounded_integers
from polyrl.data_arrow import ArrowRows
from polyrl.json_coercion import refuse_coerced
from polyrl.late_columns import first_rows
from polyrl.errors import ConfigError
from polyrl.folder_links import NOT_REGULAR
from polyrl.logs import get_logger
from polyrl.path_loops import LOOP_FIX, symlink_loop
from polyrl.text_validity import row_surrogate, surrogate_error
from polyrl.nul_bytes import json_nul_fix, nul_error, refuse_nul_bytes, row_nul
from polyrl.wide_text import HEAD_BYTES, refuse_wide_text

log = get_logger("polyrl.data")

#: A JSON escape that decodes to a surrogate (U+D800-U+DFFF): only a line holding one is walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: A JSON escape that decodes to a NUL character: only a line holding one is walked.
_NUL_ESCAPE = "\\u0000"

#: file suffix -> (🤗 packaged builder, extra builder options)
ARROW_FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"sep": "\t"}),
    ".parquet": ("parquet", {}),
    ".pq": ("parquet", {}),
    ".arrow": ("arrow", {}),
}
JSON_SUFFIXES = (".jsonl", ".json")
SUPPORTED = ", ".join((*JSON_SUFFIXES, *ARROW_FORMATS))


def _datasets() -> Any:
    """🤗 datasets, quiet (no progress bars on stderr), or a clear error when not installed."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - it is a core dependency
        raise ConfigError("reading CSV/Parquet/Arrow data or data.name needs the `datasets` package",
                          field="data", fix="pip install 'datasets>=5.2'") from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # we raise one error line of our own
    return datasets


@contextlib.contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """Never reach the Hub: polyrl reads datasets that are already on this machine."""
    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = before


def _first_non_utf8(paths: list[Path]) -> str | None:
    """Where the first byte that is not UTF-8 is (``file line N, byte 0xe9``), read line by line:
    pyarrow's own message gives an offset into a block, not a line a user can find."""
    for path in paths:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return f"{path.name} line {number}, byte 0x{line[exc.start]:02x} at column {exc.start + 1},"
    return None


def _reason(exc: BaseException) -> str:
    """The innermost cause's message, on one line (datasets wraps pyarrow's errors)."""
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return text[:300]


# --- resolving data.path ----------------------------------------------------------------------


def expand_paths(path: str | Sequence[str], field: str) -> list[Path]:
    """Files or one folder named by ``path``: a path, a glob, or a list of them, in order."""
    entries = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not entries:
        raise ConfigError("is an empty list", field=field, fix="name at least one file")
    out: list[Path] = []
    for entry in entries:
        text = os.path.expanduser(str(entry))
        if glob.has_magic(text):
            matches = sorted(p for p in glob.glob(text, recursive=True) if os.path.isfile(p))
            if not matches:
                raise ConfigError(f"the glob {text!r} matches no file", field=field,
                                  fix="check the pattern and the folder it starts from")
            out += [Path(m) for m in matches]
            continue
        p = Path(text)
        try:
            found = p.exists()
        except OSError as exc:  # a folder on the way without execute permission
            raise ConfigError(f"data file {text!r} cannot be reached: {exc.strerror or exc}", field=field,
                              fix="make its folders searchable by this user (chmod +x), or copy it") from None
        loop = "" if found else symlink_loop(p)
        if loop:  # Path.exists reads a loop as no file: it was "not found" while ls lists it
            raise ConfigError(f"data file {text!r} cannot be followed: {loop}", field=field,
                              fix=f"{LOOP_FIX}, or give an existing file ({SUPPORTED}), a glob, or a save_to_disk folder")
        if not found:
            raise ConfigError(f"data file {text!r} not found", field=field,
                              fix=f"give an existing file ({SUPPORTED}), a glob, or a save_to_disk folder")
        if not (p.is_file() or p.is_dir()):  # a FIFO named data.jsonl blocked the start forever
            raise ConfigError(f"data file {text!r} is {NOT_REGULAR}", field=field, fix=f"give a regular file ({SUPPORTED})")
        if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
            raise ConfigError(f"data {'folder' if p.is_dir() else 'file'} {text!r} cannot be read (permission "
                              "denied)", field=field, fix="make it readable by this user (chmod), or copy it")
        out.append(p)
    folders = [p for p in out if p.is_dir()]
    if folders and len(out) > 1:
        raise ConfigError(f"{str(folders[0])!r} is a folder among other paths", field=field,
                          fix="give one save_to_disk folder, or a list/glob of files")
    return out


#: compressed file suffix -> (what compressed it, the command that writes the file out beside it)
COMPRESSED = {".gz": ("gzip", "gunzip -k"), ".bz2": ("bzip2", "bunzip2 -k"), ".xz": ("xz", "unxz -k"),
              ".zst": ("zstd", "unzstd"), ".zip": ("zip", "unzip")}


def _refuse_compressed(path: Path, field: str) -> None:
    """A compressed data file (``rows.jsonl.gz``) is named as that, with the command that
    decompresses it. Why: it was "an unsupported file type '.gz'", and the fix listed suffixes the
    file, a .jsonl inside, already had. (Read as it is, every check here that names a line would
    need a decompressing reader of its own.)"""
    packed = COMPRESSED.get(path.suffix.lower())
    if packed is None:
        return
    what, command = packed
    inner = path.with_suffix("")
    kind = inner.suffix.lower() if inner.suffix.lower() in (*JSON_SUFFIXES, *ARROW_FORMATS) else None
    raise ConfigError(f"{str(path)!r} is compressed with {what}" + (f" (a {kind} file inside)" if kind else "")
                      + "; polyrl reads data files uncompressed", field=field,
                      fix=f"decompress it ({command} {shlex.quote(str(path))}" +
                          (f", which writes {shlex.quote(str(inner))})" if kind and command != "unzip" else ")") +
                          " and give that file" + ("" if kind else f" (one of {SUPPORTED})"))


def _format(paths: list[Path], field: str) -> str:
    kinds = set()
    for p in paths:
        _refuse_compressed(p, field)
        suffix = p.suffix.lower()
        if suffix not in JSON_SUFFIXES and suffix not in ARROW_FORMATS:
            raise ConfigError(f"{str(p)!r} has an unsupported file type {suffix or '(none)'!r}", field=field,
                              fix=f"use one of {SUPPORTED}, or a folder written by Dataset.save_to_disk")
        kinds.add("json" if suffix in JSON_SUFFIXES else ARROW_FORMATS[suffix][0] + repr(ARROW_FORMATS[suffix][1]))
    if len(kinds) > 1:
        raise ConfigError("the files mix formats", field=field, fix="give files of one format per source")
    return kinds.pop()


def _digest(paths: Sequence[Path | str]) -> str:
    """Content hash of source files (streamed, not memory-mapped: RSS stays flat)."""
    h = hashlib.sha256()
    for p in paths:
        file_hash = hashlib.sha256()
        with open(p, "rb") as fh:
            while block := fh.read(1 << 20):
                file_hash.update(block)
        h.update(file_hash.digest())
    return h.hexdigest()


# --- JSON ---------------------------------------------------------------------------------------


def _json(text: str, path: Path, lineno: int | None, field: str, fix: str) -> Any:
    """``json.loads`` whose failures (bad syntax, nesting too deep for the parser) are one
    ConfigError naming the file and line, never a traceback."""
    try:
        return json_keys.loads(text)
    except json_keys.RepeatedKey as exc:
        row = None if lineno else json_keys.repeated_in_array(text)
        where = f"{path}:{lineno}" if lineno else f"{path} line {row[1]} (row {row[0]})" if row else str(path)
        raise ConfigError(f"{where} names the key {exc.key!r} twice in one object (Python keeps the last value; "
                          "🤗 datasets refuses the file, or reads a nested object wrongly)", field=field,
                          fix="give each key once per object: remove or rename one of them") from None
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Invalid control character"):  # json's own words end "at", naming nothing
            raise ConfigError(f"{path}:{lineno or exc.lineno} holds the control character {text[exc.pos]!r} inside "
                              f"a string, at column {exc.colno}, which JSON does not allow there", field=field,
                              fix=(f"remove the NUL bytes: tr -d '\\000' < {shlex.quote(str(path))} > "
                                   f"{shlex.quote(str(path.with_name(f'{path.stem}.clean{path.suffix}')))}"
                                   if text[exc.pos] == "\0" else f"write it escaped ({json.dumps(text[exc.pos])}) "
                                   "or remove it")) from None
        raise ConfigError(f"{path}:{lineno or exc.lineno} is not valid JSON ({exc.msg})", field=field,
                          fix=fix) from None
    except ValueError as exc:  # int()'s digit limit, which json lets through as is
        if not long_numbers.is_digit_limit(exc):
            raise
        found, what = long_numbers.described(text, "json")
        line = (lineno or 1) + (found - 1 if found else 0)
        raise ConfigError(f"{path}:{line} holds {what}", field=field, fix="write it as a string, or round it") from None
    except RecursionError:
        where = f"{path}:{lineno}" if lineno else str(path)
        raise ConfigError(f"{where} nests JSON too deeply to parse", field=field,
                          fix='write flat objects like {"prompt": "...", "answer": "..."}') from None


class RowOrigins:
    """Where each JSON row came from (file and line), so an error can point at it in an editor.

    Kept as one int32 per row (line number; 0 for an element of a .json array) plus the row
    each file starts at: a million-row JSONL costs 4 MB, not a tuple per row.
    """

    def __init__(self) -> None:
        self.files: list[str] = []
        self.starts: list[int] = []
        self.lines = array("i")
        #: {column: the first row holding it} for columns the first row lacks, in rows 🤗 datasets
        #: could not read (``polyrl.late_columns``); {} when it read them
        self.late: dict[str, int] = {}

    def add(self, path: Path, lines: Sequence[int]) -> None:
        self.files.append(str(path))
        self.starts.append(len(self.lines))
        self.lines.extend(lines)

    def describe(self, row: int) -> str:
        """``data/x.jsonl line 7 (row 5)``: the 1-based line, and the 0-based row within that file."""
        k = bisect.bisect_right(self.starts, row) - 1
        line, within = self.lines[row], row - self.starts[k]
        return f"{self.files[k]} line {line} (row {within})" if line else f"row {within} of {self.files[k]}"


def read_json_rows(path: Path, field: str = "data.path", origins: RowOrigins | None = None) -> list[Any]:
    """Rows of a JSON-lines file (or a .json file holding one array of objects); each row's line
    goes to ``origins`` when given. A UTF-8 byte order mark (Excel, Windows editors) is skipped;
    a UTF-16 file is refused as that, not as invalid UTF-8 or JSON (``polyrl.wide_text``)."""
    if path.suffix.lower() == ".json":
        raw = path.read_bytes()
        refuse_wide_text(path, raw[:HEAD_BYTES], field)
        raw = raw.removeprefix(codecs.BOM_UTF8)
        stripped = raw.lstrip()
        if stripped.startswith(b"["):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path} is not valid UTF-8 (byte {exc.start})", field=field,
                                  fix="save the file as UTF-8") from None
            items = list(_json(text, path, None, field, "write one JSON array of objects, or one object per line"))
            if _SURROGATE_ESCAPE.search(text):
                for i, item in enumerate(items):
                    _refuse_surrogates(item, f"row {i} of {path}", field)
            if _NUL_ESCAPE in text:
                for i, item in enumerate(items):
                    _refuse_nul(item, f"row {i} of {path}", path, field)
            if origins is not None:
                origins.add(path, [0] * len(items))
            return items
    rows: list[Any] = []
    lines: list[int] = []
    with path.open("rb") as fh:
        if path.suffix.lower() != ".json":  # a .json file's head was checked as read above
            refuse_wide_text(path, fh.read(HEAD_BYTES), field)
            fh.seek(0)
        for lineno, raw_line in enumerate(json_lines.raw_lines(fh, path, field), 1):
            if lineno == 1:
                raw_line = raw_line.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path}:{lineno} is not valid UTF-8 (byte {exc.start} of the line)", field=field,
                                  fix="save the file as UTF-8") from None
            if not line.strip():
                continue
            bare_cr = "\r" in line.rstrip("\r\n")  # a line end of an old Mac's inside the line
            # rows parted by such a line end are rows, as 🤗 datasets reads them (on one line number)
            for text in (json_lines.values_at_cr(line) if bare_cr else None) or [line]:
                rows.append(_json(text, path, lineno, field, "write one JSON object per line" + (
                    " (this line holds a carriage return (\\r) as a line end, which only some readers take: save "
                    "the file with \\n line ends, e.g. tr '\\r' '\\n' < FILE > NEW.jsonl)" if bare_cr else "")))
                lines.append(lineno)
                if not isinstance(rows[-1], dict):
                    raise ConfigError(f"{path}:{lineno} is a JSON {type(rows[-1]).__name__}, not an object",
                                      field=field, fix='write objects like {"prompt": "...", "answer": "..."}')
                if _SURROGATE_ESCAPE.search(text):
                    _refuse_surrogates(rows[-1], f"{path}:{lineno}", field)
                if _NUL_ESCAPE in text:
                    _refuse_nul(rows[-1], f"{path}:{lineno}", path, field)
    if origins is not None:
        origins.add(path, lines)
    return rows


def read_json_files(paths: Sequence[Path], field: str = "data.path",
                    cache_dir: str | None = None) -> tuple[list[Any], RowOrigins]:
    """(rows, where each came from) of JSON / JSON-lines ``paths``: checked line by line, then
    typed as 🤗 datasets types them (``typed_as_datasets``)."""
    rows: list[Any] = []
    origins = RowOrigins()
    for p in paths:
        try:
            rows += read_json_rows(p, field, origins)
        except OSError as exc:  # permissions, a folder without execute, a file gone since the glob
            raise ConfigError(f"cannot read data file {str(p)!r}: {exc.strerror or exc}", field=field,
                              fix="make it readable by this user (chmod), or copy it") from None
    if not rows:
        raise ConfigError(f"data file {str(paths[0])!r} has no rows", field=field, fix="add JSON lines to it")
    typed = typed_as_datasets(paths, rows, cache_dir)
    if typed is rows:  # datasets could not read them: a column first written late is missing before
        origins.late = first_rows(rows)
    else:  # a string datasets read as a number, a boolean or null (pandas' guess)
        refuse_coerced(rows, typed, origins.describe, field)
    return typed, origins


def typed_as_datasets(paths: Sequence[Path], rows: list[Any], cache_dir: str | None = None) -> list[Any]:
    """``rows`` (Python's parse of the JSON ``paths``) as ``datasets.load_dataset("json")`` gives
    them: one type per column (5 and 5.5 in a column are 5.0 and 5.5), None for a key a line
    lacks, a column of mixed kinds as written (datasets' ``Json`` feature).

    Why: TRL users load their JSONL with datasets, so a TRL reward doing ``str(answer) == "5.0"``
    scored the row 5 differently here. Files datasets cannot read (a column that changes type past
    its first 10 MB, a number past a double's range) keep Python's types, with a warning: TRL could
    not load them at all. (A key repeated in an object is refused as read: ``polyrl.json_keys``; a
    string datasets reads as a number is refused by the caller: ``polyrl.json_coercion``.)
    Rows that are not all objects are left for the dataset's checks to refuse."""
    if not all(isinstance(row, dict) for row in rows):
        return rows
    try:
        datasets = _datasets()
        base = os.path.expanduser(cache_dir or str(datasets.config.HF_DATASETS_CACHE))
        os.makedirs(base, exist_ok=True)
        # a throwaway cache: the rows are copied out, so no Arrow copy of the file is left behind
        with (tempfile.TemporaryDirectory(prefix="polyrl-json-", dir=base, ignore_cleanup_errors=True) as scratch,
              _offline(datasets)):
            loaded = datasets.load_dataset("json", data_files=[str(p) for p in paths], split="train",
                                           cache_dir=scratch).with_format(None)
            columns = loaded[:]
            del loaded
    except Exception as exc:  # noqa: BLE001 - datasets/pyarrow raise many kinds (or datasets is missing)
        log.warning("🤗 datasets cannot read these JSON rows, so each value keeps its own JSON type (TRL, "
                    "which loads JSON with datasets, could not read them at all)", files=[str(p) for p in paths],
                    reason=_reason(exc), fix="give each column one type in every row (e.g. 5.0, not 5, in a "
                                             "column with 5.5), and name every column in the first rows (null "
                                             "where a row has none): datasets takes them from the file's first MBs")
        return rows
    names = list(columns)
    typed = [dict(zip(names, values)) for values in zip(*(columns[k] for k in names))]
    if len(typed) != len(rows):  # cannot happen for a file Python and datasets both read; never misalign
        log.warning("🤗 datasets reads a different number of JSON rows, so each value keeps its own JSON type",
                    files=[str(p) for p in paths], rows=len(rows), datasets_rows=len(typed))
        return rows
    return typed


def _refuse_surrogates(row: Any, where: str, field: str) -> None:
    """A lone surrogate from a ``\\ud800`` escape is an error naming the line and column: never
    replaced, see ``polyrl.text_validity``. (A pair of escapes decodes to one valid character.)"""
    bad = row_surrogate(row) if isinstance(row, dict) else None
    if bad is not None:
        raise surrogate_error(where, f"column {bad[0]!r}", bad[1], field=field)


def _refuse_nul(row: Any, where: str, path: Path, field: str) -> None:
    """A NUL character from a ``\\u0000`` escape is an error naming the line and column, as a CSV's NUL
    byte is (``polyrl.nul_bytes``): never kept in a prompt the model would read."""
    bad = row_nul(row) if isinstance(row, dict) else None
    if bad is not None:
        raise nul_error(where, f"column {bad[0]!r}", bad[1], json_nul_fix(path), field=field)


# --- 🤗 datasets --------------------------------------------------------------------------------


def _single(loaded: Any, split: str | None, what: str, field: str) -> Any:
    """One split of a DatasetDict (``split``, default ``train``), or the Dataset itself."""
    datasets = _datasets()
    if isinstance(loaded, datasets.DatasetDict):
        wanted = split or "train"
        if wanted not in loaded:
            raise ConfigError(f"{what} has no split {wanted!r} (its splits: {', '.join(loaded)})",
                              field=field, fix=f"set it to one of: {', '.join(loaded)}")
        return loaded[wanted]
    if split is not None:
        raise ConfigError(f"{what} is a single Dataset, it has no splits", field=field,
                          fix="remove it (splits apply to a saved DatasetDict or data.name)")
    return loaded


def _arrow_rows(dataset: Any, digest: str | None, what: str) -> ArrowRows:
    """``dataset`` as ArrowRows; ``digest`` of its source (None: hash its own Arrow files). A
    format saved with the dataset is dropped: ``set_format(columns=[...])`` before save_to_disk hid
    the other columns from the rows while they passed every column check, so rewards got None."""
    dataset = dataset.with_format(None)  # every column, as plain Python values
    if getattr(dataset, "_indices", None) is not None:  # a saved selection: materialise it once, rare
        dataset = dataset.flatten_indices()
    if len(dataset) == 0:
        raise ConfigError(f"{what} has no rows", field="data", fix="point at a non-empty dataset")
    return ArrowRows(dataset, digest or _digest([f["filename"] for f in dataset.cache_files]))


def load_files(path: str | Sequence[str], *, split: str | None = None, cache_dir: str | None = None,
               field: str = "data.path", split_field: str = "data.split",
               ) -> tuple[list[Any] | ArrowRows, str, RowOrigins | None]:
    """(rows, display name, where each JSON row came from) of ``path``: JSON rows as dicts,
    everything else Arrow-backed (its rows are named by their index in the source)."""
    paths = expand_paths(path, field)
    if paths[0].is_dir():
        return _load_folder(paths[0], split, field, split_field), paths[0].name, None
    if split is not None:
        raise ConfigError("files have no splits", field=split_field,
                          fix="remove it, or hold rows out with eval.count, or read them from data.eval_path")
    name = paths[0].name if len(paths) == 1 else f"{paths[0].name} (+{len(paths) - 1} files)"
    kind = _format(paths, field)
    if kind == "json":
        rows, origins = read_json_files(paths, field, cache_dir)
        return rows, name, origins
    builder, options = ARROW_FORMATS[paths[0].suffix.lower()]
    for p in paths:
        _check_bytes(p, builder == "csv", field)
    datasets = _datasets()
    no_rows = ConfigError(f"data file(s) {name!r} hold no rows", field=field, fix="add rows to them")
    if builder == "parquet" and _parquet_rows(paths, field) == 0:
        raise no_rows
    digest = _digest(paths)
    # 🤗 datasets keys its Arrow copy of local files by path and mtime; a file rewritten with the
    # same mtime (cp -p, rsync -t) would silently reuse stale rows. Keying by content cannot.
    root = os.path.join(os.path.expanduser(cache_dir or str(datasets.config.HF_DATASETS_CACHE)),
                        "polyrl-files", digest[:16])
    try:
        with _offline(datasets):
            loaded = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train",
                                           cache_dir=root, **options)
    except Exception as exc:  # noqa: BLE001 - datasets/pyarrow/pandas raise many kinds; all mean "unreadable"
        if "corresponds to no data" in str(exc):  # a CSV with a header line only
            raise no_rows from None
        if builder == "csv" and (where := _first_non_utf8(paths)) is not None:
            raise ConfigError(f"{where} is not UTF-8 text", field=field,
                              fix="save the file as UTF-8 (a spreadsheet's 'CSV UTF-8'; or iconv -f latin1 -t utf-8 "
                                  "FILE > NEW.csv when it is Latin-1)") from None
        if builder == "csv":  # files whose columns pandas shifts differ from the others (or each other)
            refuse_long_rows(paths, options.get("sep", ","), field)
        if builder == "csv" and "too large to convert" in _reason(exc) \
                and (long := first_integer_past_64_bits(paths, options.get("sep", ","))) is not None:
            raise ConfigError(f"{long[0]}:{long[1]}: column {long[2]!r} holds the integer {long[3]}, past the 64 bits "
                              "pandas (🤗 datasets' CSV reader) reads an integer column in", field=field,
                              fix=LONG_FIX) from None
        raise ConfigError(f"cannot read {name} as {builder}: {_reason(exc)}", field=field,
                          fix=f"check that the file is a valid {builder} file (re-export it)") from None
    if builder == "csv":
        refuse_row_labels(loaded.column_names, paths, options.get("sep", ","), field)
        refuse_repeated_names(loaded.column_names, paths, options.get("sep", ","), field)
        refuse_other_separator(loaded.column_names, paths, options.get("sep", ","), field)
        refuse_leading_zeros(loaded.data.table, paths, options.get("sep", ","), field)
        refuse_rounded_integers(loaded.data.table, paths, options.get("sep", ","), field)
    table = _arrow_rows(loaded, digest, name)
    if builder == "csv":
        table.csv = (tuple(paths), options.get("sep", ","))
    return table, name, None


def _check_bytes(path: Path, text: bool, field: str) -> None:
    """Refuse a file that holds nothing, or only a byte order mark and line ends (a spreadsheet's
    export of an empty sheet: pandas' "No columns to parse from file" named no file); a ``text``
    (CSV) file also when it is UTF-16 (read as UTF-8: "Couldn't cast p r o m p t", or byte 0xff
    "not UTF-8") or holds a NUL byte (``polyrl.nul_bytes``). One open per file for all three."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        if len(head) < HEAD_BYTES and not head.removeprefix(codecs.BOM_UTF8).strip():
            raise ConfigError(f"data file {str(path)!r} is empty", field=field, fix="add rows to it or remove it")
        if text:
            refuse_wide_text(path, head, field)
            refuse_nul_bytes(path, head, fh, field)


def _parquet_rows(paths: list[Path], field: str) -> int:
    """Rows in Parquet files, from their footers (a corrupt file fails here, before any caching)."""
    import pyarrow.parquet as pq

    total = 0
    for p in paths:
        try:
            file = pq.ParquetFile(p)
            total += file.metadata.num_rows
            schema = file.schema_arrow
        except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError...
            raise ConfigError(f"{str(p)!r} is not a readable Parquet file: {_reason(exc)}", field=field,
                              fix="re-export it (e.g. pandas.DataFrame.to_parquet / Dataset.to_parquet)") from None
        _refuse_parquet_schema(p, schema, field)
    return total


def _refuse_parquet_schema(path: Path, schema: Any, field: str) -> None:
    """A valid Parquet file 🤗 datasets cannot read, named for what it holds: a column named twice
    (pyarrow's own message listed its scanner's internal columns) or a map column, anywhere in a
    column's type (datasets has no type for one). Why: the error said to re-export a valid file."""
    names = schema.names
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ConfigError(f"{str(path)!r} names the column {twice!r} twice (🤗 datasets cannot tell them apart)",
                          field=field, fix="give each column its own name (rename or drop one) and write the file again")
    for column in schema:
        if _has_map(column.type):
            raise ConfigError(f"{str(path)!r}: column {column.name!r} holds an Arrow map ({column.type}), which 🤗 "
                              "datasets has no type for", field=field,
                              fix="store it as a list of {key, value} structs or as a JSON string, or drop it")


def _has_map(kind: Any) -> bool:
    """Whether an Arrow type is a map or holds one (in a list, struct or dictionary)."""
    import pyarrow as pa

    if pa.types.is_map(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _has_map(kind.value_type)
    return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


def _load_folder(folder: Path, split: str | None, field: str, split_field: str) -> ArrowRows:
    if not ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()):
        raise ConfigError(f"{str(folder)!r} is a folder but not one written by save_to_disk", field=field,
                          fix="give its data files (a list or a glob such as 'folder/*.parquet')")
    datasets = _datasets()
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"cannot read the saved dataset {str(folder)!r}: {_reason(exc)}", field=field,
                          fix="save it again with Dataset.save_to_disk") from None
    dataset = _single(loaded, split, repr(str(folder)), split_field)
    return _arrow_rows(dataset, None, folder.name)


def load_cached(name: str, config: str | None, split: str | None, cache_dir: str | None,
                split_field: str = "data.split") -> ArrowRows:
    """A Hub dataset from the local 🤗 datasets cache, never over the network."""
    datasets = _datasets()
    where = cache_dir or str(datasets.config.HF_DATASETS_CACHE)
    if os.path.exists(name):
        raise ConfigError(f"{name!r} is a local path", field="data.name",
                          fix="use data.path for local files and folders; data.name is for cached Hub datasets")
    try:
        with _offline(datasets):
            loaded = datasets.load_dataset(name, config, split=split or "train", cache_dir=cache_dir)
    except ValueError as exc:
        text = _reason(exc)
        if "Unknown split" in text:
            raise ConfigError(f"dataset {name!r}: {text}", field=split_field, fix="pick one of the splits it names") \
                from None
        if "config" in text:
            raise ConfigError(f"dataset {name!r}: {text}", field="data.config",
                              fix="pick one of the cached configs it names") from None
        raise ConfigError(f"cannot read dataset {name!r} from {where}: {text}", field="data.name") from None
    except Exception:  # noqa: BLE001 - offline: "not on the Hub" is the only remaining outcome
        raise ConfigError(
            f"dataset {name!r} is not in the local datasets cache ({where})", field="data.name",
            fix="download it once where there is network (datasets.load_dataset(name)), copy the cache here, "
                "or set data.cache_dir to the cache that holds it") from None
    return _arrow_rows(loaded, None, f"{name}:{split or 'train'}")


def cached_split_rows(name: str, config: str | None, split: str, cache_dir: str | None) -> int:
    """How many rows the whole ``split`` of a cached Hub dataset holds (memory-mapped, offline);
    slice specs such as ``train[90%:]`` resolve against it (``polyrl.split_overlap``)."""
    datasets = _datasets()
    with _offline(datasets):
        return len(datasets.load_dataset(name, config, split=split, cache_dir=cache_dir))
