"""Odd files users give as data: NUL bytes in a CSV, a prompt column with nothing in it, a
compressed file. Each loads as written or is one error naming the file, where, and the fix."""

from __future__ import annotations

import gzip
import shlex
import shutil
import subprocess

import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError


def _load(path, tmp_path, **kwargs):
    return load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"), **kwargs)


def test_a_nul_byte_in_a_csv_is_refused_naming_its_line_not_kept_in_the_prompt(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b'prompt,answer\n"A cell\non two lines",1\nWhat is\x00 2+2?,4\n')
    with pytest.raises(ConfigError) as info:  # pandas, and so datasets, kept "What is\x00 2+2?"
        _load(path, tmp_path)
    assert info.value.field == "data.path"
    assert str(info.value).startswith(f"data.path: {path} line 4 holds a NUL byte (0x00) at byte 8 of the line"), \
        info.value
    if shutil.which("tr") is not None:  # the fix's command removes them, and the rows load
        command = info.value.fix.split(": ", 1)[1].split(" (or ", 1)[0]
        subprocess.run(["bash", "-c", command], check=True)
        clean = tmp_path / "rows.clean.csv"
        assert [row["prompt"] for row in _load(clean, tmp_path)] == ["A cell\non two lines", "What is 2+2?"]
        assert shlex.quote(str(clean)) in command


def test_a_nul_byte_far_into_a_csv_is_found_on_its_line(tmp_path):
    """Past the first bytes and past a read block: lines are counted across blocks."""
    lines = [b"prompt"] + [b"row %d" % i for i in range(300_000)]
    lines[250_001] = b"row\x00 250000"
    path = tmp_path / "big.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert path.stat().st_size > 2 << 20
    with pytest.raises(ConfigError) as info:
        _load(path, tmp_path)
    assert f"{path} line 250002 holds a NUL byte (0x00) at byte 4 of the line" in str(info.value)
    from polyrl.nul_bytes import first_nul

    with open(path, "rb") as fh:  # a head that ends mid-file, as the caller's read leaves it
        assert first_nul(fh.read(10), fh) == (250_002, 4)


@pytest.mark.parametrize("cells", ['"",1\n"",2\n', ",1\n,2\n", "NA,1\n,2\n"])
def test_a_csv_prompt_column_with_no_prompt_in_any_row_is_said_to_be_that(tmp_path, cells):
    """pandas reads a column of empty cells as double: it was refused as holding double."""
    path = tmp_path / "rows.csv"
    path.write_text("prompt,answer\n" + cells)
    with pytest.raises(ConfigError) as info:
        _load(path, tmp_path)
    assert info.value.field == "data.prompt_column"
    assert str(info.value).startswith("data.prompt_column: column 'prompt' of rows.csv holds no prompt in any of "
                                      "its 2 rows (row 0's "), info.value
    assert "double" not in str(info.value)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_gzipped_data_file_is_named_compressed_with_the_command_that_decompresses_it(tmp_path, suffix):
    text = '{"prompt": "A?"}\n{"prompt": "B?"}\n' if suffix == "jsonl" else "prompt\nA?\nB?\n"
    path = tmp_path / f"my rows.{suffix}.gz"
    path.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(ConfigError) as info:
        _load(path, tmp_path)
    assert str(info.value).startswith(f"data.path: {str(path)!r} is compressed with gzip (a .{suffix} file "
                                      "inside)"), info.value
    if shutil.which("gunzip") is not None:
        command = info.value.fix.split("(", 1)[1].split(", which", 1)[0]
        subprocess.run(shlex.split(command), check=True)
        assert [row["prompt"] for row in _load(tmp_path / f"my rows.{suffix}", tmp_path)] == ["A?", "B?"]


@pytest.mark.parametrize(("rows", "bad", "said"), [
    ([[{"role": "user", "content": "hi"}], [{"role": "system", "content": "x"}, {"role": "user", "content": None}]],
     1, "has message 1 without a content (null)"),
    ([[{"role": None, "content": "hi"}]], 0, "has message 0 without a role (null)"),
    ([[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a"}, None]], 1,
     "holds a null where message 1 belongs, not a {role, content} message"),
    ([[{"role": "user", "content": "hi"}], []], 1, "has no messages"),
])
def test_a_parquet_chat_with_a_null_inside_names_the_row_and_the_message(tmp_path, rows, bad, said):
    """A list<struct> messages column with nulls inside: the row, and which message is wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    path = tmp_path / "chats.parquet"
    pq.write_table(pa.table({"messages": pa.array(rows, type=kind)}), path)
    with pytest.raises(ConfigError) as info:
        _load(path, tmp_path, prompt_column="messages")
    assert str(info.value).startswith(f"data: row {bad} of chats.parquet: the prompt in column 'messages' {said}. "), \
        info.value


@pytest.mark.parametrize(("char", "fix"), [("\0", "remove the NUL bytes: tr -d '\\000' < "), ("\t", 'write it escaped ("\\t")')])
def test_a_raw_control_character_in_a_jsonl_string_is_named_with_its_column(tmp_path, char, fix):
    """json's own message, "Invalid control character at", named neither the character nor where."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": "a' + char + 'b"}\n')
    with pytest.raises(ConfigError) as info:
        _load(path, tmp_path)
    assert str(info.value).startswith(f"data.path: {path}:2 holds the control character {char!r} inside a string, "
                                      "at column 14"), info.value
    assert info.value.fix.startswith(fix), info.value.fix


def test_a_csv_mixing_line_ends_reads_every_row_as_written(tmp_path):
    """Guard (it works on main too): \\r\\n, \\n and an old Mac's \\r in one file, a quoted cell
    holding a line end of its own; pandas takes each as a row end outside quotes."""
    path = tmp_path / "rows.csv"
    path.write_bytes(b'prompt,answer\r\nA?,1\nB?,2\r"C\r\nspans?",3\r\n')
    rows = _load(path, tmp_path).rows
    assert [(row["prompt"], row["answer"]) for row in rows] == [("A?", 1), ("B?", 2), ("C\r\nspans?", 3)]
