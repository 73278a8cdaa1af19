"""The text a reward model scores for a (prompt, completion) pair, the same for every backend."""

from __future__ import annotations

from typing import Any

from polyrl.types import Prompt


def render_pair(tokenizer: Any, prompt: Prompt, completion: str, chat_template: bool) -> str:
    """The conversation rendered by the reward model's chat template (when asked and it has one),
    else the prompt's text followed by the completion."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]  # type: ignore[union-attr]  # FIXME: TokenPrompt
        messages.append({"role": "assistant", "content": completion})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    if isinstance(prompt, str):
        return prompt + completion
    return "\n".join(str(m.get("content", "")) for m in prompt) + completion  # type: ignore[union-attr]  # FIXME: TokenPrompt
