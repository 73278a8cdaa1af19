"""A TRL user's usual mistakes in a polyrl TOML, and in ``--set``: each one ``error:`` line whose fix works.

Each case below was found by writing the mistake into a real config: the fix it got was a list of
keys, a wrong table, or nothing at all (``lr = 5e6`` trained and diverged).
"""

from __future__ import annotations

import pytest

from polyrl import api
from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import ConfigError

BASE = """
[model]
path = "tiny-llama"
[generation]
group_size = 4
max_new_tokens = 8
[optimizer]
lr = 1e-5
[data]
task = "arithmetic"
[[rewards]]
name = "numeric_match"
[train]
steps = 2
"""


def _error(text: str, overrides: tuple[str, ...] = ()) -> ConfigError:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as folder:
        path = Path(folder) / "run.toml"
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            RunConfig.from_toml(path, overrides)
    return info.value


def _with(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


def _loads(text: str, overrides: tuple[str, ...] = ()) -> RunConfig:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as folder:
        path = Path(folder) / "run.toml"
        path.write_text(text)
        return RunConfig.from_toml(path, overrides)


@pytest.mark.parametrize(("written", "meant"), [("5e6", "5e-6"), ("3e4", "3e-4"), ("1.5e5", "1.5e-5"), ("2e7", "2e-7")])
def test_an_lr_with_its_exponent_sign_lost_is_refused_with_the_lr_meant(written, meant):
    exc = _error(_with("lr = 1e-5", f"lr = {written}"))
    assert exc.field == "optimizer.lr", exc
    assert f"did you mean {meant} (the exponent's minus sign lost)? write lr = {meant}" in str(exc), exc
    assert _loads(_with("lr = 1e-5", f"lr = {meant}")).optimizer.lr == float(meant)  # the fix loads


def test_an_lr_from_set_gets_the_same_fix():
    exc = _error(BASE, ("optimizer.lr=5e6",))
    assert exc.field == "optimizer.lr" and "write lr = 5e-6" in str(exc), exc


def test_a_huge_lr_with_no_likely_meaning_gets_the_usual_values():
    exc = _error(_with("lr = 1e-5", "lr = 1e30"))
    assert exc.field == "optimizer.lr" and "e.g. lr = 1e-5 (full fine-tuning)" in str(exc), exc


@pytest.mark.parametrize("lr", ["1e-6", "5e-4", "1e-2", "1.0", "8.0"])  # 1-8: tiny test models and the toy backend
def test_learning_rates_in_use_still_load(lr):
    assert _loads(_with("lr = 1e-5", f"lr = {lr}")).optimizer.lr == float(lr)


def test_the_python_api_names_its_own_learning_rate():
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig(learning_rate=5e6)
    assert info.value.field == "grpo_config.learning_rate", info.value
    assert "did you mean learning_rate=5e-6" in str(info.value)
    assert api.GRPOConfig(learning_rate=8.0).learning_rate == 8.0


@pytest.mark.parametrize(("assignment", "fix", "working"), [
    ("lerning_rate=1e-5", "did you mean TRL's 'learning_rate'? TRL's learning_rate is polyrl's optimizer.lr: "
                          "--set optimizer.lr=1e-5", "optimizer.lr=1e-5"),
    ("num_generaton=8", "did you mean TRL's 'num_generations'?", "generation.group_size=8"),
    ("temprature=0.7", "did you mean 'temperature'?", "generation.temperature=0.7"),
    ("model_name_or_path=tiny-llama", "--set model.path=tiny-llama", "model.path=tiny-llama"),
    ("lora_r=8", "--set lora.rank=8", "lora.rank=8"),
])
def test_a_bare_misspelt_or_trl_name_in_set_gets_the_key_it_meant(assignment, fix, working):
    exc = _error(BASE, (assignment,))
    assert exc.field == "--set" and fix in str(exc), exc
    _loads(BASE, (working,))  # the key the fix names takes the value


def test_set_and_the_file_name_trls_learning_rate_alike():
    in_file = _error(_with("[optimizer]\n", "[optimizer]\nlerning_rate = 1e-5\n"))
    outside = _error("lerning_rate = 1e-5\n" + BASE)
    from_set = _error(BASE, ("lerning_rate=1e-5",))
    for exc in (in_file, outside, from_set):
        assert "did you mean TRL's 'learning_rate'? TRL's learning_rate is polyrl's optimizer.lr" in str(exc), exc


@pytest.mark.parametrize(("old", "new", "field", "fix"), [
    ("[train]", "[training]", "training", "did you mean [train]?"),
    ("[[rewards]]", "[[reward]]", "reward", "did you mean [[rewards]]?"),  # was sent to eval.reward
    ("[optimizer]\n", "[optimizer]\ngradient_accumulation_steps = 4\n", "optimizer.gradient_accumulation_steps",
     "polyrl's optimizer.micro_batch_size"),
    ("[train]\n", "[train]\nbf16 = true\n", "train.bf16", 'write compute_dtype = "bfloat16" in [model]'),
    ("[model]\n", "[model]\nmodel_name_or_path = \"x\"\n", "model.model_name_or_path", "write path = 'x' in [model]"),
    ("[data]\n", "[data]\ndataset_name = \"openai/gsm8k\"\n", "data.dataset_name", "write name = 'openai/gsm8k' in [data]"),
    ("[train]\n", "[train]\nper_device_eval_batch_size = 8\n", "train.per_device_eval_batch_size", "eval.loss_batch"),
    ("[train]\n", "[lora]\nlora_r = 8\n[train]\n", "lora.lora_r", "write rank = 8 in [lora]"),
    ("[train]\n", "[peft]\nr = 8\n[train]\n", "peft", "did you mean [lora]?"),
    ("lr = 1e-5", 'lr = "1e-5"', "optimizer.lr", "write lr = 1e-5 without quotes"),
    ("max_new_tokens = 8", 'max_new_tokens = 8\nignore_eos = "true"', "generation.ignore_eos",
     "write ignore_eos = true without quotes"),
    ("max_new_tokens = 8", 'max_new_tokens = 8\nstop = "###"', "generation.stop", 'write stop = ["###"]'),
    ("[train]\n", '[logging]\nreport_to = "wandb"\n[train]\n', "logging.report_to", 'write report_to = ["wandb"]'),
    ("steps = 2", 'steps = 2\nseed = "42"', "train.seed", "write seed = 42 without quotes"),
])
def test_a_trl_users_mistake_gets_a_fix_naming_the_line_to_write(old, new, field, fix):
    exc = _error(_with(old, new))
    assert exc.field == field and fix in str(exc), exc


def test_quoted_infinities_are_not_offered_as_the_fix():
    exc = _error(_with("lr = 1e-5", 'lr = "inf"'))
    assert "without quotes" not in str(exc) and "write a number" in str(exc), exc


def test_the_cli_prints_one_error_line(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(_with("lr = 1e-5", "lr = 5e6"))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: optimizer.lr:") and "write lr = 5e-6" in err[0], err
