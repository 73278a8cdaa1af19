"""The token ids the chat template inserts between an episode's sampled turns.

Why a module of its own: this is where polyrl differs from peers that re-render the whole
conversation as text each turn. Nothing sampled is ever re-encoded here; only the template's own
glue (the rest of the assistant turn's end marker, the tool/observation messages, the next
``assistant`` header) is tokenized. The glue is read off renderings of the conversation with
stand-in assistant text: what follows the stand-in is the same for any text, so it never depends
on what the model wrote. Only what *follows* the assistant's turn is taken, so a template may
render earlier turns differently once more messages follow them (Phi-3 ends a conversation with
its EOS, Qwen3 shows an empty ``<think>`` block on the last assistant turn only): the sampled ids
stay as sampled either way.

A template that renders an assistant message with ``tool_calls`` from the calls alone, never its
text (Llama 3.1-3.3), is read the same way with stand-in call *arguments* instead: the sampled ids
are the call, and the glue is what the template writes after the rendered calls.

What stand-in text cannot show is a template that leaves part of an earlier turn out depending on
what it says: Qwen3's drops an assistant turn's ``<think>`` block once a new user query follows it.
An episode continues from the sampled ids, reasoning kept, so its later turns would be sampled and
trained on a context the template never shows the model; ``drops_reasoning`` asks the template
with two reasoning stand-ins, and the runner warns of such a setup at startup (``check_reasoning_kept``).
So with a template whose generation prompt closes the reasoning itself (Qwen3 with ``enable_thinking
= false``: an empty ``<think></think>`` block) but which writes earlier turns without that block:
the episode keeps it before each turn, the template never shows it there (``opens_turns_as_prompted``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from polyrl.agents.spec import plain_text
from polyrl.errors import ConfigError, OutOfMemory, TemplateRefused

if TYPE_CHECKING:
    from polyrl.backend_kit.eos_rest import EosRest


class RenderError(ConfigError):
    """The chat template raised on a conversation: a config error on an episode's first prompt,
    an ended episode after that (the conversation's content, not the setup, may be at fault)."""


#: ``encode_chat(messages, tools, add_generation_prompt) -> ids`` (the ``encode_chat`` hook).
EncodeChat = Callable[[Sequence[Mapping[str, Any]], "Sequence[Mapping[str, Any]] | None", bool], np.ndarray]

_PROBE_A, _PROBE_B = "a", "b c d"
#: two assistant turns that differ only inside their reasoning: a template that renders them alike
#: once more messages follow leaves an earlier turn's reasoning out
_REASONING_A, _REASONING_B = "<think>\na\n</think>\n\nb", "<think>\nc d\n</think>\n\nb"
_FIX = ("use a model whose chat template renders tool/observation messages after assistant turns, "
        "or an environment that answers with 'user' messages")


def _common_suffix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return a[len(a) - n:] if n else a[:0]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _find(ids: np.ndarray, part: np.ndarray) -> int:
    """The first index of ``part`` in ``ids``, or -1."""
    for i in range(len(ids) - len(part) + 1):
        if np.array_equal(ids[i:i + len(part)], part):
            return i
    return -1


def _stand_in_calls(assistant: Mapping[str, Any]) -> dict[str, Any]:
    """``assistant`` with each tool call's arguments (the model's text) replaced by none; names
    and ids are kept, since templates match tool results against them."""
    calls = []
    for call in assistant.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            empty = "{}" if isinstance(function.get("arguments"), str) else {}
            call = {**call, "function": {**function, "arguments": empty}}
        calls.append(call)
    return {**assistant, "tool_calls": calls}


def _probe_calls(assistant: Mapping[str, Any], text: str) -> dict[str, Any]:
    """``assistant`` with stand-in text and each tool call's arguments replaced by one stand-in
    argument holding ``text`` (names and ids kept): for a template that renders the calls only,
    two of these differ exactly where the calls' arguments are written."""
    calls = []
    for call in assistant.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            call = {**call, "function": {**function, "arguments": {"value": text}}}
        calls.append(call)
    return {"role": "assistant", "content": _PROBE_A, "tool_calls": calls}


def _stand_in(text: str, assistant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An assistant message with stand-in text; the real one's tool calls are kept, since some
    templates check tool results against them."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if assistant is not None and assistant.get("tool_calls"):
        message["tool_calls"] = assistant["tool_calls"]
    return message


def model_text_left_out(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each assistant message's text replaced by stand-in text (its calls kept):
    whether a template refuses a conversation for what the model wrote, or for the rest of it."""
    return [_stand_in(_PROBE_A, m) if m.get("role") == "assistant" else dict(m) for m in messages]


def content_left_out(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each one's text replaced by stand-in text (roles, ids and names kept):
    whether a template refuses them for what they say, or for what they are."""
    return [{**m, "content": _PROBE_A} for m in messages]


class ChatGlue:
    """Computes inserted segments for one model's chat template (and one tool list)."""

    def __init__(self, encode_chat: EncodeChat, eos_ids: Collection[int] = (), eos_rest: EosRest | None = None) -> None:
        self._encode = encode_chat
        #: the generator's end-of-sequence ids: one the model stopped on stands for the template's
        #: own end token in the turn's end marker (``_rest_of``)
        self._eos_ids = frozenset(int(i) for i in eos_ids)
        #: the tokenizer's word on an end marker whose one token's text opens with the EOS's
        #: (``<|im_end|>\n`` added as one token: ``polyrl.backend_kit.eos_rest``); None: not asked
        self._eos_rest = eos_rest
        self._turn_end: np.ndarray | None = None
        self._renders_role: dict[str, bool] = {}

    def encode(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool,
               tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        try:  # plain str only: a str subclass's own `+` would rewrite the template's strings
            ids = self._encode([plain_text(m) for m in messages], list(tools) if tools else None,
                               add_generation_prompt)
        except TemplateRefused as exc:  # past a rendering bound: an environment's megabytes, most likely
            raise RenderError(f"the chat template cannot render this conversation within polyrl's bounds on a "
                              f"rendering ({exc.reason})", field="environment",
                              fix="keep the environment's messages short; if short conversations are refused "
                                  "too, use a model folder whose chat template is a real one") from None
        except (ConfigError, OutOfMemory):  # OutOfMemory: the process's memory, not this conversation, ran short
            raise
        except MemoryError:  # an encoder that raises it as it is (the engines' say OutOfMemory)
            raise OutOfMemory(f"a conversation ({len(messages)} message(s)) was encoded with the chat template") from None
        except Exception as exc:  # a template that cannot render a role (e.g. no "tool" role)
            roles = sorted({str(m.get("role")) for m in messages})
            raise RenderError(
                f"the model's chat template cannot render this conversation (roles {', '.join(roles)}): "
                f"{type(exc).__name__}: {exc}", field="environment", fix=_FIX) from exc
        return np.asarray(ids, dtype=np.int64).reshape(-1)

    def renders_tool_results(self, tools: Sequence[Mapping[str, Any]] | None, role: str,
                             as_role: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> str | None:
        """Why this template cannot show a tool's result as ``role`` messages after an assistant
        turn with a call (``as_role`` turns the ``tool`` answers into what is rendered), or None
        when it can: the result's text must change the rendering, without an error."""
        name = str(((tools or [{}])[0].get("function") or {}).get("name") or "tool")
        call = {"id": "call00000", "type": "function", "function": {"name": name, "arguments": {}}}
        context: list[dict[str, Any]] = [{"role": "user", "content": _PROBE_A},
                                         {"role": "assistant", "content": _PROBE_A, "tool_calls": [call]}]
        try:
            a, b = (self.encode([*context, *as_role([{"role": "tool", "name": name, "content": text,
                                                       "tool_call_id": "call00000"}])], True, tools)
                    for text in (_PROBE_A, _PROBE_B))
        except RenderError as exc:
            cause = exc.__cause__
            return f"it raised {type(cause).__name__}: {cause}" if cause is not None else exc.message
        if np.array_equal(a, b):
            return f"it drops {role!r} messages"
        return None

    def drops_reasoning(self, follow: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                        calls: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Whether the template leaves an assistant turn's ``<think>`` block out of the conversation
        once ``follow`` (what an episode inserts: an observation, tool results) comes after it; the
        turn makes ``calls`` (those ``follow`` answers). Only a drop that hangs on the text counts:
        a template that writes no text of a turn with calls (Llama 3.x writes the call alone, and
        the sampled ids are the call) leaves plain text out too. A template that refuses the probe
        is taken to keep it (refusing is not dropping; the episode's own rendering reports it)."""
        context: list[dict[str, Any]] = [{"role": "user", "content": _PROBE_A}]
        turn: dict[str, Any] = {"role": "assistant"}
        if calls:
            turn["tool_calls"] = [dict(c) for c in calls]

        def same(texts: tuple[str, str]) -> bool:
            a, b = (self.encode([*context, {**turn, "content": text}, *follow], True, tools) for text in texts)
            return bool(np.array_equal(a, b))

        try:
            return same((_REASONING_A, _REASONING_B)) and not same((_PROBE_A, _PROBE_B))
        except RenderError:
            return False

    def opens_turns_as_prompted(self, follow: Sequence[Mapping[str, Any]],
                                tools: Sequence[Mapping[str, Any]] | None = None,
                                calls: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Whether the template writes an earlier assistant turn (making ``calls``) opening with the
        generation prompt it was sampled after, once ``follow`` comes after it: the episode's
        context holds that prompt's ids before the turn's sampled ids. Qwen3's with ``enable_thinking
        = false`` does not: its prompt ends with an empty ``<think></think>`` block that it writes
        on the conversation's last assistant turn alone. A template that refuses the probe is taken
        to (refusing is not rewriting; the episode's own rendering reports it).

        Asked with a stand-in text opening with a space too: a GPT-2-style pre-tokenizer splits a
        prompt's closing ``\\n\\n`` in two before a letter (not before a space), which is no block
        left out; a template that leaves the block out matches with neither."""
        context: list[dict[str, Any]] = [{"role": "user", "content": _PROBE_A}]
        turn: dict[str, Any] = {"role": "assistant"}
        if calls:
            turn["tool_calls"] = [dict(c) for c in calls]
        try:
            prompted = self.encode(context, True, tools)
            for text in (" " + _PROBE_B, _PROBE_B):
                later = self.encode([*context, {**turn, "content": text}, *follow], True, tools)
                if np.array_equal(later[:len(prompted)], prompted):
                    return True
        except RenderError:
            return True
        return False

    def prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """The first prompt's ids: the messages (and tools) and a generation prompt."""
        return self.encode(messages, True, tools)

    def _after(self, context: Sequence[Mapping[str, Any]], text: str, assistant: Mapping[str, Any] | None,
               new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> np.ndarray:
        return self.encode([*context, _stand_in(text, assistant), *new_messages], True, tools)

    def _follows(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any] | None,
                 new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> np.ndarray:
        """What the template writes after the assistant message's text, up to the next generation
        prompt: the common tail of two renderings that differ only by the stand-in text."""
        return self._follows_in(context, assistant, new_messages, tools)[0]

    def _follows_in(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any] | None,
                    new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """``_follows``, with the whole rendering it is the tail of and the stand-in assistant
        message rendered there."""
        form = _stand_in(_PROBE_A, assistant)
        a = self._after(context, _PROBE_A, assistant, new_messages, tools)
        b = self._after(context, _PROBE_B, assistant, new_messages, tools)
        if np.array_equal(a, b) and assistant is not None and assistant.get("tool_calls"):
            # the text of a message with calls is not rendered (Llama 3.x): what follows the calls
            form = _probe_calls(assistant, _PROBE_A)
            a, b = (self.encode([*context, _probe_calls(assistant, text), *new_messages], True, tools)
                    for text in (_PROBE_A, _PROBE_B))
        if np.array_equal(a, b):
            raise RenderError("the model's chat template does not render the assistant's text, so the "
                              "episode's turns cannot be joined", field="environment", fix=_FIX)
        return _common_suffix(a, b), a, form

    def _messages_from(self, context: Sequence[Mapping[str, Any]], form: Mapping[str, Any],
                       new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                       whole: np.ndarray) -> int:
        """How many tokens of ``whole`` (``context``, the assistant message ``form`` and
        ``new_messages`` rendered) come before the first new message's text: past it, nothing is
        the assistant turn's. Read off two renderings whose new messages hold other stand-in texts."""
        x, y = (self.encode([*context, form, *[{**m, "content": text} for m in new_messages]], True, tools)
                for text in (_PROBE_A, _PROBE_B))
        return min(len(_common_prefix(x, y)), len(_common_prefix(whole, x)))

    def turn_end(self, context: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """What the template writes after an assistant message's content mid-conversation (e.g.
        ``<|im_end|>\\n``): the part that an assistant turn ending the conversation and one
        followed by a user message share (Phi-3 writes its EOS only after the last one)."""
        if self._turn_end is None:
            followed = self._follows(context, None, [{"role": "user", "content": _PROBE_A}], tools)
            last = _common_suffix(*(self.encode([*context, _stand_in(text)], False, tools)
                                    for text in (_PROBE_A, _PROBE_B)))
            self._turn_end = _common_prefix(followed, last)
        return self._turn_end

    def _check_roles(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any],
                     new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> None:
        """A template that drops a role's messages (Phi-3 renders no ``tool`` role) would leave the
        model without the tool's answer, silently: refused once per role instead."""
        for role in sorted({str(m.get("role")) for m in new_messages} - set(self._renders_role)):
            a, b = (self._after(context, _PROBE_A, assistant,
                                [{**m, "content": text} if m.get("role") == role else m for m in new_messages], tools)
                    for text in (_PROBE_A, _PROBE_B))
            self._renders_role[role] = not np.array_equal(a, b)
        dropped = sorted(r for r in {str(m.get("role")) for m in new_messages} if not self._renders_role[r])
        if dropped:
            raise RenderError(f"the model's chat template drops {', '.join(map(repr, dropped))} messages, so the "
                              "model would never read them", field="environment", fix=_FIX)

    def after_turn(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any], sampled: np.ndarray,
                   new_messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] | None = None, closed: bool = False) -> np.ndarray:
        """The ids inserted after a sampled turn (``assistant``, whose text the model sampled as
        ``sampled``, in ``context``): the rest of its end marker (the sampled ids already hold its
        first tokens when the model stopped on the end-of-turn token), ``new_messages`` and the
        next generation prompt, as the template renders them. ``closed``: the turn's last id is the
        generator's end-of-sequence token it stopped on (``_rest_of``)."""
        end = self.turn_end(context, tools)
        self._check_roles(context, assistant, new_messages, tools)
        follows, whole, form = self._follows_in(context, assistant, new_messages, tools)
        at = 0
        if len(end) and assistant.get("tool_calls"):  # the template renders the calls (already sampled) first
            before = self._messages_from(context, form, new_messages, tools, whole) - (len(whole) - len(follows))
            at, end = self._end_after_calls(context, assistant, new_messages, tools, follows, end, before)
        if not np.array_equal(follows[at:at + len(end)], end):
            raise RenderError("the model's chat template ends this assistant turn differently from its plain "
                              "turns, so the episode's turns cannot be joined", field="environment", fix=_FIX)
        return np.concatenate([self._rest_of(end, sampled, closed, self._eos_ids, self._eos_rest),
                               follows[at + len(end):]])

    def _end_after_calls(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any],
                         new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                         follows: np.ndarray, end: np.ndarray, before: int) -> tuple[int, np.ndarray]:
        """Where the turn's end marker starts in ``follows`` (which opens with the rendered calls),
        and that marker. Why not its first occurrence: a model-written argument can spell the
        marker (``"zz<|eot_id|><|start_header_id|>system..."`` as a key), and the glue taken after
        it would hold a forged turn. The search starts where a rendering with the calls' arguments
        left out agrees with this one, past every argument, and stops at the first new message's
        text (``before`` tokens of ``follows``): a marker past it closes a new message, and the
        glue taken after it left the tool's result out, silently (Llama 3.1's template in its
        ipython mode, ``builtin_tools`` given, ends a call with ``<|eom_id|>``, a plain turn with
        ``<|eot_id|>``). A turn with calls ending otherwise than plain turns ends at the last of
        the generator's end-of-sequence ids the template writes there; (-1, ``end``) when there is
        none either (the turns cannot be joined: the episode ends, said, never a result left out)."""
        try:
            other = self._follows(context, _stand_in_calls(assistant), new_messages, tools)
        except RenderError:  # a template that refuses empty arguments: the first occurrence, as before
            return _find(follows[:max(before, 0)], end), end
        common = _common_suffix(follows, other)
        start = len(follows) - len(common)
        region = follows[start:max(before, start)]
        at = _find(region, end)
        if at >= 0:
            return start + at, end
        at = _find(follows[:max(before, 0)], end)  # not past the arguments' rendering: the first, as before
        if at >= 0:
            return at, end
        ends = [i for i, t in enumerate(region.tolist()) if t in self._eos_ids]
        if ends:
            return start + ends[-1], region[ends[-1]:ends[-1] + 1]
        return -1, end

    @staticmethod
    def _rest_of(end: np.ndarray, sampled: np.ndarray, closed: bool = False,
                 eos_ids: Collection[int] = (), eos_rest: EosRest | None = None) -> np.ndarray:
        """What of the end marker ``end`` the turn ``sampled`` still lacks: the part after the
        marker's first tokens that the turn ends with; for a turn ``closed`` by the end-of-sequence
        token the marker holds past text (Llama 2's `` </s>``: a space, then the EOS), the part
        after that token. Why: the marker was inserted whole after the sampled EOS, so every later
        turn was sampled and trained after ``7</s> </s>``, an end written twice that the template
        never writes and the model never sampled.

        A turn closed by another of the generator's ``eos_ids`` than the one the marker holds
        (Llama 3.1 stops on ``<|eom_id|>`` after a tool call, its template writing ``<|eot_id|>``
        there unless builtin tools are on) ends where the marker's end token would: the part after
        that token. Why: the whole marker went after it, ``<|eom_id|><|eot_id|>``, which no
        rendering holds; the template's own ipython mode writes ``<|eom_id|>`` and then the tool's
        message, as the episode now does.

        A turn closed by an EOS that the marker holds only inside one of its tokens' text (a ChatML
        fine-tune's ``<|im_end|>\\n`` added as one token, its model stopping on ``<|im_end|>``) is
        followed by the rest of that text (``\\n``), which ``eos_rest`` encodes. Why: the marker
        went whole after it, ``<|im_end|><|im_end|>\\n``, which no rendering holds."""
        for k in range(min(len(end), len(sampled)), 0, -1):
            if np.array_equal(sampled[len(sampled) - k:], end[:k]):
                return end[k:]
        if closed and len(sampled):
            hits = np.flatnonzero(end == sampled[-1])
            if not len(hits):  # another end-of-sequence token: it takes the place of the marker's
                hits = np.flatnonzero(np.isin(end, np.fromiter(eos_ids, dtype=np.int64, count=len(eos_ids))))
            if len(hits):
                return end[int(hits[0]) + 1:]
            rest = eos_rest(int(sampled[-1]), [int(i) for i in end]) if eos_rest is not None else None
            if rest is not None:
                return np.asarray(rest, dtype=np.int64)
        return end
