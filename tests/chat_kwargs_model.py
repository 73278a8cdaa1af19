"""The tiny test model with a chat template that reads a caller's variable, as Qwen3's reads
``enable_thinking``: its generation prompt opens the reasoning (``<think>\\n``) unless the caller
passes ``enable_thinking=False``, which writes an empty, closed think block instead."""

from __future__ import annotations

from pathlib import Path

from polyrl.testing.chat_templates import with_chat_template

OPEN = "<|im_start|>assistant\n<think>\n"
CLOSED = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}")


def with_thinking_switch(tiny_model_dir: str, dst: Path) -> str:
    """A copy of the tiny model whose chat template is ``TEMPLATE``."""
    return with_chat_template(tiny_model_dir, dst, TEMPLATE)
