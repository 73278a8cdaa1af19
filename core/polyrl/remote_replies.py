"""What a generation server's 200 reply must hold before the remote backend trains on it.

Why strict: every value here becomes training data. A float id truncated to an int, a bool read
as 0/1, a positive or NaN log-prob, an unknown ``finish_reason`` or one choice too many for a
prompt would each train the policy on something the server never sampled, silently. So a reply is
either exactly what the OpenAI completions format with ``return_token_ids`` says, or a ``BadReply``
naming the field, which the backend treats as a failed attempt on that server.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyrl.json_budget import BYTES_PER_VALUE, over_budget
from polyrl.types import Completion

#: a sampler's log-prob is <= 0; float32 rounding of a near-certain token may land a hair above
LOGPROB_TOLERANCE = 1e-4
FINISH_REASONS = ("stop", "length")
#: without the model's vocabulary size, the largest id that is at least a token id polyrl can hold
MAX_TOKEN_ID = 2**63 - 1
#: the largest finite float32, the type log-probs are kept as
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: JSON values an honest reply spends per token it may hold: a chat ``logprobs.content`` entry is
#: an object of four keys with a ``bytes`` list of the token's bytes (about 13 values and one per
#: byte), a completion's five parallel lists about 8
VALUES_PER_TOKEN = 64
#: the rest of a reply (id, usage, model, message, ...) whatever its length
REPLY_SLACK_VALUES = 4096
#: a logprobs entry's token as vLLM names it under ``return_tokens_as_token_ids``
_TOKEN_ID = re.compile(r"token_id:(\d{1,19})")


class BadReply(Exception):
    """A 200 reply that is not a usable completion response; the message names what was wrong."""


def reply_value_budget(n: int, max_tokens: int, prompt: Any) -> int:
    """The JSON values a reply to a request for ``n`` completions of at most ``max_tokens`` tokens
    of ``prompt`` (token ids, text or messages) can hold: each token's id, log-prob and logprobs
    entry, the prompt's ids once per choice and once more at the top (vLLM's chat reply puts them
    there), and the rest. A prompt the server tokenizes has at most one token per byte of its JSON."""
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        prompt_ids = len(prompt)
    else:
        prompt_ids = len(json.dumps(prompt))
    return (n + 1) * (max_tokens * VALUES_PER_TOKEN + prompt_ids) + REPLY_SLACK_VALUES


def json_body(raw: bytes, max_values: int | None = None, asked: str = "") -> Any:
    """The reply's JSON (a proxy's HTML page, or ``[[[[...`` past the parser's depth, is a BadReply).
    A key given twice in one object is a BadReply too: JSON leaves it undefined, Python keeps the
    last, and a proxy or another reader may keep the first, so two readers would train on
    different ``token_ids``. More than ``max_values`` values (``polyrl.json_budget``; ``asked``
    says what set that bound) is a BadReply before parsing: 64 MiB of ``{},`` parsed into 1.5 GB."""
    if max_values is not None:
        count = over_budget(raw, max_values)
        if count is not None:
            raise BadReply(f"the reply holds about {count} JSON values, more than the {max_values} that {asked or 'it'} "
                           f"can hold (parsed, it would take up to {count * BYTES_PER_VALUE >> 20} MiB)")
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        shown = raw[:80].decode("utf-8", "replace")
        raise BadReply(f"the reply is not JSON ({type(exc).__name__}): {shown!r}") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise BadReply(f"the reply gives the key {key!r} twice in one object (which one holds is undefined)")
        seen[key] = value
    return seen


class StaleWeights(BadReply):
    """A reply from other weights than the ones this client last pushed to that server."""


class ServerRestarted(StaleWeights):
    """A reply from another server process than the one the last push reached: it restarted (an
    OOM kill, a reboot) and is back on its initial weights, which pushing the last weights again
    mends; ``got`` is the reply's ``weights_id``."""

    def __init__(self, message: str, got: str) -> None:
        super().__init__(message)
        self.got = got


def weights_instance(weights_id: Any) -> str | None:
    """The server process part of a ``polyrl serve`` ``weights_id`` (``<instance>-<version>``), or
    None for anything else (no id, another server's value)."""
    if not isinstance(weights_id, str):
        return None
    instance, sep, version = weights_id.rpartition("-")
    return instance if sep and instance and version.isdigit() else None


def restarted(got: Any, pushed: str) -> bool:
    """Whether ``got`` comes from another process than the one that answered the push of
    ``pushed``: both well-formed ids, different instances. Same instance, other version: another
    client pushed to that process (pushing back would fight that trainer), not a restart."""
    was, now = weights_instance(pushed), weights_instance(got)
    return was is not None and now is not None and was != now


def check_weights(data: Any, pushed: str | None) -> None:
    """The reply must come from the weights last pushed to its server (``weights_id``, which ``polyrl
    serve`` puts in push answers and replies): a server that restarted is back on its initial weights
    (``ServerRestarted``), and one another client pushed to serves those (``StaleWeights``), so its
    samples would be off-policy, silently.
    ``pushed`` None: nothing to compare (no push yet, or a server that does not name its weights)."""
    if pushed is None:
        return
    got = data.get("weights_id") if isinstance(data, dict) else None
    if got == pushed:
        return
    if restarted(got, pushed):
        raise ServerRestarted(f"the reply came from weights {got!r} of another server process than the one "
                              f"this trainer pushed {pushed!r} to (the server restarted on its initial weights)",
                              str(got))
    raise StaleWeights(f"the reply came from weights {_kind(got)}, not {pushed!r} that this trainer pushed to "
                       "this server (another client pushed others to it)")


def reply_model(data: Any) -> str | None:
    """The model a reply says generated it (OpenAI's ``model``), or None when it names none (a
    server that leaves the field out gives nothing to compare)."""
    got = data.get("model") if isinstance(data, dict) else None
    return got if isinstance(got, str) else None


def reply_choices(data: Any, n: int) -> list[dict[str, Any]]:
    """Exactly ``n`` choice objects: more or fewer would credit samples to another prompt's group."""
    if not isinstance(data, dict):
        raise BadReply(f"the reply is a JSON {type(data).__name__}, not an object with `choices`")
    choices = data.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise BadReply(f"`choices` is {_kind(choices)}, not a list of objects")
    if len(choices) != n:
        raise BadReply(f"{len(choices)} choices for a request of n={n}")
    return choices


def token_ids(value: Any, field: str, vocab: int | None) -> np.ndarray:
    """A non-empty list of real ints (no bools, floats, strings or lists), each a row of the
    vocabulary (``[0, vocab)``; ``>= 0`` when its size is unknown)."""
    if value is None:
        raise BadReply(f"`{field}` is missing: polyrl trains on the generator's own ids and will not "
                       "re-tokenize text (use `polyrl serve`, or a vLLM recent enough for return_token_ids)")
    if not isinstance(value, list) or not value:
        raise BadReply(f"`{field}` is {_kind(value)}, not a non-empty list of token ids")
    for i, v in enumerate(value):
        if type(v) is not int:
            raise BadReply(f"`{field}`[{i}] is {_kind(v)}, not an integer token id")
        if v < 0 or v >= (vocab if vocab is not None else MAX_TOKEN_ID + 1):
            shown = v if abs(v) < 10**30 else f"{str(v)[:12]}... ({len(str(abs(v)))} digits)"
            raise BadReply(f"`{field}`[{i}] = {shown} is outside the model's vocabulary "
                           f"[0, {vocab if vocab is not None else 'vocab'})")
    return np.asarray(value, dtype=np.int64)


def logprobs(values: Any, field: str, count: int) -> np.ndarray:
    """``count`` numbers <= 0, finite as the float32 they are kept as (``LOGPROB_TOLERANCE`` above 0
    is float rounding, clipped to 0). Why float32: -1e300 is a finite float but -inf in float32,
    which the engine then blamed on the model's weights (stop, lower the lr) instead of failing over
    from the server that sent it; an int of 400 digits is no float at all (``math.isfinite`` raised
    an OverflowError naming no field, and the attempt was not retried)."""
    if not isinstance(values, list):
        raise BadReply(f"`{field}` is {_kind(values)}, not a list of log-probs")
    if len(values) != count:
        raise BadReply(f"{len(values)} log-probs in `{field}` for {count} tokens")
    for i, v in enumerate(values):
        if type(v) not in (int, float) or not _float32_finite(v) or v > LOGPROB_TOLERANCE:
            raise BadReply(f"`{field}`[{i}] is {_kind(v)}, not a finite (float32) log-prob <= 0")
    return np.minimum(np.asarray(values, dtype=np.float32), 0.0)


def _float32_finite(value: int | float) -> bool:
    """Whether ``value`` is a finite float32 (a huge int or float is not)."""
    try:
        return math.isfinite(value) and abs(float(value)) <= FLOAT32_MAX
    except OverflowError:
        return False


def prompt_ids_of(choice: dict[str, Any], reply: dict[str, Any], position: int) -> Any:
    """The choice's ``prompt_token_ids``, else the reply's: vLLM's completions reply (and polyrl
    serve's) puts them in each choice, its chat reply once beside ``choices``. Given both ways they
    must agree, or which prompt the completion continues is unknown."""
    own, top = choice.get("prompt_token_ids"), reply.get("prompt_token_ids")
    if own is None:
        return top
    if top is not None and top != own:
        raise BadReply(f"`prompt_token_ids` of choice {position} ({_ids(own)}) differ from the reply's ({_ids(top)})")
    return own


def _ids(value: Any) -> str:
    return f"{len(value)} ids" if isinstance(value, list) else _kind(value)


def completion(index: int, choice: dict[str, Any], chat: bool, vocab: int | None,
               decode: Callable[[Sequence[int]], str] | None, prompt_ids_given: Any = None) -> Completion:
    """One checked choice; its text is ``decode(ids)`` when the model's tokenizer is at hand, so a
    reward never scores text other than the ids the policy trains on. ``prompt_ids_given``: its
    ``prompt_token_ids`` as ``prompt_ids_of`` finds them (default: the choice's own)."""
    if prompt_ids_given is None:
        prompt_ids_given = choice.get("prompt_token_ids")
    prompt_ids = token_ids(prompt_ids_given, "prompt_token_ids", vocab)
    ids = token_ids(choice.get("token_ids"), "token_ids", vocab)
    raw_lp = choice.get("logprobs")
    if not isinstance(raw_lp, dict):
        raise BadReply(f"`logprobs` is {_kind(raw_lp)}, not an object")
    if chat:
        entries = raw_lp.get("content")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise BadReply(f"`logprobs.content` is {_kind(entries)}, not a list of objects")
        lps = logprobs([e.get("logprob") for e in entries], "logprobs.content[].logprob", len(ids))
        check_logprob_tokens([e.get("token") for e in entries], "logprobs.content[].token", ids)
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
    else:
        lps = logprobs(raw_lp.get("token_logprobs"), "logprobs.token_logprobs", len(ids))
        tokens = raw_lp.get("tokens")
        if isinstance(tokens, list):
            check_logprob_tokens(tokens, "logprobs.tokens", ids)
        text = choice.get("text")
    reason = choice.get("finish_reason")
    if not isinstance(reason, str) or reason not in FINISH_REASONS:
        raise BadReply(f"`finish_reason` is {_kind(reason)}, not one of {', '.join(FINISH_REASONS)}")
    if decode is not None:
        text = decode(ids.tolist())
    elif text is None:
        text = ""
    elif not isinstance(text, str):
        raise BadReply(f"the completion text is {_kind(text)}, not a string")
    return Completion(index, prompt_ids, ids, lps, text=text, finish_reason="stop" if reason == "stop" else "length")


def check_logprob_tokens(tokens: list[Any], field: str, ids: np.ndarray) -> None:
    """Each log-prob must be the sampled token's: where the server names the token of a log-prob
    by id (vLLM's ``token_id:N`` under ``return_tokens_as_token_ids``), it is ``token_ids``' at that
    position. A server whose log-probs are shifted by one, or are another sample's, fed the
    loss's ratio numbers that belong to no token trained on. A token named as text (a server
    without that option) is not compared: its text is no exact id."""
    for i, token in enumerate(tokens):
        named = _TOKEN_ID.fullmatch(token) if isinstance(token, str) else None
        if named is not None and (i >= len(ids) or int(named.group(1)) != ids[i]):
            said = f"`token_ids`[{i}] is {ids[i]}" if i < len(ids) else f"`token_ids` has only {len(ids)}"
            raise BadReply(f"`{field}`[{i}] is the log-prob of {token!r}, but {said}: the log-probs are not the "
                           "sampled tokens'")


def _kind(value: Any) -> str:
    """A value as an error shows it: its type and a short repr."""
    if value is None:
        return "null"
    shown = repr(value)
    return f"{type(value).__name__} {shown[:40]}{'...' if len(shown) > 40 else ''}"
