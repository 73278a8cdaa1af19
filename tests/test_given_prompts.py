"""Prompts given without a data file: rows passed to ``polyrl.api.run`` or ``polyrl.trl.GRPOTrainer``
(a list of dicts, a 🤗 Dataset), a prompt passed to an engine, ``polyrl generate``'s argument. They
get the data files' rules (``polyrl.nul_bytes``, ``polyrl.text_validity``): a NUL character in a
row reached the tokenizer with nothing said, a blank ``polyrl generate`` prompt was sampled from,
and a row whose prompt is None was told to rename its prompt column."""

from __future__ import annotations

import subprocess

import pytest

from polyrl import api
from polyrl.errors import ConfigError

from bad_text_util import ENV, POLYRL  # noqa: E402

pytest.importorskip("polyrl_torch")


def _rows(bad_prompt: object = None, bad_answer: object = None) -> list[dict]:
    """Four plain rows; row 1's prompt (or answer) replaced by the value under test."""
    rows: list[dict] = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]
    if bad_prompt is not None:
        rows[1]["prompt"] = bad_prompt
    if bad_answer is not None:
        rows[1]["answer"] = bad_answer
    return rows


def _run(model: str, tmp_path, rows: list[dict], **kwargs: object) -> None:
    def short(completions, **_: object) -> list[float]:
        return [0.0] * len(completions)

    api.run(api.grpo, policy=api.Agent(model, backend="torch"), prompts=rows, rewards=[short],
            generation_config=api.GenerationConfig(max_new_tokens=2, group_size=2),
            grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "run")), **kwargs)


@pytest.mark.parametrize(("rows", "where"), [
    (_rows("What is\0 2 + 1?"), "row 1 of rows: column 'prompt' holds a NUL character (U+0000) at character 7"),
    (_rows([{"role": "system", "content": "be brief"}, {"role": "user", "content": "x\0"}]),
     "row 1 of rows: column 'prompt' at [1]['content'] holds a NUL character (U+0000) at character 1"),
    (_rows(bad_answer="2\0"), "row 1 of rows: column 'answer' holds a NUL character")])
def test_api_run_refuses_a_nul_in_a_row_as_a_data_file_does(tiny_model_dir, tmp_path, rows, where):
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, rows)
    assert caught.value.field == "prompts" and where in caught.value.message, caught.value
    assert "text.replace('\\x00', '')" in caught.value.fix and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained


def test_api_run_refuses_a_nul_in_the_eval_prompts_naming_them(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, _rows(), eval_prompts=_rows(bad_answer="2\0")[:2])
    assert caught.value.field == "eval_prompts" and "column 'answer' holds a NUL character" in caught.value.message


def test_grpo_trainer_refuses_a_nul_in_a_hf_dataset_naming_train_dataset(tiny_model_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from polyrl.trl import GRPOTrainer
    from trl_util import grpo_args, short

    data = datasets.Dataset.from_list(_rows("What is\0 2 + 1?"))
    assert data[1]["prompt"] == "What is\0 2 + 1?"  # datasets keeps it: only polyrl can say so
    with pytest.raises(ConfigError) as caught:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=data).train()
    assert caught.value.field == "train_dataset", caught.value
    assert "column 'prompt' holds a NUL character (U+0000) at character 7" in caught.value.message


def test_a_none_prompt_is_told_as_none_not_as_a_column_to_rename(tiny_model_dir, tmp_path):
    """It was "row 1 of rows has no column 'prompt' (its columns: answer)", fixed by renaming the
    prompt column, which every other row has."""
    rows = _rows()
    rows[1]["prompt"] = None
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, rows)
    assert caught.value.field == "prompts"
    assert "row 1 of rows: the prompt in column 'prompt' is None" in caught.value.message, caught.value
    assert "is not None" in caught.value.fix and "rename" not in caught.value.fix


def test_a_bytes_prompt_is_told_to_be_decoded(tiny_model_dir, tmp_path):
    """Its error read "message 0 is a int, not a table": bytes are a sequence of ints."""
    with pytest.raises(ConfigError) as caught:
        _run(tiny_model_dir, tmp_path, _rows(b"What is 2 + 1?"))
    assert "got b'What is 2 + 1?' (bytes)" in caught.value.message and "message 0" not in caught.value.message
    assert "decode" in caught.value.fix


def test_an_engine_refuses_a_nul_in_a_prompt_given_to_it(tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams

    reg = get_registry()
    if not reg.status("torch").available:
        pytest.skip("torch backend not usable here")
    engine = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="generate", threads=1))
    with pytest.raises(ConfigError, match=r"prompt 1: the prompt at \[0\]\['content'\] holds a NUL character "
                                          r"\(U\+0000\) at character 2"):
        engine.generate(["fine", [{"role": "user", "content": "hi\0"}]], SamplingParams(max_new_tokens=2, n=1))
    assert len(engine.generate(["fine"], SamplingParams(max_new_tokens=2, n=1))) == 1


@pytest.mark.parametrize(("prompt", "raw", "said"), [
    ("", False, "the prompt is empty"), ("  \n", True, "the prompt is empty"),
    ("\u200b", False, "U+200B ZERO WIDTH SPACE")])
def test_polyrl_generate_refuses_a_blank_prompt_before_loading(tiny_model_dir, prompt, raw, said):
    """``polyrl generate "$UNSET"`` sampled from an empty prompt with nothing said (a data file's
    blank prompt is refused). (A NUL cannot reach it: no command line can hold one.)"""
    result = subprocess.run([*POLYRL, "generate", "--model", tiny_model_dir, "--max-new-tokens", "2",
                             *(["--raw"] if raw else []), "--", prompt], capture_output=True, text=True,
                            timeout=120, env=ENV)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert said in errors[0] and 'polyrl generate "What is 2 + 3?"' in errors[0], errors
    assert result.stdout == ""


def test_polyrl_generate_refuses_a_blank_prompt_before_looking_for_the_model(tmp_path):
    result = subprocess.run([*POLYRL, "generate", "--model", str(tmp_path / "absent"), ""], capture_output=True,
                            text=True, timeout=120, env=ENV)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and errors == [
        'error: prompt: the prompt is empty. Fix: pass the text to sample from, e.g. polyrl generate "What is 2 + 3?"'
    ], result.stderr[-2000:]


@pytest.mark.slow
def test_polyrl_generate_still_samples_from_a_prompt(tiny_model_dir):
    result = subprocess.run([*POLYRL, "generate", "--model", tiny_model_dir, "--max-new-tokens", "2", "hi"],
                            capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 0 and result.stdout.strip(), result.stderr[-2000:]
