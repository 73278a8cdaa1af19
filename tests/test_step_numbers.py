"""A ``true`` where a log line's step number belongs is no step 1 for any reader
(``metrics_file.is_step_number``): JSON's ``true`` is Python's ``True == 1``."""

from __future__ import annotations

import json

from polyrl import evaluation, metrics_file
from polyrl.tracking import completions


def test_is_step_number_refuses_bools_and_negatives():
    assert metrics_file.is_step_number(0) and metrics_file.is_step_number(3)
    for value in (True, False, -1, 1.0, "1", None):
        assert not metrics_file.is_step_number(value)
    assert not metrics_file.has_step({"step": True})


def test_completions_rewind_drops_a_bool_step(tmp_path):
    path = tmp_path / "completions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [{"step": 1, "prompt": "a"}, {"step": True, "prompt": "b"}]))
    assert completions.rewind(path, 2) == 1
    assert [json.loads(line)["prompt"] for line in path.read_text().splitlines()] == ["a"]


def test_eval_record_with_a_bool_after_steps_is_not_kept():
    assert evaluation.keep_record({"after_steps": 1, "phase": "during"}, 1)
    assert not evaluation.keep_record({"after_steps": True, "phase": "during"}, 1)
