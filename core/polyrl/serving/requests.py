"""Request bodies validated into sampling settings and prompts: every bad value is a 400 naming it.

Why so strict: ``temperature: NaN`` or ``1e308`` reaches the sampler as garbage probabilities, a
seed beyond 64 bits crashes the backend's RNG, and a silently clamped value answers a question
the client did not ask. Each check names the field and the accepted range.
"""

from __future__ import annotations

import json
from typing import Any

from polyrl.errors import ConfigError
from polyrl.serving.api_error import ApiError
from polyrl.serving.limits import SEED_LIMIT, Limits
from polyrl.text_validity import surrogate_at
from polyrl.types import Prompt, SamplingParams, TokenPrompt
from polyrl.validators import Rule, shown

TEMPERATURE_MAX = 10.0
TOP_K_MAX = 2 ** 31 - 1
REPETITION_PENALTY_MAX = 10.0


def _off(*values: Any) -> Any:
    """A check that a field is absent (null) or one of ``values``: what leaves the output unchanged."""
    return lambda v: v is None or any(v == x and type(v) is type(x) for x in values)


def _zero(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0)


#: OpenAI / vLLM fields that change what the client gets back and that polyrl serve does not
#: honour: set to anything but their "off" value they are refused (400 naming them), because an
#: answer that ignores them answers a question the client did not ask. -> (is off, how to fix)
UNHONOURED: dict[str, tuple[Any, str]] = {
    "logit_bias": (_off({}), "send no logit_bias"),
    "presence_penalty": (_zero, "send 0 or use repetition_penalty (vLLM's extension, supported)"),
    "frequency_penalty": (_zero, "send 0 or use repetition_penalty (vLLM's extension, supported)"),
    "min_tokens": (_zero, "send 0; ignore_eos = true samples to max_tokens"),
    "response_format": (lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text" and len(v) == 1),
                        "send no response_format (or {\"type\": \"text\"}): constrained output is not supported"),
    "tools": (_off([]), "describe the tools in the prompt: tool calling is not supported"),
    "functions": (_off([]), "describe the functions in the prompt: function calling is not supported"),
    "tool_choice": (_off("none", "auto"), "send no tool_choice"),
    "function_call": (_off("none", "auto"), "send no function_call"),
    "best_of": (_off(1), "send best_of = 1 (or none) and n for several completions"),
    "suffix": (_off(""), "send no suffix: insertion is not supported"),
    "echo": (_off(False), "send echo = false: the prompt is not returned"),
    "top_logprobs": (_zero, "send 0 (or none): only each sampled token's log-prob is computed"),
    # vLLM's extension: template variables such as enable_thinking; this server renders chats with
    # its model's template as it is
    "chat_template_kwargs": (_off({}), "send none, or render the chat yourself (the model's tokenizer, "
                                       "apply_chat_template(..., enable_thinking=False)) and send the token ids "
                                       "to /v1/completions"),
    # vLLM's other extensions that change the answer, each with the value that leaves it as served here
    "chat_template": (_off(""), "send none: chats are rendered with the model's own template"),
    "add_generation_prompt": (_off(True), "send true (or none), or render the chat yourself and send the token "
                                          "ids to /v1/completions"),
    "continue_final_message": (_off(False), "send false (or none), or render the chat yourself and send the token "
                                            "ids to /v1/completions"),
    "stop_token_ids": (_off([]), "send no stop_token_ids: only the model's EOS ends a completion early (or use "
                                 "stop strings)"),
    # the returned text is the decoded tokens, stop string included, so text, token ids and log-probs agree
    "include_stop_str_in_output": (_off(True), "send true (or none): the text always ends with the stop string "
                                               "that ended it"),
    "skip_special_tokens": (_off(True), "send true (or none): special tokens are left out of the text "
                                        "(return_token_ids gives every id)"),
    "prompt_logprobs": (_off(), "send none: only the sampled tokens' log-probs are computed"),
    "use_beam_search": (_off(False), "send false: beam search is not supported"),
    "allowed_token_ids": (_off(), "send none: constrained output is not supported"),
    "bad_words": (_off([]), "send none: constrained output is not supported"),
    "truncate_prompt_tokens": (_off(), "send none and a prompt within the context: prompts are never truncated"),
    **{key: (_off(), "send none: constrained output is not supported")
       for key in ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_whitespace_pattern",
                   "structured_outputs", "logits_processors")},
}


def refuse_unhonoured(body: dict[str, Any]) -> None:
    """A 400 naming the first field set to something polyrl serve would silently not do."""
    for key, (is_off, fix) in UNHONOURED.items():
        if key in body and not is_off(body[key]):
            raise ApiError(400, f"{key} = {shown(body[key], 60)} is not supported by polyrl serve; {fix}", key)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; NaN/Infinity literals, bad UTF-8 and deep nesting are 400s."""
    try:
        body = json.loads(raw or b"{}", parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if "is not JSON" in str(exc) else "not valid JSON"
        raise ApiError(400, f"the request body is {reason}; send a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _number(body: dict[str, Any], key: str, default: Any, rule: Rule) -> Any:
    """``body[key]`` checked by the config's own range rule (one kind of rule, one kind of message)."""
    value = body.get(key)
    if value is None:
        return default
    if rule.integer and isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON clients may send 5.0 for 5
    if not rule.accepts(value):
        raise ApiError(400, f"{key} must be {rule.describe()}, got {shown(value, 40)}", key)
    return int(value) if rule.integer else float(value)


def sampling(body: dict[str, Any], limits: Limits, default_max_tokens: int) -> SamplingParams:
    """OpenAI's sampling fields (plus vLLM's ``top_k`` and ``ignore_eos``) checked against ``limits``."""
    for flag in ("stream", "return_token_ids", "return_tokens_as_token_ids"):  # "no" or 0 would be read one way or the other
        value = body.get(flag)
        if value is not None and not isinstance(value, bool):
            raise ApiError(400, f"{flag} must be a JSON boolean (true or false), got {shown(value, 40)}", flag)
    if body.get("stream"):
        raise ApiError(400, "stream=true is not supported by polyrl serve; send stream=false", "stream")
    refuse_unhonoured(body)
    rule = Rule(integer=True, low=1, high=limits.max_tokens_limit)
    default = min(default_max_tokens, limits.max_tokens_limit)
    given = {key: _number(body, key, default, rule) for key in ("max_tokens", "max_completion_tokens")
             if body.get(key) is not None}  # both checked: a bad one beside a good one was ignored
    max_tokens = given.get("max_completion_tokens", given.get("max_tokens", default))
    stop = body.get("stop")
    if stop is None:
        stop = ()
    if isinstance(stop, str):  # "" included: it is refused below, not read as no stop (nor 0, false, {})
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, "stop must be a non-empty string or a list of them", "stop")
    if len(stop) > limits.max_stops:
        raise ApiError(400, f"stop has {len(stop)} strings; at most {limits.max_stops}", "stop")
    for s in stop:  # decoded text never holds a lone surrogate: such a stop was silently never matched
        _check_utf8(s, "stop")
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is None:  # absent or null, like every other optional field here
        ignore_eos = False
    if not isinstance(ignore_eos, bool):  # "false" or 0 would otherwise be read one way or the other
        raise ApiError(400, f"ignore_eos must be a JSON boolean (true or false), got {shown(ignore_eos, 40)}",
                       "ignore_eos")
    top_k = body.get("top_k")
    if top_k == -1:  # vLLM's "disabled"
        top_k = 0
    values = {
        "temperature": _number(body, "temperature", 1.0, Rule(integer=False, low=0, high=TEMPERATURE_MAX)),
        "top_p": _number(body, "top_p", 1.0, Rule(integer=False, low=0, high=1, low_open=True)),
        "top_k": _number({"top_k": top_k}, "top_k", 0, Rule(integer=True, low=0, high=TOP_K_MAX)),
        "n": _number(body, "n", 1, Rule(integer=True, low=1, high=limits.max_n)),
        "seed": _number(body, "seed", None, Rule(integer=True, low=0, high=SEED_LIMIT - 1)),
        # vLLM's extensions, done by every backend's sampler
        "min_p": _number(body, "min_p", 0.0, Rule(integer=False, low=0, high=1)),
        "repetition_penalty": _number(body, "repetition_penalty", 1.0,
                                      Rule(integer=False, low=0, high=REPETITION_PENALTY_MAX, low_open=True)),
    }
    try:
        return SamplingParams(max_new_tokens=max_tokens, stop=tuple(stop), ignore_eos=ignore_eos, **values)
    except ConfigError as exc:
        raise ApiError(400, str(exc), exc.field) from None


def chat_messages(body: dict[str, Any], limits: Limits) -> list[dict[str, str]]:
    """``messages`` as ``[{role, content}]`` with text content; their total text capped."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}", "messages")
    out, chars = [], 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, "each message needs a string role and a content", "messages")
        other = sorted(str(k) for k in m if k not in ("role", "content"))
        if other:  # dropped, a tool call read the same as an empty assistant turn
            raise ApiError(400, f"messages[{i}] has {', '.join(shown(k, 30) for k in other)}: polyrl serve reads a "
                           "message's role and content only (no tool calls, tool results by id or names)",
                           "messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(_text_part(part) for part in content)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(400, "message content must be a string or a list of text parts", "messages")
        chars += len(content) + len(m["role"])
        _check_utf8(m["role"], "messages")
        _check_utf8(content, "messages")
        out.append({"role": m["role"], "content": content})
    _check_chars(chars, "messages", limits)
    return out


def _text_part(part: Any) -> str:
    """One content part's text; any other kind (an image, audio, a bare value) is a 400, not an
    empty string the model would answer as if the part were not there."""
    if not isinstance(part, dict) or part.get("type", "text") != "text" or not isinstance(part.get("text"), str):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        raise ApiError(400, f"message content parts must be text parts ({{\"type\": \"text\", \"text\": "
                       f"...}}); got {shown(kind, 40)}: polyrl serve reads text only", "messages")
    return str(part["text"])


def chat_logprobs(body: dict[str, Any]) -> bool:
    """Chat's ``logprobs``: a JSON boolean (or null); "yes" or 1 would be read one way or the other."""
    value = body.get("logprobs")
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"logprobs must be a JSON boolean (or null), got {shown(value, 40)}", "logprobs")
    return bool(value)


def completion_logprobs(body: dict[str, Any]) -> bool:
    """``/v1/completions``' ``logprobs``: 0 gives the sampled tokens' log-probs; more asks for that
    many alternatives per token, which the generate contract does not compute (refused)."""
    value = body.get("logprobs")
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, int) or value != 0:
        raise ApiError(400, f"logprobs must be 0 (the sampled tokens' log-probs) or null, got "
                       f"{shown(value, 40)}: polyrl serve does not compute alternative tokens", "logprobs")
    return True


def completion_prompts(body: dict[str, Any], limits: Limits, vocab_size: int | None) -> list[Prompt]:
    """``prompt`` for ``/v1/completions``: a string, a list of strings, a list of token ids (one
    token-id prompt, as in OpenAI's and vLLM's API) or a list of such lists.

    Token ids become ``TokenPrompt``s (used verbatim, no template or BOS): how a multi-turn episode
    continues from the exact ids of its last turn. Each id must be an integer in ``[0,
    vocab_size)``: an id past the embedding table would crash the backend or read another row.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: Any = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, (int, float)) for t in prompt):
        prompts = [prompt]  # one token-id prompt (non-integers among them are refused below)
    else:
        prompts = prompt
    if not isinstance(prompts, list) or not prompts or not all(
            isinstance(p, str) or isinstance(p, list) for p in prompts):
        raise ApiError(400, "prompt must be a string, a list of strings, a list of token ids or a list "
                       "of token-id lists", "prompt")
    if len(prompts) > limits.max_prompts:
        raise ApiError(400, f"prompt lists {len(prompts)} prompts; at most {limits.max_prompts} per request "
                       "(polyrl serve --max-prompts)", "prompt")
    out: list[Prompt] = []
    for p in prompts:
        if isinstance(p, str):
            _check_chars(len(p), "prompt", limits)
            _check_utf8(p, "prompt")
            out.append(p)
        else:
            out.append(token_prompt(p, limits, vocab_size))
    return out


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def token_prompt(ids: list[Any], limits: Limits, vocab_size: int | None) -> TokenPrompt:
    """One token-id prompt, every id checked: a bad id is a 400 naming ``prompt``, never a 500."""
    if not ids:
        raise ApiError(400, "a token-id prompt needs at least one id, got []", "prompt")
    check_prompt_tokens(len(ids), "prompt", limits)  # before looking at each id: the list is bounded
    for position, value in enumerate(ids):
        if not _is_id(value):
            raise ApiError(400, f"token ids must be integers; prompt id {position} is "
                           f"{json.dumps(value)[:40]}", "prompt")
        if value < 0 or (vocab_size is not None and value >= vocab_size):
            accepted = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
            shown = str(value) if len(str(value)) <= 40 else str(value)[:20] + "..."
            raise ApiError(400, f"token ids must be in {accepted} (this model's vocabulary); prompt id "
                           f"{position} is {shown}", "prompt")
    return TokenPrompt(ids)


def _check_utf8(text: str, param: str) -> None:
    """400 for a lone surrogate (JSON's ``"\\ud800"`` escape decodes to one): UTF-8 cannot encode
    it, so no tokenizer reads it. Refused, not replaced with U+FFFD: polyrl's own clients encode
    prompts with the model's tokenizer, which fails on it too, so a replacement here would generate
    from a prompt no client wrote (the project's rule: ``polyrl.text_validity``)."""
    at = surrogate_at(text)
    if at is not None:
        raise ApiError(400, f"{param} holds a lone surrogate ({text[at]!r} at character {at}), "
                       "which is not valid UTF-8 text: send valid UTF-8 (decode bytes with errors='replace')",
                       param)


def _check_chars(chars: int, param: str, limits: Limits) -> None:
    if chars > limits.max_prompt_chars:
        raise ApiError(400, f"the prompt has {chars} characters; at most {limits.max_prompt_chars} "
                       "(polyrl serve --max-prompt-chars)", param, code="context_length_exceeded")


def check_budget(prompts: int, n: int, limits: Limits) -> None:
    """prompts x n completions, capped so one request cannot fill the server's memory."""
    if prompts * n > limits.max_completions:
        raise ApiError(400, f"{prompts} prompts x n={n} asks for {prompts * n} completions; at most "
                       f"{limits.max_completions} per request (polyrl serve --max-completions)", "n")


def check_prompt_tokens(tokens: int, param: str, limits: Limits) -> None:
    """The engines need room for at least one new token: prompt tokens < max_length."""
    if tokens >= limits.max_length:
        raise ApiError(400, f"the prompt has {tokens} tokens; this model's context is {limits.max_length} "
                       f"tokens (polyrl serve --max-length), so prompts must be shorter than that",
                       param, code="context_length_exceeded")
