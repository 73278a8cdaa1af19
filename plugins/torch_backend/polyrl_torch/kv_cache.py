"""A KV cache whose per-layer buffers are allocated once for the whole generation.

Why: transformers' ``DynamicLayer`` appends each decode step's keys and values with ``torch.cat``,
copying the layer's whole cache every step, so the copying grows with the square of the
completion length (at hundreds of tokens it rivals the attention itself). The sampler knows the
longest sequence up front (padded prompt + token budget), so each layer writes into a buffer of
that capacity and hands attention a view of the filled part: the same values, no copies.

The buffers may hold 16-bit keys and values in float32 (``preallocate``'s ``widen_16bit``): a
bfloat16 sampler's keys and values are attended in float32 on the CPU (``polyrl_torch.attention``),
so a bfloat16 cache is converted whole at every decode step, while a float32 one is converted once
per position, as it is written. Same values either way (bfloat16 widens to float32 exactly).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


def regrown(buffer: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    """A ``[rows, heads, capacity, dim]`` buffer holding ``buffer``'s first ``filled`` positions."""
    out = buffer.new_empty((*buffer.shape[:2], capacity, buffer.shape[-1]))
    out[:, :, :filled] = buffer[:, :, :filled]
    return out


def rows_of(buffer: torch.Tensor, filled: int, indices: torch.Tensor) -> torch.Tensor:
    """A buffer of the same capacity holding the rows ``indices`` (repeats allowed) of ``buffer``'s
    first ``filled`` positions: only the filled part is copied."""
    out = buffer.new_empty((len(indices), *buffer.shape[1:]))
    out[:, :, :filled] = buffer[:, :, :filled].index_select(0, indices)
    return out


class PreallocatedLayer(DynamicLayer):
    """``DynamicLayer`` with keys/values as views of buffers holding ``capacity`` positions."""

    def __init__(self, capacity: int, widen_16bit: bool = False) -> None:
        super().__init__()
        self.capacity = capacity
        self.widen_16bit = widen_16bit
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        wide = self.widen_16bit and key_states.dtype in (torch.bfloat16, torch.float16)
        self.dtype, self.device = torch.float32 if wide else key_states.dtype, key_states.device
        batch, heads, _, dim = key_states.shape
        self._keys = key_states.new_empty((batch, heads, self.capacity, dim), dtype=self.dtype)
        self._values = value_states.new_empty((batch, heads, self.capacity, value_states.shape[-1]), dtype=self.dtype)
        self.length = 0
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self._keys is not None and self._values is not None
        end = self.length + key_states.shape[-2]
        if end > self.capacity:  # more than promised: grow rather than fail
            self._grow(max(end, 2 * self.capacity))
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self.keys = self._keys[:, :, :end]
        self.values = self._values[:, :, :end]
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        assert self._keys is not None and self._values is not None
        self._keys, self._values = (regrown(t, self.length, capacity) for t in (self._keys, self._values))
        self.capacity = capacity

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The whole ``[rows, heads, capacity, dim]`` key and value buffers (None before the first
        update): what a decoder writing positions itself reads and writes (``polyrl_torch.fixed_decode``)."""
        if self._keys is None or self._values is None:
            return None
        return self._keys, self._values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows ``indices``: only the filled positions are copied."""
        if not self.length or self._keys is None or self._values is None:
            return
        self._keys, self._values = (rows_of(t, self.length, indices) for t in (self._keys, self._values))
        self.keys = self._keys[:, :, :self.length]
        self.values = self._values[:, :, :self.length]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            rows = self._keys.shape[0] if self._keys is not None else 0
            self.batch_select_indices(torch.arange(rows, device=self.device).repeat_interleave(repeats))

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self.length - abs(max_length)
        if self.length > max_length and self._keys is not None and self._values is not None:
            self.length = max_length
            self.keys = self._keys[:, :, :max_length]
            self.values = self._values[:, :, :max_length]


def preallocate(cache: Any, capacity: int, widen_16bit: bool = False) -> Any:
    """Swap ``cache``'s plain full-attention layers for preallocated ones (16-bit keys held in
    float32 with ``widen_16bit``); others stay as they are: sliding-window layers drop old keys,
    which a fixed buffer does not model."""
    cache.layers = [PreallocatedLayer(capacity, widen_16bit) if type(layer) is DynamicLayer else layer
                    for layer in cache.layers]
    return cache
