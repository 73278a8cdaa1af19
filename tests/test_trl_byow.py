"""A TRL user's own script, data and rewards brought to polyrl unchanged: what TRL 1.16 accepts
that polyrl refused with a fix the script could not apply, or named by polyrl's TOML keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl import api  # noqa: E402
from polyrl.config import RunConfig  # noqa: E402
from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, short  # noqa: E402


def _longer_window(tiny_model_dir: str, tmp_path: Path, positions: int = 4096) -> str:
    """A copy of the tiny model whose config reads ``positions`` positions (RoPE: no table to grow)."""
    folder = tmp_path / "tiny-long"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = positions
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_trl_scripts_max_completion_length_is_bounded_by_the_model_not_polyrls_1024(tiny_model_dir, tmp_path):
    """TRL 1.16 caps neither a prompt nor prompt + completion, so max_completion_length=1024 trains
    there on any model that reads more positions. polyrl's model.max_length (1024 by default) made it
    an error whose fix, "raise model.max_length", no TRL script can apply, and cut every completion
    after a 300-token prompt at 724 tokens without a word. On torch the bound is the model's own."""
    folder = _longer_window(tiny_model_dir, tmp_path)
    trl_args = grpo_args(tmp_path, max_completion_length=1024)
    config, _ = api.run_config(api.grpo, policy=api.Agent(folder, backend="torch"), prompts=[{"prompt": "What is 1 + 1?", "answer": "2"}] * 4,
                               rewards=[short], grpo_config=api.GRPOConfig.from_trl(trl_args))
    assert (config.model.max_length, config.generation.max_new_tokens) == (4096, 1024)
    # polyrl's own GRPOConfig keeps polyrl's default, and takes the key as a setting
    own, _ = api.run_config(api.grpo, policy=api.Agent(folder, backend="torch"), prompts=[{"prompt": "q", "answer": "2"}] * 4, rewards=[short],
                            grpo_config=api.GRPOConfig(output_dir=str(tmp_path / "own")))
    assert own.model.max_length == 1024
    own, _ = api.run_config(api.grpo, policy=api.Agent(folder, backend="torch"), prompts=[{"prompt": "q", "answer": "2"}] * 4, rewards=[short],
                            grpo_config=api.GRPOConfig(output_dir=str(tmp_path / "own"),
                                                       settings={"model.max_length": 2048}))
    assert own.model.max_length == 2048
    # a model reading fewer positions than polyrl's default keeps the default (no new refusal)
    config, _ = api.run_config(api.grpo, policy=api.Agent(tiny_model_dir, backend="torch"), prompts=[{"prompt": "q", "answer": "2"}] * 4,
                               rewards=[short], grpo_config=api.GRPOConfig.from_trl(grpo_args(tmp_path)))
    assert config.model.max_length == 1024


def test_a_polyrl_model_alias_as_a_trl_scripts_model_is_bounded_by_the_model_it_names(tiny_model_dir, tmp_path):
    """A plugin's model alias passed as the script's model: the window is the position limit of the
    folder the alias names, as for that folder passed itself (it kept polyrl's 1024)."""
    from polyrl.hookspecs import hookimpl
    from polyrl.registry import get_registry

    folder = _longer_window(tiny_model_dir, tmp_path)

    class Alias:
        @hookimpl
        def polyrl_resolve_model(self, name):
            return folder if name == "my-long-model" else None

    plugin = Alias()
    get_registry().pm.register(plugin)
    try:
        config, _ = api.run_config(api.grpo, policy=api.Agent("my-long-model", backend="torch"),
                                   prompts=[{"prompt": "What is 1 + 1?", "answer": "2"}] * 4, rewards=[short],
                                   grpo_config=api.GRPOConfig.from_trl(grpo_args(tmp_path, max_completion_length=1024)))
    finally:
        get_registry().pm.unregister(plugin)
    assert (config.model.path, config.model.max_length) == ("my-long-model", 4096)


def test_max_completion_length_past_the_window_of_a_backend_keeping_1024_has_a_fix_a_script_can_apply(
        tiny_model_dir, tmp_path):
    """MAX sizes its compiled graphs by model.max_length, so a TRL config keeps polyrl's 1024 there:
    max_completion_length=1024 is refused, and its fix said "raise model.max_length", a key no TRL
    script sets. It names the argument and the torch backend, which reads the model's positions."""
    folder = _longer_window(tiny_model_dir, tmp_path)
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent(folder, backend="max"), prompts=[{"prompt": "q", "answer": "2"}] * 4,
                       rewards=[short], grpo_config=grpo_args(tmp_path, max_completion_length=1024))
    assert err.value.field == "grpo_config.max_completion_length"
    assert "raise model.max_length" not in err.value.fix, err.value.fix
    assert err.value.fix.startswith("lower grpo_config.max_completion_length (")
    assert err.value.fix.endswith("or train on backend 'torch', which reads the model's own 4096 positions")


def test_a_completion_after_a_long_prompt_gets_all_of_max_completion_length_as_in_trl(tiny_model_dir, tmp_path):
    """A 1000-token prompt, max_completion_length=64, a model reading 4096 positions: TRL samples up
    to 64 tokens; polyrl cut every completion at 1024 - 1000 = 24 tokens, without a word."""
    from transformers import AutoTokenizer

    folder = _longer_window(tiny_model_dir, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.decode(tokenizer("word " * 2000)["input_ids"][:1000])
    lengths: list[int] = []

    def seen(completion_ids, **kwargs):
        lengths.extend(len(ids) for ids in completion_ids)
        return [float(len(ids)) for ids in completion_ids]

    GRPOTrainer(model=folder, reward_funcs=[seen], train_dataset=datasets.Dataset.from_list([{"prompt": prompt}] * 2),
                args=grpo_args(tmp_path, max_completion_length=64, per_device_train_batch_size=2)).train()
    assert len(lengths) == 2 and max(lengths) > 24 and max(lengths) <= 64, lengths


def test_a_run_checkpointed_with_an_older_window_resumes_with_it(tiny_model_dir, tmp_path):
    """A TRL script's run checkpointed by code that kept polyrl's 1024 (before model.max_length was
    the model's position limit) on a model reading 4096 positions: train(resume_from_checkpoint=True)
    was refused ("config changed at resume ... model.max_length 1024 -> 4096"), a field no TRL
    script sets. It resumes with the checkpoint's window, as the run started, and says so."""
    from structlog.testing import capture_logs

    from polyrl import checkpoint as ckpt
    from trl_util import prompts_dataset

    folder = _longer_window(tiny_model_dir, tmp_path)
    rows = prompts_dataset(4)
    GRPOTrainer(model=folder, reward_funcs=[short], train_dataset=rows, args=grpo_args(tmp_path)).train()
    first = tmp_path / "run" / "checkpoints" / "step-00000001"
    state = ckpt.read_state(first)
    assert state["config"]["model.max_length"] == 4096
    state["config"]["model.max_length"] = 1024  # as the older code wrote it
    ckpt.rewrite_state(first, 1, state)
    trainer = GRPOTrainer(model=folder, reward_funcs=[short], train_dataset=rows, args=grpo_args(tmp_path, max_steps=2))
    with capture_logs() as logs:
        done = trainer.train(resume_from_checkpoint=True)
    assert done.global_step == 2
    assert ckpt.read_state(tmp_path / "run" / "checkpoints" / "step-00000002")["config"]["model.max_length"] == 1024
    said = [e["event"] for e in logs if e["event"].startswith("model.max_length = 1024")]
    assert len(said) == 1 and "its position limit" in said[0], [e["event"] for e in logs]


def _image_rows(n: int = 4) -> list[dict]:
    return [{"prompt": f"What is {i} + 1?", "image": None, "answer": "1"} for i in range(n)]


@pytest.mark.parametrize("where", ["train_dataset", "eval_dataset"])
def test_a_dataset_error_in_a_trl_script_names_the_argument_the_script_passed(tiny_model_dir, tmp_path, where):
    """An image column, a misspelt role, a blank prompt: the error named polyrl's TOML section
    ("data: row 0 of rows ..."), which a TRL script never wrote; it names train_dataset or
    eval_dataset now, as a missing prompt column already did."""
    plain = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?", "answer": "1"} for i in range(4)])
    bad = datasets.Dataset.from_list(_image_rows())
    kwargs = {"train_dataset": bad} if where == "train_dataset" else {
        "train_dataset": plain, "eval_dataset": bad}
    args = grpo_args(tmp_path, **({} if where == "train_dataset" else {"eval_strategy": "steps", "eval_steps": 1}))
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, **kwargs).train()
    assert info.value.field == where, info.value
    assert "column 'image'" in str(info.value) and not str(info.value).startswith("data:")


def test_a_column_named_like_a_trl_argument_keeps_its_fix_in_a_trl_script(tiny_model_dir, tmp_path):
    """The field is train_dataset; the fix still names the column to rename (renaming the field
    inside the fix turned it into "rename the 'train_dataset' column")."""
    data = datasets.Dataset.from_list([{"prompt": f"q{i}", "prompts": "x", "answer": "1"} for i in range(4)])
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=data).train()
    assert info.value.field == "train_dataset" and info.value.fix == "rename the 'prompts' column in the dataset"


def test_a_reward_signature_error_in_a_trl_script_names_reward_funcs(tiny_model_dir, tmp_path):
    def typo(completions, solutions, **kwargs):
        return [0.0] * len(completions)

    data = datasets.Dataset.from_list([{"prompt": f"q{i}", "solution": "1"} for i in range(4)])
    with pytest.raises(ConfigError, match="has parameter 'solutions'") as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[typo], args=grpo_args(tmp_path), train_dataset=data).train()
    assert info.value.field == "reward_funcs"


def test_an_overlong_row_in_a_trl_script_names_the_dataset_and_a_fix_it_can_apply(tiny_model_dir, tmp_path):
    """The fix named model.max_length and data.drop_overlong, TOML keys a script cannot set."""
    data = datasets.Dataset.from_list([{"prompt": "word " * (1500 if i == 2 else 3), "answer": "1"} for i in range(4)])
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=data).train()
    assert info.value.field == "train_dataset" and "row 2 of" in str(info.value)
    assert "dataset.filter" in info.value.fix and "drop_overlong" not in info.value.fix


def test_a_toml_runs_default_eval_reward_on_data_without_an_answer_column_offers_the_runs_rewards(tmp_path):
    """A TRL user's data has a solution column and their own reward; adding [eval] count gave
    "set this reward's option column", but no [[rewards]] entry holds numeric_match's options.
    The fix offers eval.reward = "run" (TRL's evaluation: the run's own rewards)."""
    (tmp_path / "rewards.py").write_text("def accuracy(completions, solution, **kwargs):\n"
                                         "    return [float(solution[i] in c) for i, c in enumerate(completions)]\n")
    config = RunConfig.from_dict({
        "model": {"path": "unused"},
        "data": {"rows": [{"prompt": f"What is {i} + 1?", "solution": str(i + 1)} for i in range(6)]},
        "rewards": [{"function": f"{tmp_path / 'rewards.py'}:accuracy"}],
        "eval": {"count": 2},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    from polyrl.trainer import Trainer

    with pytest.raises(ConfigError) as info:
        Trainer(config)
    assert info.value.field == "eval.reward"
    assert 'set eval.reward = "run"' in info.value.fix and "accuracy" in info.value.fix, info.value
    assert "this reward's option" not in info.value.fix


def test_an_eval_dataset_without_a_column_a_reward_reads_is_named_as_the_eval_dataset(tiny_model_dir, tmp_path):
    """The reward reads solution, which the training rows hold and the eval rows lack (TRL fails
    at its first evaluation): one error on eval_dataset, not "the held-out set (eval.reward = 'run')"
    under rewards.function, polyrl's keys."""
    def accuracy(completions, solution, **kwargs):
        return [0.0] * len(completions)

    train = datasets.Dataset.from_list([{"prompt": f"q{i}", "solution": "1"} for i in range(4)])
    held = datasets.Dataset.from_list([{"prompt": f"e{i}", "answer": "1"} for i in range(2)])
    with pytest.raises(ConfigError, match="has parameter 'solution'") as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[accuracy], train_dataset=train, eval_dataset=held,
                    args=grpo_args(tmp_path, eval_strategy="steps", eval_steps=1)).train()
    assert info.value.field == "eval_dataset" and "eval.reward" not in str(info.value), info.value
    assert info.value.fix.endswith("add a 'solution' column to the eval_dataset")


def test_prompts_that_leave_a_completion_less_than_max_new_tokens_are_counted_in_a_warning():
    """model.max_length bounds prompt + completion, so a 90-token prompt under max_length 100 left
    its completion 10 of max_new_tokens = 32 without a word (TRL gives it all 32): the run's start
    now counts such prompts in one warning naming the first and the fix."""
    from structlog.testing import capture_logs

    from polyrl.data import check_prompt_lengths, from_rows

    ds = from_rows([{"prompt": "a " * n} for n in (3, 90, 5, 80)], name="mine")
    words = lambda prompt: len(prompt.split())  # noqa: E731 - one token per word
    with capture_logs() as logs:
        assert check_prompt_lengths(ds, words, 100, max_new_tokens=32) == (ds, 0)
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1 and warned[0]["event"].startswith("2 of 4 prompts of mine leave fewer than "
                                                              "generation.max_new_tokens = 32"), warned
    assert warned[0]["first"] == "row 1 of mine" and "raise model.max_length" in warned[0]["fix"]
    with capture_logs() as logs:
        check_prompt_lengths(ds, words, 100, max_new_tokens=10)  # 90 + 10 fits exactly
    assert not [e for e in logs if e["log_level"] == "warning"]


def test_a_model_folder_of_a_type_transformers_lacks_is_one_line_naming_the_type_and_the_script_s_model(
        tiny_model_dir, tmp_path):
    """A local folder whose config.json names a model_type the installed transformers does not
    implement (a model newer than it): the refusal was transformers' three paragraphs after "cannot
    read a tokenizer and config", its fix "point model.path at a Hugging Face model folder" (it is
    one), and the TRL script was told of ``model.path``, a key it never wrote, not its ``model``."""
    folder = tmp_path / "newer"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mysterylm"}))
    trainer = GRPOTrainer(model=str(folder), reward_funcs=[short], train_dataset=datasets.Dataset.from_list(
        [{"prompt": "q", "answer": "1"}] * 2), args=grpo_args(tmp_path, per_device_train_batch_size=2))
    with pytest.raises(ConfigError) as err:
        trainer.train()
    assert err.value.field == "model"
    assert "\n" not in str(err.value)
    assert f"{str(folder)!r} holds a model of type 'mysterylm' (its config.json), which transformers" in err.value.message
    assert err.value.fix.startswith("upgrade transformers if 'mysterylm' is newer than it, or train a model of an "
                                    "architecture it implements")
