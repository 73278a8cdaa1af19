"""The row a reward gets is the dataset's row, whatever the trainer built to generate from.

``data.system_prompt`` turns a row's prompt column into a system + user chat for generation. A
TRL-style reward declaring that column (``question`` with ``data.prompt_column = "question"``) got
the chat instead of the row's own text; TRL passes every column of the original row unchanged.
"""

from __future__ import annotations

import json

from polyrl.config import RunConfig
from polyrl.data import from_rows

RECORDING_REWARD = """
import json, os

def seen(prompts, completions, question, answer, **kwargs):
    with open(os.environ["POLYRL_TEST_SEEN"], "a") as fh:
        for prompt, q, a in zip(prompts, question, answer):
            fh.write(json.dumps({"prompt": prompt, "question": q, "answer": a, "kwargs": sorted(kwargs)}) + "\\n")
    return [0.5 for _ in completions]
"""

ROWS = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]


def test_a_system_prompt_leaves_the_prompt_column_as_the_row_holds_it_for_rewards():
    from polyrl.stored_rows import as_asked, as_stored

    ds = from_rows(ROWS, "question", system_prompt="Be brief.")
    row = ds[2]
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ROWS[2]["question"]}]
    assert row["question"] == asked  # what the trainer generates from
    assert as_stored(row) == ROWS[2]  # what rewards get: the row's own columns, nothing added
    assert as_asked(row) == {"question": asked, "answer": "3"}  # what an environment's reset gets
    own = [{"question": [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}], "answer": "1"}]
    assert as_stored(from_rows(own, "question", system_prompt="theirs")[0]) == own[0]


def test_a_reward_declaring_the_prompt_column_gets_the_rows_text_in_training_and_eval(tiny_model_dir, tmp_path,
                                                                                         monkeypatch):
    """The real trainer on the tiny model: the model is asked the system + user chat (the reward's
    ``prompts``), the reward's ``question`` is the row's text, in training and in evaluation."""
    from polyrl.trainer import Trainer

    (tmp_path / "seen.py").write_text(RECORDING_REWARD)
    monkeypatch.setenv("POLYRL_TEST_SEEN", str(tmp_path / "seen.jsonl"))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"rows": ROWS[:4], "eval_rows": ROWS[4:], "prompt_column": "question", "system_prompt": "Be brief."},
        "rewards": [{"function": f"{tmp_path / 'seen.py'}:seen"}],
        "eval": {"count": 2, "reward": "run", "before": False},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "out")},
    })
    summary = Trainer(config).run(progress=False)
    assert summary["steps"] == 1
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    answers = {r["question"]: r["answer"] for r in ROWS}
    assert len(seen) == 4 + 2  # 2 prompts x group of 2 in training, then 2 eval rows greedily
    for record in seen:
        assert isinstance(record["question"], str), record  # the row's text, not the chat built from it
        assert answers[record["question"]] == record["answer"]
        assert record["prompt"] == [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": record["question"]}]
        assert not any("polyrl" in k for k in record["kwargs"]), record  # nothing of the trainer's own
    assert {r["question"] for r in seen[4:]} == {r["question"] for r in ROWS[4:]}


RECORDING_ENV = """
import json, os

from polyrl.agents import Observation


class Asks:
    def __init__(self, options):
        pass

    def reset(self, row):
        with open(os.environ["POLYRL_TEST_RESET"], "a") as fh:
            fh.write(json.dumps(row) + "\\n")
        return list(row["question"])

    def step(self, message):
        return Observation(done=True)


def make(options):
    return Asks(options)
"""


def test_an_environments_episodes_reward_gets_the_rows_text_and_its_reset_the_chat(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    """Episodes: the environment's ``reset`` builds the first messages from the row the model is
    asked (the system prompt's chat in the prompt column, nothing of the trainer's own beside the
    row's columns); the reward still gets the row's own ``question``."""
    from polyrl.trainer import Trainer

    (tmp_path / "seen.py").write_text(RECORDING_REWARD)
    (tmp_path / "asks.py").write_text(RECORDING_ENV)
    monkeypatch.setenv("POLYRL_TEST_SEEN", str(tmp_path / "seen.jsonl"))
    monkeypatch.setenv("POLYRL_TEST_RESET", str(tmp_path / "reset.jsonl"))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"rows": ROWS[:4], "prompt_column": "question", "system_prompt": "Be brief."},
        "environment": {"name": f"{tmp_path / 'asks.py'}:make", "max_turns": 1, "max_episode_tokens": 64},
        "rewards": [{"function": f"{tmp_path / 'seen.py'}:seen"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "out")},
    })
    assert Trainer(config).run(progress=False)["steps"] == 1
    resets = [json.loads(line) for line in (tmp_path / "reset.jsonl").read_text().splitlines()]
    assert len(resets) == 4
    for row in resets:
        assert set(row) == {"question", "answer"}, row
        assert row["question"][0] == {"role": "system", "content": "Be brief."}, row
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == 4
    answers = {r["question"]: r["answer"] for r in ROWS}
    for record in seen:
        assert isinstance(record["question"], str), record
        assert answers[record["question"]] == record["answer"]
