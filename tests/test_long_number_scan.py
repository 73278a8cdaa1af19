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


@pytest.mark.parametrize(("text", "found"), [
    (f"[{LONG}]\nx = 1\n[train]\nsteps = {LONG}\n", (4, 5000)),  # a table header's key is text
    (f"[[ {LONG} ]]\nx = {LONG[:4400]}\n", (2, 4400)),
    (f"{LONG} . a = 1\nb = {LONG}", (2, 5000)),  # so is a dotted key's, spaces around the dot
    (f"a = {{ {LONG} . b = 1, c = [1, {{{LONG} = 2}}] }}\nd = {LONG}", (2, 5000)),  # and an inline table's
    (f"m = [\n  [1],\n  [{LONG}],\n]\n", (3, 5000)),  # a line inside a multi-line array is no header
    (f"x = {{}}\ny = [{{a = 1}}, {LONG}]", (2, 5000)),
    (f"[{LONG}]\n{LONG} = 1\n", None),
])
def test_a_key_made_of_digits_is_not_a_number(text, found):
    assert too_long_number(text, "toml") == found


def test_a_toml_config_with_a_digit_table_header_points_at_the_number(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(f'[{LONG}]\nnote = "x"\n[train]\nsteps = {LONG}\n')
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path)
    assert info.value.field == "config" and "line 4 holds a number of 5000 digits" in str(info.value)


@pytest.mark.parametrize("hostile", ["[" * 200_000, "x = " + "[" * 200_000, "x = {" + "a=1," * 50_000,
                                     ",\n" * 100_000])
def test_the_toml_scan_is_linear_in_structure(hostile):
    """A mark (bracket, comma, line end) costs a few steps: a stack push or pop, never a rescan."""
    measured(functools.partial(too_long_number, hostile, "toml"), budget=3 * len(hostile))
