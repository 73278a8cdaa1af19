"""A TRL script's ``processing_class`` edited in memory, beside a model folder: TRL tokenizes and
stops with the object it is handed, polyrl with the folder's files. An edit that changes TRL's run
(eos_token, which TRL's sampling stops at; added tokens; a chat template given to a template-less
base model's tokenizer) was dropped without a word; now each is one error naming it, while the
padding edits TRL scripts make (pad_token = eos_token, padding_side) change nothing and pass."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _build(model, tokenizer, tmp_path):
    return GRPOTrainer(model=str(model), reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=prompts_dataset(),
                       processing_class=tokenizer)


def _eos(tok):
    tok.eos_token = "<|endoftext|>"


def _added(tok):
    tok.add_special_tokens({"additional_special_tokens": ["<think>"]})


def _bos(tok):
    tok.add_bos_token = True  # TRL tokenizes a plain-text prompt with the object: a BOS first


@pytest.mark.parametrize(("edit", "words"), [
    (_eos, "eos_token '<|endoftext|>' is not the folder's '<|im_end|>'"),
    (_added, "tokens the folder's tokenizer lacks ('<think>')"),
    (_bos, "encodes text to other ids than the folder's"),
], ids=["eos_token", "added_token", "add_bos_token"])
def test_an_edited_tokenizer_is_refused_naming_the_edit(tiny_model_dir, tmp_path, edit, words):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    edit(tok)
    with pytest.raises(ConfigError) as err:
        _build(tiny_model_dir, tok, tmp_path)
    assert err.value.field == "processing_class" and words in str(err.value)
    assert "model=DIR without processing_class" in err.value.fix


def test_a_chat_template_given_to_a_base_models_tokenizer_is_refused(tiny_model_dir, tmp_path):
    bare = tmp_path / "base"
    shutil.copytree(tiny_model_dir, bare)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    template = config.pop("chat_template")
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    tok = transformers.AutoTokenizer.from_pretrained(bare)
    assert tok.chat_template is None
    tok.chat_template = template
    with pytest.raises(ConfigError, match="a chat template the folder's tokenizer lacks") as err:
        _build(bare, tok, tmp_path)
    assert err.value.field == "processing_class"


def test_padding_edits_and_the_fix_are_taken(tiny_model_dir, tmp_path):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.pad_token, tok.padding_side = tok.eos_token, "left"  # TRL's own fallback pad; no sampled token changes
    _build(tiny_model_dir, tok, tmp_path / "a")
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    _eos(tok)
    copy = tmp_path / "copy"  # the fix: the edited tokenizer saved beside a copy of the model files
    shutil.copytree(tiny_model_dir, copy, ignore=lambda _, names: [n for n in names if "token" in n])
    tok.save_pretrained(copy)
    _build(copy, None, tmp_path / "b")
    assert transformers.AutoTokenizer.from_pretrained(copy).eos_token == "<|endoftext|>"



def test_save_model_saves_the_processing_class_as_the_script_left_it(tiny_model_dir, tmp_path):
    """TRL's save_model writes the processing_class it holds: a script's pad_token = eos_token,
    padding_side and model_max_length are in the saved folder. polyrl copied the model folder's
    own tokenizer files, so a script reloading the saved folder got other padding without a word."""
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.pad_token, tok.padding_side, tok.model_max_length = tok.eos_token, "right", 77
    _build(tiny_model_dir, tok, tmp_path).save_model(str(tmp_path / "saved"))
    saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert (saved.pad_token, saved.padding_side, saved.model_max_length) == (tok.eos_token, "right", 77)
    assert saved.chat_template == tok.chat_template and (tmp_path / "saved" / "model.safetensors").is_file()


def test_save_model_without_a_processing_class_saves_trls_left_padding(tiny_model_dir, tmp_path):
    """Without a processing_class TRL 1.16 loads the tokenizer itself with padding_side and
    truncation_side "left" and saves that object; polyrl copied the folder's files, so a script
    reloading the saved tokenizer padded (and cut) on the folder's side, right here."""
    folder = tmp_path / "right"
    shutil.copytree(tiny_model_dir, folder)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.update(padding_side="right", truncation_side="right")
    config_file.write_text(json.dumps(config))
    trainer = _build(folder, None, tmp_path / "run")
    assert (trainer.processing_class.padding_side, trainer.processing_class.truncation_side) == ("left", "left")
    trainer.save_model(str(tmp_path / "saved"))
    saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert (saved.padding_side, saved.truncation_side) == ("left", "left")
    assert saved.chat_template == trainer.processing_class.chat_template


def test_save_model_writes_trls_args_as_training_args_bin(tiny_model_dir, tmp_path):
    """transformers' save_model writes torch.save(args) as training_args.bin beside the weights,
    which TrainingArguments reloads and the Hub model card read; polyrl's own GRPOConfig is no
    TrainingArguments, so none is written for it."""
    import torch

    from polyrl import api

    trainer = _build(tiny_model_dir, None, tmp_path / "run")
    trainer.save_model(str(tmp_path / "saved"))
    args = torch.load(tmp_path / "saved" / "training_args.bin", weights_only=False)
    assert type(args) is type(trainer.args) and args.output_dir == trainer.args.output_dir
    own = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=prompts_dataset(),
                      args=api.GRPOConfig(output_dir=str(tmp_path / "own")))
    own.save_model(str(tmp_path / "own_saved"))
    assert (tmp_path / "own_saved" / "model.safetensors").is_file()
    assert not (tmp_path / "own_saved" / "training_args.bin").exists()


def test_save_model_into_the_model_folder_itself_writes_the_tokenizer_and_training_args_bin(tiny_model_dir,
                                                                                             tmp_path):
    """``save_model`` into the folder the model already is in (the folder given, or polyrl's
    trained export) returned at once: TRL's save writes the processing_class as the script left it
    and training_args.bin there too, so a script reloading that folder got neither."""
    import torch

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    tok.padding_side, tok.model_max_length = "right", 77
    trainer = _build(folder, tok, tmp_path / "run")
    trainer.save_model(str(folder))
    args = torch.load(folder / "training_args.bin", weights_only=False)
    assert type(args) is type(trainer.args) and args.output_dir == trainer.args.output_dir
    saved = transformers.AutoTokenizer.from_pretrained(folder)  # (a pad_token edit: the folder's older
    assert (saved.padding_side, saved.model_max_length) == ("right", 77)  # special_tokens_map.json wins, in TRL too)
    assert (folder / "model.safetensors").is_file()


def _folder_without(tiny_model_dir, tmp_path, *tokens, name="edited"):
    """A copy of the tiny model whose tokenizer files name none of ``tokens`` (``eos_token``, ``pad_token``)."""
    folder = tmp_path / name
    shutil.copytree(tiny_model_dir, folder)
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        data = json.loads((folder / file).read_text())
        for token in tokens:
            data.pop(token, None)
        (folder / file).write_text(json.dumps(data))
    return folder


def test_a_tokenizer_without_an_eos_token_is_refused_as_trl_cannot_sample_with_it(tiny_model_dir, tmp_path):
    """TRL 1.16 ends completions at ``[tokenizer.eos_token_id, *generation_config.eos_token_id]``
    and pads with the EOS where there is no pad token: with no EOS its first generation fails with
    a TypeError (None among the EOS ids, or a None pad). polyrl sampled on, stopping at the model's
    generation_config EOS alone (or nowhere): a run TRL never makes, unsaid. Refused before any
    model loads, whether the folder's files name no EOS, the script set it to None, or a model
    object's tokenizer has none."""
    for tokens in (("eos_token",), ("eos_token", "pad_token")):
        folder = _folder_without(tiny_model_dir, tmp_path, *tokens, name="-".join(tokens))
        with pytest.raises(ConfigError, match="the tokenizer has no EOS token id") as err:
            _build(folder, None, tmp_path / "run")
        assert err.value.field == "processing_class" and "eos_token" in err.value.fix
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.eos_token = None
    with pytest.raises(ConfigError, match="TRL 1.16's GRPOTrainer ends each completion at tokenizer.eos_token_id"):
        _build(tiny_model_dir, tok, tmp_path / "run2")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ConfigError, match="no EOS token id"):
        GRPOTrainer(model=model, reward_funcs=[short], args=grpo_args(tmp_path / "run3"),
                    train_dataset=prompts_dataset(), processing_class=tok)
    assert not (tmp_path / "run3" / "initial_model").exists()  # refused before anything was saved


def _token_files(folder):
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    keys = ("pad_token_id", "eos_token_id", "bos_token_id")
    return ({k: config.get(k) for k in (*keys, "use_cache")}, {k: generation.get(k) for k in keys},
            (tok.pad_token, tok.eos_token))


@pytest.mark.parametrize("given", [False, True])
def test_no_pad_token_pads_with_the_eos_and_saves_trls_token_ids(tiny_model_dir, tmp_path, given):
    """TRL's ``GRPOTrainer.__init__`` gives a tokenizer without a pad token its EOS (the object the
    script passed too) and sets the model's ``pad_token_id`` to it; transformers' ``Trainer`` sets
    ``config.use_cache = args.use_cache`` and, in ``train()``, aligns the EOS ids (a list in the
    generation config); ``save_model`` writes all of it. polyrl left ``pad_token`` None (a script
    padding with its tokenizer afterwards failed) and saved the folder's ids. Compared with TRL's
    own trainer, before and after one step."""
    trl = pytest.importorskip("trl")
    folder = _folder_without(tiny_model_dir, tmp_path, "pad_token")
    saved = {}
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        tok = transformers.AutoTokenizer.from_pretrained(folder) if given else None
        trainer = trainer_class(model=str(folder), reward_funcs=[short], args=grpo_args(tmp_path / name),
                                train_dataset=prompts_dataset(), processing_class=tok)
        if given:
            assert tok.pad_token == tok.eos_token == "<|im_end|>", name
        assert trainer.processing_class.pad_token == "<|im_end|>", name
        trainer.save_model(str(tmp_path / name / "before"))
        trainer.train()
        trainer.save_model(str(tmp_path / name / "after"))
        saved[name] = [_token_files(tmp_path / name / when) for when in ("before", "after")]
    assert saved["polyrl"] == saved["trl"]
    after_config, after_generation, _ = saved["trl"][1]
    assert after_config["pad_token_id"] == 2 and after_config["use_cache"] is False
    assert after_generation["eos_token_id"] == [2]  # transformers' alignment, as TRL's save writes it
