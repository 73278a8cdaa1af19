"""One conversation passed where a list of prompts is expected (``polyrl.one_conversation``):
``prompts=[{"role": "user", "content": ...}]`` to ``polyrl.api.run`` or ``GRPOTrainer``. Each
message was read as a row, and the error told the user to rename a ``prompt`` column."""

from __future__ import annotations

import pytest

from polyrl import api
from polyrl.errors import ConfigError

pytest.importorskip("polyrl_torch")

CHAT = [{"role": "system", "content": "Answer with the number only."}, {"role": "user", "content": "What is 2 + 3?"}]


def _short(completions, **_: object) -> list[float]:
    return [0.0] * len(completions)


def _run(model: str, tmp_path, prompts: object, **kwargs: object) -> None:
    api.run(api.grpo, policy=api.Agent(model, backend="torch"), prompts=prompts, rewards=[_short],
            generation_config=api.GenerationConfig(max_new_tokens=2, group_size=2),
            grpo_config=api.GRPOConfig(steps=1, prompts_per_step=1, output_dir=str(tmp_path / "run")), **kwargs)


def test_api_run_gives_the_wrapped_call_for_one_conversation(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, CHAT)
    assert caught.value.field == "prompts", caught.value
    assert caught.value.message.startswith("prompts is one conversation (2 messages"), caught.value
    assert 'prompts=[[{"role": "system", "content": ...}, {"role": "user", "content": ...}]]' in caught.value.fix
    assert "rename_column" not in caught.value.fix and "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_api_run_names_eval_prompts_for_one_conversation_given_there(tiny_model_dir, tmp_path):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}]
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, rows, eval_prompts=[{"role": "user", "content": "What is 2 + 3?"}])
    assert caught.value.field == "eval_prompts", caught.value
    assert 'eval_prompts=[[{"role": "user", "content": ...}]]' in caught.value.fix, caught.value


def test_the_wrapped_conversation_and_rows_of_messages_are_read_as_prompts():
    assert api.prompt_rows([CHAT]) == [{"prompt": CHAT}]
    # a row whose columns happen to be named role and content, beside others, is a row
    rows = [{"role": "tutor", "content": "2 + 3", "answer": "5"}]
    assert api.prompt_rows(rows) == rows


def test_grpo_trainer_refuses_one_conversation_as_train_dataset_when_built(tiny_model_dir, tmp_path):
    pytest.importorskip("trl")
    from polyrl.trl import GRPOTrainer
    from trl_util import grpo_args, short

    with pytest.raises(ConfigError) as caught:  # at construction, before train()
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=CHAT)
    assert caught.value.field == "train_dataset", caught.value
    assert 'train_dataset=[[{"role": "system", "content": ...}, {"role": "user", "content": ...}]]' in caught.value.fix
    assert 'train_dataset=[{"prompt": [{"role": "system"' in caught.value.fix, caught.value
    with pytest.raises(ConfigError) as caught:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path),
                    train_dataset=[{"prompt": CHAT}], eval_dataset=CHAT[1:])
    assert caught.value.field == "eval_dataset", caught.value
    assert 'eval_dataset=[[{"role": "user", "content": ...}]]' in caught.value.fix, caught.value


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_data_file_of_messages_is_told_to_hold_one_conversation_per_row(tmp_path, suffix):
    """A file with one chat message per row: the fix was to name another column the prompt column,
    which would train on every message's text, the assistant's answers too, as prompts."""
    from polyrl.data import load_dataset

    path = tmp_path / f"messages{suffix}"
    if suffix == ".jsonl":
        path.write_text('{"role": "user", "content": "What is 2 + 3?"}\n{"role": "assistant", "content": "5"}\n')
    else:
        path.write_text("role,content\nuser,What is 2 + 3?\nassistant,5\n")
    with pytest.raises(ConfigError) as caught:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert "has no column 'prompt'" in caught.value.message and caught.value.field == "data.prompt_column"
    assert caught.value.fix.startswith("write one conversation per row, its messages as a list in column 'prompt'")
    assert '{"prompt": [{"role": "user", "content": "..."}], "answer": "..."}' in caught.value.fix, caught.value


def test_api_run_tells_a_dataset_of_messages_in_python_words(tiny_model_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, datasets.Dataset.from_list(CHAT))
    assert caught.value.field == "prompts", caught.value
    assert caught.value.fix.startswith('pass one conversation per prompt, e.g. prompts=[[{"role": "user"'), caught.value
    assert "rename_column" not in caught.value.fix
