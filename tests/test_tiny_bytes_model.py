"""A tiny model folder for backend authors that needs neither torch nor ``tokenizers``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BUILD_WITHOUT_TORCH_OR_TOKENIZERS = """
import sys
sys.modules["torch"] = None        # any import of these now raises ImportError
sys.modules["tokenizers"] = None
sys.modules["transformers"] = None
from polyrl.testing.tiny_model import build_tiny_llama
print(build_tiny_llama(sys.argv[1], tokenizer="bytes"))
"""


def test_bytes_model_builds_without_torch_or_tokenizers_and_loads_everywhere(tmp_path):
    target = tmp_path / "tiny-bytes"
    result = subprocess.run([sys.executable, "-c", BUILD_WITHOUT_TORCH_OR_TOKENIZERS, str(target)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert Path(result.stdout.strip()) == target.resolve()
    config = json.loads((target / "config.json").read_text())
    assert config["vocab_size"] == 260 and config["eos_token_id"] == 2

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    text = "What is 2 + 3? Déjà vu."
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8"))  # one token per byte, no merges
    assert tok.decode(ids) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    chat_ids = tok.encode(chat)
    assert chat_ids[0] == tok.convert_tokens_to_ids("<|im_start|>") == 1  # specials stay single tokens
    assert tok.decode(chat_ids) == chat

    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams, TokenSequence

    engine = Engine(get_registry(), "torch", EngineConfig(model=str(target), threads=1))
    out = engine.generate([[{"role": "user", "content": "hi"}]], SamplingParams(max_new_tokens=5, n=2, seed=0))
    for c, lp in zip(out, engine.logprobs([TokenSequence.of(c) for c in out], 1.0)):
        assert c.completion_ids.max() < 260
        np.testing.assert_allclose(c.logprobs, lp, atol=2e-4)
