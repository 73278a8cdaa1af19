"""A message in a role the chat template does not render is an error, never a silent omission.

Qwen2.5's template writes system, user, assistant and tool messages and nothing of a ``developer``
or ``ipython`` one: a dataset prompt or an environment's first messages in such a role reached the
model without that text, silently. Here on SmolLM2's real tokenizer, dressed in a Qwen2.5-style
template (``test_template_bounds.QWEN_STYLE``) and in its own template (which renders every role),
and in a Mistral-style one, whose system message is shown only in some conversations.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_chat import Scripted, dressed, encoder
from test_template_bounds import MISTRAL_STYLE, QWEN_STYLE

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.cli import main
from polyrl.data import check_prompt_lengths, from_rows
from polyrl.errors import ConfigError, EnvironmentFailed
from polyrl.testing.chat_templates import with_chat_template
from polyrl.types import SamplingParams

DEVELOPER_FIRST = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]
SYSTEM_FIRST = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def qwen_style(smollm2_tokenizer):
    return dressed(smollm2_tokenizer, QWEN_STYLE, ["<|im_start|>", "<|im_end|>"])


def renderer(tok):
    encode = encoder(tok)

    def render(prompt):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return encode(messages, None, True)
    return render


def test_the_roles_a_template_renders_are_asked_of_the_template(qwen_style, smollm2_tokenizer):
    from polyrl.template_roles import TemplateRoles

    roles = TemplateRoles()
    render = renderer(qwen_style)
    assert roles.dropped(SYSTEM_FIRST, render) is None
    assert roles.dropped([{"role": "user", "content": "Hi"}, {"role": "ipython", "content": "42"}], render) == 1
    assert roles.dropped(DEVELOPER_FIRST, render) == 0
    assert roles.shown_in_place(DEVELOPER_FIRST, 0, render) == ["system", "user", "assistant", "tool"]
    own = TemplateRoles()  # SmolLM2's own template writes every role it is given
    assert own.dropped(DEVELOPER_FIRST, renderer(smollm2_tokenizer)) is None


def test_a_dataset_prompt_in_a_role_the_template_drops_is_an_error_naming_its_row(qwen_style):
    """Once: row 1's developer message was rendered as nothing, and the model trained on the prompt
    without its instructions; now one error names the row, the message, its role and the roles
    the template does render there."""
    render = renderer(qwen_style)
    count = lambda prompt: len(render(prompt))  # noqa: E731
    ds = from_rows([{"prompt": "What is 2+2?"}, {"prompt": DEVELOPER_FIRST}], name="mine")
    with pytest.raises(ConfigError) as info:
        check_prompt_lengths(ds, count, 1024, render=render)
    text = str(info.value)
    assert info.value.field == "data"
    assert ("row 1 of mine: message 0 of column 'prompt' has role 'developer', which the model's chat template "
            "does not render (in that place it renders 'system', 'user', 'assistant', 'tool')") in text, text
    assert "'system'" in info.value.fix
    good = from_rows([{"prompt": "What is 2+2?"}, {"prompt": SYSTEM_FIRST}], name="mine")
    assert check_prompt_lengths(good, count, 1024, render=render) == (good, 0)


class Instructs:
    """An environment whose first messages open with ``role``'s instructions."""

    role = "developer"

    def reset(self, row):
        return [{"role": self.role, "content": "Answer in French."}, {"role": "user", "content": "Say hi."}]

    def step(self, message):
        return Observation(messages=[], reward=1.0, done=True)


class InstructsAsSystem(Instructs):
    role = "system"


@pytest.mark.parametrize("make", [Instructs, InstructsAsSystem])
def test_an_environments_first_message_in_a_role_the_template_drops_ends_its_episode(qwen_style, make):
    end = qwen_style.convert_tokens_to_ids("<|im_end|>")
    model = Scripted(qwen_style, lambda text, j: "Bonjour", end)
    run = EpisodeRunner(model.generate, encoder(qwen_style), EpisodeLimits(2, 64, max_length=512),
                        make_environment=make, parse=parse_tool_calls, environment_name="instructs")
    out = run.run([{"prompt": "x"}], SamplingParams(max_new_tokens=16, n=2))
    if make is InstructsAsSystem:  # a role the template renders: the episode runs, the model read it
        assert all("env_error" not in c.info and c.info["turns"] == 1 for c in out)
        assert all("Answer in French." in qwen_style.decode(c.prompt_ids) for c in out)
        return
    assert all(c.info["turns"] == 0 and not np.any(c.mask) for c in out)
    assert all(c.info["env_error"].startswith(
        "Instructs.reset message 0 has role 'developer', which the model's chat template does not render (in that "
        "place it renders 'system', 'user', 'assistant', 'tool')") for c in out), out[0].info["env_error"]


SYSTEM_THEN_TOOL = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Add 2 and 3."},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
                    {"role": "tool", "content": "5"}]


def test_a_message_shown_only_in_some_conversations_is_judged_in_each(smollm2_tokenizer, qwen_style):
    """Mistral's template writes the system message into the last user turn: a conversation ending
    in a tool result loses it. Once the verdict was kept per role and place (first or not), so
    row 0's ``[system, user]`` vouched for row 1's system message, which the model never read."""
    render = renderer(dressed(smollm2_tokenizer, MISTRAL_STYLE, []))
    count = lambda prompt: len(render(prompt))  # noqa: E731
    ds = from_rows([{"prompt": SYSTEM_FIRST}, {"prompt": SYSTEM_THEN_TOOL}], name="mine")
    with pytest.raises(ConfigError) as info:
        check_prompt_lengths(ds, count, 1024, render=render)
    assert "row 1 of mine: message 0 of column 'prompt' has role 'system', which the model's chat template does not " \
           "render" in str(info.value), str(info.value)
    assert "move it where the template shows it" in info.value.fix
    # the templates that show these messages wherever they are: no false alarm in either shape
    shows = renderer(qwen_style)
    both = from_rows([{"prompt": SYSTEM_FIRST}, {"prompt": SYSTEM_THEN_TOOL}], name="mine")
    assert check_prompt_lengths(both, lambda prompt: len(shows(prompt)), 1024, render=shows) == (both, 0)
    # SmolLM2's shows the system message too, but writes the assistant's content ("") alone: its call
    # is what the model never reads (this once passed unsaid, as TRL renders it)
    own = renderer(smollm2_tokenizer)
    with pytest.raises(ConfigError, match="row 1 of mine: message 2 of column 'prompt' is an assistant tool call"):
        check_prompt_lengths(both, lambda prompt: len(own(prompt)), 1024, render=own)


FIRST_SYSTEM_WITHOUT_TOOLS = QWEN_STYLE.replace(
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n", "")


class InstructsWithTools(InstructsAsSystem):
    """Its first messages open with a system message, and it offers a tool."""

    def __init__(self) -> None:
        def add(a: int, b: int) -> int:
            """Add two numbers.

            Args:
                a: the first
                b: the second
            """
            return a + b
        self.tools = [add]


def test_a_verdict_made_without_tools_is_not_reused_with_them(smollm2_tokenizer):
    """A template that writes its own tool instructions in place of the first system message shows
    that message only without tools. Once, an environment's first episodes without tools vouched
    for the later ones with them, whose system message the model never read."""
    assert FIRST_SYSTEM_WITHOUT_TOOLS != QWEN_STYLE
    tok = dressed(smollm2_tokenizer, FIRST_SYSTEM_WITHOUT_TOOLS, ["<|im_start|>", "<|im_end|>"])
    model = Scripted(tok, lambda text, j: "Bonjour", tok.convert_tokens_to_ids("<|im_end|>"))
    kinds = iter([InstructsAsSystem, InstructsAsSystem, InstructsWithTools, InstructsWithTools])
    run = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(2, 64, max_length=512),
                        make_environment=lambda: next(kinds)(), parse=parse_tool_calls, environment_name="instructs")
    first = run.run([{"prompt": "x"}], SamplingParams(max_new_tokens=16, n=2))
    assert all("env_error" not in c.info and "Answer in French." in tok.decode(c.prompt_ids) for c in first)
    second = run.run([{"prompt": "x"}], SamplingParams(max_new_tokens=16, n=2))
    assert all(c.info.get("env_error", "").startswith(
        "InstructsWithTools.reset message 0 has role 'system', which the model's chat template does not render")
        for c in second), [c.info for c in second]
    assert run.raised is not None


def test_an_environment_writing_a_role_the_template_drops_stops_the_run_at_once(qwen_style):
    """Once: each of its episodes ended as an environment error and the run stopped only after
    ``MAX_FAILED_ROLLOUTS`` rollouts, though ``reset`` writes that role every time. Now the first
    rollout stops it (``raised``), with one error naming the environment, the role and the fix."""
    end = qwen_style.convert_tokens_to_ids("<|im_end|>")
    model = Scripted(qwen_style, lambda text, j: "Bonjour", end)
    run = EpisodeRunner(model.generate, encoder(qwen_style), EpisodeLimits(2, 64, max_length=512),
                        make_environment=Instructs, parse=parse_tool_calls, environment_name="instructs")
    run.run([{"prompt": "x"}], SamplingParams(max_new_tokens=16, n=2))
    assert not model.calls  # no turn of a rollout that is never trained
    stop = run.failure()
    assert isinstance(stop, EnvironmentFailed) and stop is run.raised
    assert str(stop).startswith("environment 'instructs': Instructs.reset message 0 has role 'developer', which "
                                "the model's chat template does not render"), str(stop)
    assert "Fix: give that text a role the template renders in that place" in str(stop)


DRY_RUN = """
[model]
path = "{model}"
device = "cpu"
[data]
path = "{rows}"
[[rewards]]
name = "numeric_match"
"""


def test_the_dry_run_refuses_a_prompt_role_the_template_drops(tiny_model_dir, tmp_path, capsys):
    """Once: ``polyrl launch --dry-run`` passed it, and the run refused it minutes later, once the
    models loaded. The model folder's tokenizer alone answers it: one error line, exit code 2."""
    pytest.importorskip("torch")  # polyrl launch needs torchrun
    folder = with_chat_template(tiny_model_dir, tmp_path / "hub", QWEN_STYLE)
    rows = tmp_path / "rows.jsonl"
    path = tmp_path / "run.toml"
    path.write_text(DRY_RUN.format(model=folder, rows=rows))
    args = ["launch", str(path), "--dry-run", "--nproc-per-node", "1", "--output-dir", str(tmp_path / "out")]
    good = {"prompt": SYSTEM_FIRST, "answer": "1"}
    rows.write_text("\n".join(json.dumps(row) for row in (good, {"prompt": DEVELOPER_FIRST, "answer": "2"})))
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "torch.distributed.run" not in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data: {rows} line 2 (row 1): message 0 of column 'prompt' has role "
                                               "'developer'"), err
    rows.write_text(json.dumps(good))
    assert main(args) == 0, capsys.readouterr().err
    assert "torch.distributed.run" in capsys.readouterr().out


class CallsFirst(Instructs):
    """An environment whose first messages hold an assistant tool call written as ``content: ""``."""

    def reset(self, row):
        return SYSTEM_THEN_TOOL[1:]


def test_an_environments_first_tool_call_the_template_drops_ends_its_episode(smollm2_tokenizer):
    """SmolLM2's template writes an assistant message's content alone: the reset's call reached the
    model as an empty turn, unsaid (only the roles were probed). Now it ends the episode and stops
    the run, as a role the template drops does."""
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = Scripted(smollm2_tokenizer, lambda text, j: "5", end)
    run = EpisodeRunner(model.generate, encoder(smollm2_tokenizer), EpisodeLimits(2, 64, max_length=512),
                        make_environment=CallsFirst, parse=parse_tool_calls, environment_name="calls")
    out = run.run([{"prompt": "x"}], SamplingParams(max_new_tokens=16, n=2))
    assert all(c.info["turns"] == 0 and not np.any(c.mask) for c in out)
    assert all(c.info["env_error"].startswith(
        "CallsFirst.reset message 1 is an assistant tool call that the model's chat template does not render")
        for c in out), out[0].info["env_error"]
    assert "write the call as text" in out[0].info["env_error"]
