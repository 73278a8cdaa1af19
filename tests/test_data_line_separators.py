"""Characters ``str.splitlines`` takes as line ends (U+2028, U+2029, U+0085, U+001C-U+001E, CR)
inside a data file's text: each record comes back exactly as written, as 🤗 datasets (TRL's reader)
reads it, or, where JSON forbids the raw character, is refused naming the file and line. A guard:
the readers split JSON lines at ``\\n`` (a lone ``\\r`` only as a file's line end) and CSV through
pandas, so none of these characters cuts a record."""

from __future__ import annotations

import json

import pytest

from polyrl.data_sources import load_files
from polyrl.errors import ConfigError

datasets = pytest.importorskip("datasets")

#: characters a JSON string may hold raw (not control characters to JSON)
RAW_OK = ["\u2028", "\u2029", "\x85"]
#: characters JSON holds only escaped; a CSV cell holds them raw
ESCAPED = ["\x1c", "\x1d", "\x1e", "\r", "\x0b", "\x0c", "\r\n"]


def _rows(rows) -> list[str]:
    return [r["prompt"] for r in (rows.take(range(len(rows))) if hasattr(rows, "take") else rows)]


def _datasets_prompts(path, kind: str, cache) -> list[str]:
    return datasets.load_dataset(kind, data_files=[str(path)], split="train", cache_dir=str(cache))["prompt"]


@pytest.mark.parametrize("char", RAW_OK + ESCAPED)
def test_a_jsonl_record_holding_a_line_separator_comes_back_as_written(tmp_path, char):
    text = f"one{char}two"
    path = tmp_path / "rows.jsonl"
    ensure_ascii = char not in RAW_OK  # U+2028 etc. written raw; controls as JSON escapes them
    path.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in
                            [{"prompt": text, "answer": "1"}, {"prompt": "next", "answer": "2"}]), encoding="utf-8")
    assert (char in path.read_text(encoding="utf-8")) == (not ensure_ascii)
    rows, _, _ = load_files(str(path), cache_dir=str(tmp_path / "c"))
    assert _rows(rows) == [text, "next"] == _datasets_prompts(path, "json", tmp_path / "d")


@pytest.mark.parametrize("char", ["\x1c", "\x1d", "\x1e", "\r"])
def test_a_raw_control_inside_a_jsonl_string_is_refused_naming_file_and_line(tmp_path, char):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"prompt": "ok", "answer": "1"}\n{"prompt": "one' + char.encode() + b'two", "answer": "2"}\n')
    with pytest.raises(ConfigError) as caught:
        load_files(str(path), cache_dir=str(tmp_path / "c"))
    assert f"{path}:2 holds the control character {char!r} inside a string" in caught.value.message, caught.value
    assert json.dumps(char) in caught.value.fix  # the escape to write instead


@pytest.mark.parametrize("char", RAW_OK + ESCAPED)
def test_a_quoted_csv_cell_holding_a_line_separator_comes_back_as_written(tmp_path, char):
    text = f"one{char}two"
    path = tmp_path / "rows.csv"
    path.write_bytes(f'prompt,answer\n"{text}",1\nnext,2\n'.encode())
    rows, _, _ = load_files(str(path), cache_dir=str(tmp_path / "c"))
    assert _rows(rows) == [text, "next"] == _datasets_prompts(path, "csv", tmp_path / "d")


@pytest.mark.parametrize("char", RAW_OK)
@pytest.mark.parametrize(("name", "end"), [("rows.json", None), ("rows.jsonl", "\r"), ("rows.jsonl", "\r\n")])
def test_a_raw_line_separator_survives_a_json_array_and_cr_line_ends(tmp_path, char, name, end):
    text = f"one{char}two"
    rows = [{"prompt": text, "answer": "1"}, {"prompt": "next", "answer": "2"}]
    path = tmp_path / name
    body = json.dumps(rows, ensure_ascii=False) if end is None else \
        "".join(json.dumps(r, ensure_ascii=False) + end for r in rows)
    path.write_bytes(body.encode())
    loaded, _, _ = load_files(str(path), cache_dir=str(tmp_path / "c"))
    assert _rows(loaded) == [text, "next"] == _datasets_prompts(path, "json", tmp_path / "d")
