"""A third-party backend without ``encode_prompt`` still gets the startup prompt checks.

The toy backend (a real entry-point plugin) implements the hooks alone. With an ``encode_chat``
hook, the trainer counts every chat prompt through it before any step: an overlong row is one
error naming it (or dropped with ``data.drop_overlong``), and a message in a role the backend's
template drops is refused, as for the built-in backends. Text prompts have no hook that says how
the backend tokenizes them: they stay uncounted, never counted with a tokenizer it may not use.
"""

from __future__ import annotations

import numpy as np
import pytest
from structlog.testing import capture_logs

from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.hook_prompts import HookPromptEncoder
from polyrl.hookspecs import hookimpl
from polyrl.trainer import Trainer
from polyrl.types import TokenPrompt

SHORT = [{"role": "user", "content": "add 2 and 3"}]
LONG = [{"role": "user", "content": "add 2 and 3, " * 20}]


def _rendering_plugin(name: str = "rendering"):
    """The toy backend with a chat template: one id a message, one a character of its content,
    and system messages dropped (as some real templates drop a role)."""
    from polyrl_toy import ToyPlugin

    class Rendering(ToyPlugin):
        @hookimpl
        def encode_chat(inner, engine, messages, tools, add_generation_prompt):
            ids = []
            for m in messages:
                if m["role"] != "system":
                    ids += [1, *(1 + ord(ch) % 15 for ch in m["content"])]
            return ids + ([2] if add_generation_prompt else [])

    return Rendering(name)


def _config(tmp_path, rows, **data) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": "toy-model", "max_length": 64}, "backends": {"train": "rendering"},
        "generation": {"group_size": 2, "max_new_tokens": 4}, "optimizer": {"lr": 1.0},
        "data": {"rows": rows, **data}, "rewards": [{"name": "toy_sevens"}],
        "train": {"steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")},
    })


def _rows(*prompts):
    return [{"prompt": p} for p in prompts]


def test_an_overlong_chat_prompt_is_refused_at_startup_through_the_encode_chat_hook(toy, tmp_path):
    with pytest.raises(ConfigError) as raised:  # before any step (old code: trained, or failed mid-run)
        Trainer(_config(tmp_path, _rows(SHORT, SHORT, LONG, SHORT)), extra_plugins=(_rendering_plugin(),)).run(
            progress=False)
    assert raised.value.field == "model.max_length"
    # one id for the message, 260 for its characters, one for the generation prompt
    assert raised.value.message.startswith("row 2 of rows: the prompt has 262 tokens as the model sees it")


def test_drop_overlong_leaves_the_row_out_and_the_run_trains(toy, tmp_path):
    config = _config(tmp_path, _rows(SHORT, SHORT, LONG, SHORT), drop_overlong=True)
    with capture_logs() as logs:
        summary = Trainer(config, extra_plugins=(_rendering_plugin(),)).run(progress=False)
    assert summary["steps"] == 1
    assert any(e["event"].startswith("dropped 1 of 4 prompts") for e in logs), [e["event"] for e in logs]


def test_a_message_in_a_role_the_backends_template_drops_is_refused(toy, tmp_path):
    with_system = [{"role": "system", "content": "be brief"}, *SHORT]
    with pytest.raises(ConfigError, match="has role 'system', which the model's chat template does not render"):
        Trainer(_config(tmp_path, _rows(SHORT, with_system)), extra_plugins=(_rendering_plugin(),)).run(progress=False)


def test_a_backend_without_encode_prompt_says_once_that_control_characters_go_unchecked(toy, tmp_path):
    """Its engine gives the control-character probe nothing to ask (``polyrl.control_chars``): the
    run goes on, saying so once (it was silent), and a prompt holding U+0004 still trains."""
    with capture_logs() as logs:
        summary = Trainer(_config(tmp_path, _rows(SHORT, [{"role": "user", "content": "add\x04 2"}])),
                          extra_plugins=(_rendering_plugin(),)).run(progress=False)
    assert summary["steps"] == 1
    said = [e for e in logs if "are not checked" in e["event"]]
    assert len(said) == 1 and said[0]["log_level"] == "warning" and said[0]["backends"] == "rendering", said
    assert "U+0004" in said[0]["event"] and "encode_prompt" in said[0]["event"]


class _Engine:
    """An engine's ``encode_chat`` (``polyrl.engine.Engine``'s signature), counting its calls."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def encode_chat(self, messages, tools=None, add_generation_prompt=False):
        self.calls += 1
        return self.answer


def test_the_encoder_asks_engines_in_order_and_forgets_those_without_a_tokenizer():
    silent, rendering = _Engine(None), _Engine([5, 6, 7])
    encode = HookPromptEncoder([silent, rendering])  # type: ignore[list-item]
    assert encode(SHORT) == [5, 6, 7] and encode(LONG) == [5, 6, 7]
    assert silent.calls == 1 and rendering.calls == 2
    assert encode(TokenPrompt([3, 4])) == [3, 4]  # verbatim
    assert encode("plain text") is None  # no hook says how the backend tokenizes text
    nobody = HookPromptEncoder([_Engine(None)])  # type: ignore[list-item]
    assert nobody(SHORT) is None and nobody(SHORT) is None


def test_a_conversation_already_rendered_is_not_asked_of_the_hook_again():
    """One hook call per distinct conversation, not per row (a server-backed backend answered a
    request for every row of a dataset repeating its prompts); the hook's contract renders one
    conversation a call, so nothing can be batched beyond that. The memo is bounded."""
    from polyrl import hook_prompts

    rendering = _Engine([5, 6, 7])
    encode = HookPromptEncoder([rendering])  # type: ignore[list-item]
    assert [encode(p) for p in (SHORT, LONG, SHORT, [dict(SHORT[0])], LONG)] == [[5, 6, 7]] * 5
    assert rendering.calls == 2
    encode(SHORT)[0] = 99  # the caller's copy: the memo is not changed
    assert encode(SHORT) == [5, 6, 7] and rendering.calls == 2
    for n in range(hook_prompts.MEMO_SIZE):  # SHORT and LONG pushed out by newer conversations
        encode([{"role": "user", "content": str(n)}])
    encode(SHORT)
    assert rendering.calls == 3 + hook_prompts.MEMO_SIZE


def test_the_memo_is_bounded_by_the_ids_it_holds_and_keeps_them_compact(monkeypatch):
    """Before: the memo held MEMO_SIZE (4096) conversations whatever their length, each as a tuple
    of Python ints (~36 bytes an id: ~600 MB for 4k-token prompts). Now the ids held together stay
    within MEMO_TOKENS, as int32 arrays; a repeated conversation that fits is still not asked again."""
    from polyrl import hook_prompts

    monkeypatch.setattr(hook_prompts, "MEMO_TOKENS", 100, raising=False)
    rendering = _Engine(list(range(1000, 1030)))  # 30 ids a conversation
    encode = HookPromptEncoder([rendering])  # type: ignore[list-item]
    chats = [[{"role": "user", "content": f"q{n}"}] for n in range(5)]
    for chat in chats[:3]:  # 90 ids: all kept
        encode(chat)
    assert [encode(c) for c in chats[:3]] == [list(range(1000, 1030))] * 3 and rendering.calls == 3
    encode(chats[3])  # 120 ids would be held: the least recently used (chats[0]) goes
    assert rendering.calls == 4
    assert encode(chats[1]) == list(range(1000, 1030)) and rendering.calls == 4
    encode(chats[0])
    assert rendering.calls == 5, "the oldest conversation was kept beyond the token bound"
    memo = encode._memo.values()
    assert sum(len(ids) for ids in memo) <= 100 and encode.held_tokens == sum(len(ids) for ids in memo)
    assert all(ids.dtype == np.int32 for ids in memo)
    copy = encode(chats[0])
    assert type(copy) is list and type(copy[0]) is int  # noqa: E721 - Python ints, the caller's own
    copy[0] = -1
    assert encode(chats[0])[0] == 1000 and rendering.calls == 5
    huge = HookPromptEncoder([_Engine(list(range(101)))])  # type: ignore[list-item]
    assert huge(chats[4]) == list(range(101)) and huge.held_tokens == 0  # longer than the bound: not kept
