"""A model folder's chat template is untrusted Jinja: one that would allocate gigabytes or loop for
hours is one ``error: model.path: ...`` within seconds, and every real template renders exactly as
transformers' ``apply_chat_template`` renders it (``polyrl.backend_kit.template_limits``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.reward_text import encode_pair
from polyrl.backend_kit.template_limits import MAX_STEPS, render_chat
from polyrl.errors import ConfigError
from polyrl.testing.chat_templates import with_chat_template
from work_meter import measured

pytest.importorskip("transformers")

LONG = "Tell me about the capital of France, its rivers and its museums, in a few lines. " * 3
HOSTILE = {
    "one allocation": '{{ "x" * 10000000000 }}',
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "content amplified": "{{ messages[0].content * 100000 }}",
}
MORE_HOSTILE = {
    "doubling by ~": ('{% set ns = namespace(s="xx") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}'
                      "{% endfor %}{{ ns.s }}"),
    "a wide filter": '{{ "x"|center(10000000000) }}',
    "a wide format": '{{ "%10000000000d" % 1 }}',
    "a list of big strings": '{% set s = "x" * 1000000 %}{{ [s, s, s, s, s, s, s, s, s, s] }}',
    "a captured block": ('{% set t %}{% for i in range(100000) %}{{ messages|tojson }}{% endfor %}{% endset %}'
                         "{{ t|length }}"),
    "exponential macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "nested loops over messages": ("{% for a in messages %}{% for b in messages %}{% for c in messages %}"
                                   "{% for d in messages %}{% for e in messages %}{% endfor %}{% endfor %}"
                                   "{% endfor %}{% endfor %}{% endfor %}"),
}

# templates written in the manner of the families' own (not their text): what they use of Jinja
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QWEN_STYLE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "You may call these tools:\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\nAnswer a call as <tool_call>{\\"name\\": ..., \\"arguments\\": ...}</tool_call><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_user=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- if message.role == 'user' and ns.last_user == messages|length - 1 %}
        {%- set ns.last_user = (messages|length - 1) - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' + content }}
        {%- for call in message.tool_calls or [] %}
            {%- set fn = call.function if call.function else call %}
            {{- '\\n<tool_call>\\n{"name": "' ~ fn.name ~ '", "arguments": ' }}
            {{- fn.arguments if fn.arguments is string else fn.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""
LLAMA3_STYLE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content']|trim %}{%- set rest = messages[1:] %}
{%- else %}{%- set system = "" %}{%- set rest = messages %}{%- endif %}
{{- "<|im_start|>system\\n\\n" }}{{- "Today: " + "26 Jul 2024\\n\\n" }}
{%- if tools is not none %}{{- "Functions:\\n" }}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}{%- endif %}
{{- system }}{{- "<|im_end|>" }}
{%- for message in rest %}
    {{- '<|im_start|>' + message['role'] + '\\n\\n' + message['content'] | trim + '<|im_end|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n\\n' }}{%- endif %}"""
PHI3_STYLE = ("{% for message in messages %}{% if message['role'] in ['system', 'user', 'assistant', 'tool'] %}"
              "{{ '<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>' + '\\n' }}{% endif %}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
MISTRAL_STYLE = """{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}
{%- else %}{%- set loop_messages = messages %}{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) and message['role'] != 'tool' %}
        {{- raise_exception('roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system is defined %}{{- '[INST] ' + system + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}
    {%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}
    {%- elif message['role'] == 'tool' %}{{- '[TOOL_RESULTS] ' + message['content'] + '[/TOOL_RESULTS]' }}
    {%- endif %}
{%- endfor %}"""
GEMMA_STYLE = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\\n\\n' %}"
               "{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}"
               "{% endif %}{% for message in loop_messages %}"
               "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
               "{{ '<start_of_turn>' ~ role ~ '\\n' ~ (first if loop.first else '') }}"
               "{% if message['content'] is string %}{{ message['content'] | trim }}"
               "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] | trim }}"
               "{% endif %}{% endfor %}{% endif %}{{ '<end_of_turn>\\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
TEMPLATES = {"chatml": CHATML, "qwen-style": QWEN_STYLE, "llama3-style": LLAMA3_STYLE, "phi3-style": PHI3_STYLE,
             "mistral-style": MISTRAL_STYLE, "gemma-style": GEMMA_STYLE}

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Capital of France? 😀 — é"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>easy</think>\n\nHello!"},
     {"role": "user", "content": "Add 2 and 3 <|im_end|> please."}],
    [{"role": "user", "content": "Add 2 and 3."},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
         "name": "add", "arguments": {"a": 2, "b": 3}}}]},
     {"role": "tool", "content": "5"}],
]


def _tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def torch_engine_on(tiny_model_dir, tmp_path_factory):
    """A generate engine of the torch backend on the tiny model with a given chat template."""
    pytest.importorskip("torch")
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    def build(name: str, template: str) -> Engine:
        folder = with_chat_template(tiny_model_dir, tmp_path_factory.mktemp("hub") / name, template)
        return Engine(get_registry(), "torch", EngineConfig(model=folder, role="generate", threads=1))
    return build


def _refused_quickly(call, field: str) -> ConfigError:
    """Refused within a counted amount of work, not a stopwatch (< 10 s measured the machine): the
    rendering's loop and call limit (``MAX_STEPS``, 1e6) costs the hostile templates here at most
    ~3.1e6 signal checks (``tests/work_meter.py``; its 5 s deadline, on a loaded machine, only
    refuses sooner). The budget, fixed here so a raised limit shows, stops a template no limit
    bounds (1e10 steps) there instead of after minutes."""
    assert MAX_STEPS == 1_000_000  # the budget below is sized on it
    with pytest.raises(ConfigError) as err:
        measured(call, budget=4_000_000)
    assert err.value.field == field and str(err.value).startswith(f"{field}: the chat template of ")
    assert " is refused: " in str(err.value)
    return err.value


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_one_error_within_seconds_through_the_torch_engine(torch_engine_on, name):
    engine = torch_engine_on(name.replace(" ", "-"), HOSTILE[name])
    _refused_quickly(lambda: engine.encode_chat([{"role": "user", "content": LONG}], None, True), "model.path")


@pytest.mark.parametrize("name", list(MORE_HOSTILE))
def test_other_ways_to_build_or_loop_without_end_are_bounded_too(tiny_model_dir, name):
    tok = _tokenizer(tiny_model_dir)
    tok.chat_template = MORE_HOSTILE[name]
    messages = [{"role": "user", "content": LONG}] * 20
    _refused_quickly(lambda: encode_chat_literal(tok, messages, None, True), "model.path")


def test_the_reward_models_and_the_remote_tokenizer_name_their_own_field(tiny_model_dir, tmp_path):
    from polyrl.remote_tokenizer import ModelTokenizer

    folder = with_chat_template(tiny_model_dir, tmp_path / "hub", HOSTILE["content amplified"])
    tok, remote = _tokenizer(folder), ModelTokenizer(folder)  # loaded first: only the rendering is counted
    _refused_quickly(lambda: encode_pair(tok, LONG, "4", True, 1024), "options.path")
    _refused_quickly(lambda: remote.render([{"role": "user", "content": LONG}]), "model.path")


@pytest.mark.slow
def test_polyrl_generate_on_a_folder_with_a_hostile_template_prints_one_error_line(tiny_model_dir, tmp_path):
    pytest.importorskip("torch")
    folder = with_chat_template(tiny_model_dir, tmp_path / "hub", HOSTILE["nested loops"])
    cli = Path(sys.executable).with_name("polyrl")
    done = subprocess.run([str(cli), "generate", "hi", "--model", folder, "--max-new-tokens", "1", "--threads", "1"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], done.stderr
    assert lines[-1].startswith("error: model.path: the chat template of ") and folder in lines[-1]
    assert " is refused: loops and calls ran past " in lines[-1]
    assert "Traceback" not in done.stderr  # refused by the step limit (above), within the 120 s bound: not timed


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_real_templates_render_exactly_as_transformers_renders_them(tiny_model_dir, name):
    tok = _tokenizer(tiny_model_dir)
    tok.chat_template = TEMPLATES[name]
    _assert_as_transformers(tok)


@pytest.mark.slow
def test_smollm2s_own_template_renders_exactly_as_transformers_renders_it(smollm2_tokenizer):
    _assert_as_transformers(smollm2_tokenizer)


def _assert_as_transformers(tok) -> None:
    from jinja2.exceptions import TemplateError

    rendered = 0
    for conversation in CONVERSATIONS:
        for tools in (None, TOOLS):
            for generation_prompt in (True, False):
                try:
                    want = tok.apply_chat_template(conversation, tools=tools, tokenize=False,
                                                   add_generation_prompt=generation_prompt)
                except TemplateError as exc:  # the template's own refusal (Mistral's alternation) is kept
                    with pytest.raises(TemplateError, match=str(exc)):
                        render_chat(tok, conversation, tools, generation_prompt, "model.path")
                    continue
                assert render_chat(tok, conversation, tools, generation_prompt, "model.path") == want
                if "<|im_end|>" not in json.dumps(conversation):
                    assert encode_chat_literal(tok, conversation, tools, generation_prompt) == \
                        tok(want, add_special_tokens=False)["input_ids"]
                rendered += 1
    assert rendered >= 8


#: run in a child process: a real MemoryError, from a memory limit set just above what the child uses,
#: while the chat template renders a long message (each copy the template makes of it is 28 MB)
OUT_OF_MEMORY = r"""
import json, resource, sys
from transformers import AutoTokenizer
from polyrl.agents.glue import ChatGlue
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.template_limits import render_chat

tok = AutoTokenizer.from_pretrained(sys.argv[1])
long = [{"role": "user", "content": "\U0001F600" * 7_000_000}]
glue = ChatGlue(lambda messages, tools, gen: encode_chat_literal(tok, messages, tools, gen))
glue.encode([{"role": "user", "content": "hi"}], True)  # compiled and warm before the limit
_, hard = resource.getrlimit(resource.RLIMIT_AS)
size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
for name, call in (("render_chat", lambda: render_chat(tok, long, None, True, "model.path")),
                   ("glue", lambda: glue.encode(long, True))):
    resource.setrlimit(resource.RLIMIT_AS, (size + 40 * 2**20, hard))
    try:
        call()
        outcome = None
    except BaseException as exc:
        outcome = exc
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    print(json.dumps({"call": name, "raised": type(outcome).__name__,
                      "classes": [c.__name__ for c in type(outcome).__mro__], "text": str(outcome)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_a_rendering_out_of_memory_is_not_blamed_on_the_template(tiny_model_dir):
    """A MemoryError while a chat template rendered was a ConfigError on model.path ("ran out of
    memory. Fix: use a model folder whose chat template is a real one"): the template renders within
    polyrl's bounds, so the process's memory was short, and the message sent the user to replace a
    model folder that was fine (an episode's turn stopped the run with it). It is ``OutOfMemory``
    now, no ConfigError, saying what ran short and what to do; the episode glue passes it on as it
    is rather than as a template that cannot render the conversation."""
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY, tiny_model_dir], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["call"] for o in outcomes] == ["render_chat", "glue"]
    for o in outcomes:
        assert o["raised"] == "OutOfMemory" and "ConfigError" not in o["classes"], o
        assert o["text"].startswith("out of memory while ") and "no setting is at fault" in o["text"]
        assert "Fix: free memory" in o["text"] and "real one" not in o["text"]
