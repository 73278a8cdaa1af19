"""What a reward model scores for a (prompt, completion) pair, the same for every backend."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.backend_kit.literal_chat import encode_chat_literal, plain_sequence_cut
from polyrl.backend_kit.template_limits import render_chat
from polyrl.data_arrow import bare_tool_call
from polyrl.errors import ConfigError, RewardError
from polyrl.logs import get_logger
from polyrl.types import Completion, Prompt, RewardContext, RewardScores


#: what a reward model scores after the prompt: a completion's text, or an episode's conversation
#: after the prompt (assistant turns with their tool calls, tool results), as TRL's ``p + c``
Scored = str | list[dict[str, Any]]


def _conversation(prompt: Prompt, completion: Scored) -> list[dict[str, Any]]:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]  # type: ignore[union-attr]  # FIXME: TokenPrompt
    if not isinstance(completion, str):
        return [*messages, *[dict(m) for m in completion]]
    return [*messages, {"role": "assistant", "content": completion}]


def _text(completion: Scored) -> str:
    """A completion's text where no chat template renders it: an episode's messages' texts, in order."""
    if isinstance(completion, str):
        return completion
    return "\n".join(str(m.get("content") or "") for m in completion)


def templated(tokenizer: Any, chat_template: bool | str, prompt: Prompt | None = None,
              field: str = "options.path") -> bool:
    """Whether the pair is rendered with the chat template: asked for (``True``, or ``"auto"`` for a
    chat prompt only, TRL's rule: ``GRPOTrainer._calculate_rewards`` scores a text prompt as
    ``prompt + completion`` even when the reward tokenizer has a template). Asked for of a tokenizer
    without one is a ConfigError on ``field``. Why: TRL's ``apply_chat_template`` raises there, and
    polyrl scored the messages' contents joined by line breaks with the completion glued to the last
    one (no roles, no separator), a text the reward model was never trained on, unsaid."""
    if chat_template == "auto":
        chat_template = prompt is not None and not isinstance(prompt, str)
    if not chat_template:
        return False
    if not getattr(tokenizer, "chat_template", None):
        what = "a chat prompt" if prompt is not None and not isinstance(prompt, str) else "the prompt"
        raise ConfigError(
            f"the reward model's tokenizer has no chat template, and {what} is to be scored through one "
            "(TRL's GRPOTrainer raises here: it renders a chat prompt and its completion with the reward "
            "tokenizer's template)", field=field,
            fix="give the reward model a tokenizer with a chat template (save one to the folder, set options.tokenizer, "
                "or in a TRL script pass reward_processing_classes), or set the reward's options.chat_template = "
                "false to score the messages' text followed by the completion as plain text")
    return True


def render_pair(tokenizer: Any, prompt: Prompt, completion: Scored, chat_template: bool | str,
                field: str = "options.path", template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The conversation rendered by the reward model's chat template (when asked and it has one,
    within ``template_limits``' bounds: past one, a ConfigError on ``field``; ``template_kwargs``
    its extra variables, the reward's ``chat_template_kwargs``), else the prompt's text followed by
    the completion."""
    if templated(tokenizer, chat_template, prompt, field):
        return render_chat(tokenizer, _conversation(prompt, completion), None, False, field, template_kwargs)
    if isinstance(prompt, str):
        return prompt + _text(completion)
    return "\n".join(str(m.get("content", "")) for m in prompt) + _text(completion)  # type: ignore[union-attr]  # FIXME: TokenPrompt


def encode_pair(tokenizer: Any, prompt: Prompt, completion: Scored, chat_template: bool | str, max_length: int,
                field: str = "options.path", template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The ids a reward model scores: ``render_pair``'s text, at most ``max_length`` tokens (cut from
    the left, keeping the completion). Only the template's special tokens (or, without one, the
    tokenizer's own, BERT's ``[CLS]``/``[SEP]``) are special: a completion or prompt spelling
    ``<|im_end|>`` gets those characters as text, so it cannot end its turn and write a forged one
    for the model to score (``polyrl.backend_kit.literal_chat``). ``template_kwargs``: as ``render_pair``'s."""
    return encode_pair_cut(tokenizer, prompt, completion, chat_template, max_length, field, template_kwargs)[0]


def encode_pair_cut(tokenizer: Any, prompt: Prompt, completion: Scored, chat_template: bool | str, max_length: int,
                    field: str = "options.path",
                    template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], bool]:
    """``encode_pair``'s ids and whether the pair was cut to ``max_length`` (``warn_cut`` says so)."""
    if templated(tokenizer, chat_template, prompt, field):
        ids = encode_chat_literal(tokenizer, _conversation(prompt, completion), field=field,
                                  template_kwargs=template_kwargs)  # first: a template past its bounds says so
        _check_shown(tokenizer, _conversation(prompt, completion), field, template_kwargs)
        return (ids[len(ids) - max_length:], True) if len(ids) > max_length else (ids, False)
    return plain_sequence_cut(tokenizer, render_pair(tokenizer, prompt, completion, False), max_length)


#: what each reward tokenizer's chat template shows (``polyrl.template_roles``), asked once per shape
_ROLES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _check_shown(tokenizer: Any, conversation: list[dict[str, Any]], field: str,
                 template_kwargs: Mapping[str, Any] | None) -> None:
    """A ConfigError on ``field`` where the reward model's chat template leaves out a message of the
    conversation it scores (a role it does not write: a system or tool message, a ``developer``
    one; or one it drops in that place) or an assistant tool call (it writes the content alone, as
    SmolLM2's). Why: the reward model then scored the conversation without that part, unsaid
    (TRL's too), where the policy's template showed it to the policy. Asked once per
    conversation shape (``polyrl.template_roles``)."""
    from polyrl.template_roles import TemplateRoles

    try:
        roles = _ROLES.setdefault(tokenizer, TemplateRoles())
    except TypeError:  # a tokenizer that takes no weak reference: asked afresh
        roles = TemplateRoles()
    context = repr(sorted((template_kwargs or {}).items()))

    def render(messages: list[dict[str, Any]]) -> str:
        return render_chat(tokenizer, messages, None, False, field, template_kwargs)

    found = roles.problem(conversation, render, context=context)
    if found is not None:
        i, what = found
        what = what.replace("the model would never read that message",
                            "the reward model would score the conversation without that message")
        raise ConfigError(f"message {i} of the conversation it scores (prompt, then completion) {what}", field=field,
                          fix="use a reward model whose chat template renders that role there, or give that text a "
                              "role it renders ('system' or 'user'), or set the reward's options.chat_template = "
                              "false (the messages' texts scored as plain text)")
    if not any(bare_tool_call(m) for m in conversation):
        return
    i = roles.dropped_call(conversation, render, context=context)
    if i is not None:
        raise ConfigError(f"message {i} of the conversation it scores (prompt, then completion) is an assistant tool "
                          "call that the reward model's chat template does not render (it writes no tool_calls): the "
                          "reward model would score the conversation without that call", field=field,
                          fix="use a reward model whose chat template renders tool calls, or write the call as text "
                              "in the message's content")


def warn_cut(name: str, cut: int, of: int, max_length: int) -> None:
    """Log that ``cut`` of ``of`` pairs were scored on their last ``max_length`` tokens: the model
    did not see the prompt's start (nor a completion's own start when it alone is longer), so a
    long completion is graded on its end, which the run must be told of rather than find out."""
    if cut:
        get_logger("polyrl.rewards").warning(
            f"{name}: {cut} of {of} (prompt, completion) pairs were longer than options.max_length = "
            f"{max_length} tokens and were scored on their last {max_length} tokens only (the prompt's start, "
            "and a completion's own start when it alone is longer, were not seen). Fix: raise "
            "options.max_length up to what the reward model reads, or shorten the completions",
            reward=name, cut=cut, of=of, max_length=max_length)


def score_label(name: str, path: str, label: Any, labels: int) -> int:
    """Which of a classifier's ``labels`` logits is the reward: ``options.label``, or 0 when the
    model has one label; a RewardError naming the fix otherwise (the same rule on every backend)."""
    if label is None:
        if labels != 1:
            raise RewardError(f"{name}: the model at {path!r} has {labels} labels. "
                              "Fix: set options.label to the index of the logit that is the reward")
        label = 0
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < labels:
        raise RewardError(f"{name}: label must be in 0..{labels - 1}, got {label!r}")
    return label


def reward_answer(name: str, score_texts: Callable[[Sequence[Prompt], list[Scored], Any], list[float]],
                  prompts: Sequence[Prompt], completions: Sequence[Completion],
                  context: RewardContext) -> dict[str, RewardScores] | None:
    """A reward model plugin's ``reward`` hook: ``score_texts(prompts, texts, options)`` when the run
    wants ``name`` (the completions' texts, that reward's options), None otherwise. An episode's
    completion is its conversation after the prompt (``Completion.messages``), as TRL's reward model
    scores ``prompt + completion`` messages: its text alone (the last answer) left out the tool
    calls and results the model answered from, unsaid. A chat completion parsed with the
    tokenizer's ``response_schema`` (``Completion.response_message``) is that one message, as TRL's."""
    if name not in context.wanted:
        return None
    texts: list[Scored] = [c if isinstance(c, str) else c.messages if c.messages is not None
                           else [c.response_message] if c.response_message is not None else c.text
                           for c in completions]
    return {name: RewardScores(score_texts(prompts, texts, context.options.get(name)))}
