"""Where a number past Python's digit limit is: only an unquoted number counts, at its own line.

A long digit run in a string (or a TOML comment) is text: the old scan counted it and pointed the
error at the wrong line. The scan also runs on whatever a hostile file holds, so it must stay linear.
"""

from __future__ import annotations

import functools

import pytest

from polyrl.config import RunConfig
from polyrl.data import load_dataset
from polyrl.errors import ConfigError
from polyrl.long_numbers import too_long_number
from tests.work_meter import measured

LONG = "9" * 5000  # past int()'s 4300-digit limit
TEXT_DIGITS = "7" * 4400  # as long, but inside a string: text, not a number


def test_a_json_file_points_at_the_number_not_at_digits_in_a_string(tmp_path):
    path = tmp_path / "mixed.json"
    path.write_text(f'[{{"prompt": "a",\n "answer": "{TEXT_DIGITS}",\n "id": {LONG}}}]\n')
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    assert "mixed.json:3 holds a number of 5000 digits" in str(info.value)


def test_a_toml_config_points_at_the_number_not_at_digits_in_strings_or_comments(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(f'# {TEXT_DIGITS}\n[model]\npath = "{TEXT_DIGITS}"\nnote = """\n{TEXT_DIGITS}\n"""\n'
                    f"other = '{TEXT_DIGITS}'\n[train]\nsteps = {LONG}\n")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path)
    assert info.value.field == "config" and "line 9 holds a number of 5000 digits" in str(info.value)


@pytest.mark.parametrize(("text", "syntax", "found"), [
    (f'{{"a": "{TEXT_DIGITS}", "b": {LONG}}}', "json", (1, 5000)),
    (f'{{"a": "x\\"{TEXT_DIGITS}"}}', "json", None),  # an escaped quote does not end the string
    (f"x = 1.{LONG}\ny = -{LONG}", "toml", (2, 5000)),  # a float's digits have no limit
    (f"{LONG} = 1\nb = {LONG[:4400]}", "toml", (2, 4400)),  # nor a bare key's
    (f"a = '{TEXT_DIGITS}' # {TEXT_DIGITS}\nb = 9_{LONG}", "toml", (2, 5001)),
])
def test_only_an_unquoted_integer_is_found(text, syntax, found):
    assert too_long_number(text, syntax) == found


@pytest.mark.parametrize("hostile", ['"' + "\\" * 200_000, '"""' + '"' * 200_000, "'''" + "''" * 100_000,
                                     "9" * 200_000 + ".", ("9" * 70 + " ") * 3000, ('"' + "9" * 70) * 3000])
def test_the_scan_is_linear_in_hostile_text(hostile):
    """At most a step or two per character (one per string the text holds), whatever it holds."""
    for syntax in ("json", "toml"):
        measured(functools.partial(too_long_number, hostile, syntax), budget=2 * len(hostile))
