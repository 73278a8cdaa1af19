"""The torch backend's ``[backends.options]``: every key it reads, typed, ranged and read once.

Why one place: the engine reads them all when it loads, so a bad value fails then, naming
``backends.options.<key>``, not at the first scoring call deep inside a train step; and ``KEYS``
is what the plugin declares, so the core refuses a key no backend of the run reads (a typo).
Imports no torch: the plugin module registers ``KEYS`` at every polyrl start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from polyrl.backend_kit.batching import BUCKET_CALL_TOKENS
from polyrl.backend_kit.options import SCORE_BATCH_TOKENS, float_option, scoring_options, text_option

#: MB of logits (and their log-softmax) a training forward may keep for backward; above it each
#: chunk is recomputed in backward instead (0: always recompute).
LOGITS_MEMORY_MB = 1024

#: Every key this backend reads (``fsdp``, ``packed_generation``, ``decode_kernel``, ``lean_decode``,
#: ``shared_prompt_attention``, ``fixed_shape_decode``, ``deterministic``, ``retain_freed_memory`` and ``initial_adapter`` are read by
#: ``sharding``, ``generation_weights``, ``fixed_decode``, ``determinism``, ``host_memory`` and the engine; the engine checks them
#: at load too).
KEYS = ("attn_implementation", "bucket_call_tokens", "decode_kernel", "deterministic", "fixed_shape_decode", "fsdp", "gguf_file",
        "initial_adapter", "lean_decode", "logits_memory_mb", "packed_generation", "retain_freed_memory", "score_batch_tokens",
        "shared_prompt_attention", "shared_prompt_forward")


@attrs.frozen
class TorchOptions:
    """The scoring and loading switches, checked (see ``read``)."""

    shared_prompt_forward: bool = True
    bucket_call_tokens: int = BUCKET_CALL_TOKENS
    score_batch_tokens: int = SCORE_BATCH_TOKENS
    logits_memory_mb: float = LOGITS_MEMORY_MB
    attn_implementation: str = "sdpa"
    gguf_file: str | None = None

    @classmethod
    def read(cls, options: Mapping[str, Any]) -> TorchOptions:
        """From ``EngineConfig.options``; a wrong type or range is a ConfigError naming the key."""
        gguf = text_option(options, "gguf_file", None,
                           fix="name the .gguf file inside model.path, e.g. gguf_file = \"model-q8_0.gguf\"")
        return cls(
            **scoring_options(options),
            logits_memory_mb=float_option(options, "logits_memory_mb", LOGITS_MEMORY_MB, minimum=0,
                                          fix=f"give MB of logits kept for backward (default {LOGITS_MEMORY_MB})"),
            attn_implementation=text_option(options, "attn_implementation", "sdpa",
                                            fix='use a transformers attention, e.g. "sdpa" or "eager"') or "sdpa",
            gguf_file=gguf,
        )
