"""Token-id prompts through ``polyrl serve`` and the ``remote`` backend (issue 16, point 3).

Turn k+1 of a multi-turn episode is generated from the exact ids of turn k: the remote backend
sends a ``TokenPrompt`` as OpenAI's token-id prompt, the server generates from those ids verbatim,
and the client checks the ids came back unchanged. A real ``polyrl serve`` subprocess on
127.0.0.1 (torch, the tiny model); one stub server stands for a server that re-tokenizes.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.errors import PluginError
from polyrl.registry import Registry
from polyrl.types import Capabilities, Completion, EngineConfig, SamplingParams, TokenPrompt

from serve_util import SERVED_NAME

CHAT = [{"role": "user", "content": "Count to five."}]
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry()


@pytest.fixture()
def server(judge_server):
    judge_server.reset()
    return judge_server


@pytest.fixture()
def remote(server, registry) -> Engine:
    engine = Engine(registry, "remote", EngineConfig(model="unused", role="generate",
                                                     options={"servers": [f"{server.url}/v1"]}))
    if not registry.spec("torch").capabilities.token_prompts:  # the backend behind the test server
        pytest.skip("the torch backend does not declare Capabilities.token_prompts")
    return engine


def test_remote_declares_token_prompts_and_leaves_chat_encoding_to_the_trainer(server, registry):
    assert registry.spec("remote").capabilities.token_prompts
    engine = Engine(registry, "remote", EngineConfig(model="unused", options={"servers": [f"{server.url}/v1"]}))
    assert engine.encode_chat(CHAT, None, add_generation_prompt=True) is None  # no tokenizer here


def test_a_token_prompt_comes_back_verbatim_even_where_retokenizing_would_change_it(remote, tiny_model_dir):
    """Ids no tokenizer would produce for their text (one id per character) are generated from as
    sent: the server neither decodes and re-encodes them nor adds a BOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "Hello world, count"
    spelled = [i for ch in text for i in tok(ch, add_special_tokens=False)["input_ids"]]
    assert spelled != tok(text)["input_ids"]  # re-tokenizing would merge them: the check can fail
    out = remote.generate([TokenPrompt(spelled), text], SamplingParams(max_new_tokens=4, temperature=0.0, n=2))
    assert [c.prompt_index for c in out] == [0, 0, 1, 1]
    for c in out[:2]:
        assert c.prompt_ids.tolist() == spelled
    assert out[2].prompt_ids.tolist() == tok(text)["input_ids"]  # text prompts in the same batch still work


def test_a_chat_rendered_by_the_train_engine_generates_remotely_as_the_chat_does(remote, registry, tiny_model_dir):
    """The core's path for a remote generator: the train engine's ``encode_chat`` renders the chat,
    the ids go to the server as a token prompt, and the answer is the server's own chat answer."""
    chat = remote.generate([CHAT], GREEDY)[0]
    trainer_side = Engine(registry, "torch", EngineConfig(model=tiny_model_dir, role="train", threads=1))
    ids = trainer_side.encode_chat(CHAT, None, add_generation_prompt=True)
    np.testing.assert_array_equal(ids, chat.prompt_ids)
    again = remote.generate([TokenPrompt(ids)], GREEDY)[0]
    np.testing.assert_array_equal(again.prompt_ids, chat.prompt_ids)
    np.testing.assert_array_equal(again.completion_ids, chat.completion_ids)
    np.testing.assert_allclose(again.logprobs, chat.logprobs, atol=1e-5)


def test_a_text_prompt_encoded_here_generates_as_the_server_does_from_the_text(remote, server, registry,
                                                                              tiny_model_dir):
    """With the model folder at hand a text prompt goes as the train engine's ids; `polyrl serve`
    generates from them what it generates from the text itself (the same encoding rule)."""
    text = "Hello world, count"
    local = Engine(registry, "remote", EngineConfig(model=tiny_model_dir, role="generate",
                                                    options={"servers": [f"{server.url}/v1"]}))
    encoded = local.raw.tokenizer.encode_text(text)
    trainer_side = Engine(registry, "torch", EngineConfig(model=tiny_model_dir, role="train", threads=1))
    assert encoded == trainer_side.raw.encode_prompt(text)
    [ours] = local.generate([text], GREEDY)
    [theirs] = remote.generate([text], GREEDY)  # no tokenizer: sent as text
    assert ours.prompt_ids.tolist() == theirs.prompt_ids.tolist() == encoded
    np.testing.assert_array_equal(ours.completion_ids, theirs.completion_ids)
    np.testing.assert_allclose(ours.logprobs, theirs.logprobs, atol=1e-5)


def test_continuing_from_ids_through_the_server_equals_one_long_greedy_generation(remote):
    """Turn k+1 from the exact ids of turn k: k greedy tokens, then the rest from prompt + those k
    ids, gives the tokens and log-probs of one generation of the whole length."""
    long = SamplingParams(max_new_tokens=12, temperature=0.0)
    whole = remote.generate([CHAT], long)[0]
    if len(whole.completion_ids) < 4:
        pytest.skip("the tiny model stopped before 4 tokens; nothing to continue")
    k = len(whole.completion_ids) // 2
    head = np.concatenate([whole.prompt_ids, whole.completion_ids[:k]])
    rest = remote.generate([TokenPrompt(head)], SamplingParams(max_new_tokens=12 - k, temperature=0.0))[0]
    np.testing.assert_array_equal(rest.prompt_ids, head)
    np.testing.assert_array_equal(rest.completion_ids, whole.completion_ids[k:])
    np.testing.assert_allclose(rest.logprobs, whole.logprobs[k:], atol=1e-4)
    assert rest.finish_reason == whole.finish_reason


def test_the_http_api_takes_one_id_list_or_a_list_of_them(remote, server):
    """OpenAI's shapes: ``prompt: [ids]`` is one prompt, ``prompt: [[ids], [ids]]`` two."""
    one = server.post("/v1/completions", json={"model": SERVED_NAME, "prompt": [5, 6, 7], "max_tokens": 3,
                                               "temperature": 0, "return_token_ids": True, "logprobs": 0})
    assert one.status_code == 200, one.text
    body = one.json()
    assert [c["prompt_token_ids"] for c in body["choices"]] == [[5, 6, 7]]
    assert body["usage"]["prompt_tokens"] == 3
    assert len(body["choices"][0]["logprobs"]["token_logprobs"]) == len(body["choices"][0]["token_ids"])
    two = server.post("/v1/completions", json={"prompt": [[5, 6, 7], [9]], "max_tokens": 3, "temperature": 0,
                                               "return_token_ids": True}).json()
    assert [c["prompt_token_ids"] for c in two["choices"]] == [[5, 6, 7], [9]]
    assert two["choices"][0]["token_ids"] == body["choices"][0]["token_ids"]  # same ids, same greedy answer


@pytest.mark.faults
@pytest.mark.parametrize(("prompt", "says"), [
    ([], "prompt must be"),
    ([[]], "at least one id"),
    ([1, -3], "[0, "),
    ([1, 10 ** 30], "[0, "),
    ([1, 2.0], "integers"),
    ([1, True], "integers"),
    (["text", 5], "prompt must be"),
    ([[1, 2], "text", [3.5]], "integers"),
], ids=["empty", "empty-inner", "negative", "huge", "float", "bool", "mixed", "float-inner"])
def test_bad_token_ids_are_a_400_naming_prompt(judge_server, prompt, says):
    judge_server.reset()
    r = judge_server.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "prompt" and error["type"] == "invalid_request_error"
    assert says in error["message"], error
    assert judge_server.stats()["answered"] == 0  # refused before anything reached the engine


@pytest.mark.faults
def test_ids_past_the_vocabulary_or_the_context_are_refused_and_the_edges_accepted(remote, server, tiny_model_dir):
    vocab = json.loads((Path(tiny_model_dir) / "config.json").read_text())["vocab_size"]
    past = server.post("/v1/completions", json={"prompt": [1, vocab], "max_tokens": 2}).json()["error"]
    assert past["param"] == "prompt" and f"[0, {vocab})" in past["message"]
    edge = server.post("/v1/completions", json={"prompt": [0, vocab - 1], "max_tokens": 2, "return_token_ids": True})
    assert edge.status_code == 200, edge.text
    assert edge.json()["choices"][0]["prompt_token_ids"] == [0, vocab - 1]
    too_long = server.post("/v1/completions", json={"prompt": [1] * 5000, "max_tokens": 2}).json()["error"]
    assert too_long["param"] == "prompt" and too_long["code"] == "context_length_exceeded"


class _RetokenizingServer(BaseHTTPRequestHandler):
    """Stands for a server that decodes a token-id prompt and tokenizes the text again (adding a
    BOS): it answers with other prompt_token_ids than were sent."""

    def log_message(self, *args) -> None:
        pass

    def _json(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._json({"data": [{"id": "stub"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["prompt"] if isinstance(body["prompt"], list) else [2, 3]  # text: "tokenized"
        self._json({"choices": [{"index": 0, "text": "x", "finish_reason": "length", "token_ids": [7],
                                 "prompt_token_ids": [1, *prompt], "logprobs": {"token_logprobs": [-0.5]}}]})


@pytest.mark.faults
def test_a_server_that_retokenizes_a_token_prompt_is_a_clear_failure(registry):
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _RetokenizingServer)
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        engine = Engine(registry, "remote", EngineConfig(model="unused", options={
            "servers": [f"http://127.0.0.1:{stub.server_address[1]}/v1"]}))
        assert engine.generate(["plain text"], SamplingParams(max_new_tokens=1))[0].completion_ids.tolist() == [7]
        with pytest.raises(PluginError, match="re-tokenized the prompt") as err:
            engine.generate([TokenPrompt([4, 5, 6])], SamplingParams(max_new_tokens=1))
        assert "3 ids" in str(err.value) and "4 ids" in str(err.value) and "position 0" in str(err.value)
    finally:
        stub.shutdown()
        stub.server_close()


class _TextOnlyEngine:
    """A generate engine whose backend does not declare token_prompts (a unit-test fake of the
    core's Engine: the server must refuse token-id prompts before they reach it)."""

    backend = "text-only"
    capabilities = Capabilities(generate=True)

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompts, sampling):
        self.calls += 1
        return [Completion(i, [1], [2], [-0.1], text="b") for i in range(len(prompts)) for _ in range(sampling.n)]


@pytest.mark.faults
def test_a_backend_without_token_prompts_gets_a_400_not_a_crash():
    from polyrl.serve import PolyrlServer

    engine = _TextOnlyEngine()
    server = PolyrlServer(("127.0.0.1", 0), engine, model_name="m")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
            r = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
            assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
            assert "text-only backend" in r.json()["error"]["message"]
            assert engine.calls == 0
            assert client.post("/v1/completions", json={"prompt": "ab", "max_tokens": 1}).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
