"""``polyrl serve``: the OpenAI-compatible server, run as a real subprocess on the tiny model."""

from __future__ import annotations

import concurrent.futures
import math

import numpy as np
import pytest

from polyrl.cli import build_parser

from serve_util import SERVED_NAME

CHAT = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture()
def server(judge_server):
    judge_server.reset()
    return judge_server


def test_parser_has_serve_with_fault_options_and_localhost_default():
    args = build_parser().parse_args(["serve", "--model", "m", "--fault-delay-s", "1.5", "--fault-garbage",
                                      "--fault-die-after", "3", "--fault-503-first", "2"])
    assert args.host == "127.0.0.1"
    assert (args.fault_delay_s, args.fault_garbage, args.fault_die_after, args.fault_503_first) == (1.5, True, 3, 2)


def test_models_health_and_bound_address(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert server.get("/health").json() == {"status": "ok"}
    models = server.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [SERVED_NAME]


def test_chat_completion_logprobs_match_the_engine(server, tiny_model_dir):
    r = server.post("/v1/chat/completions", json={"model": SERVED_NAME, "messages": CHAT, "temperature": 0,
                                                  "max_tokens": 8, "logprobs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == SERVED_NAME
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    entries = choice["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"] > 0
    assert all(e["logprob"] <= 0 and isinstance(e["token"], str) for e in entries)

    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams

    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="generate", threads=1))
    direct = engine.generate([CHAT], SamplingParams(max_new_tokens=8, temperature=0))[0]
    assert choice["message"]["content"] == direct.text
    np.testing.assert_allclose([e["logprob"] for e in entries], direct.logprobs, atol=1e-4)
    assert body["usage"]["prompt_tokens"] == len(direct.prompt_ids)


def test_completions_with_lists_n_logprobs_and_seed(server):
    req = {"model": SERVED_NAME, "prompt": ["The capital of France is", "1 + 1 ="], "n": 2, "max_tokens": 6,
           "temperature": 1.0, "seed": 7, "logprobs": 0}
    first = server.post("/v1/completions", json=req).json()
    again = server.post("/v1/completions", json=req).json()
    assert first["object"] == "text_completion"
    assert [c["index"] for c in first["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in first["choices"]] == [c["text"] for c in again["choices"]]
    for c in first["choices"]:
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) > 0
        assert all(x <= 0 and math.isfinite(x) for x in lp["token_logprobs"])
        assert lp["text_offset"] == sorted(lp["text_offset"])
    assert first["usage"]["completion_tokens"] == sum(len(c["logprobs"]["tokens"]) for c in first["choices"])


def test_a_seeded_request_is_the_same_amid_concurrent_ones_and_draws_its_own_units(server):
    """A seeded request gives the same completions whether it runs alone or among concurrent clients'
    requests (its units never share a generate call), each of its n choices included; and the
    completions past its first unit (n = 40 > the server's --max-batch-size of 32) are not those of
    the request seeded one more: units seeded seed + i drew the next seeds' samples over again."""
    def texts(body: dict) -> list[str]:
        r = server.post("/v1/completions", json={"model": SERVED_NAME, **body})
        assert r.status_code == 200, r.text
        return [c["text"] for c in r.json()["choices"]]

    seeded = {"prompt": "The capital of France is", "n": 40, "max_tokens": 4, "temperature": 1.0, "seed": 11}
    alone = texts(seeded)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        others = [pool.submit(texts, {"prompt": prompt, "n": 3, "max_tokens": 6, "temperature": 1.0, **extra})
                  for prompt in ("1 + 1 =", "The capital of France is", "Hello")
                  for extra in ({}, {"seed": 12})]
        amid = [pool.submit(texts, seeded) for _ in range(2)]
        assert all(len(f.result()) == 3 for f in others)
        assert [f.result() for f in amid] == [alone, alone]
    assert texts({**seeded, "seed": 12, "n": 8}) != alone[32:]


def test_errors_are_openai_shaped(server):
    cases = [
        (server.post("/v1/chat/completions", content=b"{not json"), 400),
        (server.post("/v1/chat/completions", json={"model": "nope", "messages": CHAT}), 404),
        (server.post("/v1/chat/completions", json={"messages": CHAT, "stream": True}), 400),
        (server.post("/v1/chat/completions", json={"messages": []}), 400),
        (server.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 0}), 400),
        (server.post("/v1/completions", json={"prompt": [1, -2, 3]}), 400),
        (server.get("/v1/nothing"), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert isinstance(response.json()["error"]["message"], str)


def test_concurrent_requests_each_get_their_own_answer(server):
    """Requests that arrive together are merged into one generate call and split back correctly."""
    prompts = ["a", "one two three four five", "What is the capital", "7 * 8 = ", "Hello there, my friend"]

    def ask(prompt: str) -> dict:
        return server.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4, "temperature": 0}).json()

    alone = [ask(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(ask, prompts))
    for a, b in zip(alone, together):
        assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
        assert len(b["choices"]) == 1
    stats = server.stats()
    assert stats["requests"] == stats["answered"] == 2 * len(prompts)
    assert stats["errors"] == 0 and stats["in_flight"] == 0
    assert stats["max_in_flight"] >= 1 and stats["batches"] <= 2 * len(prompts)


def test_fault_control_is_refused_unless_enabled(server):
    r = server.post("/polyrl/faults", json={"nonsense": 1})
    assert r.status_code == 400 and "unknown fault" in r.json()["error"]["message"]


def test_logprob_bytes_are_each_tokens_own_bytes(tiny_model_dir):
    """A token holding part of a character decodes to U+FFFD, and its ``bytes`` were U+FFFD's: a
    client joining them could not rebuild the text (9 of 16 tokens in one reply)."""
    from tokenizers import Tokenizer

    from polyrl.serve import TokenText

    text = "héllo 日本 ✓"
    ids = Tokenizer.from_file(f"{tiny_model_dir}/tokenizer.json").encode(text, add_special_tokens=False).ids
    token_text = TokenText(None, tiny_model_dir)
    assert any("\ufffd" in token_text(i) for i in ids)  # some tokens are parts of a character
    assert bytes(b for i in ids for b in token_text.token_bytes(i)) == text.encode("utf-8")


def test_a_stop_inside_a_token_ends_the_text_with_that_whole_token_as_the_ids_and_log_probs(server):
    """The text is the decoded tokens, stop string included (vLLM's include_stop_str_in_output =
    true), so text, token ids and log-probs agree; asking to leave the stop out is refused, not ignored."""
    req = {"model": SERVED_NAME, "prompt": "hello", "max_tokens": 8, "seed": 3, "logprobs": 0,
           "return_token_ids": True, "ignore_eos": True}
    full = server.post("/v1/completions", json=req).json()["choices"][0]
    tokens = full["logprobs"]["tokens"]
    k = next(i for i, t in enumerate(tokens) if i > 0 and len(t) >= 2 and "\ufffd" not in t)
    stop = tokens[k][:1] if tokens[k][0] not in "".join(tokens[:k]) else tokens[k - 1][-1:] + tokens[k][:1]
    cut = server.post("/v1/completions", json={**req, "stop": stop}).json()["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["token_ids"] == full["token_ids"][:len(cut["token_ids"])]
    assert cut["text"] == "".join(cut["logprobs"]["tokens"]) and stop in cut["text"]
    assert len(cut["token_ids"]) == len(cut["logprobs"]["token_logprobs"])
    refused = server.post("/v1/completions", json={**req, "stop": stop, "include_stop_str_in_output": False})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "include_stop_str_in_output"


def test_text_offsets_point_into_the_text_when_tokens_split_a_character(tiny_model_dir):
    """Byte-level BPE splits "é" and "€" into tokens that decode alone to U+FFFD: each was counted
    as one character, so " b" was said to start at 3 in "aé b€" (it starts at 2) and the last
    offsets lay past the end of the text. A fake engine answers those exact ids (the tiny model's
    own tokenizer) through a real PolyrlServer on 127.0.0.1."""
    import threading

    import httpx
    from tokenizers import Tokenizer

    from polyrl.serve import PolyrlServer
    from polyrl.types import Completion

    text = "aé b€ c"
    tokenizer = Tokenizer.from_file(f"{tiny_model_dir}/tokenizer.json")
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids) == text and len(ids) > len(text.split()) + 2  # some tokens split a character

    class Fixed:
        def generate(self, prompts, sampling):
            return [Completion(i, [1], ids, [-0.5] * len(ids), text=text, finish_reason="length")
                    for i in range(len(prompts)) for _ in range(sampling.n)]

    server = PolyrlServer(("127.0.0.1", 0), Fixed(), model_name="m", model_path=tiny_model_dir)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
            r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 16, "logprobs": 0})
    finally:
        server.shutdown()
        server.server_close()
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    offsets, tokens = choice["logprobs"]["text_offset"], choice["logprobs"]["tokens"]
    assert choice["text"] == text and len(offsets) == len(ids)
    assert offsets == sorted(offsets) and offsets[-1] < len(text)
    for offset, token in zip(offsets, tokens):
        if "\ufffd" not in token:  # a whole token's text is found where its offset says
            assert text[offset:offset + len(token)] == token, (offset, token)
        else:  # part of a character: the offset of that character
            assert ord(text[offset]) > 127


@pytest.mark.parametrize("engine_decodes", [True, False], ids=["engine-decode", "tokenizer-json"])
def test_text_offsets_skip_a_special_token_the_text_leaves_out(tiny_model_dir, engine_decodes):
    """Under ignore_eos a completion can hold <|im_end|> mid-way; the text leaves it out (the engine
    decodes with skip_special_tokens) but the offsets counted its 10 characters, so " c" in "a b c"
    was said to start at 13, past the end. The tiny model's own tokenizer; a fake engine answers the
    ids, with its own decode (as every backend's engine has) or without one (tokenizer.json's rule)."""
    import threading

    import httpx
    from tokenizers import Tokenizer

    from polyrl.serve import PolyrlServer
    from polyrl.testing.tiny_model import IM_END
    from polyrl.types import Completion

    tokenizer = Tokenizer.from_file(f"{tiny_model_dir}/tokenizer.json")
    special = tokenizer.token_to_id(IM_END)
    ids = [*tokenizer.encode("a b", add_special_tokens=False).ids, special,
           *tokenizer.encode(" c", add_special_tokens=False).ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert text == "a b c" and IM_END in tokenizer.decode(ids, skip_special_tokens=False)

    class Fixed:
        def generate(self, prompts, sampling):
            return [Completion(i, [1], ids, [-0.5] * len(ids), text=text, finish_reason="length")
                    for i in range(len(prompts)) for _ in range(sampling.n)]

    engine = Fixed()
    if engine_decodes:
        engine.decode = lambda token_ids: tokenizer.decode(list(token_ids), skip_special_tokens=True)
    server = PolyrlServer(("127.0.0.1", 0), engine, model_name="m", model_path=tiny_model_dir)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
            r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 16, "logprobs": 0})
    finally:
        server.shutdown()
        server.server_close()
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    offsets, tokens = choice["logprobs"]["text_offset"], choice["logprobs"]["tokens"]
    assert choice["text"] == text and len(offsets) == len(ids) and tokens[ids.index(special)] == IM_END
    for offset, token, token_id in zip(offsets, tokens, ids):
        if token_id == special:  # where it would have been: after "a b"
            assert offset == len("a b"), offsets
        else:
            assert text[offset:offset + len(token)] == token, (offset, token, offsets)


def test_return_tokens_as_token_ids_names_each_log_probs_token_by_its_id(server):
    """vLLM's field, which polyrl's remote backend sends to check each log-prob against its id, was
    ignored: tokens came back as text, so that check never ran against polyrl serve."""
    for path, body in (("/v1/completions", {"prompt": "hello", "logprobs": 0}),
                       ("/v1/chat/completions", {"messages": CHAT, "logprobs": True})):
        reply = server.post(path, json={"model": SERVED_NAME, "max_tokens": 5, "n": 2, "return_token_ids": True,
                                        "return_tokens_as_token_ids": True, **body}).json()
        for choice in reply["choices"]:
            logprobs = choice["logprobs"]
            names = logprobs["tokens"] if "tokens" in logprobs else [e["token"] for e in logprobs["content"]]
            assert names == [f"token_id:{i}" for i in choice["token_ids"]] and names
    refused = server.post("/v1/completions", json={"prompt": "hi", "return_tokens_as_token_ids": "yes"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "return_tokens_as_token_ids"
