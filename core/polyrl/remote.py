"""Backend ``remote``: rollouts from one or more OpenAI-compatible servers, weights pushed each step.

    [backends]
    train = "torch"
    generate = "remote"
    [backends.options]
    servers = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]

Each prompt is one ``/v1/completions`` request with ``n = group_size``, ``logprobs`` and
``return_token_ids``: the token ids and sampler log-probs come from the server's generator itself,
never from re-tokenizing text. Text and chat prompts are encoded here with the model's own
tokenizer (``polyrl.remote_tokenizer``: the model folder's, text with its special tokens and chats
with its chat template, as the train backends encode them) and sent as OpenAI's token-id prompt,
like ``TokenPrompt``s; a token-id prompt must come back as the same ``prompt_token_ids`` (else a
PluginError: the server re-tokenized it), so the trainer trains on the prompt it encoded (the ids
the startup prompt-length check counted), and a multi-turn episode continues from the exact ids of
its last turn. A completion's text is the decode of its ids (the server's text is not scored).
Only without a tokenizer at the model path (an engine built by hand) does text go as text and a
chat to ``/v1/chat/completions``, for the server to tokenize, with a warning for each kind. Every
reply is checked (``polyrl.remote_replies``): its ``model``, where it names one, is the model asked
for (else the run stops: another model's ids and log-probs are no policy samples), no more JSON values
than ``n`` completions of ``max_tokens`` can need (counted before parsing), exactly ``n`` choices,
ids ints in the vocabulary, ``prompt_token_ids`` per choice or beside them (vLLM's chat reply),
log-probs finite and <= 0 and, where vLLM names their tokens by id (``return_tokens_as_token_ids``),
the ids', ``finish_reason`` stop or length, and, once weights were pushed to a
server that names them (``polyrl serve``'s ``weights_id``), from exactly those weights: a server
pushed to by another client fails the attempt instead of feeding the trainer off-policy samples; one
that restarted on its initial weights (another process id in ``weights_id``) is given the last
pushed weights again and asked once more (once per attempt), with a warning. Requests are spread
round-robin over the servers, ``max_concurrency`` at a time per server; a failed attempt (timeout,
connection error, HTTP 408/429/5xx, or a 200 reply that is not JSON, too large, or fails those
checks) is retried on the next server with exponential backoff and jitter, and a server that answered
429/503 with ``Retry-After`` is not asked again before then (at most ``timeout_s``). ``encode_chat`` answers None (no
engine-owned tokenizer for episodes): the core renders an episode's turns with the train engine's
and sends them as token-id prompts.

Weights: after each training step the trainer calls ``import_weights``; this backend writes them
once as safetensors under ``weights_dir`` and asks every server to load them (``POST
/polyrl/weights``), so the next rollouts come from the policy being trained. A push answered
408/429/5xx (a server busy between batches) is retried on that server with the same backoff; one
that still fails stops the run after the trainer checkpoints the steps it trained. Which servers can:

============================  ====================================================================
server                        weight push after each step
============================  ====================================================================
``polyrl serve``              yes (``--allow-weight-push`` with a token; same machine or a shared
                              filesystem)
vLLM                          not through this backend; set ``weight_push = false``: rollouts then
                              come from the weights the server started with (off-policy, and
                              uncorrected: the loss's ratio is to the trained policy's own
                              log-probs, which do not see the server's older weights)
``max serve``, mlx_lm.server  no; same as vLLM
============================  ====================================================================

Options (``[backends.options]``; every engine of the run sees them, only this backend reads them):
``servers`` (required, list of base URLs ending in ``/v1``), ``served_model`` (the model name the
servers serve; default: whatever the first server's ``/v1/models`` lists first), ``check_reply_model``
(true: a reply whose ``model`` is not exactly the name asked for stops the run; false only behind a
proxy that renames models), ``timeout_s`` (120: a whole reply,
checked as its bytes arrive), ``max_reply_bytes`` (64 MiB: n completions with ids and log-probs fit
many times over; a larger reply fails the attempt), ``retries`` (3, generation and weight pushes),
``backoff_s`` (0.5), ``max_concurrency`` (4 per server, >= 1; each server has its own connection pool), ``weight_push`` (true), ``weights_dir``
(default: a temporary folder, made at the first push and removed with the engine or at exit, so runs
do not fill /tmp with their last weights; a given folder is left in place), ``api_key_env``, and the weight-push shared secret that ``polyrl
serve --weight-push-token-file/--weight-push-token-env`` expects: ``weight_push_token_env`` (the
name of an environment variable holding it) or ``weight_push_token_file`` (a file holding it). It
goes in the ``X-Polyrl-Weight-Token`` header of weight pushes only, never to generation requests.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import numpy as np

from polyrl.backend_features import refuse_unsupported_sampling
from polyrl.errors import ConfigError, PluginError
from polyrl.shared_secret import read_shared_secret
from polyrl.hookspecs import hookimpl
from polyrl.http_limits import IDENTITY_ENCODING, CappedBody, ReplyTooLarge, refused_encoding, retry_after_s
from polyrl.redact import Redactor, url_secrets
from polyrl.logs import get_logger
from polyrl.json_budget import over_budget
from polyrl.validators import MAX_WAIT_S, fits_float, shown
from polyrl.remote_replies import (BadReply, ServerRestarted, StaleWeights, check_weights, completion, json_body,
                                   prompt_ids_of, reply_choices, reply_model, reply_value_budget, restarted,
                                   weights_instance)
from polyrl.remote_tokenizer import ModelTokenizer
from polyrl.types import (BackendSpec, Capabilities, Completion, EngineConfig, NamedWeights, Prompt,
                          SamplingParams, TokenPrompt)

if TYPE_CHECKING:
    import httpx

log = get_logger("polyrl.remote")
NAME = "remote"
#: optional ``SamplingParams`` features sent to the servers (``ignore_eos`` is a body field of
#: vLLM, SGLang, MAX serve and polyrl serve; OpenAI's API has no min_p or repetition penalty)
SAMPLING = ("ignore_eos",)
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_T = TypeVar("_T")
#: JSON values a reply other than a generation's may hold (``polyrl.json_budget``): a weight push's
#: answer or an error body is a few keys, a model list one small object per model
SMALL_REPLY_VALUES = 4096
MODEL_LIST_VALUES = 1 << 16
#: the one-time warning for each kind of prompt the servers tokenize because this side cannot
_UNENCODED = {
    "text": "no tokenizer at the model path: the servers tokenize text prompts and their prompt ids are "
            "trained on unchecked",
    "chat": "no chat template at the model path: the servers render chat prompts and their prompt ids are "
            "trained on unchecked",
}


@attrs.define(frozen=True)
class RemoteOptions:
    servers: tuple[str, ...]
    served_model: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 0.5
    max_concurrency: int = 4
    weight_push: bool = True
    weights_dir: str | None = None
    api_key_env: str | None = None
    weight_push_token_env: str | None = None
    weight_push_token_file: str | None = None
    max_reply_bytes: int = 64 << 20
    check_reply_model: bool = True


#: a 3xx is never followed (httpx's default, kept): it could take the prompts, the API key and the
#: weight-push token to another host; said so, instead of "check that the servers are up"
REDIRECT_FIX = ("set backends.options.servers to the URL the server redirects to (polyrl follows no redirects: "
                "one could send the prompts and the credentials to another host)")
WEIGHT_TOKEN_HEADER = "X-Polyrl-Weight-Token"  # what polyrl serve checks (polyrl.serving.weight_push)


def weight_push_token(options: RemoteOptions) -> str | None:
    """The shared secret for ``POST /polyrl/weights``, read once when the engine starts."""
    return read_shared_secret(options.weight_push_token_file, options.weight_push_token_env,
                              path_field="backends.options.weight_push_token_file",
                              env_field="backends.options.weight_push_token_env",
                              hint="the token given to polyrl serve")


def remote_options(options: Mapping[str, Any]) -> RemoteOptions:
    """Validate this backend's keys of ``[backends.options]`` (other backends' keys are ignored)."""
    servers = options.get("servers")
    if isinstance(servers, str):
        servers = [servers]
    if not servers or not isinstance(servers, (list, tuple)) or not all(
            isinstance(s, str) and s.startswith(("http://", "https://")) for s in servers):
        raise ConfigError("the remote backend needs a list of server URLs", field="backends.options.servers",
                          fix='e.g. servers = ["http://127.0.0.1:8001/v1"] (OpenAI-compatible base URLs)')
    urls = [s.rstrip("/") for s in servers]
    twice = [i for i, url in enumerate(urls) if url in urls[:i]]
    if twice:  # positions, not the URL: it may hold credentials
        raise ConfigError(f"servers[{twice[0]}] is servers[{urls.index(urls[twice[0]])}] again",
                          field="backends.options.servers",
                          fix="list each server once (a server listed twice takes every weight push twice, "
                          "and its replies to one of the URLs then read as another client's weights)")
    known = {f.name for f in attrs.fields(RemoteOptions)}
    values = {k: options[k] for k in known if k in options and k != "servers"}
    for key, example in (("timeout_s", 120), ("backoff_s", 0.5)):
        # true read as 1 s, and 1e308 (nan, inf from Python) overflowed a thread's join or sleep mid-run
        value = values.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not fits_float(value) \
                or not 0 < value <= MAX_WAIT_S:
            raise ConfigError(f"must be a number of seconds in (0, {MAX_WAIT_S:g}], got {shown(value)}",
                              field=f"backends.options.{key}", fix=f"e.g. {key} = {example}")
    for key in ("api_key_env", "weights_dir", "weight_push_token_env", "weight_push_token_file"):
        if key in values and not (values[key] is None or isinstance(values[key], str) and values[key]):
            raise ConfigError("must be a non-empty string", field=f"backends.options.{key}")
    if "weight_push" in values and not isinstance(values["weight_push"], bool):  # "no" would read as true
        raise ConfigError(f"must be true or false, got {values['weight_push']!r}", field="backends.options.weight_push",
                          fix="weight_push = false samples off-policy from servers that cannot take weights")
    if "check_reply_model" in values and not isinstance(values["check_reply_model"], bool):
        raise ConfigError(f"must be true or false, got {values['check_reply_model']!r}",
                          field="backends.options.check_reply_model",
                          fix="check_reply_model = false only behind a proxy that renames the model in its replies")
    if "served_model" in values and not (values["served_model"] is None or isinstance(values["served_model"], str)
                                         and values["served_model"]):
        raise ConfigError(f"must be a non-empty string, got {values['served_model']!r}",
                          field="backends.options.served_model",
                          fix="the model name the servers list under GET /v1/models")
    for key, least in (("retries", 0), ("max_concurrency", 1)):  # 0 connections: every request a PoolTimeout
        if key in values and (not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < least):
            raise ConfigError(f"must be an integer >= {least}, got {values[key]!r}", field=f"backends.options.{key}")
    size = values.get("max_reply_bytes", 1)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ConfigError("must be an integer > 0 (bytes)", field="backends.options.max_reply_bytes",
                          fix="e.g. max_reply_bytes = 67108864 (64 MiB)")
    return RemoteOptions(servers=tuple(s.rstrip("/") for s in servers), **values)


class RemoteEngine:
    """HTTP clients for the servers, the served model name, and the weight-push state."""

    def __init__(self, config: EngineConfig) -> None:
        import httpx

        self.config = config
        self.options = remote_options(config.options)
        headers = {}
        if self.options.api_key_env:
            key = os.environ.get(self.options.api_key_env)
            if not key:
                raise ConfigError(f"environment variable {self.options.api_key_env} is not set",
                                  field="backends.options.api_key_env", fix="export it before the run")
            headers["Authorization"] = f"Bearer {key}"
        headers.update(IDENTITY_ENCODING)  # the bytes max_reply_bytes counts are the bytes held
        limits = httpx.Limits(max_connections=self.options.max_concurrency * len(self.options.servers))
        #: one connection pool per server: an exchange given up on (a server dripping its headers) holds
        #: its connection until the server lets go, and in one shared pool a single such server took every
        #: connection, so the good servers' requests failed with PoolTimeout and the run stopped
        self.clients = [httpx.Client(timeout=self.options.timeout_s, headers=headers, limits=limits, trust_env=False)
                        for _ in self.options.servers]
        token = weight_push_token(self.options)
        #: what every error quoting a server masks: the API key, the push token, URL credentials
        self.redact = Redactor.of([headers.get("Authorization", "").removeprefix("Bearer "), token or "",
                                   *(s for server in self.options.servers for s in url_secrets(server))])
        self.tokenizer = ModelTokenizer(config.model, config.chat_template_kwargs)
        self.model = self.options.served_model or self._served_model(self.options.servers[0])
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._not_before: dict[int, float] = {}  # server index -> monotonic time its Retry-After ends
        self._temp_weights: tuple[str, weakref.finalize] | None = None  # folder we made, its remover
        self.weight_version = 0
        self._pushed: dict[int, str] = {}  # server index -> the weights_id its last push answered
        self._weights_file: str | None = None  # what the last push loaded, pushed again to a restarted server
        self._push_lock = threading.Lock()  # pushes and re-pushes: one at a time, _pushed read whole
        self._warned_unencoded: set[str] = set()  # prompt kinds sent for the servers to tokenize
        self._push_headers = {WEIGHT_TOKEN_HEADER: token} if token else {}

    def _served_model(self, server: str) -> str:
        try:  # bounded as a generation reply is: a server dripping its headers hung the start
            status, raw, _ = self._exchange(self.options.servers.index(server), f"{server}/models", None, method="GET")
            if status != 200:
                raise _AttemptFailed(f"HTTP {status}: {_shown(raw)}")
            return _first_model(json_body(raw, MODEL_LIST_VALUES, "a model list"))
        except Exception as exc:  # noqa: BLE001 - any failure means the same thing to the user
            raise ConfigError(self.redact(f"cannot list the models of {server}: {type(exc).__name__}: {exc}"),
                              field="backends.options.servers",
                              fix="start the server first (e.g. `polyrl serve --port 8001`) or fix the URL, "
                              "or set backends.options.served_model") from None

    # --- requests ------------------------------------------------------------------------------

    def _exchange(self, index: int, url: str, body: dict[str, Any] | None, headers: dict[str, str] | None = None,
                  method: str = "POST") -> tuple[int, bytes, float]:
        """Send ``body``: the status, the reply body (all of it within ``timeout_s`` and
        ``max_reply_bytes`` or the attempt fails) and the seconds a busy server's ``Retry-After``
        asked for (0 if none). Why a thread: httpx's timeout is per read, so a
        server dripping its status line or headers a byte a second held the step (and a stop
        request) forever; the body alone was checked against the deadline. The thread of an
        abandoned exchange ends when the server closes or httpx's own read timeout passes."""
        opts = self.options
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["reply"] = self._read_reply(self.clients[index], url, body, headers, method,
                                                 time.monotonic() + opts.timeout_s)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                done["error"] = exc

        worker = threading.Thread(target=run, name="polyrl-remote-exchange", daemon=True)
        worker.start()
        worker.join(opts.timeout_s + 1.0)
        if worker.is_alive():
            raise _AttemptFailed(f"no complete reply within timeout_s = {opts.timeout_s:g} s")
        if "error" in done:
            raise done["error"]
        return done["reply"]

    def _read_reply(self, client: httpx.Client, url: str, body: dict[str, Any] | None, headers: dict[str, str] | None, method: str,
                    deadline: float) -> tuple[int, bytes, float]:
        opts = self.options
        try:
            with client.stream(method, url, json=body, headers=headers) as response:
                refused = refused_encoding(response.headers)
                if refused:
                    raise _AttemptFailed(refused, COMPRESSED_FIX)
                reply = CappedBody(opts.max_reply_bytes, response.headers.get("content-length"))
                for chunk in response.iter_raw():  # the bytes as sent: nothing httpx would decode
                    reply.feed(chunk)
                    if time.monotonic() > deadline:
                        raise _AttemptFailed(f"the reply was not complete within timeout_s = {opts.timeout_s:g} s")
                wait = retry_after_s(response.headers, opts.timeout_s) if response.status_code in RETRY_STATUS else 0.0
                return response.status_code, reply.body(), wait
        except ReplyTooLarge as exc:
            raise _AttemptFailed(exc.describe("backends.options.max_reply_bytes"), TOO_LARGE_FIX) from None
        except _AttemptFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - httpx transport errors and timeouts
            raise _AttemptFailed(f"{type(exc).__name__}: {exc}") from None

    def _backoff(self, attempt: int, index: int) -> None:
        """Wait before attempt ``attempt`` on server ``index``: exponential backoff with jitter, and
        at least until the ``Retry-After`` that server last answered has passed."""
        delay = 0.0
        if attempt:
            base = self.options.backoff_s * 2 ** (attempt - 1)
            delay = base + random.uniform(0, base)
        with self._lock:
            not_before = self._not_before.get(index, 0.0)
        delay = max(delay, not_before - time.monotonic())
        if delay > 0:
            time.sleep(delay)

    def _note_retry_after(self, index: int, wait_s: float) -> None:
        """Remember that server ``index`` asked not to be asked again for ``wait_s`` seconds."""
        if wait_s > 0:
            with self._lock:
                self._not_before[index] = max(self._not_before.get(index, 0.0), time.monotonic() + wait_s)

    def post(self, path: str, body: dict[str, Any], first_server: int, parse: Callable[[Any], _T]) -> _T:
        """POST to one server, moving to the next on a failed attempt: a timeout, a connection
        error, HTTP 408/429/5xx, or a 200 whose body ``parse`` refuses (``BadReply``: a proxy's
        HTML page, a malformed or untrainable reply). What ``parse`` makes of the JSON."""
        with self._redacted():
            return self._post(path, body, first_server, parse)

    @contextlib.contextmanager
    def _redacted(self) -> Iterator[None]:
        """Errors quoting a server with the run's credentials masked: a server echoing the request
        headers in its error body printed the API key or the weight-push token in the error line."""
        try:
            yield
        except PluginError as exc:
            raise PluginError(self.redact(str(exc))) from None

    def _post(self, path: str, body: dict[str, Any], first_server: int, parse: Callable[[Any], _T]) -> _T:
        servers, last, failure, status = self.options.servers, "no attempt", None, 0
        for attempt in range(self.options.retries + 1):
            index = (first_server + attempt) % len(servers)
            server = servers[index]
            self._backoff(attempt, index)
            try:
                status, raw, data = self._attempt(index, f"{server}{path}", body)
                if status == 200:
                    return parse(data)
            except (_AttemptFailed, BadReply) as exc:
                last, failure, status = f"{server}: {exc}", exc, 0
                if attempt < self.options.retries:  # said as it happens: a failover was silent
                    log.warning("remote attempt failed; trying again", server=server,
                                error=self.redact(str(exc))[:300], attempt=attempt + 1)
                continue
            last, failure = f"{server}: HTTP {status}: {_shown(raw)}", None
            if status not in RETRY_STATUS:
                break
        raise PluginError(f"remote generation failed after {attempt + 1} attempts; last: {last}. "
                          f"Fix: {_fix_for(failure, status)}")

    def _attempt(self, index: int, url: str, body: dict[str, Any], heal: bool = True) -> tuple[int, bytes, Any]:
        """One attempt on server ``index``: its status, body, and (on a 200) the JSON, from the
        weights last pushed to it. A reply from a restarted server gets those weights pushed to it
        again and the request sent once more (``heal``), so a long run outlives an OOM kill or a
        reboot of a server; only once, so one that keeps restarting fails the attempt instead."""
        status, raw, wait = self._exchange(index, url, body)
        if status != 200:
            self._note_retry_after(index, wait)
            return status, raw, None
        n, max_tokens = body["n"], body["max_tokens"]
        data = json_body(raw, reply_value_budget(n, max_tokens, body.get("prompt", body.get("messages"))),
                         f"a reply of n = {n} completions of at most max_tokens = {max_tokens} tokens")
        self._check_model(index, data)
        try:
            check_weights(data, self._pushed.get(index))
        except ServerRestarted as exc:
            if not heal:
                raise
            if self._push_again(index, exc):
                return status, raw, data  # sent while the push ran, answered from the weights it pushed
            return self._attempt(index, url, body, heal=False)
        return status, raw, data

    def _check_model(self, index: int, data: Any) -> None:
        """A reply naming another model than the one asked for stops the run: its ids and log-probs
        come from a model other than the policy (a server of the list started on another model, one
        that ignores the request's name), and would be trained on as the policy's samples. Not a
        failed attempt that fails over: a misconfigured server among good ones would go unnoticed.
        A reply without ``model`` gives nothing to compare; one echoing the request's name (llama.cpp's
        server) passes whatever it serves, so this catches servers that say what they serve (vLLM,
        ``polyrl serve``, SGLang)."""
        got = reply_model(data)
        if not self.options.check_reply_model or got is None or got == self.model:
            return
        asked = ("backends.options.served_model" if self.options.served_model
                 else f"the first model {self.options.servers[0]}/models lists")
        raise PluginError(
            f"{self.options.servers[index]} answered a request for model {_name(self.model)} ({asked}) with a "
            f"reply from model {_name(got)}: its token ids and log-probs come from another model than the one "
            f"asked for, and would be trained on as the policy's. Fix: point backends.options.servers at servers "
            f"serving {_name(self.model)}; if {_name(got)} is the same model under another name (a vLLM alias), set "
            f"backends.options.served_model = {json.dumps(got[:200])}; behind a proxy that renames models, set "
            "backends.options.check_reply_model = false")

    def _push_again(self, index: int, restart: ServerRestarted) -> bool:
        """Push the last weights file again to server ``index``, which answered from another
        process (``restart``): once per restart, as requests on other threads that met the same
        restart find it pushed already. True when the reply already came from the weights pushed
        again (a request answered while another thread's push was recorded): no need to ask again.
        Failing to: ``ServerRestarted`` or ``_AttemptFailed``."""
        server = self.options.servers[index]
        with self._push_lock:
            pushed, path = self._pushed.get(index), self._weights_file
            if pushed is not None and restart.got == pushed:
                return True
            if pushed is None or not restarted(restart.got, pushed):
                return False  # pushed to this process already (another request's restart): just ask again
            if path is None or not os.path.exists(path):
                raise ServerRestarted(f"{restart}, and the weights file last pushed ({path}) is gone, so it cannot "
                                      "be pushed again", restart.got)
            log.warning("a server restarted on its initial weights: pushing the last weights to it again",
                        server=server, reply_weights_id=restart.got, pushed_weights_id=pushed, weights=path)
            try:
                answer = self.post_to(index, "/polyrl/weights", {"path": path}, headers=self._push_headers)
            except PluginError as exc:
                raise _AttemptFailed(f"{restart}; pushing the last weights to it again failed: {exc}") from None
            self._record_push(index, answer)
            return False

    def _refuse_one_process_twice(self) -> None:
        """Two URLs of ``servers`` reaching one ``polyrl serve`` process (the same URL twice, or
        ``localhost`` beside ``127.0.0.1``) stop the run at the push, naming both: the second push
        loaded the weights there again under a newer ``weights_id``, so every reply to the first URL
        read as another client's weights and failed its attempt (with ``retries = 0`` the run
        stopped, blaming another trainer)."""
        first: dict[str, int] = {}
        for index, weights_id in sorted(self._pushed.items()):
            instance = weights_instance(weights_id)
            if instance is None:
                continue
            if instance in first:
                servers = self.options.servers
                raise PluginError(self.redact(
                    f"{servers[first[instance]]} and {servers[index]} in backends.options.servers are one server "
                    f"process (their weight pushes were answered by the same instance, {instance!r}): each push "
                    "loads the weights there once per URL, and its replies to one URL read as another client's "
                    "weights. Fix: list each server once in backends.options.servers"))
            first[instance] = index

    def _record_push(self, index: int, answer: dict[str, Any]) -> None:
        """Remember which weights a push answer says server ``index`` now serves (polyrl serve names
        them; a server that does not is never compared)."""
        weights_id = answer.get("weights_id")
        if isinstance(weights_id, str) and weights_id == self._pushed.get(index):
            # every push loads anew and is named anew: the same name means the weights were not loaded,
            # and its replies would pass for the new policy's
            raise PluginError(self.redact(
                f"{self.options.servers[index]} answered the weight push with the weights_id of the previous "
                f"push ({weights_id!r}): it did not load the new weights. Fix: check the server's log (a failed "
                "load answered as a success), then resume the run with --resume"))
        if isinstance(weights_id, str):
            self._pushed[index] = weights_id
        else:
            self._pushed.pop(index, None)

    def generate_one(self, index: int, prompt: Prompt, sampling: SamplingParams) -> list[Completion]:
        refuse_unsupported_sampling(sampling, "remote", SAMPLING)  # the OpenAI-style API has no min_p
        body: dict[str, Any] = {
            "model": self.model, "n": sampling.n, "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "return_token_ids": True,
            # vLLM then names each log-prob's token by id, which polyrl.remote_replies checks against the ids
            "return_tokens_as_token_ids": True,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.ignore_eos:  # vLLM's, SGLang's, MAX serve's and polyrl serve's extension field
            body["ignore_eos"] = True
        if sampling.seed is not None:
            body["seed"] = int(sampling.seed) + index  # distinct per prompt, same on every server
        chat = not isinstance(prompt, (str, TokenPrompt))
        if not isinstance(prompt, (str, TokenPrompt)):
            body.update(messages=list(prompt), logprobs=True)
            if self.config.chat_template_kwargs:  # vLLM's extension field: the server renders the template
                body["chat_template_kwargs"] = dict(self.config.chat_template_kwargs)
        elif isinstance(prompt, TokenPrompt):
            body.update(prompt=[int(t) for t in prompt.ids], logprobs=0)  # OpenAI's token-id prompt
        else:
            body.update(prompt=prompt, logprobs=0)
        with self._lock:
            first = next(self._next) % len(self.options.servers)
        tok = self.tokenizer

        def parse(data: Any) -> list[Completion]:
            out = [completion(index, c, chat, tok.vocab, tok.decode if tok.can_decode else None, prompt_ids_of(c, data, i))
                   for i, c in enumerate(reply_choices(data, sampling.n))]
            longest = max((len(c.completion_ids) for c in out), default=0)
            if longest > sampling.max_new_tokens:  # it was trained on (5000 tokens for max_tokens = 4)
                raise BadReply(f"a completion of {longest} tokens answers max_tokens = {sampling.max_new_tokens}")
            if isinstance(prompt, TokenPrompt):
                for c in out:
                    check_verbatim(prompt, c)
            return out

        return self.post("/chat/completions" if chat else "/completions", body, first, parse)

    def rendered(self, prompts: Sequence[Prompt]) -> list[Prompt]:
        """Text and chats encoded with the model's tokenizer (and chat template) into token-id
        prompts, as the train backends encode them (see ``polyrl.remote_tokenizer``); what it
        cannot encode here goes to the servers to tokenize, unchecked, said once per kind."""
        tok = self.tokenizer
        out: list[Prompt] = []
        for p in prompts:
            if isinstance(p, TokenPrompt):
                out.append(p)
            elif isinstance(p, str):
                out.append(TokenPrompt(tok.encode_text(p)) if tok.can_encode else self._unencoded(p, "text"))
            else:
                out.append(TokenPrompt(tok.render(p)) if tok.can_render else self._unencoded(p, "chat"))
        return out

    def _unencoded(self, prompt: Prompt, kind: str) -> Prompt:
        """``prompt`` as given, for the servers to tokenize; the first one of its ``kind`` warns."""
        if kind not in self._warned_unencoded:
            self._warned_unencoded.add(kind)
            log.warning(_UNENCODED[kind], model=self.config.model,
                        fix="give the engine the model's HF folder (the trainer does)")
        return prompt

    def push_weights(self, weights: NamedWeights) -> float:
        """Write the weights once, have every server load them; seconds taken."""
        from safetensors.numpy import save_file

        t0 = time.perf_counter()
        self.weight_version += 1
        folder = self.weights_dir()
        path = os.path.join(folder, f"policy-{self.weight_version:08d}.safetensors")
        tmp = path + ".tmp"
        save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, tmp)
        os.replace(tmp, path)
        with self._push_lock:
            self._weights_file = path
            for i in range(len(self.options.servers)):
                self._record_push(i, self.post_to(i, "/polyrl/weights", {"path": path}, headers=self._push_headers))
            self._refuse_one_process_twice()
        previous = os.path.join(folder, f"policy-{self.weight_version - 1:08d}.safetensors")
        if os.path.exists(previous):
            os.remove(previous)
        seconds = time.perf_counter() - t0
        log.info("weights pushed", servers=len(self.options.servers), version=self.weight_version,
                 seconds=round(seconds, 3))
        return seconds

    def weights_dir(self) -> str:
        """Where pushed weights are written: ``weights_dir`` as given, else a temporary folder made on
        first use and removed when the engine goes (or the process exits)."""
        if self.options.weights_dir:
            return self.options.weights_dir
        if self._temp_weights is None or not self._temp_weights[1].alive:
            folder = tempfile.mkdtemp(prefix="polyrl-weights-")
            self._temp_weights = folder, weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        return self._temp_weights[0]

    def close(self) -> None:
        """Remove the temporary weights folder now (a given ``weights_dir`` is left in place)."""
        if self._temp_weights is not None:
            self._temp_weights[1]()

    def post_to(self, server_index: int, path: str, body: dict[str, Any],
                headers: dict[str, str] | None = None) -> dict[str, Any]:
        """POST a server-root ``path`` (e.g. ``/polyrl/weights``, beside ``/v1``) to exactly this
        server: weights must reach every one, so there is no failing over, but a busy server
        (timeout, HTTP 408/429/5xx) is retried with the generation requests' backoff."""
        with self._redacted():
            return self._post_to(server_index, path, body, headers)

    def _post_to(self, server_index: int, path: str, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
        server = self.options.servers[server_index]
        root = server[: -len("/v1")] if server.endswith("/v1") else server
        last = "no attempt"
        for attempt in range(self.options.retries + 1):
            self._backoff(attempt, server_index)
            try:
                status, raw, wait = self._exchange(server_index, f"{root}{path}", body, headers)
            except _AttemptFailed as exc:
                last = str(exc)
                continue
            self._note_retry_after(server_index, wait)
            if status == 200:
                try:
                    data = json_body(raw, SMALL_REPLY_VALUES, "an answer to a weight push")
                except BadReply:
                    data = None
                if not isinstance(data, dict):
                    raise PluginError(f"{server} answered {path} with HTTP 200 but not a JSON object: "
                                      f"{_shown(raw)!r}. Fix: point backends.options.servers at `polyrl serve` "
                                      "(it takes weight pushes), or set backends.options.weight_push = false")
                return data
            if status in (401, 403) and _error_code(raw) in ("missing_token", "invalid_token"):
                raise PluginError(f"{server} refused the weight push: HTTP {status}: "
                                  f"{_shown(raw)}. Fix: set backends.options.weight_push_token_env (or "
                                  "weight_push_token_file) to the token polyrl serve was started with")
            last = f"HTTP {status}: {_shown(raw)}"
            if 300 <= status < 400:
                raise PluginError(f"{server} redirected {path}: {last}. Fix: {REDIRECT_FIX}")
            if status not in RETRY_STATUS:
                raise PluginError(f"{server} refused {path}: {last}. "
                                  "Fix: start `polyrl serve` with --allow-weight-push and a token "
                                  "(--weight-push-token-file), or set "
                                  "backends.options.weight_push = false (rollouts then go off-policy)")
        raise PluginError(f"{server} was unavailable for {path} in {self.options.retries + 1} attempts; last: "
                          f"{last}. Fix: check that the server is up and not overloaded (raise "
                          "backends.options.retries or backoff_s to wait longer), then resume the run with --resume")


class _AttemptFailed(Exception):
    """One request failed in a way the next attempt may not: a timeout, a connection error, too big a reply.
    ``fix``: what to do when it failed every attempt, where "check that the servers are up" is no help."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


#: the fixes of a reply refused for its size or its encoding (the servers answered: they are up)
TOO_LARGE_FIX = ("raise backends.options.max_reply_bytes if n completions of max_new_tokens tokens with their "
                 "log-probs are that large, else check what the server (or a proxy before it) sends")
COMPRESSED_FIX = ("have the server (or the proxy before it) send replies uncompressed: it ignored "
                  "Accept-Encoding: identity")


def _fix_for(failure: Exception | None, status: int = 0) -> str:
    """The fix a generation request that failed every attempt names, by what failed the last one
    (``status``: the HTTP status of its reply, 0 for none)."""
    if 300 <= status < 400:
        return REDIRECT_FIX
    if status == 404:  # vLLM and polyrl serve answer a model they do not serve so
        return ("set backends.options.served_model to the model every server in backends.options.servers "
                "serves (GET /v1/models lists it), or point them at servers of that model")
    if isinstance(failure, ServerRestarted):
        return ("find out why the server restarted (its log: out of memory?), then resume with --resume (the run "
                "pushes its weights to every server when it starts)")
    if isinstance(failure, StaleWeights):
        return ("give each trainer servers of its own, then resume with --resume (the run pushes its weights to "
                "every server when it starts)")
    if isinstance(failure, BadReply):
        return ("use `polyrl serve`, or a server whose replies follow OpenAI's completions format with "
                "return_token_ids (vLLM)")
    if isinstance(failure, _AttemptFailed) and failure.fix:
        return failure.fix
    return "check that the servers in backends.options.servers are up"


def _first_model(data: Any) -> str:
    """The first model id of a ``GET /v1/models`` reply. Why checked: ``str()`` of whatever stood
    there (null, 5, an object) became the model every request asked for, and each reply naming
    the real model then stopped the run as "from another model"; an empty list was an IndexError."""
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise BadReply(f"`data` is {shown(models, 40)}, not a non-empty list of models")
    first = models[0].get("id") if isinstance(models[0], dict) else None
    if not isinstance(first, str) or not first.strip():
        raise BadReply(f"`data[0].id` is {shown(first, 40)}, not a model name")
    return first


def _name(model: str) -> str:
    """A model name as an error quotes it (a hostile server's may be anything, of any length)."""
    return repr(model[:200] + ("..." if len(model) > 200 else ""))


def _shown(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace")


def _error_code(raw: bytes) -> str | None:
    if over_budget(raw, SMALL_REPLY_VALUES) is not None:  # no OpenAI error body: not parsed into GBs
        return None
    try:
        code = json.loads(raw)["error"]["code"]
    except Exception:  # noqa: BLE001 - not the OpenAI error shape
        return None
    return code if isinstance(code, str) else None
def check_verbatim(prompt: TokenPrompt, completion: Completion) -> None:
    """The server must have generated from exactly the ids sent: a server that decoded them and
    tokenized the text again (or added a BOS) continues a different sequence than the episode's."""
    if np.array_equal(completion.prompt_ids, prompt.ids):
        return
    got = completion.prompt_ids
    at = next((i for i, (a, b) in enumerate(zip(got, prompt.ids)) if a != b), min(len(got), len(prompt.ids)))
    raise PluginError(f"the server answered a token-id prompt of {len(prompt.ids)} ids with prompt_token_ids of "
                      f"{len(got)} ids, differing from position {at}: it re-tokenized the prompt (or added a "
                      "BOS) instead of using the ids verbatim. Fix: use `polyrl serve` or a server that takes "
                      "token-id prompts verbatim (vLLM does)")


# --- hooks ------------------------------------------------------------------------------------------


@hookimpl
def polyrl_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=NAME, load=RemoteEngine, distribution="polyrl",
        summary="rollouts from OpenAI-compatible servers (polyrl serve, vLLM, max serve), load-balanced",
        capabilities=Capabilities(generate=True, logprobs=False, train_step=False, weight_import=True,
                                  concurrent_generate=True, token_prompts=True, sampling=SAMPLING),
        version="1", probe=_probe,
        install_hint="pip install httpx safetensors (core dependencies)",
        options=tuple(f.name for f in attrs.fields(RemoteOptions)),
    ))


def _probe() -> str | None:
    """Why the backend cannot run here, or None (its HTTP and weight-file libraries)."""
    import importlib.util

    missing = [m for m in ("httpx", "safetensors") if importlib.util.find_spec(m) is None]
    return f"missing {', '.join(missing)}" if missing else None


@hookimpl
def generate(engine: Any, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion] | None:
    if not isinstance(engine, RemoteEngine):
        return None
    prompts = engine.rendered(prompts)
    workers = engine.options.max_concurrency * len(engine.options.servers)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(prompts)))) as pool:
        parts = list(pool.map(lambda ip: engine.generate_one(ip[0], ip[1], sampling), enumerate(prompts)))
    return [c for part in parts for c in part]


@hookimpl
def encode_chat(engine: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                add_generation_prompt: bool) -> np.ndarray | None:
    """None: a remote server's tokenizer is out of reach, so the core renders chats with the train
    engine's tokenizer (the same model's) and sends the ids as token-id prompts."""
    return None


@hookimpl
def import_weights(engine: Any, weights: NamedWeights) -> bool | None:
    if not isinstance(engine, RemoteEngine):
        return None
    if engine.options.weight_push:
        engine.push_weights(weights)
    return True
