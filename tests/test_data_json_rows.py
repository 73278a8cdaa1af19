"""JSON-lines rows against 🤗 ``datasets.load_dataset("json")`` on the same bytes: rows parted by a
lone ``\\r`` inside a ``\\n`` file, the cap on a line's length, and strings datasets reads as numbers."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError


def _datasets_rows(path: Path, cache: Path) -> list[dict]:
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache)).to_list()


def _lines(*rows: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


@pytest.mark.parametrize("between", [b"\r", b"\r ", b"\r\r", b" \r\t"])
def test_rows_parted_by_a_lone_cr_in_a_lf_file_are_read_as_datasets_reads_them(tmp_path, between):
    """Two files joined, one with an old Mac's line ends: datasets reads three rows; polyrl refused
    line 1 as "not valid JSON (Extra data)"."""
    path = tmp_path / "joined.jsonl"
    path.write_bytes(b'{"prompt": "a", "answer": "1"}' + between + b'{"prompt": "b", "answer": "2"}\n'
                     b'{"prompt": "c", "answer": "3"}\n')
    expected = _datasets_rows(path, tmp_path / "hf")
    assert [r["prompt"] for r in expected] == ["a", "b", "c"]
    assert load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows == expected


def test_a_cr_inside_an_object_stays_whitespace_and_a_bad_row_after_a_cr_is_named(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"prompt": "a",\r "answer": "1"}\n{"prompt": "b", "answer": "2"}\n')
    assert load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows == _datasets_rows(path, tmp_path / "hf")
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"}\r{"prompt": }\n')
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert f"{path}:2 is not valid JSON (Expecting value)" in str(err.value)
    # rows on one line share its number (what grep -n and wc -l count); the row tells them apart
    path.write_bytes(b'{"prompt": "a"}\r{"question": "b"}\n')
    with pytest.raises(ConfigError, match=r"x.jsonl line 1 \(row 1\) has no column 'prompt'"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


def test_objects_on_one_line_without_a_cr_between_are_still_refused(tmp_path):
    """``{} {}``: datasets reads two rows, but nothing marks a line end there (a lost newline, or a
    paste): one error naming the line, as before."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"prompt": "a"} {"prompt": "b"}\n')
    with pytest.raises(ConfigError, match=r"x.jsonl:1 is not valid JSON \(Extra data\)"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


@pytest.mark.parametrize("ends", [b"\n", b"\r"])
def test_a_json_line_longer_than_the_cap_is_refused_before_it_is_read_whole(tmp_path, monkeypatch, ends):
    """A file without line ends (or one multi-GB row) was read into memory whole: a line past
    ``MAX_LINE_BYTES`` is an error naming it. The cap is lowered here; a line of exactly the cap is read."""
    from polyrl import json_lines

    monkeypatch.setattr(json_lines, "MAX_LINE_BYTES", 100)
    short = json.dumps({"prompt": "p" * (100 - 14)}).encode()
    assert len(short) == 100
    path = tmp_path / "x.jsonl"
    path.write_bytes(short + ends + short)  # last line without an end
    assert [len(r["prompt"]) for r in load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows] == [86, 86]
    path.write_bytes(short + ends + json.dumps({"prompt": "p" * 5000}).encode() + ends + short + ends)
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path}:2 is longer than 100 bytes without a line end"), str(err.value)
    path.write_bytes(json.dumps({"prompt": "p" * 5000}).encode())  # no line end at all
    with pytest.raises(ConfigError, match=r"x.jsonl:1 is longer than"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


@pytest.mark.parametrize(("text", "other"), [("007", 5), ("1.50", 5), ("true", True), ("NaN", 5), ("null", 5.5)])
def test_a_string_datasets_reads_as_another_value_is_refused(tmp_path, text, other):
    """A column mixing strings and numbers sends datasets to pandas, which reads "007" as 7, "true"
    as True, "NaN" as None: rewards got those, silently (as TRL's do). The file says a string."""
    path = tmp_path / "qa.jsonl"
    path.write_bytes(_lines({"prompt": "a", "answer": other}, {"prompt": "b", "answer": text}))
    assert _datasets_rows(path, tmp_path / "hf")[1]["answer"] != text  # why: datasets changes it
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path} line 2 (row 1): column 'answer' holds the string {text!r}, "
                                     "which 🤗 datasets (and so TRL) reads as "), str(err.value)
    assert "give 'answer' one JSON type in every row: quote every value as a string" in str(err.value)


def test_a_nested_string_datasets_reads_as_a_number_is_named_where_it_is(tmp_path):
    path = tmp_path / "qa.json"
    path.write_text(json.dumps([{"prompt": "a", "meta": {"ids": [1]}}, {"prompt": "b", "meta": {"ids": ["02"]}}]))
    assert _datasets_rows(path, tmp_path / "hf")[1]["meta"] == {"ids": [2]}
    with pytest.raises(ConfigError, match=r"row 1 of .*qa.json: column 'meta' \(at meta.ids\[0\]\) holds the string "
                                          r"'02', which 🤗 datasets \(and so TRL\) reads as 2 \(int\).*Fix: give "
                                          r"'meta.ids\[0\]' one JSON type in every row: .* or write every one as a "
                                          r"number without quotes"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


def test_tool_call_arguments_as_a_string_beside_an_object_are_refused(tmp_path):
    """datasets reads a tool call's ``arguments`` string as the object it spells when another row
    gives an object there: which one the file means is the user's to say."""
    path = tmp_path / "tools.jsonl"
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}
    text_call = {**call, "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    path.write_bytes(_lines({"prompt": "a", "messages": [call]}, {"prompt": "b", "messages": [text_call]}))
    assert _datasets_rows(path, tmp_path / "hf")[1]["messages"][0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    with pytest.raises(ConfigError, match=r"line 2 \(row 1\): column 'messages' \(at messages\[0\].tool_calls\[0\]"
                                          r".function.arguments\) holds the string '\{\"x\": 1\}'.*or write every one "
                                          r"as a JSON object or array without quotes"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    path.write_bytes(_lines({"prompt": "a", "messages": [call]}, {"prompt": "b", "messages": [call]}))
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert rows == _datasets_rows(path, tmp_path / "hf") and rows[1]["messages"] == [call]


def test_strings_datasets_keeps_are_read_as_strings_and_empty_is_not_missing(tmp_path):
    """Numbers as strings in a column of strings, words beside numbers, "" against a key a row
    lacks and null: read exactly as datasets reads them (no error)."""
    path = tmp_path / "qa.jsonl"
    path.write_bytes(_lines({"prompt": "a", "answer": "007", "note": "x", "n": 1},
                            {"prompt": "b", "answer": "5", "note": "", "n": "many"},
                            {"prompt": "c", "answer": "1.50"},
                            {"prompt": "d", "answer": "12", "note": None}))
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert rows == _datasets_rows(path, tmp_path / "hf")
    assert [r["answer"] for r in rows] == ["007", "5", "1.50", "12"]
    assert [r["note"] for r in rows] == ["x", "", None, None] and rows[1]["n"] == "many"


@pytest.mark.parametrize("when", ["2024-01-05", "2024-01-05 10:00:00", "2024-01-05T10:00:00Z"])
def test_a_column_of_dates_is_read_as_datasets_reads_it_not_refused_as_mixed(tmp_path, when):
    """pyarrow reads date strings as timestamps in every datasets load (no pandas, no other type in
    the column): such a file loaded before the coercion check, which then refused it as a column
    holding "other types in other rows" and told the user to quote values already quoted."""
    path = tmp_path / "qa.jsonl"
    path.write_bytes(_lines({"prompt": "a", "answer": "1", "when": when, "meta": {"at": when}},
                            {"prompt": "b", "answer": "2", "when": when, "meta": {"at": when}}))
    expected = _datasets_rows(path, tmp_path / "hf")
    assert type(expected[0]["when"]) is not str  # why: datasets reads it as a timestamp
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert rows == expected


@pytest.mark.parametrize(("rows", "number", "why"), [
    ([{"answer": 3}, {"answer": 123456789012345678901}], 123456789012345678901, "pyarrow holds integers up to int64"),
    ([{"answer": 1.5}, {"answer": 12345678901234567}], 12345678901234567, "its column holds fractions too"),
])
def test_an_integer_datasets_reads_as_another_number_is_refused(tmp_path, rows, number, why):
    """An integer past int64 (a factorial as an answer) was read as a float64 of 16 digits, and one
    past 2**53 beside a fraction lost its last digit: rewards compared another number, silently."""
    path = tmp_path / "qa.jsonl"
    path.write_bytes(_lines(*({"prompt": p, **r} for p, r in zip("ab", rows))))
    assert _datasets_rows(path, tmp_path / "hf")[1]["answer"] != number  # why: datasets changes it
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path} line 2 (row 1): column 'answer' holds the integer {number}, "
                                     "which 🤗 datasets (and so TRL) reads as "), str(err.value)
    assert why in str(err.value) and f"quote 'answer' as a string in every row (\"{number}\")" in str(err.value)


def test_an_integer_past_int64_in_a_json_array_is_not_read_wrapped(tmp_path):
    """In a .json array datasets wrapped it modulo 2**64: 123456789012345678901 read as 1.28e19."""
    path = tmp_path / "qa.json"
    path.write_text('[{"prompt": "a", "meta": {"ids": [123456789012345678901]}}]')
    with pytest.raises(ConfigError, match=r"row 0 of .*qa.json: column 'meta' \(at meta.ids\[0\]\) holds the integer "
                                          r"123456789012345678901, which .* reads as 1.27\d*e\+19"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


def test_integers_datasets_keeps_as_their_value_are_read_as_it_gives_them(tmp_path):
    """5 beside 5.5 is 5.0 (the same number), and an int64 is kept: no error, datasets' rows."""
    path = tmp_path / "qa.jsonl"
    path.write_bytes(_lines({"prompt": "a", "answer": 5, "id": 2**62}, {"prompt": "b", "answer": 5.5, "id": -(2**63)}))
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert rows == _datasets_rows(path, tmp_path / "hf") and rows[0]["answer"] == 5 and rows[0]["id"] == 2**62
