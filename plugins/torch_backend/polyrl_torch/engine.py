"""``TorchEngine``: a transformers causal LM, its tokenizer, optional LoRA and the optimizer.

The engine only loads and holds state; the hooks live in ``generation``, ``scoring``,
``training`` and ``weights`` so each file does one job. Everything that can be wrong in the
user's config is reported as a ``ConfigError`` naming the field and the fix.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from pickle import UnpicklingError  # its type only: what torch.load(weights_only=True) raises
from typing import Any

import torch

from polyrl.backend_kit.chat import require_chat_template
from polyrl.backend_kit.options import text_option
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.prompt_batch import encode_prompts
from polyrl.backend_kit.model_folders import (pickled_code_error, remote_code_error,
                                              unknown_type_error)
from polyrl.backend_kit.tokens import CompletionDecoding, given_a_start, pad_token_id, text_prompt_ids
from polyrl.backend_kit.weight_headers import config_sizes, refuse_sizes_beyond_weights
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.types import ALL_LINEAR, EngineConfig, Prompt, TokenPrompt
from polyrl_torch import decode_kernel, determinism, distributed, fixed_decode, sharding
from polyrl_torch.attention import needs_eager_attention, register_grouped_sdpa
from polyrl_torch.devices import resolve_device
from polyrl_torch.generation_weights import (lean_decode_requested, packing_requested,
                                             shared_prompt_attention_requested)
from polyrl_torch.host_memory import retain_freed_memory, retain_requested
from polyrl_torch.load_report import held_load_report
from polyrl_torch.loading_info import CONFIG_FIX, refuse_mismatched_shapes, shown
from polyrl_torch.model_location import model_location as _model_location
from polyrl_torch.options import TorchOptions
from polyrl_torch.rms_norm import fuse_rms_norms

#: float16 runs on CPU too (torch 2.x has the kernels) but is no faster there than bfloat16;
#: it is for GPUs without bfloat16 and for matching a float16 generator.
DTYPES: Mapping[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                     "float16": torch.float16}
ADAPTER = "default"  # the single peft adapter name this backend uses
#: ``EngineConfig.compute_dtype`` values this backend runs under autocast (mixed precision)
COMPUTE_DTYPES = ("bfloat16",)
#: /proc/cpuinfo flags of a CPU with native bfloat16 dot products (AVX512-BF16, AMX)
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _absolute_base(peft_config: Any) -> None:
    """``peft_config``'s ``base_model_name_or_path`` (the model folder as given, which peft writes
    into every saved ``adapter_config.json``) made absolute, now, while the working directory is
    the one it was given in. Why: a relative folder ("./my_model") names nothing for a script that
    loads the run's adapter (``AutoPeftModelForCausalLM``) from another directory."""
    base = peft_config.base_model_name_or_path
    if isinstance(base, str) and base and Path(base).is_dir():
        peft_config.base_model_name_or_path = str(Path(base).resolve())


def has_native_bf16(flags: frozenset[str]) -> bool:
    """Whether these CPU flags name a native bfloat16 dot product (else torch emulates it)."""
    return any(f in flags for f in NATIVE_BF16_FLAGS)


@functools.cache
def warn_emulated_bf16() -> None:
    """Once per process: every engine of a run would otherwise repeat it."""
    get_logger("polyrl.torch").warning(
        "compute_dtype bfloat16 on a CPU without native bfloat16 (no avx512_bf16 / amx_bf16 flag): "
        "its bfloat16 matmuls may be slower than float32", fix="remove model.compute_dtype")


def peft_target_modules(lora: Any) -> str | list[str]:
    """peft's spelling: the string "all-linear" (a one-item list would be read as a module name)."""
    return ALL_LINEAR if lora.all_linear else list(lora.target_modules)


def merged_weight(layer: Any, weight: torch.Tensor) -> torch.Tensor:
    """A new tensor ``weight + scale * B @ A`` for a peft LoRA ``Linear``: one fused ``addmm`` (peft's
    ``get_delta_weight`` writes the product, then its scaled copy, then the sum: three passes over
    every adapted weight before each generation); other layer kinds go through peft."""
    a, b = layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight
    plain = (a.dim() == 2 and not getattr(layer, "fan_in_fan_out", False)
             and not (getattr(layer, "use_dora", {}) or {}).get(ADAPTER, False))
    if not plain:
        return weight + layer.get_delta_weight(ADAPTER).to(weight.dtype)
    return torch.addmm(weight, b.to(weight.dtype), a.to(weight.dtype), alpha=float(layer.scaling[ADAPTER]))


class TorchEngine(CompletionDecoding):
    """One loaded model. ``model`` is what the hooks run (a ``PeftModel`` when LoRA is on)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        if config.dtype not in DTYPES:
            raise ConfigError(f"dtype {config.dtype!r} is not supported by the torch backend",
                              field="dtype", fix=f"use one of {', '.join(DTYPES)}")
        self.dtype = DTYPES[config.dtype]
        self.device = resolve_device(config.device)
        if self.dtype == torch.float16 and self.device.type == "cpu":
            get_logger("polyrl.torch").warning(
                "float16 on CPU: torch has no fast float16 matmul on most CPUs, it runs far slower "
                "than bfloat16 (README, Backends)", fix="use dtype bfloat16 on CPU")
        #: autocast's dtype when mixed precision is on (None: compute in ``self.dtype``)
        self.compute_dtype = self._compute_dtype(config)
        if config.role == "train":
            self.device = distributed.local_device(self.device)  # cuda:LOCAL_RANK under torchrun
            distributed.init_from_env(self.device, config.collective_timeout_s)  # a no-op outside torchrun
        #: every option checked now (a bad value fails at load, not at the first generate or step)
        self.options = TorchOptions.read(config.options)
        packing_requested(config.options)
        lean_decode_requested(config.options)
        shared_prompt_attention_requested(config.options)
        fixed_decode.mode(config.options)
        if decode_kernel.mode(config.options) == "on":
            decode_kernel.wanted(config.options, self.device, torch.float32)  # "on" where it cannot run: an error now
        if determinism.requested(config.options):
            determinism.enable()  # before this engine's first CUDA matmul: see polyrl_torch.determinism
        # FSDP2 when asked for under torchrun (a no-op alone): see polyrl_torch.sharding
        shard = sharding.requested(config.options) and config.role == "train" and distributed.active()
        if retain_requested(config.options) and self.device.type == "cpu":
            retain_freed_memory()  # no page faults for every large tensor: see polyrl_torch.host_memory
        self.use_configured_threads()
        torch.manual_seed(config.seed)  # LoRA init draws from the global generator
        #: The sampler's generator when a call passes no seed: repeatable per engine seed.
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed)

        folder, gguf_file = _model_location(config.model, self.options.gguf_file)
        self.model_dir, self.gguf_file = folder, gguf_file
        extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        extra["trust_remote_code"] = bool(config.trust_remote_code)  # explicit: never on by accident
        self.tokenizer, model = _load_pretrained(
            folder, extra, dtype=self.dtype, attn_implementation=self.options.attn_implementation)
        if needs_eager_attention(model.config):
            model.set_attn_implementation("eager")  # SDPA would drop the attention soft-cap: see attention
        elif self.device.type == "cpu" and getattr(model.config, "_attn_implementation", None) == "sdpa":
            model.set_attn_implementation(register_grouped_sdpa())  # no per-head key/value copies: see attention
        if not shard:
            model.to(self.device)  # FSDP moves each unit's shards itself: the whole model never is
        model.eval()
        disable_dropout(model)  # before LoRA: the adapters' own dropout is the user's lora.dropout
        fuse_rms_norms(model)  # float32 RMSNorm in fewer passes over memory: see polyrl_torch.rms_norm
        model.requires_grad_(config.role == "train" and config.lora is None)

        self.lora = config.lora
        if config.gradient_checkpointing and config.role == "train":
            enable_gradient_checkpointing(model)
        if config.lora is not None:
            model = self._add_lora(model, config.lora)
            adapter = text_option(config.options, "initial_adapter", None,
                                  fix="name a folder PeftModel.save_pretrained wrote, or remove the option")
            if adapter is not None:  # a script's PeftModel: training starts from its A and B
                from polyrl_torch.initial_adapter import load_initial_adapter

                load_initial_adapter(model, adapter, config.lora, ADAPTER)
        self.model = model
        self.eos_ids = self._eos_ids()
        self.pad_id = pad_token_id(self.tokenizer)

        #: The FSDP2 units, or None (not asked for, or one process).
        self.fsdp = sharding.shard(self) if shard else None

        #: the sampler's packed / ``compute_dtype`` model (``polyrl_torch.generation_weights``), made on first use
        self.generation_copy: Any = None
        #: counts writes replacing the weights wholesale (``import_weights``, a checkpoint load):
        #: the generation copy takes every tensor again after one
        self.weight_updates = 0
        #: counts optimizer steps: fused AdamW writes the tensors it holds in place without bumping
        #: their version counters, so the generation copy takes those again when this moves
        self.optimizer_steps = 0
        self.optimizer: torch.optim.Optimizer | None = None
        if config.role == "train":
            params = [p for p in self.model.parameters() if p.requires_grad]
            opt = config.optimizer
            self.optimizer = torch.optim.AdamW(
                params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                fused=self.fused_optimizer(),
            )

    def fused_optimizer(self) -> bool:
        """AdamW's fused kernel: every parameter updated in one pass instead of a Python loop over
        the tensors (much faster for models of many small tensors), FSDP's sharded parameters
        included; other devices keep the per-tensor loop."""
        return self.device.type in ("cpu", "cuda")

    def _compute_dtype(self, config: EngineConfig) -> torch.dtype | None:
        if config.compute_dtype is None or config.compute_dtype == config.dtype:
            return None
        if config.compute_dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"compute_dtype {config.compute_dtype!r} is not supported by the torch backend",
                              field="model.compute_dtype",
                              fix=f"use one of {', '.join(COMPUTE_DTYPES)}, or remove it to compute in model.dtype")
        if self.device.type == "cpu" and not has_native_bf16(cpu_flags()):
            warn_emulated_bf16()
        return DTYPES[config.compute_dtype]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Mixed precision for a block of forward computation: matmuls in ``compute_dtype`` on
        the ``dtype`` weights (cast copies), or nothing when it is off. Backward runs outside it,
        as torch recommends; the scorers upcast logits before their log-softmax either way."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def use_configured_threads(self) -> None:
        """Apply ``threads`` to the calling thread: an OpenMP team size is per thread, so a worker
        thread (generation.overlap) would otherwise use every core and fight the trainer for them."""
        if self.config.threads is not None:
            torch.set_num_threads(int(self.config.threads))

    # --- setup helpers -------------------------------------------------------------------------

    @staticmethod
    def _add_lora(model: Any, lora: Any) -> Any:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model

        from polyrl_torch.lora_linear import fuse_lora_layers
        from polyrl_torch.lora_targets import peft_targets, transposed_layers

        linear = linear_module_names(model)
        # full module paths: the MLX backend's set for the same lora (polyrl.backend_kit.lora_targets)
        targets = peft_targets(model, lora)
        peft_config = PeftLoraConfig(
            r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
            fan_in_fan_out=transposed_layers(model, targets), task_type="CAUSAL_LM", bias="none",
        )
        peft_model = get_peft_model(model, peft_config, adapter_name=ADAPTER)
        _absolute_base(peft_model.peft_config[ADAPTER])
        refuse_unfoldable_adapters(peft_model, linear)
        fuse_lora_layers(peft_model, ADAPTER)  # peft's math without its full-width passes: see lora_linear
        return peft_model

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for value in (self.tokenizer.eos_token_id,
                      getattr(getattr(self.causal_lm, "generation_config", None), "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, Sequence):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    # --- accessors -----------------------------------------------------------------------------

    @property
    def causal_lm(self) -> Any:
        """The transformers ``*ForCausalLM`` (inside the peft wrapper when LoRA is on)."""
        if self.lora is not None:
            return self.model.get_base_model()
        return self.model

    @property
    def is_train(self) -> bool:
        return self.optimizer is not None

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def full_weights(self) -> contextlib.AbstractContextManager[None]:
        """Whole weights for a block of inference (a collective under FSDP; nothing otherwise)."""
        return self.fsdp.full_weights() if self.fsdp is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def adapters_merged(self) -> Iterator[None]:
        """LoRA folded into the base weights for a block of inference (nothing without LoRA).

        Through peft's layers every projection costs two more small matmuls per token, a visible
        slowdown of generation. Here each adapted base
        weight is replaced for the block by a new tensor ``W + scale * B @ A`` with the adapters
        disabled, and the original tensor is put back untouched afterwards: merging and unmerging
        by arithmetic (peft's ``merge_adapter``) would drift the frozen base by rounding each time.
        """
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)] if self.lora is not None else []
        if not layers or any(not isinstance(m, LoraLinear) or m.merged for m in layers):
            yield  # nothing to merge, or layers this cannot fold: run them as they are
            return
        swapped: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        try:
            with torch.no_grad():
                for layer in layers:
                    weight = layer.get_base_layer().weight
                    swapped.append((weight, weight.data))
                    weight.data = merged_weight(layer, weight.data)
            with self.model.disable_adapter():
                yield
        finally:
            for weight, original in swapped:
                weight.data = original

    def require_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise ConfigError(f"this engine was loaded with role={self.config.role!r} and cannot train",
                              field="role", fix="load the training engine with role='train'")
        return self.optimizer

    # --- prompts -------------------------------------------------------------------------------

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids as the model sees the prompt: a ``TokenPrompt``'s ids verbatim, text with the
        tokenizer's special tokens, a chat through ``encode_chat`` with the generation prompt."""
        if isinstance(prompt, TokenPrompt):
            rows = int(self.causal_lm.config.vocab_size)
            bad = [int(i) for i in prompt.ids if not 0 <= i < rows]
            if bad:
                raise ConfigError(f"a TokenPrompt holds ids outside this model's vocabulary (0..{rows - 1}): "
                                  f"{bad[:5]}", field="prompt",
                                  fix="build token prompts with this model's tokenizer (encode_chat)")
            return [int(i) for i in prompt.ids]  # an episode's exact ids: never re-tokenized
        tok = self.tokenizer
        if isinstance(prompt, str):
            return text_prompt_ids(tok, prompt)
        return given_a_start(self.tokenizer, self.encode_chat(prompt, None, add_generation_prompt=True))

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """``encode_prompt`` of each, the texts tokenized in one call (``backend_kit.prompt_batch``):
        the startup length check counts every dataset prompt."""
        return encode_prompts(self.tokenizer, prompts, self.encode_prompt, self.config.model,
                              self.config.chat_template_kwargs)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    add_generation_prompt: bool) -> list[int]:
        """``messages`` through the tokenizer's chat template, tokenized: the one rendering both
        chat prompts and multi-turn episodes use, so the glue an episode inserts between turns is
        exactly what a chat prompt would have had (same template, no BOS beyond the template's)."""
        tok = self.tokenizer
        require_chat_template(tok, self.config.model)
        # a message's text (a tool result, an observation) spelling <|im_end|> stays text
        return encode_chat_literal(tok, messages, tools, add_generation_prompt,
                                   template_kwargs=self.config.chat_template_kwargs)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"TorchEngine(model={self.config.model!r}, role={self.config.role!r}, "
                f"device={self.device}, dtype={self.config.dtype}, lora={self.lora is not None}, "
                f"pid={os.getpid()})")


def disable_dropout(model: Any) -> None:
    """Zero the model's own dropout (GPT-2's config has 0.1 everywhere): the training forward runs
    in train mode, and with dropout on, the trainer's log-probs of the sampled tokens are another
    policy's (1.0 nats mean gap to the sampler's on a tiny GPT-2), which the ratio, the KL and the
    mismatch correction all read as off-policy. ``nn.Dropout`` layers and the float rates attention
    modules keep (``attention_dropout``, ``attn_pdrop``, ...) are set to 0."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
            continue
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float) and value > 0:
                setattr(module, name, 0.0)


def linear_module_names(model: Any) -> list[str]:
    """Leaf names of the decoder's linear layers (``nn.Linear``, and GPT-2's ``Conv1D``), the output
    head left out: the fix ``refuse_unfoldable_adapters`` names. The adapted set itself comes from
    ``polyrl_torch.lora_targets`` rather than peft, whose "all-linear" also adapts the fused expert
    tensors and router of some MoE models (Qwen3-MoE) through parameter wrappers, which polyrl
    cannot fold into the exported weights and the MLX backend does not adapt under that name."""
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head and name})


def refuse_unfoldable_adapters(model: Any, linear: Sequence[str]) -> None:
    """Every LoRA layer must be peft's ``Linear`` (folded as ``W + scale * B @ A`` for generation,
    weight export and checkpoints); others (a MoE's fused experts, embeddings) would train an
    adapter the sampler and every exported weight silently leave out."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    other = sorted({name for name, m in model.named_modules()
                    if isinstance(m, LoraLayer) and not isinstance(m, LoraLinear)})
    if other:
        raise ConfigError(f"LoRA would adapt {other[:3]}, which are not linear layers: the torch backend "
                          "folds LoRA into linear layers only", field="lora.target_modules",
                          fix=f"list linear layers only, e.g. {', '.join(linear)}; or train without [lora]")


def enable_gradient_checkpointing(model: Any) -> None:
    """transformers' per-decoder-layer activation checkpointing, non-reentrant: it needs no
    input that requires grad (LoRA freezes the embeddings) and gives gradients equal to the
    plain backward's. It only acts in train mode, which ``train_step`` switches on."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(f"{type(model).__name__} does not support gradient checkpointing",
                          field="train.gradient_checkpointing", fix="set train.gradient_checkpointing = false")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _load_pretrained(folder: str, extra: dict[str, Any], **model_kwargs: Any) -> tuple[Any, Any]:
    """Tokenizer and model from a local folder, with user-level errors instead of deep tracebacks.

    The tokenizer is checked against ``config.json`` before any weight is read: a tokenizer with
    more ids than the model has embedding rows belongs to another model, and would otherwise fail
    at the first out-of-range id deep inside ``torch.embedding``. So is config.json against the
    safetensors headers: a config naming more layers, a larger vocabulary, wider MLPs or more
    experts than the weights hold cost minutes and gigabytes to build (``polyrl.backend_kit.weight_headers``).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    fix = ("point model.path at a Hugging Face model folder (config.json, tokenizer files, "
           "*.safetensors) or a .gguf file")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **extra)
        hf_config = AutoConfig.from_pretrained(folder, **extra)
    except (OSError, ValueError) as exc:
        raise (remote_code_error(Path(folder), bool(extra.get("trust_remote_code")), exc)
               or unknown_type_error(Path(folder), exc)
               or ConfigError(f"cannot read a tokenizer and config from {folder!r}: {' '.join(str(exc).split())}",
                              field="model.path", fix=fix)) from None
    if extra.get("gguf_file"):
        from polyrl.backend_kit.gguf_vocab import check_gguf_tokenizer

        tokenizer = check_gguf_tokenizer(tokenizer, Path(folder) / extra["gguf_file"], converted=True)
    rows = getattr(hf_config, "vocab_size", None)
    if isinstance(rows, int) and len(tokenizer) > rows:
        raise ConfigError(
            f"the tokenizer has {len(tokenizer)} tokens but the model has {rows} embedding rows: "
            "they do not belong to the same model",
            field="model.path",
            fix="use the tokenizer saved with this model (tokenizer files in the same folder)",
        )
    if not extra.get("gguf_file"):  # config.json's sizes against the safetensors headers: milliseconds
        refuse_sizes_beyond_weights(folder, config_sizes(hf_config))
    from safetensors import SafetensorError

    # transformers' report of missing / unexpected / reshaped tensors is shown only when the weights
    # pass check_weights_match (a refusal is its one error line); a tensor of another shape is
    # loading info naming it, not a RuntimeError naming neither it nor the shapes
    with held_load_report():
        try:
            model, info = AutoModelForCausalLM.from_pretrained(folder, **model_kwargs, **extra,
                                                               output_loading_info=True,
                                                               ignore_mismatched_sizes=True)
        except SafetensorError as exc:  # e.g. an interrupted copy or download: the header or data is cut short
            raise ConfigError(f"the weights in {folder!r} are truncated or corrupt ({_first_line(exc)})",
                              field="model.path",
                              fix="re-copy or re-download the model's *.safetensors files") from None
        except UnpicklingError as exc:  # torch.load(weights_only=True) met a Python object
            raise pickled_code_error(Path(folder), exc) from None
        except (OSError, ValueError, RuntimeError) as exc:
            raise (remote_code_error(Path(folder), bool(extra.get("trust_remote_code")), exc)
                   or ConfigError(f"cannot load the model weights from {folder!r}: {_first_line(exc)}",
                                  field="model.path", fix=fix)) from None
        check_weights_match(folder, info)
    return tokenizer, model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_weights_match(folder: str, info: Mapping[str, Any]) -> None:
    """Refuse a model whose config.json and weights disagree (transformers' ``output_loading_info``).

    transformers loads such a model anyway: a parameter the weights lack is randomly initialised
    and a tensor the model has no place for is dropped, with only a warning table on stderr, so a
    config.json saying 32 layers over 30 layers of weights would train two random layers. The
    benign cases (an lm_head tied to the embeddings, non-persistent buffers such as rotary
    ``inv_freq``, keys a model class declares ignorable) never appear in ``info``.
    """
    for kind, keys in (("missing", info.get("missing_keys")), ("unexpected", info.get("unexpected_keys"))):
        names = [str(k) for k in keys or ()]
        if names:
            why = {"missing": "the weights lack them (they would be random)",
                   "unexpected": "config.json's model has no place for them (they would be dropped)"}[kind]
            raise ConfigError(
                f"config.json in {folder!r} does not match its weights: {len(names)} {kind} tensor(s), "
                f"{why}: {shown(names)}", field="model.path", fix=CONFIG_FIX)
    refuse_mismatched_shapes(folder, info, "model.path")  # named with both shapes, as for reward_model
