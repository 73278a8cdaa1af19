"""``max_reward_model``: a BERT/DistilBERT sequence classifier compiled by MAX as a reward.

The same contract as the torch plugin's ``reward_model`` (the score is the classifier's logit for
the rendered (prompt, completion) text), run by :mod:`polyrl_max.encoder`'s Graph-API encoder
instead of transformers. Compiled once per model shape (cached on disk like every MAX graph);
the model is loaded once per process.

Options (``[[rewards]] name = "max_reward_model"``); unknown options are an error:

``path``           required: a local HF folder (``BertForSequenceClassification`` or
                   ``DistilBertForSequenceClassification``, safetensors, tokenizer)
``batch_size``     sequences per forward (default 8)
``max_length``     tokens per sequence, at most the model's positions; longer texts keep their end
                   (default 512); a warning says how many were cut
``label``          which logit is the score (default 0 for one-label models; required otherwise)
``chat_template``  "auto" (default, TRL's rule): a chat prompt is rendered with the tokenizer's chat
                   template (a ConfigError when it has none, as TRL raises: a BERT tokenizer has none),
                   a text prompt as its text followed by the completion; true: every prompt through
                   the template; false: never
``chat_template_kwargs``  extra variables for the chat template (default none), as ``reward_model``'s
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyrl.backend_kit.reward_text import Scored, encode_pair_cut, reward_answer, score_label, warn_cut
from polyrl.backend_kit.weight_headers import refuse_config_json_beyond_weights
from polyrl.errors import ConfigError, RewardError
from polyrl.rewards.options import chat_template_choice, merged, required_text, template_kwargs, whole_number
from polyrl.hookspecs import hookimpl
from polyrl.types import Completion, Prompt, RewardContext, RewardScores, RewardSpec

if TYPE_CHECKING:
    from polyrl_max.encoder import MissingWeight

NAME = "max_reward_model"
DEFAULTS: dict[str, Any] = {"path": None, "batch_size": 8, "max_length": 512, "label": None,
                            "chat_template": "auto", "chat_template_kwargs": None}
_loaded: dict[str, tuple[Any, Any]] = {}
_lock = threading.Lock()


def _options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = merged(NAME, given, DEFAULTS)
    required_text(NAME, opts, "path", '"path/to/classifier"')
    for key in ("batch_size", "max_length"):
        whole_number(NAME, opts, key, DEFAULTS[key])
    chat_template_choice(NAME, opts)
    template_kwargs(NAME, opts)
    return opts


def load(path: str) -> tuple[Any, Any]:
    """(compiled classifier, tokenizer) for ``path``, once per process."""
    with _lock:
        if path in _loaded:
            return _loaded[path]
        from transformers import AutoTokenizer

        from polyrl_max.engine import configure_environment

        configure_environment({})
        from polyrl_max.encoder import EncoderClassifier, MissingWeight

        try:
            # config.json's sizes against the headers of the files the encoder reads, before its graph
            refuse_config_json_beyond_weights(path, "options.path", sorted(Path(path).glob("*.safetensors")))
            classifier = EncoderClassifier(path)
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # never the folder's own Python
        except ConfigError as exc:
            raise RewardError(f"{NAME}: {exc}") from None
        except MissingWeight as exc:
            raise RewardError(missing_weight_error(path, exc)) from None
        except (OSError, ValueError, KeyError) as exc:
            raise RewardError(f"{NAME}: cannot load a BERT/DistilBERT classifier from {path!r}: {exc}. "
                              "Fix: point options.path at a *ForSequenceClassification folder with "
                              "config.json, safetensors weights and a tokenizer") from exc
        tokenizer.truncation_side = "left"
        _loaded[path] = (classifier, tokenizer)
        return _loaded[path]


def missing_weight_error(path: str, exc: MissingWeight) -> str:
    """One line for a folder whose weights lack a tensor the classifier needs: no classification
    head means the folder is not a reward model (a base encoder, a masked LM)."""
    if exc.is_head():
        return (f"{NAME}: options.path: {path!r} is not a BERT/DistilBERT sequence-classification reward model: "
                f"its weights have no classification head ({exc.args[0]}). Fix: point options.path at a "
                "*ForSequenceClassification folder (train or convert a reward model), or score with an LLM "
                "judge (name = \"llm_judge\")")
    return (f"{NAME}: options.path: the weights in {path!r} lack {exc.args[0]}, which the classifier needs. "
            "Fix: re-copy or re-download the model folder (a BertForSequenceClassification or "
            "DistilBertForSequenceClassification saved by transformers)")


def score_texts(prompts: Sequence[Prompt], completions: Sequence[Scored],
                options: Mapping[str, Any] | None) -> list[float]:
    opts = _options(options)
    classifier, tokenizer = load(opts["path"])
    label = score_label(NAME, opts["path"], opts["label"], classifier.shape.labels)
    max_length = min(opts["max_length"], classifier.max_positions)
    # special-token strings in the text are text: only the template's (or [CLS]/[SEP]) are special
    encoded = [encode_pair_cut(tokenizer, p, c, opts["chat_template"], max_length,
                               template_kwargs=opts["chat_template_kwargs"]) for p, c in zip(prompts, completions)]
    ids = [row for row, _ in encoded]
    warn_cut(NAME, sum(cut for _, cut in encoded), len(encoded), max_length)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.padding_side = "right"
    scores: list[float] = []
    for start in range(0, len(ids), opts["batch_size"]):
        batch = tokenizer.pad({"input_ids": ids[start:start + opts["batch_size"]]}, return_tensors="np")
        logits = classifier.logits(batch["input_ids"], batch["attention_mask"])
        scores += [float(x) for x in logits[:, label]]
    return scores


@hookimpl
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec(name=NAME, summary="a BERT/DistilBERT classifier's logit for (prompt, "
                        "completion), compiled by MAX's Graph API (options.path; needs polyrl-max)"))


@hookimpl
def reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
           context: RewardContext) -> dict[str, RewardScores] | None:
    return reward_answer(NAME, score_texts, prompts, completions, context)
