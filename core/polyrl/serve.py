"""``polyrl serve``: an OpenAI-compatible HTTP server over any polyrl generate backend.

    polyrl serve --backend torch --model smollm2-135m-instruct --port 8000
    curl -s localhost:8000/v1/chat/completions -d '{"model": "smollm2-135m-instruct",
         "messages": [{"role": "user", "content": "Hi"}], "logprobs": true}'

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (OpenAI
request/response shapes), ``GET /health``; and, for tests and monitoring, ``GET /polyrl/stats``
(requests, in flight now, most in flight at once, batches, weight version, requests refused as
overloaded), ``POST /polyrl/stats/reset``, — only with ``--allow-weight-push`` — ``POST
/polyrl/weights`` ``{"path": DIR_OR_FILE}`` that loads new weights from local safetensors between
two batches (how a trainer keeps remote generation on-policy; see ``polyrl.serving.weight_push``
for the shared secret and the checks), and — only with ``--allow-fault-control`` — ``POST
/polyrl/faults`` to change the fault injection below. ``"return_token_ids": true`` (vLLM's
extension) adds each choice's ``token_ids`` and ``prompt_token_ids``. Every generation reply names the
weights that produced all of its completions: ``weights_version`` (0 for the weights the server
started with, then one more per load) and ``weights_id`` (this server process's random id and that
version, which ``POST /polyrl/weights`` answers too), so a client that pushed weights can tell a
reply from other weights, e.g. from a server that restarted on its initial ones. ``/v1/completions`` also takes
token-id prompts, as OpenAI's API and vLLM do (``"prompt": [ids]`` or a list of such lists): used
verbatim, no chat template and no BOS, so a multi-turn client continues from the exact ids of its
last turn instead of re-tokenized text; an id outside the model's vocabulary is a 400.

Why the standard library (``http.server.ThreadingHTTPServer``) and not starlette + uvicorn: the
server exists to put a local model behind the API for judges, tests and quick experiments, and
one engine generates one batch at a time anyway, so an async framework would buy nothing but two
dependencies. Each connection gets a thread (HTTP/1.1 keep-alive, at most ``--max-connections``),
handlers queue their prompts and one generation thread serves them round-robin in units of at most
``--max-batch-size`` completions, merging units with the same sampling settings into one
``generate`` call (``polyrl.serving.scheduler``); a request whose client closed the connection
before its generation started is dropped unanswered (``abandoned`` in the stats). A client that only
shut down its write side after its request is answered: it is first written an interim ``100
Continue``, which only a closed connection resets (``polyrl.serving.peer``).
Streaming (``"stream": true``) is refused with a 400.

Sampling: ``temperature`` (default 1, at most 10), ``top_p``, ``top_k`` (extension),
``max_tokens`` / ``max_completion_tokens`` (default 256, at most ``--max-tokens-limit``), ``n``
(at most ``--max-n``), ``stop`` (the text keeps the stop string: it is the decoded tokens), ``seed`` (0 to 2**63-1), ``ignore_eos`` (vLLM's extension, a JSON
boolean: sample on past EOS to ``max_tokens``). Log-probs: chat ``"logprobs": true``
gives ``choices[i].logprobs.content`` with each sampled token's log-prob; ``/v1/completions``
``"logprobs": 0`` gives ``tokens``/``token_logprobs``/``text_offset`` (each token's character offset in
``text``; a token holding part of a character gets that character's). They are the sampler's own
log-probs (the backend's ``generate`` contract: the temperature-scaled distribution before
top-p/top-k). Alternatives are not computed by the generate contract, so chat ``top_logprobs`` above
0 and ``/v1/completions`` ``logprobs`` above 0 are refused. vLLM's ``min_p``,
``repetition_penalty`` and ``return_tokens_as_token_ids`` (tokens named ``token_id:N``) are honoured. Every other field that would change the answer and is not
done here (``logit_bias``, presence/frequency penalties, ``response_format`` other than text,
``tools``, ``min_tokens``, ``best_of``, ``suffix``, ``echo``, vLLM's ``chat_template_kwargs``,
``stop_token_ids``, ``guided_*`` and the rest, non-text content parts) is a 400 naming it when set,
never silently ignored (``polyrl.serving.requests.UNHONOURED``).

Bad requests are 4xx with a reason in OpenAI's error shape, never a 500 or a hang: 411/400/413 for
a missing, malformed or too large Content-Length, 400 for bad JSON, wrong types, out-of-range
sampling values and prompts over the context, 408 for a request (its line, headers or body) not
received within ``--read-timeout-s``, sent before the connection closes (a response not taken
within that plus a second per MiB is cut off), 400 for a
body the client cut short (it closed or reset the connection mid-body: that was a 408, as if the
server had waited too little), 503 + Retry-After when the queue or the connection cap is full.

Stopping: SIGTERM or SIGINT lets the batch generating now finish and answers its requests, answers
every waiting request 503 + Retry-After (``shutting_down``), refuses new ones the same way, then
exits 0; a second signal exits at once.

Security: binds 127.0.0.1 unless ``--host`` says otherwise; ``--api-key-env NAME`` makes it
require ``Authorization: Bearer <value of $NAME>``. There is no TLS.

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
import hmac
import math
import os
import random
import re
import signal
import string
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from polyrl import strict_json
from polyrl.backend_kit.tokens import KEPT_TAGS, completion_decoder
from polyrl.byte_level import byte_to_char
from polyrl.errors import ConfigError
from polyrl.logs import get_logger, log_from_signal_handler
from polyrl.serving import requests as req
from polyrl.serving.address import bind_error, check_address
from polyrl.serving.api_error import ApiError
from polyrl.serving.connections import Deadlines, Refuser
from polyrl.serving.limits import Limits, content_length
from polyrl.serving.peer import INTERIM, peer_state
from polyrl.serving.scheduler import ClientGone, FairScheduler
from polyrl.serving.text_offsets import text_offsets
from polyrl.serving.vocab import embedding_rows, model_positions
from polyrl.serving.weight_push import (TOKEN_HEADER, WeightSpec, check_startup, check_token, load_token,
                                        push_path, read_checked)
from polyrl.types import Completion, Prompt, SamplingParams, TokenPrompt
from polyrl.validators import MAX_WAIT_S, shown

log = get_logger("polyrl.serve")

DEFAULT_MAX_TOKENS = 256
# Completions per generate call, and the unit a big request is served in. Why not smaller: each
# call has a fixed cost per decoding step, so small units cost a big request throughput; why not
# larger: a small request may wait for one unit of each request ahead of it.
DEFAULT_BATCH = 32
#: On stopping, how long answered requests get to send their responses before the process exits.
DRAIN_S = 10.0
__all__ = ["ApiError", "Faults", "Limits", "PolyrlServer", "add_arguments", "build_server", "run"]


@attrs.define
class Faults:
    """Fault injection settings (see the module docstring)."""

    delay_s: float = 0.0
    delay_first: int = 0
    garbage: bool = False
    fail_503_first: int = 0
    die_after: int | None = None

    def update(self, data: dict[str, Any]) -> None:
        """Set the faults in ``data``, all or none: a value of the wrong type (``"delay_s": "2"``) was
        stored as given and every later generation request was a 500 until it was set again."""
        for key, value in data.items():
            if key not in attrs.fields_dict(Faults):
                raise ApiError(400, f"unknown fault {key!r}; known: {', '.join(attrs.fields_dict(Faults))}", key)
            accepts, kind = _FAULT_RULES[key]
            if not accepts(value):
                raise ApiError(400, f"fault {key} must be {kind}, got {shown(value, 40)}", key)
        for key, value in data.items():
            setattr(self, key, float(value) if key == "delay_s" else value)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


#: what each fault accepts: a check of the JSON value, and its words for the 400
_FAULT_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "delay_s": (lambda v: type(v) in (int, float) and 0 <= v <= MAX_WAIT_S,
                f"a number of seconds in [0, {MAX_WAIT_S:g}]"),
    "delay_first": (_count, "an integer >= 0"),
    "garbage": (lambda v: type(v) is bool, "a JSON boolean"),
    "fail_503_first": (_count, "an integer >= 0"),
    "die_after": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
}


@attrs.define
class Stats:
    requests: int = 0  # generation requests received
    answered: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    batches: int = 0
    max_batch_prompts: int = 0
    errors: int = 0
    overloaded: int = 0  # answered 503 because the queue was full
    refused_connections: int = 0  # answered 503 because --max-connections were open
    abandoned: int = 0  # requests whose client closed the connection before any of it was generated
    weight_version: int = 0  # weight loads through POST /polyrl/weights (never reset: it names the weights)
    weight_load_s: float = 0.0  # the last one's duration


class TokenText:
    """Token id -> text, through the engine's tokenizer when it exposes one."""

    def __init__(self, engine: Any, model_path: str) -> None:
        self._decode: Any = None
        self._piece: Any = None  # id -> the vocabulary's own spelling of the token
        self._in_text: Any = None  # ids -> their text as a completion's (special tokens left out)
        raw = getattr(engine, "raw", engine)
        tok = getattr(raw, "tokenizer", None)
        if tok is not None and hasattr(tok, "decode"):
            self._decode = lambda i: tok.decode([int(i)], skip_special_tokens=False)
            if hasattr(tok, "convert_ids_to_tokens"):
                self._piece = lambda i: tok.convert_ids_to_tokens(int(i))
            self._in_text = completion_decoder(tok)
        else:
            path = os.path.join(model_path, "tokenizer.json")
            if os.path.isfile(path):
                try:
                    from tokenizers import Tokenizer

                    fast = Tokenizer.from_file(path)
                    self._decode = lambda i: fast.decode([int(i)], skip_special_tokens=False)
                    self._piece = lambda i: fast.id_to_token(int(i))
                    self._in_text = lambda ids: fast.decode(  # completion_decoder's rule: KEPT_TAGS stay
                        list(ids), skip_special_tokens=not any(fast.id_to_token(int(i)) in KEPT_TAGS for i in ids))
                except Exception:  # noqa: BLE001 - fall back to ids
                    self._decode = None
        if callable(getattr(raw, "decode", None)):  # the engine's own: the one its completions' text came from
            self._in_text = raw.decode

    def __call__(self, token_id: int) -> str:
        if self._decode is None:
            return f"<{int(token_id)}>"
        return self._decode(token_id)

    def left_out(self, token_id: int) -> bool:
        """Whether a completion's text leaves this token out: a special token (``<|im_end|>`` under
        ``ignore_eos``) that the engine's decode skips. Why ask: its own decode spells it, and
        counting those characters shifted every later ``text_offset`` past its token."""
        if self._in_text is None or self._decode is None:
            return False
        return self._in_text([int(token_id)]) == "" and self(token_id) != ""

    def token_bytes(self, token_id: int) -> list[int] | None:
        """The token's own bytes (OpenAI's logprobs ``bytes``), or None when they cannot be told.
        Why not the decoded text's UTF-8: a token holding part of a character decodes to U+FFFD,
        whose bytes are not the token's, and a client joining them could not rebuild the text."""
        text = self(token_id)
        if "\ufffd" not in text:
            return list(text.encode("utf-8"))
        piece = self._piece(token_id) if self._piece is not None else None
        if not isinstance(piece, str):
            return None
        spelled = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)  # sentencepiece's byte fallback
        if spelled:
            return [int(spelled.group(1), 16)]
        table = {char: byte for byte, char in byte_to_char().items()}  # byte-level BPE (GPT-2's alphabet)
        if piece and all(char in table for char in piece):
            return [table[char] for char in piece]
        return None


def _garbage(rng: random.Random, length: int) -> str:
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
             for _ in range(max(1, length // 4))]
    return " ".join(words) + " ~~"


class PolyrlServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: bursts of connections wait instead of being reset

    def __init__(self, address: tuple[str, int], engine: Any, *, model_name: str, model_path: str = "",
                 max_batch_size: int = DEFAULT_BATCH, limits: Limits | None = None, api_key: str | None = None,
                 faults: Faults | None = None, allow_fault_control: bool = False,
                 allow_weight_push: bool = False, weight_push_token: str | None = None,
                 weight_spec: WeightSpec | None = None) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.model_name = model_name
        self.limits = limits or Limits()
        self.api_key = api_key
        self.faults = faults or Faults()
        self.allow_fault_control = allow_fault_control
        self.allow_weight_push = allow_weight_push
        self.weight_push_token = weight_push_token
        self.weight_spec = weight_spec
        self.stats = Stats()
        self.lock = threading.Lock()
        #: this process's id in every ``weights_id``: a restarted server's version 0 is not the last one's
        self.instance = uuid.uuid4().hex[:12]
        self.scheduler = FairScheduler(engine.generate, max_batch_size, self.limits.max_queue, self._count_batch,
                                       tag=self.weights_id)
        self.token_text = TokenText(engine, model_path)
        self._encode = getattr(getattr(engine, "raw", engine), "encode_prompt", None)
        #: whether the backend takes token-id prompts, and the ids it can embed
        self.token_prompts = bool(getattr(getattr(engine, "capabilities", None), "token_prompts", False))
        self.vocab_size = embedding_rows(model_path, getattr(getattr(engine, "raw", engine), "tokenizer", None))
        self._tokenizer_lock = threading.Lock()  # handler threads take turns: tokenizers keep per-call state
        #: one weight push is read and loaded at a time: racing pushes hold one extra copy of the weights, not N
        self.push_lock = threading.Lock()
        self.created = int(time.time())
        self._rng = random.Random(0)
        self.deadlines = Deadlines()
        self._refuse = Refuser()
        self._connections = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"  # type: ignore[str-bytes-safe]  # an AF_INET host is a str

    # --- connections ---------------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection up to ``max_connections``; past it a quick 503 + Retry-After."""
        with self.lock:
            full = self._connections >= self.limits.max_connections
            if full:
                self.stats.refused_connections += 1
            else:
                self._connections += 1
        if full:
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self.lock:
                self._connections -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.deadlines.clear(request)
            with self.lock:
                self._connections -= 1

    # --- requests ------------------------------------------------------------------------------

    def weights_id(self) -> str:
        """The served weights' id, ``<instance>-<version>`` (read on the generation thread between loads)."""
        with self.lock:
            return f"{self.instance}-{self.stats.weight_version}"

    def load_weights(self, weights: Any) -> tuple[int, str]:
        """Import ``weights`` between two batches and count the version on that same thread, so no
        batch runs on the new weights under the old id; the new (version, weights_id)."""
        def load() -> tuple[int, str]:
            self.engine.import_weights(weights)
            with self.lock:
                self.stats.weight_version += 1
                version = self.stats.weight_version
            return version, f"{self.instance}-{version}"

        return self.scheduler.run_exclusive(load)

    def _count_batch(self, prompts: int) -> None:
        with self.lock:
            self.stats.batches += 1
            self.stats.max_batch_prompts = max(self.stats.max_batch_prompts, prompts)

    def check_prompt_tokens(self, prompt: Prompt, param: str) -> None:
        """400 naming the context when the prompt (chat template applied) does not fit the model."""
        if isinstance(prompt, TokenPrompt):
            if not self.token_prompts:
                backend = getattr(self.engine, "backend", "this")
                raise ApiError(400, f"the {backend} backend behind this server cannot generate from token-id "
                               "prompts (Capabilities.token_prompts); send the prompt as text", param)
            req.check_prompt_tokens(len(prompt.ids), param, self.limits)
            return
        if self._encode is None:
            return
        with self._tokenizer_lock:
            try:
                ids = self._encode(prompt)
            except ConfigError as exc:
                raise ApiError(400, str(exc), param) from None
            except Exception as exc:  # noqa: BLE001 - e.g. a chat template refusing these roles
                raise ApiError(400, f"the model's tokenizer or chat template refused the prompt: "
                               f"{type(exc).__name__}: {str(exc)[:200]}", param) from None
        req.check_prompt_tokens(len(ids), param, self.limits)

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

    def generate(self, prompts: list[Prompt], sampling: SamplingParams,
                 gone: Callable[[], bool] | None = None) -> tuple[list[Completion], str]:
        """The completions and the ``weights_id`` of the weights that generated them all; ``gone``:
        whether the client left (then the request is dropped if it has not started: ``ClientGone``)."""
        try:
            out, weights = self.scheduler.submit_tagged(prompts, sampling, gone)
        except ClientGone:
            with self.lock:
                self.stats.abandoned += 1
            raise
        except ApiError as exc:
            if exc.status == 503:
                with self.lock:
                    self.stats.overloaded += 1
            raise
        with self.lock:
            self.stats.answered += 1
        return out, weights

    def drain(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the generation requests in flight to be answered (after the
        scheduler stopped they only have their response left to send); whether they were."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if not self.stats.in_flight:
                    return True
            time.sleep(0.02)
        return False


#: the slowest a client may take a response: ``--read-timeout-s`` plus a second per this many bytes
SEND_BYTES_PER_S = 1 << 20


def send_deadline_s(size: int, limits: Limits) -> float:
    """Seconds a client gets to take a response of ``size`` bytes (see ``Handler._send``)."""
    return limits.read_timeout_s + size / SEND_BYTES_PER_S


def _weights(weights_id: str) -> dict[str, Any]:
    """The reply fields naming the weights that generated it (see the module docstring)."""
    return {"weights_version": int(weights_id.rsplit("-", 1)[1]), "weights_id": weights_id}


def _usage(completions: list[Completion], per_prompt: int) -> dict[str, int]:
    prompt_tokens = sum(len(c.prompt_ids) for c in completions[::per_prompt]) if completions else 0
    completion_tokens = sum(len(c.completion_ids) for c in completions)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PolyrlServer
    error_content_type = "application/json"

    def setup(self) -> None:
        self.timeout = self.server.limits.read_timeout_s  # type: ignore[misc]  # each recv/send; Deadlines bound the whole
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("http", client=self.client_address[0], request=format % args)

    def handle_one_request(self) -> None:
        """An idle kept-alive connection waits at most the read timeout for its next request, and
        a request, once its first byte is in, must arrive whole within the read timeout too."""
        self._body_read = False
        self._probed = False  # whether ``_client_gone`` wrote its interim answer to this request
        deadlines, conn, seconds = self.server.deadlines, self.connection, self.server.limits.read_timeout_s
        deadlines.set(conn, seconds)
        try:
            try:
                started = bool(self.rfile.peek(1))  # type: ignore[attr-defined]  # a BufferedReader (rbufsize -1)
            except OSError:  # socket timeout or reset while idle
                started = False
            if not started:
                self.close_connection = True
                return
            deadlines.set(conn, seconds)
            self._one_request()
        finally:
            deadlines.clear(conn)

    def _one_request(self) -> None:
        """The standard library's ``handle_one_request``, except that a request line or headers not
        received within the read timeout are answered 408 with a JSON error, as a late body is. Its
        own closed the connection without a word when a recv timed out, and when the deadline cut
        the connection it read the end-of-file as the end of the headers and answered what had come."""
        self.requestline = ""  # read by the log line of an answer sent before the request line is parsed
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if self._head_late() or not self.parse_request() or self._head_late():
                return
        except TimeoutError:  # a recv of the request line or a header waited the whole read timeout
            self._head_late(timed_out=True)
            return
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
            return
        try:
            method()
            self.wfile.flush()
        except TimeoutError:  # a send timed out: the connection is discarded, as the standard library does
            self.close_connection = True

    def _head_late(self, timed_out: bool = False) -> bool:
        """Whether the request's line or headers ran past the read timeout (then answered 408)."""
        if not (timed_out or self.server.deadlines.cut(self.connection)):
            return False
        self.send_error(HTTPStatus.REQUEST_TIMEOUT, f"the request line and headers were not received within "
                        f"{self.server.limits.read_timeout_s:g} s; the request was not acted on")
        return True

    def handle_expect_100(self) -> bool:
        """A client asking before it sends the body learns at once that its size is refused."""
        try:
            content_length(self.headers.get("Content-Length"), self.server.limits)
        except ApiError as exc:
            self.close_connection = True
            self._send(exc.status, exc.body(), {"Connection": "close"})
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (bad request line, headers too long, unknown
        method) in the same JSON shape; the connection is closed, its state being unknown."""
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":  # a garbled request line: still
            self.request_version = "HTTP/1.0"  # answer with a status line and headers, not a bare body
        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "error"
        self._send(code, ApiError(code, message or phrase).body(), {"Connection": "close"})

    # --- plumbing ------------------------------------------------------------------------------

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        """Send one response, taken by the client within ``send_deadline_s``: the socket timeout
        bounds each send, so a client reading a KB every second held its thread (and connection
        slot) for the minutes a big reply took; past the deadline the connection is shut down."""
        data = strict_json.dumps(payload).encode("utf-8")  # a NaN log-prob is null, never a bare NaN
        deadlines = self.server.deadlines
        deadlines.set(self.connection, send_deadline_s(len(data), self.server.limits), sending=True)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client gave up (timed out, reset) or the deadline shut the socket
            self.close_connection = True
        finally:
            deadlines.clear(self.connection)

    def _body(self) -> dict[str, Any]:
        """The JSON body, its size checked before a byte is read and received within the deadline."""
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if len(lengths) > 1:  # which one a proxy in front used is unknown: the rest would be a request
            raise ApiError(400, f"the request has {len(lengths)} different Content-Length headers",
                           "Content-Length", close=True)
        length = content_length(self.headers.get("Content-Length"), self.server.limits)
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "Transfer-Encoding is not accepted; send a plain body with Content-Length",
                           "Transfer-Encoding", close=True)
        raw, timed_out = self._received(length)
        if len(raw) < length:
            if timed_out or self.server.deadlines.cut(self.connection):
                raise ApiError(408, f"the body was not received within {self.server.limits.read_timeout_s:g} s "
                               f"({len(raw)} of {length} bytes); the request was not acted on", "Content-Length",
                               close=True)
            # the client went away mid-body (closed, reset, interrupted): a 408 blamed the server's wait
            raise ApiError(400, f"the connection ended after {len(raw)} of the body's {length} bytes (the client "
                                "closed or reset it mid-body); the request was not acted on: nothing was loaded or "
                                "generated", "Content-Length", close=True)
        self._body_read = True
        self.server.deadlines.clear(self.connection)  # the request is in; generating may take long
        return req.parse_json_object(raw)

    def _received(self, length: int) -> tuple[bytes, bool]:
        """Up to ``length`` bytes of the body (fewer when the connection ends first), and whether a
        recv ran past the socket timeout. Read piece by piece, so a reset mid-body still says how
        much had come (one ``read`` lost it: "0 of N bytes"). Why the flag: the per-recv timeout is
        the read timeout, so a body stalling after its headers usually times out before the deadline
        watcher's next tick; taken for a reset, that was a 400 blaming the client, not the 408."""
        parts: list[bytes] = []
        got = 0
        try:
            while got < length:
                part = self.rfile.read1(min(length - got, 1 << 20))
                if not part:
                    break
                parts.append(part)
                got += len(part)
        except TimeoutError:  # socket.timeout: the server's wait ran out, as a deadline cut
            return b"".join(parts), True
        except OSError:  # reset
            pass
        return b"".join(parts), False

    def _client_gone(self) -> bool:
        """Whether the client left: its connection was reset, or it closed it. A client that sent
        end-of-file may only have shut down its write side and still be reading (HTTP allows it: it
        was dropped unanswered), so it is first written an interim ``100 Continue``, which a closed
        socket answers with a reset that the next call sees. HTTP/1.0 has no interim answers: its
        end-of-file is taken for a half-close. Bytes of a next request already sent stay unread."""
        state = peer_state(self.connection)
        if state != "ended":
            return state == "gone"
        if self._probed or self.request_version != "HTTP/1.1":
            return False
        self._probed = True
        try:
            self.wfile.write(INTERIM)
        except OSError:
            return True
        return False

    def _authorised(self) -> None:
        if self.server.api_key is None:
            return
        sent = self.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(sent, f"Bearer {self.server.api_key}".encode()):
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer ...)",
                           kind="authentication_error", code="invalid_api_key")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        generation = method == "POST" and path in ("/v1/chat/completions", "/v1/completions")
        if self.headers.get("Content-Length", "0").strip() == "0" and not self.headers.get("Transfer-Encoding"):
            self.server.deadlines.clear(self.connection)  # nothing more to receive: answering is not bounded
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
            self._finish(status, payload)
        except ApiError as exc:
            if generation and exc.status != 503:
                with self.server.lock:
                    self.server.stats.errors += 1
            self.close_connection = self.close_connection or exc.close
            self._finish(exc.status, exc.body(), exc.headers)
        except ClientGone:  # nobody to answer: the connection is closed as it is
            self.close_connection = True
            log.debug("client left before its request was generated", path=path)
        except ConfigError as exc:  # a value the engine refused: the request's fault
            self._finish(400, ApiError(400, str(exc), exc.field).body())
        except Exception as exc:  # noqa: BLE001 - answered as a 500, logged
            log.error("request failed", path=path, error=f"{type(exc).__name__}: {exc}")
            with self.server.lock:
                self.server.stats.errors += 1
            self._finish(500, ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error").body())
        finally:
            if generation:
                with self.server.lock:
                    self.server.stats.in_flight -= 1

    def _finish(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        """Answer; a body left unread would be parsed as the next request, so then close."""
        declared = self.headers.get("Content-Length", "0").strip()
        if not self._body_read and declared not in ("", "0"):
            self.close_connection = True
        if self.close_connection:
            headers = {**(headers or {}), "Connection": "close"}
        self._send(status, payload, headers)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    # --- endpoints -----------------------------------------------------------------------------

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model != self.server.model_name:
            raise ApiError(404, f"model {str(model)[:100]!r} is not served here; available: "
                           f"{self.server.model_name!r}", "model", code="model_not_found")

    def models(self) -> tuple[int, Any]:
        return 200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                 "created": self.server.created, "owned_by": "polyrl"}]}

    def health(self) -> tuple[int, Any]:
        return 200, {"status": "ok"}

    def stats(self) -> tuple[int, Any]:
        with self.server.lock:
            stats = self.server.stats
            return 200, {**attrs.asdict(stats), "weights_id": f"{self.server.instance}-{stats.weight_version}",
                         "queued": self.server.scheduler.queued()}

    def reset_stats(self) -> tuple[int, Any]:
        with self.server.lock:
            old = self.server.stats
            self.server.stats = Stats(in_flight=old.in_flight, max_in_flight=old.in_flight,
                                      weight_version=old.weight_version, weight_load_s=old.weight_load_s)
        return 200, {"status": "reset"}

    def set_faults(self) -> tuple[int, Any]:
        if not self.server.allow_fault_control:
            raise ApiError(403, "fault control is off; start the server with --allow-fault-control")
        body = self._body()
        with self.server.lock:
            self.server.faults.update(body)
            return 200, attrs.asdict(self.server.faults)

    def load_weights(self) -> tuple[int, Any]:
        server = self.server
        if not server.allow_weight_push:
            raise ApiError(403, "weight push is off; start the server with --allow-weight-push")
        check_token(self.headers.get(TOKEN_HEADER), server.weight_push_token)
        path = push_path(self._body())
        with server.push_lock:
            if server.weight_spec is None:  # a server built without one: read it off the model, between batches
                server.weight_spec = WeightSpec.of(server.scheduler.run_exclusive(server.engine.export_weights))
            weights = read_checked(path, server.weight_spec)
            t0 = time.perf_counter()
            version, weights_id = server.load_weights(weights)
            seconds = time.perf_counter() - t0
        with server.lock:
            server.stats.weight_load_s = seconds
        log.info("weights loaded", path=path, tensors=len(weights), seconds=round(seconds, 4), version=version)
        return 200, {"version": version, "weights_id": weights_id, "tensors": len(weights), "seconds": seconds}

    @staticmethod
    def _token_ids(entry: dict[str, Any], c: Completion, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``return_token_ids`` extension: the exact ids, so clients never re-tokenize."""
        if body.get("return_token_ids"):
            entry["token_ids"] = [int(t) for t in c.completion_ids]
            entry["prompt_token_ids"] = [int(t) for t in c.prompt_ids]
        return entry

    @staticmethod
    def _named(tokens: list[str], ids: list[int], body: dict[str, Any]) -> list[str]:
        """vLLM's ``return_tokens_as_token_ids``: each log-prob's token named ``token_id:N``, so a
        client (polyrl's remote backend) can check it against ``token_ids``; a token's text cannot."""
        return [f"token_id:{int(t)}" for t in ids] if body.get("return_tokens_as_token_ids") else tokens

    def _logprob_entries(self, c: Completion, body: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        ids = c.completion_ids.tolist()
        names = self._named([self.server.token_text(t) for t in ids], ids, body)
        for tid, token, lp in zip(ids, names, c.logprobs.tolist()):
            out.append({"token": token, "logprob": float(lp), "bytes": self.server.token_text.token_bytes(tid),
                        "top_logprobs": []})
        return out

    def chat_completions(self) -> tuple[int, Any]:
        body = self._body()
        self._check_model(body)
        messages = req.chat_messages(body, self.server.limits)
        want_logprobs = req.chat_logprobs(body)
        sampling = req.sampling(body, self.server.limits, DEFAULT_MAX_TOKENS)
        req.check_budget(1, sampling.n, self.server.limits)
        self.server.check_prompt_tokens(messages, "messages")
        self.server.before_generation()
        completions, weights = self.server.generate([messages], sampling, self._client_gone)
        choices = []
        for i, c in enumerate(completions):
            choices.append(self._token_ids({
                "index": i,
                "message": {"role": "assistant", "content": self.server.text_of(c)},
                "logprobs": {"content": self._logprob_entries(c, body)} if want_logprobs else None,
                "finish_reason": c.finish_reason,
            }, c, body))
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                     "created": int(time.time()), "model": self.server.model_name, "choices": choices,
                     "usage": _usage(completions, sampling.n), **_weights(weights)}

    def completions(self) -> tuple[int, Any]:
        body = self._body()
        self._check_model(body)
        prompts = req.completion_prompts(body, self.server.limits, self.server.vocab_size)
        logprobs = req.completion_logprobs(body)
        sampling = req.sampling(body, self.server.limits, 16)  # OpenAI's default for /v1/completions
        req.check_budget(len(prompts), sampling.n, self.server.limits)
        for p in prompts:
            self.server.check_prompt_tokens(p, "prompt")
        self.server.before_generation()
        completions, weights = self.server.generate(list(prompts), sampling, self._client_gone)
        choices = []
        for i, c in enumerate(completions):
            entry: dict[str, Any] = {"index": i, "text": self.server.text_of(c), "logprobs": None,
                                     "finish_reason": c.finish_reason}
            if logprobs:
                ids = c.completion_ids.tolist()
                tokens = [self.server.token_text(t) for t in ids]
                shown = self.server.token_text
                pieces = [b"" if shown.left_out(t) else bytes(shown.token_bytes(t) or token.encode("utf-8"))
                          for t, token in zip(ids, tokens)]
                offsets = text_offsets(pieces, len(entry["text"]))
                entry["logprobs"] = {"tokens": self._named(tokens, ids, body), "token_logprobs": [float(x) for x in c.logprobs],
                                     "top_logprobs": None,
                                     "text_offset": offsets}
            choices.append(self._token_ids(entry, c, body))
        return 200, {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                     "model": self.server.model_name, "choices": choices,
                     "usage": _usage(completions, sampling.n), **_weights(weights)}


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
    d = Limits()
    p.add_argument("--backend", default="torch", help="a polyrl backend that can generate")
    p.add_argument("--model", default="smollm2-135m-instruct", help="local folder or alias")
    p.add_argument("--served-model-name", default=None, help="the name clients send (default: --model)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    p.add_argument("--threads", type=int, default=None, help="backend compute threads")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="auto",
                   help="auto (the backend's accelerator when there is one, else cpu), cpu, cuda, gpu, ...")
    p.add_argument("--max-length", type=int, default=None,
                   help=f"prompt + completion tokens; longer prompts get a 400 (default {d.max_length}, or the "
                   "model's positions when fewer; more than the model's positions is refused)")
    p.add_argument("--max-batch-size", type=int, default=DEFAULT_BATCH,
                   help="completions per generate call, and the unit requests are served in, round-robin "
                   "(larger: more throughput, longer waits for small requests behind big ones); "
                   f"default {DEFAULT_BATCH}")
    p.add_argument("--max-tokens-limit", type=int, default=d.max_tokens_limit,
                   help="largest max_tokens a request may ask for (more: 400)")
    limits = p.add_argument_group("request limits (checked before anything is allocated)")
    for flag, kind, text in (
        ("--max-body-bytes", int, "request body size (413)"),
        ("--max-prompt-chars", int, "characters of one prompt, checked before tokenizing (400)"),
        ("--max-n", int, "largest n (400)"),
        ("--max-prompts", int, "prompts in one /v1/completions request (400)"),
        ("--max-completions", int, "prompts x n in one request (400)"),
        ("--max-queue", int, "generation requests queued or running; more get 503 + Retry-After"),
        ("--max-connections", int, "open connections (a thread each); more get 503 + Retry-After"),
        ("--read-timeout-s", float, "time to receive a whole request, and to keep an idle connection open"),
    ):
        default = getattr(d, flag[2:].replace("-", "_"))
        limits.add_argument(flag, type=kind, default=default, help=f"{text}; default {default}")
    p.add_argument("--api-key-env", default=None, help="require Bearer $NAME from clients")
    p.add_argument("--fault-delay-s", type=float, default=0.0)
    p.add_argument("--fault-delay-first", type=int, default=0)
    p.add_argument("--fault-garbage", action="store_true")
    p.add_argument("--fault-503-first", type=int, default=0)
    p.add_argument("--fault-die-after", type=int, default=None)
    p.add_argument("--allow-fault-control", action="store_true", help="enable POST /polyrl/faults")
    push = p.add_argument_group("weight push (POST /polyrl/weights)")
    push.add_argument("--allow-weight-push", action="store_true",
                      help="enable POST /polyrl/weights (a trainer loads new weights from a local safetensors "
                      "path); needs a token below")
    push.add_argument("--weight-push-token-file", default=None,
                      help=f"file holding the shared secret clients send in {TOKEN_HEADER}")
    push.add_argument("--weight-push-token-env", default=None,
                      help="environment variable holding the shared secret")
    push.add_argument("--insecure-weight-push", action="store_true",
                      help="allow weight push without a token; only with --host 127.0.0.1 (a trusted machine)")


def limits_from(args: argparse.Namespace) -> Limits:
    max_length = args.max_length if args.max_length is not None else Limits().max_length
    return Limits(max_length=max_length, max_body_bytes=args.max_body_bytes,
                  max_prompt_chars=args.max_prompt_chars, max_tokens_limit=args.max_tokens_limit,
                  max_n=args.max_n, max_prompts=args.max_prompts, max_completions=args.max_completions,
                  max_queue=args.max_queue, max_connections=args.max_connections,
                  read_timeout_s=args.read_timeout_s)


def fitted_max_length(asked: int | None, positions: int | None) -> int:
    """``--max-length`` for a model of ``positions``: the default shrinks to fit it, an explicit
    value past it is refused (a prompt past an absolute-position model's table was a 500)."""
    default = Limits().max_length
    if asked is None:
        return min(default, positions) if positions else default
    if positions and asked > positions:
        raise ConfigError(f"{asked} is more than the {positions} positions the model has", field="--max-length",
                          fix=f"--max-length {positions} or less")
    return asked


def build_server(args: argparse.Namespace) -> PolyrlServer:
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.model_flag import flag_errors_named, resolve_flag_model
    from polyrl.types import EngineConfig

    limits = limits_from(args)
    if args.max_batch_size < 1:
        raise ConfigError(f"must be >= 1, got {args.max_batch_size}", field="--max-batch-size")
    check_address(args.host, args.port)  # before the model loads
    token = load_token(args.weight_push_token_file, args.weight_push_token_env)
    check_startup(args.allow_weight_push, token, args.insecure_weight_push, args.host)
    api_key = None
    if args.api_key_env is not None and not args.api_key_env.strip():
        # `--api-key-env "$KEY_VAR"` with KEY_VAR unset served with no key at all, without a word
        raise ConfigError(f"names no environment variable ({args.api_key_env!r}), so clients would need no key",
                          field="--api-key-env",
                          fix="give the variable's name, e.g. --api-key-env POLYRL_API_KEY (export it first), or "
                              "drop --api-key-env to serve without a key")
    # nan or -1 delayed nothing, without a word; inf made every delayed request an OverflowError (a 500)
    if not (math.isfinite(args.fault_delay_s) and args.fault_delay_s >= 0):
        raise ConfigError(f"must be a finite number of seconds >= 0, got {args.fault_delay_s}",
                          field="--fault-delay-s", fix="e.g. --fault-delay-s 2 (0: no delay)")
    # the HTTP fault control refuses these (``_count``); as flags, -1 died at the first request, -5 did nothing
    for flag, count in (("--fault-delay-first", args.fault_delay_first), ("--fault-503-first", args.fault_503_first),
                        ("--fault-die-after", args.fault_die_after)):
        if count is not None and count < 0:
            raise ConfigError(f"must be a count >= 0, got {count}", field=flag, fix=f"e.g. {flag} 2")
    if args.served_model_name is not None and not args.served_model_name.strip():
        # `--served-model-name "$NAME"` with NAME unset served as --model's name, without a word
        raise ConfigError(f"is blank ({args.served_model_name!r}), so no client could name the model",
                          field="--served-model-name",
                          fix="give the name clients send, e.g. --served-model-name tiny, or drop the flag to use --model's")
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(f"environment variable {args.api_key_env} is empty", field="--api-key-env",
                              fix=f"export {args.api_key_env}=<a key> or drop --api-key-env")
        if not (api_key.isascii() and api_key.isprintable() and api_key == api_key.strip()):
            # HTTP reads header bytes as Latin-1: a client sending "é" as UTF-8 (curl) never matched, and
            # httpx (OpenAI's client) cannot send it at all; every request was a 401 naming no cause
            raise ConfigError(f"the key in {args.api_key_env} holds a non-ASCII, control or surrounding space "
                              "character, which clients cannot send in an Authorization header as it is",
                              field="--api-key-env", fix=f"export {args.api_key_env}=<a key of printable ASCII "
                              "characters>, e.g. $(openssl rand -hex 24)")
    if args.threads is not None and not 1 <= args.threads <= 4096:  # 10**9 started, then the first request died
        raise ConfigError(f"must be between 1 and 4096, got {args.threads}", field="--threads",
                          fix="the CPU threads to compute with, e.g. --threads 4; leave it out for all cores")
    reg = get_registry()
    path = resolve_flag_model(reg, args.model)
    # the backend's and EngineConfig's words name model.path, EngineConfig.max_length...: not the flags
    with flag_errors_named("--backend", "--model", "--dtype", "--device", "--max-length", "--threads"):
        args.max_length = fitted_max_length(args.max_length, model_positions(path))
        limits = limits_from(args)
        engine = Engine(reg, args.backend, EngineConfig(model=path, role="generate", dtype=args.dtype,
                                                        device=args.device, threads=args.threads,
                                                        max_length=args.max_length))
    spec = WeightSpec.of(engine.export_weights()) if args.allow_weight_push else None
    faults = Faults(delay_s=args.fault_delay_s, delay_first=args.fault_delay_first, garbage=args.fault_garbage,
                    fail_503_first=args.fault_503_first, die_after=args.fault_die_after)
    try:
        return PolyrlServer((args.host, args.port), engine, model_name=args.served_model_name or args.model,
                            model_path=path, max_batch_size=args.max_batch_size, limits=limits,
                            api_key=api_key, faults=faults, allow_fault_control=args.allow_fault_control,
                            allow_weight_push=args.allow_weight_push, weight_push_token=token, weight_spec=spec)
    except OSError as exc:  # taken since check_address
        raise bind_error(args.host, args.port, exc) from None


def run(args: argparse.Namespace) -> int:
    """Load the model, bind, print the URL (``polyrl serve: listening on URL``), serve until signalled."""
    server = build_server(args)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving beyond this machine: anyone who can reach it can use the model",
                    host=args.host, api_key=bool(server.api_key))

    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        if stopping.is_set():  # asked twice: do not wait for the batch
            log.warning("stopping now, without finishing the running batch", signal=signal.Signals(signum).name)
            os._exit(128 + signum)
        stopping.set()
        log_from_signal_handler(log.info, "stopping: finishing the running batch, answering waiting requests 503 "
                                "(signal again to stop at once)", signal=signal.Signals(signum).name)
        server.scheduler.close()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"polyrl serve: listening on {server.url}/v1 (model {server.model_name!r})", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
        server.scheduler.close()  # a no-op after a signal; serve_forever also ends on an error
        while not server.scheduler.join(timeout=0.5):  # short waits: a second signal is handled
            pass
        server.drain(DRAIN_S)
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - `polyrl serve` is the entry
    parser = argparse.ArgumentParser(prog="polyrl serve")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
