"""The model's own tokenizer, as the remote backend uses it: encode prompts, decode ids, bound ids.

Why the backend needs one although the servers tokenize: the trainer trains on the prompt ids and
the reward scores the text. Letting a server tokenize a prompt (its template, its tokenizer, or a
hostile one's ``prompt_token_ids``) would train the policy on contexts it never sees, and trusting
its ``text`` would reward ids for text they do not decode to. So prompts are encoded here exactly
as the train backends encode them (text with the tokenizer's special tokens, an empty text as one
position; chats through ``apply_chat_template`` with the generation prompt, no BOS beyond the
template's), sent as token-id prompts the server must use verbatim, and each completion's text is
the decode of its ids (``completion_decoder``, as the train backends do: special tokens dropped, a
special ``<think>`` kept).
The files are the ones the train engine loads (``EngineConfig.model``, the run's model folder).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.tokens import completion_decoder, text_prompt_ids
from polyrl.logs import get_logger
from polyrl.serving.vocab import embedding_rows
from polyrl.text_validity import check_prompt

log = get_logger("polyrl.remote")


def folder_tokenizer(model_path: str) -> Any:
    """``transformers``' tokenizer of a model folder, loaded without the weights; None when the path
    is no folder or holds no tokenizer files. Raises what transformers raises on files it cannot read."""
    folder = model_path if model_path and os.path.isdir(model_path) else None
    if not folder or not any(os.path.isfile(os.path.join(folder, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    # never the folder's own Python (auto_map): transformers would otherwise ask on stdin
    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


class ModelTokenizer:
    """``transformers``' tokenizer of the model folder, or nothing (no folder, no tokenizer files)."""

    def __init__(self, model_path: str, template_kwargs: Mapping[str, Any] | None = None) -> None:
        self._tok: Any = None
        self._decode: Callable[[Sequence[int]], str] | None = None
        #: ``model.chat_template_kwargs``: what every chat rendering here passes to the template
        self.template_kwargs = dict(template_kwargs or {})
        self._lock = threading.Lock()  # one tokenizer object shared by the request threads
        folder = model_path if model_path and os.path.isdir(model_path) else None
        if folder:
            try:
                self._tok = folder_tokenizer(folder)
                self._decode = completion_decoder(self._tok)
            except Exception as exc:  # noqa: BLE001 - any failure: no local checks, said once
                log.warning("cannot load the model's tokenizer; prompts go to the servers to tokenize and "
                            "their text is used unchecked", model=folder, error=f"{type(exc).__name__}: {exc}")
        #: rows of the embedding table: a returned id past it would fail (or wrap) in the trainer
        self.vocab: int | None = embedding_rows(folder, self._tok) if folder else None

    @property
    def can_decode(self) -> bool:
        return self._tok is not None

    @property
    def can_encode(self) -> bool:
        """Text prompts can be encoded here (any tokenizer can; chats need ``can_render``)."""
        return self._tok is not None

    @property
    def can_render(self) -> bool:
        return self._tok is not None and bool(getattr(self._tok, "chat_template", None))

    def encode_text(self, text: str) -> list[int]:
        """A text prompt's ids, as the train backends' ``encode_prompt`` makes them (and so as the
        startup prompt-length check counted them): special tokens added, and an empty text given
        one position to predict from (the BOS, else the pad id). A lone surrogate is a ConfigError
        naming it (``polyrl.text_validity``), not the tokenizer's bare TypeError."""
        check_prompt(text, "a text prompt")
        with self._lock:
            return text_prompt_ids(self._tok, text)

    def render(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """A chat prompt's ids: the chat template with the generation prompt, as ``encode_chat``."""
        check_prompt(list(messages), "a chat prompt")
        with self._lock:
            return encode_chat_literal(self._tok, messages, None, add_generation_prompt=True,
                                       template_kwargs=self.template_kwargs)

    def decode(self, ids: Sequence[int]) -> str:
        with self._lock:
            return self._decode(ids) if self._decode is not None else \
                str(self._tok.decode(list(ids), skip_special_tokens=True))
