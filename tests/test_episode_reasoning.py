"""Episodes under a chat template that leaves earlier turns' reasoning out depending on what they say.

Qwen3's template drops an assistant turn's ``<think>`` block once a new user query follows it, and
keeps it before tool results (which it shows inside a ``user`` turn, but not as a query). Stand-in
text without ``</think>`` cannot show this, so the glue checks passed it, and an episode whose
environment answers with ``user`` observations continued from the sampled ids, reasoning kept:
turn 2 on was sampled and trained on a context the template never shows the model, without a word
(now one warning at startup, with the fixes; the run trains exactly what was sampled). ``QWEN3`` below
is polyrl's own template reproducing that behaviour (not Qwen's text).
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
from structlog.testing import capture_logs
from family_chat import Scripted, check, encoder

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.agents.tools import ToolBox
from polyrl.config import RunConfig
from polyrl.testing.chat_templates import with_chat_template
from polyrl.types import SamplingParams

pytest.importorskip("transformers")

#: ChatML with Qwen3's reasoning rule: the last real user query (a user message that is not a
#: tool response) splits the conversation; an assistant turn before it is written without its
#: reasoning, one after it with it (the last turn always with a <think> block, empty if need be).
QWEN3 = """{%- set ns = namespace(query=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' and not (m.content.startswith('<tool_response>') and m.content.endswith('</tool_response>')) %}
        {%- set ns.query = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'assistant' %}
        {%- set text = m.content if m.content is string else '' %}
        {%- set thought = '' %}
        {%- if '</think>' in text %}
            {%- set thought = text.split('</think>')[0].split('<think>')[-1].strip('\\n') %}
            {%- set text = text.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' }}
        {%- if loop.index0 > ns.query and (loop.last or thought) %}{{- '<think>\\n' + thought + '\\n</think>\\n\\n' }}{%- endif %}
        {{- text }}
        {%- for call in m.tool_calls or [] %}
            {{- '\\n<tool_call>\\n' + ({'name': call.function.name, 'arguments': call.function.arguments} | tojson) + '\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- else %}
        {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}"""


def _config(model: str, tmp_path, environment: dict, **model_extra) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": model, "max_length": 512, **model_extra},
        "generation": {"group_size": 2, "max_new_tokens": 8},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "environment" if "name" in environment else "numeric_match"}],
        "environment": {"max_turns": 2, "max_episode_tokens": 64, **environment},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})


@pytest.fixture(scope="module")
def qwen3_style_model(tiny_model_dir, tmp_path_factory) -> str:
    return with_chat_template(tiny_model_dir, tmp_path_factory.mktemp("models") / "qwen3-style", QWEN3)


def test_the_template_really_drops_earlier_reasoning_after_a_user_query_only(smollm2_tokenizer):
    """The premise, on a real tokenizer: the same conversation rendered with two different
    reasonings in its first turn is the same ids once a user message follows it, and not when a
    tool's result does."""
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = QWEN3
    encode = encoder(tok)
    call = {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": {}}}

    def rendered(thought: str, follow: list, calls: list) -> np.ndarray:
        turn = {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n\n42", **({"tool_calls": calls} if calls else {})}
        return encode([{"role": "user", "content": "6*7?"}, turn, *follow], None, True)

    user = [{"role": "user", "content": "again"}]
    tool = [{"role": "tool", "content": "42", "tool_call_id": "c0"}]
    assert np.array_equal(rendered("six sevens", user, []), rendered("seven sixes", user, []))
    assert not np.array_equal(rendered("six sevens", tool, [call]), rendered("seven sixes", tool, [call]))


def test_an_environment_answering_with_user_messages_is_warned_of_at_startup(qwen3_style_model, tmp_path):
    """guess_number answers with ``user`` messages: under this template the model's earlier
    reasoning is in every later turn's context and in what is trained, never in the template's
    view. One warning when the trainer is built, before any step, with the fixes; the run starts
    (it trains exactly what was sampled, as TRL's multi-turn rollouts do)."""
    from polyrl.trainer import Trainer

    with capture_logs() as logs:
        trainer = Trainer(_config(qwen3_style_model, tmp_path, {"name": "guess_number"}))
    assert trainer.episodes is not None
    warned = [e for e in logs if e["log_level"] == "warning" and "<think>" in e["event"]]
    assert len(warned) == 1 and warned[0]["field"] == "environment"
    assert "a 'user' observation" in warned[0]["event"]
    assert "enable_thinking = false" in warned[0]["fix"] and "'tool' messages" in warned[0]["fix"]


def test_a_generation_prompt_that_closes_the_reasoning_is_not_warned_of(qwen3_style_model, tmp_path):
    """With ``enable_thinking = false`` the generation prompt closes the reasoning: no turn writes
    any, nothing is left out, and the run starts without the warning."""
    from polyrl.trainer import Trainer

    with capture_logs() as logs:
        trainer = Trainer(_config(qwen3_style_model, tmp_path, {"name": "guess_number"},
                                  chat_template_kwargs={"enable_thinking": False}))
    assert trainer.episodes is not None
    assert not [e for e in logs if "<think>" in e["event"]]


def test_tool_results_keep_the_reasoning_so_tool_episodes_start_and_stay_exact(smollm2_tokenizer):
    """Tools alone: the template keeps the reasoning before tool results, so the runner is not
    refused, and an episode that reasons, calls, reads the result and answers is exact to the
    token: each sampled run is one generator output from exactly the ids before it, and the
    inserted ids are the template's own, the tool's result rendered once."""
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = QWEN3
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def calc(a: int, b: int) -> str:
        """Multiply two numbers.

        Args:
            a: the first factor
            b: the second factor
        """
        return str(a * b)

    def policy(text: str, j: int) -> str:
        if "<tool_response>" not in text:
            return '<think>\nlet me multiply\n</think>\n\n<tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
        return "<think>\nthe tool said so\n</think>\n\n42"

    model = Scripted(tok, policy, eos)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=400),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="hermes"))
    assert runner.check_reasoning_kept() is None  # tool results keep it
    out = runner.run([{"prompt": [{"role": "user", "content": "6*7?"}]}], SamplingParams(n=1, max_new_tokens=64))
    assert check(model, out) == []
    [c] = out
    assert c.info["turns"] == 2 and c.info["tool_calls"] == 1
    inserted = tok.decode(c.completion_ids[~c.mask].tolist())
    assert inserted.count("<tool_response>\n42\n</tool_response>") == 1


def test_an_environment_with_tool_observations_under_a_template_that_drops_for_both_is_warned_of(smollm2_tokenizer):
    """A template that drops every earlier turn's reasoning (whatever follows): the runner's check
    names both kinds of message, and offers no 'tool' messages fix."""
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = QWEN3.replace("loop.index0 > ns.query and (loop.last or thought)", "loop.last")

    class Env:
        def reset(self, row):
            return [{"role": "user", "content": "guess"}]

        def step(self, message):
            return Observation([{"role": "user", "content": "no"}], done=False)

    runner = EpisodeRunner(Scripted(tok, lambda text, j: "x", 0).generate, encoder(tok), EpisodeLimits(),
                           make_environment=Env, model_name="m")
    warning = runner.check_reasoning_kept()
    assert warning is not None and "a 'user' observation or a tool's result" in warning
    assert "'tool' messages" not in warning
    assert runner.check_reasoning_kept(reasoning_closed=True) is None  # the generation prompt closes it


def test_a_template_that_writes_a_calls_turn_from_the_call_alone_is_not_refused(smollm2_tokenizer):
    """Llama 3.x writes an assistant turn with calls from the call alone, its text never: that
    holds for any text (the sampled ids are the call), so it is no reasoning drop."""
    from family_chat import family

    tok, eot, _ = family(smollm2_tokenizer, "llama3")

    def calc(a: int, b: int) -> str:
        """Multiply two numbers.

        Args:
            a: the first factor
            b: the second factor
        """
        return str(a * b)

    runner = EpisodeRunner(Scripted(tok, lambda text, j: "x", eot).generate, encoder(tok), EpisodeLimits(),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="llama3"))
    assert runner.check_reasoning_kept() is None
