"""``reward_model``: a sequence-classification model (``AutoModelForSequenceClassification``) as reward.

The score of a completion is the model's logit for (prompt, completion): the usual outcome/preference
reward model with one label. torch and transformers are imported only when the reward is first used
(``pip install polyrl[torch]``); the model is loaded once per process and kept.

Options (``[[rewards]] name = "reward_model"``); unknown options are an error:

``path``           required: a local HF folder (model + tokenizer) or an alias a plugin resolves
``tokenizer``      a folder holding the tokenizer to score with (default: the one in ``path``), e.g.
                   TRL's ``reward_processing_classes`` saved by the TRL route (``polyrl.trl``)
``batch_size``     sequences per forward pass (default 8)
``max_length``     tokens per sequence; longer ones are cut from the left, keeping the completion's
                   end (default 1024), and a warning says how many were cut
``chat_template``  "auto" (default, TRL's rule): a chat prompt is rendered as ``prompt + [assistant:
                   completion]`` with the tokenizer's chat template (a ConfigError when it has none, as
                   TRL raises), a text prompt is its text followed by the completion; true: every prompt
                   through the template (a text prompt as the user turn); false: the prompt text
                   followed by the completion.
                   Either way only the template's (or the tokenizer's own) special tokens are special:
                   a completion spelling ``<|im_end|>`` is scored as those characters, never as a
                   turn it ended (``polyrl.backend_kit.literal_chat``)
``chat_template_kwargs``  extra variables for the reward model's own chat template (default none),
                   e.g. ``{enable_thinking = false}``; the policy's ``model.chat_template_kwargs`` are
                   not passed (another family's template may read other variables), except on the
                   TRL route, which passes ``GRPOConfig.chat_template_kwargs`` as TRL does
``label``          which logit is the score (default: 0 when the model has one label; required otherwise)
``device``         "auto" (default: CUDA when torch sees a GPU, else the CPU), "cpu", "cuda", "mps"...
``dtype``          "float32" (default), "bfloat16", "float16", or "auto": the dtype the folder's
                   config.json records (else its weights'), transformers' ``dtype="auto"``; the TRL
                   route sets the one TRL's ``GRPOTrainer`` loads the model in (``model_init_kwargs``'
                   dtype, "auto" without one; a model object's own)
``compute_dtype``  "bfloat16" or "float16": the forward runs under torch autocast to it over the
                   ``dtype`` weights (default none: in ``dtype``); the TRL route sets it to the policy's
                   compute dtype, as TRL's ``bf16`` makes accelerate autocast its reward models too

Sequences are right-padded with the tokenizer's pad token (its eos when it has none), which becomes
the model's ``config.pad_token_id`` as TRL sets it, and the model pools its last non-padding token,
so a batch scores the same as one-by-one (up to float rounding); the model runs in eval mode under ``torch.inference_mode``
and scores are deterministic for fixed inputs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.backend_kit.reward_text import Scored, encode_pair_cut, reward_answer, score_label, warn_cut
from polyrl.backend_kit.weight_headers import config_sizes, refuse_sizes_beyond_weights
from polyrl.errors import ConfigError, RewardError
from polyrl.folder_links import refuse_outside_links
from polyrl.rewards.options import chat_template_choice, merged, required_text, template_kwargs, whole_number
from polyrl.hookspecs import hookimpl
from polyrl.types import Completion, Prompt, RewardContext, RewardScores, RewardSpec
from polyrl_torch.load_report import held_load_report
from polyrl_torch.reward_weights import refuse_incomplete_weights

NAME = "reward_model"
DEFAULTS: dict[str, Any] = {"path": None, "tokenizer": None, "batch_size": 8, "max_length": 1024, "chat_template": "auto",
                            "chat_template_kwargs": None, "label": None, "device": "auto", "dtype": "float32",
                            "compute_dtype": None}
#: ``compute_dtype`` values: torch autocast's half precisions
COMPUTE_DTYPES = ("bfloat16", "float16")

_loaded: dict[tuple[str, str, str, str | None], tuple[Any, Any]] = {}
_lock = threading.Lock()


def _options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = merged(NAME, given, DEFAULTS)
    required_text(NAME, opts, "path", '"path/to/reward-model"')
    if opts["tokenizer"] is not None:
        required_text(NAME, opts, "tokenizer", '"path/to/tokenizer-folder" (or leave it out: the model folder\'s)')
    for key in ("batch_size", "max_length"):
        whole_number(NAME, opts, key, DEFAULTS[key])
    chat_template_choice(NAME, opts)
    template_kwargs(NAME, opts)
    if opts["compute_dtype"] is not None and opts["compute_dtype"] not in COMPUTE_DTYPES:
        raise RewardError(f"{NAME}: compute_dtype must be {' or '.join(map(repr, COMPUTE_DTYPES))}, got "
                          f"{opts['compute_dtype']!r}. Fix: one of those, or leave it out (the forward in dtype)")
    return opts


def torch_device(name: str) -> Any:
    """``polyrl_torch.devices.resolve_device`` (``auto``: CUDA when torch sees a GPU, else the CPU),
    a device torch cannot use being a RewardError on ``options.device``."""
    from polyrl_torch.devices import resolve_device

    try:
        return resolve_device(name)
    except ConfigError as exc:
        raise RewardError(f"{NAME}: {exc.message}. Fix: options.device = \"auto\" or \"cpu\" (\"cuda\" or "
                          "\"cuda:N\" where torch sees a GPU)") from exc


def _alias(path: str) -> str:
    """``path`` resolved as the engines resolve ``model.path`` (``Registry.resolve_alias``), or
    ``path`` itself. A plugin's alias hook raising or calling ``sys.exit`` is a RewardError naming
    that plugin: the bare hook call blamed this reward for the exit ("return scores ... or raise")
    and read a raise as "cannot load a sequence-classification model from 'alias'"."""
    from polyrl.errors import PolyrlError
    from polyrl.registry import get_registry

    try:
        return get_registry().resolve_alias(path) or path
    except PolyrlError as exc:  # the failing plugin's name and fix, as options.path's cause
        raise RewardError(f"{NAME}: options.path: {exc}") from None


def load_reward_model(path: str, device: str = "auto", dtype: str = "float32",
                      tokenizer_path: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for ``path``, loaded once per process (eval mode, right padding); the
    tokenizer from ``tokenizer_path`` when given (TRL's ``reward_processing_classes``), else the
    folder's. The model's ``pad_token_id`` is the tokenizer's pad token (the eos without one), as
    TRL sets it: the model pools the last token that is not that id, so a config naming another id
    than the one batches are padded with would pool a padded sequence's padding."""
    key = (path, device, dtype, tokenizer_path)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        try:
            import torch
            from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise RewardError(f"{NAME} needs torch and transformers ({exc}). Fix: pip install 'polyrl[torch]'") from exc
        resolved = path if os.path.isdir(path) else _alias(path)  # maybe an alias a plugin knows
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype, None)
        if torch_dtype != "auto" and not isinstance(torch_dtype, torch.dtype):
            raise RewardError(f"{NAME}: unknown dtype {dtype!r}. Fix: float32, bfloat16, float16 or \"auto\" "
                              "(the dtype the folder's config.json records)")
        target = torch_device(device)  # before loading: a bad device fails fast
        try:
            refuse_outside_links(resolved, field="options.path")
            if tokenizer_path is not None:
                refuse_outside_links(tokenizer_path, field="options.tokenizer")
            # never the folder's own Python (auto_map): transformers would otherwise ask on stdin
            tokenizer = _tokenizer(AutoTokenizer, tokenizer_path) if tokenizer_path is not None else \
                AutoTokenizer.from_pretrained(resolved, trust_remote_code=False)
            hf_config = AutoConfig.from_pretrained(resolved, trust_remote_code=False)
            # config.json's sizes against the safetensors headers, before the model is built
            refuse_sizes_beyond_weights(resolved, config_sizes(hf_config), field="options.path")
            # the loading info names what transformers would fill with random weights (a missing
            # tensor, a causal LM's absent score head) or could not load (a tensor of another shape);
            # its own report of them is shown only when the weights are accepted
            with held_load_report():
                model, info = AutoModelForSequenceClassification.from_pretrained(
                    resolved, config=hf_config, dtype=torch_dtype, trust_remote_code=False,
                    output_loading_info=True, ignore_mismatched_sizes=True)
                refuse_incomplete_weights(path, model, info)
        except ConfigError as exc:
            raise RewardError(f"{NAME}: {exc}") from None
        except RuntimeError as exc:  # e.g. weights cut short while their data is read
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RewardError(f"{NAME}: options.path: cannot load the weights in {path!r}: {first}. "
                              "Fix: re-copy or re-download the model folder") from None
        except (OSError, ValueError) as exc:
            raise RewardError(f"{NAME}: cannot load a sequence-classification model from {path!r}: {exc}. "
                              "Fix: point options.path at a folder with config.json, weights and a tokenizer "
                              "(a *ForSequenceClassification model)") from exc
        tokenizer.padding_side = "right"
        tokenizer.truncation_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id  # TRL's rule (GRPOTrainer.__init__)
        model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
        model.to(target).eval()
        _loaded[key] = (model, tokenizer)
        return model, tokenizer


def _tokenizer(auto_tokenizer: Any, folder: str) -> Any:
    """The tokenizer saved in ``folder`` (``options.tokenizer``), its own Python never run."""
    try:
        return auto_tokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise RewardError(f"{NAME}: options.tokenizer: cannot load a tokenizer from {folder!r}: {exc}. "
                          "Fix: point options.tokenizer at a folder a tokenizer was saved to "
                          "(tokenizer.save_pretrained(DIR)), or leave it out to use the model folder's") from None


def _refuse_ids_beyond_embeddings(model: Any, ids: Sequence[Sequence[int]], opts: Mapping[str, Any]) -> None:
    """A RewardError when the tokenizer wrote an id the model has no embedding for: a tokenizer of
    another model (``options.tokenizer``) would otherwise fail inside torch's embedding lookup."""
    rows = int(model.get_input_embeddings().num_embeddings)
    top = max((max(row) for row in ids if row), default=-1)
    if top >= rows:
        source = "options.tokenizer" if opts["tokenizer"] is not None else "options.path"
        raise RewardError(f"{NAME}: {source}: the tokenizer wrote token id {top}, but the model at {opts['path']!r} "
                          f"embeds ids 0..{rows - 1} only. Fix: score with the reward model's own tokenizer "
                          "(or one made for its vocabulary)")


def score_texts(prompts: Sequence[Prompt], completions: Sequence[Scored], options: Mapping[str, Any] | None) -> list[float]:
    """Reward-model scores of (prompt, completion) pairs, in batches of ``batch_size``."""
    opts = _options(options)
    model, tokenizer = load_reward_model(opts["path"], opts["device"], opts["dtype"], opts["tokenizer"])
    import torch

    label = score_label(NAME, opts["path"], opts["label"], int(getattr(model.config, "num_labels", 1)))
    encoded = [encode_pair_cut(tokenizer, p, c, opts["chat_template"], opts["max_length"],
                               template_kwargs=opts["chat_template_kwargs"]) for p, c in zip(prompts, completions)]
    ids = [row for row, _ in encoded]
    warn_cut(NAME, sum(cut for _, cut in encoded), len(encoded), opts["max_length"])
    _refuse_ids_beyond_embeddings(model, ids, opts)
    scores: list[float] = []
    autocast = torch.autocast(model.device.type, dtype=getattr(torch, opts["compute_dtype"])) \
        if opts["compute_dtype"] else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        for start in range(0, len(ids), opts["batch_size"]):
            batch = tokenizer.pad({"input_ids": ids[start:start + opts["batch_size"]]},
                                  return_tensors="pt").to(model.device)
            logits = model(**batch).logits
            scores += [float(x) for x in logits[:, label].float().cpu()]
    return scores


# --- the plugin hooks ----------------------------------------------------------------------------


@hookimpl
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec(name=NAME, summary="a sequence-classification reward model's logit for "
                        "(prompt, completion) (options.path; needs torch)"))


@hookimpl
def reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
           context: RewardContext) -> dict[str, RewardScores] | None:
    return reward_answer(NAME, score_texts, prompts, completions, context)
