"""Control characters in the text a run's setup adds to every prompt (``polyrl.control_setup``): a
tool's schema, ``data.system_prompt`` and ``model.chat_template_kwargs``' text.

SmolLM2 (polyrl's default model) has no token for U+0004 and reads it as ``<|endoftext|>``. Its
template renders no tools, so the tools are taught in a system message, where ``tool_format =
"json"`` (``examples/agent_calculator.toml``) writes each tool's description as is: a U+0004 pasted
into a docstring ended the text for the model in every episode's first prompt, with nothing said.
Such text is asked once, at startup, and refused naming the tool or the key; a final observation
is not (it is never encoded: see the last test).
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from family_chat import Scripted, encoder

from polyrl.agents.builtin import GuessNumber, calculator
from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.spec import Observation
from polyrl.agents.tools import ToolBox
from polyrl.config import RunConfig
from polyrl.control_chars import ControlProbe
from polyrl.errors import ConfigError
from polyrl.types import SamplingParams

pytest.importorskip("transformers")

END = 0  # SmolLM2's <|endoftext|>, what it reads U+0004 as


def pasted_calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.\x04

    Args:
        expression: the arithmetic to evaluate, e.g. 2 * (3 + 4)
    """
    return calculator(expression)


def pasted_argument(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: the arithmetic\x16 to evaluate
    """
    return calculator(expression)


@pytest.fixture(scope="module")
def probe(smollm2_tokenizer) -> ControlProbe:
    tok = smollm2_tokenizer
    return ControlProbe(lambda text: tok.encode(text, add_special_tokens=False), tok.decode)


def _first_prompt(tok, tool) -> list[int]:
    """An episode's first prompt as ``examples/agent_calculator.toml`` renders it on SmolLM2."""
    runner = EpisodeRunner(lambda *_: [], encoder(tok), EpisodeLimits(), toolbox=ToolBox([tool]),
                           tools_prompt_format="json", tool_format="json")
    return runner.first_prompt_ids("What is 12 * 34?").tolist()


def test_a_docstrings_u0004_ends_the_text_in_every_first_prompt(smollm2_tokenizer):
    """The evidence: SmolLM2 reads the pasted docstring's U+0004 as <|endoftext|> in the system
    message teaching the tools; the real calculator's first prompt has none."""
    assert smollm2_tokenizer.convert_tokens_to_ids("<|endoftext|>") == END
    assert END in _first_prompt(smollm2_tokenizer, pasted_calculator)
    assert END not in _first_prompt(smollm2_tokenizer, calculator)


def test_a_tool_schema_holding_u0004_is_refused_naming_the_tool_and_character(probe):
    from polyrl.control_setup import check_tool_schemas

    with pytest.raises(ConfigError) as caught:
        check_tool_schemas(probe, ToolBox([calculator, pasted_calculator]).schemas, "environment.tools")
    error = caught.value
    assert error.field == "environment.tools"
    assert error.message.startswith(
        "tool 'pasted_calculator', in every episode's first prompt: its schema at ['description'] holds the "
        "control character U+0004 ('\\x04') at character 42, which the model's tokenizer cannot encode: the model "
        "would read '<|endoftext|>' in its place"), error.message
    assert "docstring" in error.fix and "\n" not in str(error)
    with pytest.raises(ConfigError, match=r"tool 'pasted_argument', .* at \['parameters'\]\['properties'\]"
                                          r"\['expression'\]\['description'\] holds the control character U\+0016"):
        check_tool_schemas(probe, ToolBox([pasted_argument]).schemas, "environment.tools")


def test_clean_schemas_and_controls_the_tokenizer_encodes_pass(probe):
    def paged(expression: str) -> str:
        """Evaluate.\x0cAn expression\x1c with a form feed and U+001C, both SmolLM2 tokens.

        Args:
            expression: the arithmetic\tto evaluate
        """
        return expression

    from polyrl.control_setup import check_config_text, check_tool_schemas

    check_tool_schemas(probe, ToolBox([calculator, paged]).schemas, "environment.tools")
    check_tool_schemas(None, ToolBox([pasted_calculator]).schemas, "environment.tools")  # nothing to ask
    check_config_text(probe, "Be brief.\x0c", {"enable_thinking": False, "note": "a\tb", "items": ["x\x1cy"]})


def test_config_text_holding_a_misread_control_is_refused_naming_its_key(probe):
    from polyrl.control_setup import check_config_text

    with pytest.raises(ConfigError) as caught:
        check_config_text(probe, "Be\x04 brief.", {})
    assert caught.value.field == "data.system_prompt"
    assert caught.value.message.startswith("data.system_prompt: the system message every chat prompt opens with "
                                           "holds the control character U+0004 ('\\x04') at character 2"), caught.value
    with pytest.raises(ConfigError) as caught:
        check_config_text(probe, None, {"enable_thinking": False, "persona": {"name": "a\x13b"}})
    assert caught.value.field == "model.chat_template_kwargs"
    assert caught.value.message.startswith("model.chat_template_kwargs: variable 'persona' at ['name'] holds the "
                                           "control character U+0013"), caught.value


# --- the run refuses them at startup (the tiny model without a token for byte 0x04, as SmolLM2) -----


@pytest.fixture(scope="module")
def misreading_model(tiny_model_dir, tmp_path_factory) -> str:
    from test_control_chars import _without_byte_04

    return _without_byte_04(tiny_model_dir, tmp_path_factory.mktemp("models"), "<|endoftext|>")


def _config(path: str, tmp_path, *, environment: dict | None = None, **sections) -> RunConfig:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(4)))
    return RunConfig.from_dict({
        "model": {"path": path, "device": "cpu", "max_length": 1024, **sections.get("model", {})},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"path": str(rows), **sections.get("data", {})}, "rewards": [{"name": "numeric_match"}],
        **({"environment": environment} if environment is not None else {}),
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})


TOOL = '''
from polyrl.agents.builtin import calculator


def pasted_calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.\\x04

    Args:
        expression: the arithmetic to evaluate
    """
    return calculator(expression)


class PastedToolGuess:
    """guess_number offering the pasted calculator as its own tool."""

    def __init__(self, options):
        from polyrl.agents.builtin import GuessNumber

        self.game = GuessNumber(options)
        self.tools = [pasted_calculator]

    def reset(self, row):
        return self.game.reset(row)

    def step(self, message):
        return self.game.step(message)


def create(options):
    return PastedToolGuess(options)
'''


def test_the_run_refuses_a_tool_whose_schema_holds_a_misread_control(misreading_model, tmp_path):
    from polyrl.trainer import Trainer

    (tmp_path / "pasted.py").write_text(TOOL)
    config = _config(misreading_model, tmp_path, environment={
        "tools": [f"{tmp_path / 'pasted.py'}:pasted_calculator"], "tool_format": "json", "max_turns": 2,
        "max_episode_tokens": 64})
    with pytest.raises(ConfigError) as caught:
        Trainer(config)
    assert caught.value.field == "environment.tools", caught.value
    assert caught.value.message.startswith("tool 'pasted_calculator', in every episode's first prompt: its schema "
                                           "at ['description'] holds the control character U+0004"), caught.value


def test_the_run_refuses_an_environments_own_tool_holding_a_misread_control(misreading_model, tmp_path):
    from polyrl.trainer import Trainer

    (tmp_path / "pasted.py").write_text(TOOL)
    config = _config(misreading_model, tmp_path, environment={
        "name": f"{tmp_path / 'pasted.py'}:create", "tool_format": "json", "max_turns": 2,
        "max_episode_tokens": 64})
    with pytest.raises(ConfigError) as caught:
        Trainer(config)
    assert caught.value.field == "environment.name", caught.value
    assert caught.value.message.startswith(f"environment '{tmp_path / 'pasted.py'}:create': tool 'pasted_calculator'"
                                           ", in every episode's first prompt: its schema at ['description'] holds "
                                           "the control character U+0004"), caught.value


def test_the_run_refuses_a_system_prompt_holding_a_misread_control_naming_its_key(misreading_model, tmp_path):
    """data.system_prompt was refused as row 0 of the data file (field data, a tr command for the file)."""
    from polyrl.trainer import Trainer

    with pytest.raises(ConfigError) as caught:
        Trainer(_config(misreading_model, tmp_path, data={"system_prompt": "Answer\x04 briefly."}))
    assert caught.value.field == "data.system_prompt", caught.value
    assert "tr -d" not in caught.value.fix


def test_the_run_refuses_a_template_variables_text_holding_a_misread_control(misreading_model, tmp_path):
    """A chat template that reads the variable writes it into every prompt; none asked it."""
    from polyrl.trainer import Trainer

    with pytest.raises(ConfigError) as caught:
        Trainer(_config(misreading_model, tmp_path, model={"chat_template_kwargs": {"persona": "calm\x04"}}))
    assert caught.value.field == "model.chat_template_kwargs", caught.value


def test_the_dry_run_refuses_them_from_the_model_folders_tokenizer(misreading_model, tmp_path):
    """``polyrl launch --dry-run`` (``check_run``) loads no weights: the folder's tokenizer is asked."""
    from polyrl.trainer import check_run

    (tmp_path / "pasted.py").write_text(TOOL)
    config = _config(misreading_model, tmp_path, environment={
        "tools": [f"{tmp_path / 'pasted.py'}:pasted_calculator"], "tool_format": "json", "max_turns": 2,
        "max_episode_tokens": 64})
    with pytest.raises(ConfigError, match=r"^environment.tools: tool 'pasted_calculator', .* U\+0004") as caught:
        check_run(config)
    assert caught.value.field == "environment.tools"
    with pytest.raises(ConfigError) as caught:
        check_run(_config(misreading_model, tmp_path, data={"system_prompt": "Answer\x04 briefly."}))
    assert caught.value.field == "data.system_prompt", caught.value


@pytest.mark.slow
def test_polyrl_generate_refuses_a_template_variable_holding_a_misread_control(misreading_model):
    from bad_text_util import ENV, POLYRL

    result = subprocess.run([*POLYRL, "generate", "--model", misreading_model, "--max-new-tokens", "2",
                             "--threads", "1", "--chat-template-kwargs", '{"persona": "calm\\u0004"}', "What is 2 + 3?"],
                            capture_output=True, text=True, env=ENV, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith(
        "error: --chat-template-kwargs: variable 'persona' holds the control character U+0004"), errors


def test_a_clean_run_with_tools_and_a_system_prompt_trains(misreading_model, tmp_path):
    from polyrl.trainer import Trainer

    config = _config(misreading_model, tmp_path, data={"system_prompt": "Answer briefly.\x0c"},
                     environment={"tools": ["calculator"], "tool_format": "json", "max_turns": 2,
                                  "max_episode_tokens": 64})
    assert Trainer(config).run(progress=False)["steps"] == 1


# --- a final observation is never encoded ---------------------------------------------------------------


class LastWordsPasted(GuessNumber):
    """guess_number whose final observation (done) carries U+0004."""

    def step(self, assistant_message):
        return Observation([{"role": "user", "content": "Over.\x04"}], reward=0.0, done=True)


def test_a_final_observation_is_kept_for_the_rewards_and_never_becomes_tokens(smollm2_tokenizer, probe):
    """Not a gap: a done observation's messages are kept in the conversation the rewards and the
    completions log read (the environment's words, as it wrote them), never inserted into the ids."""
    tok = smollm2_tokenizer
    model = Scripted(tok, lambda text, j: "50", tok.convert_tokens_to_ids("<|im_end|>"))
    runner = EpisodeRunner(model.generate, encoder(tok), EpisodeLimits(max_turns=3, max_episode_tokens=200,
                                                                       max_length=2048),
                           make_environment=lambda: LastWordsPasted({}), environment_name="last", probe=probe)
    [c] = runner.run([{"prompt": "Guess my number.", "secret": 40}], SamplingParams(max_new_tokens=8, n=1, seed=0))
    assert "env_error" not in c.info and c.info["turns"] == 1 and c.mask.all()
    assert c.messages[-1] == {"role": "user", "content": "Over.\x04"}
    assert END not in np.concatenate([c.prompt_ids, c.completion_ids]).tolist()
    assert c.text == "50"  # what a reward model scores: the last turn, not the observation
