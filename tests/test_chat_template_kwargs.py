"""``model.chat_template_kwargs`` (TRL's ``chat_template_kwargs``): every rendering of the policy's
chat template gets the same extra variables.

Real tiny Llama, real tokenizer, a real Jinja template that reads ``enable_thinking`` as Qwen3's
does (``chat_kwargs_model``): without the variable its generation prompt opens ``<think>``, with
``enable_thinking = false`` it writes an empty, closed think block. Each test asserts what the
trainer actually samples from (the prompt ids), trains or refuses.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from episode_turns import recorded_turns

from polyrl import resume_config
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.trainer import Trainer

from chat_kwargs_model import CLOSED, OPEN, with_thinking_switch

pytest.importorskip("polyrl_torch")

OFF = {"enable_thinking": False}


@pytest.fixture(scope="module")
def thinking_model(tiny_model_dir, tmp_path_factory) -> str:
    return with_thinking_switch(tiny_model_dir, tmp_path_factory.mktemp("models") / "thinking-switch")


def decoder(model: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return lambda ids: tok.decode([int(i) for i in ids], skip_special_tokens=False)


def recording(trainer: Trainer) -> list[Any]:
    """The completions ``trainer`` samples from now on (its own ``_sample``, kept as it is)."""
    sampled: list[Any] = []
    sample = trainer._sample

    def record(rows, sampling, **kwargs):
        out = sample(rows, sampling, **kwargs)
        sampled.extend(out)
        return out

    trainer._sample = record
    return sampled


def write_toml(path: Path, model: str, out: Path, kwargs_line: str = "") -> Path:
    path.write_text(f"""
[model]
path = "{model}"
max_length = 256
{kwargs_line}

[generation]
group_size = 2
max_new_tokens = 6

[data]
task = "arithmetic"
options = {{count = 8}}

[[rewards]]
name = "numeric_match"

[eval]
count = 2
max_new_tokens = 4

[train]
steps = 1
prompts_per_step = 2
threads = 1
output_dir = "{out}"
""")
    return path


# --- prompts the trainer samples from --------------------------------------------------------------


def test_a_toml_run_samples_and_trains_from_prompts_rendered_with_the_kwargs(thinking_model, tmp_path):
    """Without the key the template opens ``<think>`` (reasoning_open); with ``enable_thinking =
    false`` every prompt the trainer samples from (training and evaluation) ends with the empty
    think block, the reasoning is judged from that rendering (closed: not reasoning_open), and the
    step trains."""
    decode = decoder(thinking_model)
    for name, line, ending, opened in [("plain", "", OPEN, True),
                                       ("off", "chat_template_kwargs = {enable_thinking = false}", CLOSED, False)]:
        config = RunConfig.from_toml(write_toml(tmp_path / f"{name}.toml", thinking_model, tmp_path / name, line))
        trainer = Trainer(config)
        sampled = recording(trainer)
        metrics = trainer.train_one_step()
        assert not metrics["skipped"], metrics
        assert len(sampled) == 4
        (tmp_path / name).mkdir(exist_ok=True)  # where run() would have made it
        trainer.evaluate()  # the evaluation samples from the same rendering
        assert len(sampled) > 4
        for c in sampled:
            text = decode(c.prompt_ids)
            assert text.endswith(ending), (name, text)
            assert c.reasoning_open is opened, name
        assert (decode(trainer._think_suffix) == "<|im_start|>assistant\n<think>\n") if opened else \
            trainer._think_suffix is None
        # what the train engine renders is what was sampled from (one template, one set of variables)
        first = trainer.train_engine.encode_chat([{"role": "user", "content": "hi"}], None, True)
        assert decode(first).endswith(ending)


def test_a_trl_script_with_chat_template_kwargs_samples_and_trains_from_that_rendering(thinking_model, tmp_path,
                                                                                       monkeypatch):
    """``polyrl.trl.GRPOTrainer(args=trl.GRPOConfig(chat_template_kwargs={"enable_thinking": False}))``
    trains one step on prompts rendered with the variable (it was refused as having no equivalent)."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from polyrl import trainer as trainer_module
    from polyrl.trl import GRPOTrainer

    sampled: list[Any] = []
    sample = trainer_module.Trainer._sample

    def record(self, rows, sampling, **kwargs):
        out = sample(self, rows, sampling, **kwargs)
        sampled.extend(out)
        return out

    monkeypatch.setattr(trainer_module.Trainer, "_sample", record)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=2,
                          per_device_train_batch_size=4, max_completion_length=6, learning_rate=1e-4, use_cpu=True,
                          report_to="none", disable_tqdm=True, chat_template_kwargs=dict(OFF))
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "answer": str(i + 1)} for i in range(4)]

    def short(completions, **kwargs):
        return [-len(c[0]["content"]) / 10 for c in completions]

    trainer = GRPOTrainer(model=thinking_model, reward_funcs=short, args=args,
                          train_dataset=datasets.Dataset.from_list(rows))
    out = trainer.train()
    assert out.global_step == 1
    decode = decoder(thinking_model)
    assert len(sampled) == 4 and all(decode(c.prompt_ids).endswith(CLOSED) for c in sampled)
    assert not any(c.reasoning_open for c in sampled)


def test_polyrls_own_grpo_config_and_from_trl_set_the_model_key(thinking_model):
    from polyrl import api

    trl = pytest.importorskip("trl")
    config, _ = api.run_config(api.grpo, policy=api.Agent(model=thinking_model), prompts=["What is 1 + 1?"],
                               grpo_config=api.GRPOConfig(chat_template_kwargs=OFF))
    assert config.model.chat_template_kwargs == OFF
    converted = api.GRPOConfig.from_trl(trl.GRPOConfig(output_dir="unused", use_cpu=True, report_to="none",
                                                       chat_template_kwargs={"enable_thinking": False, "k": [1]}))
    assert converted.chat_template_kwargs == {"enable_thinking": False, "k": [1]}
    assert api.GRPOConfig.from_trl(trl.GRPOConfig(output_dir="unused", use_cpu=True,
                                                  report_to="none")).chat_template_kwargs is None


# --- bad values ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "field", "said"), [
    ("enable_thinking=false", "model.chat_template_kwargs", "got str 'enable_thinking=false'"),
    ([1], "model.chat_template_kwargs", "got list"),
    ({"tools": []}, "model.chat_template_kwargs.tools", "apply_chat_template's own argument"),
    ({"add_generation_prompt": False}, "model.chat_template_kwargs.add_generation_prompt", "own argument"),
    ({"enable-thinking": False}, "model.chat_template_kwargs", "no chat template can read as a variable"),
    ({"budget": math.inf}, "model.chat_template_kwargs", "budget is inf, not a finite number"),
])
def test_bad_values_are_one_config_error_naming_the_key(value, field, said):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"model": {"path": "tiny-llama", "chat_template_kwargs": value},
                             "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})
    assert info.value.field == field and said in str(info.value), str(info.value)


def test_a_bad_value_in_a_toml_file_is_one_error_line(thinking_model, tmp_path, capsys):
    from polyrl.cli import main

    path = write_toml(tmp_path / "bad.toml", thinking_model, tmp_path / "run", 'chat_template_kwargs = "off"')
    assert main(["train", str(path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: model.chat_template_kwargs"), lines
    assert "got str 'off'" in lines[0] and "unknown key" not in lines[0], lines


def test_bad_values_from_python_name_the_argument():
    from polyrl import api
    from polyrl.types import EngineConfig

    with pytest.raises(ConfigError) as info:
        api.GRPOConfig(chat_template_kwargs=["enable_thinking"])
    assert info.value.field == "grpo_config.chat_template_kwargs"
    with pytest.raises(ConfigError) as info:
        EngineConfig(model="m", chat_template_kwargs={"messages": []})
    assert info.value.field == "EngineConfig.chat_template_kwargs.messages"


# --- resume ----------------------------------------------------------------------------------------


def _config(kwargs: dict[str, Any] | None) -> RunConfig:
    model: dict[str, Any] = {"path": "tiny-llama"}
    if kwargs is not None:
        model["chat_template_kwargs"] = kwargs
    return RunConfig.from_dict({"model": model, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}]})


def test_a_changed_chat_template_kwargs_at_resume_is_refused_like_any_prompt_change():
    """The prompts would render differently from the checkpointed steps'; a weights-only resume
    (a new experiment) applies it, and a checkpoint from before the key resumes when it is unset."""
    saved = resume_config.snapshot(_config(OFF))
    with pytest.raises(ConfigError, match="model.chat_template_kwargs"):
        resume_config.check(saved, _config({"enable_thinking": True}), weights_only=False)
    with pytest.raises(ConfigError, match="model.chat_template_kwargs"):
        resume_config.check(saved, _config(None), weights_only=False)
    assert resume_config.check(saved, _config(OFF), weights_only=False) == []
    assert resume_config.check(saved, _config(None), weights_only=True) != []
    older = {k: v for k, v in resume_config.snapshot(_config(None)).items() if k != "model.chat_template_kwargs"}
    assert resume_config.check(older, _config(None), weights_only=False) == []
    with pytest.raises(ConfigError, match="model.chat_template_kwargs"):
        resume_config.check(older, _config(OFF), weights_only=False)


# --- episodes --------------------------------------------------------------------------------------


def test_episode_turns_with_tools_are_exact_prefixes_rendered_with_the_kwargs(thinking_model, tmp_path):
    """guess_number (multi-turn) with a tool declared: every turn's prompt is exactly the episode's
    ids so far, the sampled ids are the ones trained, and each inserted glue ends with the
    generation prompt rendered with the variable (the empty think block), never the open one."""
    config = RunConfig.from_dict({
        "model": {"path": thinking_model, "max_length": 1024, "chat_template_kwargs": OFF},
        "generation": {"group_size": 2, "max_new_tokens": 12, "stop": ["a", "e", " "]},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "environment"}],
        "environment": {"name": "guess_number", "tools": ["calculator"], "max_turns": 3,
                        "max_episode_tokens": 160},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    calls = recorded_turns(trainer)
    sampled = recording(trainer)
    metrics = trainer.train_one_step()
    assert not metrics["skipped"] and metrics["episode/env_error_share"] == 0 and metrics["episode/turns_mean"] > 1
    decode = decoder(thinking_model)
    turns = [(p, c) for prompts, outs in calls[1:] for p, c in zip(prompts, outs)]
    glued = 0
    for c in sampled:
        assert decode(c.prompt_ids).endswith(CLOSED) and not c.reasoning_open
        full = np.concatenate([c.prompt_ids, c.completion_ids])
        starts = [i for i in range(1, len(c.mask)) if c.mask[i] and not c.mask[i - 1]]
        assert c.mask[0] and len(starts) == c.info["turns"] - 1
        for start in starts:  # turn k+1's prompt is exactly the episode's ids so far, with the variable
            prompt = full[: len(c.prompt_ids) + start]
            assert decode(prompt).endswith(CLOSED)
            assert any(np.array_equal(p, prompt) and np.array_equal(ids, c.completion_ids[start:start + len(ids)])
                       for p, ids in turns)
            glued += 1
    assert glued > 0


# --- polyrl serve ----------------------------------------------------------------------------------


def test_polyrl_serve_refuses_chat_template_kwargs_it_would_not_apply():
    """vLLM renders a chat with the request's ``chat_template_kwargs``; polyrl serve renders with
    its model's template as it is, so a request setting them is a 400 naming the field (it was
    ignored: the client got an answer to a prompt it did not ask). None or {} changes nothing."""
    from polyrl.serving.api_error import ApiError
    from polyrl.serving.requests import refuse_unhonoured

    with pytest.raises(ApiError) as info:
        refuse_unhonoured({"messages": [], "chat_template_kwargs": OFF})
    assert info.value.status == 400 and info.value.param == "chat_template_kwargs"
    refuse_unhonoured({"messages": [], "chat_template_kwargs": {}})
    refuse_unhonoured({"messages": [], "chat_template_kwargs": None})


# --- polyrl generate -------------------------------------------------------------------------------


def test_polyrl_generate_samples_from_the_prompt_rendered_with_chat_template_kwargs(thinking_model, capsys):
    """``polyrl generate`` had no way to pass them: a Qwen3 always sampled with its reasoning open.
    ``--chat-template-kwargs JSON`` samples what an engine given ``model.chat_template_kwargs`` does."""
    import json

    from polyrl.cli import _registry, main
    from polyrl.engine import Engine
    from polyrl.types import EngineConfig, SamplingParams

    flags = ["generate", "What is 1 + 1?", "--model", thinking_model, "--max-new-tokens", "8", "--threads", "1",
             "--json"]
    assert main([*flags, "--chat-template-kwargs", json.dumps(OFF)]) == 0
    (ours,) = json.loads(capsys.readouterr().out)

    def sampled(kwargs: dict[str, Any]) -> list[int]:
        engine = Engine(_registry(), "torch", EngineConfig(model=thinking_model, role="generate", threads=1,
                                                           chat_template_kwargs=kwargs))
        prompt = [{"role": "user", "content": "What is 1 + 1?"}]
        (completion,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0.0, n=1))
        return [int(i) for i in completion.completion_ids]

    assert ours["completion_ids"] == sampled(OFF)
    assert ours["completion_ids"] != sampled({})  # the prompt the flag changed: its reasoning open


@pytest.mark.parametrize(("flags", "words"), [
    (["--chat-template-kwargs", '{"enable_thinking": false'], "is not JSON"),
    (["--chat-template-kwargs", "[1]"], "must be a table of template variables"),
    (["--chat-template-kwargs", '{"tools": []}'], "apply_chat_template's own argument"),
    (["--chat-template-kwargs", "{}", "--raw"], "a --raw prompt is not rendered by the chat template"),
])
def test_a_bad_chat_template_kwargs_flag_is_one_error_line(flags, words, capsys):
    from polyrl.cli import main

    assert main(["generate", "hi", "--model", "no-such-model", *flags]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --chat-template-kwargs") and words in lines[0], lines
    assert "Fix:" in lines[0]
