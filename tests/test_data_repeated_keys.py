"""A JSON object naming a key twice has no one meaning: Python keeps the last value, 🤗 datasets
refuses a JSONL row with it and reads a nested one as the bare last value. Refused, naming the
file, line (and row of a .json array) and key; the same key in different objects is fine."""

from __future__ import annotations

import datasets
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError


def test_datasets_reads_a_nested_repeated_key_as_a_bare_value(tmp_path):
    """The premise, on the real library: the object is gone, TRL's reward would get 2."""
    path = tmp_path / "nested.jsonl"
    path.write_text('{"prompt": "a", "meta": {"k": 1, "k": 2}}\n')
    rows = datasets.load_dataset("json", data_files=str(path), split="train",
                                 cache_dir=str(tmp_path / "hf")).to_list()
    assert rows == [{"prompt": "a", "meta": 2}]


@pytest.mark.parametrize(("line", "key"), [
    ('{"prompt": "b", "answer": 2, "answer": 3}', "answer"),
    ('{"prompt": "b", "meta": {"k": 1, "k": 2}}', "k"),
    ('{"prompt": [{"role": "user", "content": "b", "role": "system"}]}', "role"),
])
def test_a_jsonl_line_repeating_a_key_is_refused_naming_line_and_key(tmp_path, line, key):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a", "answer": 1}\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    assert info.value.field == "data.path"
    assert f"rows.jsonl:2 names the key {key!r} twice in one object" in str(info.value)
    assert "once per object" in info.value.fix


def test_a_json_array_element_repeating_a_key_is_named_by_row_and_line(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[\n  {"prompt": "a", "answer": 1},\n  {"prompt": "b",\n   "answer": 2, "answer": 3}\n]\n')
    with pytest.raises(ConfigError, match=r"rows.json line 3 \(row 1\) names the key 'answer' twice"):
        load_dataset(path=str(path))


def test_the_same_key_in_different_objects_is_read_as_written(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "a"}], "meta": {"prompt": {"prompt": 1}}}\n')
    assert load_dataset(path=str(path)).rows[0]["meta"] == {"prompt": {"prompt": 1}}
