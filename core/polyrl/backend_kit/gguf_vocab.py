"""A GGUF file's own tokenizer, rebuilt from its vocabulary, and the check that an HF tokenizer
encodes exactly like it.

Why: a GGUF carries its tokenizer as data (``tokenizer.ggml.*``: model kind, tokens, scores, token
types, merges), and what llama.cpp does with that data is the reference. transformers' GGUF
tokenizer converters get the SentencePiece kind wrong (single characters instead of merged
pieces), and a model fed other ids than it was trained on generates garbage without any error.
So every GGUF import encodes a fixed set of texts both ways and refuses a mismatch.

The reference encoders:
    * ``llama`` (SentencePiece): the vocabulary becomes a SentencePiece BPE ``ModelProto``
      (pieces, scores, types, byte fallback, dummy-prefix from ``add_space_prefix``) encoded by
      the ``sentencepiece`` library itself: merge the adjacent pair whose union has the highest
      score, bytes for what no piece covers — llama.cpp's SPM algorithm.
    * ``gpt2`` (byte-level BPE): the GGUF's merges applied by rank to the pre-tokenizer's chunks
      (the regex named by ``tokenizer.ggml.pre``), written out here independently of the
      ``tokenizers`` library that the converted HF tokenizer runs on.

The imports (``gguf``, ``sentencepiece``, ``regex``) are lazy: the core never needs them unless a
GGUF is read, and the backends that read GGUF files depend on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import attrs

from polyrl.errors import ConfigError
from polyrl.byte_level import byte_to_char

#: Texts every GGUF import encodes both ways: ASCII, runs of spaces, digits, accents and other
#: scripts, emoji (byte fallback), code with tabs and newlines.
ROUND_TRIP_TEXTS: tuple[str, ...] = (
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces,   three inside and one trailing ",
    "12 + 7 = 19; 3.14159 * 1000 = 3141.59",
    "naïve café, Zürich — “quotes” and ß",
    "Привет мир, 你好世界, こんにちは",
    "emoji: 🙂🚀 and a family 👩‍👩‍👧",
    "def f(x):\n\treturn x ** 2  # square\n",
    "\n\nnew\nlines\r\n",
)

#: llama.cpp's token types (also SentencePiece's piece types, same numbers).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

#: Pre-tokenizer regexes of byte-level BPE vocabularies, by ``tokenizer.ggml.pre`` (llama.cpp's
#: names). GPT-2's is the default; others are added as files using them are met.
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
BPE_PRE_SPLITS: dict[str, str] = {
    "default": _GPT2_SPLIT, "gpt2": _GPT2_SPLIT, "gpt-2": _GPT2_SPLIT, "smollm": _GPT2_SPLIT,
    "starcoder": _GPT2_SPLIT, "refact": _GPT2_SPLIT,
    "llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT,
}


@attrs.define(frozen=True)
class GGUFVocab:
    """The ``tokenizer.ggml.*`` data of one GGUF file."""

    model: str  # "llama" (SentencePiece), "gpt2" (byte-level BPE), ...
    tokens: tuple[str, ...]
    scores: tuple[float, ...] = ()
    types: tuple[int, ...] = ()
    merges: tuple[str, ...] = ()
    pre: str = "default"
    add_space_prefix: bool = True
    unk_id: int | None = None

    def special_ids(self) -> set[int]:
        return {i for i, t in enumerate(self.types) if t in (CONTROL, UNKNOWN)}


def read_vocab(path: str | Path) -> GGUFVocab | None:
    """The tokenizer data of a GGUF file, None if it holds none (the ``gguf`` package reads the
    metadata; tensors are memory-mapped, not read). Cached per file version: an import checks
    the tokenizer it converts and the one it saved."""
    stat = Path(path).stat()
    return _read_vocab(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _read_vocab(path: str, mtime_ns: int, size: int) -> GGUFVocab | None:
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError("reading GGUF files needs the gguf package", field="model",
                          fix='pip install "gguf>=0.10"') from exc
    reader = gguf.GGUFReader(str(path))

    def value(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    tokens = value("tokenizer.ggml.tokens")
    if not tokens:
        return None
    return GGUFVocab(
        model=str(value("tokenizer.ggml.model", "llama")), tokens=tuple(tokens),
        scores=tuple(float(s) for s in value("tokenizer.ggml.scores", []) or []),
        types=tuple(int(t) for t in value("tokenizer.ggml.token_type", []) or []),
        merges=tuple(value("tokenizer.ggml.merges", []) or []),
        pre=str(value("tokenizer.ggml.pre", "default")),
        add_space_prefix=bool(value("tokenizer.ggml.add_space_prefix", True)),
        unk_id=value("tokenizer.ggml.unknown_token_id"),
    )


# --- SentencePiece ("llama") ---------------------------------------------------------------------


def sentencepiece_proto_module() -> Any:
    """SentencePiece's ``ModelProto`` classes. transformers ships a copy generated for the
    protobuf runtime it supports; sentencepiece's own copy may need a newer runtime than the
    one installed (it refuses to import then)."""
    try:
        from transformers.utils import sentencepiece_model_pb2_new as pb
    except ImportError:
        from sentencepiece import sentencepiece_model_pb2 as pb
    return pb


def spm_model_proto(vocab: GGUFVocab) -> bytes:
    """A serialized SentencePiece BPE model of the vocabulary (what llama.cpp's SPM encoder runs)."""
    pb = sentencepiece_proto_module()

    proto = pb.ModelProto()
    types = vocab.types or (NORMAL,) * len(vocab.tokens)
    scores = vocab.scores or (0.0,) * len(vocab.tokens)
    for token, score, kind in zip(vocab.tokens, scores, types):
        piece = proto.pieces.add()
        piece.piece, piece.score = token, float(score)
        piece.type = kind if kind in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE) else NORMAL
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = any(t == BYTE for t in types)
    proto.trainer_spec.vocab_size = len(vocab.tokens)
    proto.trainer_spec.unk_id = vocab.unk_id if vocab.unk_id is not None else _first(types, UNKNOWN, 0)
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = vocab.add_space_prefix
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    return proto.SerializeToString()


def _first(values: Sequence[int], wanted: int, default: Any) -> Any:
    return next((i for i, v in enumerate(values) if v == wanted), default)


def _spm_encoder(vocab: GGUFVocab):
    try:
        import sentencepiece as spm
    except ImportError as exc:
        raise ConfigError("checking a SentencePiece GGUF tokenizer needs the sentencepiece package",
                          field="model", fix='pip install "sentencepiece>=0.2"') from exc
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(spm_model_proto(vocab))
    except RuntimeError as exc:  # duplicate or empty pieces, no unknown piece...
        raise ConfigError(f"the GGUF's SentencePiece vocabulary is not a valid tokenizer: {exc}",
                          field="model", fix="use the original HF model folder instead of the GGUF") from None
    return lambda text: list(processor.EncodeAsIds(text))


def spm_backend(vocab: GGUFVocab) -> dict[str, Any]:
    """``tokenizers`` parts that encode like SentencePiece BPE: merges ranked by the merged piece's
    score (SentencePiece merges the highest-scoring pair first), byte fallback, ``▁`` for spaces
    and the dummy prefix the GGUF asks for. transformers builds a Unigram model for some
    architectures (Gemma) and ignores ``add_space_prefix``; these parts do neither."""
    from tokenizers import decoders, models, normalizers

    types = vocab.types or (NORMAL,) * len(vocab.tokens)
    scores = vocab.scores or (0.0,) * len(vocab.tokens)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    mergeable = {t for t, k in zip(vocab.tokens, types) if k in (NORMAL, USER_DEFINED)}
    ranked = []
    for token, score, kind in zip(vocab.tokens, scores, types):
        if kind != NORMAL or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-score, ids[token], ids[left], left, right))
    ranked.sort()
    unk = vocab.unk_id if vocab.unk_id is not None else _first(types, UNKNOWN, None)
    model = models.BPE(ids, [(left, right) for *_, left, right in ranked],
                       unk_token=vocab.tokens[unk] if unk is not None else None,
                       fuse_unk=True, byte_fallback=any(k == BYTE for k in types))
    steps = [normalizers.Prepend("▁")] if vocab.add_space_prefix else []
    decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        decode.append(decoders.Strip(content=" ", left=1))
    return {"model": model, "normalizer": normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")]),
            "pre_tokenizer": None, "decoder": decoders.Sequence(decode)}


def repair_tokenizer(tokenizer: Any, vocab: GGUFVocab) -> Any:
    """Fix what transformers' GGUF conversion gets wrong, keeping the tokenizer's special tokens,
    post-processor and chat template: SentencePiece vocabularies get the SentencePiece encoding
    (:func:`spm_backend`); byte-level BPE ones the pre-tokenizer their ``pre`` names
    (transformers applies GPT-2's split to every one) and a byte-level decoder."""
    backend = tokenizer.backend_tokenizer
    if vocab.model == "llama":
        for name, part in spm_backend(vocab).items():
            setattr(backend, name, part)
    elif vocab.model == "gpt2" and vocab.pre in BPE_PRE_SPLITS:
        from tokenizers import Regex, decoders, pre_tokenizers

        backend.decoder = decoders.ByteLevel()  # transformers strips a leading space for "llama" files
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(BPE_PRE_SPLITS[vocab.pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    return tokenizer


# --- byte-level BPE ("gpt2") ---------------------------------------------------------------------


def _bpe_encoder(vocab: GGUFVocab):
    import regex

    split = BPE_PRE_SPLITS.get(vocab.pre)
    if split is None:
        return None
    pattern = regex.compile(split)
    ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(vocab.merges)}
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    to_unicode = byte_to_char()

    def word(chunk: str) -> list[int]:
        parts = [to_unicode[b] for b in chunk.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: ranks.get((parts[i], parts[i + 1]), 1 << 62))
            if (parts[best], parts[best + 1]) not in ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        missing = [p for p in parts if p not in ids]
        if missing:
            raise ConfigError(f"the GGUF's BPE merges make {missing[0]!r}, which is not in its "
                              "vocabulary", field="model",
                              fix="use the original HF model folder instead of the GGUF")
        return [ids[p] for p in parts]

    return lambda text: [i for chunk in pattern.findall(text) for i in word(chunk)]


def reference_encoder(vocab: GGUFVocab):
    """``text -> ids`` as the GGUF's own tokenizer encodes it (no BOS/EOS); None if polyrl has no
    reference for this tokenizer kind or pre-tokenizer."""
    if vocab.model == "llama":
        return _spm_encoder(vocab)
    if vocab.model == "gpt2":
        return _bpe_encoder(vocab)
    return None


def verify_tokenizer(tokenizer: Any, vocab: GGUFVocab, source: str,
                     texts: Sequence[str] = ROUND_TRIP_TEXTS) -> bool:
    """Refuse an HF tokenizer that does not encode ``texts`` to the GGUF's own ids.

    Returns False when there is no reference for this tokenizer kind (nothing was checked),
    True when every text matched. ``source`` names the GGUF in the error.
    """
    encode = reference_encoder(vocab)
    if encode is None:
        return False
    for text in texts:
        want = encode(text)
        got = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            raise ConfigError(
                f"the tokenizer converted from {source} encodes {text!r} differently from the GGUF's "
                f"own {vocab.model!r} tokenizer (from token {at}: {got[at:at + 4]} vs "
                f"{want[at:at + 4]}); the model would read other ids than it was trained on",
                field="model",
                fix="use the original HF model folder (config.json + tokenizer files) instead of "
                    "the GGUF, or put the original tokenizer files next to the .gguf")
    return True


def check_gguf_tokenizer(tokenizer: Any, gguf_path: str | Path, *, converted: bool) -> Any:
    """The tokenizer to use with a GGUF model, verified against the GGUF's own vocabulary.

    ``converted``: transformers built ``tokenizer`` from the GGUF (then SentencePiece vocabularies
    are repaired first); otherwise it came from HF files beside the GGUF and is only checked.
    A GGUF without a vocabulary, or of a kind polyrl has no reference encoder for, is logged as
    unverified.
    """
    from polyrl.logs import get_logger

    log = get_logger("polyrl.gguf")
    vocab = read_vocab(gguf_path)
    name = Path(gguf_path).name
    if vocab is None:
        log.info("gguf_tokenizer_not_verified", gguf=name, why="the GGUF holds no vocabulary")
        return tokenizer
    if converted:
        repair_tokenizer(tokenizer, vocab)
    if verify_tokenizer(tokenizer, vocab, name):
        log.info("gguf_tokenizer_verified", gguf=name, kind=vocab.model, texts=len(ROUND_TRIP_TEXTS))
    else:
        log.warning("gguf_tokenizer_not_verified", gguf=name, kind=vocab.model, pre=vocab.pre,
                    why="polyrl has no reference encoder for this tokenizer kind")
    return tokenizer
