"""``data.options`` is read by the data source (a built-in task's options; a file's or rows'
``count``, ``eval_count`` and ``seed``), and the config is refused when one of its keys would be
dropped or replaced without a word: a key no source reads (named with the setting meant, where there
is one), or a hold-out (``eval_count``) that eval.count, another eval source or no evaluation at all
would overrule. Each is one error naming the field(s), as the config is read, before any row is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyrl
from polyrl.config import RunConfig
from polyrl.data import load_train_and_eval
from polyrl.errors import ConfigError

pytestmark = pytest.mark.faults

CORE = Path(polyrl.__file__).resolve().parents[1]  # the polyrl this test imported, for the CLI too
BASE = {"model": {"path": "tiny-llama"}, "rewards": [{"name": "numeric_match"}]}


def config(data: dict, **eval_settings) -> RunConfig:
    return RunConfig.from_dict({**BASE, "data": data, "eval": eval_settings})


@pytest.fixture
def rows(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"prompt": "q{i}", "answer": "{i}"}}\n' for i in range(20)))
    return str(path)


@pytest.mark.parametrize(("data", "eval_settings", "names"), [
    ({"options": {"eval_count": 5}}, {"count": 8}, "eval.count = 8 sizes the held-out rows too"),
    ({"options": {"eval_count": 5}}, {}, "eval.count is 0 (no evaluation)"),
    ({"options": {"eval_count": 5}, "eval_path": "held.jsonl"}, {"count": 3}, "the evaluation reads data.eval_path"),
])
def test_a_hold_out_another_eval_setting_overrules_is_refused_naming_both(rows, data, eval_settings, names):
    """eval_count = 5 beside eval.count = 8 was replaced by 8; beside eval.count = 0 or an eval_path
    it held 5 rows out of training that nothing evaluated. Now one error naming both settings."""
    with pytest.raises(ConfigError) as info:
        config({"path": rows, **data}, **eval_settings)
    assert info.value.field == "data.options.eval_count", str(info.value)
    assert "holds 5 rows out of training" in info.value.message and names in info.value.message, str(info.value)
    assert "remove data.options.eval_count" in info.value.fix


def test_a_hold_out_equal_to_eval_count_is_read_as_one(rows):
    run = config({"path": rows, "options": {"eval_count": 6, "seed": 2}}, count=6)
    train, held = load_train_and_eval(run.data, run.eval.count)
    assert (len(train), len(held)) == (14, 6)


def test_options_count_caps_the_training_rows_not_the_eval_count(rows):
    """options.count = 5 cut eval.count = 8 to 5 held-out prompts without a word; a task's eval
    split always took eval.count."""
    run = config({"path": rows, "options": {"count": 5}}, count=8)
    train, held = load_train_and_eval(run.data, run.eval.count)
    assert (len(train), len(held)) == (5, 8)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}


@pytest.mark.parametrize(("data", "field", "fix"), [
    ({"task": "arithmetic", "options": {"eval_count": 10}}, "data.options.eval_count", "eval.count"),
    ({"task": "arithmetic", "options": {"prompt_column": "q"}}, "data.options.prompt_column",
     "prompt_column is a key of [data] itself"),
    ({"task": "arithmetic", "options": {"count": "3"}}, "data.options.count", "count = 1000"),
    ({"task": "arithmetic", "options": {"cuont": 3}}, "data.options.cuont", "did you mean 'count'?"),
    ({"task": "arithmetc"}, "data.task", "arithmetic"),
    ({"path": "rows.jsonl", "options": {"shuffle": False}}, "data.options.shuffle", "shuffle is a key of [data] itself"),
    ({"path": "rows.jsonl", "options": {"test_size": 4}}, "data.options.test_size", "eval.count"),
    ({"path": "rows.jsonl", "options": {"max_steps": 4}}, "data.options.max_steps", "train.steps"),
    ({"path": "rows.jsonl", "options": {"digits": 2}}, "data.options.digits", "count, eval_count, seed"),
])
def test_an_option_the_source_does_not_take_is_refused_as_the_config_is_read(data, field, fix):
    """A task's keys and values were checked only when the trainer built its rows (after
    ``polyrl launch --dry-run`` passed them), and the fix listed the task's options: not eval.count
    for ``eval_count``, nor data.prompt_column for ``prompt_column`` written inside the options."""
    with pytest.raises(ConfigError) as info:
        config(data, count=10 if "eval_count" in data.get("options", {}) else 0)
    assert info.value.field == field and fix in info.value.fix, str(info.value)


def test_the_cli_says_it_in_one_error_line(tmp_path, rows):
    path = tmp_path / "run.toml"
    path.write_text(f'[model]\npath = "tiny-llama"\n[data]\npath = "{rows}"\noptions = {{eval_count = 50}}\n'
                    '[[rewards]]\nname = "numeric_match"\n[eval]\ncount = 10\n'
                    f'[train]\nsteps = 1\noutput_dir = "{tmp_path / "run"}"\n')  # where a run would write
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CORE), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True, text=True,
                            timeout=120, env=env, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: data.options.eval_count: holds 50 rows") and "eval.count = 10" in lines[0]
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
