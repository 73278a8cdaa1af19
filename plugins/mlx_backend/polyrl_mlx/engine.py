"""``MLXEngine``: an mlx-lm model, its tokenizer, optional LoRA adapters and the optimizer.

The engine loads and holds state; the hooks live in ``generation``, ``scoring``, ``training`` and
``weights``. What it loads:

* a Hugging Face folder (``config.json`` + safetensors + tokenizer) or a folder written by
  ``mlx_lm.convert`` / ``polyrl convert --to mlx``, possibly 4/8-bit quantized, as
  ``mlx_lm.load`` does (offline: a local path never touches a hub);
* LoRA through mlx-lm's tuner layers (``LoRALinear``, ``scale = alpha / rank`` as peft);
* AdamW (``bias_correction=True``, which is what torch's AdamW does) for ``role="train"``.

A quantized model can generate and score, and train only through LoRA (QLoRA): its packed
weights have no gradient. Such a config is refused with a ``ConfigError`` naming the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from polyrl.backend_kit.batching import BUCKET_CALL_TOKENS
from polyrl.backend_kit.chat import require_chat_template
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.prompt_batch import encode_prompts
from polyrl.backend_kit.model_folders import (
    adapter_folder_error,
    no_weights_error,
    pickled_only_error,
    remote_code_error,
)
from polyrl.backend_kit.options import SCORE_BATCH_TOKENS, scoring_options
from polyrl.backend_kit.tokens import CompletionDecoding, given_a_start, pad_token_id, text_prompt_ids
from polyrl.backend_kit.weight_headers import refuse_config_json_beyond_weights
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.types import EngineConfig, Prompt, TokenPrompt

from polyrl_mlx import blas
from polyrl_mlx._mx import mx, optim
from polyrl_mlx.architectures import SPLIT_HEAD_TYPES, TESTED_TYPES, exact_embedding_scale
from polyrl_mlx.convert import MLX_WEIGHTS, load_error, refuse_model_file
from polyrl_mlx.family_check import check_family
from polyrl_mlx.packed import check_runs_here

DTYPES = ("float32", "bfloat16", "float16")


def _device(name: str) -> Any:
    name = (name or "cpu").lower()
    gpu_ok = mx.is_available(mx.gpu)
    if name == "auto":
        return mx.gpu if gpu_ok else mx.cpu
    if name == "cpu":
        return mx.cpu
    if name in ("gpu", "metal", "mps", "cuda"):
        if not gpu_ok:
            raise ConfigError(f"device {name!r} requested but MLX sees no GPU here", field="device",
                              fix="use device='cpu' (or install mlx with Metal/CUDA support)")
        return mx.gpu
    raise ConfigError(f"unknown device {name!r} for the mlx backend", field="device",
                      fix="use cpu, gpu or auto")


def warn_slow_half_precision(dtype: str, device: Any) -> None:
    """float16/bfloat16 on MLX's CPU device: its CPU build has no fast half-precision matmul
    (README, Backends: 0.3-0.4 GFLOP/s against 10 for float32), so a run would be ~30x slower."""
    if dtype in ("float16", "bfloat16") and device == mx.cpu:
        get_logger("polyrl.mlx").warning(
            f"{dtype} on CPU: MLX's CPU build multiplies half precision ~30x slower than float32 "
            "(README, Backends)", fix="use dtype float32 with the mlx backend on a CPU")


def _model_dir(model: str) -> Path:
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(
            f"model path {model!r} does not exist", field="model",
            fix="give a local HF or MLX model folder, or resolve an alias first (e.g. 'tiny-llama')",
        )
    if path.is_file() or not (path / "config.json").exists():
        is_gguf = path.suffix == ".gguf" if path.is_file() else any(path.glob("*.gguf"))
        if is_gguf:
            raise ConfigError(
                f"{model!r} is a GGUF model, which mlx-lm cannot load", field="model",
                fix="convert it first: `polyrl convert MODEL.gguf OUT --to hf` (torch backend), "
                    "then use OUT (or `polyrl convert OUT OUT-mlx --to mlx`)",
            )
        adapter = adapter_folder_error(path, "model.path", backend="mlx")
        if adapter is not None:
            raise adapter
        raise ConfigError(f"{model!r} has no config.json", field="model",
                          fix="point at a HF or MLX model folder")
    pickled = pickled_only_error(path, "mlx", "model.path", weights=MLX_WEIGHTS)
    if pickled is not None:  # mlx-lm's own "No safetensors found" was a plugin crash
        raise pickled
    missing = no_weights_error(path, "mlx", "model.path", weights=MLX_WEIGHTS)
    if missing is not None:  # and so was a folder holding no weights at all
        raise missing
    return path


def config_overrides(model_dir: Path) -> dict[str, Any]:
    """Config keys mlx-lm needs but a transformers 5 ``config.json`` may lack.

    transformers 5 writes RoPE settings only as ``rope_parameters`` (``{"rope_theta": ...,
    "rope_type": ...}``), while mlx-lm 0.32's Llama/Qwen/Mistral args read ``rope_theta`` and
    ``rope_scaling`` and silently default the base to 10000: SmolLM2 (base 100000) then computes
    garbage. Lift them to the top level (a per-layer-type nested ``rope_parameters`` is left to
    the models that read it). It also renamed keys some mlx-lm modules require (their load then
    fails with a TypeError): GPT-NeoX's ``rotary_pct``/``rotary_emb_base`` (now the nested
    ``partial_rotary_factor``/``rope_theta``), Qwen3-MoE's ``num_experts`` (``num_local_experts``)
    and GPT-2's ``n_ctx`` (``n_positions``).
    """
    import json

    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {}
    renamed = {"num_experts": config.get("num_local_experts"), "n_ctx": config.get("n_positions")}
    params = config.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        if "rope_theta" not in config:
            out["rope_theta"] = params["rope_theta"]
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default" and not config.get("rope_scaling"):
            out["rope_scaling"] = dict(params)
        if config.get("model_type") == "gpt_neox":
            renamed.update(rotary_emb_base=params["rope_theta"],
                           rotary_pct=params.get("partial_rotary_factor", 1.0))
    out.update({k: v for k, v in renamed.items() if v is not None and k not in config})
    return out


def load_mlx_lm(model_dir: Path, trust_remote_code: bool, lazy: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """``mlx_lm.load`` of a local folder (model, tokenizer wrapper, config), with the config keys
    of ``config_overrides`` and transformers' fused expert tensors read (a folder the torch
    backend saved: ``expert_names``); ``polyrl convert`` reads folders with it too."""
    from mlx_lm.utils import _get_classes, load_model, load_tokenizer

    from polyrl_mlx.expert_names import model_classes

    model, hf_config = load_model(model_dir, lazy=lazy, model_config=config_overrides(model_dir) or None,
                                  get_model_classes=model_classes(_get_classes),
                                  trust_remote_code=trust_remote_code)
    # trust_remote_code always explicit: mlx-lm passes none, so transformers asked on the terminal
    # "Do you wish to run the custom code? [y/N]" and a "y" ran a tokenizer's own code unasked
    tokenizer = load_tokenizer(model_dir, {"trust_remote_code": trust_remote_code},
                               eos_token_ids=hf_config.get("eos_token_id", None))
    return model, tokenizer, hf_config


class Float32AdamW(optim.AdamW):
    """AdamW whose moments and arithmetic are float32 whatever the parameters' dtype.

    Why: MLX's AdamW keeps its state in the parameter's dtype. In float16, ``eps = 1e-8`` and
    small squared gradients round to 0, so ``m / (sqrt(v) + eps)`` becomes inf/NaN on the first
    step; torch's AdamW does its math in float32 for the same reason. The new weights are cast
    back to the parameter's dtype.
    """

    def init_single(self, parameter: Any, state: dict) -> None:
        state["m"] = mx.zeros(parameter.shape, dtype=mx.float32)
        state["v"] = mx.zeros(parameter.shape, dtype=mx.float32)

    def apply_single(self, gradient: Any, parameter: Any, state: dict) -> Any:
        updated = super().apply_single(gradient.astype(mx.float32), parameter.astype(mx.float32), state)
        return updated.astype(parameter.dtype)


@attrs.frozen
class ScoringOptions:
    """The ``[backends.options]`` keys this backend reads, typed and ranged (a string "no" for a
    switch would otherwise read as true); a bad one is a ConfigError naming the key."""

    shared_prompt_forward: bool = True
    bucket_call_tokens: int = BUCKET_CALL_TOKENS
    score_batch_tokens: int = SCORE_BATCH_TOKENS

    @classmethod
    def read(cls, options: Mapping[str, Any]) -> ScoringOptions:
        return cls(**scoring_options(options))


class MLXEngine(CompletionDecoding):
    """One loaded model; the compute hooks receive it."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        #: the [backends.options] this backend reads, checked now, not at the first scoring call
        self.options = ScoringOptions.read(config.options)
        if config.dtype not in DTYPES:
            raise ConfigError(f"dtype {config.dtype!r} is not supported by the mlx backend",
                              field="dtype", fix=f"use one of {', '.join(DTYPES)}")
        self.dtype = getattr(mx, config.dtype)
        self.device = _device(config.device)
        warn_slow_half_precision(config.dtype, self.device)
        blas.set_threads(config.threads)
        self.model_dir = _model_dir(config.model)
        # config.json's sizes against the headers of the files mlx-lm loads, before it builds the model
        refuse_config_json_beyond_weights(self.model_dir, "model.path",
                                          sorted(self.model_dir.glob("model*.safetensors")))

        refuse_model_file(self.model_dir, bool(config.trust_remote_code), "model.trust_remote_code")
        with mx.stream(self.device):
            try:
                model, tokenizer, hf_config = load_mlx_lm(self.model_dir, bool(config.trust_remote_code))
            except (RuntimeError, ValueError, TypeError) as exc:  # no module, damaged weights, a key missing
                raise (remote_code_error(self.model_dir, bool(config.trust_remote_code), exc)
                       or load_error(exc, self.model_dir, "model.path")) from None
            self.hf_config: dict[str, Any] = dict(hf_config)
            self.quantization: dict | None = hf_config.get("quantization")
            check_runs_here(model, self.device, self.model_dir)  # nvfp4 global scales: GPU only
            self._cast(model)
            self.model = model
            self.embedding_scale_factor = exact_embedding_scale(
                model, str(self.hf_config.get("model_type", "")), config.dtype)
            self.tok_wrapper = tokenizer
            self.tokenizer = tokenizer._tokenizer  # the transformers tokenizer
            self.eos_ids = frozenset(int(i) for i in (tokenizer.eos_token_ids or ()))
            self.pad_id = pad_token_id(self.tokenizer)
            # a window mlx-lm drops, or a family polyrl has not tested: refused now if it
            # would run other log-probs
            check_family(self, TESTED_TYPES)

            self.lora = config.lora
            self.lora_keys: list[str] = []
            #: True once ``import_weights``/``load_checkpoint`` replaced the frozen base weights.
            self.base_replaced = False
            is_train = config.role == "train"
            if self.quantization and is_train and config.lora is None:
                raise ConfigError(
                    "a quantized model cannot be fully fine-tuned (its packed weights have no "
                    "gradient)", field="lora",
                    fix="train with LoRA on it (QLoRA), or load the unquantized model",
                )
            mx.random.seed(int(config.seed))  # LoRA's A matrices draw from the global generator
            if config.lora is not None:
                self._add_lora(config.lora)
            elif is_train:
                self.model.unfreeze()
            else:
                self.model.freeze()
            self.model.eval()  # no dropout unless LoRA dropout asks (training turns it on)
            if config.gradient_checkpointing and is_train:
                from polyrl_mlx.checkpointing import enable_gradient_checkpointing

                enable_gradient_checkpointing(self.model)

            #: The sampler's key when a call passes no seed: repeatable for a given engine seed.
            self.rng_key = mx.random.key(int(config.seed))
            self.optimizer: optim.Optimizer | None = None
            if is_train:
                self.optimizer = self._make_optimizer()
            mx.eval(self.model.parameters())

    # --- setup helpers -------------------------------------------------------------------------

    def _cast(self, model: Any) -> None:
        """Floating parameters to the configured dtype (quantized packs are integers: untouched;
        nvfp4 experts' ``global_scale`` stays float32, as MLX's kernels take it)."""
        from mlx.utils import tree_map_with_path

        dtype = self.dtype

        def cast(path: str, v: Any) -> Any:
            if (isinstance(v, mx.array) and mx.issubdtype(v.dtype, mx.floating) and v.dtype != dtype
                    and not path.endswith(".global_scale")):
                return v.astype(dtype)
            return v

        model.update(tree_map_with_path(cast, model.parameters()))

    def _add_lora(self, lora: Any) -> None:
        from mlx_lm.tuner.utils import linear_to_lora_layers

        from polyrl_mlx.lora_targets import lora_keys

        # the torch backend's set for the same lora.target_modules (polyrl.backend_kit.lora_targets)
        keys = lora_keys(self.model, lora, self.model_type)
        self.lora_keys = keys
        self.model.freeze()
        linear_to_lora_layers(
            self.model, len(self.model.layers),
            {"rank": lora.rank, "scale": lora.alpha / lora.rank, "dropout": lora.dropout, "keys": keys},
        )

    def _make_optimizer(self) -> Any:
        opt = self.config.optimizer
        cls = Float32AdamW if self.config.dtype == "float16" else optim.AdamW
        return cls(learning_rate=opt.lr, betas=list(opt.betas), eps=opt.eps,
                   weight_decay=opt.weight_decay, bias_correction=True)

    def reset_optimizer(self) -> None:
        if self.optimizer is not None:
            self.optimizer = self._make_optimizer()

    # --- accessors -----------------------------------------------------------------------------

    @property
    def is_train(self) -> bool:
        return self.optimizer is not None

    @property
    def model_type(self) -> str:
        return str(self.hf_config.get("model_type", ""))

    def head_parts(self) -> tuple[Any, Any] | None:
        """(backbone, head) when the model computes ``head(backbone(ids, cache))``, else None.

        Lets scoring and prefill project only the positions they need onto the vocabulary.
        """
        model = self.model
        if self.model_type not in SPLIT_HEAD_TYPES or not hasattr(model, "model"):
            return None
        head = getattr(model, "lm_head", None)  # absent when tied (Gemma 3 pops it on load)
        if head is None or getattr(model.args, "tie_word_embeddings", False):
            return model.model, model.model.embed_tokens.as_linear
        return model.model, head

    def require_optimizer(self) -> Any:
        if self.optimizer is None:
            raise ConfigError(f"this engine was loaded with role={self.config.role!r} and cannot train",
                              field="role", fix="load the training engine with role='train'")
        return self.optimizer

    def lora_modules(self) -> dict[str, Any]:
        """Every LoRA layer: linear layers' and a MoE's experts' (``lora_layers``)."""
        from polyrl_mlx.lora_layers import lora_modules

        return lora_modules(self.model)

    def next_seed(self) -> int:
        """A fresh sampling seed from the engine's own key stream (calls without a seed)."""
        self.rng_key, sub = mx.random.split(self.rng_key)
        return int(mx.random.randint(0, 2**31 - 1, key=sub).item())

    # --- prompts -------------------------------------------------------------------------------

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids as the model sees the prompt (chat template + generation prompt for chats;
        a ``TokenPrompt``'s ids verbatim, so an episode's next turn continues from exact ids).

        Same rules as the torch backend, so both feed a model identical ids for one prompt.
        """
        if isinstance(prompt, TokenPrompt):
            return self.checked_ids(prompt.ids.tolist())
        if isinstance(prompt, str):
            return text_prompt_ids(self.tokenizer, prompt)
        return given_a_start(self.tokenizer, self.encode_chat(prompt, None, add_generation_prompt=True))

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """``encode_prompt`` of each, the texts tokenized in one call (``backend_kit.prompt_batch``):
        the startup length check counts every dataset prompt."""
        return encode_prompts(self.tokenizer, prompts, self.encode_prompt, self.config.model,
                              self.config.chat_template_kwargs)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    add_generation_prompt: bool) -> list[int]:
        """``messages`` through the tokenizer's chat template (``tools`` passed to it), tokenized
        without added special tokens: the one rendering ``generate`` uses for chat prompts, so
        the core's differences of renderings line up with what the model saw."""
        tok = self.tokenizer
        require_chat_template(tok, self.config.model)
        # a message's text (a tool result, an observation) spelling <|im_end|> stays text
        return encode_chat_literal(tok, messages, tools, add_generation_prompt,
                                   template_kwargs=self.config.chat_template_kwargs)

    @property
    def vocab_size(self) -> int:
        """Rows of the embedding table (the ids the model can take; a padded table may have more
        than the tokenizer knows), from the config when the model hides its table."""
        embed = getattr(getattr(self.model, "model", None), "embed_tokens", None)
        weight = getattr(embed, "weight", None)
        if weight is not None:
            return int(weight.shape[0])
        text_config = self.hf_config.get("text_config") or {}
        return int(self.hf_config.get("vocab_size") or text_config.get("vocab_size") or len(self.tokenizer))

    def checked_ids(self, ids: Sequence[int]) -> list[int]:
        """Token-prompt ids as ints, refused (``ConfigError`` on ``prompt``) when one is outside
        the vocabulary: an out-of-range id would read past the embedding table silently."""
        out, vocab = [int(i) for i in ids], self.vocab_size
        bad = [i for i in out if not 0 <= i < vocab]
        if bad:
            raise ConfigError(f"token prompt holds id {bad[0]} outside this model's vocabulary "
                              f"(0..{vocab - 1})", field="prompt",
                              fix="build token prompts with this model's tokenizer (engine.encode_chat)")
        return out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"MLXEngine(model={self.config.model!r}, role={self.config.role!r}, "
                f"device={self.device}, dtype={self.config.dtype}, lora={self.lora is not None}, "
                f"quantized={bool(self.quantization)}, pid={os.getpid()})")


def load(config: EngineConfig) -> MLXEngine:
    return MLXEngine(config)


__all__ = ["DTYPES", "SPLIT_HEAD_TYPES", "MLXEngine", "config_overrides", "load"]
