"""Control characters in prompts (``polyrl.control_chars``): one the model's tokenizer cannot
encode as itself (SmolLM2 reads U+0004 as ``<|endoftext|>``) is refused naming its row; the
others (tab, line ends, form feed, U+001C-U+001E, U+0085) are text and are kept."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from polyrl import api
from polyrl.errors import ConfigError

from bad_text_util import ENV, POLYRL  # noqa: E402

pytest.importorskip("polyrl_torch")

#: the byte-level symbol of byte 0x04 (GPT-2's byte alphabet maps bytes below 0x21 to U+0100 + n)
_BYTE_04 = "\u0104"
#: controls that are text: kept, in a tokenizer that misreads U+0004
KEPT = "\t\n\r\x0c\x0b\x1b\x1c\x1d\x1e\x1f\x7f\x85"


def _without_byte_04(tiny_model_dir: str, folder, unknown: str | None) -> str:
    """The tiny model with no token for byte 0x04, as SmolLM2's vocabulary has none: encoded as
    ``unknown`` (SmolLM2's is ``<|endoftext|>``), or, with None, dropped."""
    out = folder / f"tiny-no-04-{unknown is not None}"
    shutil.copytree(tiny_model_dir, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    del spec["model"]["vocab"][_BYTE_04]
    spec["model"]["unk_token"] = unknown
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return str(out)


@pytest.fixture(scope="module")
def misreading_model(tiny_model_dir, tmp_path_factory) -> str:
    return _without_byte_04(tiny_model_dir, tmp_path_factory.mktemp("models"), "<|endoftext|>")


def _run(model: str, tmp_path, rows: list[dict]) -> None:
    def short(completions, **_: object) -> list[float]:
        return [0.0] * len(completions)

    api.run(api.grpo, policy=api.Agent(model, backend="torch"), prompts=rows, rewards=[short],
            generation_config=api.GenerationConfig(max_new_tokens=2, group_size=2),
            grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "run")))


def test_smollm2_reads_some_controls_as_end_of_text_and_keeps_the_others(smollm2_tokenizer):
    """The evidence: SmolLM2's own vocabulary (polyrl's default model) has no token for these
    bytes; every other control round-trips."""
    from polyrl.control_chars import ControlProbe

    tok = smollm2_tokenizer
    probe = ControlProbe(lambda text: tok.encode(text, add_special_tokens=False), tok.decode)
    misread = {f"U+{c:04X}" for c in [*range(1, 32), *range(0x7F, 0xA0)] if probe.read_as(chr(c)) is not None}
    assert misread == {"U+0004", "U+0006", "U+0013", "U+0014", "U+0016", "U+001D"}
    assert probe.read_as("\x04") == "<|endoftext|>"
    assert probe.find([{"role": "user", "content": "ok\tfine"}, {"role": "user", "content": "x\x16y"}]) == \
        ("[1]['content']", 1, "\x16")


def test_api_run_refuses_a_prompt_with_a_control_the_tokenizer_misreads(misreading_model, tmp_path):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "What is\x04 2 + 1?", "answer": "3"}]
    with pytest.raises(ConfigError) as caught:
        _run(misreading_model, tmp_path, rows)
    message = caught.value.message
    assert caught.value.field == "prompts", caught.value
    assert message.startswith("row 1 of rows: column 'prompt' holds the control character U+0004"), message
    assert "the model would read '<|endoftext|>' in its place" in message, message
    assert "tr -d '\\004'" in caught.value.fix and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained


def test_a_control_the_tokenizer_drops_is_refused_in_a_chat(tiny_model_dir, tmp_path):
    model = _without_byte_04(tiny_model_dir, tmp_path, None)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 +\x04 1?"}]
    with pytest.raises(ConfigError) as caught:
        _run(model, tmp_path, [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": chat, "answer": "3"}])
    assert "row 1 of rows: column 'prompt' at [1]['content'] holds the control character U+0004 ('\\x04') at " \
           "character 3" in caught.value.message, caught.value
    assert caught.value.message.endswith("which the model's tokenizer cannot encode: it drops it"), caught.value


def test_controls_the_tokenizer_encodes_are_trained_on(misreading_model, tmp_path):
    rows = [{"prompt": f"def f():{KEPT}return 1", "answer": "1"}, {"prompt": "page\x0cbreak", "answer": "2"}]
    _run(misreading_model, tmp_path, rows)
    assert (tmp_path / "run").is_dir()


def test_polyrl_generate_refuses_a_control_the_tokenizer_misreads(misreading_model):
    result = subprocess.run([*POLYRL, "generate", "--model", misreading_model, "--max-new-tokens", "2",
                             "--threads", "1", "What is\x04 2 + 3?"], capture_output=True, text=True, env=ENV,
                            timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(errors) == 1 and "the command line: the prompt holds the control character U+0004" in errors[0], errors


def test_the_dry_run_refuses_a_control_the_tokenizer_misreads(misreading_model, tmp_path, capsys):
    """``polyrl launch --dry-run`` asks the model folder's tokenizer alone, as it does for roles."""
    pytest.importorskip("torch")  # polyrl launch needs torchrun
    from polyrl.cli import main

    rows = tmp_path / "rows.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{misreading_model}"\ndevice = "cpu"\n[data]\npath = "{rows}"\n'
                      '[[rewards]]\nname = "numeric_match"\n')
    args = ["launch", str(config), "--dry-run", "--nproc-per-node", "1", "--output-dir", str(tmp_path / "out")]
    good = {"prompt": f"What is{KEPT}1 + 1?", "answer": "2"}
    rows.write_text("".join(json.dumps(r) + "\n" for r in (good, {"prompt": "What is\x04 2 + 1?", "answer": "3"})))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data: {rows} line 2 (row 1): column 'prompt' holds the "
                                               "control character U+0004"), err
    rows.write_text(json.dumps(good) + "\n")
    assert main(args) == 0, capsys.readouterr().err


#: an environment whose feedback holds U+0004 (pasted from a terminal, say)
PASTED_ENV = """
from polyrl.agents import Observation


class Pasted:
    def __init__(self, options):
        pass

    def reset(self, row):
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        return Observation([{"role": "user", "content": "Go on.\\x04 More."}])


def make(options):
    return Pasted(options)
"""


def test_an_observation_the_tokenizer_misreads_ends_its_episode_in_a_run(misreading_model, tmp_path):
    """Mid-episode text is no dataset prompt: the runner asks the run's probe (the engine's
    ``encode_prompt``) of each observation. Before, U+0004 went in as ``<|endoftext|>``, unsaid."""
    from structlog.testing import capture_logs

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    (tmp_path / "pasted_env.py").write_text(PASTED_ENV)
    config = RunConfig.from_dict({
        "model": {"path": misreading_model}, "generation": {"group_size": 2, "max_new_tokens": 8, "stop": ["a", "e", " "]},
        "data": {"task": "arithmetic", "options": {"count": 8}}, "rewards": [{"name": "environment"}],
        "environment": {"name": f"{tmp_path / 'pasted_env.py'}:make", "max_turns": 2, "max_episode_tokens": 64},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    sampled: list = []
    sample = trainer._sample

    def recording(rows, sampling, **kwargs):
        sampled.extend(sample(rows, sampling, **kwargs))
        return sampled[-len(rows) * sampling.n:]

    trainer._sample = recording  # type: ignore[method-assign]
    with capture_logs() as logs:
        assert trainer.run(progress=False)["steps"] == 1
    failed = [c for c in sampled if "env_error" in c.info]
    assert failed and len(sampled) == 4, [c.info for c in sampled]
    for c in failed:
        assert "its step after turn 1: message 0 ('user') at ['content'] holds the control character U+0004 " \
               "('\\x04') at character 6, which the model's tokenizer cannot encode: the model would read " \
               "'<|endoftext|>' in its place" in c.info["env_error"], c.info["env_error"]
        assert c.info["turns"] == 1 and c.mask.all()  # nothing inserted after the turn
    # the others' first turn was cut at max_new_tokens: no step was asked for
    assert all(c.finish_reason == "length" and c.info["turns"] == 1 for c in sampled if "env_error" not in c.info)
    warned = [e for e in logs if "control character" in e["event"]]
    assert len(warned) == len(failed) and all(e["turn"] == 1 and "U+0004" in e["error"] for e in warned), warned
