"""Episodes on a real tokenizer whose chat template ends a conversation with its EOS (Phi-3's way).

Such a template renders a conversation's last assistant turn differently from a turn followed by
more messages; the episode glue must still be exactly what follows an assistant turn
mid-conversation, and every turn must continue from the exact ids of the turns before it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from episode_turns import recorded_turns

from polyrl.config import RunConfig
from polyrl.trainer import Trainer

#: Phi-3's layout: <|user|> / <|assistant|> headers, <|end|> after each turn, and the EOS after a
#: conversation rendered without a generation prompt.
TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


#: Phi-3's own habit besides: roles other than system/user/assistant (``tool``) are dropped
NO_TOOL_ROLE = (
    "{% for m in messages %}{% if m['role'] in ('system', 'user', 'assistant') %}"
    "{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")


def with_template(tiny_model_dir: str, dst: Path, template: str = TEMPLATE) -> str:
    """The tiny Llama with the template above, its markers added as special tokens (rows appended
    to the embedding and the head) and ``<|end|>`` a stop token, as in Phi-3's generation config."""
    from safetensors.numpy import load_file, save_file
    from tokenizers import AddedToken, Tokenizer

    shutil.copytree(tiny_model_dir, dst)
    tok = Tokenizer.from_file(str(dst / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(str(dst / "tokenizer.json"))
    settings = json.loads((dst / "tokenizer_config.json").read_text())
    settings.update(chat_template=template, additional_special_tokens=SPECIALS)
    settings.pop("added_tokens_decoder", None)
    (dst / "tokenizer_config.json").write_text(json.dumps(settings))
    (dst / "special_tokens_map.json").unlink(missing_ok=True)
    tensors = dict(load_file(str(dst / "model.safetensors")))
    rows, rng = tok.get_vocab_size(), np.random.default_rng(0)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        w = tensors[name]
        tensors[name] = np.concatenate([w, rng.standard_normal((rows - len(w), w.shape[1])).astype(w.dtype) * 0.02])
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((dst / "config.json").read_text())
    stops = [tok.token_to_id("<|end|>"), tok.token_to_id("<|im_end|>")]
    config.update(vocab_size=rows, eos_token_id=stops)
    (dst / "config.json").write_text(json.dumps(config))
    (dst / "generation_config.json").write_text(json.dumps({"eos_token_id": stops}))
    return str(dst)


@pytest.fixture(scope="module")
def phi3_style_model(tiny_model_dir, tmp_path_factory) -> str:
    return with_template(tiny_model_dir, tmp_path_factory.mktemp("models") / "eos-at-end")


def test_episodes_on_a_template_that_ends_conversations_with_eos_are_exact(phi3_style_model, tmp_path):
    """guess_number on the tiny model (turns end at a stop string or <|end|>): no episode error,
    each turn's prompt is the previous turn's prompt + its sampled ids + the glue, the sampled ids
    are the ones trained (mask True), and each glue is the feedback in the template's markers
    (before the fix every step stopped the run: 'renders earlier turns differently')."""
    from transformers import AutoTokenizer

    config = RunConfig.from_dict({
        "model": {"path": phi3_style_model, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 12, "stop": ["a", "e", " "]},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "environment"}],
        "environment": {"name": "guess_number", "max_turns": 3, "max_episode_tokens": 96},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    calls = recorded_turns(trainer)
    sampled: list = []
    sample = trainer._sample
    trainer._sample = lambda rows, sampling, **kw: sampled.extend(sample(rows, sampling, **kw)) or sampled
    metrics = trainer.train_one_step()
    assert not metrics["skipped"] and metrics["episode/env_error_share"] == 0 and metrics["episode/turns_mean"] > 1
    decode = AutoTokenizer.from_pretrained(phi3_style_model).decode
    turns = [(p, c) for prompts, outs in calls[1:] for p, c in zip(prompts, outs)]  # turns 2.. (one per episode)
    for c in sampled:
        full = np.concatenate([c.prompt_ids, c.completion_ids])
        starts = [i for i in range(1, len(c.mask)) if c.mask[i] and not c.mask[i - 1]]
        assert c.mask[0] and len(starts) == c.info["turns"] - 1
        for start in starts:  # the prompt of turn k+1 is exactly this episode's ids so far
            prompt = full[: len(c.prompt_ids) + start]
            assert any(np.array_equal(p, prompt) and np.array_equal(ids, c.completion_ids[start:start + len(ids)])
                       for p, ids in turns)
        feedback = [m["content"] for m in c.messages if m["role"] == "user"]
        glue = [c.completion_ids[i:j] for i, j in zip(
            [k for k in range(1, len(c.mask)) if not c.mask[k] and c.mask[k - 1]], starts)]
        for ids, words in zip(glue, feedback):
            text = decode(ids)
            assert f"<|user|>\n{words}<|end|>\n<|assistant|>\n" in text and "<|endoftext|>" not in text, text


def test_a_template_without_a_tool_role_is_seen_when_the_trainer_is_built(tiny_model_dir, tmp_path):
    """Phi-3's template drops ``tool`` messages: the runner decides while the trainer is built,
    before any step samples, that tool results go back as user messages (every tool-calling
    episode used to end as an environment error at its first call)."""
    config = RunConfig.from_dict({
        "model": {"path": with_template(tiny_model_dir, tmp_path / "no-tool-role", NO_TOOL_ROLE), "max_length": 1024},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}],
        "environment": {"tools": ["calculator"], "max_turns": 2, "max_episode_tokens": 64},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    assert trainer.episodes.tool_results_role == "user"
    assert trainer.episodes.model_name == str(tmp_path / "no-tool-role")


#: anything after the assistant's first turn raises: neither a tool nor a user message can follow it
ONE_EXCHANGE = (
    "{% for m in messages %}{% if loop.index0 > 1 %}{{ raise_exception('one exchange only') }}{% endif %}"
    "{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")


@pytest.mark.parametrize("how", ["train", "check_run"])
def test_a_template_that_shows_a_tools_result_in_no_role_is_refused_before_any_weight_loads(
        tiny_model_dir, tmp_path, monkeypatch, how):
    """The check ran once the runner was built, after the models loaded (minutes for a real model);
    it now asks the folder's tokenizer alone, before any engine loads, and ``polyrl launch``'s
    ``check_run`` refuses it too."""
    from polyrl import engines
    from polyrl.errors import ConfigError
    from polyrl.trainer import check_run

    loaded: list[str] = []
    monkeypatch.setattr(engines, "Engine", lambda *args, **kw: loaded.append("engine") or pytest.fail("weights loaded"))
    model = with_template(tiny_model_dir, tmp_path / "one-exchange", ONE_EXCHANGE)
    config = RunConfig.from_dict({
        "model": {"path": model, "max_length": 1024},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}],
        "environment": {"tools": ["calculator"], "max_turns": 2, "max_episode_tokens": 64},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError) as err:
        Trainer(config) if how == "train" else check_run(config)
    assert err.value.field == "environment.tools" and "one exchange only" in str(err.value)
    assert repr(model) in str(err.value) and "Qwen2.5" in err.value.fix
    assert loaded == []


#: Phi-3's layout with a generation prompt that opens the reasoning (QwQ's and DeepSeek-R1 distills' way)
OPENS_THINK = TEMPLATE.replace("'<|assistant|>\\n'", "'<|assistant|>\\n<think>\\n'")


def test_completions_sampled_after_a_generation_prompt_that_opens_think_are_read_as_reasoning(tiny_model_dir, tmp_path):
    """The trainer asks the template once, when the models load, and marks every completion whose
    prompt ends with the open ``<think>`` (``Completion.reasoning_open``): without ``</think>`` it
    is all reasoning and numeric_match scores it 0 (its text was read whole as the answer)."""
    from transformers import AutoTokenizer

    from polyrl.rewards.inputs import answer_part

    model = with_template(tiny_model_dir, tmp_path / "opens-think", OPENS_THINK)
    config = RunConfig.from_dict({
        "model": {"path": model, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 8},
        "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    assert AutoTokenizer.from_pretrained(model).decode(trainer._think_suffix.tolist()) == "<|assistant|>\n<think>\n"
    out = trainer._sample([{"prompt": [{"role": "user", "content": "What is 6 * 7?"}], "answer": "42"}],
                          config.generation.sampling(0))
    assert len(out) == 2 and all(c.reasoning_open for c in out)
    assert [answer_part(c) for c in out if "</think>" not in c.text] == [None] * sum("</think>" not in c.text for c in out)
    plain = trainer._sample([{"prompt": "6 * 7 =", "answer": "42"}], config.generation.sampling(0))
    assert not any(c.reasoning_open for c in plain)  # a text prompt: no template, no open <think>


def test_a_model_without_a_chat_template_on_text_prompts_still_loads(tiny_model_dir, tmp_path):
    """Asking the template whether it opens ``<think>`` must not refuse a base model whose prompts
    are plain text (its encode_chat raises: no template)."""
    model = tmp_path / "no-template"
    shutil.copytree(tiny_model_dir, model)
    settings = json.loads((model / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(settings))
    for extra in model.glob("chat_template.*"):
        extra.unlink()
    config = RunConfig.from_dict({
        "model": {"path": str(model), "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"task": "arithmetic", "options": {"count": 8, "chat": False}},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    assert trainer._think_suffix is None
    out = trainer._sample([{"prompt": "6 * 7 =", "answer": "42"}], config.generation.sampling(0))
    assert len(out) == 2 and not any(c.reasoning_open for c in out)


def test_a_dataset_prompt_in_a_role_the_template_drops_is_refused_when_the_trainer_is_built(tiny_model_dir, tmp_path):
    """Phi-3's template renders system, user and assistant messages only: a prompt's ``developer``
    instructions were dropped from every rendering, and the run trained on prompts without them,
    silently. Now the startup check names the row, the role and the roles the template renders."""
    from polyrl.errors import ConfigError

    developer = [{"role": "developer", "content": "Answer with the number only."},
                 {"role": "user", "content": "What is 2+2?"}]
    rows = [{"prompt": "What is 1+1?", "answer": "2"}, {"prompt": developer, "answer": "4"}]
    config = RunConfig.from_dict({
        "model": {"path": with_template(tiny_model_dir, tmp_path / "phi3", NO_TOOL_ROLE), "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 8},
        "data": {"rows": rows},
        "rewards": [{"name": "numeric_match"}],
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError) as err:
        Trainer(config)
    assert err.value.field == "data"
    assert ("row 1 of rows: message 0 of column 'prompt' has role 'developer', which the model's chat template does "
            "not render (in that place it renders 'system', 'user', 'assistant')") in str(err.value), str(err.value)
