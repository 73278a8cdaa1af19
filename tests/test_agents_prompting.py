"""The tools prompt for templates that drop ``tools=``: detected with the real tokenizer's template,
and a call written as the prompt asks is read back by ``parse_tool_calls``."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from polyrl.agents import ToolCall, parse_tool_calls, tool_schema
from polyrl.agents.builtin import calculator
from polyrl.agents.prompting import template_ignores_tools, tools_system_prompt, with_tools_prompt

#: A template that does render tools (in the spirit of the tool-trained families), for contrast.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def encoder(tokenizer):
    def encode(messages, tools):
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)

    return encode


def test_tiny_models_template_ignores_tools_and_a_tools_template_does_not(tiny_model_dir):
    schemas = [tool_schema(calculator)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert template_ignores_tools(encoder(tokenizer), schemas)
    assert not template_ignores_tools(encoder(tokenizer), [])  # nothing to tell
    tokenizer.chat_template = TOOLS_TEMPLATE
    assert not template_ignores_tools(encoder(tokenizer), schemas)


def test_the_tools_prompt_lists_schemas_and_its_call_form_parses(tiny_model_dir):
    schemas = [tool_schema(calculator)]
    prompt = tools_system_prompt(schemas)
    assert json.dumps(schemas[0], sort_keys=True) in prompt
    messages = with_tools_prompt([{"role": "user", "content": "2+2?"}], schemas)
    assert [m["role"] for m in messages] == ["system", "user"] and messages[0]["content"] == prompt
    merged = with_tools_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], schemas)
    assert merged[0]["content"] == f"Be brief.\n\n{prompt}" and len(merged) == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<tools>" in rendered and '"name": "calculator"' in rendered
    # the example the prompt shows, filled in, is what the parser reads
    answer = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
    assert parse_tool_calls(answer).calls == [ToolCall("calculator", {"expression": "2+2"}, "call00000")]
