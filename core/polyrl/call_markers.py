"""The markers of the tool-call formats ``polyrl.agents.parsing`` reads, in one place.

Why a module of its own: the backends' completion decoder (``polyrl.backend_kit.tokens``) must keep
these in a completion's text when a tokenizer makes them special tokens (Mistral's ``[TOOL_CALLS]``
and ``[ARGS]``, Llama 3.1's ``<|python_tag|>``, Phi-4-mini's ``<|tool_call|>``): decoded with
``skip_special_tokens`` they vanished, so the parser saw a bare JSON list and no call of such a
model was ever run. The decoder imports this without importing the agents package.
"""

from __future__ import annotations

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
PHI4_OPEN, PHI4_CLOSE = "<|tool_call|>", "<|/tool_call|>"

#: every marker a call format is read by; a completion's text keeps each one its tokenizer makes special
CALL_MARKERS = (HERMES_OPEN, HERMES_CLOSE, PYTHON_TAG, MISTRAL_CALLS, MISTRAL_ARGS, PHI4_OPEN, PHI4_CLOSE)
