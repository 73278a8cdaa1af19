"""A prompt's ids from the hook contract alone, for backends whose engines have no ``encode_prompt``.

Why: the startup checks (``polyrl.data.check_prompt_lengths``: every prompt below
``model.max_length``, every chat message in a role the template renders) count a prompt as
generation will see it. The built-in backends' engines offer ``encode_prompt``; a third-party
backend implements the hooks alone, and its users got neither check (an overlong row failed when
its batch was drawn, hours in, and a dropped system message never failed at all). The
``encode_chat`` hook is, by its contract, exactly ``generate``'s rendering of a chat prompt, and a
``TokenPrompt``'s ids are used verbatim; no hook says how a backend tokenizes plain text, so a
text prompt stays uncounted (None) rather than counted with a tokenizer the backend may not use.

The hook renders one conversation a call (its contract: ``messages`` in, 1-D ids out), so rows
cannot be sent as one batch without changing what third-party backends implement; a server-backed
backend still gets a request per row. What can be spared is asked once: a conversation already
rendered (a dataset repeating its prompts, the role check's stand-in conversations) is answered
from a memo of the latest distinct ones, bounded by count (``MEMO_SIZE``) and by the ids it holds
(``MEMO_TOKENS``): each is kept as an int32 array under a digest of the conversation (a tuple of
Python ints costs ~36 bytes an id, so 4096 prompts of 4k tokens held ~600 MB, and the JSON key
another copy of each prompt's text).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from polyrl.types import Prompt, TokenPrompt

if TYPE_CHECKING:
    from polyrl.engine import Engine

#: distinct conversations whose ids are kept at most
MEMO_SIZE = 4096
#: ids kept at most, all conversations together (16 MiB as int32); the oldest go first, and a
#: conversation longer than this alone is not kept
MEMO_TOKENS = 1 << 22


def _key(messages: Sequence[Mapping[str, Any]]) -> bytes | None:
    """A digest of the conversation's canonical JSON, or None when it is not JSON (then it is not
    kept); a digest, so the memo holds 32 bytes a conversation, not a copy of its text."""
    try:
        text = json.dumps(list(messages), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _packed(ids: Sequence[int]) -> np.ndarray:
    """The ids as a read-only int32 array (int64 for an id int32 cannot hold)."""
    out = np.asarray(ids, dtype=np.int64)
    if out.size == 0 or (int(out.min()) >= -(1 << 31) and int(out.max()) < 1 << 31):
        out = out.astype(np.int32)
    out.flags.writeable = False
    return out


class HookPromptEncoder:
    """``encoder(prompt)``: the prompt's ids, or None when no engine can say.

    The engines are asked in the order given (the generate engine first, as the ``encode_chat``
    contract says); the first one that answers renders every chat from then on, and when none
    answers, no chat is asked again."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self._engines = list(engines)
        self._renderer: Engine | None = None
        self._memo: OrderedDict[bytes, np.ndarray] = OrderedDict()
        #: ids the memo holds now (at most ``MEMO_TOKENS``)
        self.held_tokens = 0

    def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int] | None:
        key = _key(messages)
        if key is not None and key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key].tolist()  # the caller's own list of Python ints
        ids = self._asked(messages)
        if key is not None and ids is not None and len(ids) <= MEMO_TOKENS:
            self._memo[key] = _packed(ids)
            self.held_tokens += len(ids)
            while len(self._memo) > MEMO_SIZE or self.held_tokens > MEMO_TOKENS:
                self.held_tokens -= self._memo.popitem(last=False)[1].size
        return ids

    def _asked(self, messages: Sequence[Mapping[str, Any]]) -> list[int] | None:
        if self._renderer is not None:
            ids = self._renderer.encode_chat(messages, None, add_generation_prompt=True)
            return None if ids is None else [int(i) for i in ids]
        while self._engines:
            engine = self._engines[0]
            ids = engine.encode_chat(messages, None, add_generation_prompt=True)
            if ids is not None:
                self._renderer = engine
                return [int(i) for i in ids]
            self._engines.pop(0)  # this backend has no tokenizer: never asked again
        return None

    def __call__(self, prompt: Prompt) -> list[int] | None:
        if isinstance(prompt, TokenPrompt):
            return [int(i) for i in prompt.ids]
        if isinstance(prompt, str):
            return None
        return self.chat_ids(prompt)


__all__ = ["HookPromptEncoder"]
