"""The samples of a backend's own sampling loop: each one's token budget and the ``Completion`` it
becomes, the same on every backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from polyrl.errors import ConfigError
from polyrl.types import Completion


def token_budgets(prompt_ids: Sequence[Sequence[int]], max_length: int, max_new_tokens: int, n: int) -> list[int]:
    """New tokens each of the ``n`` samples per prompt may take (prompt-major order), so prompt plus
    completion stays within ``max_length``; a prompt that already fills it is a ConfigError on
    ``model.max_length`` (it has no room for a single token)."""
    for i, ids in enumerate(prompt_ids):
        if len(ids) >= max_length:
            raise ConfigError(f"prompt {i} has {len(ids)} tokens, not below max_length={max_length}",
                              field="model.max_length", fix="raise model.max_length or shorten the prompt")
    return [min(max_new_tokens, max_length - len(ids)) for ids in prompt_ids for _ in range(n)]


def completions(decode: Callable[[list[int]], str], prompt_ids: Sequence[Sequence[int]], n: int,
                tokens: list[list[int]], logps: list[list[float]], finish: list[str]) -> list[Completion]:
    """The ``generate`` hook's answer: sample ``s`` (prompt-major, ``n`` per prompt) as a
    ``Completion`` of prompt ``s // n``, its text ``decode``'s (the engine's)."""
    return [
        Completion(
            prompt_index=s // n,
            prompt_ids=prompt_ids[s // n],
            completion_ids=tokens[s],
            logprobs=logps[s],
            text=decode(tokens[s]),
            finish_reason=finish[s],  # type: ignore[arg-type]
        )
        for s in range(len(tokens))
    ]
