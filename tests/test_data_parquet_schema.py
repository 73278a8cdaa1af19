"""Valid Parquet files 🤗 datasets cannot read: named for what they hold, not called broken."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError


def test_a_column_named_twice_is_named(tmp_path):
    path = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["2 + 2 ="]), pa.array(["4"]), pa.array(["5"])],
                                        names=["prompt", "answer", "answer"]), path)
    with pytest.raises(Exception, match="error occurred while generating"):  # why: datasets cannot read it either
        datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value) == (f"data.path: {str(path)!r} names the column 'answer' twice (🤗 datasets cannot tell them "
                              "apart). Fix: give each column its own name (rename or drop one) and write the file again")


@pytest.mark.parametrize("kind", [pa.map_(pa.string(), pa.int64()), pa.list_(pa.map_(pa.string(), pa.int64()))])
def test_a_map_column_at_any_depth_is_named_with_what_to_store_instead(tmp_path, kind):
    path = tmp_path / "qa.parquet"
    meta = [[("a", 1)]] if pa.types.is_map(kind) else [[[("a", 1)]]]
    pq.write_table(pa.table({"prompt": ["2 + 2 ="], "answer": ["4"], "meta": pa.array(meta, type=kind)}), path)
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert f"{str(path)!r}: column 'meta' holds an Arrow map" in str(err.value)
    assert "list of {key, value} structs or as a JSON string" in str(err.value) and "re-export" not in str(err.value)


def test_chat_prompts_and_nested_answers_still_read(tmp_path):
    path = tmp_path / "qa.parquet"
    chat = pa.array([[{"role": "user", "content": "2 + 2 ="}]])
    pq.write_table(pa.table({"prompt": chat, "answer": pa.array([{"v": [4]}])}), path)
    assert load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows == [
        {"prompt": [{"role": "user", "content": "2 + 2 ="}], "answer": {"v": [4]}}]
