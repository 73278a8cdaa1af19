"""The model folder's tokenizer, as the checks made before any weight loads ask it.

Why a module of its own: how the chat template shows a tool's result, which prompt roles it drops
and whether later episode turns see a context it never shows are each asked of the model folder's
tokenizer alone (seconds, no weights). ``trainer.check_run`` (``polyrl launch`` and its
``--dry-run``) asks all three, and each loaded that tokenizer again: one ``FolderChat`` passed down
loads it once, on the first question, and renders as the engines do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from polyrl.control_chars import ControlProbe

#: (``encode_chat(messages, tools, add_generation_prompt) -> ids``, ``decode(ids) -> text``)
ChatPair = tuple[Callable[[Sequence[Mapping[str, Any]], "Sequence[Mapping[str, Any]] | None", bool], np.ndarray],
                 Callable[..., str]]


class FolderChat:
    """A model folder's chat rendering and completion decoding, its tokenizer loaded at most once."""

    def __init__(self, model_path: str, template_kwargs: Mapping[str, Any] | None = None) -> None:
        self.model_path = model_path
        #: ``model.chat_template_kwargs``: passed to every rendering, as the engines pass them
        self.template_kwargs = template_kwargs
        self._asked = False
        self._chat: ChatPair | None = None
        #: the folder's tokenizer, once ``chat`` has loaded it (None: it could not be loaded here)
        self._tokenizer: Any = None

    def chat(self) -> ChatPair | None:
        """(``encode``, ``decode``): rendering as the engines do and decoding as completions are
        (think tags kept); None where the folder's tokenizer cannot be loaded here (a GGUF file, no
        tokenizer files, a tokenizer needing the folder's own code) or has no chat template, so the
        checks made once the models load stand."""
        if not self._asked:
            self._asked = True
            self._chat = self._load()
        return self._chat

    def _load(self) -> ChatPair | None:
        from polyrl.backend_kit.literal_chat import encode_chat_literal
        from polyrl.backend_kit.tokens import completion_decoder
        from polyrl.remote_tokenizer import folder_tokenizer

        try:
            tok = folder_tokenizer(self.model_path)
        except Exception:  # noqa: BLE001 - the backend loads it its own way; its check stands
            return None
        if tok is None:
            return None
        self._tokenizer = tok
        if not getattr(tok, "chat_template", None):
            return None
        kwargs = self.template_kwargs

        def encode(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                   add_generation_prompt: bool) -> np.ndarray:
            ids = encode_chat_literal(tok, messages, tools, add_generation_prompt, template_kwargs=kwargs)
            return np.asarray(ids, dtype=np.int64)

        return encode, completion_decoder(tok)

    def control_probe(self) -> ControlProbe | None:
        """The folder tokenizer's ``ControlProbe`` (text encoded as the engines encode a text
        prompt), or None where it cannot be loaded here: the run's own check stands."""
        from polyrl.backend_kit.tokens import text_prompt_ids
        from polyrl.control_chars import ControlProbe

        self.chat()
        tok = self._tokenizer
        if tok is None:
            return None
        return ControlProbe(lambda text: text_prompt_ids(tok, text), tok.decode)


__all__ = ["ChatPair", "FolderChat"]
