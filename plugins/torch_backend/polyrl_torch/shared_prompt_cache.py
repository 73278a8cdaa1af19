"""A decode-time KV cache holding each distinct prompt's keys and values once for its whole group.

Why: GRPO samples a group of completions per prompt, and a per-row cache makes every decode step
read the prompt's keys and values once per row: for a 512-token prompt and 16 rows of SmolLM2 that
is ~380 MB a step in float32, as many bytes as the weights themselves. Here the prompt part is
stored once per distinct prompt and attended by one matmul for all the rows of its group (their
queries stacked as that matmul's rows), each row's own completion keys and values separately, and
the two partial softmaxes merged by their maxima and sums (flash attention's rescaling). The result
is the same attention up to float rounding (~1e-7 relative; tests/test_torch_shared_prompt_cache.py),
not bit for bit, so ``backends.options.shared_prompt_attention = false`` keeps the per-row cache.
Copying the prompt's cache to every row and, when rows finish, re-selecting the rows' prompt
parts are saved too.

Only the sampler's written-out decode step (``polyrl_torch.decode_step``) reads this layer, and
only for float32 copies; every active row has decoded the same number of tokens (rows only leave
the batch), so the completion part needs no mask. Where the copy runs polyrl's decode kernel, the
attention itself is one C call a layer (``native``: ``polyrl_torch.decode_attention``), equal to
these torch ops to float32 rounding.
"""

from __future__ import annotations

from typing import Any

import torch

from polyrl_torch import decode_attention
from polyrl_torch.kv_cache import regrown, rows_of


class SharedPromptLayer:
    """One decoder layer's cache: prompt keys/values per distinct prompt, completion ones per row."""

    def __init__(self, prompt_keys: torch.Tensor, prompt_values: torch.Tensor, prompt_seen: torch.Tensor,
                 owner: torch.Tensor, capacity: int, native: bool = False) -> None:
        """``prompt_keys``/``prompt_values``: ``[prompts, kv_heads, prompt_len, head_dim]``;
        ``prompt_seen``: ``[prompts, prompt_len]``, false at left padding; ``owner``: ``[rows]``,
        each row's prompt; ``capacity``: the most tokens a row will decode; ``native``: attend with
        the C code of ``polyrl_torch.decode_attention`` (where it fits these heads)."""
        self.prompt_keys = prompt_keys.contiguous()
        self.prompt_values = prompt_values.contiguous()
        self.prompt_hidden = ~prompt_seen.bool()[:, None, None, :]
        self.owner = owner
        self.capacity = capacity
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self.native = native and decode_attention.fits(self.prompt_keys.shape[-1], self.prompt_keys.dtype)
        self._scratch = torch.empty(0)
        self._place()

    def _place(self) -> None:
        """Each row's slot in its prompt's stack of queries (``slots`` per prompt, unused ones zero)."""
        prompts, rows = self.prompt_keys.shape[0], self.owner.shape[0]
        counts = torch.bincount(self.owner, minlength=prompts)
        self.slots = int(counts.max())
        order = torch.argsort(self.owner, stable=True)
        starts = counts.cumsum(0) - counts
        rank = torch.empty_like(self.owner)
        rank[order] = torch.arange(rows, device=self.owner.device) - starts[self.owner[order]]
        self.slot = self.owner * self.slots + rank
        #: rows already in slot order, every prompt with ``slots`` rows: stacking is a reshape
        self.dense = rows == prompts * self.slots and bool((self.slot == torch.arange(rows, device=self.slot.device)).all())

    def get_seq_length(self) -> int:
        return self.prompt_keys.shape[2] + self.length

    def append(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Write this step's ``[rows, kv_heads, head_dim]`` key and value of every row."""
        if self._keys is None or self._values is None:
            rows, heads, dim = key.shape
            self._keys = key.new_empty((rows, heads, self.capacity, dim))
            self._values = value.new_empty((rows, heads, self.capacity, value.shape[-1]))
        if self.length == self._keys.shape[2]:  # more than promised: grow rather than fail
            self._keys, self._values = (regrown(t, self.length, 2 * self.length) for t in (self._keys, self._values))
        self._keys[:, :, self.length] = key
        self._values[:, :, self.length] = value
        self.length += 1

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (rows that finished leave); prompts left without rows go too."""
        self.owner = self.owner[indices]
        if self._keys is not None and self._values is not None:
            self._keys, self._values = (rows_of(t, self.length, indices) for t in (self._keys, self._values))
        used = torch.bincount(self.owner, minlength=self.prompt_keys.shape[0]) > 0
        if not bool(used.all()):
            kept = used.nonzero()[:, 0]
            self.owner = (used.cumsum(0) - 1)[self.owner]
            self.prompt_keys, self.prompt_values = self.prompt_keys[kept], self.prompt_values[kept]
            self.prompt_hidden = self.prompt_hidden[kept]
        self._place()

    def attend(self, query: torch.Tensor, scale: float) -> torch.Tensor:
        """Softmax attention of ``query`` (``[rows, heads, head_dim]``, one per row, query heads
        grouped over the key/value heads as transformers' ``repeat_kv`` does) over the row's prompt
        and its completion so far; ``[rows, heads, head_dim]``."""
        assert self._keys is not None and self._values is not None, "append before attend"
        if self.native and query.dtype == self._keys.dtype == torch.float32:
            return self._attend_native(query, scale)
        rows, heads, dim = query.shape
        kv_heads = self.prompt_keys.shape[1]
        grouped = query.view(rows, kv_heads, heads // kv_heads, dim)
        # the prompt part: one matmul per prompt and key/value head, the group's queries as its rows
        scores = torch.matmul(self._stack(grouped), self.prompt_keys.transpose(-1, -2)).mul_(scale)
        scores.masked_fill_(self.prompt_hidden, float("-inf"))
        top = scores.amax(-1, keepdim=True)
        weights = scores.sub_(top).exp_()
        out = self._unstack(torch.matmul(weights, self.prompt_values))
        total, top = self._unstack(weights.sum(-1, keepdim=True)), self._unstack(top)
        # the completion part, per row, merged into the prompt's by rescaling both to the larger maximum
        scores = torch.matmul(grouped, self._keys[:, :, :self.length].transpose(-1, -2)).mul_(scale)
        new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
        weights = scores.sub_(new_top).exp_()
        rescale = top.sub_(new_top).exp_()
        out = out.mul_(rescale).add_(torch.matmul(weights, self._values[:, :, :self.length]))
        total = total.mul_(rescale).add_(weights.sum(-1, keepdim=True))
        return out.div_(total).reshape(rows, heads, dim)

    def _attend_native(self, query: torch.Tensor, scale: float) -> torch.Tensor:
        assert self._keys is not None and self._values is not None
        prompts, kv_heads, prompt_len, _ = self.prompt_keys.shape
        group = query.shape[1] // kv_heads
        if self._scratch.numel() < group * (prompt_len + self.length):  # room for the whole cache's scores
            self._scratch = torch.empty(group * (prompt_len + self._keys.shape[2]))
        return decode_attention.shared(query.contiguous(), self.prompt_keys, self.prompt_values,
                                       self.prompt_hidden.reshape(prompts, prompt_len).contiguous(), self.owner,
                                       self._keys, self._values, self.length, scale, self._scratch)

    def _stack(self, grouped: torch.Tensor) -> torch.Tensor:
        """``[rows, kv_heads, g, d]`` -> ``[prompts, kv_heads, slots * g, d]``."""
        prompts = self.prompt_keys.shape[0]
        if not self.dense:
            padded = grouped.new_zeros((prompts * self.slots, *grouped.shape[1:]))
            padded[self.slot] = grouped
            grouped = padded
        _, kv_heads, g, dim = grouped.shape
        return grouped.view(prompts, self.slots, kv_heads, g, dim).transpose(1, 2).reshape(
            prompts, kv_heads, self.slots * g, dim)

    def _unstack(self, stacked: torch.Tensor) -> torch.Tensor:
        """``[prompts, kv_heads, slots * g, x]`` -> ``[rows, kv_heads, g, x]`` (a new tensor)."""
        prompts, kv_heads, _, width = stacked.shape
        per_slot = stacked.view(prompts, kv_heads, self.slots, -1, width).transpose(1, 2)
        flat = per_slot.reshape(prompts * self.slots, kv_heads, -1, width)
        return flat if self.dense else flat[self.slot]


def share_prompts(cache: Any, prompt_seen: torch.Tensor, owner: torch.Tensor, capacity: int,
                  native: bool = False) -> None:
    """Turn ``cache``'s prefilled layers (one row per distinct prompt) into ``SharedPromptLayer``s
    for the rows ``owner`` names, each to decode at most ``capacity`` tokens (``native``: attending
    with ``polyrl_torch.decode_attention``)."""
    owner = owner.to(torch.int64).contiguous()
    cache.layers = [SharedPromptLayer(layer.keys, layer.values, prompt_seen, owner, capacity, native)
                    for layer in cache.layers]
