"""The episode runner on a scripted character-level chat model (a core unit test: no backend).

The fake model's tokenizer is one id per character plus two special tokens, and its template is
ChatML, so "exact to the token" is checkable: the episode's ids must equal the template's own
rendering of the whole conversation, while only the sampled turns carry mask True.
"""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.glue import ChatGlue
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.agents.tools import ToolBox
from polyrl.types import Completion, SamplingParams, TokenPrompt

START, END = 1000, 1001
SPECIAL = {"<|im_start|>": START, "<|im_end|>": END}


def encode_text(text: str) -> list[int]:
    ids: list[int] = []
    for part in re.split(r"(<\|im_start\|>|<\|im_end\|>)", text):
        ids += [SPECIAL[part]] if part in SPECIAL else [ord(ch) for ch in part]
    return ids


def decode(ids) -> str:
    names = {v: k for k, v in SPECIAL.items()}
    return "".join(names.get(int(i), chr(int(i))) for i in ids)


def render(messages, tools, add_generation_prompt) -> str:
    out = ""
    if tools:
        out += "<|im_start|>system\ntools: " + ",".join(t["function"]["name"] for t in tools) + "<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def encode_chat(messages, tools, add_generation_prompt):
    return np.asarray(encode_text(render(messages, tools, add_generation_prompt)), dtype=np.int64)


class ScriptedModel:
    """Answers by rule from the conversation text: a tool call first, then the tool's number."""

    def __init__(self, first_turn: str = 'call') -> None:
        self.calls: list[list[np.ndarray]] = []
        self.first_turn = first_turn

    def reply(self, text: str) -> tuple[str, str]:
        if "<|im_start|>tool\n" not in text:
            q = re.search(r"What is (\d+) \* (\d+)", text)
            if self.first_turn == "call":
                return f'<tool_call>{{"name": "calc", "arguments": {{"a": {q.group(1)}, "b": {q.group(2)}}}}}</tool_call>', "stop"
            if self.first_turn == "bad":
                return "<tool_call>{not json</tool_call>", "stop"
            if self.first_turn == "long":
                return "x" * 500, "length"
            return "I think 12.", "stop"
        result = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", text)[-1]
        return f"The answer is {result}.", "stop"

    def generate(self, prompts, sampling: SamplingParams) -> list[Completion]:
        self.calls.append([p.ids for p in prompts])
        out = []
        for i, p in enumerate(prompts):
            assert isinstance(p, TokenPrompt)
            for _ in range(sampling.n):
                text, reason = self.reply(decode(p.ids))
                ids = encode_text(text)[: sampling.max_new_tokens]
                if reason == "stop" and len(ids) < sampling.max_new_tokens:
                    ids.append(END)
                else:
                    reason = "length"
                out.append(Completion(i, p.ids, ids, [-0.5] * len(ids), decode(ids), reason))
        return out


def calc(a: int, b: int) -> str:
    """Multiply two numbers.

    Args:
        a: the first factor
        b: the second factor
    """
    return str(a * b)


def Box() -> ToolBox:  # noqa: N802 - reads like the class it builds
    return ToolBox([calc], timeout_s=5, max_concurrency=2)


parse = parse_tool_calls


ROWS = [{"prompt": [{"role": "user", "content": "What is 123 * 456?"}]},
        {"prompt": [{"role": "user", "content": "What is 7 * 8?"}]}]


def runner(model, box=None, limits=None, env=None):
    limits = limits or EpisodeLimits(max_turns=4, max_episode_tokens=400)
    return EpisodeRunner(model.generate, encode_chat, limits, make_environment=env,
                         toolbox=box or Box(), parse=parse)


def test_episode_ids_are_the_templates_rendering_and_only_sampled_tokens_are_trained():
    model = ScriptedModel()
    out = runner(model).run(ROWS, SamplingParams(max_new_tokens=120, n=2, seed=1))
    assert len(out) == 4 and [c.prompt_index for c in out] == [0, 0, 1, 1]
    c = out[0]
    tool = Box().schemas[0]
    full = [*ROWS[0]["prompt"],
            {"role": "assistant", "content": decode(encode_text(model.reply("What is 123 * 456")[0]))},
            {"role": "tool", "content": "56088", "name": "calc", "tool_call_id": c.messages[1].get("tool_call_id")},
            {"role": "assistant", "content": "The answer is 56088."}]
    whole = encode_chat(full, [tool], False)
    episode = np.concatenate([c.prompt_ids, c.completion_ids])
    # the template closes the last turn with "\n" after <|im_end|>; the episode ends at <|im_end|>
    np.testing.assert_array_equal(episode, whole[:-1])
    sampled = c.completion_ids[c.mask]
    assert decode(sampled) == decode(encode_text(full[1]["content"])) + "<|im_end|>" + "The answer is 56088.<|im_end|>"
    assert np.all(c.logprobs[~c.mask] == 0.0) and np.all(c.logprobs[c.mask] == -0.5)
    assert c.text == "The answer is 56088.<|im_end|>"
    assert c.info["turns"] == 2 and c.info["tool_calls"] == 1 and c.finish_reason == "stop"
    assert [m["role"] for m in c.messages] == ["assistant", "tool", "assistant"]
    assert c.messages[0]["tool_calls"][0]["function"]["name"] == "calc"


def test_turn_two_continues_from_the_exact_ids_of_turn_one():
    model = ScriptedModel()
    out = runner(model).run(ROWS[:1], SamplingParams(max_new_tokens=120, n=2, seed=1))
    first, second = model.calls
    assert len(first) == 1  # the group's shared prompt, sampled n times in one call
    for prompt, c in zip(second, out):
        head = np.concatenate([c.prompt_ids, c.completion_ids])[: len(prompt)]
        np.testing.assert_array_equal(prompt, head)


def test_a_malformed_call_becomes_an_observation_and_the_turn_limit_ends_the_episode():
    model = ScriptedModel(first_turn="bad")
    out = runner(model, limits=EpisodeLimits(max_turns=2, max_episode_tokens=400)).run(
        ROWS[:1], SamplingParams(max_new_tokens=60, n=2))
    c = out[0]
    assert c.info["format_errors"] >= 1 and c.info["turns"] == 2
    assert c.messages[1]["role"] == "tool" and c.messages[1]["content"].startswith("error:")


def test_a_turn_cut_at_the_length_limit_ends_the_episode_as_length():
    model = ScriptedModel(first_turn="long")
    c = runner(model).run(ROWS[:1], SamplingParams(max_new_tokens=50, n=2))[0]
    assert c.finish_reason == "length" and c.info["turns"] == 1 and bool(c.mask.all())


def test_the_episode_token_budget_is_never_exceeded():
    model = ScriptedModel()
    limits = EpisodeLimits(max_turns=4, max_episode_tokens=90)
    for c in runner(model, limits=limits).run(ROWS, SamplingParams(max_new_tokens=200, n=2)):
        assert len(c.completion_ids) <= 90
        assert c.finish_reason == "length"


class Guess:
    """A stateful environment: feedback until the number is found."""

    def __init__(self) -> None:
        self.secret = 12

    def reset(self, row):
        return [{"role": "user", "content": "Guess my number."}]

    async def step(self, message):
        guess = int(re.findall(r"\d+", message["content"])[-1])
        if guess == self.secret:
            return Observation(messages=[], reward=1.0, done=True)
        return Observation(messages=[{"role": "user", "content": "higher"}], reward=0.0, done=False)


def test_an_environment_gives_observations_rewards_and_ends_episodes():
    model = ScriptedModel(first_turn="plain")
    out = EpisodeRunner(model.generate, encode_chat, EpisodeLimits(3, 400), make_environment=Guess,
                        toolbox=None, parse=parse).run([{"prompt": "unused"}], SamplingParams(max_new_tokens=40, n=2))
    assert all(c.info["env_reward"] == 1.0 and c.info["turns"] == 1 for c in out)


class Broken(Guess):
    def step(self, message):
        raise RuntimeError("bug in the environment")


def test_an_environment_that_raises_ends_its_episode_not_the_run():
    model = ScriptedModel(first_turn="plain")
    out = EpisodeRunner(model.generate, encode_chat, EpisodeLimits(3, 400), make_environment=Broken,
                        toolbox=None, parse=parse).run([{"prompt": "unused"}], SamplingParams(max_new_tokens=40, n=2))
    assert all("bug in the environment" in c.info["env_error"] for c in out)


def test_glue_closes_the_turn_after_the_sampled_end_token():
    glue = ChatGlue(encode_chat)
    context = [{"role": "user", "content": "hi"}]
    assert decode(glue.turn_end(context)) == "<|im_end|>\n"
    assert decode(glue.close_turn(context, np.array(encode_text("ok<|im_end|>")))) == "\n"
    assert decode(glue.close_turn(context, np.array(encode_text("ok")))) == "<|im_end|>\n"


def test_tools_are_described_in_a_system_message_when_the_template_ignores_them():
    def plain(messages, tools, add_generation_prompt):
        return encode_chat(messages, None, add_generation_prompt)

    model = ScriptedModel()
    run = EpisodeRunner(model.generate, plain, EpisodeLimits(), toolbox=Box(), parse=parse)
    episode = asyncio.run(run._reset(0, ROWS[0]))
    assert episode.first_messages[0]["role"] == "system" and "<tool_call>" in episode.first_messages[0]["content"]
    assert '"calc"' in episode.first_messages[0]["content"]
    np.testing.assert_array_equal(episode.prompt_ids, plain(episode.first_messages, None, True))


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


class FailsOnSomeRows(Guess):
    def reset(self, row):
        if row.get("fail"):
            raise RuntimeError("no game for this row")
        return [{"role": "user", "content": "Guess my number."}]


def test_a_group_whose_reset_failed_does_not_shift_the_others_turns():
    """Episodes ended at reset are left out of turn 1's call; the running ones get their own samples."""
    model = ScriptedModel(first_turn="plain")
    rows = [{"prompt": "What is 7 * 8?", "fail": True}, {"prompt": "What is 7 * 8?"}]
    out = EpisodeRunner(model.generate, encode_chat, EpisodeLimits(3, 400), make_environment=FailsOnSomeRows,
                        toolbox=None, parse=parse).run(rows, SamplingParams(max_new_tokens=40, n=2))
    assert all("no game" in c.info["env_error"] and len(c.completion_ids) == 0 for c in out[:2])
    assert model.calls and all("Guess my number." in decode(p) for call in model.calls for p in call)
    for c in out[2:]:
        assert c.info["turns"] == 1 and c.info["env_reward"] == 1.0
        assert decode(c.prompt_ids).endswith("Guess my number.<|im_end|>\n<|im_start|>assistant\n")
