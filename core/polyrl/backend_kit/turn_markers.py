"""The added tokens a chat template writes as its turn structure, special or not.

Why: ``literal_chat`` reads a message's text spelling one of the template's markers as text, so a
tool result or an observation spelling ``<|im_end|>\\n<|im_start|>assistant\\n`` cannot close its
turn and open a forged one. It took the markers to be the tokenizer's *special* tokens, but many
fine-tuned models add the template's markers with ``tokenizer.add_tokens`` (``special: false`` in
tokenizer.json: ChatML fine-tunes of Mistral v0.1 and Llama 2 add ``<|im_start|>`` so, their EOS
``<|im_end|>`` alone special), and such a marker spelled in a message was its token: the forged
turn the model read was real markers. Here a non-special added token is a marker too when the
template writes it around the messages of a plain conversation (asked of a rendering with stand-in
text, once per template: the added tokens its rendering is read as). Other non-special added tokens stay tokens wherever they are spelled
(Qwen3's ``<think>``, the tool-call tags: how the model itself writes that text), and so do the
reasoning and tool-call tags (``KEPT_TAGS``) however the template writes them.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from polyrl.backend_kit.template_limits import render_chat
from polyrl.backend_kit.tokens import KEPT_TAGS

#: plain conversations a template renders: the markers it writes around them are its turn structure
#: (with a system message first, and without one for templates that refuse it)
_PROBES = ([{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
           [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}])
_WORD = re.compile(r"\w+")
#: conversation shapes remembered per tokenizer (template, variables, candidates) before the oldest goes
_KEPT = 8

_lock = threading.Lock()
_found: weakref.WeakKeyDictionary[Any, dict[tuple[str, str, tuple[str, ...]], frozenset[str]]] = \
    weakref.WeakKeyDictionary()


def special_tokens(tokenizer: Any) -> dict[str, Any]:
    """The tokenizer's special added tokens by their text (``content -> AddedToken``)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {tok.content: tok for tok in decoder.values() if getattr(tok, "special", False) and tok.content}


def _candidates(tokenizer: Any) -> dict[str, Any]:
    """Non-special added tokens that may be markup: not whitespace alone (a run of spaces), not a
    word (a role's name), not a reasoning or tool-call tag."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {tok.content: tok for tok in decoder.values()
            if not getattr(tok, "special", False) and isinstance(tok.content, str) and tok.content.strip()
            and not _WORD.fullmatch(tok.content)
            and tok.content not in KEPT_TAGS}


def template_markers(tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The template's markers (``content -> AddedToken``): the special tokens, and the non-special
    added tokens it writes around a plain conversation's messages. Only for a fast tokenizer (a
    slow one cannot be told to read a non-special token as text); a template that renders neither
    probe adds none."""
    markers = special_tokens(tokenizer)
    candidates = _candidates(tokenizer)
    if not candidates or not getattr(tokenizer, "is_fast", False) or not getattr(tokenizer, "chat_template", None):
        return markers
    key = (repr(tokenizer.chat_template), repr(sorted((str(k), repr(v)) for k, v in (template_kwargs or {}).items())),
           tuple(sorted(candidates)))
    with _lock:
        found = _found.get(tokenizer, {}).get(key)
    if found is None:
        found = _written(tokenizer, candidates, template_kwargs)
        with _lock:
            shapes = _found.setdefault(tokenizer, {})
            if len(shapes) >= _KEPT:
                shapes.pop(next(iter(shapes)))
            shapes[key] = found
    return {**markers, **{content: candidates[content] for content in found}}


def _written(tokenizer: Any, candidates: Mapping[str, Any], template_kwargs: Mapping[str, Any] | None) -> frozenset[str]:
    """The ``candidates`` the template writes rendering the first probe it does not refuse, as the
    tokenizer reads the rendering (an added token whose string only occurs inside a longer one's,
    ``<|im`` in ``<|im_start|>``, is not written)."""
    ids = {int(i): content for i, tok in (tokenizer.added_tokens_decoder or {}).items()
           if (content := tok.content) in candidates}
    for probe in _PROBES:
        try:
            rendered = render_chat(tokenizer, probe, None, True, "model.path", template_kwargs)
        except Exception:  # noqa: BLE001 - a template refusing this shape: the next, or none found
            continue
        read = tokenizer(rendered, add_special_tokens=False, verbose=False)["input_ids"]
        return frozenset(ids[int(i)] for i in read if int(i) in ids)
    return frozenset()
