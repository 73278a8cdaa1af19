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


def write_gguf(hf_folder: str, out_folder: Path) -> Path:
    """``out_folder/model.gguf`` plus the folder's config and tokenizer files; returns the GGUF path."""
    import gguf
    from safetensors.numpy import load_file

    src = Path(hf_folder)
    config = json.loads((src / "config.json").read_text())
    out_folder.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
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
        writer.add_tensor(target, np.ascontiguousarray(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_folder / "model.gguf"
