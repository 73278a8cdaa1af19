"""``polyrl serve``: an OpenAI-compatible HTTP server over any polyrl generate backend.

    polyrl serve --backend torch --model smollm2-135m-instruct --port 8000
    curl -s localhost:8000/v1/chat/completions -d '{"model": "smollm2-135m-instruct",
         "messages": [{"role": "user", "content": "Hi"}], "logprobs": true}'

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (OpenAI
request/response shapes), ``GET /health``; and, for tests and monitoring, ``GET /polyrl/stats``
(requests, in flight now, most in flight at once, batches, weight version), ``POST
/polyrl/stats/reset``, — only with ``--allow-weight-push`` — ``POST /polyrl/weights``
``{"path": DIR_OR_FILE}`` that loads new weights from local safetensors between two batches (how a
trainer keeps remote generation on-policy), and — only with ``--allow-fault-control`` — ``POST
/polyrl/faults`` to change the fault injection below. ``"return_token_ids": true`` (vLLM's
extension) adds each choice's ``token_ids`` and ``prompt_token_ids``.

Why the standard library (``http.server.ThreadingHTTPServer``) and not starlette + uvicorn: the
server exists to put a local model behind the API for judges, tests and quick experiments, and
one engine generates one batch at a time anyway, so an async framework would buy nothing but two
dependencies. Each connection gets a thread (HTTP/1.1 keep-alive), handlers queue their prompts
and one generation thread runs them, merging requests that arrive together with the same sampling
settings into one ``generate`` call (``--max-batch-size``): concurrent judge requests share a
forward pass. Streaming (``"stream": true``) is refused with a 400.

Sampling: ``temperature`` (default 1), ``top_p``, ``top_k`` (extension), ``max_tokens`` /
``max_completion_tokens`` (default 256, capped by ``--max-tokens-limit``), ``n``, ``stop``,
``seed``. Log-probs: chat ``"logprobs": true`` gives ``choices[i].logprobs.content`` with each
sampled token's log-prob; ``/v1/completions`` ``"logprobs": k`` gives ``tokens``/``token_logprobs``/
``text_offset``. They are the sampler's own log-probs (the backend's ``generate`` contract: the
temperature-scaled distribution before top-p/top-k). Alternatives (``top_logprobs``) are not
computed by the generate contract: ``top_logprobs`` lists come back empty.

Security: binds 127.0.0.1 unless ``--host`` says otherwise; ``--api-key-env NAME`` makes it
require ``Authorization: Bearer <value of $NAME>``. There is no TLS and no rate limit.

Fault injection (for testing clients such as the LLM judge; all off by default):
    ``--fault-delay-s S``      sleep S seconds before handling each generation request
    ``--fault-delay-first N``  ... only the first N generation requests (0 = all)
    ``--fault-garbage``        answer with random letters instead of the model's text
    ``--fault-503-first N``    answer the first N generation requests with HTTP 503
    ``--fault-die-after N``    after N answered generation requests, the next one kills the
                               process (``os._exit``) without answering: a server dying mid-run
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import string
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.types import Completion, Prompt, SamplingParams

log = get_logger("polyrl.serve")

DEFAULT_MAX_TOKENS = 256


class ApiError(Exception):
    """An error answered in OpenAI's ``{"error": {...}}`` shape."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@attrs.define
class Faults:
    """Fault injection settings (see the module docstring)."""

    delay_s: float = 0.0
    delay_first: int = 0
    garbage: bool = False
    fail_503_first: int = 0
    die_after: int | None = None

    def update(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            if key not in attrs.fields_dict(Faults):
                raise ApiError(400, f"unknown fault {key!r}; known: {', '.join(attrs.fields_dict(Faults))}", key)
            setattr(self, key, value)


@attrs.define
class Stats:
    requests: int = 0  # generation requests received
    answered: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    batches: int = 0
    max_batch_prompts: int = 0
    errors: int = 0
    weight_version: int = 0  # weight loads through POST /polyrl/weights
    weight_load_s: float = 0.0  # the last one's duration


@attrs.define
class _Job:
    prompts: list[Prompt]
    sampling: SamplingParams | None
    future: Future = attrs.field(factory=Future)
    action: Any = None  # a callable run alone on the generation thread (weight loads)


class Generator:
    """One thread that owns the engine: runs queued jobs, merging compatible ones into a batch."""

    def __init__(self, engine: Any, max_batch_size: int, stats: Stats, lock: threading.Lock) -> None:
        self.engine = engine
        self.max_batch_size = max(1, int(max_batch_size))
        self.stats = stats
        self.lock = lock
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="polyrl-serve-generate", daemon=True)
        self.thread.start()

    def submit(self, prompts: list[Prompt], sampling: SamplingParams) -> list[Completion]:
        job = _Job(prompts, sampling)
        self.jobs.put(job)
        return job.future.result()

    def run_exclusive(self, action: Any) -> Any:
        """Run ``action()`` on the generation thread between batches: never during a generate."""
        job = _Job([], None, action=action)
        self.jobs.put(job)
        return job.future.result()

    def _take_batch(self) -> list[_Job]:
        first = self.jobs.get()
        if first.action is not None:
            return [first]
        batch, size, held = [first], len(first.prompts), []
        time.sleep(0.002)  # let requests sent together arrive together
        while size < self.max_batch_size:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job.action is None and job.sampling == first.sampling and size + len(job.prompts) <= self.max_batch_size:
                batch.append(job)
                size += len(job.prompts)
            else:
                held.append(job)
        for job in held:  # keep their turn: they run next
            self.jobs.put(job)
        return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch[0].action is not None:
                try:
                    batch[0].future.set_result(batch[0].action())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    batch[0].future.set_exception(exc)
                continue
            prompts = [p for job in batch for p in job.prompts]
            try:
                out = self.engine.generate(prompts, batch[0].sampling)
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting request
                for job in batch:
                    job.future.set_exception(exc)
                continue
            with self.lock:
                self.stats.batches += 1
                self.stats.max_batch_prompts = max(self.stats.max_batch_prompts, len(prompts))
            n, start = batch[0].sampling.n, 0
            for job in batch:
                count = len(job.prompts) * n
                part = out[start:start + count]
                for c in part:  # indices relative to the job's own prompts
                    c.prompt_index -= start // n
                job.future.set_result(part)
                start += count


class TokenText:
    """Token id -> text, through the engine's tokenizer when it exposes one."""

    def __init__(self, engine: Any, model_path: str) -> None:
        self._decode = None
        raw = getattr(engine, "raw", engine)
        tok = getattr(raw, "tokenizer", None)
        if tok is not None and hasattr(tok, "decode"):
            self._decode = lambda i: tok.decode([int(i)], skip_special_tokens=False)
        else:
            path = os.path.join(model_path, "tokenizer.json")
            if os.path.isfile(path):
                try:
                    from tokenizers import Tokenizer

                    fast = Tokenizer.from_file(path)
                    self._decode = lambda i: fast.decode([int(i)], skip_special_tokens=False)
                except Exception:  # noqa: BLE001 - fall back to ids
                    self._decode = None

    def __call__(self, token_id: int) -> str:
        if self._decode is None:
            return f"<{int(token_id)}>"
        return self._decode(token_id)


def read_safetensors(path: str) -> dict[str, Any]:
    """Every tensor in a .safetensors file, or in all of a folder's (numpy; never pickle)."""
    from safetensors.numpy import load_file

    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    else:
        files = [path] if path.endswith(".safetensors") and os.path.isfile(path) else []
    if not files:
        raise ApiError(400, f"no .safetensors file at {path!r}", "path")
    weights: dict[str, Any] = {}
    for f in files:
        weights.update(load_file(f))
    return weights


def _garbage(rng: random.Random, length: int) -> str:
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
             for _ in range(max(1, length // 4))]
    return " ".join(words) + " ~~"


class PolyrlServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: Any, *, model_name: str, model_path: str = "",
                 max_batch_size: int = 8, max_tokens_limit: int = 2048, api_key: str | None = None,
                 faults: Faults | None = None, allow_fault_control: bool = False,
                 allow_weight_push: bool = False) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.model_name = model_name
        self.max_tokens_limit = max_tokens_limit
        self.api_key = api_key
        self.faults = faults or Faults()
        self.allow_fault_control = allow_fault_control
        self.allow_weight_push = allow_weight_push
        self.stats = Stats()
        self.lock = threading.Lock()
        self.generator = Generator(engine, max_batch_size, self.stats, self.lock)
        self.token_text = TokenText(engine, model_path)
        self.created = int(time.time())
        self._rng = random.Random(0)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    # --- faults --------------------------------------------------------------------------------

    def before_generation(self) -> None:
        """Count the request and apply the configured faults (may sleep, raise or exit)."""
        with self.lock:
            self.stats.requests += 1
            number = self.stats.requests
            faults = attrs.evolve(self.faults)
            answered = self.stats.answered
        if faults.die_after is not None and answered >= faults.die_after:
            log.warning("fault injection: dying mid-run", answered=answered)
            os._exit(3)
        if faults.delay_s > 0 and (faults.delay_first <= 0 or number <= faults.delay_first):
            time.sleep(faults.delay_s)
        if number <= faults.fail_503_first:
            raise ApiError(503, "fault injection: service unavailable", kind="server_error")

    def text_of(self, completion: Completion) -> str:
        if self.faults.garbage:
            with self.lock:
                return _garbage(self._rng, max(8, len(completion.text)))
        return completion.text

    def generate(self, prompts: list[Prompt], sampling: SamplingParams) -> list[Completion]:
        out = self.generator.submit(prompts, sampling)
        with self.lock:
            self.stats.answered += 1
        return out


def _sampling(body: dict[str, Any], server: PolyrlServer, default_max: int) -> SamplingParams:
    if body.get("stream"):
        raise ApiError(400, "stream=true is not supported by polyrl serve; send stream=false", "stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")
    max_tokens = min(max_tokens, server.max_tokens_limit)
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", "stop")
    numbers: dict[str, Any] = {}
    for key, default, kind in (("temperature", 1.0, float), ("top_p", 1.0, float), ("top_k", 0, int),
                               ("n", 1, int), ("seed", None, int)):
        value = body.get(key, default)
        if value is None:
            value = default
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or (kind is int and float(value) != int(value))):
            raise ApiError(400, f"{key} must be a number, got {value!r}", key)
        numbers[key] = kind(value) if value is not None else None
    if numbers["top_k"] == -1:  # vLLM's "disabled"
        numbers["top_k"] = 0
    try:
        return SamplingParams(max_new_tokens=max_tokens, stop=tuple(stop), **numbers)
    except ConfigError as exc:
        raise ApiError(400, str(exc), exc.field) from None


def _chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}", "messages")
    out = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise ApiError(400, "each message needs a role and a content", "messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(400, "message content must be a string or a list of text parts", "messages")
        out.append({"role": str(m["role"]), "content": content})
    return out


def _usage(completions: list[Completion], per_prompt: int) -> dict[str, int]:
    prompt_tokens = sum(len(c.prompt_ids) for c in completions[::per_prompt]) if completions else 0
    completion_tokens = sum(len(c.completion_ids) for c in completions)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PolyrlServer
    error_content_type = "application/json"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("http", client=self.client_address[0], request=format % args)

    # --- plumbing ------------------------------------------------------------------------------

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. timed out)
            self.close_connection = True

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    def _authorised(self) -> None:
        if self.server.api_key is None:
            return
        if self.headers.get("Authorization", "") != f"Bearer {self.server.api_key}":
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer ...)",
                           kind="authentication_error", code="invalid_api_key")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        generation = method == "POST" and path in ("/v1/chat/completions", "/v1/completions")
        if generation:
            with self.server.lock:
                self.server.stats.in_flight += 1
                self.server.stats.max_in_flight = max(self.server.stats.max_in_flight,
                                                      self.server.stats.in_flight)
        try:
            if path != "/health":
                self._authorised()
            handler = ROUTES.get((method, path))
            if handler is None:
                raise ApiError(404, f"no route {method} {path}", kind="not_found_error")
            status, payload = handler(self)
            self._send(status, payload)
        except ApiError as exc:
            if generation:
                with self.server.lock:
                    self.server.stats.errors += 1
            self._send(exc.status, exc.body())
        except Exception as exc:  # noqa: BLE001 - answered as a 500, logged
            log.error("request failed", path=path, error=f"{type(exc).__name__}: {exc}")
            with self.server.lock:
                self.server.stats.errors += 1
            self._send(500, ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error").body())
        finally:
            if generation:
                with self.server.lock:
                    self.server.stats.in_flight -= 1

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    # --- endpoints -----------------------------------------------------------------------------

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model != self.server.model_name:
            raise ApiError(404, f"model {model!r} is not served here; available: {self.server.model_name!r}",
                           "model", code="model_not_found")

    def models(self) -> tuple[int, Any]:
        return 200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                 "created": self.server.created, "owned_by": "polyrl"}]}

    def health(self) -> tuple[int, Any]:
        return 200, {"status": "ok"}

    def stats(self) -> tuple[int, Any]:
        with self.server.lock:
            return 200, attrs.asdict(self.server.stats)

    def reset_stats(self) -> tuple[int, Any]:
        with self.server.lock:
            in_flight = self.server.stats.in_flight
            self.server.stats = Stats(in_flight=in_flight, max_in_flight=in_flight)
            self.server.generator.stats = self.server.stats
        return 200, {"status": "reset"}

    def set_faults(self) -> tuple[int, Any]:
        if not self.server.allow_fault_control:
            raise ApiError(403, "fault control is off; start the server with --allow-fault-control")
        body = self._body()
        with self.server.lock:
            self.server.faults.update(body)
            return 200, attrs.asdict(self.server.faults)

    def load_weights(self) -> tuple[int, Any]:
        if not self.server.allow_weight_push:
            raise ApiError(403, "weight push is off; start the server with --allow-weight-push")
        path = self._body().get("path")
        if not isinstance(path, str) or not path:
            raise ApiError(400, "give the path of a .safetensors file or a folder of them", "path")
        weights = read_safetensors(path)
        t0 = time.perf_counter()
        self.server.generator.run_exclusive(lambda: self.server.engine.import_weights(weights))
        seconds = time.perf_counter() - t0
        with self.server.lock:
            self.server.stats.weight_version += 1
            self.server.stats.weight_load_s = seconds
            version = self.server.stats.weight_version
        log.info("weights loaded", path=path, tensors=len(weights), seconds=round(seconds, 4), version=version)
        return 200, {"version": version, "tensors": len(weights), "seconds": seconds}

    @staticmethod
    def _token_ids(entry: dict[str, Any], c: Completion, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``return_token_ids`` extension: the exact ids, so clients never re-tokenize."""
        if body.get("return_token_ids"):
            entry["token_ids"] = [int(t) for t in c.completion_ids]
            entry["prompt_token_ids"] = [int(t) for t in c.prompt_ids]
        return entry

    def _logprob_entries(self, c: Completion) -> list[dict[str, Any]]:
        out = []
        for tid, lp in zip(c.completion_ids.tolist(), c.logprobs.tolist()):
            token = self.server.token_text(tid)
            out.append({"token": token, "logprob": float(lp), "bytes": list(token.encode("utf-8")),
                        "top_logprobs": []})
        return out

    def chat_completions(self) -> tuple[int, Any]:
        body = self._body()
        self._check_model(body)
        messages = _chat_messages(body)
        sampling = _sampling(body, self.server, DEFAULT_MAX_TOKENS)
        self.server.before_generation()
        completions = self.server.generate([messages], sampling)
        want_logprobs = bool(body.get("logprobs"))
        choices = []
        for i, c in enumerate(completions):
            choices.append(self._token_ids({
                "index": i,
                "message": {"role": "assistant", "content": self.server.text_of(c)},
                "logprobs": {"content": self._logprob_entries(c)} if want_logprobs else None,
                "finish_reason": c.finish_reason,
            }, c, body))
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                     "created": int(time.time()), "model": self.server.model_name, "choices": choices,
                     "usage": _usage(completions, sampling.n)}

    def completions(self) -> tuple[int, Any]:
        body = self._body()
        self._check_model(body)
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise ApiError(400, "prompt must be a string or a list of strings (token-id prompts are "
                           "not supported)", "prompt")
        if body.get("echo"):
            raise ApiError(400, "echo=true is not supported by polyrl serve", "echo")
        logprobs = body.get("logprobs")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
            raise ApiError(400, "logprobs must be an integer >= 0 (or null)", "logprobs")
        sampling = _sampling(body, self.server, 16)  # OpenAI's default for /v1/completions
        self.server.before_generation()
        completions = self.server.generate(list(prompts), sampling)
        choices = []
        for i, c in enumerate(completions):
            entry: dict[str, Any] = {"index": i, "text": self.server.text_of(c), "logprobs": None,
                                     "finish_reason": c.finish_reason}
            if logprobs is not None:
                tokens = [self.server.token_text(t) for t in c.completion_ids.tolist()]
                offsets, pos = [], 0
                for t in tokens:
                    offsets.append(pos)
                    pos += len(t)
                entry["logprobs"] = {"tokens": tokens, "token_logprobs": [float(x) for x in c.logprobs],
                                     "top_logprobs": [{} for _ in tokens] if logprobs else None,
                                     "text_offset": offsets}
            choices.append(self._token_ids(entry, c, body))
        return 200, {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                     "model": self.server.model_name, "choices": choices,
                     "usage": _usage(completions, sampling.n)}


ROUTES = {
    ("GET", "/v1/models"): Handler.models,
    ("GET", "/health"): Handler.health,
    ("GET", "/polyrl/stats"): Handler.stats,
    ("POST", "/polyrl/stats/reset"): Handler.reset_stats,
    ("POST", "/polyrl/faults"): Handler.set_faults,
    ("POST", "/polyrl/weights"): Handler.load_weights,
    ("POST", "/v1/chat/completions"): Handler.chat_completions,
    ("POST", "/v1/completions"): Handler.completions,
}


# --- command line ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="torch", help="a polyrl backend that can generate")
    p.add_argument("--model", default="smollm2-135m-instruct", help="local folder or alias")
    p.add_argument("--served-model-name", default=None, help="the name clients send (default: --model)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    p.add_argument("--threads", type=int, default=None, help="backend compute threads")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-length", type=int, default=2048, help="prompt + completion tokens")
    p.add_argument("--max-batch-size", type=int, default=8, help="prompts merged into one generate call")
    p.add_argument("--max-tokens-limit", type=int, default=2048, help="cap on a request's max_tokens")
    p.add_argument("--api-key-env", default=None, help="require Bearer $NAME from clients")
    p.add_argument("--fault-delay-s", type=float, default=0.0)
    p.add_argument("--fault-delay-first", type=int, default=0)
    p.add_argument("--fault-garbage", action="store_true")
    p.add_argument("--fault-503-first", type=int, default=0)
    p.add_argument("--fault-die-after", type=int, default=None)
    p.add_argument("--allow-fault-control", action="store_true", help="enable POST /polyrl/faults")
    p.add_argument("--allow-weight-push", action="store_true",
                   help="enable POST /polyrl/weights (a trainer loads new weights from a local safetensors path)")


def build_server(args: argparse.Namespace) -> PolyrlServer:
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(f"environment variable {args.api_key_env} is empty", field="--api-key-env",
                              fix=f"export {args.api_key_env}=<a key> or drop --api-key-env")
    reg = get_registry()
    path = reg.resolve_model(args.model)
    engine = Engine(reg, args.backend, EngineConfig(model=path, role="generate", dtype=args.dtype,
                                                    device=args.device, threads=args.threads,
                                                    max_length=args.max_length))
    faults = Faults(delay_s=args.fault_delay_s, delay_first=args.fault_delay_first, garbage=args.fault_garbage,
                    fail_503_first=args.fault_503_first, die_after=args.fault_die_after)
    return PolyrlServer((args.host, args.port), engine, model_name=args.served_model_name or args.model,
                        model_path=path, max_batch_size=args.max_batch_size,
                        max_tokens_limit=args.max_tokens_limit, api_key=api_key, faults=faults,
                        allow_fault_control=args.allow_fault_control,
                        allow_weight_push=args.allow_weight_push)


def run(args: argparse.Namespace) -> int:
    """Load the model, bind, print the URL (``polyrl serve: listening on URL``), serve until signalled."""
    server = build_server(args)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving beyond this machine: anyone who can reach it can use the model",
                    host=args.host, api_key=bool(server.api_key))

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"polyrl serve: listening on {server.url}/v1 (model {server.model_name!r})", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - `polyrl serve` is the entry
    parser = argparse.ArgumentParser(prog="polyrl serve")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
