"""Which message roles a chat template shows the model, asked of the template itself.

Why: a template writes the roles it knows and drops any other message without a word. Qwen2.5's
writes ``system``, ``user``, ``assistant`` and ``tool`` and nothing of a ``developer`` or
``ipython`` message; Phi-3's drops ``tool`` too. A dataset prompt or an environment's first
messages holding such a message reached the model without it, and nobody was told. No list of
roles per family is kept here: a message's role is shown when its text changes the rendering (two
renderings with different stand-in texts in its messages of that role differ), asked once per
role and place (the first message, or a later one) and kept for the tokenizer's life.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from polyrl.data_arrow import CHAT_ROLES

#: ``render(messages) -> ids``: the conversation as the model would see it (generation prompt included)
Render = Callable[[list[dict[str, Any]]], Any]

#: what to do about a message the template drops (the environment's case; a dataset's adds
#: ``MODEL_FIX``: its prompts may be written for another model)
ROLE_FIX = "give that text a role the template renders (its instructions as 'system', or 'user')"
MODEL_FIX = ", or use a model whose chat template renders that role"

_MARKS = ("a", "b c d")  # two stand-in texts: a template that shows a message renders them apart


def _differs(render: Render, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool | None:
    """Whether ``a`` and ``b`` render apart; None when the template refuses either (its own error
    says so where the conversation is rendered for real)."""
    try:
        return not np.array_equal(np.asarray(render(a)), np.asarray(render(b)))
    except Exception:  # noqa: BLE001 - the template is the model folder's code
        return None


class TemplateRoles:
    """What one tokenizer's chat template shows; see the module docstring."""

    def __init__(self) -> None:
        self._shown: dict[tuple[str, bool], bool] = {}
        self._in_place: dict[bool, tuple[str, ...]] = {}

    def dropped(self, messages: Sequence[Mapping[str, Any]], render: Render) -> int | None:
        """The index of the first message whose text the template does not render, or None."""
        for i, m in enumerate(messages):
            key = (str(m.get("role")), i == 0)
            if key not in self._shown:
                self._shown[key] = self._probe(messages, key, render)
            if not self._shown[key]:
                return i
        return None

    @staticmethod
    def _probe(messages: Sequence[Mapping[str, Any]], key: tuple[str, bool], render: Render) -> bool:
        """Whether messages of ``key``'s role and place are shown: their text swapped for each
        stand-in in turn. A template that refuses the probe is taken to show them (refusing is
        not dropping)."""
        def marked(text: str) -> list[dict[str, Any]]:
            return [{**m, "content": text} if (str(m.get("role")), i == 0) == key else dict(m)
                    for i, m in enumerate(messages)]

        return _differs(render, marked(_MARKS[0]), marked(_MARKS[1])) is not False

    def shown_in_place(self, messages: Sequence[Mapping[str, Any]], index: int, render: Render) -> list[str]:
        """The roles of ``CHAT_ROLES`` the template shows in message ``index``'s place (for the
        error that names what to use instead), asked once per place."""
        first = index == 0
        if first not in self._in_place:
            def placed(role: str, text: str) -> list[dict[str, Any]]:
                out = [dict(m) for m in messages]
                out[index] = {"role": role, "content": text}
                return out

            self._in_place[first] = tuple(
                r for r in CHAT_ROLES if _differs(render, placed(r, _MARKS[0]), placed(r, _MARKS[1])) is True)
        return list(self._in_place[first])

    def problem(self, messages: Sequence[Mapping[str, Any]], render: Render) -> tuple[int, str] | None:
        """(the index of the first message the template drops, what it drops and what it would
        show there), or None when it shows every message."""
        i = self.dropped(messages, render)
        if i is None:
            return None
        shown = self.shown_in_place(messages, i, render)
        there = ", ".join(map(repr, shown)) if shown else "none of " + ", ".join(map(repr, CHAT_ROLES))
        return i, (f"has role {str(messages[i].get('role'))!r}, which the model's chat template does not render "
                   f"(in that place it renders {there}): the model would never read that message")


__all__ = ["MODEL_FIX", "ROLE_FIX", "Render", "TemplateRoles"]
