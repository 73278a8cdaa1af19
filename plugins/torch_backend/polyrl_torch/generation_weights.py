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
it. It is refreshed lazily, tensor by tensor: before each ``generate`` each value's sources (the
live tensor, and for a LoRA-adapted weight its adapters and adapter state) are stamped
(``source_stamps``: storage address, in-place version count, and the optimizer's step count for
the tensors it holds, since fused AdamW bumps no version) and only the values whose stamp moved
are computed and loaded or re-packed again. Under LoRA that is the adapted projections: the frozen
embeddings (and the tied head packed from them), norms and unadapted layers stay as they are;
``import_weights`` and a checkpoint load (``TorchEngine.weight_updates``) refresh every tensor.
It costs one more copy of the model's memory; ``backends.options.packed_generation = false``
turns packing off.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from polyrl.backend_kit.options import bool_option
from polyrl_torch import decode_kernel
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
    """``nn.Linear`` whose weight lives in oneDNN's blocked layout, or (``kernel``) in the panels of
    polyrl's own float32 decode kernel (``decode_kernel``); set by ``pack``."""

    def __init__(self, linear: torch.nn.Linear, kernel: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # a plain parameter: load_state_dict fills it
        self.dtype = linear.weight.dtype
        self.kernel = kernel
        self.packed: torch.Tensor | None = None

    def pack(self, weight: torch.Tensor) -> None:
        """Pack ``weight`` (``[out, in]``, any dtype: rounded to the copy's)."""
        if self.kernel:  # in place: one pass, no fresh memory
            self.packed = decode_kernel.panels_of(weight.detach().to(self.dtype), into=self.packed)
            return
        self.packed = None  # freed first: the allocator hands the same memory back (no fresh page faults)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(self.dtype).contiguous(),
                                                              PACKING_ROWS_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.packed is not None, "PackedLinear used before pack()"
        if self.kernel:
            return decode_kernel.linear(x, self.packed, self.out_features, self.bias)
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
        kernel = False
        if packs_weights(engine):
            kernel = decode_kernel.wanted(engine.config.options, engine.device, sampler_dtype(engine),
                                          torch.get_num_threads())
            self.packed = _pack_linears(self.model, kernel)
        else:
            # the prefill's last position is a strided [rows, 1, hidden] view: torch's bfloat16 matmul
            # copied the whole expanded lm_head weight for it; a contiguous input takes the plain mm
            self.model.get_output_embeddings().register_forward_pre_hook(lambda _, args: (args[0].contiguous(),))
        #: the copy's single-token step written out (Llama-code models; None: the model's forward)
        self.decode_step = (LlamaDecodeStep(self.model, shared_prompt_attention_requested(engine.config.options))
                            if lean_decode_requested(engine.config.options) and decode_step_supports(self.model) else None)
        if self.decode_step is not None:  # the kernel's library also has the step's other ops
            self.decode_step.native = kernel
        #: names ``load_state_dict`` fills in the copy, and those aliasing another (a tied head)
        self._names = set(self.model.state_dict())
        self._tied = _tied_names(self.model)
        #: the copy's HF name of the input embeddings, which a tied packed head is packed from
        self._embedding_name = _parameter_name(self.model, self.model.get_input_embeddings().weight)
        #: HF name -> ``source_stamps``' stamp of what its value in the copy was computed from
        self.stamps: dict[str, tuple[Any, ...]] = {}
        self._updates = -1  # the engine's ``weight_updates`` when stamped (-1: never)
        #: ``weights_key`` when stamped, and the LoRA layers whose adapter state it covers
        self._key: tuple[Any, ...] = ()
        self._layers: list[Any] = []

    def current(self, engine: TorchEngine) -> Any:
        """The copy, first refreshed where the engine's weights changed since it was last made."""
        from polyrl_torch.weights import hf_sources

        key = weights_key(engine, self._layers)
        if key == self._key:
            return self.model  # no stamp can have moved: not one name stamped (every generate call asks)
        sources = hf_sources(engine)
        layers = [layer for _, layer in sources.values() if layer is not None]
        if layers != self._layers:
            key = weights_key(engine, layers)
        # keyed and stamped before any value is read: a write racing the reads is seen next time
        stamps = source_stamps(engine, sources)
        if engine.weight_updates != self._updates:
            self.stamps = {}  # weights replaced wholesale (an import, a checkpoint): every tensor again
        changed = {name for name, stamp in stamps.items() if self.stamps.get(name) != stamp}
        if changed:
            self._refresh(sources, changed)
        self.stamps, self._updates = stamps, engine.weight_updates
        self._key, self._layers = key, layers
        return self.model

    def forget(self, stamps: Mapping[str, tuple[Any, ...]] | None = None) -> None:
        """Take the copy's values as made from ``stamps`` (None: from nothing, so the next
        ``current`` computes every tensor): what ``bench/copy_refresh_ab.py`` times both ways with."""
        self.stamps, self._key = dict(stamps or {}), ()

    def _refresh(self, sources: Mapping[str, tuple[torch.Tensor, Any]], changed: set[str]) -> None:
        """Compute the ``changed`` names' values (LoRA folded) into the copy; the others are kept."""
        from polyrl_torch.weights import hf_value

        self._check_names(sources.keys())
        with torch.no_grad():
            plain = {name: hf_value(*sources[name]) for name in changed if name not in self.packed}
            if plain:
                self.model.load_state_dict(plain, strict=False)  # a subset: the names were checked above
            del plain
            for name in sorted(changed & self.packed.keys()):
                self.packed[name].pack(hf_value(*sources[name]))  # one folded weight alive at a time
            if self._embedding_name in changed:
                for name in self.packed.keys() - sources.keys():
                    # a tied output layer has no tensor of its own: it packs the (loaded) input embeddings
                    self.packed[name].pack(self._tied_source(name))

    def _check_names(self, names: Iterable[str]) -> None:
        """The engine's HF names must be the copy's (a tied head's may be missing)."""
        given = set(names)
        missing = self._names - self._tied - given
        unexpected = given - self._names - self.packed.keys()
        if missing or unexpected:
            raise RuntimeError(f"generation copy out of step with the model: missing "
                               f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}")

    def _tied_source(self, name: str) -> torch.Tensor:
        output = self.model.get_output_embeddings()
        if output is None or self.packed.get(name) is not output:
            raise RuntimeError(f"generation copy: no weight for {name} in the model's state")
        return self.model.get_input_embeddings().weight


def weights_key(engine: TorchEngine, layers: Sequence[Any]) -> tuple[Any, ...]:
    """All that ``source_stamps`` reads, in one walk of the module tree: every parameter's and
    buffer's ``tensor_stamp`` (the optimizer's count once for all), the engine's counters and
    ``layers``' adapter states. Why a second summary: stamping each name walks the tree several
    times (~4× this), and every generate call asks, an agent's every turn too; equal keys mean no
    stamp can have moved."""
    tensors = (t for module in engine.model.modules()
               for t in (*module._parameters.values(), *module._buffers.values()) if t is not None)
    return (engine.weight_updates, engine.optimizer_steps, *((t.data_ptr(), t._version) for t in tensors),
            *(adapter_state(layer) for layer in layers))


def source_stamps(engine: TorchEngine, sources: Mapping[str, tuple[torch.Tensor, Any]]) -> dict[str, tuple[Any, ...]]:
    """Per HF name, what ``hf_value`` computes it from, as it stands now: each source tensor's
    ``tensor_stamp`` and, for a LoRA-adapted weight, its layer's adapter state. Equal stamps: the
    value is the one the copy already holds, so it is neither computed nor loaded again."""
    held = ({id(p) for group in engine.optimizer.param_groups for p in group["params"]}
            if engine.optimizer is not None else set())
    out: dict[str, tuple[Any, ...]] = {}
    for name, (tensor, layer) in sources.items():
        tensors = [tensor] if layer is None else [tensor, *layer.parameters()]
        stamp = tuple(tensor_stamp(t, id(t) in held, engine.optimizer_steps) for t in tensors)
        out[name] = stamp if layer is None else (*stamp, *adapter_state(layer))
    return out


def tensor_stamp(tensor: torch.Tensor, held: bool, optimizer_steps: int) -> tuple[int, int, int]:
    """A tensor's storage address and in-place write count (``_version``: every in-place op on the
    tensor or a view of it bumps it, under ``no_grad`` too), and for a tensor the optimizer ``held``
    its step count (fused AdamW writes in place without bumping versions; -1 for the others, which
    only their versions and storage can show changed). Writes that bypass the version count (through
    ``.data``, or a numpy view) are not seen on a tensor the optimizer does not hold, as autograd
    does not see them either; ``TorchEngine.weight_updates`` makes the copy take every tensor again."""
    return tensor.data_ptr(), tensor._version, optimizer_steps if held else -1


def adapter_state(layer: Any) -> tuple[Any, ...]:
    """What besides its tensors decides a peft LoRA layer's folded weight: which adapters are active,
    enabled or merged into the base (peft merges through ``.data``, bumping no version), and their scales."""
    return (tuple(layer.active_adapters), bool(getattr(layer, "disable_adapters", False)),
            tuple(layer.merged_adapters), tuple(sorted(layer.scaling.items())))


def _pack_linears(model: Any, kernel: bool = False) -> dict[str, PackedLinear]:
    """Replace every ``nn.Linear`` of ``model`` by a ``PackedLinear`` (on polyrl's decode kernel when
    ``kernel``); keyed by its weight's HF name."""
    out: dict[str, PackedLinear] = {}
    for name, module in list(model.named_modules()):
        if type(module) is torch.nn.Linear:
            parent_name, _, attr = name.rpartition(".")
            packed = PackedLinear(module, kernel)
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


def _parameter_name(model: Any, tensor: torch.Tensor) -> str | None:
    """The state-dict name under which ``model`` holds ``tensor`` first (None: it does not)."""
    return next((name for name, value in model.state_dict(keep_vars=True).items() if value is tensor), None)
