"""Control characters in the text an episode inserts (``polyrl.agents.control_text``), on SmolLM2's
real tokenizer, which has no token for U+0004 and reads it as ``<|endoftext|>``.

The startup check reads the dataset's prompts only; an environment's first messages and
observations and a tool's results are encoded into the next turn's ids mid-episode. One of
them holding such a character ends its episode as an environment error naming the environment,
the turn and the character (a tool's result: an error the model reads instead), with a warning;
a character the tokenizer encodes as itself changes nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from family_chat import Scripted, check, encoder
from structlog.testing import capture_logs

from polyrl.agents.builtin import GuessNumber
from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.parsing import parse_tool_calls
from polyrl.agents.spec import Observation
from polyrl.agents.tools import ToolBox
from polyrl.control_chars import ControlProbe
from polyrl.types import SamplingParams

pytest.importorskip("transformers")

ROWS = [{"prompt": "Guess my number.", "secret": 40}]
ONE = SamplingParams(max_new_tokens=12, n=1, seed=0)
END = 0  # SmolLM2's <|endoftext|>, what it reads U+0004 as


class PastedGuess(GuessNumber):
    """guess_number whose feedback carries ``char`` (text pasted from a terminal, say)."""

    def __init__(self, char: str) -> None:
        super().__init__({"max_guesses": 3})
        self.char = char

    def step(self, assistant_message):
        obs = super().step(assistant_message)
        return Observation([{**m, "content": m["content"].replace(" ", f"{self.char} ", 1)} for m in obs.messages],
                           reward=obs.reward, done=obs.done)


@pytest.fixture(scope="module")
def smollm2(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture(scope="module")
def probe(smollm2) -> ControlProbe:
    return ControlProbe(lambda text: smollm2.encode(text, add_special_tokens=False), smollm2.decode)


def _model(tok, answers=("50", "30")) -> Scripted:
    """Guesses ``answers`` in turn (by how many turns the prompt already holds)."""
    return Scripted(tok, lambda text, j: answers[min(text.count("<|im_start|>assistant") - 1, len(answers) - 1)],
                    tok.convert_tokens_to_ids("<|im_end|>"))


def _guessing(tok, make, probe, **options) -> tuple[EpisodeRunner, Scripted]:
    model = _model(tok)
    limits = EpisodeLimits(max_turns=2, max_episode_tokens=200, max_length=2048)
    return EpisodeRunner(model.generate, encoder(tok), limits, make_environment=make,
                         environment_name="pasted_guess", probe=probe, **options), model


def test_an_observation_holding_u0004_ends_its_episode_naming_the_environment_turn_and_character(smollm2, probe):
    assert smollm2.convert_tokens_to_ids("<|endoftext|>") == END
    runner, model = _guessing(smollm2, lambda: PastedGuess("\x04"), probe)
    with capture_logs() as logs:
        [c] = runner.run(ROWS, ONE)
    error = c.info.get("env_error")
    assert error is not None and error.startswith(
        "environment 'pasted_guess', its step after turn 1: message 0 ('user') at ['content'] holds the control "
        "character U+0004 ('\\x04') at character 6, which the model's tokenizer cannot encode: the model would "
        "read '<|endoftext|>' in its place. Fix: have the environment leave it out"), error
    # the episode stops before the observation: one sampled turn, nothing inserted, no <|endoftext|>
    assert c.info["turns"] == 1 and c.mask.all() and END not in c.completion_ids.tolist()
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["environment"], e["turn"]) for e in warned] == [("pasted_guess", 1)], warned
    assert "U+0004" in warned[0]["error"] and "Traceback" not in warned[0]["error"]
    assert check(model, [c]) == []


@pytest.mark.parametrize("char", ["\x0c", "\x1c"])
def test_a_control_the_tokenizer_encodes_is_inserted_as_text(smollm2, probe, char):
    """Form feed and U+001C are SmolLM2 tokens: the observation goes in unchanged, as without a probe."""
    with_probe = _guessing(smollm2, lambda: PastedGuess(char), probe)[0].run(ROWS, ONE)[0]
    without = _guessing(smollm2, lambda: PastedGuess(char), None)[0].run(ROWS, ONE)[0]
    assert "env_error" not in with_probe.info and with_probe.info["turns"] == 2
    assert np.array_equal(with_probe.completion_ids, without.completion_ids)
    inserted = smollm2.decode(with_probe.completion_ids[~with_probe.mask])
    assert f"Lower.{char} 2 guesses left." in inserted, repr(inserted)


def test_a_clean_guess_number_episode_is_unaffected(smollm2, probe):
    runner, model = _guessing(smollm2, lambda: GuessNumber({"max_guesses": 3}), probe)
    with capture_logs() as logs:
        [c] = runner.run(ROWS, ONE)
    assert "env_error" not in c.info and c.info["turns"] == 2 and not c.mask.all()
    assert "Lower. 2 guesses left." in smollm2.decode(c.completion_ids[~c.mask])
    assert not [e for e in logs if e["log_level"] == "warning"], logs
    assert check(model, [c]) == []


def test_first_messages_holding_u0004_end_the_episode_at_its_reset(smollm2, probe):
    """guess_number shows the row's prompt as its first message: no startup check reads it."""
    runner, _ = _guessing(smollm2, lambda: GuessNumber({}), probe)
    with capture_logs() as logs:
        [c] = runner.run([{"prompt": "Guess\x04 my number.", "secret": 40}], ONE)
    assert c.info.get("env_error", "").startswith(
        "environment 'pasted_guess', its reset: message 0 ('user') at ['content'] holds the control character "
        "U+0004 ('\\x04') at character 5"), c.info
    assert c.info["turns"] == 0 and len(c.completion_ids) == 0
    assert any(e["log_level"] == "warning" and "U+0004" in e["error"] for e in logs), logs


def echo(text: str) -> str:
    """Repeat the text.

    Args:
        text: what to repeat
    """
    return text


def test_a_tool_result_holding_u0004_is_an_error_the_model_reads(smollm2, probe):
    """The model controls what a tool answers (the python tool prints ``chr(4)``): ending the episode
    unscored would let it escape its reward, so it reads an error instead, as for a tool that raises."""
    call = '<tool_call>\n' + json.dumps({"name": "echo", "arguments": {"text": "a\u0004b"}}) + '\n</tool_call>'
    model = Scripted(smollm2, lambda text, j: call if text.count("<|im_start|>assistant") == 1 else "done",
                     smollm2.convert_tokens_to_ids("<|im_end|>"))
    runner = EpisodeRunner(model.generate, encoder(smollm2), EpisodeLimits(max_turns=3, max_episode_tokens=400,
                                                                          max_length=2048),
                           toolbox=ToolBox([echo]), parse=parse_tool_calls, probe=probe)
    with capture_logs() as logs:
        [c] = runner.run([{"prompt": "Repeat it."}], SamplingParams(max_new_tokens=60, n=1, seed=0))
    assert "env_error" not in c.info and c.info["tool_calls"] == 1 and c.info["tool_errors"] == 1, c.info
    [result] = [m for m in c.messages if m["role"] == "tool"]
    assert result["content"].startswith(
        "error: tool 'echo': its result holds the control character U+0004 ('\\x04') at character 1, which the "
        "model's tokenizer cannot encode: the model would read '<|endoftext|>' in its place; the result is not "
        "shown"), result
    inserted = smollm2.decode(c.completion_ids[~c.mask])
    assert "error: tool 'echo'" in inserted and END not in c.completion_ids.tolist(), inserted
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1 and warned[0]["tool"] == "echo" and warned[0]["turn"] == 1, warned
    assert check(model, [c]) == []
