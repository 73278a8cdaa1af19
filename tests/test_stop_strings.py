"""``polyrl.backend_kit.stopping.StopStrings`` on a real tokenizer (the tiny model's byte-level BPE):
every in-process backend ends a completion where the newest token completes a stop string, and
never before, however many tokens the stop spans or the text leaves out."""

from __future__ import annotations

import pytest

from polyrl.backend_kit.stopping import StopStrings
from polyrl.backend_kit.tokens import completion_decoder


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _first_hit(tok, ids: list[int], stops: list[str]) -> int | None:
    """The number of tokens after which the sampling loop would end the row (None: never)."""
    stop = StopStrings(completion_decoder(tok), stops)
    return next((k for k in range(1, len(ids) + 1) if stop.hit(ids[:k])), None)


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def _ends_at(tok, ids: list[int], at: int | None, stop: str) -> bool:
    """Whether token ``at`` is the one that completes ``stop`` (the text runs to its end)."""
    decode = completion_decoder(tok)
    return at is not None and stop in decode(ids[:at]) and stop not in decode(ids[:at - 1])


def test_a_stop_spanning_special_tokens_the_text_leaves_out_is_found(tok):
    """Special tokens the text leaves out (<|im_end|> sampled under ignore_eos) spell no characters:
    the window of 4 tokens a character did not reach back past them, so the text held "ab" and the
    row sampled on to max_tokens as if no stop had come."""
    ids = _ids(tok, "x a") + [tok.convert_tokens_to_ids("<|im_end|>")] * 20 + _ids(tok, "b c")
    decode = completion_decoder(tok)
    assert decode(ids) == "x ab c"
    assert _first_hit(tok, ids, ["ab"]) == len(_ids(tok, "x a")) + 20 + 1
    assert _first_hit(tok, ids, ["x ab c"]) == len(ids)


def test_a_stop_ending_in_a_character_split_over_byte_tokens_ends_at_its_last_byte(tok):
    text = "The answer is 日本 and 本日"
    ids = _ids(tok, text)
    assert len(_ids(tok, "日")) == len(_ids(tok, "本")) == 3  # one byte token each: a character spans three
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["日本"]), "日本")
    assert completion_decoder(tok)(ids[:_first_hit(tok, ids, ["日本"])]).endswith("日本")  # not at its first byte
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["本日", "s 日本 an"]), "s 日本 an")  # the first completed


def test_long_overlapping_and_unreachable_stops(tok):
    text = "one two three four five six seven eight nine ten eleven twelve"
    ids = _ids(tok, text)
    spanning = text[3:]  # every token but the first's
    assert _first_hit(tok, ids, [spanning]) == len(ids)
    assert _first_hit(tok, ids, [text + " thirteen", "x" * 10_000]) is None  # longer than any completion
    # overlapping: the one completed first ends the row
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["seven eight nine", "six seven"]), "six seven")


class _CountingDecoder:
    """A stand-in tokenizer's decode: token 0 is a special token the text leaves out, any other
    one letter; counts the calls and the tokens decoded (the work a real tokenizer does)."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens = 0

    def __call__(self, ids: list[int]) -> str:
        self.calls += 1
        self.tokens += len(ids)
        return "".join(chr(ord("a") + (t - 1) % 26) for t in ids if t != 0)


def test_a_long_run_of_tokens_the_text_leaves_out_costs_little_decoding():
    """A row sampling special tokens that spell nothing (<|im_end|> under ignore_eos) widened its
    window over the whole run on every token, decoding the row each time: 4096 such tokens made
    51k decode calls over 20.5M tokens. The work now grows with the row, and a stop spanning the
    run is still found at the token that completes it."""
    decode = _CountingDecoder()
    stop = StopStrings(decode, ["ab"])
    text, run = [3] * 200 + [1], 4096  # "c" * 200 + "a", then the run, then "b"
    ids: list[int] = []
    for token in [*text, *[0] * run, 2]:
        ids.append(token)
        if stop.hit(ids):
            break
    assert len(ids) == len(text) + run + 1  # ended at the "b" completing "ab", not before
    steps = len(ids)
    assert decode.calls <= 3 * steps
    assert decode.tokens <= 3 * steps * (4 * len("ab") + 4)


def _letters(text: str) -> list[int]:
    """``_CountingDecoder``'s ids spelling ``text`` (lowercase letters)."""
    return [ord(c) - ord("a") + 1 for c in text]


@pytest.mark.parametrize("count", [1, 16])
def test_a_long_stop_costs_each_step_a_few_tokens_of_decoding_however_long_the_completion(count):
    """A stop of 3,000 characters made every step decode a window of 4 tokens a character, the
    whole completion here: a 4,096-token completion decoded 8.4M tokens (a 2,048-token one took ~3 s
    of CPU against 0.43 s with a short stop). The row's text is now kept as it grows: a step decodes
    its newest tokens and the few before them, and the stop is still found at its last token."""
    import random

    rng = random.Random(87)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4096))
    stops = [text[-3000 - k:len(text) - k] for k in range(count)]  # the first ends at the last token
    decode = _CountingDecoder()
    stop = StopStrings(decode, ["x" * 5000, *stops])
    ids: list[int] = []
    for token in _letters(text):
        ids.append(token)
        if stop.hit(ids):
            break
    assert len(ids) == len(text) - count + 1  # ended where the earliest stop was completed, not before
    steps, distinct = len(ids), 26  # ``_silent`` decodes each distinct id once (and twice more if empty)
    assert decode.calls <= 2 * steps + 2 * distinct
    assert decode.tokens <= 4 * steps + 3 * distinct


def test_rows_keep_their_own_text_and_a_row_given_other_ids_restarts_from_them():
    """Each row of a batch holds its own text (rows checked in turn); ``StopStrings.hit`` keeps one
    row, read again from the first token whenever its ids are not the last ones grown."""
    stop = StopStrings(_CountingDecoder(), ["abc"])
    first, second = stop.row(), stop.row()
    a, b = _letters("xxabc"), _letters("abxbc")
    results = [(first.hit(a[:k]), second.hit(b[:k])) for k in range(1, 6)]
    assert results == [(False, False)] * 4 + [(True, False)]
    assert [stop.hit(a[:k]) for k in range(1, 6)] == [False] * 4 + [True]
    assert not stop.hit(b)  # other ids: read from the first, "abxbc" holds no "abc"
    assert stop.hit(_letters("zabc"))  # so do these
    assert not stop.hit(_letters("ab")) and stop.hit(_letters("abc"))  # shorter, then grown


def _sentencepiece(decoder: str):
    """A SentencePiece-shaped vocabulary as transformers converts Llama's: "▁" for a space, words
    with and without it, <0xNN> byte pieces for what the pieces lack (a CJK character: three),
    special tokens. ``legacy``: Replace + ByteFallback + Fuse + Strip (Llama 2); ``metaspace``:
    the Metaspace decoder, "▁" prepended first only (legacy=False)."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", *string.ascii_letters,
              *string.digits, *".,!?:'", *(f"▁{w}" for w in ("the", "stop", "here", "a", "answer", "is")), "the"]
    core = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[], unk_token="<unk>",
                                byte_fallback=True))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    core.decoder = (decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)]) if decoder == "legacy"
                    else decoders.Sequence([decoders.ByteFallback(),
                                            decoders.Metaspace(replacement="▁", prepend_scheme="first")]))
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _brute_first_hit(decode, ids: list[int], stops: list[str]) -> int | None:
    """The rule itself: the first k whose text decode(ids[:k]) holds a stop."""
    return next((k for k in range(1, len(ids) + 1) if any(s in decode(ids[:k]) for s in stops)), None)


@pytest.mark.parametrize("vocab", ["byte-level", "legacy", "metaspace"])
def test_the_row_ends_where_the_whole_text_first_holds_a_stop_on_random_tokens(tok, vocab):
    """Exactness against the rule (decode the whole completion at every token) on random ids: byte
    tokens cutting characters (valid or not), words with and without "▁", special tokens the text
    leaves out, and stops anywhere in the text (short, long, starting or ending mid-character)."""
    import random

    tokenizer = tok if vocab == "byte-level" else _sentencepiece(vocab)
    decode = completion_decoder(tokenizer)
    rng = random.Random(87)
    specials = sorted(set(tokenizer.all_special_ids))
    size = len(tokenizer)
    if vocab == "byte-level":
        pool = [i for t in ("日本 answer", "本日 is", " the stop", "é", "😀!") for i in _ids(tokenizer, t)]
    else:
        pool = [i for t in ("▁the", "▁stop", "▁", "a", "the", ".", "<0xE6>", "<0x97>", "<0xA5>", "<0xF0>")
                for i in [tokenizer.convert_tokens_to_ids(t)]]
    for case in range(60):
        ids = [rng.choice(specials) if rng.random() < 0.1 else rng.choice(pool) if rng.random() < 0.6
               else rng.randrange(size) for _ in range(rng.randrange(5, 50))]
        text = decode(ids)
        if len(text) < 2:
            continue
        stops = []
        for _ in range(rng.randrange(1, 4)):
            start = rng.randrange(len(text) - 1)
            stops.append(text[start:rng.randrange(start + 1, min(len(text), start + 60) + 1)])
        expected = _brute_first_hit(decode, ids, stops)
        assert _first_hit(tokenizer, ids, stops) == expected, (case, ids, stops)


def test_stops_over_sentencepiece_spaces_and_byte_pieces_end_at_their_last_token():
    """"▁" pieces (a space, dropped at the text's start) and <0xNN> pieces on a Llama-shaped vocabulary."""
    for decoder in ("legacy", "metaspace"):
        tokenizer = _sentencepiece(decoder)
        decode = completion_decoder(tokenizer)
        ids = tokenizer.encode("the answer is 日本 stop here", add_special_tokens=False)
        assert decode(ids) == "the answer is 日本 stop here"
        for stops in ([" 日本 s"], ["日"], ["本 "], [" stop"], ["e answer is 日本 stop h"], ["is  "], ["the "]):
            assert _first_hit(tokenizer, ids, stops) == _brute_first_hit(decode, ids, stops), (decoder, stops)


def _byte_piece(tokenizer, byte: int) -> int:
    """The id of ``byte``'s own token: an <0xNN> piece, or a byte-level BPE's character for it."""
    piece = tokenizer.convert_tokens_to_ids(f"<0x{byte:02X}>")
    if piece is not None and piece != tokenizer.unk_token_id:
        return piece
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = printable + [b for b in range(256) if b not in printable]
    characters = [chr(b) for b in printable] + [chr(256 + i) for i in range(256 - len(printable))]
    return tokenizer.convert_tokens_to_ids(dict(zip(shifted, characters))[byte])


@pytest.mark.parametrize("vocab", ["byte-level", "legacy", "metaspace"])
def test_a_long_run_of_invalid_byte_pieces_costs_each_step_a_few_tokens_of_decoding(tok, vocab):
    """Probe of session 88 (a reviewer's lead: a run of bytes that never completes a character re-decoded the
    whole run at each step): the work per step stays flat as the run grows, on either decoder (byte-level BPE
    replacing each bad byte, and ByteFallback, whose whole run of pieces reads U+FFFD once one byte is bad; a
    bad byte in a long valid run changes the run's text back to its start, decoded once). Counted: decoded
    tokens per step, whatever the run's length."""
    tokenizer = tok if vocab == "byte-level" else _sentencepiece(vocab)
    decode = completion_decoder(tokenizer)
    for pattern in ([0x80], [0xE2], [0xF0, 0x9F, 0x98], "poisoned"):
        for n in (300, 2400):
            work = [0]

            def counted(ids, work=work):
                work[0] += len(ids)
                return decode(ids)

            run = ([0xE2, 0x82, 0xAC] * (n // 6) + [0x80] + [0xE2, 0x82, 0xAC] * (n // 6) if pattern == "poisoned"
                   else (pattern * n)[:n])
            stop = StopStrings(counted, ["zz"])
            ids: list[int] = []
            for byte in run:
                ids.append(_byte_piece(tokenizer, byte))
                assert not stop.hit(ids)
            assert work[0] <= 16 * len(ids) + 2 * len(ids), (vocab, pattern, n, work[0])  # a poisoning once: the run


@pytest.mark.parametrize("vocab", ["legacy", "metaspace"])
def test_a_bad_byte_piece_ahead_of_valid_characters_hides_them_from_the_stops_as_from_the_text(vocab):
    """ByteFallback reads a run of <0xNN> pieces as one: a bad byte anywhere in it makes every piece of the
    run one U+FFFD, so <0x80> then 日's bytes twelve times is 37 U+FFFD and never holds "日". The row kept
    its text as it read after 8 pieces and started its next window there, inside the run: decoded from
    there the bytes were valid, and the row ended at token 28 on a "日" the completion never holds."""
    tokenizer = _sentencepiece(vocab)
    decode = completion_decoder(tokenizer)
    for lead in ([0x80], [0x41, 0x80], [0xE6, 0x80], [0xF0]):  # a stray, an ASCII piece then a stray, cut ones
        ids = [_byte_piece(tokenizer, b) for b in [*lead, *[0xE6, 0x97, 0xA5] * 12]]
        assert decode(ids) == "\ufffd" * len(ids)
        assert _first_hit(tokenizer, ids, ["日"]) is None, lead
        ended = [*ids, tokenizer.convert_tokens_to_ids("a"), *[_byte_piece(tokenizer, b) for b in (0xE6, 0x97, 0xA5)]]
        assert _first_hit(tokenizer, ended, ["日"]) == len(ended)  # the run ends: a new run reads on its own
    ascii_run = [_byte_piece(tokenizer, b) for b in [0x80, *[0x41] * 30]]  # <0x41> reads "A" alone
    assert decode(ascii_run) == "\ufffd" * 31
    assert _first_hit(tokenizer, ascii_run, ["A", "AA"]) is None
    ended = [*ascii_run, tokenizer.convert_tokens_to_ids("a")]
    assert _first_hit(tokenizer, ended, ["\ufffda", "Aa"]) == len(ended)


@pytest.mark.parametrize("vocab", ["legacy", "metaspace"])
def test_the_row_ends_where_the_whole_text_first_holds_a_stop_over_long_runs_of_byte_pieces(vocab):
    """Exactness against the rule on ByteFallback runs longer than the 8 tokens a row's text waits on
    U+FFFD: valid characters' bytes many times over, with stray continuation bytes, cut characters,
    bad lead bytes and <0xNN> pieces of ASCII letters anywhere in them, ended by words or special
    tokens; stops from the text, and characters the bytes spell that the text may not hold."""
    import random

    tokenizer = _sentencepiece(vocab)
    decode = completion_decoder(tokenizer)
    rng = random.Random(89)
    words = [tokenizer.convert_tokens_to_ids(t) for t in ("▁the", "▁stop", "a", ".", "▁")]
    chars = [[0xE6, 0x97, 0xA5], [0xE2, 0x82, 0xAC], [0xC3, 0xA9], [0xF0, 0x9F, 0x98, 0x80], [0x41], [0x41] * 3]
    spelled = ["日", "€", "é", "😀", "A", "AAA"]
    bad = [[0x80], [0xBF], [0x97, 0xA5], [0xE6], [0xF0, 0x9F], [0xC0], [0xFF]]
    for case in range(120):
        ids: list[int] = []
        used: set[str] = set()
        for _ in range(rng.randrange(1, 5)):
            run: list[int] = []
            for _ in range(rng.randrange(0, 16)):
                char = rng.randrange(len(chars))
                used.add(spelled[char])
                run += chars[char]
            for _ in range(rng.randrange(0, 3)):
                at = rng.randrange(len(run) + 1)
                run[at:at] = rng.choice(bad)
            ids += [_byte_piece(tokenizer, b) for b in run]
            ids += [rng.choice(words) if rng.random() < 0.8 else tokenizer.eos_token_id for _ in range(rng.randrange(3))]
        text = decode(ids)
        char = rng.choice(sorted(used)) if used else "A"
        stops = [rng.choice([char, char * 2, "\ufffd" + char, char + "a"])]
        if len(text) >= 2:
            start = rng.randrange(len(text) - 1)
            stops.append(text[start:rng.randrange(start + 1, min(len(text), start + 20) + 1)])
        assert _first_hit(tokenizer, ids, stops) == _brute_first_hit(decode, ids, stops), (case, ids, stops)


@pytest.mark.parametrize("vocab", ["legacy", "metaspace"])
def test_a_bad_byte_piece_ahead_of_a_long_run_of_characters_costs_each_step_the_same(vocab):
    """A window no longer starts where a run's bytes read otherwise alone (after a bad byte): the
    windows that do start in such a run (at a stray continuation byte, which reads U+FFFD alone too,
    or after the bad byte as a lead where every piece reads valid alone: <0x41> for "A") keep the
    work per step flat as the run grows, whatever the characters' length."""
    tokenizer = _sentencepiece(vocab)
    decode = completion_decoder(tokenizer)
    for char in ([0xE6, 0x97, 0xA5], [0xC3, 0xA9], [0xF0, 0x9F, 0x98, 0x80], [0x41]):
        per_token = []
        for n in (300, 2400):
            work = [0]

            def counted(ids, work=work):
                work[0] += len(ids)
                return decode(ids)

            stop = StopStrings(counted, ["zz", "日"])
            ids: list[int] = []
            for byte in [0x80, *char * (n // len(char))]:
                ids.append(_byte_piece(tokenizer, byte))
                assert not stop.hit(ids)
            per_token.append(work[0] / len(ids))
        assert per_token[1] <= 24 and per_token[1] <= per_token[0] * 1.1, (vocab, char, per_token)
