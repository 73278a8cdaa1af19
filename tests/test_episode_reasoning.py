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
from polyrl.backend_kit.literal_chat import encode_chat_literal
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


def test_a_generation_prompt_whose_closed_block_later_turns_lose_is_warned_of_at_startup(qwen3_style_model, tmp_path):
    """With ``enable_thinking = false`` the generation prompt closes the reasoning with an empty
    ``<think></think>`` block, which the episode keeps before each sampled turn and the template
    writes on the last assistant turn only: one warning naming ``model.chat_template_kwargs``,
    not the reasoning-drop one (no turn writes reasoning to drop)."""
    from polyrl.trainer import Trainer

    with capture_logs() as logs:
        trainer = Trainer(_config(qwen3_style_model, tmp_path, {"name": "guess_number"},
                                  chat_template_kwargs={"enable_thinking": False}))
    assert trainer.episodes is not None
    warned = [e for e in logs if e["log_level"] == "warning" and "<think>" in e["event"]]
    assert len(warned) == 1 and warned[0]["field"] == "model.chat_template_kwargs", warned
    assert "without the closed <think> block its generation prompt holds" in warned[0]["event"]
    assert "a 'user' observation or a tool's result" in warned[0]["event"]
    assert "leave enable_thinking = false out" in warned[0]["fix"]


def _closed_prompt_episode(tok, kind: str, template_kwargs: dict):
    """One two-turn episode under ``tok``'s template rendered with ``template_kwargs``: an
    environment answering with a ``user`` message (``kind = "env"``) or a tool's result
    (``"tools"``). (the runner, the scripted model, the episode, the conversation up to turn 2)."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def encode(messages, tools, add_generation_prompt):
        return np.asarray(encode_chat_literal(tok, messages, tools, add_generation_prompt,
                                              template_kwargs=template_kwargs), dtype=np.int64)

    def calc(a: int, b: int) -> str:
        """Multiply two numbers.

        Args:
            a: the first factor
            b: the second factor
        """
        return str(a * b)

    class Env:
        def reset(self, row):
            return [{"role": "user", "content": "guess"}]

        def step(self, message):
            return Observation([{"role": "user", "content": "higher"}], done=False)

    if kind == "env":
        model = Scripted(tok, lambda text, j: " 7", eos)  # a space: "\n\n" + "7" is split in two by this tokenizer
        runner = EpisodeRunner(model.generate, encode, EpisodeLimits(max_turns=2, max_episode_tokens=200),
                               make_environment=Env, model_name="m")
        first = [{"role": "user", "content": "guess"}]
    else:
        def policy(text: str, j: int) -> str:
            if "<tool_response>" not in text:
                return '<tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
            return "42"

        model = Scripted(tok, policy, eos)
        runner = EpisodeRunner(model.generate, encode, EpisodeLimits(max_turns=2, max_episode_tokens=400),
                               toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="hermes"),
                               model_name="m")
        first = [{"role": "user", "content": "6*7?"}]
    [episode] = runner.run([{"prompt": first}], SamplingParams(n=1, max_new_tokens=64))
    assert check(model, [episode]) == [] and episode.info["turns"] == 2
    return runner, model, episode, encode, [*first, *episode.messages[:2]]


#: QWEN3 whose earlier assistant turns keep the closed block a closed generation prompt wrote
QWEN3_KEEPS_CLOSED = QWEN3.replace(
    "{{- '<|im_start|>assistant\\n' }}\n        {%- if loop.index0 > ns.query",
    "{{- '<|im_start|>assistant\\n' }}\n        {%- if enable_thinking is defined and not enable_thinking "
    "and not loop.last %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n        {%- if loop.index0 > ns.query")


@pytest.mark.parametrize("kind", ["env", "tools"])
def test_turn_two_holds_the_closed_block_the_template_leaves_out_and_the_check_says_so(smollm2_tokenizer, kind):
    """What is trained is the generator's ids: turn 2 is sampled from the first prompt (its empty
    ``<think></think>`` included), turn 1's sampled ids and the glue, so its context holds the
    block twice. Under Qwen3's rule with ``enable_thinking = false`` the template renders that
    conversation with it once (on the generation prompt), after an observation and after a tool's
    result alike, and the runner's startup check says so. A template that writes the block in
    earlier turns too renders turn 2's context exactly (the observation case: the same ids; a
    turn with calls is rendered from its calls too), and the check is silent."""
    off, block = {"enable_thinking": False}, "<think>\n\n</think>\n\n"
    assert QWEN3_KEEPS_CLOSED != QWEN3
    for template, kept in ((QWEN3, False), (QWEN3_KEEPS_CLOSED, True)):
        tok = copy.deepcopy(smollm2_tokenizer)
        tok.chat_template = template
        runner, model, episode, encode, conversation = _closed_prompt_episode(tok, kind, off)
        second_prompt = model.calls[1][0]
        assert np.array_equal(second_prompt, np.concatenate([episode.prompt_ids, episode.completion_ids])
                              [:len(second_prompt)])  # the episode's own ids, as trained
        assert tok.decode(second_prompt.tolist()).count(block) == 2
        tools = runner.toolbox.schemas if runner.toolbox is not None else None
        rendered = encode(conversation, tools, True)
        assert tok.decode(rendered.tolist()).count(block) == (2 if kept else 1)
        if kind == "env":
            assert np.array_equal(second_prompt, rendered) is kept
        with capture_logs() as logs:
            warning = runner.check_reasoning_kept(reasoning_closed=True)
        if kept:
            assert warning is None and not logs
            continue
        what = "a 'user' observation or a tool's result" if kind == "env" else "a tool's result"
        assert warning is not None and f"once {what} follows it" in warning
        [line] = logs
        assert line["field"] == "model.chat_template_kwargs" and "enable_thinking" in line["fix"]


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


DRY_RUN = """
[model]
path = "{model}"
device = "cpu"
max_length = 512
{kwargs}
[data]
task = "arithmetic"
options = {{count = 8}}
[[rewards]]
name = "environment"
[environment]
name = "guess_number"
max_turns = 2
max_episode_tokens = 64
"""


@pytest.mark.parametrize("kwargs, field, says", [
    ("", "environment", "leaves an earlier assistant turn's <think> reasoning out once a 'user' observation"),
    ("chat_template_kwargs = {enable_thinking = false}", "model.chat_template_kwargs",
     "writes an earlier assistant turn without the closed <think> block its generation prompt holds")])
def test_the_dry_run_warns_as_the_run_does_from_the_tokenizer_alone(qwen3_style_model, tmp_path, capsys, kwargs,
                                                                     field, says):
    """``polyrl launch --dry-run`` loads no weights, and said nothing of either mismatch the run
    warns of once its models load: now the model folder's tokenizer answers it, one warning line
    naming the field, and the dry run still succeeds (the run would train)."""
    pytest.importorskip("torch")  # polyrl launch needs torchrun
    from polyrl.cli import main

    path = tmp_path / "run.toml"
    path.write_text(DRY_RUN.format(model=qwen3_style_model, kwargs=kwargs))
    args = ["launch", str(path), "--dry-run", "--nproc-per-node", "1", "--output-dir", str(tmp_path / "out")]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "torch.distributed.run" in captured.out
    warned = [line for line in captured.err.splitlines() if "<think>" in line]
    assert len(warned) == 1 and says in warned[0] and field in warned[0], captured.err


@pytest.mark.slow  # two launched ranks load the tiny model and take one step: ~30 s
def test_a_launched_run_warns_once_not_once_from_the_launcher_and_once_per_rank(qwen3_style_model, tmp_path):
    """``polyrl launch`` checks the config before torchrun starts, and each rank checks the template
    once its models load: the launcher and both ranks printed the same warning, three times for
    one run. Now rank 0 alone says it (the dry run, where no rank starts, still does: above)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")  # polyrl launch needs torchrun
    from polyrl.launch import cpu_count

    if cpu_count() < 2:
        pytest.skip("polyrl launch needs a CPU per rank")
    path = tmp_path / "run.toml"
    path.write_text(DRY_RUN.format(model=qwen3_style_model, kwargs="")
                    + "[generation]\ngroup_size = 2\nmax_new_tokens = 4\n"
                      f'[train]\nsteps = 1\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{tmp_path / "out"}"\n')
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(path)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "leaves an earlier assistant turn's <think>" in line]
    assert len(warned) == 1, done.stderr[-3000:]
