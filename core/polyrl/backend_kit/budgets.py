"""Each sample's token budget in a backend's own sampling loop: the same rule on every backend."""

from __future__ import annotations

from collections.abc import Sequence

from polyrl.errors import ConfigError


def token_budgets(prompt_ids: Sequence[Sequence[int]], max_length: int, max_new_tokens: int, n: int) -> list[int]:
    """New tokens each of the ``n`` samples per prompt may take (prompt-major order), so prompt plus
    completion stays within ``max_length``; a prompt that already fills it is a ConfigError on
    ``model.max_length`` (it has no room for a single token)."""
    for i, ids in enumerate(prompt_ids):
        if len(ids) >= max_length:
            raise ConfigError(f"prompt {i} has {len(ids)} tokens, not below max_length={max_length}",
                              field="model.max_length", fix="raise model.max_length or shorten the prompt")
    return [min(max_new_tokens, max_length - len(ids)) for ids in prompt_ids for _ in range(n)]
