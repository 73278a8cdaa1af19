"""The llm_judge reward's ``options.cache_path`` with a NUL (or a name past 255 bytes) is one error
naming the option: ``JudgeCache`` raised ``ValueError: embedded null byte`` from ``mkdir``."""

from __future__ import annotations

import pytest

from polyrl.cli import main
from polyrl.errors import ConfigError, RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.judge import JudgeCache

OPTIONS = {"model": "judge", "base_url": "http://127.0.0.1:9", "rubric": "Grade {completion}"}


def test_a_judge_cache_path_with_a_nul_is_one_error_naming_the_option(tmp_path):
    with pytest.raises(RewardError, match=r"options\.cache_path: 'a\\x00b' holds a NUL character"):
        JudgeCache("a\0b")
    for bad in (str(tmp_path / "a\0b.sqlite3"), str(tmp_path / ("x" * 300))):
        with pytest.raises(ConfigError, match=r"llm_judge: options\.cache_path: .*Fix: ") as info:
            RewardComputer(get_plugin_manager(entry_points=False), [("llm_judge", 1.0, {**OPTIONS, "cache_path": bad})])
        assert info.value.field == "rewards[0].options"


def test_the_cli_says_it_in_one_error_line(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "llm_judge"\n'
                      '[rewards.options]\nmodel = "judge"\nbase_url = "http://127.0.0.1:9"\nrubric = "Grade {completion}"\n'
                      'cache_path = "a\\u0000b"\n'
                      f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "options.cache_path" in err and "Traceback" not in err, err
