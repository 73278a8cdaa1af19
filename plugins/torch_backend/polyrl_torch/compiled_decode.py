"""The written-out decode step (``polyrl_torch.decode_step``) compiled by torch's compiler, so the
small ops between its matmuls (norms, rotary embedding, SiLU x up, residual adds) run fused.

Why opt-in (``backends.options.compile_decode = true``): fusing them makes a few-row step faster
(``bench/compiled_decode_ab.py``), but compiling costs minutes of CPU on the first ``generate`` of
a process (the compiler's on-disk cache shortens later ones), which only a long run earns back;
and fused kernels round differently from the eager ops, so the sampler's log-probs differ from
the uncompiled step's by float rounding (they are still the sampler's own: the trainer sees the
log-probs of the tokens it was given). The packed weights stay oneDNN calls: the compiler sees
each as one opaque op (``packed_linear``) taking the packed tensor as an input, so a weight update
(a new packed tensor) needs no recompiling.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from polyrl.backend_kit.options import bool_option


def compile_requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.compile_decode`` (default off), checked to be a boolean."""
    return bool_option(options, "compile_decode", False,
                       fix="write compile_decode = true to compile the sampler's decode step (or remove it)")


@torch.library.custom_op("polyrl::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
    """``x @ weight.T + bias`` with the weight in oneDNN's packed layout (``PackedLinear``)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


@packed_linear.register_fake
def _packed_linear_shape(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
                         out_features: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


def compiled(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``forward`` compiled once for any row count and cache length (dynamic shapes)."""
    return torch.compile(forward, dynamic=True)
