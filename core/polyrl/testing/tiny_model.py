"""A tiny random Llama in Hugging Face layout, built offline and without torch.

Tests of every backend need a real model folder (tokenizer, config, safetensors weights) that
loads with ``transformers``, MAX and ``mlx_lm`` alike, but no test may reach a model hub and the
core must not import torch. So the folder is written from scratch with only light libraries:
``tokenizers`` trains a byte-level BPE on a small built-in text, ``numpy`` draws the weights and
``safetensors.numpy`` writes them under the tensor names HF Llama uses.

    >>> from polyrl.testing.tiny_model import build_tiny_llama
    >>> path = build_tiny_llama("/tmp/tiny")          # built the first time, cached afterwards

The result is deterministic for a seed (weights and tokenizer), so tests may compare numbers
across processes and backends.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.cache import default_cache_dir
from polyrl.file_modes import honour_umask

#: Written last; its presence (with matching parameters) means the folder is complete.
MARKER = ".polyrl-tiny-model.json"
FORMAT_VERSION = 1

BOS, EOS, PAD = "<|endoftext|>", "<|im_end|>", "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (BOS, IM_START, IM_END, PAD)  # ids 0..3, in this order

#: ChatML, as SmolLM2/Qwen use it: a generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_ENGLISH = """\
The quick brown fox jumps over the lazy dog. A small model can still learn to count.
What is the capital of France? The capital of France is Paris. Name a colour: red, green, blue.
Reinforcement learning rewards the answers that are correct and penalises the ones that are not.
Each group of samples shares a prompt; the advantage of a sample is its reward minus the mean.
Please answer with a single number. The answer is 42. Think step by step, then write the result.
Today the weather is sunny and warm. Tomorrow it may rain, so take an umbrella with you.
Numbers are written with digits: zero one two three four five six seven eight nine ten.
She added the two numbers and wrote down the sum. He checked it twice and it was right.
The system says hello. The user asks a question. The assistant gives a short answer.
Is seven greater than three? Yes. Is two plus two equal to five? No, it is four.
"""


def _corpus() -> list[str]:
    """Training text for the tokenizer: English, digits, arithmetic and chat markup."""
    lines = _ENGLISH.splitlines()
    for a in range(0, 60, 3):
        for b in range(0, 40, 7):
            lines.append(f"{a} + {b} = {a + b}")
            lines.append(f"{a} * {b} = {a * b}")
            if a >= b:
                lines.append(f"{a} - {b} = {a - b}")
    lines += [str(n) for n in range(1000)]
    for role, text in (("system", "You are a helpful assistant."), ("user", "What is 12 + 7?"),
                       ("assistant", "12 + 7 = 19")):
        lines.append(f"{IM_START}{role}\n{text}{IM_END}\n")
    return lines


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def _tokenizer_config(max_len: int) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "additional_special_tokens": [IM_START, IM_END],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


#: HF ``model_type`` -> (architecture class, default tie_word_embeddings, head_dim override).
#: Each tiny model keeps its family's quirks so backends meet them in tests: Qwen2's q/k/v bias,
#: Qwen3's and Gemma 3's q/k RMSNorm and a head_dim that is not hidden/heads, Gemma 3's (1 + w)
#: norms, embedding scale, sliding-window layers and tied head, Mistral's explicit head_dim,
#: Phi-3's fused qkv/gate_up projections and partial rotary embedding.
ARCHITECTURES: dict[str, tuple[str, bool, int | None]] = {
    "llama": ("LlamaForCausalLM", False, None),
    "qwen2": ("Qwen2ForCausalLM", True, None),
    "qwen3": ("Qwen3ForCausalLM", True, 32),
    "gemma3_text": ("Gemma3ForCausalLM", True, 32),
    "mistral": ("MistralForCausalLM", False, 32),
    "phi3": ("Phi3ForCausalLM", False, None),
}
GEMMA3_SLIDING_WINDOW = 8  # shorter than test sequences, so the window matters


def _head_dim(arch: str, hidden_size: int, num_heads: int) -> int:
    return ARCHITECTURES[arch][2] or hidden_size // num_heads


def _model_config(
    *, arch, tie, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, vocab_size,
    max_position_embeddings, ids,
) -> dict:
    head_dim = _head_dim(arch, hidden_size, num_heads)
    config = {
        "architectures": [ARCHITECTURES[arch][0]],
        "model_type": arch,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": tie,
        "use_cache": True,
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        "torch_dtype": "float32",
    }
    if arch == "llama":
        del config["rope_theta"]  # as before: a transformers 5 config carries rope_parameters only
    if arch == "qwen2":
        config.update(attention_bias=True, use_sliding_window=False, sliding_window=None)
    if arch == "qwen3":
        config.update(use_sliding_window=False, sliding_window=None)
    if arch == "mistral":
        config.update(sliding_window=None)
    if arch == "phi3":
        config.update(partial_rotary_factor=0.5, sliding_window=None, resid_pdrop=0.0,
                      embd_pdrop=0.0, original_max_position_embeddings=max_position_embeddings)
        del config["head_dim"]  # Phi-3 derives it from hidden_size / heads
    if arch == "gemma3_text":
        layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                       for i in range(num_layers)]
        config.update(
            hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh",
            rms_norm_eps=1e-6, query_pre_attn_scalar=head_dim, sliding_window=GEMMA3_SLIDING_WINDOW,
            layer_types=layer_types, sliding_window_pattern=2, _sliding_window_pattern=2,
            rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
            final_logit_softcapping=None, attn_logit_softcapping=None,
        )
    return config


def _weights(
    *, arch, tie, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, vocab_size,
    seed,
) -> dict[str, np.ndarray]:
    """Normal(0, 0.02) matrices and RMSNorm scales under the family's HF names (fixed draw order:
    a Llama build is the same as before architectures were added)."""
    rng = np.random.default_rng(seed)
    head_dim = _head_dim(arch, hidden_size, num_heads)

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        # Gemma stores w with scale (1 + w); others scale by w. Perturb so a swap would show.
        if arch == "gemma3_text":
            return normal(n, std=0.1)
        return np.ones(n, dtype=np.float32)

    h, i = hidden_size, intermediate_size
    q_rows, kv_rows = num_heads * head_dim, num_kv_heads * head_dim
    out: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(vocab_size, h)}
    for layer in range(num_layers):
        p = f"model.layers.{layer}."
        if arch == "phi3":
            out[p + "self_attn.qkv_proj.weight"] = normal(q_rows + 2 * kv_rows, h)
        else:
            out[p + "self_attn.q_proj.weight"] = normal(q_rows, h)
            out[p + "self_attn.k_proj.weight"] = normal(kv_rows, h)
            out[p + "self_attn.v_proj.weight"] = normal(kv_rows, h)
        out[p + "self_attn.o_proj.weight"] = normal(h, q_rows)
        if arch == "phi3":
            out[p + "mlp.gate_up_proj.weight"] = normal(2 * i, h)
        else:
            out[p + "mlp.gate_proj.weight"] = normal(i, h)
            out[p + "mlp.up_proj.weight"] = normal(i, h)
        out[p + "mlp.down_proj.weight"] = normal(h, i)
        out[p + "input_layernorm.weight"] = norm(h)
        out[p + "post_attention_layernorm.weight"] = norm(h)
        if arch == "qwen2":
            out[p + "self_attn.q_proj.bias"] = normal(q_rows)
            out[p + "self_attn.k_proj.bias"] = normal(kv_rows)
            out[p + "self_attn.v_proj.bias"] = normal(kv_rows)
        if arch in ("qwen3", "gemma3_text"):
            out[p + "self_attn.q_norm.weight"] = norm(head_dim)
            out[p + "self_attn.k_norm.weight"] = norm(head_dim)
        if arch == "gemma3_text":
            out[p + "pre_feedforward_layernorm.weight"] = norm(h)
            out[p + "post_feedforward_layernorm.weight"] = norm(h)
    out["model.norm.weight"] = norm(h)
    if not tie:
        out["lm_head.weight"] = normal(vocab_size, h)
    return out


def _write(folder: Path, params: dict) -> None:
    from safetensors.numpy import save_file

    vocab_size = params["vocab_size"]
    if params.get("tokenizer") == "bytes":
        from polyrl.testing.byte_tokenizer import byte_level_tokenizer_json

        ids = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
        (folder / "tokenizer.json").write_text(json.dumps(byte_level_tokenizer_json(SPECIAL_TOKENS)) + "\n")
    else:
        tok = _train_tokenizer(vocab_size)
        if tok.get_vocab_size() != vocab_size:
            raise ValueError(
                f"the built-in text yields only {tok.get_vocab_size()} BPE tokens, fewer than "
                f"vocab_size={vocab_size}; pick a smaller vocab_size"
            )
        ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
        tok.save(str(folder / "tokenizer.json"))
    shape = {k: params[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                    "intermediate_size", "vocab_size")}
    shape.update(arch=params.get("arch", "llama"), tie=params.get("tie", False))
    files = {
        "tokenizer_config.json": _tokenizer_config(params["max_position_embeddings"]),
        "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
                                    "additional_special_tokens": [IM_START, IM_END]},
        "config.json": _model_config(
            **shape, max_position_embeddings=params["max_position_embeddings"], ids=ids
        ),
        "generation_config.json": {
            "bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD],
            "do_sample": True, "temperature": 1.0,
        },
    }
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data, indent=2) + "\n")
    save_file(_weights(**shape, seed=params["seed"]), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / MARKER).write_text(json.dumps(params, sort_keys=True) + "\n")
    honour_umask(folder)  # mkdtemp/safetensors create owner-only modes


def _marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def build_tiny_llama(
    path: str | os.PathLike[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int | None = None,
    seed: int = 0,
    max_position_embeddings: int = 1024,
    tokenizer: str = "bpe",
) -> str:
    """Write (once) a random Llama with a trained BPE tokenizer to ``path``; return the path.

    ``tokenizer="bytes"`` writes a byte-level tokenizer without merges instead (no
    ``tokenizers`` package needed: the whole build then uses numpy, safetensors and json).

    A folder that already holds a complete build with the same parameters is reused as is. A
    build with other parameters is replaced; a non-empty folder that is not a build is refused
    rather than overwritten. Writing goes to a temp folder renamed into place, so a reader
    never sees a half-written model.
    """
    return build_tiny_model(
        path, arch="llama", hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        num_kv_heads=num_kv_heads, intermediate_size=intermediate_size, vocab_size=vocab_size,
        seed=seed, max_position_embeddings=max_position_embeddings, tokenizer=tokenizer,
    )


def build_tiny_model(
    path: str | os.PathLike[str],
    *,
    arch: str = "llama",
    tie_word_embeddings: bool | None = None,
    hidden_size: int | None = None,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int | None = None,
    seed: int = 0,
    max_position_embeddings: int = 1024,
    tokenizer: str = "bpe",
) -> str:
    """Like ``build_tiny_llama`` for any family in ``ARCHITECTURES`` (HF ``model_type``).

    ``tokenizer``: "bpe" (trained with ``tokenizers``; ``vocab_size`` defaults to 512) or
    "bytes" (no ``tokenizers`` needed; the vocabulary is the 256 bytes plus the special tokens).

    ``tie_word_embeddings`` defaults to the family's usual choice. Gemma 3 gets hidden size 80
    by default: its embedding scale sqrt(80) is not a bfloat16 number, so a backend that rounds
    it shows up in log-prob comparisons (sqrt(64) would hide that).
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    tie = ARCHITECTURES[arch][1] if tie_word_embeddings is None else bool(tie_word_embeddings)
    if hidden_size is None:
        hidden_size = 80 if arch == "gemma3_text" else 64
    if tokenizer not in ("bpe", "bytes"):
        raise ValueError(f"unknown tokenizer {tokenizer!r}; known: bpe, bytes")
    if tokenizer == "bytes":
        from polyrl.testing.byte_tokenizer import vocab_size as byte_vocab_size

        if vocab_size not in (None, byte_vocab_size(SPECIAL_TOKENS)):
            raise ValueError(f"tokenizer='bytes' has exactly {byte_vocab_size(SPECIAL_TOKENS)} tokens; "
                             "leave vocab_size unset")
        vocab_size = byte_vocab_size(SPECIAL_TOKENS)
    elif vocab_size is None:
        vocab_size = 512
    if num_heads % num_kv_heads or (ARCHITECTURES[arch][2] is None and hidden_size % num_heads):
        raise ValueError("hidden_size must divide by num_heads and num_heads by num_kv_heads")
    params: dict[str, Any] = {
        "format": FORMAT_VERSION, "hidden_size": hidden_size, "num_layers": num_layers,
        "num_heads": num_heads, "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size, "vocab_size": vocab_size, "seed": seed,
        "max_position_embeddings": max_position_embeddings,
    }
    if arch != "llama" or tie:  # a default Llama keeps its old marker (existing caches stay valid)
        params.update(arch=arch, tie=tie)
    if tokenizer != "bpe":
        params["tokenizer"] = tokenizer
    target = Path(path).expanduser().resolve()
    if _marker(target) == params:
        return str(target)
    if target.exists() and any(target.iterdir()) and _marker(target) is None:
        raise FileExistsError(f"{target} exists and is not a polyrl tiny model; refusing to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _write(tmp, params)
        if target.exists():
            if _marker(target) == params:  # another process finished first
                return str(target)
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError:
            if _marker(target) == params:  # lost a race to an identical build
                return str(target)
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


__all__ = ["ARCHITECTURES", "build_tiny_llama", "build_tiny_model", "default_cache_dir"]
