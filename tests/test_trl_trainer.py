"""polyrl.trl.GRPOTrainer: a TRL script with its import changed trains on polyrl, with TRL's
own GRPOConfig, a 🤗 Dataset and TRL-style reward functions; what polyrl cannot honour is one
ConfigError naming the argument, before any model loads. More in test_trl_trainer_more.py (two
files, so ``--dist loadfile`` runs them on two workers)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset as _dataset, short  # noqa: E402


_args = functools.partial(grpo_args, max_steps=2)  # float32, as these tests' numbers were taken


@pytest.fixture(scope="module")
def two_step_run(tiny_model_dir, tmp_path_factory):
    """The plain 2-step run (``_args``, ``short``, 4 prompts) that several tests only read: trained
    once per module. Tests read it and write their own files elsewhere (save_state adds its one file)."""
    where = tmp_path_factory.mktemp("two_step_run")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(where), train_dataset=_dataset())
    return trainer, trainer.train(), where


def test_a_trl_script_with_its_import_changed_trains_and_saves(two_step_run, tmp_path):
    trainer, out, run_dir = two_step_run
    assert out.global_step == 2 and trainer.state.global_step == 2
    assert out.training_loss == pytest.approx(sum(m["loss"] for m in trainer.summary["history"]) / 2)
    assert out.metrics["train_loss"] == out.training_loss and out.metrics["train_runtime"] > 0
    # TRL's names in the log history, polyrl's files in output_dir
    assert [m["step"] for m in trainer.state.log_history] == [1, 2, 2]  # the last: transformers' train summary
    assert "reward" in trainer.state.log_history[-2] and "rewards/short/mean" in trainer.state.log_history[-2]
    assert "cispo_clip_ratio" not in trainer.state.log_history[-2]  # TRL logs it for loss_type "cispo" only
    assert trainer.state.log_history[-1] == {**out.metrics, "step": 2}
    lines = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    trainer.save_model(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "config.json").is_file()
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "saved").iterdir())


def test_save_model_into_the_trained_model_folder_writes_training_args_bin_and_keeps_it_ours(two_step_run, tmp_path):
    """``save_model`` into the folder polyrl exported the trained model to returned
    without a word and wrote no training_args.bin, which TRL's save writes there. Written now, the
    trainer still takes the folder for its own run's (its record of the files follows the file added)."""
    import torch

    trainer = two_step_run[0]
    exported = Path(trainer.summary["model"])
    trainer.save_model(str(exported))
    args = torch.load(exported / "training_args.bin", weights_only=False)
    assert type(args) is type(trainer.args) and args.max_steps == 2
    trainer.save_model(str(tmp_path / "again"))
    assert (tmp_path / "again" / "training_args.bin").is_file() and (tmp_path / "again" / "config.json").is_file()


def test_trls_batch_arithmetic_reaches_the_run(tiny_model_dir, tmp_path):
    """per_device_train_batch_size 4 completions in groups of num_generations 2: 2 prompts a step."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, max_steps=1),
                          train_dataset=_dataset())
    trainer.train()
    completions = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert len(completions) == 4 and len({c["prompt"] for c in completions}) == 2
    assert all(c["finish_reason"] in ("stop", "length") for c in completions)
    assert trainer.summary["history"][0]["completions/max_length"] <= 6  # max_completion_length


def test_resume_from_checkpoint_continues_the_run(tiny_model_dir, tmp_path):
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1, save_steps=1),
                        train_dataset=_dataset())
    first.train()
    again = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=2, save_steps=1),
                        train_dataset=_dataset())
    out = again.train(resume_from_checkpoint=True)
    assert out.global_step == 2
    assert [m["step"] for m in again.state.log_history] == [1, 2, 2]  # then the train summary


def test_resuming_where_no_checkpoint_is_refused_as_trl_does(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset())
    with pytest.raises(ConfigError) as err:
        trainer.train(resume_from_checkpoint=True)
    assert err.value.field == "resume_from_checkpoint"


def test_a_model_object_is_trained_from_a_saved_copy(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():  # an edited model: its weights are no longer the folder's
        model.lm_head.weight.mul_(0.5)
    trainer = GRPOTrainer(model=model, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                          train_dataset=_dataset())
    saved = Path(trainer.model_path)
    assert saved == tmp_path / "run" / "initial_model"
    reloaded = AutoModelForCausalLM.from_pretrained(saved)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    assert (saved / "tokenizer_config.json").is_file()
    assert trainer.train().global_step == 1


def _weights(folder):
    from safetensors.torch import load_file

    return {k: v for f in sorted(Path(folder).glob("*.safetensors")) for k, v in load_file(f).items()}


def _scaled_model(folder, scale: float):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def test_a_trainer_whose_saved_model_a_later_trainer_replaced_is_refused_not_trained_on_it(tiny_model_dir, tmp_path):
    """Two GRPOTrainers built in one notebook with the same GRPOConfig (one output_dir), each given
    a model object: the second's save replaced the first's initial_model, and the first's train()
    trained the second's model, then put those weights into the first's model object, silently."""
    import torch

    first_model, second_model = _scaled_model(tiny_model_dir, 0.5), _scaled_model(tiny_model_dir, 1.0)
    before = first_model.lm_head.weight.clone()
    first = GRPOTrainer(model=first_model, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    second = GRPOTrainer(model=second_model, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                         train_dataset=_dataset())
    with pytest.raises(ConfigError) as err:
        first.train()
    assert err.value.field == "output_dir"
    assert str(err.value) == (
        f"output_dir: another GRPOTrainer built after this one saved its own models into the same output_dir "
        f"({tmp_path / 'run'}), replacing {tmp_path / 'run' / 'initial_model'}: this trainer would train those, not "
        "the ones given to it. Fix: give each GRPOTrainer its own output_dir (GRPOConfig(output_dir=...)), or "
        "build this trainer again")
    with pytest.raises(ConfigError, match="another GRPOTrainer built after this one"):
        first.save_model(str(tmp_path / "saved"))  # the copy it would save is the second's model too
    assert torch.equal(first_model.lm_head.weight, before)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step
    assert second.train().global_step == 1  # the newest trainer there trains its own model


@pytest.mark.slow
def test_two_trainers_built_before_either_trains_each_train_their_own_model(tiny_model_dir, tmp_path):
    """Built side by side (own output_dirs) and trained one after the other, each trains exactly as
    if it had been built alone: no state shared through the process (registry, seeds, engines)."""
    import torch

    first = GRPOTrainer(model=_scaled_model(tiny_model_dir, 0.5), reward_funcs=[short],
                        args=_args(tmp_path / "a", max_steps=1, learning_rate=1e-2), train_dataset=_dataset())
    second = GRPOTrainer(model=_scaled_model(tiny_model_dir, 1.0), reward_funcs=[short],
                         args=_args(tmp_path / "b", max_steps=1, learning_rate=1e-2), train_dataset=_dataset())
    second.train()
    first.train()
    alone = GRPOTrainer(model=_scaled_model(tiny_model_dir, 0.5), reward_funcs=[short],
                        args=_args(tmp_path / "alone", max_steps=1, learning_rate=1e-2), train_dataset=_dataset())
    alone.train()
    trained, expected = _weights(tmp_path / "a" / "run" / "model"), _weights(tmp_path / "alone" / "run" / "model")
    assert all(torch.equal(trained[k], expected[k]) for k in expected)
    other = _weights(tmp_path / "b" / "run" / "model")
    assert any(not torch.equal(trained[k], other[k]) for k in other)  # the second's model is another one


def test_the_model_object_given_holds_the_trained_weights_after_train(tiny_model_dir, tmp_path):
    """TRL trains the object a script passes, and scripts use it afterwards (model.save_pretrained,
    generate): it must not silently stay the untrained model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(model=model, reward_funcs=[short], args=_args(tmp_path, max_steps=1, learning_rate=1e-2),
                          train_dataset=_dataset())
    assert trainer.model is model
    trainer.train()
    trained = _weights(tmp_path / "run" / "model")
    assert trainer.model is model
    state = model.state_dict()
    changed = [k for k in trained if not torch.equal(before[k], trained[k])]
    assert changed, "one step at lr 1e-2 changes some weight"
    assert all(torch.equal(state[k], trained[k]) for k in trained)


def test_trainer_model_is_the_folders_model_before_and_the_trained_one_after(tiny_model_dir, tmp_path):
    import torch

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1,
                                                                              learning_rate=1e-2),
                          train_dataset=_dataset())
    initial = _weights(tiny_model_dir)
    assert all(torch.equal(trainer.model.state_dict()[k], v) for k, v in initial.items())
    trainer.save_model(str(tmp_path / "untrained"))  # TRL saves the model it holds, trained or not
    assert all(torch.equal(_weights(tmp_path / "untrained")[k], v) for k, v in initial.items())
    trainer.train()
    trained = _weights(tmp_path / "run" / "model")
    assert any(not torch.equal(trained[k], initial[k]) for k in trained)
    assert all(torch.equal(trainer.model.state_dict()[k], v) for k, v in trained.items())


def test_a_later_run_sets_aside_the_results_and_state_an_earlier_trainer_saved(tiny_model_dir, tmp_path):
    """Trainer A trains and saves its metrics and state; trainer B then starts fresh in the same
    output_dir. A's all_results.json, train_results.json and trainer_state.json stayed in the
    output_dir (only checkpoints, model, logs and curves were set aside), and B's save_metrics()
    merged into A's all_results.json: A's keys B does not write were read as B's. They go into
    previous/ with the rest of A's run."""
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    first.train()
    first.save_metrics("train", {"train_loss": 1.0, "only_a": 7.0})
    first.save_state()
    second = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                         train_dataset=_dataset())
    second.train()
    run = tmp_path / "run"
    assert not (run / "trainer_state.json").exists()  # old code: A's, left in B's output_dir
    second.save_metrics("train", {"train_loss": 2.0})
    assert json.loads((run / "all_results.json").read_text()) == {"train_loss": 2.0}  # old code: only_a kept
    (aside,) = (run / "previous").iterdir()
    assert json.loads((aside / "all_results.json").read_text()) == {"train_loss": 1.0, "only_a": 7.0}
    assert json.loads((aside / "train_results.json").read_text()) == {"train_loss": 1.0, "only_a": 7.0}
    assert json.loads((aside / "trainer_state.json").read_text())["log_history"] == \
        json.loads(json.dumps(first.state.log_history))


def test_a_later_run_sets_aside_results_of_any_split_name(tiny_model_dir, tmp_path):
    """transformers' save_metrics writes ``{split}_results.json`` for any split; a fresh start set
    aside only train/eval/test/predict's, so trainer A's ``validation_results.json`` stayed beside
    B's files as if B's. The split files polyrl wrote are recorded and go aside with A's run; a
    user's own ``*_results.json`` polyrl did not write stays."""
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    first.train()
    first.save_metrics("validation", {"validation_loss": 1.5})
    first.save_metrics("train", {"train_loss": 1.0})
    run = tmp_path / "run"
    (run / "my_results.json").write_text("{}")  # the user's, not a save_metrics split of polyrl's
    second = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                         train_dataset=_dataset())
    second.train()
    assert not (run / "validation_results.json").exists()  # old code: A's, left in B's output_dir
    (aside,) = (run / "previous").iterdir()
    assert json.loads((aside / "validation_results.json").read_text()) == {"validation_loss": 1.5}
    assert json.loads((aside / "all_results.json").read_text()) == {"validation_loss": 1.5, "train_loss": 1.0}
    assert (run / "my_results.json").read_text() == "{}"
    second.save_metrics("validation", {"validation_loss": 2.5})
    third = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    third.train()
    assert not (run / "validation_results.json").exists()  # B's too: the record went aside and came back
    assert sorted(p.name for p in (run / "previous").iterdir() if (p / "validation_results.json").exists()) == \
        sorted(p.name for p in (run / "previous").iterdir())


def test_results_of_a_trainer_that_never_trained_are_not_merged_into_a_later_runs(tiny_model_dir, tmp_path):
    """Trainer A saves metrics but never trains (no checkpoint, no model: no earlier run to set
    aside), so its all_results.json stayed and B's save_metrics() merged into it: A's keys were read
    as B's. They go into previous/results-<time>/ (never pruned as a run). What B itself saved
    before its own train() stays B's, with an earlier run set aside (old code: moved with it) or not."""
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    first.save_metrics("eval", {"eval_loss": 1.0, "only_a": 7.0})
    first.save_state()
    run = tmp_path / "run"
    second = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                         train_dataset=_dataset())
    second.save_metrics("baseline", {"baseline_loss": 3.0})  # B's own, before its train()
    second.train()
    second.save_metrics("train", {"train_loss": 2.0})
    # old code: {"eval_loss": 1.0, "only_a": 7.0, "baseline_loss": 3.0, "train_loss": 2.0}
    assert json.loads((run / "all_results.json").read_text()) == {"baseline_loss": 3.0, "train_loss": 2.0}
    assert not (run / "eval_results.json").exists() and not (run / "trainer_state.json").exists()
    assert json.loads((run / "baseline_results.json").read_text()) == {"baseline_loss": 3.0}
    (kept,) = (run / "previous").glob("results-*")
    assert json.loads((kept / "eval_results.json").read_text()) == {"eval_loss": 1.0, "only_a": 7.0}
    # A's alone: B's save before its train() moved A's aside first (old code: B's baseline_loss merged in)
    assert json.loads((kept / "all_results.json").read_text()) == {"eval_loss": 1.0, "only_a": 7.0}
    assert (kept / "trainer_state.json").is_file()
    # C saves before its train() with B's finished run there: C's stays, B's goes aside with B's run
    third = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                        train_dataset=_dataset())
    third.save_metrics("warmup", {"warmup_loss": 4.0})
    third.train()
    assert json.loads((run / "warmup_results.json").read_text()) == {"warmup_loss": 4.0}
    assert json.loads((run / "all_results.json").read_text()) == {"warmup_loss": 4.0}  # old code: B's keys too
    assert not (run / "baseline_results.json").exists()
    (aside,) = [p for p in (run / "previous").iterdir() if not p.name.startswith("results-")]
    assert json.loads((aside / "baseline_results.json").read_text()) == {"baseline_loss": 3.0}
    # B's alone (old code: C's pre-train keys merged in), back with B's run from where C's save moved it
    assert json.loads((aside / "all_results.json").read_text()) == {"baseline_loss": 3.0, "train_loss": 2.0}
    assert len(list((run / "previous").glob("results-*"))) == 1  # A's; the one C's save made is empty, gone


def test_a_trainer_keeps_its_own_trained_model_after_a_later_run_in_its_output_dir(tiny_model_dir, tmp_path):
    """Trainer A trains, then trainer B trains in the same output_dir (B's start sets A's run aside
    into previous/ and writes its own model/): A's save_model(), model and evaluate() read
    output_dir/model, B's weights, without a word, and A's save_metrics()/save_state() wrote over
    B's files. They read (and write) A's own run, where B set it aside; and with that copy gone
    too, one error naming the call and the fix."""
    import shutil

    import torch

    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1,
                                                                            learning_rate=1e-2),
                        train_dataset=_dataset())
    first.train()
    mine = _weights(tmp_path / "run" / "model")
    second = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short],
                         args=_args(tmp_path, max_steps=1, learning_rate=5e-2), train_dataset=_dataset())
    second.train()
    theirs = _weights(tmp_path / "run" / "model")
    assert any(not torch.equal(theirs[k], mine[k]) for k in mine)
    # A's save_metrics()/save_state() after B's: old code wrote them over B's files in output_dir
    second.save_metrics("train", {"train_loss": 2.0})
    second.save_state()
    first.state.log_history.append({"mine": 1})
    first.save_metrics("train", {"train_loss": 1.0})
    first.save_state()
    (aside,) = (tmp_path / "run" / "previous").iterdir()
    for folder, loss, trainer in ((tmp_path / "run", 2.0, second), (aside, 1.0, first)):
        assert json.loads((folder / "all_results.json").read_text()) == {"train_loss": loss}
        assert json.loads((folder / "train_results.json").read_text()) == {"train_loss": loss}
        state = json.loads((folder / "trainer_state.json").read_text())
        assert state["log_history"] == json.loads(json.dumps(trainer.state.log_history))
    assert (aside / "model").is_dir() and (aside / "metrics.jsonl").is_file()  # beside A's own run
    first.save_model(str(tmp_path / "saved"))
    saved = _weights(tmp_path / "saved")
    assert all(torch.equal(saved[k], v) for k, v in mine.items())
    assert all(torch.equal(first.model.state_dict()[k], v) for k, v in mine.items())
    assert Path(first._model_source("evaluate")).parent.parent.name == "previous"  # what evaluate() loads
    shutil.rmtree(tmp_path / "run" / "previous")
    with pytest.raises(ConfigError) as err:
        first.save_model(str(tmp_path / "saved-again"))
    assert err.value.field == "save_model"
    assert str(err.value).startswith(f"save_model: the model this trainer trained ({tmp_path / 'run' / 'model'}) "
                                     "was replaced by a later run in the same output_dir")
    assert "own output_dir (GRPOConfig(output_dir=...))" in err.value.fix
    assert not (tmp_path / "saved-again").exists()
    before = (tmp_path / "run" / "trainer_state.json").read_text()
    with pytest.raises(ConfigError) as err:  # A's run is gone: its files are not written over B's
        first.save_state()
    assert err.value.field == "save_state" and "replaced by a later run" in str(err.value)
    assert (tmp_path / "run" / "trainer_state.json").read_text() == before


def test_trainer_state_is_transformers_own_before_and_after_train(tiny_model_dir, two_step_run, tmp_path):
    """trainer.state is a transformers TrainerState (TRL scripts read its fields and call its
    save_to_json) and train() returns transformers' TrainOutput: they were polyrl NamedTuples
    without max_steps, best_model_checkpoint or save_to_json."""
    from transformers import TrainerState
    from transformers.trainer_utils import TrainOutput

    fresh = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset())
    assert isinstance(fresh.state, TrainerState)
    assert (fresh.state.global_step, fresh.state.log_history, fresh.state.epoch) == (0, [], 0)  # its defaults
    trainer, out, run_dir = two_step_run  # the same script's trainer, trained
    assert isinstance(out, TrainOutput) and out.global_step == 2
    state = trainer.state
    assert isinstance(state, TrainerState) and state.is_world_process_zero
    assert (state.global_step, state.max_steps, state.epoch) == (2, 2, trainer.summary["history"][-1]["epoch"])
    assert state.best_model_checkpoint is None and state.num_train_epochs >= 1 and state.num_input_tokens_seen > 0
    assert [m["step"] for m in state.log_history] == [1, 2, 2]  # then the train summary
    state.save_to_json(str(tmp_path / "state.json"))
    loaded = TrainerState.load_from_json(str(tmp_path / "state.json"))
    assert (loaded.global_step, loaded.max_steps, loaded.log_history) == (2, 2, state.log_history)
    trainer.save_state()  # transformers' file, which its own load_from_json reads back
    assert TrainerState.load_from_json(str(run_dir / "run" / "trainer_state.json")).global_step == 2


def test_trls_bf16_default_trains_under_bfloat16_autocast_as_trl_does(tiny_model_dir, two_step_run, tmp_path):
    """TRL's GRPOConfig sets bf16 True unless fp16; transformers hands it to accelerate, whose autocast
    runs the forward passes in bfloat16 over the float32 weights on the CPU (use_cpu=True) as on a GPU.
    polyrl trained that unchanged config in float32. Now it is model.compute_dtype "bfloat16" (torch's
    autocast, float32 weights and AdamW state); bf16=False stays float32."""
    import accelerate

    assert trl.GRPOConfig(output_dir=str(tmp_path / "d"), use_cpu=True).bf16 is True  # TRL's default
    assert accelerate.Accelerator(cpu=True, mixed_precision="bf16").native_amp  # its autocast, on the CPU too
    histories = {}
    for bf16 in (True, False):  # bf16=False: two_step_run, the same script (grpo_args' bf16=False) already trained
        if bf16:
            trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                                  args=_args(tmp_path, bf16=True))
            assert (trainer.policy.dtype, trainer.policy.compute_dtype) == ("float32", "bfloat16")
            trainer.train()
        else:
            trainer = two_step_run[0]
            assert trainer.args.bf16 is False
            assert (trainer.policy.dtype, trainer.policy.compute_dtype) == ("float32", None)
        histories[bf16] = trainer.state.log_history[0]
        assert str(trainer.model.dtype) == "torch.float32"  # the trained weights stay float32, as TRL's
    assert histories[True]["entropy"] != histories[False]["entropy"]  # the same seed, computed in bfloat16


def test_peft_config_is_polyrls_lora(tiny_model_dir, tmp_path):
    peft = pytest.importorskip("peft")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), peft_config=peft.LoraConfig(r=4, lora_alpha=8))
    assert trainer.policy.lora is not None and trainer.policy.lora.rank == 4 and trainer.policy.lora.alpha == 8
    with pytest.raises(ConfigError) as err:  # named as the script wrote it, not polyrl's lora.dropout
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                    peft_config=peft.LoraConfig(r=4, lora_dropout=1.5))
    assert err.value.field == "peft_config.lora_dropout" and str(err.value).startswith("peft_config.lora_dropout")


def _logits(model, ids=(1, 5, 9, 13, 20)):
    import torch

    with torch.no_grad():
        return model.eval()(torch.tensor([list(ids)])).logits


def _lora_trainer(model, tmp_path, peft):
    return GRPOTrainer(model=model, reward_funcs=[short], args=_args(tmp_path, max_steps=1, learning_rate=1e-2),
                       train_dataset=_dataset(), peft_config=peft.LoraConfig(r=4, lora_alpha=8))


def test_with_peft_config_save_model_writes_the_adapter_and_tokenizer_trl_writes(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    """A TRL script reloads save_model's folder with peft (AutoPeftModelForCausalLM, or PeftModel
    on the base): the adapter files and the tokenizer, the base named so another directory loads it."""
    import torch
    from transformers import AutoModelForCausalLM

    peft = pytest.importorskip("peft")
    folder = Path(tiny_model_dir)
    monkeypatch.chdir(folder.parent.parent)  # the model given as a relative path, as scripts do
    trainer = _lora_trainer(str(Path(folder.parent.name) / folder.name), tmp_path, peft)
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    files = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json"} <= files
    assert not {"config.json", "model.safetensors"} & files  # the adapter alone, as PeftModel.save_pretrained
    merged = _logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model"))
    monkeypatch.chdir(tmp_path)  # elsewhere: the relative model path no longer names the folder
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not torch.allclose(_logits(base), merged, atol=1e-4), "one step at lr 1e-2 changes the adapter"
    loaded = peft.PeftModel.from_pretrained(base, str(tmp_path / "saved"))
    assert torch.allclose(_logits(loaded), merged, atol=1e-5)
    auto = peft.AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "saved"))
    assert Path(auto.peft_config["default"].base_model_name_or_path) == Path(tiny_model_dir).resolve()
    assert torch.allclose(_logits(auto), merged, atol=1e-5)


def test_the_runs_own_adapter_names_its_base_so_another_directory_loads_it(tiny_model_dir, tmp_path, monkeypatch):
    """output_dir/model/adapter (and each checkpoint's) is peft's folder too: a script loading it
    with AutoPeftModelForCausalLM from another directory finds the base model, given as a relative
    path ("./my_model"). It recorded the path as given, which names nothing from elsewhere."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    peft = pytest.importorskip("peft")
    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / "my_model")
    monkeypatch.chdir(work)
    trainer = GRPOTrainer(model="./my_model", reward_funcs=[short], train_dataset=_dataset(),
                          args=_args(tmp_path, max_steps=1, learning_rate=1e-2, output_dir="run"),
                          peft_config=peft.LoraConfig(r=4, lora_alpha=8))
    trainer.train()
    merged = _logits(AutoModelForCausalLM.from_pretrained(work / "run" / "model"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for adapter in (work / "run" / "model" / "adapter", work / "run" / "checkpoints" / "step-00000001" / "model" /
                    "adapter"):
        recorded = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
        assert recorded == str((work / "my_model").resolve())
        auto = peft.AutoPeftModelForCausalLM.from_pretrained(str(adapter))
        assert torch.allclose(_logits(auto), merged, atol=1e-5)


def test_with_peft_config_trainer_model_is_a_peft_model_merging_to_polyrls_model(tiny_model_dir, tmp_path):
    """TRL's trainer.model is a PeftModel (merge_and_unload, print_trainable_parameters); the one
    taken before train() is the same object after it, holding the trained adapter."""
    import torch
    from transformers import AutoModelForCausalLM

    peft = pytest.importorskip("peft")
    trainer = _lora_trainer(tiny_model_dir, tmp_path, peft)
    early = trainer.model
    assert isinstance(early, peft.PeftModel)
    assert torch.allclose(_logits(early), _logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir)))  # B = 0
    trainer.train()
    assert trainer.model is early
    trainable = sum(p.numel() for p in early.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in early.parameters())  # the adapters, as TRL's
    merged = _logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model"))
    assert torch.allclose(_logits(early), merged, atol=1e-5)
    assert torch.allclose(_logits(early.merge_and_unload()), merged, atol=1e-5)


def test_with_peft_config_save_model_before_train_saves_trls_untrained_adapter(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    peft = pytest.importorskip("peft")
    trainer = _lora_trainer(tiny_model_dir, tmp_path, peft)
    trainer.save_model(str(tmp_path / "untrained"))
    config = json.loads((tmp_path / "untrained" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    assert (tmp_path / "untrained" / "training_args.bin").is_file()  # transformers' _save writes it with an adapter too
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    plain = _logits(base)
    assert torch.allclose(_logits(peft.PeftModel.from_pretrained(base, str(tmp_path / "untrained"))), plain)


def test_a_model_object_with_peft_config_gets_the_trained_adapter_injected_as_trl_does(tiny_model_dir, tmp_path):
    """TRL's get_peft_model injects the adapter into the object given: after train() it computes
    the trained model, its own weights the base, and trainer.model is the PeftModel around it."""
    import torch
    from transformers import AutoModelForCausalLM

    peft = pytest.importorskip("peft")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base_weight = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    trainer = _lora_trainer(model, tmp_path, peft)
    trainer.train()
    assert isinstance(trainer.model, peft.PeftModel) and trainer.model.get_base_model() is model
    merged = _logits(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model"))
    assert torch.allclose(_logits(model), merged, atol=1e-5)
    assert torch.equal(model.model.layers[0].self_attn.q_proj.base_layer.weight, base_weight)


def test_polyrls_own_lora_config_has_no_untrained_peft_model_before_train(tiny_model_dir, tmp_path):
    from polyrl.types import LoraConfig

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                          peft_config=LoraConfig(rank=4))
    with pytest.raises(ConfigError) as err:
        trainer.model  # noqa: B018
    assert err.value.field == "model" and "peft.LoraConfig" in err.value.fix
    from polyrl.trl_peft import adapter_folder

    (tmp_path / "mlx" / "adapter").mkdir(parents=True)  # MLX's adapter: mlx-lm's files, not peft's
    (tmp_path / "mlx" / "adapter" / "adapters.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError) as err:
        adapter_folder(tmp_path / "mlx", "save_model")
    assert err.value.field == "save_model" and "AutoModelForCausalLM" in err.value.fix


def test_errors_name_the_scripts_arguments_not_polyrls():
    from polyrl.trl import _script_field

    assert _script_field("grpo_config.beta") == "args.beta"
    assert _script_field("grpo_config.epochs") == "grpo_config.epochs"  # polyrl's own name: no TRL field
    assert _script_field("grpo_config") == "args"
    assert _script_field("lora") == "peft_config" and _script_field("lora.rank") == "peft_config.r"
    assert _script_field("train_dataset") == "train_dataset" and _script_field(None) is None
    # polyrl's key set from one TRL field is that field when args is TRL's; from several, or polyrl's own args: kept
    assert _script_field("algorithm.scale_rewards", True) == "args.scale_rewards"
    assert _script_field("generation.max_new_tokens", True) == "args.max_completion_length"
    assert _script_field("train.steps", True) == "train.steps"  # max_steps or num_train_epochs
    assert _script_field("eval.samples", True) == "eval.samples"  # num_generations_eval or num_generations
    assert _script_field("algorithm.scale_rewards") == "algorithm.scale_rewards"


@pytest.mark.parametrize("kwargs, field", [({"scale_rewards": "grp"}, "args.scale_rewards"),
                                           ({"max_completion_length": 0}, "args.max_completion_length"),
                                           ({"top_entropy_quantile": 2.0}, "args.top_entropy_quantile")])
def test_a_value_polyrls_settings_refuse_is_named_as_the_scripts_args_field(tiny_model_dir, tmp_path, kwargs, field):
    """A TRL value polyrl's own settings refuse named polyrl's key (algorithm.scale_rewards,
    generation.max_new_tokens), which the script never wrote; polyrl's own GRPOConfig keeps them."""
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, **kwargs),
                    train_dataset=_dataset()).train()
    assert err.value.field == field, err.value
    from polyrl import api

    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                    args=api.GRPOConfig(output_dir=str(tmp_path / "own"), settings={"generation.max_new_tokens": 0})).train()
    assert err.value.field == "generation.max_new_tokens", err.value


@pytest.mark.parametrize("name, value", [
    ("rollout_func", short),
    ("quantization_config", object()),
    ("optimizers", (object(), None)),
])
def test_trainer_arguments_polyrl_would_not_use_are_refused_by_name(tiny_model_dir, tmp_path, name, value):
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                    **{name: value})
    assert err.value.field == name and err.value.fix


def test_a_users_optimizer_is_one_line_naming_the_grpo_config_fields(tiny_model_dir, tmp_path):
    """TRL's optimizers=(optimizer, scheduler), or a bare optimizer (it used to be a TypeError from
    tuple(optimizer)): one ConfigError saying why it is not used and which GRPOConfig fields are."""
    import torch

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    for given in [(optimizer, scheduler), optimizer, (None, scheduler)]:
        with pytest.raises(ConfigError, match=r"trains its own copy of the model") as err:
            GRPOTrainer(model=model, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                        optimizers=given)
        assert err.value.field == "optimizers" and "learning_rate" in err.value.fix and "warmup_steps" in err.value.fix
        assert "\n" not in str(err.value)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                optimizers=[None, None])  # TRL's default, as a list


def has_digit(completions, **kwargs):
    """A second TRL-style reward, weighted 0.5 below."""
    return [1.0 if any(ch.isdigit() for ch in c) else 0.0 for c in completions]


def _eval_records(tmp_path: Path) -> list[dict]:
    path = tmp_path / "run" / "eval_completions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trls_evaluation_during_training_logs_eval_reward_from_both_weighted_rewards(tiny_model_dir, tmp_path):
    """eval_strategy "steps": after each eval_steps, num_generations sampled completions per eval
    prompt, scored with every reward function and reward_weights; log_history gets TRL's eval_ entries."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short, has_digit], train_dataset=_dataset(),
                          eval_dataset=datasets.Dataset.from_list([{"prompt": f"Name {i} + 5.", "answer": "x"}
                                                                   for i in range(3)]),
                          args=_args(tmp_path, eval_strategy="steps", eval_steps=1, reward_weights=[1.0, 0.5]))
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_reward" in h]
    assert [h["step"] for h in evals] == [1, 2]  # eval_on_start unset: none before training
    records = _eval_records(tmp_path)
    assert {(r["phase"], r["greedy"]) for r in records} == {("during", False)}  # sampled only, as TRL
    for entry in evals:
        done = [r for r in records if r["after_steps"] == entry["step"]]
        assert len(done) == 3 * 2  # num_generations completions per eval prompt
        for r in done:  # both functions, weighted: recomputed here from the completion
            assert r["rewards"] == pytest.approx({"short": short([r["completion"]], ["x"])[0],
                                                  "has_digit": has_digit([r["completion"]])[0]})
            assert r["reward"] == pytest.approx(r["rewards"]["short"] + 0.5 * r["rewards"]["has_digit"])
        rewards = np.array([r["reward"] for r in done])
        assert entry["eval_reward"] == pytest.approx(rewards.mean())
        assert entry["eval_reward_std"] == pytest.approx(rewards.std(ddof=1))
        assert entry["eval_rewards/short/mean"] == pytest.approx(np.mean([r["rewards"]["short"] for r in done]))
        assert "eval_rewards/has_digit/std" in entry and entry["eval_completions/mean_length"] > 0
    # each evaluation follows its step's own entry, as TRL logs them
    assert [("eval_reward" in h, h["step"]) for h in trainer.state.log_history] == \
        [(False, 1), (True, 1), (False, 2), (True, 2), (False, 2)]  # then transformers' train summary


@pytest.mark.slow  # two runs, one of them TRL's own: tens of seconds; `make test-slow` (CI) runs it
def test_the_eval_entries_are_named_and_placed_as_trls_own_trainer_logs_them(tiny_model_dir, tmp_path):
    """The same script on TRL's GRPOTrainer: each of polyrl's eval_ names is one TRL logs, at the same
    steps and epochs (the values differ: another sampler, another run)."""
    def script(trainer_class, where):
        trainer = trainer_class(model=tiny_model_dir, reward_funcs=[short, has_digit], train_dataset=_dataset(),
                                eval_dataset=_dataset(3), args=_args(where, eval_strategy="steps", eval_steps=1,
                                                                     reward_weights=[1.0, 0.5]))
        trainer.train()
        return [h for h in trainer.state.log_history if any(k.startswith("eval_") for k in h)]

    ours, theirs = script(GRPOTrainer, tmp_path / "polyrl"), script(trl.GRPOTrainer, tmp_path / "trl")
    assert [(h["step"], h["epoch"]) for h in ours] == [(h["step"], h["epoch"]) for h in theirs] == [(1, 0.5), (2, 1.0)]
    for mine, trls in zip(ours, theirs):
        assert {"eval_reward", "eval_reward_std", "eval_rewards/short/mean", "eval_rewards/has_digit/std",
                "eval_completions/mean_length"} <= set(mine) <= set(trls)


def test_eval_on_start_and_the_end_of_training_are_evaluated(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                          eval_dataset=_dataset(2), args=_args(tmp_path, max_steps=1, eval_strategy="steps",
                                                               eval_steps=5, eval_on_start=True))
    trainer.train()
    assert [h["step"] for h in trainer.state.log_history if "eval_reward" in h] == [0, 1]  # before; at the end
    assert sorted({(r["phase"], r["after_steps"]) for r in _eval_records(tmp_path)}) == [("after", 1), ("before", 0)]


def test_a_resumed_run_keeps_the_eval_on_start_entry_in_its_log_history(tiny_model_dir, tmp_path):
    """TRL's resumed log_history (the checkpoint's trainer_state) keeps the step-0 evaluation; polyrl's
    rewound metrics.jsonl kept its line, but the resumed log_history and summary left it out."""
    def trainer(steps):
        return GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(),
                           eval_dataset=_dataset(2), args=_args(tmp_path, max_steps=steps, save_steps=1,
                                                                eval_strategy="steps", eval_steps=1,
                                                                eval_on_start=True))
    first = trainer(1)
    first.train()
    again = trainer(2)
    again.train(resume_from_checkpoint=True)
    assert [h["step"] for h in again.state.log_history if "eval_reward" in h] == [0, 1, 2]
    assert again.summary["eval_before"] == first.summary["eval_before"]
