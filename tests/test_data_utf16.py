"""Data files saved as UTF-16 (Windows' "Unicode"): named as such, with the command that converts them.

A UTF-16 JSON-lines file was refused as "not valid UTF-8 (byte 0 of the line)", or, without a byte
order mark, as line 1 not being valid JSON; a UTF-16 CSV as a column that would not cast.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from polyrl.data import load_dataset
from polyrl.data_sources import read_json_rows
from polyrl.errors import ConfigError

PROMPTS = ["What is 2 + 2?", "Name a prime."]
TEXT = {
    "jsonl": "".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS),
    "json": json.dumps([{"prompt": p} for p in PROMPTS]),
    "csv": "prompt\n" + "".join(f"{p}\n" for p in PROMPTS),
    "tsv": "prompt\tanswer\n" + "".join(f"{p}\t1\n" for p in PROMPTS),
}
#: case -> (how the text is written, what the error calls it, iconv's name for it)
ENCODINGS = {
    "LE with BOM": (lambda t: t.encode("utf-16"), "UTF-16 (little-endian, with a byte order mark)", "UTF-16"),
    "BE with BOM": (lambda t: ("\ufeff" + t).encode("utf-16-be"), "UTF-16 (big-endian, with a byte order mark)",
                    "UTF-16"),
    "LE": (lambda t: t.encode("utf-16-le"), "UTF-16 (little-endian, without a byte order mark)", "UTF-16LE"),
    "BE": (lambda t: t.encode("utf-16-be"), "UTF-16 (big-endian, without a byte order mark)", "UTF-16BE"),
    "UTF-32": (lambda t: t.encode("utf-32"), "UTF-32 (little-endian, with a byte order mark)", "UTF-32"),
}


@pytest.mark.parametrize("suffix", list(TEXT))
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_utf16_data_file_is_named_utf16_with_the_command_that_converts_it(tmp_path, encoding, suffix):
    encode, what, name = ENCODINGS[encoding]
    path = tmp_path / f"rows.{suffix}"
    path.write_bytes(encode(TEXT[suffix]))
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    assert info.value.field == "data.path", info.value
    assert str(info.value).startswith(f"data.path: {path} is saved as {what}, not UTF-8"), info.value
    assert f"iconv -f {name} -t UTF-8 {path} > {tmp_path / f'rows.utf8.{suffix}'}" in info.value.fix, info.value.fix
    # the encoding named is the file's: decoded by that name (Python knows iconv's), the rows load
    path.write_text(path.read_bytes().decode(name), encoding="utf-8")
    loaded = load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    assert [row["prompt"] for row in loaded] == PROMPTS


@pytest.mark.skipif(shutil.which("iconv") is None, reason="needs the iconv command")
@pytest.mark.parametrize("encoding", ["LE with BOM", "BE"])
def test_the_command_the_error_gives_converts_the_file(tmp_path, encoding):
    path = tmp_path / "my rows.jsonl"  # a space: the command quotes the paths
    path.write_bytes(ENCODINGS[encoding][0](TEXT["jsonl"]))
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    command = info.value.fix.split(": ", 1)[1].split(" (or, ", 1)[0]
    argv, target = command.split(" > ")
    with open(shlex.split(target)[0], "wb") as out:
        subprocess.run(shlex.split(argv), stdout=out, check=True)
    assert [row["prompt"] for row in load_dataset(path=str(tmp_path / "my rows.utf8.jsonl"))] == PROMPTS


#: UTF-16 files without a byte order mark whose first character is not ASCII: a header of French
#: or CJK names. They were taken for Latin-1 ("line 1, byte 0xe9 ... is not UTF-8 text", with an
#: iconv -f latin1 fix that writes mojibake), or for UTF-8 with bad bytes.
NON_ASCII_FIRST = {
    "french header": ("énoncé,réponse\nQuelle est la capitale ?,Paris\nCombien font 2 + 2 ?,4\n", "énoncé"),
    "cjk header": ("問題,答え\n" + "".join(f"{'日本語の質問' * 100}{i},{i}\n" for i in range(8)), "問題"),
}


@pytest.mark.parametrize("endian", ["LE", "BE"])
@pytest.mark.parametrize("case", list(NON_ASCII_FIRST))
def test_a_utf16_file_without_a_mark_whose_first_character_is_not_ascii_is_named_utf16(tmp_path, case, endian):
    text, column = NON_ASCII_FIRST[case]
    path = tmp_path / "rows.csv"
    path.write_bytes(text.encode(f"utf-16-{endian.lower()}"))
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    assert str(info.value).startswith(f"data.path: {path} is saved as UTF-16 ({'little' if endian == 'LE' else 'big'}"
                                      "-endian, without a byte order mark), not UTF-8"), info.value
    assert f"iconv -f UTF-16{endian} -t UTF-8" in info.value.fix, info.value.fix
    path.write_text(path.read_bytes().decode(f"UTF-16{endian}"), encoding="utf-8")
    loaded = load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"), prompt_column=column)
    assert loaded[0][column] == text.splitlines()[1].split(",")[0]


def test_utf8_text_with_a_nul_byte_is_not_taken_for_utf16(tmp_path):
    """A NUL or two in UTF-8 text (ASCII or not) is a damaged file, refused as that (``nul_bytes``)."""
    for text in ("prompt\nWhat is\x00 2+2?\n", "prompt\nQu'est-ce que \x00é ?\n", "p\x00r\nx\n"):
        path = tmp_path / "rows.csv"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
        assert "holds a NUL byte" in str(info.value), info.value


class _Opens:
    """Counts the opens of one path, from Python's own ``open`` audit event (no stand-in for open)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.count = 0

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open" and self.path is not None and str(args[0]) == self.path:
            self.count += 1


_OPENS = _Opens()
sys.addaudithook(_OPENS)


@pytest.mark.parametrize("suffix", ["jsonl", "json"])
def test_a_json_file_is_opened_once_to_tell_its_encoding_and_read_its_rows(tmp_path, suffix):
    path = tmp_path / f"rows.{suffix}"
    path.write_text(TEXT[suffix], encoding="utf-8")
    _OPENS.path, _OPENS.count = str(path), 0
    try:
        rows = read_json_rows(path)
    finally:
        _OPENS.path = None
    assert [row["prompt"] for row in rows] == PROMPTS
    assert _OPENS.count == 1, f"{path} opened {_OPENS.count} times"
