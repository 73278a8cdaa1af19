"""GPT-2's byte-level alphabet: the reversible map from the 256 bytes to printable characters.

Byte-level BPE vocabularies (GPT-2, SmolLM2, Llama 3, Qwen2) spell tokens in it; the GGUF
tokenizer check and the torch-free test tokenizer both need the same table.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def byte_to_char() -> dict[int, str]:
    """Printable bytes stand for themselves; the others get the code points from 256 up, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
