"""The README's third-party environment (examples/environments/wordle.py) as a user would load it."""

from __future__ import annotations

import re
from pathlib import Path

from polyrl.agents import Observation
from polyrl.agents.loading import resolve_environment
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.prompting import tools_system_prompt
from polyrl.registry import get_registry

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "environments" / "wordle.py"


def test_the_readme_shows_the_example_class_as_it_is():
    readme = (ROOT / "README.md").read_text()
    code = EXAMPLE.read_text()
    shown = re.search(r"```python\n(class Wordle:.*?)```", readme, re.S).group(1)
    assert shown in code
    assert len([line for line in code.splitlines() if line.strip()]) < 40


def test_loaded_by_file_path_it_plays_a_whole_game():
    spec = resolve_environment(f"{EXAMPLE}:create", get_registry())
    env = spec.create({"max_guesses": 3})
    first = env.reset({"answer": "Crane"})
    assert first[0]["role"] == "user"
    wrong = env.step({"role": "assistant", "content": "I guess react."})
    assert isinstance(wrong, Observation) and not wrong.done and wrong.reward == 0.0
    assert wrong.messages[0]["content"].startswith("reAc_ ")  # A in place; r, e, c elsewhere; t absent
    assert env.step({"role": "assistant", "content": "crane"}) == Observation([], reward=1.0, done=True)


def test_the_json_tool_format_reads_the_first_call_object_and_keeps_the_rest():
    turn = parse_tool_calls('{"name": "calculator", "arguments": {"expression": "2 * 3"}} then I answer', "json")
    assert [c.name for c in turn.calls] == ["calculator"] and turn.calls[0].arguments == {"expression": "2 * 3"}
    assert turn.content == "then I answer"
    fenced = parse_tool_calls('```json\n{"name": "calculator", "parameters": {"expression": "1"}}\n```', "json")
    assert fenced.calls and fenced.content == ""
    assert parse_tool_calls("The answer is 6.", "json").calls == []
    prose = parse_tool_calls('Here it is:\n{"name": "calculator", "arguments": {"expression": "7"}}', "json")
    assert prose.calls[0].arguments == {"expression": "7"} and prose.content == "Here it is:"
    assert parse_tool_calls('A set {1, 2} and {"a": 1}', "json").calls == []
    broken = parse_tool_calls('{"name": "calculator", "arguments": {', "json")
    assert not broken.calls and broken.errors and "not valid JSON" in broken.errors[0]
    assert '{"name": "<tool>"' in tools_system_prompt([], "json")
