"""Write a float32 GGUF of an HF Llama folder, the way llama.cpp's converter lays it out.

Test helper for GGUF loading (the hub is unreachable, so the test makes its own file): llama.cpp
names (``blk.N.attn_q.weight``...) and its Q/K row permutation for interleaved RoPE.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order for Q/K (rotary pairs interleaved instead of split in halves)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_folder: str, out_folder: Path, *, vocab: dict | None = None,
               copy_files: bool = True, quant: dict[str, str] | None = None) -> Path:
    """``out_folder/model.gguf`` plus the folder's config and tokenizer files; returns the GGUF path.

    ``vocab``: ``tokenizer.ggml.*`` data to embed (see :func:`spm_vocab`, :func:`bpe_vocab`);
    ``copy_files=False`` leaves the HF files out (the GGUF alone must then describe the model);
    ``quant``: tensor-name substring -> GGML type name (``"Q8_0"``...), quantized with gguf.quants.
    """
    import gguf
    from safetensors.numpy import load_file

    src = Path(hf_folder)
    config = json.loads((src / "config.json").read_text())
    out_folder.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir() if copy_files else ():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, out_folder / f.name)
    tensors: dict[str, np.ndarray] = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    writer = gguf.GGUFWriter(str(out_folder / "model.gguf"), "llama")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if vocab is not None:
        _add_vocab(writer, vocab)
    for name, value in tensors.items():
        value = np.ascontiguousarray(value, dtype=np.float32)
        if name in NAMES:
            target = NAMES[name]
        else:
            _, _, index, rest = name.split(".", 3)
            target = f"blk.{index}.{LAYER[rest]}"
            if rest.startswith("self_attn.q_proj"):
                value = permute(value, heads)
            elif rest.startswith("self_attn.k_proj"):
                value = permute(value, kv_heads)
        kind = next((k for part, k in (quant or {}).items() if part in target), None)
        if kind is not None and value.ndim == 2:
            qtype = gguf.GGMLQuantizationType[kind]
            writer.add_tensor(target, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(target, np.ascontiguousarray(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_folder / "model.gguf"


def _add_vocab(writer, vocab: dict) -> None:
    writer.add_tokenizer_model(vocab["model"])
    writer.add_tokenizer_pre(vocab.get("pre", "default"))
    writer.add_token_list(vocab["tokens"])
    if "scores" in vocab:
        writer.add_token_scores(vocab["scores"])
    if "types" in vocab:
        writer.add_token_types(vocab["types"])
    if "merges" in vocab:
        writer.add_token_merges(vocab["merges"])
    for key in ("bos", "eos", "unk", "pad"):
        if vocab.get(key) is not None:
            getattr(writer, f"add_{key}_token_id")(vocab[key])
    if "add_space_prefix" in vocab:
        writer.add_add_space_prefix(vocab["add_space_prefix"])
    writer.add_add_bos_token(vocab.get("add_bos", False))
    if "chat_template" in vocab:
        writer.add_chat_template(vocab["chat_template"])


def spm_vocab(vocab_size: int, *, add_space_prefix: bool = True) -> dict:
    """A SentencePiece BPE vocabulary with byte fallback (<0xNN> pieces), trained here on the tiny
    model's text, laid out as llama.cpp writes a "llama" tokenizer (``spm_model``: the trained
    SentencePiece model itself, the independent reference)."""
    import io

    import sentencepiece as spm
    from polyrl.backend_kit.gguf_vocab import sentencepiece_proto_module

    pb = sentencepiece_proto_module()

    from polyrl.testing.tiny_model import _corpus

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus() + ["naïve café Zürich", "def f(x):\n\treturn x"]),
        model_writer=buffer, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, add_dummy_prefix=add_space_prefix, remove_extra_whitespaces=False,
        normalization_rule_name="identity", split_digits=False, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
    )
    proto = pb.ModelProto()
    proto.ParseFromString(buffer.getvalue())
    return {"model": "llama", "pre": "default", "tokens": [p.piece for p in proto.pieces],
            "scores": [p.score for p in proto.pieces], "types": [p.type for p in proto.pieces],
            "unk": 0, "bos": 1, "eos": 2, "add_space_prefix": add_space_prefix, "add_bos": True,
            "spm_model": buffer.getvalue()}


def bpe_vocab(hf_folder: str) -> dict:
    """The HF folder's byte-level BPE tokenizer as a "gpt2" GGUF vocabulary (tokens + merges)."""
    tokenizer = json.loads((Path(hf_folder) / "tokenizer.json").read_text())
    ranked = sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in ranked]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    special = {t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    types = [3 if i in special else 1 for i in range(len(tokens))]
    config = json.loads((Path(hf_folder) / "config.json").read_text())
    return {"model": "gpt2", "pre": "default", "tokens": tokens, "merges": merges, "types": types,
            "bos": config["bos_token_id"], "eos": config["eos_token_id"], "pad": config["pad_token_id"]}
