"""The sampler's own copy of the policy: its linear weights packed for oneDNN, in ``compute_dtype``.

Why a copy at all: a decode step multiplies a few rows by every weight once, and at those shapes
torch's default matmul (MKL sgemm, which re-packs the weight on every call) is bound by how it
streams weights, not by arithmetic (``bench/decode_matmul.py``). Packing each weight once into
oneDNN's blocked layout, as torch's own compiler does for frozen inference graphs, lifts that
rate severalfold at a few rows and by about a third at tens of rows; the copy is re-packed only
when a weight changed. Mixed precision uses the same copy: autocast would cast the float32
weights to bfloat16 again every decode step, so the copy holds them in ``compute_dtype`` once.

The copy is a plain transformers model (no peft layers) holding the weights ``export_weights``
would give (LoRA folded in), each ``nn.Linear`` replaced by a ``PackedLinear`` where oneDNN can pack
it. It is refreshed lazily: before each ``generate`` the live parameters' storage and in-place
version counters, and the engine's update count, are compared with those it was made from, so an
optimizer step, ``import_weights``, a LoRA reset or a checkpoint load all refresh it
(``TorchEngine.weight_updates`` covers the writes version counters miss). It costs one more copy of
the model's memory; ``backends.options.packed_generation = false`` turns packing off.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from polyrl.backend_kit.options import bool_option
from polyrl_torch.attention import sampler_attention
from polyrl_torch.decode_step import LlamaDecodeStep
from polyrl_torch.decode_step import supports as decode_step_supports

if TYPE_CHECKING:
    from polyrl_torch.engine import TorchEngine

#: The row count oneDNN is told to expect when it picks the packed layout; measured on an
#: AVX-512 CPU, a large hint gave the fastest layout for 4, 32 and 368 rows alike.
PACKING_ROWS_HINT = 512
PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


def packing_requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.packed_generation`` (default on), checked to be a boolean."""
    return bool_option(options, "packed_generation", True,
                       fix="write packed_generation = false to sample with the training weights (or remove it)")


def lean_decode_requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.lean_decode`` (default on), checked to be a boolean."""
    return bool_option(options, "lean_decode", True,
                       fix="write lean_decode = false to run transformers' forward for every decode step (or remove it)")


def shared_prompt_attention_requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.shared_prompt_attention`` (default on), checked to be a boolean."""
    return bool_option(options, "shared_prompt_attention", True,
                       fix="write shared_prompt_attention = false to give every row its own copy of its prompt's "
                           "keys and values, bit for bit what transformers' forward computes (or remove it)")


def packing_available(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN packs weights for CPU matmuls in float32 and bfloat16 (when torch was built with it);
    bfloat16 only where oneDNN has a bfloat16 path on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT):
    on an AVX2-only CPU packing raised, so ``compute_dtype = "bfloat16"`` failed at the first generate."""
    if not (device.type == "cpu" and dtype in PACKABLE_DTYPES and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    return dtype != torch.bfloat16 or bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def sampler_dtype(engine: TorchEngine) -> torch.dtype:
    return engine.compute_dtype or engine.dtype


def packs_weights(engine: TorchEngine) -> bool:
    """Whether the sampler's copy holds packed linear weights: asked for (the default) and possible here."""
    return packing_requested(engine.config.options) and packing_available(engine.device, sampler_dtype(engine))


def uses_generation_copy(engine: TorchEngine) -> bool:
    """Whether the sampler runs a copy: mixed precision, or packed weights on this CPU (never
    under FSDP, whose shards are gathered only for the call)."""
    return engine.fsdp is None and (engine.compute_dtype is not None or packs_weights(engine))


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` whose weight lives in oneDNN's blocked layout (set by ``pack``)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # a plain parameter: load_state_dict fills it
        self.dtype = linear.weight.dtype
        self.packed: torch.Tensor | None = None

    def pack(self, weight: torch.Tensor) -> None:
        """Pack ``weight`` (``[out, in]``, any dtype: rounded to the copy's)."""
        self.packed = None  # freed first: the allocator hands the same memory back (no fresh page faults)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(self.dtype).contiguous(),
                                                              PACKING_ROWS_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.packed is not None, "PackedLinear used before pack()"
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")


class GenerationCopy:
    """The sampler's model, refreshed from the engine when its weights changed."""

    def __init__(self, engine: TorchEngine) -> None:
        from transformers import AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        source = engine.causal_lm
        # the engine's attention (CPU: grouped), in its sampler form (AMX CPUs: bfloat16 natively)
        attn = sampler_attention(getattr(source.config, "_attn_implementation", None) or "sdpa")
        config = copy.deepcopy(source.config)  # from_config sets the attention on the config it is given
        with no_init_weights():  # every weight is overwritten by ``current``: skip the random init
            self.model: Any = AutoModelForCausalLM.from_config(config, dtype=sampler_dtype(engine),
                                                               attn_implementation=attn)
        self.model.tie_weights()  # init_weights (skipped) is what ties them; a no-op when untied
        self.model.to(engine.device).eval().requires_grad_(False)
        self.model.generation_config = source.generation_config
        #: HF name of each packed linear's weight -> the module that packs it
        self.packed: dict[str, PackedLinear] = {}
        if packs_weights(engine):
            self.packed = _pack_linears(self.model)
        else:
            # the prefill's last position is a strided [rows, 1, hidden] view: torch's bfloat16 matmul
            # copied the whole expanded lm_head weight for it; a contiguous input takes the plain mm
            self.model.get_output_embeddings().register_forward_pre_hook(lambda _, args: (args[0].contiguous(),))
        #: the copy's single-token step written out (Llama-code models; None: the model's forward)
        self.decode_step = (LlamaDecodeStep(self.model, shared_prompt_attention_requested(engine.config.options))
                            if lean_decode_requested(engine.config.options) and decode_step_supports(self.model) else None)
        self._made_from: tuple[Any, ...] = ()

    def current(self, engine: TorchEngine) -> Any:
        """The copy, first refreshed if any of the engine's weights changed since it was made."""
        fingerprint = weights_fingerprint(engine)
        if fingerprint != self._made_from:
            self._refresh(engine)
            self._made_from = fingerprint
        return self.model

    def _refresh(self, engine: TorchEngine) -> None:
        from polyrl_torch.weights import hf_state_dict

        with torch.no_grad():
            state = hf_state_dict(engine)  # LoRA folded, tied duplicates dropped
            linear = {name: state.pop(name) for name in list(state) if name in self.packed}
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            missing = [k for k in missing if k not in self.packed]
            tied = {k for k in missing if k in _tied_names(self.model)}
            if unexpected or set(missing) - tied:
                raise RuntimeError(f"generation copy out of step with the model: missing "
                                   f"{sorted(set(missing) - tied)[:3]}, unexpected {unexpected[:3]}")
            for name, module in self.packed.items():
                # a tied output layer has no tensor of its own: it packs the (loaded) input embeddings
                module.pack(linear[name] if name in linear else self._tied_source(name))

    def _tied_source(self, name: str) -> torch.Tensor:
        output = self.model.get_output_embeddings()
        if output is None or self.packed.get(name) is not output:
            raise RuntimeError(f"generation copy: no weight for {name} in the model's state")
        return self.model.get_input_embeddings().weight


def weights_fingerprint(engine: TorchEngine) -> tuple[Any, ...]:
    """The engine's update count and each parameter's (storage address, in-place write count):
    changes whenever a weight does (the count covers fused AdamW, which bumps no version)."""
    return (engine.weight_updates, *((p.data_ptr(), p._version) for p in engine.model.parameters()))


def _pack_linears(model: Any) -> dict[str, PackedLinear]:
    """Replace every ``nn.Linear`` of ``model`` by a ``PackedLinear``; keyed by its weight's HF name."""
    out: dict[str, PackedLinear] = {}
    for name, module in list(model.named_modules()):
        if type(module) is torch.nn.Linear:
            parent_name, _, attr = name.rpartition(".")
            packed = PackedLinear(module)
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, packed)
            out[f"{name}.weight"] = packed
    return out


def _tied_names(model: Any) -> set[str]:
    """Parameter names that alias another one (e.g. ``lm_head.weight`` tied to the embeddings)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.data_ptr() in seen:
            tied.add(name)
        else:
            seen[tensor.data_ptr()] = name
    return tied
