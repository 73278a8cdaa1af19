"""Backend ``remote``: two real `polyrl serve` processes on 127.0.0.1 feeding one torch trainer."""

from __future__ import annotations

import gc
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError, PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.remote_replies import StaleWeights
from polyrl.trainer import Trainer
from polyrl.types import (BackendSpec, Capabilities, Completion, EngineConfig, SamplingParams, TokenPrompt,
                          TokenSequence)

from serve_util import SERVED_NAME, start_server, stop_all

pytest.importorskip("torch")

REWARD = """
def digits(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]  # chat: TRL's messages
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
"""


@pytest.fixture(scope="module")
def push_token_file(tmp_path_factory) -> str:
    """The weight-push shared secret, one file read by both the servers and the trainer's client."""
    path = tmp_path_factory.mktemp("secret") / "push-token"
    path.write_text("remote-test-" + "7f3a" * 8 + "\n")
    return str(path)


@pytest.fixture(scope="module")
def servers(tiny_model_dir, push_token_file):
    started = [start_server(tiny_model_dir, "--allow-weight-push", "--weight-push-token-file", push_token_file,
                            "--allow-fault-control") for _ in range(2)]
    yield started
    stop_all(started, graceful=False)  # a teardown (serve_util.ServerProcess.stop)


def remote_config(servers, **options) -> EngineConfig:
    return EngineConfig(model="unused", role="generate",
                        options={"servers": [f"{s.url}/v1" for s in servers], **options})


@pytest.mark.slow
def test_rollouts_are_spread_over_servers_with_exact_ids_and_logprobs(servers, tiny_model_dir):
    for s in servers:
        s.reset()
    reg = Registry()
    remote = Engine(reg, "remote", remote_config(servers))
    assert remote.raw.model == SERVED_NAME  # discovered through /v1/models
    prompts = [[{"role": "user", "content": f"Count to {i}"}] for i in range(6)]
    out = remote.generate(prompts, SamplingParams(max_new_tokens=6, n=3, seed=5, temperature=1.0))
    assert len(out) == 18 and [c.prompt_index for c in out] == [i for i in range(6) for _ in range(3)]
    assert all(s.stats()["requests"] >= 2 for s in servers)  # both servers did work
    # the ids and log-probs are the generator's: a local torch engine on the same weights agrees
    local = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="reference", threads=1))
    scored = local.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, scored):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)


@pytest.mark.parametrize("overlap", [False, True], ids=["inline", "overlap"])
def test_trainer_pushes_weights_to_every_server_each_step(servers, tiny_model_dir, tmp_path, overlap,
                                                          push_token_file):
    for s in servers:
        s.reset()
    (tmp_path / "reward.py").write_text(REWARD)
    before = [s.stats()["weight_version"] for s in servers]
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "backends": {"train": "torch", "generate": "remote",
                     "options": {"servers": [f"{s.url}/v1" for s in servers],
                                 "weight_push_token_file": push_token_file}},
        "generation": {"group_size": 4, "max_new_tokens": 8, "overlap": overlap},
        "optimizer": {"lr": 1e-3},
        "data": {"task": "arithmetic"},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": 3, "prompts_per_step": 4, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(config)
    summary = trainer.run(progress=False)
    assert summary["steps"] == 3
    after = [s.stats() for s in servers]
    # four pushes on every server: one when the run starts, then inline: after each step; with
    # overlap: before sampling steps 1 and 2 (the servers are idle only then) and at the end
    assert [a["weight_version"] - b for a, b in zip(after, before)] == [4, 4]
    assert all(a["requests"] > 0 for a in after)
    # the run ends with the servers on the trained policy
    prompt = [[{"role": "user", "content": "Count to 3"}]]
    remote = trainer.gen_engine.generate(prompt, SamplingParams(max_new_tokens=6, n=2, seed=1))
    trained = trainer.train_engine.logprobs([TokenSequence.of(c) for c in remote], 1.0)
    for c, lp in zip(remote, trained):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-4)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["policy_lag"] for m in metrics] == ([0, 1, 1] if overlap else [0, 0, 0])
    pushed_in_step = metrics[1:] if overlap else metrics  # overlap's step 0 samples the initial weights
    assert all(m["time/sync"] > 0 for m in pushed_in_step)
    # only the latest weights stay on disk, and the temporary folder goes with the engine
    folder = trainer.gen_engine.raw.weights_dir()
    assert [p.name for p in Path(folder).iterdir()] == ["policy-00000004.safetensors"]
    trainer.gen_engine.raw.close()
    assert not Path(folder).exists()


def test_a_dead_server_fails_over_to_the_other(servers, tiny_model_dir):
    reg = Registry()
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    engine = Engine(reg, "remote", EngineConfig(model="x", options={
        "servers": [dead, f"{servers[0].url}/v1"], "served_model": SERVED_NAME, "backoff_s": 0.01}))
    out = engine.generate([[{"role": "user", "content": "Hi"}]] * 4, SamplingParams(max_new_tokens=3, n=2, seed=0))
    assert len(out) == 8


def test_errors_name_the_option_and_the_fix(servers):
    reg = Registry()
    with pytest.raises(ConfigError, match="backends.options.servers"):
        Engine(reg, "remote", EngineConfig(model="x", options={}))
    with pytest.raises(ConfigError, match="cannot list the models"):
        Engine(reg, "remote", EngineConfig(model="x", options={"servers": ["http://127.0.0.1:9/v1"]}))
    with pytest.raises(ConfigError, match=r"backends\.options\.weight_push: must be true or false.*Fix"):
        Engine(reg, "remote", EngineConfig(model="x", options={"servers": ["http://127.0.0.1:9/v1"],
                                                                "weight_push": "no"}))
    engine = Engine(reg, "remote", EngineConfig(model="x", options={
        "servers": ["http://127.0.0.1:9/v1"], "served_model": "m", "retries": 1, "backoff_s": 0.01}))
    with pytest.raises(PluginError, match="servers in backends.options.servers are up"):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2))


@pytest.mark.faults
def test_replies_from_other_weights_than_the_pushed_ones_are_refused_not_trained_on(servers, tiny_model_dir,
                                                                                   push_token_file, tmp_path):
    """A server that no longer serves what this engine pushed because another client pushed to it
    fails the attempt with an error saying so (pushing back would fight that trainer); the next
    push heals it. (A restarted server is pushed to again: test_remote_restart.py.)"""
    from safetensors.numpy import load_file, save_file

    weights = {k: v.astype(np.float32) for k, v in load_file(str(Path(tiny_model_dir) / "model.safetensors")).items()}
    engine = Engine(Registry(), "remote", EngineConfig(model=tiny_model_dir, role="generate", options={
        "servers": [f"{servers[0].url}/v1"], "weight_push_token_file": push_token_file, "retries": 1,
        "backoff_s": 0.01}))
    engine.import_weights(weights)
    prompt, sampling = [TokenPrompt([5, 6, 7])], SamplingParams(max_new_tokens=4, n=2, temperature=0.0)
    assert len(engine.generate(prompt, sampling)) == 2
    save_file({k: v + 0.5 for k, v in weights.items()}, str(tmp_path / "other.safetensors"))
    token = Path(push_token_file).read_text().strip()
    assert servers[0].post("/polyrl/weights", json={"path": str(tmp_path / "other.safetensors")},
                           headers={"X-Polyrl-Weight-Token": token}).status_code == 200  # another trainer
    version = servers[0].stats()["weight_version"]
    with pytest.raises(PluginError) as err:
        engine.generate(prompt, sampling)
    assert "that this trainer pushed to this server (another client pushed others to it)" in str(err.value)
    assert "give each trainer servers of its own" in str(err.value) and "--resume" in str(err.value)
    assert servers[0].stats()["weight_version"] == version  # not pushed back
    engine.import_weights(weights)
    assert len(engine.generate(prompt, sampling)) == 2


@pytest.mark.faults
def test_one_server_under_two_urls_is_refused_at_the_push_not_read_as_another_client(servers, tiny_model_dir,
                                                                                    push_token_file):
    """One `polyrl serve` listed twice (127.0.0.1 and localhost) took each push twice: every reply to
    the first URL named the second push's weights, failed its attempt as "another client pushed
    others to it", and with retries = 0 stopped the run blaming another trainer."""
    from safetensors.numpy import load_file

    weights = {k: v.astype(np.float32) for k, v in load_file(str(Path(tiny_model_dir) / "model.safetensors")).items()}
    url = f"{servers[0].url}/v1"
    engine = Engine(Registry(), "remote", EngineConfig(model=tiny_model_dir, role="generate", options={
        "servers": [url, url.replace("127.0.0.1", "localhost")], "weight_push_token_file": push_token_file,
        "retries": 0}))
    with pytest.raises(PluginError) as err:
        engine.import_weights(weights)
        engine.generate([TokenPrompt([5, 6, 7])], SamplingParams(max_new_tokens=4, n=2, temperature=0.0))
    assert "are one server process" in str(err.value), str(err.value)
    assert "Fix: list each server once in backends.options.servers" in str(err.value)
    with pytest.raises(ConfigError, match=r"backends\.options\.servers: servers\[1\] is servers\[0\] again"):
        Engine(Registry(), "remote", EngineConfig(model="x", options={"servers": [url, url + "/"]}))


def test_polyrl_serve_names_the_model_asked_for_and_refuses_another_with_the_fix(servers):
    """polyrl serve's replies name its served model, which the remote backend compares with the one
    it asked for (passes); asked for a model it does not serve, it answers 404, and the error names
    backends.options.served_model (it said to check that the servers were up)."""
    servers[0].reset()
    reply = servers[0].post("/v1/completions", json={"model": SERVED_NAME, "prompt": [1, 2, 3], "max_tokens": 2,
                                                      "logprobs": 0, "return_token_ids": True}).json()
    assert reply["model"] == SERVED_NAME
    engine = Engine(Registry(), "remote", remote_config(servers[:1], weight_push=False))
    assert len(engine.generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=3, n=2, seed=0))) == 4
    wrong = Engine(Registry(), "remote", remote_config(servers[:1], weight_push=False, served_model="llama-3-8b"))
    with pytest.raises(PluginError) as err:
        wrong.generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=3, n=2, seed=0))
    assert "HTTP 404" in str(err.value) and "Fix: set backends.options.served_model" in str(err.value), str(err.value)


@pytest.mark.faults
def test_a_weight_push_without_the_token_is_refused_with_the_fix(servers, monkeypatch):
    reg = Registry()
    weights = {"unused": np.zeros(1, np.float32)}
    before = servers[0].stats()["weight_version"]
    tokenless = Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME))
    with pytest.raises(PluginError, match="weight_push_token_env"):
        tokenless.import_weights(weights)
    monkeypatch.setenv("POLYRL_TEST_WRONG_TOKEN", "not-the-token")
    wrong = Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME,
                                                weight_push_token_env="POLYRL_TEST_WRONG_TOKEN"))
    with pytest.raises(PluginError, match="HTTP 403"):
        wrong.import_weights(weights)
    assert servers[0].stats()["weight_version"] == before  # nothing was loaded
    # the refused weights were written to a temporary folder; it goes when the engine does
    folders = [Path(e.raw.weights_dir()) for e in (tokenless, wrong)]
    assert all(f.is_dir() and f.name.startswith("polyrl-weights-") for f in folders)
    del tokenless, wrong
    gc.collect()
    assert not any(f.exists() for f in folders)
    with pytest.raises(ConfigError, match="backends.options.weight_push_token_env"):
        Engine(reg, "remote", remote_config(servers[:1], served_model=SERVED_NAME,
                                            weight_push_token_env="POLYRL_TEST_UNSET_TOKEN_VAR"))


# --- a hostile OpenAI-compatible server on 127.0.0.1 -------------------------------------------------


class Hostile:
    """An OpenAI-compatible server whose replies misbehave as ``mode`` says (set per test)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.mode = "ok"
        self.requests: list[tuple[str, dict]] = []
        self.times: list[float] = []  # time.monotonic() of each POST
        self.busy = 0  # answer this many POSTs 503 with Retry-After first
        self.weight_replies: list[tuple[int, str]] = []  # (status, body) per push, then 200
        self.process: int | None = None  # set: polyrl serve's weights ids, a new process before every reply
        self.served: str | None = None  # set: the `model` its replies name (unset: they name none)
        self.dripped_out: list[str] = []  # the slow writes (trickle, header drip) that wrote their last byte
        self.models = json.dumps({"data": [{"id": "hostile"}]})  # what GET /v1/models answers
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def send(self, code: int, data: str | bytes, ctype: str = "application/json") -> None:
                data = data.encode() if isinstance(data, str) else data
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if owner.mode == "header_drip":
                    return owner.drip_headers(self)
                self.send(200, owner.models)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                owner.requests.append((self.path, body))
                owner.times.append(time.monotonic())
                if owner.busy:
                    owner.busy -= 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/polyrl/weights"):
                    code, text = owner.weight_replies.pop(0) if owner.weight_replies else (200, '{"ok": true}')
                    if code == 200 and owner.process is not None:
                        text = json.dumps({"weights_id": f"process{owner.process}-1"})
                    return self.send(code, text)
                owner.reply(self, body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def choice(self, i: int, body: dict) -> dict:
        prompt = body.get("prompt")
        c = {"index": i, "token_ids": [10 + i, 11, 12, 13], "finish_reason": "length", "text": "not the ids",
             "prompt_token_ids": prompt if isinstance(prompt, list) else [1, 2, 3],
             "logprobs": {"token_logprobs": [-0.5, -0.6, -0.7, -0.8]}}
        if "messages" in body:  # /v1/chat/completions: a message and logprobs.content, as OpenAI's
            c["message"] = {"role": "assistant", "content": c.pop("text")}
            c["logprobs"] = {"content": [{"logprob": lp} for lp in c["logprobs"]["token_logprobs"]]}
        field, _, value = self.mode.partition("=")
        if field == "logprob":
            c["logprobs"]["token_logprobs"][1] = json.loads(value)
        elif field in ("token_ids", "finish_reason", "prompt_token_ids"):
            c[field] = json.loads(value)
        elif field == "named_tokens":  # vLLM's return_tokens_as_token_ids, the names rotated by `value`
            k = int(value)
            named = [f"token_id:{t}" for t in c["token_ids"][k:] + c["token_ids"][:k]]
            if "content" in c["logprobs"]:
                for entry, token in zip(c["logprobs"]["content"], named):
                    entry["token"] = token
            else:
                c["logprobs"]["tokens"] = named
        elif field == "no_finish_reason":
            del c["finish_reason"]
        elif field == "length":  # more tokens (with their log-probs) than asked for
            c["token_ids"] = list(range(20, 20 + int(value)))
            c["logprobs"]["token_logprobs"] = [-0.5] * int(value)
        return c

    def drip_headers(self, handler) -> None:
        """The status line and headers a byte every 0.05 s (each read quick, the whole never done)."""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 400
        for i, b in enumerate(head):
            if i == len(head) - 1:  # noted before the last byte: a client that waited for it sees the note
                self.dripped_out.append("headers")
            handler.wfile.write(bytes([b]))
            handler.wfile.flush()
            time.sleep(0.05)

    def reply(self, handler, body: dict) -> None:
        n = int(body.get("n", 1))
        if self.mode == "header_drip":
            return self.drip_headers(handler)
        if self.mode == "echo":  # an error body quoting the request's headers, credentials and all
            return handler.send(500, json.dumps({"error": {"message": f"bad request with {handler.headers['Authorization']}"}}))
        if self.mode.startswith("redirect="):  # to another host, which must never see the request
            handler.send_response(307)
            handler.send_header("Location", self.mode[len("redirect="):])
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if self.mode.startswith("raw="):
            return handler.send(200, self.mode[4:], "text/html")
        if self.mode == "deep":  # past the parser's depth, within the values n=2 x 4 tokens may hold
            return handler.send(200, "[" * 2_000 + "]" * 2_000)
        if self.mode == "deeper":  # refused on its count of values before the parser sees it
            return handler.send(200, "[" * 100_000 + "]" * 100_000)
        choices = [self.choice(i, body) for i in range(n)]
        if self.mode == "skew":  # n+1 choices, then n-1
            self.skewed = not getattr(self, "skewed", False)
            choices = choices + [self.choice(n, body)] if self.skewed else choices[:-1]
        reply: dict = {"choices": choices}
        if self.mode in ("top_prompt_ids", "top_prompt_ids_other"):  # vLLM's chat reply: beside choices, not in them
            reply["prompt_token_ids"] = choices[0]["prompt_token_ids"]
            for c in choices:
                if self.mode == "top_prompt_ids":
                    del c["prompt_token_ids"]
                else:  # both, disagreeing
                    c["prompt_token_ids"] = [7] + c["prompt_token_ids"]
        if self.served is not None:
            reply["model"] = self.served
        if self.process is not None:
            self.process += 1
            reply["weights_id"] = f"process{self.process}-0"
        data = json.dumps(reply).encode()
        if self.mode == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            for i, b in enumerate(data):
                if i == len(data) - 1:  # noted before the last byte (see drip_headers)
                    self.dripped_out.append("trickle")
                handler.wfile.write(bytes([b]))
                handler.wfile.flush()
                time.sleep(0.05)
            return
        if self.mode == "dup_token_ids":  # a second token_ids key: a reader keeping the first trains on others
            data = data.replace(b'"token_ids": ', b'"token_ids": [1, 2, 3, 4], "token_ids": ')
        if self.mode == "tiny_objects":  # 3 bytes per value: 60 KB, but a dict of 64 bytes each once parsed
            data = b'{"pad": [' + b"{}," * 20_000 + b'{}], ' + data[1:]
        if self.mode == "huge":
            data = b'{"pad": "' + b"a" * (4 << 20) + b'", ' + data[1:]
        if self.mode == "gzip":  # compressed though identity was asked for: a few KB that inflate past the cap
            import gzip

            data = gzip.compress(b'{"pad": "' + b"a" * (4 << 20) + b'", ' + data[1:])
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Encoding", "gzip")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send(200, data)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def hostile():
    server = Hostile()
    yield server
    server.stop()


def hostile_engine(*servers: Hostile, model: str = "unused", **options) -> Engine:
    return Engine(Registry(), "remote", EngineConfig(model=model, role="generate", options={
        "servers": [s.url for s in servers], "retries": 1, "backoff_s": 0.01, "weight_push": False, **options}))


TOKEN_PROMPTS = [TokenPrompt([1, 2, 3]), TokenPrompt([4, 5])]


@pytest.mark.faults
def test_a_reply_with_a_wrong_number_of_choices_is_refused_not_credited_to_another_prompt(hostile):
    hostile.mode = "skew"  # prompt 0's request gets 3 choices, prompt 1's gets 1: 4 in total
    engine = hostile_engine(hostile, retries=0, max_concurrency=1)
    with pytest.raises(PluginError, match=rf"{hostile.url}: (3|1) choices for a request of n=2"):
        engine.generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=4, n=2))


class _Shuffler:
    """A backend that returns the right number of completions, credited to the wrong prompts."""

    @hookimpl
    def polyrl_register_backends(self, register) -> None:
        register(BackendSpec(name="shuffler", load=lambda c: self, distribution="polyrl-shuffler",
                             capabilities=Capabilities(generate=True)))

    @hookimpl
    def generate(self, engine, prompts, sampling):
        order = [0] * (sampling.n + 1) + [1] * (len(prompts) * sampling.n - sampling.n - 1)
        return [Completion(i, np.array([1]), np.array([2]), np.array([-0.1], np.float32)) for i in order]


@pytest.mark.faults
def test_the_engine_refuses_completions_out_of_prompt_order_from_any_backend():
    engine = Engine(Registry(get_plugin_manager(extra=[_Shuffler()])), "shuffler", EngineConfig(model="m"))
    with pytest.raises(PluginError, match=r"'shuffler'.*prompt indices \[0, 0, 0, 1\].*n=2 in prompt order"):
        engine.generate(["a", "b"], SamplingParams(max_new_tokens=1, n=2))


BAD_VALUES = [
    ("token_ids=[10.9, 11.5]", "`token_ids`[0] is float"),
    ("token_ids=[true, false]", "`token_ids`[0] is bool"),
    ('token_ids=["10", "11"]', "`token_ids`[0] is str"),
    ("token_ids=[[10], [11]]", "`token_ids`[0] is list"),
    ("token_ids=[]", "`token_ids` is list [], not a non-empty list"),
    ("token_ids=[10, -5, 12, 13]", "`token_ids`[1] = -5 is outside"),
    ("token_ids=[10, 999999, 12, 13]", "`token_ids`[1] = 999999 is outside the model's vocabulary [0, 512)"),
    ("prompt_token_ids=[]", "`prompt_token_ids` is list"),
    ("logprob=NaN", "`logprobs.token_logprobs`[1] is float nan"),
    ("logprob=Infinity", "is float inf"),
    ("logprob=-Infinity", "is float -inf"),
    ("logprob=0.5", "is float 0.5, not a finite (float32) log-prob <= 0"),
    # finite floats, but -inf as the float32 they are kept as: blamed on the model's weights, no failover
    ("logprob=-1e300", "is float -1e+300, not a finite (float32) log-prob"),
    ("logprob=-" + "9" * 300, "is int -999999"),
    # no float at all: math.isfinite raised an OverflowError naming no field, not a refused reply
    ("logprob=-1" + "0" * 400, "is int -1000000"),
    ("logprob=null", "is null"),
    ('logprob="-0.5"', "is str '-0.5'"),
    ('finish_reason="garbage"', "`finish_reason` is str 'garbage', not one of stop, length"),
    ("finish_reason=12345", "`finish_reason` is int 12345"),
    ("finish_reason=null", "`finish_reason` is null"),
    ("no_finish_reason", "`finish_reason` is null"),
    ("raw=<html>Bad Gateway</html>", "the reply is not JSON"),
    ('raw={"id": "x"}', "`choices` is null"),
    ('raw={"choices": null}', "`choices` is null"),
    ("raw=[1, 2, 3]", "the reply is a JSON list"),
    ("deep", "the reply is not JSON (RecursionError)"),
    ("deeper", "the reply holds about 200001 JSON values, more than the 4873 that a reply of n = 2"),
    ("dup_token_ids", "the reply gives the key 'token_ids' twice in one object"),
]


@pytest.mark.faults
@pytest.mark.parametrize(("mode", "says"), BAD_VALUES, ids=[m[:40] for m, _ in BAD_VALUES])
def test_a_bad_value_in_a_reply_is_an_error_naming_the_server_and_the_field(hostile, tiny_model_dir, mode, says):
    hostile.mode = mode
    engine = hostile_engine(hostile, model=tiny_model_dir)
    assert engine.raw.tokenizer.vocab == 512  # the tiny model's embedding rows, from its config.json
    with pytest.raises(PluginError) as err:
        engine.generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=4, n=2))
    assert f"last: {hostile.url}: " in str(err.value) and says in str(err.value), str(err.value)
    assert "Fix: use `polyrl serve`" in str(err.value)


@pytest.mark.faults
def test_a_redirect_is_not_followed_and_the_error_says_to_list_its_target(hostile):
    """A 307 to another host is not followed (the prompts and the API key stay here); the error
    said "check that the servers are up" of a server that answered."""
    target = Hostile()
    try:
        hostile.mode = f"redirect={target.url}/completions"
        engine = hostile_engine(hostile, retries=2)
        with pytest.raises(PluginError) as err:
            engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
        assert "HTTP 307" in str(err.value) and "polyrl follows no redirects" in str(err.value), str(err.value)
        assert len(hostile.requests) == 1 and target.requests == []  # not retried, not followed
        hostile.weight_replies = [(307, "")]  # a weight push: it said to start polyrl serve --allow-weight-push
        with pytest.raises(PluginError) as err:
            hostile_engine(hostile, weight_push=True).import_weights({"w": np.zeros(2, np.float32)})
        assert "redirected /polyrl/weights" in str(err.value) and "polyrl follows no redirects" in str(err.value)
        assert "allow-weight-push" not in str(err.value)
    finally:
        target.stop()


@pytest.mark.faults
def test_a_model_list_whose_first_id_is_no_name_is_refused_not_asked_for_as_its_str(hostile):
    """``str()`` of whatever stood at ``data[0].id`` (null, 5, an object) became the model every
    request asked for; an empty list was an IndexError naming no field."""
    hostile.models = '{"data": [{"id": null}]}'  # asked for as "None"
    with pytest.raises(ConfigError, match=re.escape(f"cannot list the models of {hostile.url}: BadReply: "
                                                    "`data[0].id` is None, not a model name")):
        hostile_engine(hostile)
    from polyrl.remote import _first_model
    from polyrl.remote_replies import BadReply

    for models, says in (({"data": [{"id": 5}]}, "`data[0].id` is 5"),
                         ({"data": [{"id": {"name": "m"}}]}, "`data[0].id` is {'name': 'm'}"),
                         ({"data": [{"id": " "}]}, "`data[0].id` is ' '"),
                         ({"data": ["m"]}, "`data[0].id` is None"),
                         ({"data": []}, "`data` is [], not a non-empty list"),
                         ([], "`data` is None")):
        with pytest.raises(BadReply, match=re.escape(says)):
            _first_model(models)
    assert _first_model({"data": [{"id": "served-name"}, {"id": "other"}]}) == "served-name"


@pytest.mark.faults
def test_a_token_id_past_64_bits_is_refused_without_the_models_vocabulary(hostile):
    """With no model folder (vocab unknown) an id of 2**64 passed the range check and failed
    converting to int64 (an OverflowError from numpy instead of a refused reply)."""
    hostile.mode = "token_ids=[18446744073709551616, 11]"
    engine = hostile_engine(hostile)
    assert engine.raw.tokenizer.vocab is None
    with pytest.raises(PluginError, match=r"`token_ids`\[0\] = 18446744073709551616 is outside the model's vocab"):
        engine.generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=4, n=2))


@pytest.mark.faults
def test_a_reply_from_another_model_stops_the_run_naming_both_and_the_fix(hostile):
    """A server answering with another model than the one asked for (a server of the list started on
    another model, one that ignores the request's name) was trained on: the ids and log-probs of a
    model other than the policy. It is one error, not a failed attempt a good server would hide."""
    good = Hostile()
    try:
        good.served, hostile.served = "hostile", "Qwen/Qwen2.5-7B-Instruct"
        engine = hostile_engine(good, hostile, retries=3, max_concurrency=1)
        assert engine.raw.model == "hostile"  # what the first server lists, asked of both
        with pytest.raises(PluginError) as err:
            engine.generate(TOKEN_PROMPTS * 2, SamplingParams(max_new_tokens=4, n=2))
        text = str(err.value)
        assert (f"{hostile.url} answered a request for model 'hostile'" in text
                and "a reply from model 'Qwen/Qwen2.5-7B-Instruct'" in text), text
        assert ('Fix: point backends.options.servers at servers serving' in text
                and 'backends.options.served_model = "Qwen/Qwen2.5-7B-Instruct"' in text
                and "backends.options.check_reply_model = false" in text), text
        assert len(good.requests) == len(hostile.requests) == 2  # round-robin, never failed over to the good one
        # the opt-out, for a proxy that renames the model in its replies
        out = hostile_engine(good, hostile, check_reply_model=False).generate(
            TOKEN_PROMPTS * 2, SamplingParams(max_new_tokens=4, n=2))
        assert len(out) == 8
    finally:
        good.stop()


@pytest.mark.faults
def test_a_reply_naming_the_model_asked_for_or_none_is_trained_on(hostile):
    """Servers that echo the request's name (llama.cpp's, mlx_lm's) or leave `model` out pass."""
    for served in ("hostile", None):
        hostile.served = served
        assert len(hostile_engine(hostile).generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=4, n=2))) == 4
    with pytest.raises(ConfigError, match=r"backends\.options\.check_reply_model: must be true or false"):
        hostile_engine(hostile, check_reply_model="no")
    with pytest.raises(ConfigError, match=r"backends\.options\.served_model: must be a non-empty string"):
        hostile_engine(hostile, served_model=7)


@pytest.mark.faults
def test_a_busy_servers_retry_after_is_waited_for(hostile):
    """A 503 with Retry-After: 1 was retried after backoff_s (10 ms here), so a busy server used up
    the retries in a blink; polyrl serve itself answers a full queue that way."""
    hostile.busy = 1
    out = hostile_engine(hostile, retries=1).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    assert len(out) == 2 and len(hostile.times) == 2
    assert hostile.times[1] - hostile.times[0] >= 0.95


@pytest.mark.faults
def test_a_log_prob_a_hair_above_zero_is_float_rounding_and_clipped(hostile):
    hostile.mode = "logprob=0.00005"
    out = hostile_engine(hostile).generate(TOKEN_PROMPTS, SamplingParams(max_new_tokens=4, n=2))
    assert all(c.logprobs[1] == 0.0 for c in out)


@pytest.mark.faults
def test_a_malformed_reply_fails_over_to_the_next_server(hostile):
    good = Hostile()
    try:
        hostile.mode = "raw=<html>502 from a proxy</html>"
        out = hostile_engine(hostile, good).generate(TOKEN_PROMPTS * 2, SamplingParams(max_new_tokens=4, n=2))
        assert len(out) == 8
    finally:
        good.stop()


@pytest.mark.faults
def test_timeout_s_bounds_a_whole_reply_from_a_trickling_server(hostile):
    """Seen, not timed: the client gave up while the server was still trickling (a bound of 4 s on
    the elapsed time measured the machine as much as the deadline)."""
    hostile.mode = "trickle"  # a byte every 0.05 s: each read is quick, the reply takes ~20 s
    engine = hostile_engine(hostile, retries=0, timeout_s=1)
    with pytest.raises(PluginError, match="not complete within timeout_s = 1 s"):
        engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    assert hostile.dripped_out == []  # given up on mid-reply, not once it was all read


@pytest.mark.faults
def test_timeout_s_bounds_a_server_dripping_its_headers(hostile):
    """Only the body was checked against the deadline: a server sending its status line and headers
    a byte at a time held the step, and every stop request, forever (httpx's timeout is per read)."""
    engine = hostile_engine(hostile, retries=0, timeout_s=1)
    hostile.mode = "header_drip"  # ~20 s of headers; seen, not timed: each call ends while they drip
    with pytest.raises(PluginError, match="no complete reply within timeout_s = 1 s"):
        engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    assert hostile.dripped_out == []
    # listing the served model at the start too
    with pytest.raises(ConfigError, match="cannot list the models of .*no complete reply within timeout_s = 1 s"):
        Engine(Registry(), "remote", EngineConfig(model="unused", role="generate", options={
            "servers": [hostile.url], "timeout_s": 1, "weight_push": False}))
    assert hostile.dripped_out == []


@pytest.mark.faults
def test_a_server_dripping_its_headers_does_not_take_the_other_servers_connections(hostile):
    """An exchange given up on holds its connection while the server drips; with one pool for all
    servers, two such exchanges took every connection (max_concurrency x servers) and the good
    server's requests failed with PoolTimeout: the run stopped on one bad server of two."""
    good = Hostile()
    try:
        engine = hostile_engine(hostile, good, retries=3, timeout_s=1.5, max_concurrency=1)
        hostile.mode = "header_drip"  # ~20 s of headers for each request it gets
        for _ in range(3):  # requests start on the dripping server, the good one, the dripping one
            assert len(engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=1))) == 1
        assert len(good.requests) == 3 and len(hostile.requests) == 2
    finally:
        good.stop()


@pytest.mark.faults
def test_a_compressed_reply_is_refused_before_it_is_inflated(hostile):
    """polyrl asks for identity encoding, but a reply compressed anyway was inflated before its
    size was counted: 6.5 KB of brotli held 10 GB against a 64 MiB max_reply_bytes."""
    hostile.mode = "gzip"  # refused on its header: not one byte inflated
    with pytest.raises(PluginError, match=r"compressed its reply \(Content-Encoding: gzip\).*Fix: have the server "
                                          r"\(or the proxy before it\) send replies uncompressed"):
        hostile_engine(hostile, max_reply_bytes=1 << 20).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))


@pytest.mark.faults
def test_completions_longer_than_asked_are_refused_not_trained_on(hostile):
    """A server answering max_tokens = 4 with 5000 tokens had them trained on (past the model's
    positions too)."""
    hostile.mode = "length=20"
    with pytest.raises(PluginError, match="a completion of 20 tokens answers max_tokens = 4"):
        hostile_engine(hostile, retries=0).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=1))


@pytest.mark.faults
def test_a_server_echoing_the_request_headers_does_not_print_the_credentials(hostile, monkeypatch):
    monkeypatch.setenv("REMOTE_KEY_FOR_TEST", "sk-live-abcdef0123456789")
    hostile.mode = "echo"
    engine = hostile_engine(hostile, retries=0, api_key_env="REMOTE_KEY_FOR_TEST")
    with pytest.raises(PluginError) as info:
        engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=1))
    assert "HTTP 500" in str(info.value) and "sk-live-abcdef0123456789" not in str(info.value)


@pytest.mark.faults
def test_a_reply_over_max_reply_bytes_is_refused(hostile):
    hostile.mode = "huge"
    with pytest.raises(PluginError, match=r"over backends.options.max_reply_bytes = 1048576.*"
                                          r"Fix: raise backends.options.max_reply_bytes if n completions"):
        hostile_engine(hostile, max_reply_bytes=1 << 20).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    assert len(hostile_engine(hostile).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))) == 2
    with pytest.raises(ConfigError, match="backends.options.max_reply_bytes"):
        hostile_engine(hostile, max_reply_bytes=0)


def test_max_concurrency_0_is_refused_at_the_start_not_a_pool_timeout_blaming_the_servers():
    """``max_concurrency = 0`` passed as an "integer >= 0", made pools of no connection, and the
    run stopped with "cannot list the models ... PoolTimeout. Fix: start the server first"."""
    from polyrl.remote import remote_options

    with pytest.raises(ConfigError, match=r"backends\.options\.max_concurrency: must be an integer >= 1, got 0"):
        remote_options({"servers": ["http://127.0.0.1:9/v1"], "max_concurrency": 0})
    assert remote_options({"servers": ["http://127.0.0.1:9/v1"], "max_concurrency": 1, "retries": 0}).retries == 0


@pytest.mark.faults
def test_a_reply_holding_more_json_values_than_the_request_can_need_is_refused_before_parsing(hostile):
    """64 MiB of ``{},`` (under max_reply_bytes) parsed into 1.5 GB of dicts, per request in flight,
    and was then trained on (the padding ignored); its values are now counted on its bytes first."""
    hostile.mode = "tiny_objects"
    with pytest.raises(PluginError) as err:
        hostile_engine(hostile, retries=0).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=1))
    assert ("JSON values, more than the 4614 that a reply of n = 1 completions of at most max_tokens = 4 tokens "
            "can hold" in str(err.value)), str(err.value)
    hostile.mode = "ok"
    assert len(hostile_engine(hostile).generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=1))) == 1


@pytest.mark.faults
def test_the_prompt_ids_vllm_puts_beside_the_choices_of_a_chat_reply_are_read_and_checked(hostile):
    """vLLM's chat reply gives ``prompt_token_ids`` once, at the top (its completions reply, and
    polyrl serve's, in each choice): every chat from vLLM failed "`prompt_token_ids` is missing"."""
    chat = [[{"role": "user", "content": "hi"}]]
    hostile.mode = "top_prompt_ids"
    out = hostile_engine(hostile, retries=0).generate(chat, SamplingParams(max_new_tokens=4, n=2))
    assert [c.prompt_ids.tolist() for c in out] == [[1, 2, 3]] * 2
    hostile.mode = "top_prompt_ids_other"  # given both ways, differing: which prompt was generated from?
    with pytest.raises(PluginError, match=r"`prompt_token_ids` of choice 0 \(4 ids\) differ from the reply's "
                                          r"\(3 ids\)"):
        hostile_engine(hostile, retries=0).generate(chat, SamplingParams(max_new_tokens=4, n=2))


@pytest.mark.faults
def test_log_probs_the_server_names_for_other_tokens_than_the_ids_are_refused(hostile):
    """vLLM names each log-prob's token by id when asked (``return_tokens_as_token_ids``); log-probs
    shifted by one token, or another sample's, were trained on as the sampled tokens' own."""
    chat = [[{"role": "user", "content": "hi"}]]
    for prompts, field in ((TOKEN_PROMPTS[:1], "logprobs.tokens"), (chat, "logprobs.content[].token")):
        hostile.mode = "named_tokens=1"
        with pytest.raises(PluginError, match=rf"`{re.escape(field)}`\[0\] is the log-prob of 'token_id:11', but "
                                              r"`token_ids`\[0\] is 10: the log-probs are not the sampled tokens'"):
            hostile_engine(hostile, retries=0).generate(prompts, SamplingParams(max_new_tokens=4, n=2))
        hostile.mode = "named_tokens=0"
        assert len(hostile_engine(hostile).generate(prompts, SamplingParams(max_new_tokens=4, n=2))) == 2
        assert hostile.requests[-1][1]["return_tokens_as_token_ids"] is True  # asked for


def test_chats_are_rendered_with_the_models_template_and_the_text_is_the_decode_of_the_ids(hostile, tiny_model_dir):
    from transformers import AutoTokenizer

    chat = [{"role": "user", "content": "What is 47 - 13?"}]
    out = hostile_engine(hostile, model=tiny_model_dir).generate([chat], SamplingParams(max_new_tokens=4, n=2))
    trainer_side = Engine(Registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", threads=1))
    rendered = trainer_side.encode_chat(chat, None, add_generation_prompt=True).tolist()
    [(path, body)] = hostile.requests
    assert path == "/v1/completions" and body["prompt"] == rendered  # a token-id prompt, not messages
    assert all(c.prompt_ids.tolist() == rendered for c in out)  # what the trainer trains on
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert [c.text for c in out] == [tok.decode(c.completion_ids.tolist(), skip_special_tokens=True) for c in out]
    assert "not the ids" not in [c.text for c in out]  # the server's text is not what is scored
    hostile.mode = 'prompt_token_ids=[5, 5, 5]'  # a server answering for another prompt is refused
    with pytest.raises(PluginError, match="re-tokenized the prompt"):
        hostile_engine(hostile, model=tiny_model_dir).generate([chat], SamplingParams(max_new_tokens=4, n=2))


def test_chats_are_rendered_with_chat_template_kwargs_here_or_sent_with_them(hostile, tiny_model_dir, tmp_path):
    """``model.chat_template_kwargs`` reach the remote backend's own rendering (the token-id prompt
    is the train engine's rendering with them: the empty think block), and a chat sent for the
    server to render (no tokenizer here) carries them as vLLM's ``chat_template_kwargs``."""
    from chat_kwargs_model import CLOSED, with_thinking_switch
    from transformers import AutoTokenizer

    model = with_thinking_switch(tiny_model_dir, tmp_path / "thinking-switch")
    off = {"enable_thinking": False}
    chat = [{"role": "user", "content": "What is 47 - 13?"}]
    options = {"servers": [hostile.url], "retries": 1, "backoff_s": 0.01, "weight_push": False}
    remote = Engine(Registry(), "remote", EngineConfig(model=model, role="generate", chat_template_kwargs=off,
                                                       options=options))
    out = remote.generate([chat], SamplingParams(max_new_tokens=4, n=2))
    trainer_side = Engine(Registry(), "torch", EngineConfig(model=model, role="train", threads=1,
                                                            chat_template_kwargs=off))
    rendered = trainer_side.encode_chat(chat, None, add_generation_prompt=True).tolist()
    [(path, body)] = hostile.requests
    assert path == "/v1/completions" and body["prompt"] == rendered and "chat_template_kwargs" not in body
    assert AutoTokenizer.from_pretrained(model).decode(rendered).endswith(CLOSED)
    assert all(c.prompt_ids.tolist() == rendered for c in out)
    hostile.requests.clear()
    unrendered = Engine(Registry(), "remote", EngineConfig(model="unused", role="generate", chat_template_kwargs=off,
                                                           options=options))
    unrendered.generate([chat], SamplingParams(max_new_tokens=4, n=2))
    [(path, body)] = hostile.requests
    assert path == "/v1/chat/completions" and body["messages"] == chat and body["chat_template_kwargs"] == off
    hostile.requests.clear()
    hostile_engine(hostile).generate([chat], SamplingParams(max_new_tokens=4, n=2))
    assert "chat_template_kwargs" not in hostile.requests[0][1]  # none set: none sent


def test_text_prompts_are_sent_as_the_ids_the_train_backend_encodes(hostile, tiny_model_dir):
    """A text prompt goes as the token ids the train engine encodes it to (an empty one as one
    position), and those are the ids trained on; a server tokenizing it its own way is refused."""
    texts = ["What is 47 - 13?", ""]
    out = hostile_engine(hostile, model=tiny_model_dir).generate(texts, SamplingParams(max_new_tokens=4, n=2))
    trainer_side = Engine(Registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", threads=1))
    encoded = [trainer_side.raw.encode_prompt(t) for t in texts]
    assert len(encoded[1]) == 1
    assert sorted(body["prompt"] for _, body in hostile.requests) == sorted(encoded)  # ids, not text
    assert [c.prompt_ids.tolist() for c in out] == [encoded[0]] * 2 + [encoded[1]] * 2
    # a server whose tokenizer splits the text otherwise (one token per character here)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    spelled = [i for ch in texts[0] for i in tok(ch, add_special_tokens=False)["input_ids"]]
    assert spelled != encoded[0]
    hostile.mode = f"prompt_token_ids={json.dumps(spelled)}"
    with pytest.raises(PluginError, match="re-tokenized the prompt"):
        hostile_engine(hostile, model=tiny_model_dir).generate(texts[:1], SamplingParams(max_new_tokens=4, n=2))


def test_without_a_tokenizer_text_goes_as_text_with_one_warning(hostile):
    from structlog.testing import capture_logs

    engine = hostile_engine(hostile, model="unused")  # an engine built by hand: no model folder
    with capture_logs() as logs:
        for _ in range(2):
            out = engine.generate(["What is 47 - 13?"], SamplingParams(max_new_tokens=4, n=2))
    assert [body["prompt"] for _, body in hostile.requests] == ["What is 47 - 13?"] * 2
    assert all(c.prompt_ids.tolist() == [1, 2, 3] for c in out)  # the server's tokenization, unchecked
    warned = [e for e in logs if "servers tokenize text prompts" in e.get("event", "")]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning" and "HF folder" in warned[0]["fix"]


@pytest.mark.faults
def test_a_server_that_keeps_restarting_is_pushed_to_once_per_attempt_then_the_run_stops(hostile):
    hostile.process = 0
    engine = hostile_engine(hostile, weight_push=True, retries=1)
    engine.import_weights({"w": np.zeros(2, np.float32)})
    with pytest.raises(PluginError) as err:
        engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    paths = [p for p, _ in hostile.requests]
    # two attempts, each: a reply from a new process, the weights again, the request again
    assert paths == ["/polyrl/weights"] + ["/v1/completions", "/polyrl/weights", "/v1/completions"] * 2
    assert len({body["path"] for p, body in hostile.requests if p == "/polyrl/weights"}) == 1  # the same file
    message = str(err.value)
    assert "failed after 2 attempts" in message and "the server restarted on its initial weights" in message
    assert "find out why the server restarted" in message and "--resume" in message


@pytest.mark.faults
def test_a_reply_from_the_weights_another_thread_just_pushed_again_is_used_not_asked_again(hostile):
    """Requests meet one restart at once: one pushes the weights again while another, answered by
    the restarted server after that push loaded, read its reply as a restart and waits for the push
    lock. Its reply comes from the weights pushed again, so it is used (was asked again: one request
    too many, which a slow test counted)."""
    engine = hostile_engine(hostile, weight_push=True, retries=0)
    raw = engine.raw
    reply = {"weights_id": "new-1", "choices": []}
    sent: list[str] = []

    class PushedByAnotherThreadMeanwhile:
        def __enter__(self):
            raw._pushed[0] = "new-1"  # what the other thread's push answer recorded

        def __exit__(self, *exc):
            return False

    def exchange(index, url, body, headers=None):
        sent.append(url)
        return 200, json.dumps(reply).encode(), 0.0

    raw._exchange, raw._push_lock = exchange, PushedByAnotherThreadMeanwhile()
    raw._pushed[0] = "old-1"  # the process the last push reached, before the restart
    status, _, data = raw._attempt(0, f"{hostile.url}/completions", {"prompt": [1], "n": 1, "max_tokens": 4})
    assert status == 200 and data == reply and sent == [f"{hostile.url}/completions"]
    # a reply from the restarted process's initial weights is still not used: asked again
    raw._pushed[0], reply["weights_id"] = "old-1", "new-0"
    with pytest.raises(StaleWeights, match="not 'new-1'"):
        raw._attempt(0, f"{hostile.url}/completions", {"prompt": [1], "n": 1, "max_tokens": 4})
    assert len(sent) == 3


@pytest.mark.faults
def test_a_restarted_server_is_not_pushed_to_when_the_last_weights_file_is_gone(hostile):
    hostile.process = 0
    engine = hostile_engine(hostile, weight_push=True, retries=0)
    engine.import_weights({"w": np.zeros(2, np.float32)})
    (pushed,) = [body["path"] for p, body in hostile.requests if p == "/polyrl/weights"]
    Path(pushed).unlink()
    with pytest.raises(PluginError, match=r"restarted on its initial weights.*the weights file last pushed "
                                          rf"\({pushed}\) is gone.*Fix: find out why the server restarted"):
        engine.generate(TOKEN_PROMPTS[:1], SamplingParams(max_new_tokens=4, n=2))
    assert [p for p, _ in hostile.requests].count("/polyrl/weights") == 1


@pytest.mark.faults
def test_a_busy_server_gets_the_weight_push_retried(hostile):
    weights = {"w": np.zeros(2, np.float32)}
    hostile.weight_replies = [(503, "busy"), (429, "slow down")]
    engine = hostile_engine(hostile, weight_push=True, retries=2)
    engine.import_weights(weights)  # the third attempt is answered 200
    assert [p for p, _ in hostile.requests].count("/polyrl/weights") == 3
    hostile.weight_replies = [(503, "busy")] * 3
    with pytest.raises(PluginError) as err:
        engine.import_weights(weights)
    message = str(err.value)
    assert f"{hostile.url} was unavailable for /polyrl/weights in 3 attempts; last: HTTP 503: busy" in message
    assert "--resume" in message and "allow-weight-push" not in message  # the push itself works
    hostile.weight_replies = [(200, "<html>ok</html>")]
    with pytest.raises(PluginError, match=rf"{hostile.url} answered /polyrl/weights with HTTP 200 but not a JSON"):
        engine.import_weights(weights)


@pytest.mark.faults
def test_a_push_answered_with_the_previous_weights_id_is_refused(hostile):
    """A server answering every push with one weights_id (a failed load answered as a success) had
    its replies accepted as the new policy's."""
    weights = {"w": np.zeros(2, np.float32)}
    engine = hostile_engine(hostile, weight_push=True, retries=0)
    hostile.weight_replies = [(200, '{"weights_id": "process7-1"}')]
    engine.import_weights(weights)
    hostile.weight_replies = [(200, '{"weights_id": "process7-2"}')]
    engine.import_weights(weights)  # a new load: fine
    hostile.weight_replies = [(200, '{"weights_id": "process7-2"}')]
    with pytest.raises(PluginError, match=r"answered the weight push with the weights_id of the previous push "
                                          r"\('process7-2'\): it did not load the new weights"):
        engine.import_weights(weights)


@pytest.mark.faults
def test_a_failed_weight_push_keeps_the_trained_steps_in_a_checkpoint(hostile, tiny_model_dir, tmp_path):
    from polyrl.checkpoint import latest_checkpoint

    (tmp_path / "reward.py").write_text(REWARD)
    # the push at engine start and after step 0 succeed; after step 1 the server stays busy
    hostile.weight_replies = [(200, "{}"), (200, "{}")] + [(503, "busy")] * 2
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "backends": {"train": "torch", "generate": "remote",
                     "options": {"servers": [hostile.url], "retries": 1, "backoff_s": 0.01}},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"task": "arithmetic"},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": 3, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(config)
    with pytest.raises(PluginError, match="was unavailable for /polyrl/weights"):
        trainer.run(progress=False)
    assert trainer.step == 2  # step 2 trained before its push failed, and is recorded
    assert latest_checkpoint(trainer.checkpoint_root) == trainer.checkpoint_root / "step-00000002"
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


@pytest.mark.parametrize(("key", "value", "shown"), [("timeout_s", True, "True"), ("timeout_s", 1e308, "1e+308"),
                                                      ("backoff_s", float("nan"), "nan"), ("backoff_s", 1e10, "10000000000.0")])
def test_a_wait_that_is_no_number_of_seconds_is_refused_at_the_start(key, value, shown):
    """``timeout_s = true`` was read as 1 s, and 1e308 overflowed a thread's join (a sleep for
    ``backoff_s``) mid-run: a traceback, after the models loaded."""
    from polyrl.remote import remote_options

    with pytest.raises(ConfigError) as info:
        remote_options({"servers": ["http://127.0.0.1:9/v1"], key: value})
    assert str(info.value).startswith(f"backends.options.{key}: must be a number of seconds in (0, 1e+09], got {shown}. "
                                      f"Fix: e.g. {key} = "), str(info.value)
    assert remote_options({"servers": ["http://127.0.0.1:9/v1"], key: 3}).timeout_s == (3 if key == "timeout_s" else 120)
