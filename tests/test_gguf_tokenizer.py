"""GGUF import keeps the GGUF's own tokenization, or refuses.

The GGUF files are written here (gguf.GGUFWriter): the tiny Llama's weights with a SentencePiece
("llama") vocabulary trained by the sentencepiece library — byte-fallback <0xNN> pieces, scores,
token types — or with the tiny model's own byte-level BPE ("gpt2") vocabulary. The references are
independent of the converted tokenizer: the trained SentencePiece model itself, and the tiny
model's original HF tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gguf_util import _add_vocab, bpe_vocab, spm_vocab, write_gguf
from polyrl.errors import ConfigError
from polyrl.backend_kit.gguf_vocab import (ROUND_TRIP_TEXTS, CONTROL, check_gguf_tokenizer, read_vocab,
                               reference_encoder, verify_tokenizer)

VOCAB_SIZE = 512  # the tiny Llama's embedding rows


@pytest.fixture(scope="module", params=[True, False], ids=["space-prefix", "no-prefix"])
def spm(request):
    return spm_vocab(VOCAB_SIZE, add_space_prefix=request.param)


def _sentencepiece(model: bytes):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model)
    return processor


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_reference_encoder_is_the_trained_sentencepiece_model(spm, tmp_path, tiny_model_dir):
    """The vocabulary read back from the GGUF encodes like the SentencePiece model it came from."""
    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=spm, copy_files=False)
    encode = reference_encoder(read_vocab(path))
    trained = _sentencepiece(spm["spm_model"])
    for text in ROUND_TRIP_TEXTS:
        assert encode(text) == list(trained.EncodeAsIds(text)), text
    assert any(spm["tokens"][i].startswith("<0x") for i in encode("🙂"))  # byte fallback is exercised


def test_spm_gguf_converts_to_a_folder_whose_tokenizer_round_trips(spm, tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from polyrl_torch.models import gguf_to_hf

    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=spm, copy_files=False)
    out = gguf_to_hf(str(path.parent), path.name, str(tmp_path / "hf"))
    saved = AutoTokenizer.from_pretrained(out)
    trained = _sentencepiece(spm["spm_model"])
    for text in ROUND_TRIP_TEXTS:
        ids = _ids(saved, text)
        assert ids == list(trained.EncodeAsIds(text)), text
        assert saved.decode(ids) == trained.DecodeIds(ids), text
    merged = _ids(saved, "The quick brown fox")
    assert len(merged) < len("The quick brown fox") - 4  # pieces, not single characters


def _tokenizer_only_gguf(folder: Path, arch: str, vocab: dict) -> Path:
    """A GGUF with hyper-parameters and a vocabulary but no tensors: all a tokenizer load reads."""
    import gguf

    folder.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), arch)
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_key_length(16)
    writer.add_value_length(16)
    _add_vocab(writer, vocab)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return folder / "model.gguf"


def test_transformers_gemma3_conversion_is_caught_and_repaired(spm, tmp_path):
    """transformers converts a Gemma 3 GGUF's SentencePiece vocabulary into a Unigram model
    without the dummy prefix: the check refuses that, the repaired tokenizer passes."""
    from transformers import AutoTokenizer

    path = _tokenizer_only_gguf(tmp_path / "g3", "gemma3", spm)
    vocab = read_vocab(path)
    converted = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    with pytest.raises(ConfigError, match="encodes .* differently") as err:
        verify_tokenizer(converted, vocab, path.name)
    assert err.value.field == "model" and "original HF model folder" in err.value.fix
    repaired = check_gguf_tokenizer(converted, path, converted=True)
    trained = _sentencepiece(spm["spm_model"])
    assert all(_ids(repaired, t) == list(trained.EncodeAsIds(t)) for t in ROUND_TRIP_TEXTS)


@pytest.mark.parametrize("pre", ["default", "qwen2", "llama-bpe"])
def test_bpe_gguf_round_trips_with_its_pre_tokenizer(pre, tmp_path, tiny_model_dir):
    """A byte-level BPE ("gpt2") GGUF: for GPT-2's split the converted ids equal the original HF
    tokenizer's; for Qwen2's / Llama 3's digit splitting (which transformers ignores) the check
    catches the unrepaired conversion and the repaired one matches the reference."""
    from transformers import AutoTokenizer

    from polyrl_torch.models import gguf_to_hf

    vocab = dict(bpe_vocab(tiny_model_dir), pre=pre)
    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=vocab, copy_files=False)
    raw = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    out = gguf_to_hf(str(path.parent), path.name, str(tmp_path / "hf"))
    saved = AutoTokenizer.from_pretrained(out)
    encode = reference_encoder(read_vocab(path))
    for text in ROUND_TRIP_TEXTS:
        assert _ids(saved, text) == encode(text), text
        assert saved.decode(_ids(saved, text)) == text
    if pre == "default":
        original = AutoTokenizer.from_pretrained(tiny_model_dir)
        assert all(_ids(saved, t) == _ids(original, t) for t in ROUND_TRIP_TEXTS)
    else:
        assert _ids(saved, "1000 + 12345") != _ids(raw, "1000 + 12345")
        with pytest.raises(ConfigError):
            verify_tokenizer(raw, read_vocab(path), path.name)


def _broken_spm(spm: dict) -> dict:
    """A normal piece typed CONTROL: transformers then cuts it out of any text as a special
    token, SentencePiece never emits it for text."""
    types = list(spm["types"])
    piece = next(i for i, t in enumerate(spm["tokens"]) if t == "he")
    types[piece] = CONTROL
    return dict(spm, types=types)


@pytest.mark.faults
def test_broken_vocabulary_is_refused_and_nothing_is_written(spm, tmp_path, tiny_model_dir):
    from polyrl_torch.models import gguf_to_hf

    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=_broken_spm(spm), copy_files=False)
    with pytest.raises(ConfigError, match="encodes 'The quick brown fox.*differently") as err:
        gguf_to_hf(str(path.parent), path.name, str(tmp_path / "hf"))
    assert err.value.field == "model"
    assert not (tmp_path / "hf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf-")]  # no temp leftovers


@pytest.mark.faults
def test_torch_engine_loading_a_gguf_directly_is_verified(spm, tmp_path, tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    good = write_gguf(tiny_model_dir, tmp_path / "good", vocab=spm, copy_files=False)
    engine = Engine(get_registry(), "torch", EngineConfig(model=str(good), role="generate", threads=1))
    trained = _sentencepiece(spm["spm_model"])
    assert _ids(engine.raw.tokenizer, ROUND_TRIP_TEXTS[6]) == list(trained.EncodeAsIds(ROUND_TRIP_TEXTS[6]))
    bad = write_gguf(tiny_model_dir, tmp_path / "bad", vocab=_broken_spm(spm), copy_files=False)
    with pytest.raises(ConfigError, match="differently"):
        Engine(get_registry(), "torch", EngineConfig(model=str(bad), role="generate", threads=1))


@pytest.mark.faults
def test_max_refuses_a_gguf_whose_vocabulary_is_not_the_tokenizers(spm, tmp_path, tiny_model_dir):
    """max_model_path names a GGUF; the tokenizer comes from model.path: another vocabulary is
    refused before MAX compiles anything."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    if not get_registry().status("max").available:
        pytest.skip("max backend not usable here")
    folder = tmp_path / "m"
    gguf_path = write_gguf(tiny_model_dir, folder, vocab=spm)  # the BPE tokenizer files beside it
    with pytest.raises(ConfigError, match="differently") as err:
        Engine(get_registry(), "max", EngineConfig(model=str(folder), role="generate",
                                                     options={"max_model_path": str(gguf_path)}))
    assert err.value.field == "model"


@pytest.mark.faults
def test_max_refuses_a_mixed_quantisation_gguf_with_the_convert_fix(tmp_path, tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    if not get_registry().status("max").available:
        pytest.skip("max backend not usable here")
    write_gguf(tiny_model_dir, tmp_path / "q", vocab=bpe_vocab(tiny_model_dir),
               quant={"attn_": "Q8_0", "ffn_": "Q4_0", "token_embd": "Q5_0"})
    with pytest.raises(ConfigError, match="mixes the quantisation types F32, Q4_0, Q5_0, Q8_0") as err:
        Engine(get_registry(), "max", EngineConfig(model=str(tmp_path / "q"), role="generate"))
    # the GGUF came from the model path, not from backends.options.max_model_path: the error names that field
    assert "polyrl convert" in err.value.fix and err.value.field == "model"


def test_torch_dequantises_a_mixed_quantisation_gguf_on_convert(tmp_path, tiny_model_dir):
    """The fix MAX names works: `polyrl convert` (torch) turns the mixed file into float weights
    equal to gguf's own dequantisation."""
    import gguf
    from safetensors.numpy import load_file

    from polyrl_torch.models import gguf_to_hf

    mixed = write_gguf(tiny_model_dir, tmp_path / "q", vocab=bpe_vocab(tiny_model_dir),
                       quant={"ffn_down": "Q8_0", "ffn_up": "Q4_0"}, copy_files=False)
    out = Path(gguf_to_hf(str(mixed.parent), mixed.name, str(tmp_path / "hf")))
    weights = load_file(str(next(out.glob("*.safetensors"))))
    reader = gguf.GGUFReader(str(mixed))
    stored = {t.name: t for t in reader.tensors}
    for hf_name, gguf_name in (("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
                               ("model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight")):
        t = stored[gguf_name]
        want = gguf.quants.dequantize(t.data, t.tensor_type)
        np.testing.assert_allclose(weights[hf_name], want.reshape(weights[hf_name].shape), atol=1e-6)
        original = load_file(str(Path(tiny_model_dir) / "model.safetensors"))[hf_name]
        assert 0 < float(np.abs(weights[hf_name] - original).max()) < 0.05  # really quantised


@pytest.mark.faults
def test_polyrl_convert_prints_one_error_line_for_a_broken_vocabulary(spm, tmp_path, tiny_model_dir, capsys):
    from polyrl.cli import main

    path = write_gguf(tiny_model_dir, tmp_path / "g", vocab=_broken_spm(spm), copy_files=False)
    assert main(["convert", str(path), str(tmp_path / "hf"), "--to", "hf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = next(x for x in err if x.startswith("error: "))
    assert "differently from the GGUF's own 'llama' tokenizer" in line and "Fix:" in line
    assert "Traceback" not in "\n".join(err)


@pytest.mark.faults
def test_bpe_merges_outside_the_vocabulary_are_an_error(tmp_path, tiny_model_dir):
    vocab = bpe_vocab(tiny_model_dir)
    made = "".join(vocab["merges"][0].split(" "))  # the first merge's result
    tokens = ["<renamed>" if t == made else t for t in vocab["tokens"]]
    path = _tokenizer_only_gguf(tmp_path / "g", "llama", dict(vocab, tokens=tokens))
    encode = reference_encoder(read_vocab(path))
    with pytest.raises(ConfigError, match="not in its vocabulary") as err:
        for text in ROUND_TRIP_TEXTS:
            encode(text)
    assert err.value.field == "model"
