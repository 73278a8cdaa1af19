"""Blank text where a setting needs a value is refused as the config loads, naming the field:
``model.path = " "`` was looked up as a model name once the run started, ``logging.project = ""``
went to trackio's ``default`` store without a word (MLflow failed after the model loaded, blaming
``report_to``), ``environment.name = ""`` was refused only at startup, ``model.reference_path = ""``
read as unset."""

from __future__ import annotations

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import ConfigError

MINIMAL = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}


@pytest.mark.parametrize(("section", "values", "field", "says"), [
    ("model", {"path": " "}, "model.path", "is blank (' '): no model given"),
    ("model", {"path": "tiny-llama", "reference_path": ""}, "model.reference_path", "is empty"),
    ("logging", {"project": ""}, "logging.project", "is empty"),
    ("logging", {"run_name": "  "}, "logging.run_name", "is empty"),
    ("environment", {"name": ""}, "environment.name", "is empty"),
])
def test_a_blank_setting_is_refused_at_load_naming_it(section, values, field, says):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({**MINIMAL, section: values})
    assert info.value.field == field and says in str(info.value) and "Fix: " in str(info.value)


def test_the_cli_says_it_in_one_error_line(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\noutput_dir = "{tmp_path / "out"}"\n[logging]\nproject = ""\nreport_to = ["trackio"]\n')
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err.startswith("error: logging.project: is empty ('')")


def test_names_with_text_still_load():
    config = RunConfig.from_dict({**MINIMAL, "logging": {"project": "p", "run_name": "r"}})
    assert (config.logging.project, config.logging.run_name) == ("p", "r")
