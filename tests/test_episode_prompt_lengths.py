"""The startup prompt-length check of episodes on tools alone: the tool instructions an episode adds
to its first prompt count (they used not to, so a prompt they pushed past model.max_length ended
its episode as an environment error at the first turn, silently shrinking the batch)."""

from __future__ import annotations

import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.trainer import Trainer

SHORT = "What is 2 + 3?"
LONG = SHORT + " Think step by step." * 10  # ~140 tokens more than SHORT on the tiny model


@pytest.fixture(autouse=True)
def _torch():
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")


def _config(model: str, out, max_length: int, rows, environment: str | None = None, **data) -> RunConfig:
    # the tiny model's template ignores tools=: the calculator's instructions (~540 tokens) go into
    # a system message, so SHORT is ~560 tokens as an episode's first prompt, LONG ~700
    return RunConfig.from_dict({
        "model": {"path": model, "max_length": max_length},
        "generation": {"group_size": 2, "max_new_tokens": 4, "stop": ["a", "e", " "]},
        "data": {"rows": rows, **data},
        "environment": {"tools": ["calculator"], "max_turns": 2, "max_episode_tokens": 16,
                        **({"name": environment} if environment else {})},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(out)},
    })


def test_a_prompt_the_tool_instructions_push_past_max_length_is_one_error_at_startup(tiny_model_dir, tmp_path):
    rows = [{"prompt": SHORT, "answer": "5"}, {"prompt": [{"role": "user", "content": LONG}], "answer": "5"}]
    with pytest.raises(ConfigError) as caught:
        Trainer(_config(tiny_model_dir, tmp_path / "run", 600, rows))
    text = str(caught.value)
    assert caught.value.field == "model.max_length" and "\n" not in text
    assert text.startswith("model.max_length: row 1 of rows: the prompt has") and "tool instructions included" in text, text


def test_drop_overlong_leaves_out_what_the_tools_push_past_max_length(tiny_model_dir, tmp_path):
    rows = [{"prompt": SHORT, "answer": "5"}] * 3 + [{"prompt": LONG, "answer": "5"}]
    trainer = Trainer(_config(tiny_model_dir, tmp_path / "run", 600, rows, drop_overlong=True))
    assert [r["prompt"] for r in trainer.dataset.rows] == [SHORT] * 3
    history = trainer.run(progress=False)["history"]
    assert history[0]["episode/env_error_share"] == 0.0  # no episode ended on an overlong first prompt


def test_an_environment_writes_its_first_messages_so_its_prompts_are_not_counted(tiny_model_dir, tmp_path):
    """guess_number's reset writes its own first message (the row's prompt is not sent): only running
    it on every row would tell, so the rows stay and the episode runner judges each first prompt."""
    rows = [{"prompt": LONG, "answer": "5"}] * 2
    assert len(Trainer(_config(tiny_model_dir, tmp_path / "run", 600, rows, "guess_number")).dataset) == 2
