"""Text no tokenizer can encode (a lone surrogate: JSON's "\\ud800", a non-UTF-8 argument; in
Parquet, the bytes a lax writer stores for one) is refused where it enters, as one error naming
its row and column, never replaced (the reward would score other text than the dataset holds).
It used to reach the tokenizer: a TypeError traceback at startup, or a UnicodeDecodeError when a
Parquet row was read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError

from bad_text_util import ENV, POLYRL, train_errors, two_row_jsonl  # noqa: E402


def _jsonl(d: Path) -> Path:
    return two_row_jsonl(d, "What is 3 + 3? \ud800")


def _parquet(d: Path) -> Path:
    """A real Parquet file whose row 1 holds a lone surrogate's bytes (ED A0 80, as WTF-8/CESU-8
    writers store it): pyarrow writes string buffers it is given without decoding them."""
    cells = [b"What is 2 + 2?", b"What is 3 + 3? \xed\xa0\x80"]
    offsets = np.cumsum([0, *map(len, cells)]).astype(np.int32)
    prompts = pa.Array.from_buffers(pa.string(), len(cells),
                                    [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(cells))])
    pq.write_table(pa.table({"prompt": prompts, "answer": ["4", "6"]}), d / "data.parquet")
    return d / "data.parquet"


def test_jsonl_refuses_a_lone_surrogate_naming_the_line_and_column(tmp_path):
    path = _jsonl(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_dataset(path=str(path))
    text = str(caught.value)
    assert caught.value.field == "data.path" and "\n" not in text
    assert f"{path}:2: column 'prompt' holds a lone surrogate ('\\ud800' at character 15)" in text, text


def test_a_json_array_names_the_message_holding_it(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "hi"}]}, {"prompt": [{"role": "system", "content": "be brief"},
                                                                          {"role": "user", "content": "x\udfff"}]}]
    (tmp_path / "data.json").write_text(json.dumps(rows))
    with pytest.raises(ConfigError, match=r"row 1 of .*data\.json: column 'prompt' at \[1\]\['content'\] holds a "
                                          r"lone surrogate"):
        load_dataset(path=str(tmp_path / "data.json"))


def test_an_escaped_surrogate_pair_is_one_character_and_is_kept(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"prompt": "smile \\ud83d\\ude00", "answer": "\\u00e9"}\n')
    assert load_dataset(path=str(tmp_path / "data.jsonl")).rows == [{"prompt": "smile \U0001F600", "answer": "é"}]


def test_inline_rows_refuse_it_in_any_column_rewards_read():
    with pytest.raises(ConfigError) as caught:
        load_dataset(rows=[{"prompt": "ok", "answer": "4"}, {"prompt": "ok", "answer": "caf\udce9"}])
    assert str(caught.value).startswith("data: row 1 of rows: column 'answer' holds a lone surrogate"), caught.value


def test_parquet_text_that_is_not_utf8_is_refused_at_load_naming_the_row(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_dataset(path=str(_parquet(tmp_path)), cache_dir=str(tmp_path / "cache"))
    text = str(caught.value)
    assert "row 1 of data.parquet: column 'prompt' holds text that is not valid UTF-8" in text and "\n" not in text


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_polyrl_train_refuses_it_as_one_error_line(tiny_model_dir, tmp_path, kind):
    path = _jsonl(tmp_path) if kind == "jsonl" else _parquet(tmp_path)
    errors = train_errors(tiny_model_dir, path, tmp_path)
    where = f"{path}:2" if kind == "jsonl" else "row 1 of data.parquet"
    assert len(errors) == 1 and where in errors[0] and "column 'prompt'" in errors[0], errors


def test_polyrl_generate_refuses_a_prompt_that_is_not_utf8_before_loading(tiny_model_dir):
    """A non-UTF-8 byte in the argument reaches Python as a surrogate; the torch backend's tokenizer
    raised a TypeError that the error line blamed on the backend, after the model loaded."""
    result = subprocess.run([*POLYRL, "generate", "--model", tiny_model_dir, "--max-new-tokens", "2",
                             os.fsdecode(b"caf\xe9")], capture_output=True, text=True, timeout=120, env=ENV)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert "lone surrogate ('\\udce9' at character 3)" in errors[0] and "backend" not in errors[0], errors
    assert "Loading weights" not in result.stderr  # refused before the model loaded


def test_engines_and_the_remote_tokenizer_refuse_it_as_a_config_error(tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.remote_tokenizer import ModelTokenizer
    from polyrl.types import EngineConfig, SamplingParams

    tok = ModelTokenizer(tiny_model_dir)
    with pytest.raises(ConfigError, match=r"a text prompt: the prompt holds a lone surrogate \('\\ud800'"):
        tok.encode_text("hi \ud800")
    with pytest.raises(ConfigError, match=r"a chat prompt: the prompt at \[0\]\['content'\] holds a lone surrogate"):
        tok.render([{"role": "user", "content": "\udfff"}])
    assert tok.encode_text("hi") and tok.render([{"role": "user", "content": "hi"}])  # the usual text: unchanged
    reg = get_registry()
    if not reg.status("torch").available:
        pytest.skip("torch backend not usable here")
    engine = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="generate", threads=1))
    with pytest.raises(ConfigError, match=r"prompt 1: the prompt holds a lone surrogate"):
        engine.generate(["fine", "x\ud800"], SamplingParams(max_new_tokens=2, n=1))
