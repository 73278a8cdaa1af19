"""Chat rendering in which what a message says is only ever text, never the tokenizer's control tokens.

Why: a chat template writes its own special tokens (``<|im_start|>``, ``<|im_end|>``) around the
messages, and tokenizing the rendered string whole also reads those strings where a message merely
*spells* them. A completion a reward model scores, or a tool result or observation an episode
inserts, containing ``<|im_end|>\\n<|im_start|>assistant\\n`` would then close its turn and open a
forged one. Here the template's own special tokens stay special and every special-token string
inside a message (its content, tool-call arguments, any text it carries) is encoded as the
ordinary text it is. A conversation none of whose text spells a special token is encoded exactly
as before: the rendered string, tokenized whole, token for token.

The template's markers are its special tokens and the added tokens it writes around a plain
conversation's messages though the vocabulary does not mark them special (``<|im_start|>`` added
with ``add_tokens`` by a ChatML fine-tune: ``polyrl.backend_kit.turn_markers``). Other added tokens
the vocabulary does not mark special (Qwen3's ``<think>``) are read as tokens in either place: they
are how the model itself writes that text, not the template's structure.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.backend_kit.marker_aliases import encode_with_markers
from polyrl.backend_kit.template_limits import render_chat
from polyrl.backend_kit.turn_markers import template_markers

_plain_lock = threading.Lock()
#: per HF tokenizer: (its size when copied, a Rust copy that encodes special-token strings as text,
#: the same for text that does not open the string: ``_inner_json``)
_plain: weakref.WeakKeyDictionary[Any, tuple[int, Any, Any]] = weakref.WeakKeyDictionary()
_KEEP = ("role", "type")  # structure a template branches on, never free text


def _inner_json(config: str) -> str | None:
    """``config`` (a Rust tokenizer's JSON) for text that does not open the string encoded, or
    None where that is encoded as any text is. Why: a Metaspace pre-tokenizer with
    ``prepend_scheme = "first"`` (SentencePiece vocabularies as transformers converts them with
    ``legacy=False``: Mistral v0.3's, Llama 2's) writes its ``▁`` only before the text at offset 0;
    the text after one of the template's special tokens gets none when the rendering is tokenized
    whole, so encoding it on its own must not add one either."""
    data = json.loads(config)
    changed = False

    def never(pre: Any) -> None:
        nonlocal changed
        if not isinstance(pre, dict):
            return
        if pre.get("type") == "Metaspace" and pre.get("prepend_scheme") == "first":
            pre["prepend_scheme"] = "never"
            changed = True
        for inner in pre.get("pretokenizers") or ():  # a Sequence
            never(inner)

    never(data.get("pre_tokenizer"))
    return json.dumps(data) if changed else None


def _rust_plain(tokenizer: Any, inner: bool = False) -> Any:
    """A private copy of a fast tokenizer's Rust tokenizer that reads special-token strings as text;
    ``inner``: one for text that does not open the string (``_inner_json``).

    A copy rather than ``split_special_tokens=True`` per call: transformers sets that as a flag
    on the shared Rust tokenizer before encoding, so a concurrent call on another thread could
    flip it back between the two and read the text's special tokens after all."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return None
    from tokenizers import Tokenizer

    def copy(config: str) -> Any:
        plain = Tokenizer.from_str(config)
        plain.no_truncation()
        plain.no_padding()
        plain.encode_special_tokens = True
        return plain

    with _plain_lock:
        size = int(backend.get_vocab_size(with_added_tokens=True))
        try:
            cached = _plain.get(tokenizer)
        except TypeError:  # not weakly referenceable: copied each time
            cached = None
        if cached is None or cached[0] != size:
            config = backend.to_str()
            plain = copy(config)
            inner_config = _inner_json(config)
            cached = (size, plain, plain if inner_config is None else copy(inner_config))
            try:
                _plain[tokenizer] = cached
            except TypeError:
                pass
        return cached[2] if inner else cached[1]


def plain_ids(tokenizer: Any, text: str, inner: bool = False) -> list[int]:
    """``text``'s ids with every special-token string in it read as ordinary text; no special
    tokens added. ``inner``: ``text`` follows a special token in a longer string (encoded as it
    is there, ``_inner_json``), not at its start."""
    plain = _rust_plain(tokenizer, inner)
    if plain is not None:
        return [int(i) for i in plain.encode(text, add_special_tokens=False).ids]
    return [int(i) for i in tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                                      verbose=False)["input_ids"]]


def plain_sequence(tokenizer: Any, text: str, max_length: int) -> list[int]:
    """``text`` as one model input: the tokenizer's own special tokens around it (BERT's ``[CLS]``
    ... ``[SEP]``), the special-token strings in it read as text, cut to ``max_length`` tokens on
    the tokenizer's ``truncation_side`` (the wrapping tokens kept, as transformers cuts)."""
    return plain_sequence_cut(tokenizer, text, max_length)[0]


def plain_sequence_cut(tokenizer: Any, text: str, max_length: int) -> tuple[list[int], bool]:
    """``plain_sequence``'s ids and whether ``text`` was cut to fit ``max_length``: a caller
    scoring the ids must be able to say that the model did not see all of it."""
    plain = _rust_plain(tokenizer)
    if plain is None:
        full = tokenizer(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        ids = tokenizer(text, add_special_tokens=True, split_special_tokens=True, truncation=True,
                        max_length=max_length)["input_ids"]
        return [int(i) for i in ids], len(full) > len(ids)
    encoding = plain.encode(text, add_special_tokens=False)
    room = max(1, max_length - int(tokenizer.num_special_tokens_to_add(pair=False)))
    cut = len(encoding.ids) > room
    if cut:
        encoding.truncate(room, direction=getattr(tokenizer, "truncation_side", "right"))
    return [int(i) for i in plain.post_process(encoding).ids], cut


def _strings(value: Any) -> list[str]:
    """Every string a message carries (content, content parts, tool-call names and arguments, the
    keys of its mappings too: a tool call's argument names are the model's text, which a template's
    ``tojson`` writes as it writes values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        keys = [k for k in value if isinstance(k, str)]
        return [*keys, *(s for k, v in value.items() if k not in _KEEP for s in _strings(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


class _Hidden:
    """Stands each special-token string spelled in the messages in for a private-use sentinel, so
    the template's rendering holds special-token strings only where the template wrote them."""

    def __init__(self, specials: Sequence[str], texts: Sequence[str]) -> None:
        self.specials = list(specials)
        used = "".join(texts)
        self.open, self.close = next((chr(c), chr(c + 1)) for c in range(0xE000, 0xF8FE, 2)
                                     if chr(c) not in used and chr(c + 1) not in used)
        self._find = re.compile("|".join(re.escape(s) for s in self.specials))
        self._back = re.compile(re.escape(self.open) + r"(\d+)" + re.escape(self.close))
        self._index = {s: i for i, s in enumerate(self.specials)}

    def hide(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._find.sub(lambda m: f"{self.open}{self._index[m.group(0)]}{self.close}", value)
        if isinstance(value, Mapping):  # keys too: a spelled special token in an argument name is text
            return {self.hide(k) if isinstance(k, str) else k: v if k in _KEEP else self.hide(v)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.hide(v) for v in value]
        return value

    def reveal(self, text: str) -> str:
        return self._back.sub(lambda m: self.specials[int(m.group(1))], text)


def encode_chat_literal(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]] | None = None,
                        add_generation_prompt: bool = False, field: str = "model.path",
                        template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """``messages`` through the tokenizer's chat template, tokenized with no special tokens added
    beyond the template's; special-token strings spelled inside the messages, or inside the
    ``tools``' schemas (a tool's description, a parameter's name: the tool author's text, which
    the template writes into the prompt), are read as text.
    The template renders within ``template_limits``' bounds; past one, a ConfigError on ``field``.
    ``template_kwargs``: extra template variables (``EngineConfig.chat_template_kwargs``)."""
    conversation = [dict(m) for m in messages]
    markers = template_markers(tokenizer, template_kwargs)
    texts = [*_strings(conversation), *_strings(list(tools or []))]
    if not any(s in t for t in texts for s in markers):  # nothing to read differently: as always
        rendered = render_chat(tokenizer, conversation, tools, add_generation_prompt, field, template_kwargs)
        # verbose=False: a conversation past the tokenizer's model_max_length is for the caller to
        # cut or end (an episode ends at its length cap); transformers' "indexing errors" warning
        # would only print over the run's own output
        return [int(i) for i in tokenizer(rendered, add_special_tokens=False, verbose=False)["input_ids"]]
    hidden = _Hidden(sorted(markers, key=len, reverse=True), texts)
    rendered = render_chat(tokenizer, hidden.hide(conversation), hidden.hide(list(tools)) if tools else tools,
                           add_generation_prompt, field, template_kwargs)
    ids = encode_with_markers(tokenizer, rendered, markers, hidden.reveal)
    return ids if ids is not None else _encode_rendered(tokenizer, rendered, markers, hidden)


def _encode_rendered(tokenizer: Any, rendered: str, specials: Mapping[str, Any], hidden: _Hidden) -> list[int]:
    """For a tokenizer without a Rust one (``encode_with_markers`` encodes the others whole): a
    rendering whose special-token strings are all the template's: those become their ids
    (their ``lstrip``/``rstrip`` eating the whitespace beside them, as the tokenizer does), the text
    between them, the messages' spelled ones put back, is encoded as text."""
    ids_of = {tok.content: int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.content in specials}
    parts = re.split("(" + "|".join(re.escape(s) for s in hidden.specials) + ")", rendered)
    for k in range(1, len(parts), 2):  # odd positions: the template's special tokens
        token = specials[parts[k]]
        if getattr(token, "lstrip", False):
            parts[k - 1] = parts[k - 1].rstrip()
        if getattr(token, "rstrip", False) and k + 1 < len(parts):
            parts[k + 1] = parts[k + 1].lstrip()
    ids: list[int] = []
    for k, part in enumerate(parts):
        if k % 2:
            ids.append(ids_of[part])
        elif part:
            ids.extend(plain_ids(tokenizer, hidden.reveal(part), inner=k > 0))
    return ids
