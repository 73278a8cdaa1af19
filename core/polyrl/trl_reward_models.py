"""The reward models of TRL's ``GRPOTrainer``: model objects in ``reward_funcs`` and the tokenizers of
``reward_processing_classes``.

``reward_processing_classes`` is read as TRL 1.16 reads it: one tokenizer or a list aligned with
``reward_funcs`` (the same length, else an error); an entry for a reward function is ignored; None
for a reward model is the tokenizer saved with it (TRL's ``AutoTokenizer.from_pretrained`` of the
model's name). polyrl scores a reward model in its ``reward_model`` reward, which loads from
folders (in the trainer's process or another), so what the script holds is saved there first:
a tokenizer given for a reward-model folder under ``output_dir/reward_tokenizers/`` (that folder is
the reward's ``tokenizer`` option), and a ``*ForSequenceClassification`` model object with its
tokenizer under ``output_dir/reward_models/``, as a model object given as the policy is saved to
``output_dir/initial_model``. A reward model loads in the dtype TRL's would have
(``reward_model_dtypes``): a folder's from ``model_init_kwargs``, an object's its own. The model then scores text tokenized by the script's tokenizer, its
pad token (the eos without one) the model's ``pad_token_id``, as TRL sets them. Why save rather
than pass the objects: a reward's options are plain values a checkpoint records and a worker reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError
from polyrl.file_modes import honour_umask

FIELD = "reward_processing_classes"
#: the folders under ``output_dir`` the given tokenizers and model objects are saved in
TOKENIZERS, MODELS = "reward_tokenizers", "reward_models"


def _is_tokenizer(value: Any) -> bool:
    """A transformers tokenizer (``PreTrainedTokenizerBase``: slow or fast), told by its class."""
    try:
        from transformers import PreTrainedTokenizerBase
    except ImportError:  # no transformers here: nothing the script made is a tokenizer
        return False
    return isinstance(value, PreTrainedTokenizerBase)


def is_model_object(reward: Any) -> bool:
    """A transformers model object (a torch module that saves itself), which TRL calls as a reward model."""
    from polyrl.api import _is_torch_module

    return _is_torch_module(reward) and hasattr(reward, "save_pretrained")


def _is_reward_model(reward: Any) -> bool:
    from polyrl.api import is_reward_model_folder

    return is_reward_model_folder(reward) or is_model_object(reward)


def reward_tokenizers(value: Any, rewards: Sequence[Any]) -> list[Any]:
    """``value`` as TRL aligns it with ``rewards`` (the script's ``reward_funcs``, as a list): one
    entry per reward, None where the reward model's own tokenizer is used or the reward is a
    function (whose entry TRL ignores). A list of another length, or an entry for a reward model
    that is not a tokenizer, is one ConfigError naming ``reward_processing_classes``."""
    if value is None:
        return [None] * len(rewards)
    given = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(given) != len(rewards):
        raise ConfigError(f"{FIELD} has {len(given)} entr{'y' if len(given) == 1 else 'ies'} for "
                          f"{len(rewards)} reward_funcs", field=FIELD,
                          fix=f"pass a list of {len(rewards)} entries, one per reward_funcs entry in the same "
                              "order (None for a reward function, or for a reward model to use the tokenizer "
                              "saved in its folder), or one tokenizer with one reward")
    aligned: list[Any] = []
    for i, (tokenizer, reward) in enumerate(zip(given, rewards)):
        if tokenizer is None or not _is_reward_model(reward):
            aligned.append(None)  # a function's entry: TRL ignores it
            continue
        if not _is_tokenizer(tokenizer):
            where = FIELD if not isinstance(value, (list, tuple)) else f"{FIELD}[{i}]"
            what = repr(reward) if isinstance(reward, str) else f"reward_funcs[{i}] ({type(reward).__name__})"
            raise ConfigError(f"{where} is a {type(tokenizer).__name__}, not a tokenizer, for the reward model "
                              f"{what}", field=FIELD,
                              fix="pass that reward model's tokenizer (a transformers tokenizer, e.g. "
                                  "AutoTokenizer.from_pretrained(...); a processor's .tokenizer), or None to use "
                                  "the tokenizer saved in its folder")
        aligned.append(tokenizer)
    return aligned


def hub_reward_models(rewards: Sequence[Any]) -> list[Any]:
    """``rewards`` (the script's ``reward_funcs``) with each Hub id (``org/name``, as TRL's
    ``AutoModelForSequenceClassification.from_pretrained`` takes it) as its snapshot folder in the
    local Hugging Face cache, which polyrl's ``reward_model`` reads; an id not cached there is one
    ConfigError naming ``reward_funcs[i]`` (polyrl never downloads). Why: the id reached polyrl's
    reward names as is, so the run stopped at ``train()`` naming ``rewards[i]``, a field the script
    never wrote, and ``reward_processing_classes``' tokenizer for it was taken as a function's
    (ignored), where TRL loads the model the id names."""
    from polyrl.hub import looks_like_hub_id, resolve_cached

    return [resolve_cached(reward, field=f"reward_funcs[{i}]")
            if isinstance(reward, str) and "@" not in reward and looks_like_hub_id(reward) else reward
            for i, reward in enumerate(rewards)]


#: the first parts of a sequence classifier's head tensors (``score.weight``: Llama, Qwen, GPT-2;
#: ``classifier.*``: BERT, DistilBERT, RoBERTa, DeBERTa), maybe under one prefix
_HEAD_PARTS = frozenset({"score", "classifier"})


def _architectures(folder: str) -> list[str]:
    """config.json's ``architectures`` in ``folder`` ([] when it names none or cannot be read)."""
    from polyrl.backend_kit.model_folders import json_object

    names = json_object(Path(folder) / "config.json").get("architectures")
    return [str(name) for name in names] if isinstance(names, list) else []


def _holds_no_head(folder: str) -> bool:
    """Whether the safetensors headers in ``folder`` list no classification-head tensor
    (``_HEAD_PARTS``); False where they cannot be read (no safetensors, a broken index): the
    reward model's own load then says what is wrong."""
    from polyrl.backend_kit.weight_headers import tensor_shapes, weight_files

    try:
        files = weight_files(Path(folder))
        names = list(tensor_shapes(files)) if files else []
    except (ConfigError, ImportError):
        return False
    return bool(names) and not any(_HEAD_PARTS & set(name.split(".")[:2]) for name in names)


def refuse_causal_lm_folders(rewards: Sequence[Any], given: Sequence[Any] | None = None) -> None:
    """A ``ConfigError`` naming ``reward_funcs[i]`` for a folder in ``rewards`` that is no sequence
    classifier: its config.json names other architectures (``LlamaForCausalLM``) and its weights
    hold no classification head. Why at ``GRPOTrainer(...)``: the folder's weights would score
    through a randomly initialised head (TRL's ``AutoModelForSequenceClassification`` makes one
    with only a warning); polyrl's ``reward_model`` refused it at train()'s first step, naming its
    own ``options.path``. Read from the headers only: no weight is loaded. ``given``: the script's
    ``reward_funcs`` (a Hub id as written)."""
    from polyrl.api import is_reward_model_folder

    for i, reward in enumerate(rewards):
        if not is_reward_model_folder(reward):
            continue
        kinds = _architectures(reward)
        if not kinds or any(kind.endswith("ForSequenceClassification") for kind in kinds) or not _holds_no_head(reward):
            continue
        written = given[i] if given is not None and i < len(given) else reward
        raise ConfigError(f"reward_funcs[{i}] ({written!r}) is a {', '.join(kinds)} folder, not a sequence-"
                          "classification reward model: its weights have no classification head, so every score "
                          "would come from a randomly initialised one", field=f"reward_funcs[{i}]",
                          fix="pass a reward model folder (an AutoModelForSequenceClassification with num_labels=1, "
                              "trained from this model or downloaded), or a reward function (e.g. one asking this "
                              "model as a judge)")


def reward_model_names(rewards: Sequence[Any], given: Sequence[Any] | None = None) -> list[str | None]:
    """The name TRL 1.16 logs each reward model of ``rewards`` (the script's ``reward_funcs``)
    under, ``rewards/<name>/mean``: the last "/"-part of its ``config._name_or_path``, which for a
    folder is the string given (``api.trl_model_name``); None for a function. Read before a model
    object is saved: polyrl scores it from ``reward_models/reward_funcs_<i>``, a name TRL never
    logs, and its polyrl label is ``reward_model`` (``api.reward_entries``). ``given``: ``reward_funcs``
    as the script wrote them, where a Hub id is its own name (``hub_reward_models``' folder is not)."""
    from polyrl.api import is_reward_model_folder, trl_model_name

    names: list[str | None] = []
    for i, reward in enumerate(rewards):
        written = given[i] if given is not None and i < len(given) else reward
        if isinstance(written, str) and written != reward and is_reward_model_folder(reward):
            names.append(trl_model_name(written))  # a Hub id's: TRL's config._name_or_path is the id
        elif is_model_object(reward):
            names.append(trl_model_name(str(getattr(getattr(reward, "config", None), "_name_or_path", "") or "")))
        elif is_reward_model_folder(reward):
            names.append(trl_model_name(reward))
        else:
            names.append(None)
    return names


#: the dtypes ``reward_model_dtypes`` hands polyrl's ``reward_model`` (its ``dtype`` option)
REWARD_DTYPES = ("auto", "float32", "bfloat16", "float16")


def _folder_dtype(model_init_kwargs: Any) -> str:
    """The dtype TRL 1.16 loads a reward-model folder in: it passes ``args.model_init_kwargs`` as
    they are to ``AutoModelForSequenceClassification.from_pretrained`` (no float32 default there,
    unlike the policy's ``create_model_from_path``), and transformers 5 reads ``dtype``, else the
    deprecated ``torch_dtype``, else ``"auto"``: the dtype config.json records (else the weights')."""
    kwargs = model_init_kwargs if isinstance(model_init_kwargs, dict) else {}
    for key in ("dtype", "torch_dtype"):
        if kwargs.get(key) is not None:
            name = str(kwargs[key]).removeprefix("torch.")
            if name not in REWARD_DTYPES:
                raise ConfigError(f"model_init_kwargs[{key!r}] = {kwargs[key]!r} is no dtype polyrl loads a reward "
                                  "model in (TRL passes model_init_kwargs to its reward models too)",
                                  field="grpo_config.model_init_kwargs",
                                  fix=f"set dtype to one of {', '.join(map(repr, REWARD_DTYPES))}")
            return name
    return "auto"


def reward_model_dtypes(rewards: Sequence[Any], model_init_kwargs: Any, folders: bool = True) -> list[str | None]:
    """The ``reward_model`` dtype of each of ``rewards`` (the script's ``reward_funcs``), as TRL
    loads it: a folder in ``model_init_kwargs``' dtype (``_folder_dtype``; ``"auto"`` without
    one), a model object in its own dtype (TRL scores the object as given), None for a function.
    Why: polyrl's ``reward_model`` loads float32 by default, so a bfloat16 reward model (or
    ``model_init_kwargs={"dtype": "bfloat16"}``) scored other numbers than under TRL.
    ``folders`` False (polyrl's own ``GRPOConfig``, which has no ``model_init_kwargs``): a folder
    keeps the ``reward_model``'s default (None), while an object is still scored in its own
    dtype, as the policy object trains in its own under either config (a bfloat16 object was
    loaded and scored in float32 there)."""
    from polyrl.api import is_reward_model_folder

    dtypes: list[str | None] = []
    for reward in rewards:
        if is_model_object(reward):
            dtypes.append(str(getattr(reward, "dtype", "float32")).removeprefix("torch."))
        elif folders and is_reward_model_folder(reward):
            dtypes.append(_folder_dtype(model_init_kwargs))
        else:
            dtypes.append(None)
    return dtypes


#: The lock file of a folder of saves (``MODELS``, ``TOKENIZERS``): each save holds it shared while
#: its staging folder exists; ``remove_stale_staging`` deletes staging folders only holding it alone.
STAGING_LOCK = ".staging.lock"
#: A save's staging folder, as ``_save`` names it (``.reward_funcs_0-k2j4x8ab``).
_STAGING = re.compile(r"\.reward_funcs_\d+-[A-Za-z0-9_]+")


@contextlib.contextmanager
def _staging_lock(folder: Path, exclusive: bool) -> Iterator[bool]:
    """``folder``'s staging lock (an advisory ``flock``, as the run's output_dir lock: the kernel
    lets go of it when its holder dies, even by ``kill -9``); yields whether it was taken. Shared
    (a save) it waits; exclusive (a clean-up) it does not: a save under way keeps its folder. Not
    taken where it cannot be (a read-only folder, a filesystem without locks): a save goes on as
    before, a clean-up deletes nothing."""
    try:
        fd = os.open(folder / STAGING_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
            taken = True
        except OSError:  # BlockingIOError: a save holds it
            taken = False
        yield taken
    finally:
        os.close(fd)  # lets go of the lock


def remove_stale_staging(folder: Path) -> list[Path]:
    """Delete the staging folders (``.reward_funcs_N-*``) that saves killed part-way (``kill -9``,
    a power cut) left in ``folder``, when no save holds its staging lock: none of them is being
    written then, by this process or another (another rank, another run on this output_dir).
    Why: each was a model-sized folder that stayed on disk for good. Returns those deleted."""
    if not folder.is_dir():
        return []
    removed = []
    with _staging_lock(folder, exclusive=True) as alone:
        if not alone:
            return []
        for entry in sorted(folder.iterdir()):
            if _STAGING.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _save(target: Path, *writers: Callable[[str], Any]) -> str:
    """``target`` written whole by ``writers`` (each given the folder), replacing an earlier save
    (no file of it left beside the new one); its absolute path, the same whatever directory a
    reward runs in. Under a launcher each rank's GRPOTrainer saves the same objects here at once:
    a save another rank put in place first is kept. Staged in a folder beside ``target`` under the
    staging lock, after what killed saves left there is deleted (``remove_stale_staging``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    with _staging_lock(target.parent, exclusive=False):
        _write_staged(target, writers)
    return os.path.abspath(target)


def _write_staged(target: Path, writers: Sequence[Callable[[str], Any]]) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for write in writers:
            write(str(staging))
        honour_umask(staging)  # mkdtemp's 0700 would keep it from the run's other readers
        while target.exists():  # an earlier save; another rank may be removing it at the same time
            try:
                shutil.rmtree(target)
            except FileNotFoundError:
                continue
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():
                raise
            # gone above, so this is a peer rank's save of the same objects, landed first
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _own_tokenizer(model: Any, index: int) -> Any:
    """TRL's tokenizer for a reward model object given without one: its name's, from a folder or
    the local Hub cache only (polyrl never downloads)."""
    source = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
    from polyrl import trl_folder_code

    try:
        from transformers import AutoTokenizer

        return trl_folder_code.load(AutoTokenizer, source, f"reward_funcs[{index}]", local_files_only=True)
    except ConfigError:  # the folder's own code, refused
        raise
    except Exception:  # noqa: BLE001 - any other failure means the same fix
        raise ConfigError(f"reward_funcs[{index}] is a model object whose tokenizer could not be loaded from "
                          f"{source!r}", field=FIELD,
                          fix=f"pass its tokenizer in reward_processing_classes (entry {index})") from None


def saved_reward_models(rewards: Sequence[Any], tokenizers: Sequence[Any],
                        output_dir: str) -> tuple[list[Any], list[str | None]]:
    """(``rewards`` with each model object replaced by the folder it and its tokenizer are saved to,
    ``output_dir/reward_models/reward_funcs_<i>``; the folder each other tokenizer is saved to,
    ``output_dir/reward_tokenizers/reward_funcs_<i>``, None where there is none), aligned with
    ``rewards``. A model object that is not a sequence classifier is a ConfigError: TRL reads its
    logits as one score per sequence."""
    entries: list[Any] = []
    folders: list[str | None] = []
    for i, (reward, tokenizer) in enumerate(zip(rewards, tokenizers)):
        if is_model_object(reward):
            kind = type(reward).__name__
            if not kind.endswith("ForSequenceClassification"):
                raise ConfigError(f"reward_funcs[{i}] is a {kind}; a reward model is a sequence classifier",
                                  field=f"reward_funcs[{i}]",
                                  fix="pass an AutoModelForSequenceClassification model (num_labels=1), its folder, "
                                      "or a reward function")
            chosen = tokenizer if tokenizer is not None else _own_tokenizer(reward, i)
            entries.append(_save(Path(output_dir) / MODELS / f"reward_funcs_{i}",
                                 functools.partial(reward.save_pretrained, safe_serialization=True),
                                 chosen.save_pretrained))
            folders.append(None)  # its tokenizer is the folder's own
        else:
            entries.append(reward)
            folders.append(None if tokenizer is None else
                           _save(Path(output_dir) / TOKENIZERS / f"reward_funcs_{i}", tokenizer.save_pretrained))
    return entries, folders


__all__ = ["MODELS", "REWARD_DTYPES", "TOKENIZERS", "hub_reward_models", "is_model_object", "refuse_causal_lm_folders",
           "remove_stale_staging", "reward_model_dtypes", "reward_model_names", "reward_tokenizers",
           "saved_reward_models"]
