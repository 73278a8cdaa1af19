"""A config written as JSON or YAML by mistake gets TOML's parse error and one hint that polyrl
configs are TOML (it was the parse error alone); a TOML file with a typo keeps TOML's error as is.
Through the real ``polyrl`` entry point."""

from __future__ import annotations

import json

import pytest

from polyrl.cli import main

HINT = "Fix: this looks like {kind}; polyrl configs are TOML: write each table as a [model] line"


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: config: ") and "is not valid TOML" in line, line
    return line


@pytest.mark.parametrize(("text", "kind"), [
    (json.dumps({"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}}, indent=2), "JSON"),
    ('{"model": {"path": "tiny-llama",}}', "JSON"),  # JSON with its own typo: still no TOML
    ('\n[\n  {"model": "tiny-llama"}\n]\n', "JSON"),
    ("model:\n  path: tiny-llama\ndata:\n  task: arithmetic\n", "YAML"),
    ("# a run\n---\nmodel:\n  path: tiny-llama\nrewards:\n  - name: numeric_match\n", "YAML"),
    ("model: tiny-llama\n", "YAML"),
])
def test_a_json_or_yaml_config_says_polyrl_configs_are_toml(tmp_path, capsys, text, kind):
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert main(["train", str(path)]) == 2
    assert HINT.format(kind=kind) in _error_line(capsys)


@pytest.mark.parametrize(("text", "fix"), [
    # a YAML-ish slip in a TOML file
    ('[model]\npath: "tiny-llama"\n', """Fix: correct line 2, column 5 of run.toml ('path: "tiny-llama"')"""),
    # the table header written YAML's way, the rest TOML
    ('model:\n[data]\ntask = "arithmetic"\n', "Fix: correct line 1, column 6 of run.toml ('model:')"),
    ('[model\npath = "tiny-llama"\n', "Fix: correct line 1, column 7 of run.toml ('[model')"),  # an unclosed header
    ('["model"]\npath = "tiny-llama"\n[data\n', "Fix: correct line 3, column 6 of run.toml ('[data')"),
    ('lr = 1e-5\nbeta: 0.04\n', "Fix: correct line 2, column 5 of run.toml ('beta: 0.04')"),
    ('lr = 1e-5\r\nx = "a\rb"\nbeta: 0.04\n', "Fix: correct line 2, column 7 of run.toml"),  # a bare CR is no line end
    ('[model]\npath = ["tiny-llama",\n', "Fix: close what is still open at the end of run.toml"),
])
def test_a_toml_typo_gets_a_fix_naming_tomls_line_and_column_not_a_json_or_yaml_hint(tmp_path, capsys, text, fix):
    """The one config error without a ``Fix:`` had TOML's parse error alone: the fix names the line
    and column tomllib reports (and quotes that line), or what is left open at the end."""
    path = tmp_path / "run.toml"
    path.write_text(text, newline="")
    assert main(["train", str(path)]) == 2
    line = _error_line(capsys)
    assert fix in line and "looks like" not in line, line


@pytest.mark.parametrize(("text", "line_text"), [
    ('[train]\nsteps = 3\nsteps = 4\n', "line 3 of run.toml ('steps = 4')"),  # a key set twice
    ('[train]\nsteps = 3\n[model]\npath = "x"\n[train]\nseed = 1\n', "line 5 of run.toml ('[train]')"),  # a table copied
])
def test_a_key_or_table_given_twice_is_named_as_given_twice_not_as_a_syntax_typo(tmp_path, capsys, text, line_text):
    """Each line is well formed: "TOML writes settings as key = value lines" sent the user to its syntax."""
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert main(["train", str(path)]) == 2
    line = _error_line(capsys)
    assert f"Fix: {line_text} sets again a key or table set above it" in line and "remove one of the two" in line, line
