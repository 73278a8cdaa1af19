"""A message in a role the chat template does not render is an error, never a silent omission.

Qwen2.5's template writes system, user, assistant and tool messages and nothing of a ``developer``
or ``ipython`` one: a dataset prompt or an environment's first messages in such a role reached the
model without that text, silently. Here on SmolLM2's real tokenizer, dressed in a Qwen2.5-style
template (``test_template_bounds.QWEN_STYLE``) and in its own template (which renders every role).
"""

from __future__ import annotations

import numpy as np
import pytest
from family_chat import Scripted, dressed, encoder
from test_template_bounds import QWEN_STYLE

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.data import check_prompt_lengths, from_rows
from polyrl.errors import ConfigError
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
