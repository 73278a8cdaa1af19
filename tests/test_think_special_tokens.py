"""A tokenizer whose ``<think>`` / ``</think>`` are special tokens: completion text keeps the tags
(``polyrl.backend_kit.tokens.completion_decoder``), so the rewards read the answer after
``</think>``, not the reasoning. Before, every backend decoded with ``skip_special_tokens`` and the
tags vanished: "<think>so 4</think>2" reached the rewards as "so 42".

Real tokenizers (the tiny model's, with the tags added as special tokens, as some reasoning models
ship them) and the real torch engine; no stand-ins.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from polyrl.reasoning import final_part, think_suffix

from chat_kwargs_model import with_thinking_switch

transformers = pytest.importorskip("transformers")
TAGS = ["<think>", "</think>"]


def with_special_think_tags(tiny_model_dir: str, dst: Path, special: bool = True) -> str:
    """A copy of the thinking-switch tiny model (its template opens ``<think>``) whose tokenizer
    has the tags as added tokens (``special``: special ones), its embeddings grown to hold them."""
    from safetensors.numpy import load_file, save_file
    from tokenizers import AddedToken

    with_thinking_switch(tiny_model_dir, dst)
    tok = transformers.AutoTokenizer.from_pretrained(str(dst))
    tokens = [AddedToken(t, special=special, normalized=False) for t in TAGS]
    if special:
        tok.add_special_tokens({"additional_special_tokens": tokens})
    else:
        tok.add_tokens(tokens)
    tok.save_pretrained(str(dst))
    config = json.loads((dst / "config.json").read_text())
    rows = len(tok)
    weights = load_file(str(dst / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        if name in weights:
            w = weights[name]
            weights[name] = np.concatenate([w, np.zeros((rows - w.shape[0], w.shape[1]), w.dtype)])
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config["vocab_size"] = rows
    (dst / "config.json").write_text(json.dumps(config))
    return str(dst)


@pytest.fixture(scope="module")
def special_model(tiny_model_dir, tmp_path_factory) -> str:
    return with_special_think_tags(tiny_model_dir, tmp_path_factory.mktemp("models") / "special-think")


@pytest.fixture(scope="module")
def plain_model(tiny_model_dir, tmp_path_factory) -> str:
    return with_special_think_tags(tiny_model_dir, tmp_path_factory.mktemp("models") / "plain-think", special=False)


def _ids(tok, text: str) -> list[int]:
    return [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]


def test_special_think_tags_stay_in_the_text_and_other_special_tokens_go(special_model):
    from polyrl.backend_kit.tokens import completion_decoder, special_tag_ids

    tok = transformers.AutoTokenizer.from_pretrained(special_model)
    ids = _ids(tok, "<think>so 4</think>2")
    assert tok.decode(ids, skip_special_tokens=True) == "so 42"  # what the backends gave the rewards
    assert special_tag_ids(tok) == frozenset(tok.convert_tokens_to_ids(TAGS))
    text = completion_decoder(tok)(ids)
    assert text == "<think>so 4</think>2"  # <|im_end|> dropped, as skip_special_tokens drops it
    assert final_part(text) == "2"


def test_plain_think_tags_and_no_tags_decode_as_skip_special_tokens_did(tiny_model_dir, plain_model):
    from polyrl.backend_kit.tokens import completion_decoder, special_tag_ids

    for model in (tiny_model_dir, plain_model):
        tok = transformers.AutoTokenizer.from_pretrained(model)
        ids = _ids(tok, "<think>so 4</think>2 and 3")
        assert not special_tag_ids(tok)
        assert completion_decoder(tok)(ids) == tok.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def special_engine(special_model):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    pytest.importorskip("polyrl_torch")
    registry = get_registry()
    if not registry.status("torch").available:
        pytest.skip("torch backend not usable here")
    return Engine(registry, "torch", EngineConfig(model=special_model, threads=1, seed=0))


def test_the_torch_engine_decodes_completions_with_the_tags_and_the_reward_reads_the_answer(special_model,
                                                                                              special_engine):
    from polyrl.rewards.builtin import last_number

    tok = transformers.AutoTokenizer.from_pretrained(special_model)
    text = special_engine.raw.decode(_ids(tok, "<think>so 4</think>2"))
    assert text == "<think>so 4</think>2"
    assert last_number(final_part(text)) == 2.0  # "so 42" read 42


def test_a_template_opening_a_special_think_is_found(special_engine):
    """The trainer's ``reasoning_open`` check decodes the generation prompt with the engine's decode:
    with the tags dropped it found no open ``<think>``, and a completion cut inside its reasoning
    was scored as an answer."""
    import functools

    from polyrl.trainer import _rendered

    suffix = think_suffix(functools.partial(_rendered, special_engine), special_engine.raw.decode)
    assert suffix is not None and special_engine.raw.decode(suffix.tolist()).endswith("<think>\n")


def _other_engine(backend: str, model: str):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    status = get_registry().status(backend)
    if not status.available:
        pytest.skip(f"backend {backend!r} not usable here: {status.reason}")
    return Engine(get_registry(), backend, EngineConfig(model=model, role="generate", threads=1, seed=0))



def test_the_mlx_engine_decodes_with_the_tags_as_torch_does(special_model):
    """The MLX engine's ``decode`` is the same completion decoder: the tags stay, the end-of-turn
    token goes."""
    engine = _other_engine("mlx", special_model)
    tok = transformers.AutoTokenizer.from_pretrained(special_model)
    assert engine.raw.decode(_ids(tok, "<think>so 4</think>2")) == "<think>so 4</think>2"
    assert engine.raw.decode(_ids(tok, "no tags 7")) == "no tags 7"


def test_the_max_engine_decodes_with_its_tokenizers_special_tags(tiny_model_dir, special_model, monkeypatch):
    """MAX's ``decode`` builds the completion decoder from the engine's own tokenizer. The engine is
    the tiny model's (its graph is in the compile cache; the grown vocabulary of ``special_model``
    costs a fresh compile of many minutes, checked once by hand), given the special-tag tokenizer:
    decoding reads no weights."""
    engine = _other_engine("max", tiny_model_dir)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(special_model)
        monkeypatch.setattr(engine.raw, "tokenizer", tok)
        engine.raw.__dict__.pop("_decode", None)  # the cached decoder of the tiny model's tokenizer
        assert engine.raw.decode(_ids(tok, "<think>so 4</think>2")) == "<think>so 4</think>2"
        assert engine.raw.decode(_ids(tok, "no tags 7")) == "no tags 7"
    finally:
        engine.raw.__dict__.pop("_decode", None)
        engine.raw.close()
