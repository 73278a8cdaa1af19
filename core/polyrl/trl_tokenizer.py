"""How a script's ``processing_class`` differs from the tokenizer its model folder holds.

Why: ``polyrl.trl.GRPOTrainer`` given a model folder tokenizes with the folder's own files, while
TRL tokenizes with the object it was handed. Edits a TRL script makes to that object in memory
(``tokenizer.eos_token = "<|im_end|>"``, which TRL's sampling stops at; a ``chat_template`` given
to a base model's tokenizer, which renders TRL's chat prompts; added tokens; ``add_bos_token``)
changed TRL's run and were dropped here without a word. What only pads (``pad_token``,
``padding_side``) changes no token TRL samples or trains on, so it is not compared.
"""

from __future__ import annotations

from typing import Any

#: text whose ids show an edit to how plain text is encoded (``add_bos_token``, ``add_eos_token``)
_PROBE = "Hello, world! 42"


def differences(theirs: Any, folders: Any) -> list[str]:
    """What TRL would read from ``theirs`` (the script's tokenizer) that ``folders`` (the same
    folder's tokenizer, loaded afresh) does not hold, each as a phrase; empty when they agree."""
    out = []
    mine, own = getattr(theirs, "chat_template", None), getattr(folders, "chat_template", None)
    if mine != own:
        out.append("its chat template differs from the folder's" if own is not None
                   else "it has a chat template the folder's tokenizer lacks (TRL renders chat prompts with it)")
    if getattr(theirs, "eos_token", None) != getattr(folders, "eos_token", None):
        out.append(f"its eos_token {getattr(theirs, 'eos_token', None)!r} is not the folder's "
                   f"{getattr(folders, 'eos_token', None)!r} (TRL ends completions at it)")
    added = _added(theirs).keys() - _added(folders).keys()
    if added or _length(theirs) != _length(folders):
        shown = ", ".join(repr(t) for t in sorted(added)[:3]) or f"{_length(theirs)} tokens, not {_length(folders)}"
        out.append(f"it has tokens the folder's tokenizer lacks ({shown})")
    elif _ids(theirs) != _ids(folders):
        out.append(f"it encodes text to other ids than the folder's ({_PROBE!r}: {_ids(theirs)} against "
                   f"{_ids(folders)}; add_bos_token or add_eos_token changed?)")
    return out


def _added(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's added tokens (empty where it cannot say)."""
    try:
        return dict(tokenizer.get_added_vocab())
    except Exception:  # noqa: BLE001 - a tokenizer class without the method: compared by length alone
        return {}


def _length(tokenizer: Any) -> int | None:
    """The tokenizer's vocabulary size, added tokens included (None where it cannot say: a processor)."""
    try:
        return len(tokenizer)
    except Exception:  # noqa: BLE001 - compared as equal: nothing to tell
        return None


def _ids(tokenizer: Any) -> list[int] | None:
    """The ids of ``_PROBE`` (None where the tokenizer cannot encode it)."""
    try:
        return list(tokenizer(_PROBE)["input_ids"])
    except Exception:  # noqa: BLE001 - compared as equal: nothing to tell
        return None


def refuse_no_eos(tokenizer: Any) -> None:
    """ConfigError (``processing_class``) for a tokenizer without an EOS token id, which TRL 1.16's
    ``GRPOTrainer`` cannot sample with. Why: it puts ``tokenizer.eos_token_id`` first among the ids
    that end a completion (``[None, *generation_config.eos_token_id]``) and pads with it when the
    tokenizer has no pad token, so its first generation fails with a TypeError (``torch.full`` of
    a None pad, or generate()'s None among the EOS ids); polyrl's backends, stopping at the model's
    ``generation_config`` EOS alone (or at the length limit, without one), trained a run TRL never
    makes, with no word. None for a tokenizer that has one, or that cannot say (a processor's)."""
    if tokenizer is None or not hasattr(tokenizer, "eos_token_id"):
        return
    inner = getattr(tokenizer, "tokenizer", None)  # a processor: TRL reads its tokenizer's
    if inner is not None and hasattr(inner, "eos_token_id"):
        tokenizer = inner
    if getattr(tokenizer, "eos_token_id", None) is not None:
        return
    from polyrl.errors import ConfigError

    eos = getattr(tokenizer, "eos_token", None)
    what = (f"its eos_token {eos!r} is not in its vocabulary" if eos is not None else "it has no eos_token")
    raise ConfigError(f"the tokenizer has no EOS token id ({what}): TRL 1.16's GRPOTrainer ends each completion at "
                      "tokenizer.eos_token_id (and pads with it when pad_token is None), so its first generation "
                      "fails with a TypeError; polyrl would sample with other stop tokens than TRL's",
                      field="processing_class",
                      fix="set the model's end-of-turn token as eos_token and save it beside the model "
                          "(tokenizer.eos_token = '<|im_end|>'; model.save_pretrained(DIR); "
                          "tokenizer.save_pretrained(DIR)), then pass model=DIR")


def folder_names_eos(folder: Any) -> bool:
    """Whether the tokenizer files in ``folder`` name an EOS token (``tokenizer_config.json`` or
    ``special_tokens_map.json``), read without loading the tokenizer: a False is checked by loading it."""
    from pathlib import Path

    from polyrl.backend_kit.model_folders import json_object

    return any(json_object(Path(folder) / name).get("eos_token") not in (None, "", {})
               for name in ("tokenizer_config.json", "special_tokens_map.json"))


def _inner(tokenizer: Any) -> Any:
    """A processor's tokenizer (TRL reads its special tokens there), else ``tokenizer`` itself."""
    inner = getattr(tokenizer, "tokenizer", None)
    return inner if inner is not None and hasattr(inner, "pad_token") else tokenizer


def trl_pad(tokenizer: Any) -> None:
    """Give ``tokenizer`` its EOS as pad token where it has none, in place, as TRL 1.16's
    ``GRPOTrainer.__init__`` does to the ``processing_class`` it holds (``pad_token = eos_token``).
    Why: a script reading ``trainer.processing_class.pad_token`` (or padding a batch with the
    tokenizer it passed) after building the trainer got None here, and ``save_model`` wrote a
    tokenizer without the pad token TRL's saves. polyrl's own padding is unchanged (it pads with the
    EOS id where there is no pad token, and masks the padding out)."""
    tok = _inner(tokenizer)
    if tok is not None and hasattr(tok, "pad_token") and tok.pad_token is None \
            and getattr(tok, "eos_token", None) is not None:
        tok.pad_token = tok.eos_token


def align_token_ids(model: Any, tokenizer: Any, trained: bool, use_cache: Any = None) -> None:
    """Set on ``model``'s configs (``config``, ``generation_config``; a model, or the stand-in
    ``align_saved_token_ids`` builds) the token ids TRL's trainer sets on its model: the
    tokenizer's ``pad_token_id`` (``GRPOTrainer.__init__``) and, once ``train()`` ran,
    transformers' ``align_special_tokens`` (``Trainer.train``: the tokenizer's EOS/BOS/PAD, the
    generation config's EOS ids kept beside it, as a list). Why: TRL's ``save_model`` writes them
    into the saved ``config.json`` and ``generation_config.json``, and a script reads them on the
    model object it passed. ``use_cache``: the ``args.use_cache`` transformers' ``Trainer.__init__``
    sets on ``model.config`` (None: a config that is no ``TrainingArguments``, left as it is)."""
    config = getattr(model, "config", None)
    if config is None:
        return
    if isinstance(use_cache, bool):
        config.use_cache = use_cache
    tok = _inner(tokenizer)
    if tok is None or not hasattr(tok, "pad_token_id"):
        return
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    text.pad_token_id = tok.pad_token_id
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.pad_token_id = tok.pad_token_id
    if trained:
        import logging

        from transformers.trainer_utils import align_special_tokens

        said = logging.getLogger("transformers.trainer_utils")
        level = said.level
        said.setLevel(logging.ERROR)  # its "aligned accordingly" warning: what TRL's run printed at train()
        try:
            align_special_tokens(model, tok)
        finally:
            said.setLevel(level)


_TOKEN_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id")


class _Config:
    """A ``config.json``'s token ids as attributes, ``get_text_config`` its ``text_config``'s."""

    def __init__(self, data: dict[str, Any], text: dict[str, Any] | None = None) -> None:
        for key in (*_TOKEN_KEYS, "use_cache"):
            setattr(self, key, data.get(key))
        self._text = _Config(text) if text is not None else None

    def get_text_config(self) -> Any:
        return self._text if self._text is not None else self


def align_saved_token_ids(folder: Any, tokenizer: Any, trained: bool, use_cache: Any = None) -> None:
    """``align_token_ids`` on the model saved in ``folder``: its ``config.json`` and
    ``generation_config.json`` (when there) get the token ids TRL's saved ones hold; only the
    keys whose value changes are written, the files otherwise kept as they are."""
    from pathlib import Path
    from types import SimpleNamespace

    from polyrl.backend_kit.model_folders import json_object

    if tokenizer is None:
        return
    config_file, generation_file = Path(folder) / "config.json", Path(folder) / "generation_config.json"
    data = json_object(config_file)
    if not data:
        return
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else None
    generation = json_object(generation_file) if generation_file.is_file() else None
    model = SimpleNamespace(config=_Config(data, text),
                            generation_config=SimpleNamespace(**{k: generation.get(k) for k in _TOKEN_KEYS})
                            if generation is not None else None)
    align_token_ids(model, tokenizer, trained, use_cache)

    def changed(target: dict[str, Any], source: Any, keys: tuple[str, ...] = _TOKEN_KEYS) -> bool:
        """Put ``source``'s ``keys`` into ``target`` where they differ (a key absent counts as None)."""
        moved = False
        for key in keys:
            value = getattr(source, key)
            if value != target.get(key):
                target[key] = value
                moved = True
        return moved

    whole = json_object(config_file)
    moved = changed(whole, model.config, (*_TOKEN_KEYS, "use_cache") if isinstance(use_cache, bool) else _TOKEN_KEYS)
    if text is not None and isinstance(whole.get("text_config"), dict):
        moved = changed(whole["text_config"], model.config.get_text_config()) or moved
    if moved:
        _replace(config_file, whole)
    if generation is not None and changed(generation, model.generation_config):
        _replace(generation_file, generation)


def _replace(file: Any, data: dict[str, Any]) -> None:
    """Write ``data`` as ``file``'s JSON (transformers' layout) through a new file renamed over it,
    so a hard link to the old one (a checkpoint's copy) keeps its content."""
    import json
    import os

    fresh = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    fresh.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    try:
        os.chmod(fresh, file.stat().st_mode & 0o777)
    except OSError:
        pass
    os.replace(fresh, file)
