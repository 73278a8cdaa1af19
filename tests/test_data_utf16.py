"""Data files saved as UTF-16 (Windows' "Unicode"): named as such, with the command that converts them.

A UTF-16 JSON-lines file was refused as "not valid UTF-8 (byte 0 of the line)", or, without a byte
order mark, as line 1 not being valid JSON; a UTF-16 CSV as a column that would not cast.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from polyrl.data import load_dataset
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
