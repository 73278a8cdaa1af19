"""SmolLM2's real tokenizer dressed in other families' chat-template habits, and a scripted model on it.

Why: the episode glue is read off a template's renderings, so each family's habits must be met on
a real tokenizer (BPE merges across the glue's edges, special tokens split out). The templates
below are polyrl's own, written to reproduce what the families' published templates do with the
messages an episode renders:

* ``llama3``: Llama 3.1-3.3 -- an assistant message with ``tool_calls`` is written from its call
  alone (``{"name": ..., "parameters": ...}``), never its content; ``tool`` is rendered as
  ``ipython``; headers ``<|start_header_id|>role<|end_header_id|>`` and ``<|eot_id|>``, except that
  a call ends with ``<|eom_id|>`` when ``builtin_tools`` is given (Llama 3.1's "ipython mode"; its
  generation config stops on both).
* ``gemma3``: Gemma 3 -- a system message is folded into the first user turn, roles must alternate
  user/assistant (it raises on anything else, ``tool`` included), ``assistant`` is ``model``.
* ``phi3``: Phi-3 -- system/user/assistant only; any other role is dropped without a word.

``Scripted`` answers each turn by a rule on the decoded prompt, encodes its text as plain text and
gives each sampled token a unique log-prob; ``check`` proves an episode exact to the token: every
sampled run (mask True) is one generator output, from exactly the ids before it, with its
log-probs, and every inserted token has log-prob 0.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable

import numpy as np

from polyrl.backend_kit.literal_chat import encode_chat_literal, plain_ids
from polyrl.types import Completion, SamplingParams, TokenPrompt

LLAMA3 = (
    "{{- bos_token }}"
    "{%- set ns = namespace(system='') %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set ns.system = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\\nTools:\\n' }}"
    "{%- for t in tools %}{{- t | tojson }}{{- '\\n' }}{%- endfor %}{%- endif %}"
    "{{- ns.system + '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{%- if message.tool_calls is defined and message.tool_calls %}"
    "{%- set call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{{- '{\"name\": \"' + call.name + '\", \"parameters\": ' + (call.arguments | tojson) + '}' }}"
    "{{- '<|eom_id|>' if builtin_tools is defined else '<|eot_id|>' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"]

GEMMA3 = (
    "{{ bos_token }}"
    "{%- set ns = namespace(prefix='') -%}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set ns.prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set messages = messages[1:] -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}"
    "{{ (ns.prefix if loop.first else '') + message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")
GEMMA3_SPECIALS = ["<start_of_turn>", "<end_of_turn>"]

PHI3 = (
    "{% for m in messages %}{% if m['role'] in ('system', 'user', 'assistant') %}"
    "{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
PHI3_SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

#: family -> (template, special tokens added, the token ending an assistant turn, its header's text)
FAMILIES = {
    "llama3": (LLAMA3, LLAMA3_SPECIALS, "<|eot_id|>", "<|start_header_id|>assistant"),
    "gemma3": (GEMMA3, GEMMA3_SPECIALS, "<end_of_turn>", "<start_of_turn>model"),
    "phi3": (PHI3, PHI3_SPECIALS, "<|end|>", "<|assistant|>"),
}


def dressed(tokenizer, template: str, specials: list[str]):
    """A copy of ``tokenizer`` with ``specials`` added as special tokens and ``template`` as its
    chat template."""
    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = template
    return tok


def family(tokenizer, name: str):
    """``tokenizer`` dressed as family ``name`` (``FAMILIES``): (the tokenizer, the id of the token
    ending an assistant turn, its header's text)."""
    template, specials, end, head = FAMILIES[name]
    tok = dressed(tokenizer, template, specials)
    return tok, tok.convert_tokens_to_ids(end), head


def encoder(tok) -> Callable:
    """The torch backend's ``encode_chat`` on ``tok``."""
    def encode_chat(messages, tools, add_generation_prompt):
        return np.asarray(encode_chat_literal(tok, messages, tools, add_generation_prompt), dtype=np.int64)
    return encode_chat


class Scripted:
    """A model over a real tokenizer: ``policy(prompt_text, j)`` gives each turn's text, sampled as
    its plain encoding and then ``eos`` (unless cut at ``max_new_tokens``); ``eos`` may be a
    function of the turn's text (a model stopping on another end token after a call)."""

    def __init__(self, tok, policy: Callable[[str, int], str], eos: int | Callable[[str], int]) -> None:
        self.tok, self.policy, self.eos = tok, policy, eos
        self.calls: list[tuple[np.ndarray, Completion]] = []
        self._logprob = itertools.count(1)

    def generate(self, prompts, sampling: SamplingParams) -> list[Completion]:
        out = []
        for i, prompt in enumerate(prompts):
            assert isinstance(prompt, TokenPrompt)
            so_far = self.tok.decode(list(prompt.ids), skip_special_tokens=False)
            for j in range(sampling.n):
                text = self.policy(so_far, j)
                ids = plain_ids(self.tok, text)
                reason = "stop"
                if len(ids) >= sampling.max_new_tokens:
                    ids, reason = ids[: sampling.max_new_tokens], "length"
                else:
                    ids = ids + [self.eos(text) if callable(self.eos) else self.eos]
                logprobs = [-next(self._logprob) / 1000.0 for _ in ids]
                c = Completion(i, np.asarray(prompt.ids), np.asarray(ids), np.asarray(logprobs, dtype=np.float32),
                               self.tok.decode(ids, skip_special_tokens=True), reason)
                out.append(c)
                self.calls.append((np.asarray(prompt.ids), c))
        return out


def runs(mask) -> list[tuple[bool, int, int]]:
    """``(sampled, start, end)`` of each run of equal mask values."""
    out, k, m = [], 0, list(mask)
    while k < len(m):
        j = k
        while j < len(m) and m[j] == m[k]:
            j += 1
        out.append((bool(m[k]), k, j))
        k = j
    return out


def inserted_runs(c) -> list[np.ndarray]:
    """The ids of each run of inserted tokens (mask False) of episode ``c``."""
    return [c.completion_ids[a:b] for sampled, a, b in runs(c.mask) if not sampled]


def check(model: Scripted, completions) -> list[str]:
    """What breaks token exactness in ``completions`` (empty: none)."""
    problems = []
    for e, c in enumerate(completions):
        full = np.concatenate([c.prompt_ids, c.completion_ids])
        if not len(c.mask) == len(c.completion_ids) == len(c.logprobs):
            problems.append(f"episode {e}: mask, ids and log-probs differ in length")
            continue
        for sampled, a, b in runs(c.mask):
            if not sampled:
                if np.any(c.logprobs[a:b] != 0):
                    problems.append(f"episode {e}: inserted [{a},{b}) has non-zero log-probs")
                continue
            prompt = full[: len(c.prompt_ids) + a]
            match = [g for p, g in model.calls if np.array_equal(p, prompt)
                     and len(g.completion_ids) == b - a and np.array_equal(g.completion_ids, c.completion_ids[a:b])
                     and np.allclose(g.logprobs, c.logprobs[a:b])]
            if not match:
                problems.append(f"episode {e}: sampled run [{a},{b}) is no whole generator output from that prompt")
    return problems
