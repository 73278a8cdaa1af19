"""What a template's end-of-turn token still writes after the end-of-sequence token a turn stopped on.

Why: some ChatML fine-tunes add ``<|im_end|>\\n`` to the vocabulary as one token, so their template's
end of an assistant turn is that token, while the model stops on ``<|im_end|>`` (its EOS). The ids
alone cannot say that one token's text opens the other's, so the episode glue inserted the marker
whole after the sampled EOS: every later turn was sampled and trained after
``<|im_end|><|im_end|>\\n<|im_start|>``, an end of turn written twice that no rendering holds. The
tokenizer's decode tells it: the marker's text after the EOS's (``\\n``) is what the turn still
lacks, encoded as the text it is (the sampled EOS is kept as sampled; the template's rendering has
the same text there, in one token the model did not sample).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from polyrl.backend_kit.literal_chat import plain_ids

#: ``rest(eos_id, marker_ids)``: the ids of the marker's text after the EOS token's, or None where
#: the marker's text does not hold that token's
EosRest = Callable[[int, Sequence[int]], "list[int] | None"]


def eos_rest(tokenizer: Any) -> EosRest | None:
    """``EosRest`` on an HF tokenizer's own decode (special tokens kept, spaces as written), or
    None for an object without ``decode``."""
    decode = getattr(tokenizer, "decode", None)
    if not callable(decode):
        return None

    def text(ids: Sequence[int]) -> str:
        return str(decode([int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def rest(eos_id: int, marker: Sequence[int]) -> list[int] | None:
        said, written = text([eos_id]), text(marker)
        at = written.find(said) if said else -1
        if at < 0:
            return None
        left = written[at + len(said):]
        # it follows the sampled EOS, a special token: encoded as text after one is in a rendering
        return plain_ids(tokenizer, left, inner=True) if left else []

    return rest
