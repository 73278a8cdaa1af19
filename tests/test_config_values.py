"""Every numeric config value is checked (type, finite, range) and a bad one is one ``error:`` line
naming the dotted field and the fix; so are undecodable, too deeply nested and malformed TOML files."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import typing
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.config import (BackendsSection, DataSection, EvalSection, GenerationSection, ModelSection,
                           RewardSection, RunConfig, TrainSection)
from polyrl.errors import ConfigError
from polyrl.types import LoraConfig, OptimizerConfig
from polyrl.validators import FREE_TABLES, PAIR_RULES, RULES

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
SECTIONS = {"model": ModelSection, "backends": BackendsSection, "generation": GenerationSection,
            "algorithm": AlgorithmConfig, "optimizer": OptimizerConfig, "lora": LoraConfig,
            "train": TrainSection, "eval": EvalSection, "data": DataSection, "rewards": RewardSection}


def config_with(dotted: str, value) -> dict:
    """MINIMAL with ``section.key = value`` (``rewards.x`` sets it on the one reward, ``rewards[0].x``)."""
    section, key = dotted.split(".")
    data = {k: (dict(v) if isinstance(v, dict) else [dict(r) for r in v]) for k, v in MINIMAL.items()}
    if section == "rewards":
        data["rewards"][0][key] = value
    else:
        data[section] = {**data.get(section, {}), key: value}
    return data


def named(dotted: str) -> str:
    """The field an error must name: the one reward is ``rewards[0]``."""
    return dotted.replace("rewards.", "rewards[0].")


def _numeric(tp) -> bool:
    args = typing.get_args(tp) or (tp,)
    return any(a in (int, float) for a in args) or any(_numeric(a) for a in typing.get_args(tp))


def test_every_numeric_field_of_every_section_has_a_rule():
    missing = []
    for section, cls in SECTIONS.items():
        for name, tp in typing.get_type_hints(cls).items():
            key = f"{section}.{name}"
            if _numeric(tp) and key not in RULES and key not in PAIR_RULES:
                missing.append(key)
            if typing.get_origin(tp) is dict or tp is dict:
                assert key in FREE_TABLES, f"{key}: a free-form table without the generic checks"
    assert not missing, f"numeric fields without a range rule in polyrl.validators.RULES: {missing}"


# --- the hostile tester's cases, each with the field it must name ------------------------------

NAMED_CASES = [
    ("optimizer.lr", math.nan), ("optimizer.lr", math.inf), ("optimizer.betas", [0.9, 1.5]),
    ("optimizer.betas", [-0.1, 0.999]), ("optimizer.eps", 0.0), ("optimizer.eps", math.nan),
    ("optimizer.max_grad_norm", -1.0), ("optimizer.max_grad_norm", 0.0), ("optimizer.micro_batch_size", 0),
    ("optimizer.weight_decay", -0.1), ("train.seed", -1), ("train.seed", 2**40), ("lora.dropout", 1.0),
    ("lora.dropout", -0.5), ("lora.alpha", math.nan), ("generation.temperature", math.nan),
    ("generation.temperature", math.inf), ("generation.temperature", -1.0), ("generation.max_new_tokens", 10**12),
    ("generation.max_new_tokens", 4096),  # not below model.max_length (1024)
    ("eval.max_new_tokens", 0), ("model.max_length", 10**12), ("algorithm.beta", math.nan),
    ("algorithm.epsilon_high", math.inf), ("algorithm.dual_clip", math.nan), ("algorithm.overlong_penalty", math.nan),
    ("rewards.weight", math.nan), ("rewards.weight", -math.inf), ("rewards.weight", 0.0),  # the only reward
    ("rewards.weight", 1e308), ("rewards.weight", -1e101),  # finite, but weight x score overflows float64
    ("train.threads", 0), ("eval.count", -1),
    ("train.prompts_per_step", 10**7),  # one step that fills memory for hours, deaf to a stop request
    ("train.collective_timeout_s", 1e308),  # torch's timedelta overflowed: a traceback on every rank
    ("train.collective_timeout_s", 1e14), ("logging.tracker_timeout_s", 1e10),  # Python's timed waits overflow
]


@pytest.mark.parametrize(("field", "value"), NAMED_CASES, ids=[f"{f}={v}" for f, v in NAMED_CASES])
def test_bad_value_names_the_field_and_a_fix(field, value):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(config_with(field, value))
    message = str(info.value)
    assert named(field) in message and "Fix:" in message, message


def test_every_reward_at_weight_zero_is_refused_and_one_logged_only_reward_is_not():
    """With every weight 0 the combined reward is 0 for every sample: every advantage 0, a run
    that trains nothing while its reward metrics look alive."""
    two = {**MINIMAL, "rewards": [{"name": "numeric_match", "weight": 0}, {"name": "length_penalty", "weight": 0.0}]}
    with pytest.raises(ConfigError, match=r"rewards: every reward has weight 0.*Fix: give the reward\(s\)"):
        RunConfig.from_dict(two)
    two["rewards"][1]["weight"] = -0.5  # a penalty alone still trains
    assert [r.weight for r in RunConfig.from_dict(two).rewards] == [0, -0.5]


def test_a_reward_weight_that_overflows_a_weighted_total_is_refused_in_toml_and_python():
    """Weights of 1e308 loaded, and the weighted total of two rewards scoring 2 was inf, or NaN
    where a -1e308 met a 1e308 (a sample then read as unscored), once the models had loaded."""
    from polyrl import api

    both = {**MINIMAL, "rewards": [{"name": "numeric_match", "weight": 1e100},
                                   {"name": "length_penalty", "weight": -1e100}]}
    assert [r.weight for r in RunConfig.from_dict(both).rewards] == [1e100, -1e100]  # the bound itself loads
    both["rewards"][1]["weight"] = -1e308
    with pytest.raises(ConfigError, match=r"rewards\[1\]\.weight: must be a finite number in \[-1e\+100, 1e\+100\], "
                                          r"got -1e\+308\. Fix: "):
        RunConfig.from_dict(both)
    with pytest.raises(ConfigError) as info:
        api.run_config(api.grpo, policy=api.Agent("x"), prompts=["hi"] * 4, rewards=["numeric_match", "exact_match"],
                       grpo_config=api.GRPOConfig(reward_weights=[1.0, 1e308]))
    assert info.value.field == "grpo_config.reward_weights" and "past 1e+100" in info.value.message, info.value


def test_a_wait_is_bounded_where_torch_and_pythons_timed_waits_still_hold_it():
    """``collective_timeout_s = 1e308`` loaded, and every rank of ``polyrl launch`` then stopped with
    torch's ``OverflowError`` from the process group's ``timedelta``; a year of seconds loads."""
    from datetime import timedelta

    from polyrl.validators import MAX_WAIT_S

    timedelta(seconds=MAX_WAIT_S)  # the bound itself is a timeout torch takes
    assert RunConfig.from_dict(config_with("train.collective_timeout_s", 31_536_000)).train.collective_timeout_s == 31_536_000
    for field in ("train.collective_timeout_s", "logging.tracker_timeout_s", "environment.tool_timeout_s",
                  "environment.env_timeout_s", "rewards.timeout_s"):
        with pytest.raises(ConfigError, match=r"must be a finite number in \(0, 1000000000\]( or unset)?, got 1e\+308"):
            RunConfig.from_dict(config_with(field, 1e308))


def test_free_tables_reject_non_finite_numbers_and_deep_nesting():
    for dotted in ("backends.options", "rewards.options"):
        with pytest.raises(ConfigError, match=rf"{named(dotted)}\.knob.*finite".replace("[", r"\[")) as info:
            RunConfig.from_dict(config_with(dotted, {"knob": math.nan}))
        assert "Fix:" in str(info.value)
    # data.options is the source's: a key it does not take is refused by name, a NaN by its check
    with pytest.raises(ConfigError, match=r"data\.options\.eval_fraction: must be in \(0, 1\), got nan"):
        RunConfig.from_dict(config_with("data.options", {"eval_fraction": math.nan}))
    deep: dict = {}
    for _ in range(40):
        deep = {"a": deep}
    with pytest.raises(ConfigError, match="nested more than"):
        RunConfig.from_dict(config_with("backends.options", deep))


def test_the_python_api_and_evolve_are_checked_too():
    config = RunConfig.from_dict(MINIMAL)
    with pytest.raises(ConfigError, match="optimizer.max_grad_norm"):
        attrs.evolve(config, optimizer=OptimizerConfig(max_grad_norm=-1.0))
    with pytest.raises(ConfigError, match="generation.temperature"):
        attrs.evolve(config, generation=GenerationSection(temperature=math.nan))
    with pytest.raises(ConfigError, match="lora.dropout"):
        attrs.evolve(config, lora=LoraConfig(dropout=1.5))


# --- property: any value in any numeric field loads valid or names the field -------------------

anything = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**63, 2**63 - 1), st.booleans(),
    st.text(max_size=5), st.none(), st.lists(st.floats(allow_nan=True), max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(sorted(RULES) + sorted(PAIR_RULES)), value=anything)
@pytest.mark.slow
def test_any_value_in_a_numeric_field_loads_in_range_or_names_the_field(field, value):
    try:
        config = RunConfig.from_dict(config_with(field, value))
    except ConfigError as exc:
        assert named(field) in str(exc) and "Fix:" in str(exc), str(exc)
        return
    section, key = field.split(".")
    record = config.rewards[0] if section == "rewards" else getattr(config, section)
    loaded = getattr(record, key)
    if field in PAIR_RULES:
        assert all(PAIR_RULES[field].accepts(v) for v in loaded), loaded
    else:
        assert RULES[field].accepts(loaded), (field, loaded)


# --- a value of the wrong type in any key: the field and the fix ------------------------------

#: One value of each TOML type (an integer for a string, an array for a table, ``true`` for a
#: number: TOML's true is not 1).
WRONG_TYPES = {"integer": 3, "float": 2.5, "bool": True, "string": "x", "array of integers": [1],
               "array of strings": ["a"], "table": {"a": 1}, "array of tables": [{"a": 1}]}


def _every_key() -> list[str]:
    from polyrl.config import section_classes

    return [f"{section}.{f.name}" for section, cls in section_classes().items()
            for f in attrs.fields(cls) if f.init]


@pytest.mark.slow
def test_a_value_of_the_wrong_type_in_any_key_names_the_field_and_the_fix():
    """``algorithm.name = 3`` was "must be a string" with no Fix part: every key's type is checked
    by one rule, which names the key and gives the fix."""
    missing = []
    for dotted in _every_key():
        for kind, value in WRONG_TYPES.items():
            try:
                RunConfig.from_dict(config_with(dotted, value))
            except ConfigError as exc:  # a type error names the key; any error (both name and function) the fix
                if "Fix:" not in str(exc) or (exc.message.startswith("expected") and exc.field != named(dotted)):
                    missing.append(f"{dotted} = {value!r} ({kind}): {exc}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(("dotted", "value", "fix"), [
    ("algorithm.name", 3, 'write a quoted string, e.g. "..."'),
    ("logging.report_to", [1], 'write an array of quoted strings, e.g. ["...", "..."]'),
    ("generation.stop", [True], 'write an array of quoted strings, e.g. ["...", "..."]'),
    ("optimizer.betas", [0.9], "write an array of 2 numbers (no quotes)"),
    ("data.path", [1], 'write a quoted string or an array of quoted strings, e.g. "...", or remove the key'),
    ("train.steps", True, "write a whole number (no quotes, no decimal point)"),
    ("optimizer.lr", True, "write a number (no quotes)"),
])
def test_the_fix_for_a_wrong_type_names_what_to_write_items_included(dotted, value, fix):
    """An array of the wrong items was told "write an array", which it was; ``true`` for a number is
    refused (TOML's true is not 1)."""
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(config_with(dotted, value))
    assert info.value.field == named(dotted) and info.value.fix == fix, str(info.value)


@pytest.mark.parametrize("value", [True, "3", 2.0, [1]])
def test_data_options_eval_count_of_another_type_is_refused_not_replaced_by_eval_count(tmp_path, value):
    """With eval.count set, the file's hold-out took eval.count and dropped data.options.eval_count
    unread: ``eval_count = true`` or ``"3"`` loaded without a word. Refused as the config is read."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"prompt": "q{i}"}}\n' for i in range(8)))
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({**MINIMAL, "data": {"path": str(rows), "options": {"eval_count": value}},
                             "eval": {"count": 2}})
    assert info.value.field == "data.options.eval_count" and "must be an integer >= 0" in str(info.value)
    assert "Fix:" in str(info.value)


# --- the file and the CLI: one error: line, never a traceback ----------------------------------

def run_cli(path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(path)], capture_output=True,
                          text=True, timeout=120, env=env)


GOOD_HEAD = '[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
BAD_FILES = {
    "utf8": (GOOD_HEAD.encode() + b'[train]\noutput_dir = "caf\xe9"\n', "config", "UTF-8"),
    "nested": (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "config", "too deeply"),
    "nested_tables": (GOOD_HEAD.encode() + b"[backends.options]\nk = " + b"{a = " * 60 + b"1" + b"}" * 60 + b"\n",
                      "backends.options", "nested"),
    "array_section": (b'model = ["tiny-llama"]\n[data]\ntask = "arithmetic"\n', "model", "table"),
    "unknown_key": (GOOD_HEAD.encode() + b"[optimizer]\nlearning_rate = 1e-5\n", "optimizer.learning_rate",
                    "unknown key"),
    "nan_lr": (GOOD_HEAD.encode() + b"[optimizer]\nlr = nan\n", "optimizer.lr", "finite"),
    "inf_temperature": (GOOD_HEAD.encode() + b"[generation]\ntemperature = inf\n", "generation.temperature",
                        "finite"),
    "ascent": (GOOD_HEAD.encode() + b"[optimizer]\nmax_grad_norm = -1\n", "optimizer.max_grad_norm", "> 0"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_are_one_error_line_from_the_cli(tmp_path, name):
    content, field, hint = BAD_FILES[name]
    path = tmp_path / f"{name}.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        RunConfig.from_toml(path)
    assert field in str(info.value) and hint in str(info.value), str(info.value)
    if name not in ("utf8", "nested", "nan_lr", "ascent"):
        return  # the subprocess costs ~1 s each: a few cover the CLI path
    result = run_cli(path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert field in lines[0] and hint in lines[0] and "Fix:" in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_jsonl_with_invalid_utf8_or_deep_nesting_names_the_line(tmp_path):
    from polyrl.data import load_dataset

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"rows\.jsonl:2 is not valid UTF-8") as info:
        load_dataset(path=str(path))
    assert info.value.field == "data.path" and "Fix:" in str(info.value)
    path.write_text('{"prompt": ' + "[" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=r"rows\.jsonl:1 nests JSON too deeply"):
        load_dataset(path=str(path))


def test_a_latin1_csv_names_the_line_and_says_save_as_utf8(tmp_path):
    from polyrl.data import load_dataset

    path = tmp_path / "rows.csv"
    path.write_bytes("prompt,answer\nhello,1\ncafé au lait,2\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    assert info.value.field == "data.path"
    assert "rows.csv line 3, byte 0xe9 at column 4, is not UTF-8 text" in str(info.value)
    assert "Fix: save the file as UTF-8" in str(info.value)


@pytest.mark.parametrize(("flags", "start"), [
    (["--temperature", "nan"], "error: --temperature: must be a finite number"),
    (["--n", "100000000"], "error: --n must be an integer from 1 to 65536, got 100000000"),
])
def test_generate_flags_get_the_same_rules_as_the_config(flags, start):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "generate", "hi", "--model", "tiny-llama", *flags],
                            capture_output=True, text=True, timeout=120, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(start) and "Fix:" in lines[0], lines[0]


def test_generate_refuses_n_greedy_copies_of_one_completion(capsys):
    """``--n 4`` with generate's default ``--temperature 0`` printed one greedy completion four
    times, without a word (training refuses greedy groups the same way)."""
    from polyrl.cli import main

    assert main(["generate", "hi", "--model", "no-such-model", "--n", "4"]) == 2  # before the model lookup
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --n: --temperature 0 (greedy, the default) gives the 4 completions of --n 4 "
                           "identically") and "--temperature 1.0" in line, line


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"algorithm": {"ref_sync_every": 2}}, "algorithm.ref_sync_every", "beta = 0 never uses"),
    ({"model": {"path": "tiny-llama", "reference_path": "elsewhere"}}, "model.reference_path",
     "algorithm.beta = 0 turns off"),
    ({"backends": {"reference": "no-such-backend"}}, "backends.reference", "algorithm.beta = 0 turns it off"),
    ({"eval": {"count": 4, "pass_k": 5}}, "eval.pass_k", "pass@5 needs at least 5 samples, got 0"),
    ({"environment": {"tools": ["calculator"], "options": {"x": 1}}}, "environment.options", "none is named"),
    ({"environment": {"tools": [], "max_turns": 2, "tool_format": "json"}}, "environment.max_turns",
     "max_turns, tool_format set, but neither name nor tools: steps stay single-turn"),
])
def test_a_setting_that_would_have_no_effect_is_refused(settings, field, words):
    """Accepted silently, these did nothing (no KL term to refresh a reference for, no samples for
    pass@k, no environment to hand options to): the user believed a setting that was not applied."""
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({**MINIMAL, **settings})
    assert field in str(info.value) and words in str(info.value) and "Fix:" in str(info.value), str(info.value)
    if field in ("algorithm.ref_sync_every", "model.reference_path", "backends.reference"):  # with a KL term they apply
        RunConfig.from_dict({**MINIMAL, **settings, "algorithm": {**settings.get("algorithm", {}), "beta": 0.04}})


@pytest.mark.slow
def test_generate_says_when_the_models_context_cut_the_completion_short(tiny_model_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "generate", "hi", "--model", tiny_model_dir,
                             "--max-new-tokens", "4000", "--json", "--threads", "1"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    import json

    (completion,) = json.loads(result.stdout)
    assert completion["finish_reason"] == "length" and len(completion["completion_ids"]) < 4000
    assert "the completion stopped at the model's context after" in result.stderr
    assert "before --max-new-tokens 4000" in result.stderr


def test_a_temperature_too_small_to_sample_with_is_refused_not_trained_on():
    """temperature = 1e-300 passed every check; the samplers divided the logits by it, drew token 0
    with NaN log-probs every time, and the run skipped every step, then exited 0."""
    from polyrl.config import GenerationSection

    with pytest.raises(ConfigError, match=r"generation.temperature: temperature 1e-300 is too small.*Fix: use 0"):
        GenerationSection(temperature=1e-300)
    assert GenerationSection(temperature=0).temperature == 0 and GenerationSection(temperature=1e-5)


@pytest.mark.parametrize(("kwargs", "field"), [({"rank": 10 ** 9}, "lora.rank"), ({"alpha": math.nan}, "lora.alpha"),
                                               ({"dropout": 1.5}, "lora.dropout"), ({"rank": True}, "lora.rank")])
def test_a_lora_config_built_in_python_gets_the_tables_checks(kwargs, field):
    """Built in Python (or from peft), a rank of 10**9 or a dropout of 1.5 failed inside torch or MLX
    and an alpha of NaN made every adapter NaN: only a [lora] table was checked."""
    from polyrl.types import LoraConfig

    with pytest.raises(ConfigError) as err:
        LoraConfig(**kwargs)
    assert err.value.field == field and "Fix:" in str(err.value)
