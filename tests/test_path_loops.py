"""A path that is a folder or a symlink loop is named as one, not as "not found" (``polyrl.path_loops``)."""

from __future__ import annotations

import pytest

from polyrl.data import load_dataset, load_jsonl
from polyrl.errors import ConfigError
from polyrl.rewards.functions import load_function_reward


@pytest.fixture()
def loop(tmp_path):
    """``a.jsonl`` -> ``b.jsonl`` -> ``a.jsonl``: ls lists both, neither leads to a file."""
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    return tmp_path / "a.jsonl"


@pytest.mark.parametrize("below", [False, True], ids=["the-file", "a-folder-on-its-way"])
def test_a_data_path_in_a_symlink_loop_is_named_as_one(loop, below):
    given = loop / "train.jsonl" if below else loop
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(given))
    assert info.value.field == "data.path"
    assert "symlink loop" in str(info.value) and "not found" not in str(info.value)
    assert "repoint the looping symlink" in info.value.fix


def test_a_jsonl_path_in_a_symlink_loop_or_naming_a_folder_is_named_so(loop, tmp_path):
    with pytest.raises(ConfigError, match="symlink loop"):
        load_jsonl(loop)
    with pytest.raises(ConfigError, match="is a folder"):
        load_jsonl(tmp_path)


def test_a_reward_function_path_naming_a_folder_says_it_is_a_folder_and_what_to_name(tmp_path):
    (tmp_path / "my_rewards").mkdir()
    with pytest.raises(ConfigError) as info:
        load_function_reward(f"{tmp_path}/my_rewards:score")
    assert info.value.field == "rewards.function"
    assert "is a folder, not a Python file" in str(info.value) and "not found" not in str(info.value)
    assert f'"{tmp_path}/my_rewards/rewards.py:score"' in info.value.fix and "package.module:function" in info.value.fix


def test_a_reward_function_file_in_a_symlink_loop_is_named_as_one(tmp_path):
    (tmp_path / "r.py").symlink_to(tmp_path / "r.py")
    with pytest.raises(ConfigError) as info:
        load_function_reward(f"{tmp_path}/r.py:score")
    assert "symlink loop" in str(info.value) and "repoint the looping symlink" in info.value.fix


def test_a_missing_reward_function_file_is_still_not_found(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_function_reward(f"{tmp_path}/absent.py:score")
