"""TRL's ``GRPOTrainer(reward_processing_classes=...)``: a reward model in ``reward_funcs`` scores
text tokenized by the script's tokenizer, as TRL 1.16's ``_calculate_rewards`` tokenizes it, not by
the tokenizer saved in the model folder (the argument used to be refused); a sequence-classification
model object in ``reward_funcs`` is scored too (it used to be refused), saved with its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("polyrl_torch")
torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from reward_model_util import trl_scores  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory) -> str:
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("models") / "tiny-rm")


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory):
    """A tokenizer of another vocabulary mapping than the reward model folder's BPE one (one id per
    byte, all within the model's 512 embeddings), with no pad token (TRL then pads with the eos,
    which becomes the model's pad_token_id) and left padding (TRL pads reward inputs on the right)."""
    from transformers import AutoTokenizer

    from polyrl.testing.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path_factory.mktemp("models") / "bytes", tokenizer="bytes", num_layers=1,
                              hidden_size=32, num_heads=2, num_kv_heads=1, intermediate_size=32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = None
    tokenizer.padding_side = "left"
    return tokenizer


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


_args = grpo_args


def _dataset():
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(2)])


def test_a_reward_model_scores_with_the_scripts_tokenizer_as_trl(tiny_model_dir, rm_path, byte_tokenizer, tmp_path):
    """reward_processing_classes=[tokenizer, <ignored>, None] beside reward_funcs=[rm_folder,
    function, rm_object]: every logged score of the folder equals TRL's scoring of that prompt +
    completion with the script's tokenizer, and differs from scoring with the folder's own
    tokenizer; the model object (None: its name's tokenizer, as TRL loads it) scores as TRL's."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm_object = AutoModelForSequenceClassification.from_pretrained(rm_path)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_path, short, rm_object], args=_args(tmp_path),
                          train_dataset=_dataset(), reward_processing_classes=[byte_tokenizer, object(), None])
    assert trainer.reward_funcs[2] is rm_object  # TRL's list, as given
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert len(records) == 4
    texts = [r["prompt"] + r["completion"] for r in records]
    logged = np.array([r["rewards"]["reward_model"] for r in records])
    np.testing.assert_allclose(logged, trl_scores(rm_path, byte_tokenizer, texts), atol=1e-5, rtol=0)
    folders = trl_scores(rm_path, AutoTokenizer.from_pretrained(rm_path), texts)
    assert np.abs(logged - folders).min() > 1e-3  # the folder's tokenizer scores other numbers
    np.testing.assert_allclose([r["rewards"]["reward_model_2"] for r in records], folders, atol=1e-5, rtol=0)
    assert [r["rewards"]["short"] for r in records] == pytest.approx([-len(r["completion"]) / 10 for r in records])


def test_one_tokenizer_for_one_reward_model_and_none_keep_trls_meaning(rm_path, byte_tokenizer, tmp_path):
    """One tokenizer (not a list) with one reward: that tokenizer, saved where the reward model
    reads it; None: the folder's own tokenizer, no tokenizer option."""
    from transformers import AutoTokenizer

    from polyrl import api

    trainer = GRPOTrainer(model="m", reward_funcs=rm_path, args=_args(tmp_path), train_dataset=_dataset(),
                          reward_processing_classes=byte_tokenizer)
    folder = trainer._reward_tokenizers[0]
    assert folder and Path(folder).parent == tmp_path / "run" / "reward_tokenizers"
    assert AutoTokenizer.from_pretrained(folder).get_vocab() == byte_tokenizer.get_vocab()
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["q"], rewards=[rm_path],
                               reward_tokenizers=trainer._reward_tokenizers)
    assert config.rewards[0].options["tokenizer"] == folder
    plain = GRPOTrainer(model="m", reward_funcs=[rm_path], args=_args(tmp_path), train_dataset=_dataset(),
                        reward_processing_classes=[None])
    assert plain._reward_tokenizers == [None]


def test_a_reward_model_object_is_saved_with_the_scripts_tokenizer(rm_path, byte_tokenizer, tmp_path):
    """A model object in reward_funcs is saved with the tokenizer given for it, and that folder is
    the reward model polyrl scores with (reward_model's path); a causal LM is one clear error."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from polyrl.testing.tiny_model import build_tiny_llama

    rm_object = AutoModelForSequenceClassification.from_pretrained(rm_path)
    trainer = GRPOTrainer(model="m", reward_funcs=[short, rm_object], args=_args(tmp_path), train_dataset=_dataset(),
                          reward_processing_classes=[None, byte_tokenizer])
    folder = trainer._reward_entries[1]
    assert Path(folder) == tmp_path / "run" / "reward_models" / "reward_funcs_1" and trainer._reward_tokenizers == [None, None]
    assert AutoTokenizer.from_pretrained(folder).get_vocab() == byte_tokenizer.get_vocab()
    saved = AutoModelForSequenceClassification.from_pretrained(folder)
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), rm_object.state_dict().values()))
    causal = AutoModelForCausalLM.from_pretrained(build_tiny_llama(tmp_path / "lm"))
    with pytest.raises(ConfigError, match=r"reward_funcs\[0\] is a LlamaForCausalLM; a reward model is a sequence "
                                          r"classifier") as err:
        GRPOTrainer(model="m", reward_funcs=[causal], args=_args(tmp_path), train_dataset=_dataset(),
                    reward_processing_classes=byte_tokenizer)
    assert err.value.field == "reward_funcs[0]" and "AutoModelForSequenceClassification" in err.value.fix


@pytest.mark.parametrize("given, message", [
    (lambda tok: [tok], r"reward_processing_classes has 1 entry for 2 reward_funcs"),
    (lambda tok: [tok, None, None], r"reward_processing_classes has 3 entries for 2 reward_funcs"),
    (lambda tok: ["my-tokenizer", None], r"reward_processing_classes\[0\] is a str, not a tokenizer"),
])
def test_a_misaligned_or_wrong_reward_processing_class_is_one_clear_error(rm_path, byte_tokenizer, tmp_path,
                                                                          given, message):
    with pytest.raises(ConfigError, match=message) as err:
        GRPOTrainer(model="m", reward_funcs=[rm_path, short], args=_args(tmp_path), train_dataset=_dataset(),
                    reward_processing_classes=given(byte_tokenizer))
    assert err.value.field == "reward_processing_classes"
    assert "reward_funcs entry" in err.value.fix or "tokenizer saved in its folder" in err.value.fix
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_save_beside_another_ranks_same_save_keeps_one_whole_folder(tmp_path, monkeypatch):
    """Under a launcher every rank's GRPOTrainer saves the same tokenizers and model objects to
    the same folder: one rank's rename landing first (or its removal of an older save running
    beside another's) left the other a traceback (ENOTEMPTY, FileNotFoundError) instead of the run."""
    from polyrl import trl_reward_models

    target = tmp_path / "reward_tokenizers" / "reward_funcs_0"
    rename = trl_reward_models.os.rename

    def peer_first(src: str, dst: str) -> None:  # the peer rank's rename lands just before this one's
        if Path(dst) == target and not target.exists():
            target.mkdir()
            (target / "tokenizer.json").write_text("{}")
        rename(src, dst)

    monkeypatch.setattr(trl_reward_models.os, "rename", peer_first)
    got = trl_reward_models._save(target, lambda d: (Path(d) / "tokenizer.json").write_text("{}"))
    assert Path(got) == target and (target / "tokenizer.json").read_text() == "{}"
    assert _staging_folders(target.parent) == [] and (target.parent / "reward_funcs_0").is_dir()  # none left


def test_an_earlier_save_another_rank_is_removing_too_is_replaced(tmp_path, monkeypatch):
    """Two ranks removing the earlier run's save at once: the one whose rmtree finds a file already
    gone goes on (it was a FileNotFoundError traceback) and the folder holds the new save."""
    import shutil

    from polyrl import trl_reward_models

    target = tmp_path / "reward_tokenizers" / "reward_funcs_0"
    target.mkdir(parents=True)
    (target / "old.json").write_text("{}")
    rmtree = shutil.rmtree
    raced = []

    def peer_removes_first(path, *args, **kwargs):  # the peer deleted a file under this rank's walk
        if Path(path) == target and not raced:
            raced.append(True)
            rmtree(path)
            raise FileNotFoundError(2, "No such file or directory", str(target / "old.json"))
        return rmtree(path, *args, **kwargs)

    monkeypatch.setattr(trl_reward_models.shutil, "rmtree", peer_removes_first)
    trl_reward_models._save(target, lambda d: (Path(d) / "tokenizer.json").write_text("{}"))
    assert raced and sorted(p.name for p in target.iterdir()) == ["tokenizer.json"]


STAGED_SAVE = """
import sys, time
from pathlib import Path
from polyrl import trl_reward_models

def write(folder):
    (Path(folder) / "model.safetensors").write_bytes(bytes(4096))
    print("staging", flush=True)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.02)

trl_reward_models._save(Path(sys.argv[1]), write)
"""


def _staging_folders(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".reward_funcs_"))


def _saving(target: Path, go: Path):
    """A process part-way through saving a reward model to ``target``: its staging folder written,
    waiting for ``go`` to exist."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", STAGED_SAVE, str(target), str(go)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "staging", proc.communicate()
    return proc


def test_a_save_killed_part_way_leaves_no_lasting_staging_folder_and_a_live_one_is_kept(tmp_path):
    """kill -9 during a reward model's save left its staging folder (.reward_funcs_N-*, model-sized)
    on disk for good: the next save deletes it, but never the folder of a save another live process
    is writing there (it holds the staging lock), which then lands whole."""
    from polyrl import trl_reward_models

    target = tmp_path / "run" / "reward_models" / "reward_funcs_0"
    ours = lambda d: (Path(d) / "config.json").write_text("{}")  # noqa: E731
    killed = _saving(target, tmp_path / "never")
    killed.kill()
    killed.wait()
    assert len(_staging_folders(target.parent)) == 1
    trl_reward_models._save(target, ours)  # the next save (a rerun of the script)
    assert _staging_folders(target.parent) == [] and (target / "config.json").is_file()

    live = _saving(target, tmp_path / "go")
    try:
        [live_folder] = _staging_folders(target.parent)
        trl_reward_models._save(target, ours)  # another rank's save while the live one writes
        assert _staging_folders(target.parent) == [live_folder]  # not deleted under it
        (tmp_path / "go").touch()
        assert live.wait(timeout=60) == 0
    finally:
        live.kill()
    assert (target / "model.safetensors").stat().st_size == 4096  # the live save landed whole
    assert _staging_folders(target.parent) == []


def test_a_resume_deletes_what_a_killed_reward_model_save_left(toy, tmp_path):
    """The trainer's start in output_dir (a resume, a save) deletes the staging folders a killed save
    left there, as it deletes a killed prune's leftovers."""
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    out = tmp_path / "run"
    target = out / "reward_tokenizers" / "reward_funcs_1"
    killed = _saving(target, tmp_path / "never")
    killed.kill()
    killed.wait()
    assert len(_staging_folders(target.parent)) == 1
    config = RunConfig.from_dict({"model": {"path": "toy-model"}, "backends": {"train": "toy"},
                                  "generation": {"group_size": 4, "max_new_tokens": 8},
                                  "data": {"task": "arithmetic", "options": {"count": 16}},
                                  "rewards": [{"name": "toy_sevens"}],
                                  "train": {"steps": 1, "prompts_per_step": 4, "output_dir": str(out)}})
    Trainer(config).resume()
    assert _staging_folders(target.parent) == []


HOLDER = """
import sys, time
from pathlib import Path
from polyrl.run_lock import OutputDirLock
OutputDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_trainer_on_a_running_runs_output_dir_is_refused_before_it_writes(tiny_model_dir, rm_path,
                                                                                  byte_tokenizer, tmp_path):
    """A GRPOTrainer saves the script's model objects and tokenizers under output_dir when it is
    built; on the output_dir of a running run (another process holds its lock) the second one
    replaced that run's initial_model, reward_models and reward_tokenizers, and only its train()
    was refused. Now it is refused first, and the first run's files are byte for byte as they were."""
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    out = tmp_path / "run"
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    first_rm = AutoModelForSequenceClassification.from_pretrained(rm_path)
    GRPOTrainer(model=policy, reward_funcs=[rm_path, first_rm], args=_args(tmp_path), train_dataset=_dataset(),
                reward_processing_classes=[byte_tokenizer, None])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # the first run, running
        before = _files(out)
        assert {"initial_model", "reward_models", "reward_tokenizers"} <= {name.split("/")[0] for name in before}
        second_rm = AutoModelForSequenceClassification.from_pretrained(rm_path)
        with torch.no_grad():
            second_rm.score.weight.add_(1.0)  # other weights than the running run's
        with pytest.raises(ConfigError, match=f"in use by another trainer \\(pid {holder.pid}\\)") as err:
            GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=[rm_path, second_rm],
                        args=_args(tmp_path), train_dataset=_dataset(),
                        reward_processing_classes=[byte_tokenizer, None])
        assert "output_dir" in err.value.field and "another output_dir" in err.value.fix
        assert _files(out) == before
    finally:
        holder.kill()
        holder.wait()


def _trl_prepared_scores(model, tokenizer, texts):
    """TRL 1.16's ``_calculate_rewards`` on its own trainer's prepared reward model (accelerate's
    forward: under bf16 autocast where ``bf16``) and reward processing class."""
    batch = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return model(**batch).logits[:, 0].float().numpy()


def test_a_reward_model_under_trls_bf16_computes_in_bfloat16_as_trls(tiny_model_dir, rm_path, tmp_path):
    """TRL's bf16 (its default) makes accelerate wrap the reward model's forward in bfloat16
    autocast (its float32 weights, bfloat16 matmuls), as the policy's; polyrl scored it in float32,
    so a TRL config got other reward numbers here. Compared with TRL's own trainer's prepared
    reward model on the same texts, and unlike the float32 scores."""
    args = _args(tmp_path, bf16=True)
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_path], args=args, train_dataset=_dataset())
    assert theirs.accelerator.mixed_precision == "bf16"
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_path], args=_args(tmp_path / "polyrl", bf16=True),
                          train_dataset=_dataset())
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "polyrl" / "run" / "completions.jsonl").read_text().splitlines()]
    texts = [r["prompt"] + r["completion"] for r in records]
    logged = np.array([r["rewards"]["reward_model"] for r in records])
    # the step's completions in one batch, as TRL scores them (and polyrl's batch_size 8 does)
    bf16 = _trl_prepared_scores(theirs.reward_funcs[0], theirs.reward_processing_classes[0], texts)
    float32 = trl_scores(rm_path, theirs.reward_processing_classes[0], texts)
    assert np.abs(bf16 - float32).max() > 1e-4  # the two precisions score apart
    np.testing.assert_allclose(logged, bf16, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def bf16_rm_path(rm_path, tmp_path_factory) -> str:
    """The tiny reward model saved in bfloat16 (config.json records ``"dtype": "bfloat16"``)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = tmp_path_factory.mktemp("models") / "tiny-rm-bf16"
    AutoModelForSequenceClassification.from_pretrained(rm_path, dtype=torch.bfloat16).save_pretrained(folder)
    AutoTokenizer.from_pretrained(rm_path).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    return str(folder)


def _polyrl_reward_dtypes(trainer, monkeypatch) -> list:
    """The dtype polyrl's ``reward_model`` loads each reward model of ``trainer``'s run in: the run's
    RunConfig (built as train() builds it, nothing trained), each section's options loaded as the
    reward loads them."""
    from polyrl_torch.reward_model import DEFAULTS, load_reward_model
    from trl_util import captured_trainer_config

    built = captured_trainer_config(monkeypatch)
    trainer._polyrl_trainer(trainer.policy, trainer.grpo_config, None)
    sections = [s for s in built["config"].rewards if s.name == "reward_model"]
    return [load_reward_model(s.options["path"], "cpu", s.options.get("dtype", DEFAULTS["dtype"]))[0].dtype
            for s in sections]


@pytest.mark.parametrize("saved, kwargs", [
    ("bfloat16", None),  # TRL: from_pretrained's dtype "auto", the one config.json records
    ("bfloat16", {"dtype": "float32"}),
    ("float32", {"dtype": "bfloat16"}),
    ("bfloat16", {"dtype": "auto"}),
    ("float32", {"dtype": "auto"}),
])
def test_a_reward_model_folder_loads_in_trls_dtype(tiny_model_dir, rm_path, bf16_rm_path, saved, kwargs, tmp_path,
                                                   monkeypatch):
    """TRL 1.16 passes model_init_kwargs to its reward models' from_pretrained as they are (no
    float32 default there): polyrl's reward_model loads the folder in the dtype TRL's own trainer
    loaded it in, for the same GRPOConfig; it loaded float32 whatever the config said."""
    folder = bf16_rm_path if saved == "bfloat16" else rm_path
    extra = {} if kwargs is None else {"model_init_kwargs": dict(kwargs)}
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[folder], args=_args(tmp_path / "trl", **extra),
                             train_dataset=_dataset())
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[folder], args=_args(tmp_path / "polyrl", **extra),
                          train_dataset=_dataset())
    assert _polyrl_reward_dtypes(trainer, monkeypatch) == [theirs.reward_funcs[0].dtype]


def test_a_reward_model_object_loads_in_its_own_dtype_as_trl_scores_it(tiny_model_dir, bf16_rm_path, tmp_path,
                                                                        monkeypatch):
    """A model object in reward_funcs is scored by TRL as given (model_init_kwargs are for the
    folders it loads): polyrl loads its saved folder in the object's dtype."""
    from transformers import AutoModelForSequenceClassification

    rm_object = AutoModelForSequenceClassification.from_pretrained(bf16_rm_path)
    args = _args(tmp_path / "trl", model_init_kwargs={"dtype": "float32"})
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_object], args=args, train_dataset=_dataset())
    assert theirs.reward_funcs[0].dtype == torch.bfloat16
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_object], train_dataset=_dataset(),
                          args=_args(tmp_path / "polyrl", model_init_kwargs={"dtype": "float32"}))
    assert _polyrl_reward_dtypes(trainer, monkeypatch) == [torch.bfloat16]


def test_a_bfloat16_reward_model_scores_as_trls(tiny_model_dir, bf16_rm_path, tmp_path):
    """End to end: a bfloat16 reward-model folder (no model_init_kwargs) scores the run's
    completions as TRL's own trainer's reward model scores them, not as its float32 upcast does."""
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[bf16_rm_path], args=_args(tmp_path / "trl"),
                             train_dataset=_dataset())
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[bf16_rm_path], args=_args(tmp_path / "polyrl"),
                          train_dataset=_dataset())
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "polyrl" / "run" / "completions.jsonl").read_text().splitlines()]
    texts = [r["prompt"] + r["completion"] for r in records]
    logged = np.array([r["rewards"]["reward_model"] for r in records])
    trls = _trl_prepared_scores(theirs.reward_funcs[0], theirs.reward_processing_classes[0], texts)
    upcast = _trl_prepared_scores(theirs.reward_funcs[0].float(),  # (in place: after the bfloat16 scores)
                                  theirs.reward_processing_classes[0], texts)
    assert np.abs(trls - upcast).max() > 1e-4  # the two precisions score apart (atol 1e-5 below)
    np.testing.assert_allclose(logged, trls, atol=1e-5, rtol=0)


def test_model_init_kwargs_dtype_no_reward_model_loads_in_is_one_clear_error(tiny_model_dir, rm_path, tmp_path):
    """A dtype polyrl's reward_model cannot load in (the policy, an object, ignores model_init_kwargs
    as TRL does) is one ConfigError naming model_init_kwargs, before anything is saved."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ConfigError, match=r"model_init_kwargs\['dtype'\] = 'int8' is no dtype") as err:
        GRPOTrainer(model=policy, reward_funcs=[rm_path], train_dataset=_dataset(),
                    args=_args(tmp_path, model_init_kwargs={"dtype": "int8"}))
    assert err.value.field == "args.model_init_kwargs" and not (tmp_path / "run").exists()


def test_polyrls_own_config_keeps_the_reward_models_float32_default_and_a_trl_config_reads_auto(bf16_rm_path,
                                                                                                  tmp_path):
    """polyrl's own path (its GRPOConfig, a TOML config) is unchanged: no dtype option, the
    reward_model's float32 default. api.run with a trl.GRPOConfig (from_trl refuses
    model_init_kwargs) loads the folder as TRL does without them: "auto", its recorded bfloat16."""
    from polyrl import api
    from polyrl_torch.reward_model import load_reward_model

    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["q"], rewards=[bf16_rm_path])
    assert "dtype" not in config.rewards[0].options
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["q"], rewards=[bf16_rm_path],
                               grpo_config=_args(tmp_path))
    assert config.rewards[0].options["dtype"] == "auto"
    assert load_reward_model(bf16_rm_path, "cpu", "auto")[0].dtype == torch.bfloat16


def test_a_reward_model_object_keeps_its_own_dtype_under_polyrls_own_config(tiny_model_dir, rm_path, bf16_rm_path,
                                                                            tmp_path, monkeypatch):
    """TRL scores a model object in reward_funcs as given, whatever the config; with polyrl's own
    GRPOConfig (no model_init_kwargs) a bfloat16 object was loaded and scored in float32. A folder
    there keeps the reward_model's float32 default, as polyrl's TOML does."""
    from transformers import AutoModelForSequenceClassification

    from polyrl import api

    rm_object = AutoModelForSequenceClassification.from_pretrained(bf16_rm_path)
    assert rm_object.dtype == torch.bfloat16
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_object, bf16_rm_path], train_dataset=_dataset(),
                          args=api.GRPOConfig(output_dir=str(tmp_path / "own"), steps=1))
    assert _polyrl_reward_dtypes(trainer, monkeypatch) == [torch.bfloat16, torch.float32]


def test_log_history_names_each_reward_model_as_trl_does(tiny_model_dir, rm_path, tmp_path, capfd):
    """TRL logs a reward model under the basename of its model id (``config._name_or_path``: the
    folder given, or the object's): ``rewards/tiny-rm/mean``, ``rewards/judge-rm/mean``. polyrl
    logged ``rewards/reward_model/mean`` and ``rewards/reward_model_2/mean``, so a script reading
    ``log_history[-1]["rewards/judge-rm/mean"]`` got a KeyError. Two reward models TRL names alike
    (two folders ``tiny-rm``) share TRL's key, the mean of both, as TRL's ``log`` averages what was
    appended to one name, and a warning says so; each keeps its own polyrl key."""
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model
    from transformers import AutoModelForSequenceClassification
    from trl.trainer.utils import get_config_model_id

    judge = AutoModelForSequenceClassification.from_pretrained(
        build_tiny_reward_model(tmp_path / "models" / "judge-rm", seed=1))
    twin = build_tiny_reward_model(tmp_path / "other" / "tiny-rm", seed=2)  # TRL's name as rm_path's
    assert [get_config_model_id(judge.config).split("/")[-1], twin.split("/")[-1]] == ["judge-rm", "tiny-rm"]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_path, judge, twin], args=_args(tmp_path),
                          train_dataset=_dataset())
    trainer.train()
    [entry] = [e for e in trainer.state.log_history if "reward" in e and "train_runtime" not in e]
    [step] = trainer.summary["history"]
    assert entry["rewards/judge-rm/mean"] == pytest.approx(step["reward/reward_model_2/mean"])
    assert entry["rewards/judge-rm/std"] == pytest.approx(step["reward/reward_model_2/std"])
    assert step["reward/reward_model/mean"] != pytest.approx(step["reward/reward_model_3/mean"])  # two models
    assert entry["rewards/tiny-rm/mean"] == pytest.approx((step["reward/reward_model/mean"]
                                                           + step["reward/reward_model_3/mean"]) / 2)
    assert {k for k in entry if k.startswith("rewards/")} == {
        f"rewards/{name}/{stat}" for name in ("tiny-rm", "judge-rm") for stat in ("mean", "std")}
    said = capfd.readouterr().err
    assert "share TRL's name 'tiny-rm'" in said and "reward/reward_model_3/mean" in said, said
    assert said.count("share TRL's name") == 1  # told once; judge-rm shares no name


def test_reward_entries_name_reward_models_as_trl(rm_path, capfd):
    """``api.reward_entries`` gives each reward model's TRL name to the run (``trl_reward_names``):
    a folder's basename as given (a trailing "/": TRL's empty name), or the name passed in for it
    (``polyrl.trl``: an object's); a function's own name is left as it was. Two folders of one
    name are told (``warn_shared_trl_names``)."""
    from polyrl import api
    from polyrl.step_metrics import trl_reward_names

    sections, plugins = api.reward_entries([rm_path, short, rm_path + "/", rm_path])
    assert [s.label for s in sections] == ["reward_model", "short", "reward_model_2", "reward_model_3"]
    assert trl_reward_names(plugins) == {"reward_model": "tiny-rm", "reward_model_2": "", "reward_model_3": "tiny-rm"}
    capfd.readouterr()
    api.warn_shared_trl_names(sections, plugins)
    said = capfd.readouterr().err
    assert "rewards reward_model, reward_model_3 share TRL's name 'tiny-rm'" in said, said
    _, plugins = api.reward_entries([rm_path, short, rm_path + "/", rm_path], model_names=[None, None, None, "x"])
    assert trl_reward_names(plugins) == {"reward_model": "tiny-rm", "reward_model_2": "", "reward_model_3": "x"}


def test_a_cached_hub_id_in_reward_funcs_is_that_reward_model_with_its_tokenizer_and_trls_name(
        rm_path, byte_tokenizer, tmp_path, monkeypatch):
    """TRL loads ``reward_funcs="org/name"`` with AutoModelForSequenceClassification (its name in the
    logs: "name"). The id reached polyrl's reward names as is: ``reward_processing_classes``' tokenizer
    for it was ignored as a function's, and train() stopped naming ``rewards[0]``, no field of the
    script. Now: the id's folder in the local HF cache, the tokenizer saved for it, TRL's name; an
    id not cached is one error naming ``reward_funcs[0]`` when the trainer is built."""
    from huggingface_hub import constants

    from test_hub_ids import populate_hf_cache

    snapshot = populate_hf_cache(tmp_path / "hub", "org/tiny-rm", rm_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    trainer = GRPOTrainer(model="m", reward_funcs=["org/tiny-rm", short], args=_args(tmp_path),
                          train_dataset=_dataset(), reward_processing_classes=[byte_tokenizer, None])
    assert Path(trainer._reward_entries[0]) == snapshot and trainer._reward_names[0] == "tiny-rm"
    assert trainer._reward_tokenizers[0] is not None and trainer._reward_tokenizers[1] is None
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model="m", reward_funcs=["org/not-cached"], args=_args(tmp_path), train_dataset=_dataset())
    assert err.value.field == "reward_funcs[0]" and "hf download org/not-cached" in (err.value.fix or "")


def test_a_causal_lm_folder_in_reward_funcs_is_refused_when_the_trainer_is_built(tiny_model_dir, rm_path, tmp_path):
    """A causal LM's folder has no classification head (TRL's AutoModelForSequenceClassification
    would score with a random one): it was refused only in train()'s first step, as polyrl's
    reward_model option ``options.path``. Now GRPOTrainer(...) refuses it, naming reward_funcs[i]."""
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short, tiny_model_dir], args=_args(tmp_path),
                    train_dataset=_dataset())
    assert err.value.field == "reward_funcs[1]" and "LlamaForCausalLM" in err.value.message
    assert "options.path" not in str(err.value) and "AutoModelForSequenceClassification" in (err.value.fix or "")
    assert not (tmp_path / "run").exists()  # refused before anything is written
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[rm_path], args=_args(tmp_path), train_dataset=_dataset())
