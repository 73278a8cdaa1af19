"""A tiny random sequence-classification Llama (one label) for reward-model tests; needs torch.

    >>> from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model
    >>> path = build_tiny_reward_model("/tmp/tiny-rm")   # the tiny tokenizer, random weights

Built from ``build_tiny_llama``'s tokenizer and config (``LlamaForSequenceClassification``,
``num_labels=1``, ``pad_token_id`` set so batches pool the last real token); deterministic for a
seed. Written to a temp folder and renamed into place, reused when already complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

MARKER = ".polyrl-tiny-reward-model.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_tiny_reward_model(path: str | os.PathLike[str], *, seed: int = 0, hidden_size: int = 64,
                            num_layers: int = 2) -> str:
    """Write (once) the tiny reward model to ``path``; return the path."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from polyrl.testing.tiny_model import build_tiny_llama

    params = {"seed": seed, "hidden_size": hidden_size, "num_layers": num_layers, "format": 1}
    target = Path(path).expanduser().resolve()
    try:
        if json.loads((target / MARKER).read_text()) == params:
            return str(target)
    except (OSError, ValueError):
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        base = build_tiny_llama(tmp / "base", hidden_size=hidden_size, num_layers=num_layers)
        config = json.loads((Path(base) / "config.json").read_text())
        config.update(architectures=["LlamaForSequenceClassification"], num_labels=1)
        out = tmp / "model"
        out.mkdir()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            model = LlamaForSequenceClassification(LlamaConfig(**{k: v for k, v in config.items()
                                                                  if k not in ("architectures", "torch_dtype")},
                                                               architectures=config["architectures"]))
        finally:
            torch.random.set_rng_state(generator_state)
        model.config.pad_token_id = config["pad_token_id"]
        model.save_pretrained(out)
        for name in TOKENIZER_FILES:
            shutil.copy(Path(base) / name, out / name)
        (out / MARKER).write_text(json.dumps(params) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.rename(out, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


__all__ = ["build_tiny_reward_model"]
