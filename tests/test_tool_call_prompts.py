"""A prompt holding an assistant tool call with ``content: null`` (OpenAI's and TRL's shape) trains.

TRL hands such a prompt to the chat template, which writes the call from ``tool_calls``; polyrl
refused it at load ("message 1 has no string content"). It is accepted now where the model's
template renders the call, and one error names the row where it cannot: a template that raises on
the null content, or one that writes the content alone (the call would never reach the model).
Real tokenizer (the tiny model's) and real templates rendered by transformers.
"""

from __future__ import annotations

import json

import pytest
from test_template_bounds import QWEN_STYLE

from polyrl.config import RunConfig
from polyrl.data import check_prompt_lengths, from_rows
from polyrl.errors import ConfigError
from polyrl.testing.chat_templates import with_chat_template

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CHAT = [{"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "name": "get_weather", "content": "sunny, 21C"}]

#: ChatML that writes each message's text alone: an assistant's tool calls are left out, silently
CONTENT_ONLY = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + (m['content'] if m['content'] is "
                "string else '') + '<|im_end|>' + '\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

RECORDING_REWARD = """
import json, os

def seen(prompts, completions, **kwargs):
    with open(os.environ["POLYRL_TEST_SEEN"], "a") as fh:
        for prompt in prompts:
            fh.write(json.dumps(prompt) + "\\n")
    return [0.5 for _ in completions]
"""


def _render(model_dir: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)

    def render(prompt):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return render


def test_a_bare_tool_call_in_a_prompt_is_read_as_trl_reads_it(tiny_model_dir, tmp_path):
    ds = from_rows([{"prompt": CHAT}], name="calls")  # refused here once: "message 1 has no string content"
    assert ds[0]["prompt"] == CHAT
    render = _render(with_chat_template(tiny_model_dir, tmp_path / "qwen", QWEN_STYLE))
    count = lambda prompt: len(render(prompt))  # noqa: E731
    assert check_prompt_lengths(ds, count, 1024, render=render) == (ds, 0)
    with pytest.raises(ConfigError) as info:  # a content with no call is still no prompt
        from_rows([{"prompt": [CHAT[0], {"role": "assistant", "content": None}]}], name="calls")
    assert "message 1 has no string \"content\"" in str(info.value)


def test_a_bare_tool_call_in_a_parquet_prompt_is_read_as_trl_reads_it(tmp_path):
    """Memory-mapped rows are checked column-wise: a null content was 'message 1 without a content
    (null)' even in an assistant message that calls a tool; a null content with no call still is."""
    import datasets

    from polyrl.data import load_dataset

    datasets.Dataset.from_list([{"prompt": CHAT}, {"prompt": [CHAT[0]]}]).to_parquet(str(tmp_path / "c.parquet"))
    ds = load_dataset(path=str(tmp_path / "c.parquet"), cache_dir=str(tmp_path / "cache"))
    assert ds.arrow_backed
    call = ds[0]["prompt"][1]
    assert call["role"] == "assistant" and call["content"] is None and call["tool_calls"] == [CALL]
    no_call = [CHAT[0], {"role": "assistant", "content": None, "tool_calls": []}]
    datasets.Dataset.from_list([{"prompt": no_call}]).to_parquet(str(tmp_path / "d.parquet"))
    with pytest.raises(ConfigError, match="has message 1 without a content"):
        load_dataset(path=str(tmp_path / "d.parquet"), cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("template, said", [
    (None, "the model's chat template refused the prompt: TypeError"),  # the tiny model's ChatML: str + None
    (CONTENT_ONLY, "message 1 of column 'prompt' is an assistant tool call that the model's chat template does "
                   "not render"),
])
def test_a_template_that_cannot_render_the_call_is_one_error_naming_the_row(tiny_model_dir, tmp_path, template,
                                                                            said):
    folder = tiny_model_dir if template is None else with_chat_template(tiny_model_dir, tmp_path / "t", template)
    render = _render(folder)
    count = lambda prompt: len(render(prompt))  # noqa: E731
    ds = from_rows([{"prompt": "Hi"}, {"prompt": CHAT}], name="calls")
    with pytest.raises(ConfigError) as info:
        check_prompt_lengths(ds, count, 1024, render=render)
    assert info.value.field == "data" and str(info.value).startswith("data: row 1 of calls: "), str(info.value)
    assert said in str(info.value), str(info.value)
    assert "tool call" in info.value.fix and "renders tool calls" in info.value.fix, info.value.fix


def test_the_trainer_trains_on_a_prompt_holding_a_bare_tool_call(tiny_model_dir, tmp_path, monkeypatch):
    """The real trainer on the tiny model with a template that writes tool calls: the prompt is
    generated from and reaches the reward's ``prompts`` as written."""
    from polyrl.trainer import Trainer

    folder = with_chat_template(tiny_model_dir, tmp_path / "qwen", QWEN_STYLE)
    (tmp_path / "seen.py").write_text(RECORDING_REWARD)
    monkeypatch.setenv("POLYRL_TEST_SEEN", str(tmp_path / "seen.jsonl"))
    config = RunConfig.from_dict({
        "model": {"path": folder, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"rows": [{"prompt": CHAT}, {"prompt": "What is 2 + 2?"}]},
        "rewards": [{"function": f"{tmp_path / 'seen.py'}:seen"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "out")},
    })
    summary = Trainer(config).run(progress=False)
    assert summary["steps"] == 1
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert seen.count(CHAT) == 2  # the group of 2 asked the conversation with its call


@pytest.mark.parametrize("content", ["", "Let me check."])
def test_a_tool_call_with_text_content_is_not_dropped_unsaid(tiny_model_dir, tmp_path, content):
    """``content: ""`` (how many datasets write a call) or text before the call: SmolLM2's template,
    as the tiny model's ChatML, writes the content alone, so the model read an empty turn, the call
    gone, and polyrl (only probing a null content) said nothing, as TRL says nothing. One error now;
    a template that writes calls still takes it."""
    chat = [CHAT[0], {**CHAT[1], "content": content}, CHAT[2]]
    ds = from_rows([{"prompt": chat}], name="calls")
    render = _render(tiny_model_dir)
    with pytest.raises(ConfigError, match="message 1 of column 'prompt' is an assistant tool call that the model's "
                                          "chat template does not render") as info:
        check_prompt_lengths(ds, lambda prompt: len(render(prompt)), 1024, render=render)
    assert "renders tool calls" in info.value.fix, info.value.fix
    qwen = _render(with_chat_template(tiny_model_dir, tmp_path / "qwen", QWEN_STYLE))
    assert check_prompt_lengths(ds, lambda prompt: len(qwen(prompt)), 1024, render=qwen) == (ds, 0)


def test_a_null_content_call_does_not_vouch_for_an_empty_one(tiny_model_dir, tmp_path):
    """A template writing the call for a null content and the content alone for ``""``: the verdict
    kept for the first row's shape was taken for the second's, its call dropped unsaid."""
    template = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}{% if m['content'] is none %}"
                "{% for c in m['tool_calls'] %}{{ c['function']['name'] }}{% endfor %}{% else %}{{ m['content'] }}"
                "{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    render = _render(with_chat_template(tiny_model_dir, tmp_path / "t", template))
    ds = from_rows([{"prompt": CHAT}, {"prompt": [CHAT[0], {**CHAT[1], "content": ""}, CHAT[2]]}], name="calls")
    with pytest.raises(ConfigError, match="row 1 of calls: message 1 of column 'prompt' is an assistant tool call"):
        check_prompt_lengths(ds, lambda prompt: len(render(prompt)), 1024, render=render)


def test_a_reward_models_template_that_drops_a_prompts_tool_call_is_one_error(tiny_model_dir, tmp_path):
    """The policy's template may write the call (checked at startup) while a reward model's writes
    the content alone, as SmolLM2's (the tiny model's ChatML) does: the reward model scored the
    conversation without the call, unsaid, as TRL's does. A template that writes it scores it."""
    from transformers import AutoTokenizer

    from polyrl.backend_kit.reward_text import encode_pair_cut

    chat = [CHAT[0], {**CHAT[1], "content": ""}, CHAT[2]]
    content_only = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ConfigError, match=r"message 1 of the conversation it scores \(prompt, then completion\) is "
                                          "an assistant tool call that the reward model's chat template does not "
                                          "render") as info:
        encode_pair_cut(content_only, chat, "It is sunny.", "auto", 1024)
    assert info.value.field == "options.path" and "renders tool calls" in info.value.fix
    assert encode_pair_cut(content_only, [CHAT[0]], "It is sunny.", "auto", 1024)[0]  # no call: scored as before
    qwen = AutoTokenizer.from_pretrained(with_chat_template(tiny_model_dir, tmp_path / "qwen", QWEN_STYLE))
    ids, cut = encode_pair_cut(qwen, chat, "It is sunny.", "auto", 1024)
    assert "get_weather" in qwen.decode(ids) and not cut


#: ChatML that writes no system and no tool message (as some reward models' templates do), silently
NO_SYSTEM_NO_TOOL = ("{% for m in messages %}{% if m['role'] not in ('system', 'tool') %}{{ '<|im_start|>' + "
                     "m['role'] + '\\n' + (m['content'] or '') + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_a_reward_models_template_that_drops_a_whole_role_is_one_error(tiny_model_dir, tmp_path):
    """A reward model's template that writes no system (or tool) message scored the conversation
    without it, unsaid: the policy read the system prompt, or an episode's tool result, and the
    reward model did not. One error names the message and its role; plain text scoring still works."""
    from transformers import AutoTokenizer

    from polyrl.backend_kit.reward_text import encode_pair_cut

    dropping = AutoTokenizer.from_pretrained(with_chat_template(tiny_model_dir, tmp_path / "t", NO_SYSTEM_NO_TOOL))
    system = [{"role": "system", "content": "Answer in French."}, CHAT[0]]
    with pytest.raises(ConfigError, match=r"message 0 of the conversation it scores \(prompt, then completion\) has "
                                          r"role 'system', which the model's chat template does not render.*the "
                                          "reward model would score the conversation without that message") as info:
        encode_pair_cut(dropping, system, "Il fait beau.", "auto", 1024)
    assert info.value.field == "options.path" and "chat_template = false" in info.value.fix
    episode = [{"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
               {"role": "tool", "name": "get_weather", "content": "sunny, 21C"},
               {"role": "assistant", "content": "It is sunny."}]
    with pytest.raises(ConfigError, match=r"message 2 of the conversation .* has role 'tool'"):
        encode_pair_cut(dropping, [CHAT[0]], episode, "auto", 1024)
    assert encode_pair_cut(dropping, [CHAT[0]], "It is sunny.", "auto", 1024)[0]  # every message shown: scored
    ids, _ = encode_pair_cut(dropping, system, "Il fait beau.", False, 1024)  # plain text: every message's text
    assert "Answer in French." in dropping.decode(ids)
