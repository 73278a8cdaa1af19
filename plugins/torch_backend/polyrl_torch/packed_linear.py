"""Linear layers whose weights live in oneDNN's packed layout, for the CPU sampler's copy.

``PackedLinear`` stands in for one ``nn.Linear``. ``FusedProjections`` packs sibling projections
that read the same input (attention's q/k/v, the MLP's gate/up) as one matrix: a decode step
multiplies a few rows by each weight, and one matmul over the siblings' stacked weights runs
faster than three small ones (the narrow k/v projections gain most, ``bench/decode_matmul.py
--fused``). Each sibling stays a module of its own (``PackedSlice``) so the model's forward, which
calls them one by one, is untouched: the first sibling called with an input computes every
sibling's output; the others take their columns of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from typing import Any

import torch

#: The row count oneDNN is told to expect when it picks the packed layout; measured on an
#: AVX-512 CPU, a large hint gave the fastest layout for 4, 32 and 368 rows alike.
PACKING_ROWS_HINT = 512

#: Sibling ``nn.Linear`` names that read the same input in every family that has them.
FUSABLE_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def pack_weight(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight`` (``[out, in]``, any dtype: rounded to ``dtype``) in oneDNN's blocked layout."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype).contiguous(), PACKING_ROWS_HINT)


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` whose weight lives in oneDNN's blocked layout (set by ``pack``)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # a plain parameter: load_state_dict fills it
        self.dtype = linear.weight.dtype
        self.packed: torch.Tensor | None = None

    def pack(self, weight: torch.Tensor) -> None:
        """Pack ``weight`` (``[out, in]``, any dtype: rounded to the layer's)."""
        self.packed = None  # freed first: the allocator hands the same memory back (no fresh page faults)
        self.packed = pack_weight(weight, self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.packed is not None, "PackedLinear used before pack()"
        return packed_matmul(x, self.packed, self.bias)


class FusedProjections:
    """Sibling projections of one input packed as one ``[sum(out), in]`` matrix.

    The siblings' outputs of the last input are held until each sibling has taken its share; a
    sibling called with another input (or twice with the same one) makes a fresh matmul, so the
    result never depends on the order or the pattern of the calls."""

    def __init__(self, members: Sequence[PackedSlice], dtype: torch.dtype) -> None:
        self.members = list(members)
        self.dtype = dtype
        ends = list(itertools.accumulate(m.out_features for m in members))
        self.bounds = list(zip([0, *ends[:-1]], ends))
        self.packed: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self._input: torch.Tensor | None = None
        self._outputs: torch.Tensor | None = None
        self._served: set[int] = set()

    def pack(self, weights: Sequence[torch.Tensor]) -> None:
        """Pack the siblings' weights, in member order; their biases (loaded into the members) too."""
        self.packed = self._input = self._outputs = None
        self.packed = pack_weight(torch.cat([w.detach().to(self.dtype) for w in weights]), self.dtype)
        biases = [m.bias for m in self.members]
        self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])

    def output(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Member ``index``'s projection of ``x``: its columns of the siblings' joint output."""
        assert self.packed is not None, "FusedProjections used before pack()"
        outputs = self._outputs
        if outputs is None or self._input is not x or index in self._served:
            outputs = self._outputs = packed_matmul(x, self.packed, self.bias)
            self._input, self._served = x, set()
        self._served.add(index)
        start, end = self.bounds[index]
        # contiguous, as a Linear's output is: a family may reshape it in ways a column slice refuses
        out = outputs[..., start:end].contiguous()
        if len(self._served) == len(self.members):  # every sibling served: let the input and outputs go
            self._input = self._outputs = None
        return out


class PackedSlice(torch.nn.Module):
    """One sibling of a ``FusedProjections``, in its ``nn.Linear``'s place."""

    def __init__(self, linear: torch.nn.Linear, index: int) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # a plain parameter: load_state_dict fills it, ``pack`` joins it
        self.index = index
        self.group: FusedProjections | None = None  # not a submodule: no cycle in the module tree

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.group is not None, "PackedSlice outside a FusedProjections"
        return self.group.output(x, self.index)


def pack_linears(model: Any, unfused: Collection[str] = ()) -> tuple[dict[str, PackedLinear],
                                                                       dict[tuple[str, ...], FusedProjections]]:
    """Replace every ``nn.Linear`` of ``model``: siblings that can be fused (same input size,
    dtype and bias presence, no weight named in ``unfused``, e.g. tied ones) by ``PackedSlice``s of
    one ``FusedProjections``, the rest by ``PackedLinear``s. Returns both, keyed by the HF names of
    the weights each one packs."""
    singles: dict[str, PackedLinear] = {}
    groups: dict[tuple[str, ...], FusedProjections] = {}
    for parent_name, parent in list(model.named_modules()):
        prefix = f"{parent_name}." if parent_name else ""
        for names in FUSABLE_SIBLINGS:
            linears: list[Any] = [getattr(parent, n, None) for n in names]
            weight_names = tuple(f"{prefix}{n}.weight" for n in names)
            if all(_fusable(layer, linears[0]) for layer in linears) and not set(weight_names) & set(unfused):
                members = [PackedSlice(layer, i) for i, layer in enumerate(linears)]
                group = FusedProjections(members, linears[0].weight.dtype)
                for name, member in zip(names, members):
                    member.group = group
                    setattr(parent, name, member)
                groups[weight_names] = group
    for name, module in list(model.named_modules()):
        if type(module) is torch.nn.Linear:
            parent_name, _, attr = name.rpartition(".")
            packed = PackedLinear(module)
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, packed)
            singles[f"{name}.weight"] = packed
    return singles, groups


def _fusable(layer: Any, first: Any) -> bool:
    return (type(layer) is torch.nn.Linear and layer.in_features == first.in_features
            and layer.weight.dtype == first.weight.dtype and (layer.bias is None) == (first.bias is None))
