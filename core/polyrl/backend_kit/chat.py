"""What every backend's ``encode_chat`` checks before rendering a chat with the model's template."""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError


def require_chat_template(tokenizer: Any, model: str) -> None:
    """A clear ``error:`` instead of transformers' own exception when the model has no template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"the tokenizer of {model!r} has no chat template but a chat prompt was given", field="model",
            fix="use an instruct model with a chat template, or give plain-text prompts",
        )
