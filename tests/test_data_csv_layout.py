"""CSV files pandas (under 🤗 datasets) reads without a word but not as written, refused naming the
file and line: data rows holding more fields than the header line names (pandas takes the extra
leading fields as row labels and shifts every column, so ``prompt`` held the answers), and a
header naming a column twice (the second became ``answer.1``). Files read as written still load."""

from __future__ import annotations

import datasets
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError

QUESTIONS = b"prompt,answer\nWhat is the capital of France?,Paris,\nWhat is 2+2?,four,\n"


@pytest.fixture
def cache(tmp_path) -> str:
    return str(tmp_path / "hf-cache")


def test_datasets_itself_shifts_the_columns_of_such_a_file(tmp_path, cache):
    """The premise, on the real library: what TRL would train on."""
    path = tmp_path / "qa.csv"
    path.write_bytes(QUESTIONS)
    rows = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=cache).to_list()
    assert rows[0]["prompt"] == "Paris" and rows[0]["__index_level_0__"] == "What is the capital of France?"


def test_a_trailing_comma_on_the_data_lines_is_refused_naming_the_line(tmp_path, cache):
    path = tmp_path / "qa.csv"
    path.write_bytes(QUESTIONS)
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=cache)
    message = str(info.value)
    assert info.value.field == "data.path"
    assert f"{path} line 2 has 3 fields, but its header line names 2 ('prompt', 'answer')" in message
    assert "column 'prompt' would hold field 2" in message and "header line" in info.value.fix


def test_two_extra_fields_in_a_tsv_after_blank_lines(tmp_path, cache):
    path = tmp_path / "qa.tsv"
    path.write_bytes(b"\nprompt\tanswer\n\nWhat is 2+2?\tfour\tx\ty\n")
    with pytest.raises(ConfigError, match=r"qa.tsv line 4 has 4 fields, .* each row's first 2 fields as a row label"):
        load_dataset(path=str(path), cache_dir=cache)


def test_the_second_of_several_files_is_the_one_named(tmp_path, cache):
    good, bad = tmp_path / "a.csv", tmp_path / "b.csv"
    good.write_bytes(b"prompt,answer\nWhat is 1+1?,2\n")
    bad.write_bytes(b"prompt,answer\nWhat is 2+2?,4,x\n")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=[str(good), str(bad)], cache_dir=cache)
    assert f"{bad} line 2 has 3 fields" in str(info.value)


@pytest.mark.parametrize("text", [
    b"prompt,answer,\nWhat is 2+2?,four,\n",  # every line ends with a comma: an unnamed column, no shift
    b"__index_level_0__,prompt\n7,What is 2+2?\n",  # the header names it: read as written
])
def test_files_pandas_reads_as_written_still_load(tmp_path, cache, text):
    path = tmp_path / "ok.csv"
    path.write_bytes(text)
    assert load_dataset(path=str(path), cache_dir=cache).prompts() == ["What is 2+2?"]


def test_a_header_naming_a_column_twice_is_refused(tmp_path, cache):
    path = tmp_path / "twice.csv"
    path.write_bytes(b"\xef\xbb\xbfprompt,answer,answer\nWhat is 2+2?,4,four\n")
    renamed = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=cache).column_names
    assert renamed == ["prompt", "answer", "answer.1"]  # the premise, on the real library
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=cache)
    assert info.value.field == "data.path" and "its own name" in info.value.fix
    assert f"{path} line 1 names the column 'answer' twice (fields 2 and 3)" in str(info.value)


@pytest.mark.parametrize("header", [b"prompt,answer,answer.1", b"prompt,,"])
def test_names_pandas_keeps_are_read_as_written(tmp_path, cache, header):
    path = tmp_path / "names.csv"
    path.write_bytes(header + b"\nWhat is 2+2?,4,four\n")
    assert load_dataset(path=str(path), cache_dir=cache).rows[0]["prompt"] == "What is 2+2?"


def test_a_semicolon_csv_is_refused_naming_its_separator(tmp_path, cache):
    """A spreadsheet's semicolon CSV whose first question holds a comma read as one more field than
    its one-field header: the fix said to name every field in the header line, which was right."""
    path = tmp_path / "qa.csv"
    path.write_bytes(b"prompt;answer\nName a prime, please;7\nWhat is 2+2?;4\n")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=cache)
    assert f"{path} line 2 has 2 fields" in str(info.value)
    assert "one field holding ';'" in info.value.fix and "comma-separated" in info.value.fix


@pytest.mark.parametrize(("name", "text", "said", "fix"), [
    ("qa.csv", "prompt;answer\nWhat is 2 + 2?;4\n", "separated by semicolons, and a .csv file is read with commas",
     "save it with commas"),
    ("qa.csv", "prompt\tanswer\nWhat is 2 + 2?\t4\n", "separated by tabs, and a .csv file is read with commas",
     "name the file .tsv"),
    ("qa.tsv", "prompt,answer\nWhat is 2 + 2?,4\n", "separated by commas, and a .tsv file is read with tabs",
     "name the file .csv"),
])
def test_a_file_separated_by_another_character_is_named_not_missing_its_prompt(tmp_path, name, text, said, fix):
    """A European spreadsheet's CSV (semicolons), or a TSV named .csv, reads as one column: the error
    said the file had no column 'prompt', listing 'prompt;answer' among its columns."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert err.value.field == "data.path" and f"{path}: its header line " in str(err.value), str(err.value)
    assert said in str(err.value) and fix in str(err.value)


def test_one_column_without_another_separator_still_reads(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("prompt\nWhat is 2 + 2?\n")
    assert load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows == [{"prompt": "What is 2 + 2?"}]


@pytest.mark.parametrize("content", [b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n", b"\n\n"])
def test_a_csv_of_a_byte_order_mark_or_line_ends_alone_is_empty(tmp_path, content):
    """An empty sheet exported as 'CSV UTF-8' is a BOM alone: pandas' 'No columns to parse from file'."""
    path = tmp_path / "qa.csv"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value) == f"data.path: data file {str(path)!r} is empty. Fix: add rows to it or remove it"


@pytest.mark.parametrize("how", ["json", "python"])
def test_a_csv_prompt_of_chat_messages_written_as_text_is_refused_naming_its_row(tmp_path, how):
    """A DataFrame of chats written with to_csv: the cell is the list's text (JSON, or Python's repr,
    as pandas writes a list), which the model would read verbatim as one user message."""
    import json

    import pandas as pd

    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    path = tmp_path / "qa.csv"
    pd.DataFrame({"question": ["What is 1 + 1?", json.dumps(chat) if how == "json" else chat],
                  "answer": ["2", "4"]}).to_csv(path, index=False)
    read = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert isinstance(read[1]["question"], str)  # why: a CSV cell is text, the messages are gone
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), columns={"prompt": "question"}, cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith("data.path: row 1 of qa.csv: column 'question' holds chat messages written as "
                                     "text"), str(err.value)
    assert "JSONL or Parquet" in str(err.value)


def test_a_csv_prompt_that_only_looks_like_a_list_still_reads(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text('prompt,answer\n"[{""role"": ""user""}] is not a chat",1\n"[1, 2] + [3]?",2\n')
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert [r["prompt"] for r in rows] == ['[{"role": "user"}] is not a chat', "[1, 2] + [3]?"]
