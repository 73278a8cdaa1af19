"""polyrl.trl.GRPOTrainer(model=PeftModel): TRL trains the PeftModel's own adapter from its current
weights (a fresh get_peft_model's random A, or an adapter loaded to train further); polyrl starts
from exactly those, trains them, and gives them back as TRL does. What it cannot carry (several
adapters, a non-LoRA adapter) is one error line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402

IDS = (1, 5, 9, 13, 20)


_args = grpo_args


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(n)])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def _logits(model):
    with torch.no_grad():
        return model.eval()(torch.tensor([list(IDS)])).logits


def _peft_model(folder: str, adapter_name: str = "default"):
    """get_peft_model on the tiny model, its B made nonzero: a start other than the PeftModel's shows."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(folder)
    torch.manual_seed(7)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      task_type="CAUSAL_LM"), adapter_name=adapter_name)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model


def test_a_peft_model_trains_its_own_adapter_from_its_current_weights(tiny_model_dir, tmp_path):
    """One step at a learning rate of 1e-9 moves no weight visibly: the saved adapter computes what
    the PeftModel given computed, so training started from its A and B (polyrl's own init, B = 0,
    computes the base model). trainer.model is the object given, holding the trained adapter."""
    from transformers import AutoModelForCausalLM

    model = _peft_model(tiny_model_dir)
    given = _logits(model)
    base = _logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    assert not torch.allclose(given, base, atol=1e-2), "the adapter changes the model"
    trainer = GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, learning_rate=1e-9))
    assert trainer.policy.lora.rank == 4 and trainer.policy.lora.alpha == 8
    assert trainer.policy.lora.target_modules == ("q_proj", "v_proj")
    assert trainer.model is model
    trainer.train()
    merged = _logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model"))
    assert torch.allclose(merged, given, atol=1e-4)
    assert trainer.model is model and torch.allclose(_logits(model), merged, atol=1e-5)
    trainer.save_model(str(tmp_path / "saved"))
    loaded = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                            str(tmp_path / "saved"))
    assert torch.allclose(_logits(loaded), merged, atol=1e-5)
    # the base polyrl trained on is the base as given, not merged, and the script's object is unmerged
    assert torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "initial_model")), base)
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_an_adapter_loaded_to_train_further_starts_from_its_saved_weights(tiny_model_dir, tmp_path):
    """PeftModel.from_pretrained(base, dir, is_trainable=True), as a script continuing an adapter
    writes it: its config read back from adapter_config.json translates, its weights are the start."""
    from transformers import AutoModelForCausalLM

    _peft_model(tiny_model_dir).save_pretrained(str(tmp_path / "adapter"))
    loaded = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                            str(tmp_path / "adapter"), is_trainable=True)
    given = _logits(loaded)
    trainer = GRPOTrainer(model=loaded, reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, learning_rate=1e-9))
    trainer.train()
    assert torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model")), given, atol=1e-4)


def test_a_peft_model_s_first_step_log_probs_are_its_own(tiny_model_dir, tmp_path):
    """With a KL term TRL's reference is a frozen copy of the adapter as given: the first step's
    policy (the adapter as given) and reference compute the same log-probs, so its KL is 0; a
    policy started from another init, or a reference without the adapter, gives a KL above 0.
    The adapter here is named "mine" (peft saves it in a subfolder of that name)."""
    model = _peft_model(tiny_model_dir, adapter_name="mine")
    trainer = GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, beta=0.1))
    trainer.train()
    first = trainer.summary["history"][0]
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)


def test_evaluate_before_train_evaluates_the_peft_model_as_given(tiny_model_dir, tmp_path):
    """TRL evaluates the model it holds: before train() the PeftModel with its adapter, not the base."""
    model = _peft_model(tiny_model_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(), eval_dataset=_dataset(2),
                          args=_args(tmp_path))
    trainer.evaluate()
    engine = trainer._eval_engines[1].generate.raw
    with torch.no_grad():
        ours = engine.model(torch.tensor([list(IDS)])).logits
    assert torch.allclose(ours, _logits(model), atol=1e-5)


def test_the_torch_engine_starts_from_the_initial_adapter(tiny_model_dir, tmp_path):
    """The backend part alone: a train engine given ``initial_adapter`` scores what the PeftModel
    that saved it computes."""
    from polyrl.types import EngineConfig, LoraConfig
    from polyrl_torch.engine import TorchEngine

    model = _peft_model(tiny_model_dir)
    model.save_pretrained(str(tmp_path / "adapter"))
    lora = LoraConfig(rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    engine = TorchEngine(EngineConfig(model=tiny_model_dir, lora=lora,
                                      options={"initial_adapter": str(tmp_path / "adapter")}))
    with torch.no_grad():
        ours = engine.model(torch.tensor([list(IDS)])).logits
    assert torch.allclose(ours, _logits(model), atol=1e-5)
    with pytest.raises(ConfigError) as err:  # another rank than [lora]'s: refused, not half loaded
        TorchEngine(EngineConfig(model=tiny_model_dir, lora=LoraConfig(rank=8, alpha=8, target_modules=("q_proj",)),
                                 options={"initial_adapter": str(tmp_path / "adapter")}))
    assert err.value.field == "backends.options.initial_adapter"


def test_a_peft_model_s_init_lora_weights_is_past(tiny_model_dir, tmp_path):
    """init_lora_weights (refused in a peft_config: polyrl inits its own way) only said how the
    adapter given was made: its weights are what training starts from."""
    from transformers import AutoModelForCausalLM

    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                peft.LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights="gaussian"))
    trainer = GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(), args=_args(tmp_path))
    assert trainer.policy.lora.rank == 4 and (tmp_path / "run" / "initial_adapter" / "adapter_model.safetensors").is_file()


def test_a_peft_model_with_two_adapters_is_one_error(tiny_model_dir, tmp_path):
    model = _peft_model(tiny_model_dir)
    model.add_adapter("other", peft.LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(), args=_args(tmp_path))
    assert err.value.field == "model" and "2 adapters ('default', 'other')" in str(err.value)
    assert "delete_adapter" in err.value.fix and "\n" not in str(err.value)


def test_a_non_lora_peft_model_is_one_error(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                peft.IA3Config(target_modules=["k_proj", "down_proj"],
                                               feedforward_modules=["down_proj"], task_type="CAUSAL_LM"))
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(), args=_args(tmp_path))
    assert err.value.field == "model" and "a IA3 adapter; polyrl trains LoRA adapters only" in str(err.value)


def test_a_peft_model_with_peft_config_or_modules_to_save_is_one_error(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    with pytest.raises(ConfigError) as err:  # TRL refuses both too
        GRPOTrainer(model=_peft_model(tiny_model_dir), reward_funcs=[short], train_dataset=_dataset(),
                    args=_args(tmp_path), peft_config=peft.LoraConfig(r=4))
    assert err.value.field == "peft_config" and "remove peft_config" in err.value.fix
    saving = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                 peft.LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=saving, reward_funcs=[short], train_dataset=_dataset(), args=_args(tmp_path))
    assert err.value.field == "model" and "modules_to_save" in str(err.value)
    assert not (tmp_path / "run" / "initial_adapter").exists()
    assert json.dumps(err.value.fix)  # one line


@pytest.mark.parametrize("targets, named", [(["q_proj", "v_proj", "lm_head"], "adapts lm_head (outside the decoder"),
                                            (["q_proj", "embed_tokens"], "adapts model.embed_tokens (outside"),
                                            (["q_proj", "v_proj", "c_attn"], "lists target_modules 'c_attn'")])
def test_a_peft_model_adapting_layers_polyrl_cannot_is_refused_as_the_trainer_is_built(tiny_model_dir, tmp_path,
                                                                                       targets, named):
    """peft adapts the output head or the embeddings when named, and skips a name that matches
    nothing; polyrl's engine adapts the decoder blocks' linear layers and refused these only at
    train(), after saving the model, naming a peft_config the script never passed."""
    from transformers import AutoModelForCausalLM

    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"))
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=model, reward_funcs=[short], train_dataset=_dataset(), args=_args(tmp_path))
    assert err.value.field == "model" and named in err.value.message, err.value.message
    assert "linear layers" in (err.value.fix or "")
    assert not (tmp_path / "run" / "initial_model").exists()  # refused before anything was saved


def test_the_merged_reference_of_a_tied_embedding_model_is_peft_s_merge_and_unload(tmp_path):
    """TRL's KL reference for a PeftModel (beta > 0) is base and adapter merged; polyrl computes it
    from the tensors (``save_merged``), the script's model left unmerged. On a model whose output
    head is its embedding matrix (SmolLM2's tie_word_embeddings), the folder must load as peft's
    ``merge_and_unload`` of the same model: every weight, the head still tied, the same logits."""
    import copy

    from transformers import AutoModelForCausalLM

    from polyrl.testing.tiny_model import build_tiny_model
    from polyrl.trl_peft_model import save_merged

    folder = build_tiny_model(tmp_path / "tied", arch="llama", tie_word_embeddings=True)
    base = AutoModelForCausalLM.from_pretrained(folder)
    assert base.lm_head.weight is base.model.embed_tokens.weight
    torch.manual_seed(3)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                      target_modules=["q_proj", "v_proj", "o_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    expected = copy.deepcopy(model).merge_and_unload()
    save_merged(model, "default", tmp_path / "reference")
    ours = AutoModelForCausalLM.from_pretrained(tmp_path / "reference")
    assert ours.config.tie_word_embeddings and ours.lm_head.weight is ours.model.embed_tokens.weight
    theirs = expected.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs[key]), key
    assert torch.equal(_logits(ours), _logits(expected))
    assert not torch.equal(_logits(ours), _logits(AutoModelForCausalLM.from_pretrained(folder)))
    assert any("lora_A" in name for name, _ in model.named_parameters())  # the script's model left unmerged


def test_a_peft_models_merged_reference_in_each_checkpoint_has_the_umask_modes(tiny_model_dir, tmp_path):
    """The merged reference polyrl saves for a KL term (safetensors writes 0600) is hard-linked into
    each checkpoint, whose umask modes no longer reach a linked file (it may be the user's own): it
    gets them as it is saved, so the checkpoint stays readable as the rest of the run's files."""
    import os

    from polyrl import checkpoint

    before = os.umask(0o022)
    try:
        trainer = GRPOTrainer(model=_peft_model(tiny_model_dir), reward_funcs=[short], train_dataset=_dataset(),
                              args=_args(tmp_path, beta=0.1))
        trainer.train()
    finally:
        os.umask(before)
    kept = checkpoint.latest_checkpoint(tmp_path / "run" / "checkpoints") / "initial_reference"
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in kept.iterdir() if p.is_file()}
    assert "model.safetensors" in modes and set(modes.values()) == {"0o644"}, modes
