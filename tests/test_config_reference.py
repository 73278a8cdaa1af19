"""The README's config reference is generated from the validating classes and must stay current."""

from __future__ import annotations

from pathlib import Path

from polyrl.cli import main
from polyrl.config_reference import missing_docs, render_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_accepted_key_is_documented():
    assert missing_docs() == []


def test_readme_carries_the_current_reference():
    text = render_markdown()
    assert "| `group_size` | `4` |" in text and "**`[[rewards]]`**" in text
    assert text in README.read_text(), (
        "README.md's config reference is stale: run `python tools/update_readme_reference.py`")


def test_cli_prints_the_reference(capsys):
    assert main(["config-reference"]) == 0
    assert capsys.readouterr().out == render_markdown()
