"""A NUL character in a dataset's text (JSON's "\\u0000" escape; a Parquet/Arrow string holding
one) is refused at load as one error naming the file, row and column, with a fix, as a CSV's NUL
byte is (``polyrl.nul_bytes``). It used to reach the prompt, and the tokenizer, as written."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError

from bad_text_util import train_errors, two_row_jsonl  # noqa: E402


def _jsonl(d: Path) -> Path:
    return two_row_jsonl(d, "What is\0 3 + 3?")


def _parquet(d: Path, prompts: list) -> Path:
    pq.write_table(pa.table({"prompt": prompts, "answer": ["4", "6"]}), d / "data.parquet")
    return d / "data.parquet"


def test_jsonl_refuses_a_nul_escape_naming_the_line_and_column(tmp_path):
    path = _jsonl(tmp_path)
    assert "\\u0000" in path.read_text() and "\0" not in path.read_text()  # an escape, no NUL byte
    with pytest.raises(ConfigError) as caught:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    text = str(caught.value)
    assert caught.value.field == "data.path" and "\n" not in text
    assert f"{path}:2: column 'prompt' holds a NUL character (U+0000) at character 7" in text, text
    if shutil.which("sed") is not None:  # the fix's command removes the escapes, and the rows load
        command = caught.value.fix.split(": ", 1)[1].split(" (or ", 1)[0]
        subprocess.run(["bash", "-c", command], check=True)
        clean = load_dataset(path=str(tmp_path / "data.clean.jsonl"), cache_dir=str(tmp_path / "cache"))
        assert [row["prompt"] for row in clean] == ["What is 2 + 2?", "What is 3 + 3?"]


def test_a_json_array_names_the_row_and_the_message_holding_it(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "hi"}]},
            {"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x\0"}]}]
    (tmp_path / "data.json").write_text(json.dumps(rows))
    with pytest.raises(ConfigError, match=r"row 1 of .*data\.json: column 'prompt' at \[1\]\['content'\] holds a "
                                          r"NUL character \(U\+0000\) at character 1"):
        load_dataset(path=str(tmp_path / "data.json"), cache_dir=str(tmp_path / "cache"))


def test_a_nul_in_a_column_rewards_read_is_refused_too(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"prompt": "q", "answer": "4"}\n{"prompt": "q", "answer": "4\\u0000"}\n')
    with pytest.raises(ConfigError, match=r"data\.jsonl:2: column 'answer' holds a NUL character"):
        load_dataset(path=str(tmp_path / "data.jsonl"), cache_dir=str(tmp_path / "cache"))


def test_an_escaped_backslash_before_u0000_is_text_and_is_kept(tmp_path):
    """"\\\\u0000" in JSON is a backslash and "u0000": six characters someone wrote, no NUL."""
    (tmp_path / "data.jsonl").write_text('{"prompt": "write \\\\u0000 in C", "answer": "0"}\n')
    assert load_dataset(path=str(tmp_path / "data.jsonl")).rows == [{"prompt": "write \\u0000 in C", "answer": "0"}]


def test_parquet_text_holding_a_nul_is_refused_at_load_naming_the_row(tmp_path):
    path = _parquet(tmp_path, ["What is 2 + 2?", "What is\0 3 + 3?"])
    with pytest.raises(ConfigError) as caught:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    text = str(caught.value)
    assert "row 1 of data.parquet: column 'prompt' holds a NUL character (U+0000) at character 7" in text, text
    assert "\n" not in text and "str.replace('\\x00', ''" in caught.value.fix


def test_a_parquet_chat_holding_a_nul_names_the_message(tmp_path):
    chats = [[{"role": "user", "content": "hi"}],
             [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x\0"}]]
    path = _parquet(tmp_path, chats)
    with pytest.raises(ConfigError, match=r"row 1 of data\.parquet: column 'prompt' at \[1\]\['content'\] holds a "
                                          r"NUL character"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))


def test_only_the_rows_of_a_sliced_chunk_count(tmp_path):
    """A sliced list's children can reach past the slice: a NUL there is in no row of the table."""
    from polyrl.data_arrow import check_text_columns

    chats = pa.array([[{"role": "user", "content": "x\0"}], [{"role": "user", "content": "hi"}]])
    check_text_columns(pa.table({"prompt": chats.slice(1)}), "sliced")  # its one row holds no NUL
    with pytest.raises(ConfigError, match=r"row 0 of whole: column 'prompt' at \[0\]\['content'\]"):
        check_text_columns(pa.table({"prompt": chats}), "whole")


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_polyrl_train_refuses_it_as_one_error_line(tiny_model_dir, tmp_path, kind):
    path = _jsonl(tmp_path) if kind == "jsonl" else _parquet(tmp_path, ["What is 2 + 2?", "What is\0 3 + 3?"])
    errors = train_errors(tiny_model_dir, path, tmp_path)
    where = f"{path}:2" if kind == "jsonl" else "row 1 of data.parquet"
    assert len(errors) == 1 and where in errors[0] and "column 'prompt'" in errors[0] and "NUL" in errors[0], errors
