"""Built-in rewards, Python-function rewards, and how the core combines reward plugins."""

from __future__ import annotations

import asyncio
import functools
import math
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.rewards import builtin
from polyrl.rewards.builtin import boxed_answers, extract_answer, last_number, normalize_answer
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin, load_function_reward
from polyrl.types import Completion, RewardContext, RewardSpec
from work_meter import measured


def completion(text: str, n_tokens: int = 3) -> Completion:
    return Completion(0, [1, 2], list(range(n_tokens)), [0.0] * n_tokens, text=text)


def score(rewards, texts, rows=None, extra=(), options=None, tokens=None):
    """Run a RewardComputer over ``texts`` (rows default to answer "42")."""
    pm = get_plugin_manager(extra=extra, entry_points=False)
    computer = RewardComputer(pm, rewards)
    rows = rows if rows is not None else [{"prompt": "q", "answer": "42"}] * len(texts)
    comps = [completion(t, (tokens or [3] * len(texts))[i]) for i, t in enumerate(texts)]
    context = RewardContext(rows=rows, wanted=tuple(r[0] for r in rewards), options=options or {})
    return computer([r.get("prompt", "q") for r in rows], comps, context)


# --- builtins ----------------------------------------------------------------------------------


def test_answer_extraction_rules():
    assert extract_answer("work... \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert extract_answer("blah\nThe answer is 12.\nbye") == "12."
    assert extract_answer("steps\n#### 7") == "7"
    assert extract_answer("Answer: Paris\n(confident)") == "Paris"
    assert extract_answer("line one\n  Paris  \n\n") == "  Paris  "
    assert extract_answer("x\nlast", "last_line") == "last"
    assert normalize_answer("  **Paris.** ") == "paris"
    assert normalize_answer("$42$") == "42"
    assert last_number("37 + 48 = 85.") == 85.0
    assert last_number("it is -1,234.5 now") == -1234.5
    assert last_number("5-3") is None  # an expression, not its last number
    assert last_number("x = \u22127") == -7.0
    assert last_number("no digits") is None


def test_exact_match():
    res = score([("exact_match", 1.0, {})], ["The answer is 42.", "\\boxed{42}", "41", "answer: 42 or 43"])
    np.testing.assert_array_equal(res.total, [1.0, 1.0, 0.0, 0.0])
    rows = [{"prompt": "q", "answer": "Paris"}] * 2
    res = score([("exact_match", 1.0, {"case_sensitive": True})], ["paris", "Paris"], rows=rows)
    np.testing.assert_array_equal(res.total, [0.0, 1.0])


def test_numeric_match_and_tolerance_and_column_option():
    res = score([("numeric_match", 1.0, {})], ["42", "I think 41", "42.0000001", "nothing", "42.000"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0, 0.0, 0.0, 1.0])  # an integer answer is matched exactly
    rows = [{"prompt": "q", "solution": 3.14159}]
    res = score([("numeric_match", 1.0, {"column": "solution", "tolerance": 0.01})], ["pi is 3.14"], rows=rows)
    assert res.total[0] == 1.0


def test_regex_format():
    pattern = r"<think>.*</think>\s*\d+"
    texts = ["<think>a\nb</think> 42", "42", "x <think></think> 1"]
    res = score([("regex_format", 1.0, {"pattern": pattern})], texts)
    np.testing.assert_array_equal(res.total, [1.0, 0.0, 1.0])
    res = score([("regex_format", 1.0, {"pattern": pattern, "match": "fullmatch"})], texts)
    np.testing.assert_array_equal(res.total, [1.0, 0.0, 0.0])


@pytest.mark.parametrize("pattern", ["x*", "^", ".*", "(?:)", "(a|)", r"\A", "[ab]{0,3}", "(?:<think>)?"])
def test_a_regex_format_search_every_text_passes_is_refused(pattern):
    """These match an empty text at position 0 of any text: every completion scored 1.0."""
    with pytest.raises(ConfigError, match="matches an empty text at the start or the end of any text"):
        score([("regex_format", 1.0, {"pattern": pattern})], ["x", ""])
    res = score([("regex_format", 1.0, {"pattern": pattern, "match": "fullmatch"})], ["x", ""])
    assert res.total[1] == 1.0  # fullmatch holds the empty pattern to the whole text: allowed


@pytest.mark.parametrize("pattern", ["$", r"\Z", "x*$", "(?m)$", "a|$", "[^x]*$", "(a|)$"])
def test_a_regex_format_search_found_at_the_end_of_every_text_is_refused(pattern):
    """These match an empty text at the end of any text (only end anchors look at it): every
    completion scored 1.0, "x*$" included, which was kept as a format."""
    with pytest.raises(ConfigError, match="matches an empty text at the start or the end of any text"):
        score([("regex_format", 1.0, {"pattern": pattern})], ["ok", "", "so bad"])


@pytest.mark.parametrize(("pattern", "scores"), [
    ("^$", [0.0, 1.0, 0.0]), ("^(?!.*bad)", [1.0, 1.0, 0.0]), (r"\b", [1.0, 0.0, 1.0]), ("ok$", [1.0, 0.0, 0.0]),
    ("^x*$", [0.0, 1.0, 0.0]),
])
def test_a_zero_width_regex_format_that_looks_at_the_text_is_kept(pattern, scores):
    """Anchors and lookarounds make an empty match depend on the text: real formats (no 'bad')."""
    res = score([("regex_format", 1.0, {"pattern": pattern})], ["ok", "", "so bad"])
    np.testing.assert_array_equal(res.total, scores)


def suggested_pattern() -> str:
    """The pattern regex_format's error message suggests."""
    with pytest.raises(ConfigError) as info:
        score([("regex_format", 1.0, {})], ["x"])
    return str(info.value).split("options.pattern = '", 1)[1].rsplit("'", 1)[0]


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>a\nb</think>\n42", 1.0), ("<think>\n reason </think>", 1.0),  # honest formats pass
    ("junk <think></think> junk", 0.0), ("<think></think>42", 0.0), ("<think> \n </think>42", 0.0),
    ("<think>a</think><think>b</think>42", 0.0), ("<think>a<think>b</think>42", 0.0),
    ("<think>a</think>42</think>", 0.0), ("<think>never closed", 0.0), ("42", 0.0),
])
def test_the_pattern_regex_format_suggests_is_anchored_and_needs_one_non_empty_think(text, expected):
    suggested = suggested_pattern()
    for match in ("search", "fullmatch"):
        got = score([("regex_format", 1.0, {"pattern": suggested, "match": match})], [text])
        assert got.per_reward["regex_format"][0] == expected


def test_the_suggested_think_pattern_is_linear_time():
    """Counted, not timed (see tests/work_meter.py): the regex engine's steps on 360 kB come to about
    1,300 signal checks; a nested repetition backtracks past the budget and is stopped there."""
    texts = ["<think>" + "a</think" * 20_000, "<think>a" + "</think>" * 20_000, "<think>a</think>" + "b" * 200_000]
    context = RewardContext(rows=[{}] * 3, wanted=("regex_format",),
                            options={"regex_format": {"pattern": suggested_pattern()}})
    got, _ = measured(lambda: builtin.regex_format(texts, context), budget=5_000)
    assert got == [0.0, 0.0, 1.0]
    hanging = ["<think>" + "a" * 40]  # no close: every way to split the a's is tried when repetitions nest
    assert measured(lambda: builtin.regex_format(hanging, context), budget=5_000)[0] == [0.0]


def test_length_penalty_tokens_and_chars():
    res = score([("length_penalty", 1.0, {"target": 4})], ["a", "b", "c"], tokens=[2, 4, 8])
    np.testing.assert_allclose(res.total, [0.0, 0.0, -1.0])
    res = score([("length_penalty", 1.0, {"target": 2, "unit": "chars", "scale": 0.5})], ["ab", "abcd"])
    np.testing.assert_allclose(res.total, [0.0, -0.5])


def test_length_penalty_counts_all_the_model_wrote_in_an_episode_and_nothing_else():
    """An episode: 4990 sampled tokens, 10 inserted by the core; a 20 000-character first turn and a
    last turn "42". Earlier turns are not free, and inserted tokens are not the model's."""
    episode = Completion(prompt_index=0, prompt_ids=[1], completion_ids=list(range(5000)), logprobs=[0.0] * 5000,
                         text="42", mask=[True] * 4990 + [False] * 10,
                         messages=[{"role": "assistant", "content": "x" * 19_998},
                                   {"role": "user", "content": "an observation " * 100},
                                   {"role": "tool", "content": "a tool result " * 100},
                                   {"role": "assistant", "content": "42"}])
    context = RewardContext(rows=[{}], wanted=("length_penalty",), options={})
    pm = get_plugin_manager(entry_points=False)
    for unit, expected in (("chars", -199.0), ("tokens", -48.9)):
        computer = RewardComputer(pm, [("length_penalty", 1.0, {"target": 100, "unit": unit})])
        got = computer(["q"], [episode], context).per_reward["length_penalty"][0]
        assert got == pytest.approx(expected)
    honest = Completion(prompt_index=0, prompt_ids=[1], completion_ids=list(range(60)), logprobs=[0.0] * 60, text="42",
                        mask=[True] * 30 + [False] * 30, messages=[{"role": "assistant", "content": "y" * 40},
                                                                   {"role": "user", "content": "z" * 500},
                                                                   {"role": "assistant", "content": "42"}])
    for unit in ("chars", "tokens"):  # within the target once the environment's share is left out
        computer = RewardComputer(pm, [("length_penalty", 1.0, {"target": 50, "unit": unit})])
        assert computer(["q"], [honest], context).per_reward["length_penalty"][0] == 0.0


def test_a_row_dependent_error_names_the_problem_and_one_fix():
    with pytest.raises(RewardError, match=r"needs column 'gold'.*answer, prompt.*Fix: add a 'gold' column") as info:
        score([("numeric_match", 1.0, {"column": "gold"})], ["42"])
    assert "reward 'numeric_match' from polyrl raised" in str(info.value)
    assert str(info.value).count("Fix:") == 1


@pytest.mark.parametrize(("reward", "options", "match"), [
    ("regex_format", {}, r"needs option 'pattern'.*Fix: set options.pattern"),
    ("regex_format", {"pattern": "("}, r"invalid pattern"),
    ("length_penalty", {}, r"needs option 'target'.*Fix: set options.target = 128"),
    ("length_penalty", {"target": 0}, r"target must be a finite number > 0, got 0"),
    # TOML writes nan and inf: every score was nan, or no completion was ever penalised
    ("length_penalty", {"target": float("nan")}, r"target must be a finite number > 0, got nan"),
    ("length_penalty", {"target": float("inf")}, r"target must be a finite number > 0, got inf"),
    ("exact_match", {"colum": "x"}, r"no option 'colum'"),
    # a traceback before: float("x")
    ("numeric_match", {"tolerance": "x"}, r"option tolerance must be a number >= 0, got 'x'.*Fix: "),
    ("length_penalty", {"target": 8, "scale": "x"}, r"scale must be a finite number, got 'x'"),
    # silently wrong before: nothing within -1, str(list) a character class, "no" truthy
    ("numeric_match", {"tolerance": -1}, r"option tolerance must be a number >= 0, got -1"),
    ("regex_format", {"pattern": ["<think>.*</think>"]}, r"pattern must be a string"),
    ("exact_match", {"case_sensitive": "no"}, r"case_sensitive must be true or false, got 'no'"),
])
def test_bad_builtin_options_are_refused_when_the_rewards_are_set_up(reward, options, match):
    """Before any model loads or sample is scored (not after the first rollout), with one Fix."""
    pm = get_plugin_manager(entry_points=False)
    with pytest.raises(ConfigError, match=match) as info:
        RewardComputer(pm, [(reward, 1.0, options)])
    assert info.value.field == "rewards[0].options"
    assert str(info.value).count("Fix:") <= 1


@pytest.mark.parametrize(("reward", "options", "column"), [
    ("numeric_match", {}, "answer"), ("exact_match", {"column": "gold"}, "gold")])
def test_an_answer_column_the_dataset_lacks_is_refused_when_the_rewards_are_set_up(reward, options, column):
    """Known from the dataset's columns before any model loads (it was an error after the first
    rollout); a dataset that has the column passes."""
    pm = get_plugin_manager(entry_points=False)
    with pytest.raises(ConfigError) as info:
        RewardComputer(pm, [(reward, 1.0, options)], columns=["prompt", "solution"])
    err = info.value
    assert err.field == "rewards[0].options" and f"column {column!r}" in str(err) and "prompt, solution" in str(err)
    assert f"add a {column!r} column" in err.fix and 'column = "<your answer column>"' in err.fix
    RewardComputer(pm, [(reward, 1.0, options)], columns=["prompt", column])


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("The probability is 0", "0.0000001", 0.0),  # no absolute 1e-6 slack by default
    ("p = 0.000001", "0.0000005", 0.0),
    ("p = 0.0000005", "0.0000005", 1.0),
    ("0.30000000000000004", "0.3", 1.0),  # float noise is within the relative tolerance
    ("0.1", 0.1, 1.0),  # a float cell is read as written, not as its binary value
    ("12345678901234567000", "12345678901234567890", 0.0),  # integers compared exactly, not as floats
    ("12345678901234567890", "12345678901234567890", 1.0),
    ("1.2345678901234567e19", 12345678901234567890, 0.0),
    ("x = 2\u2074", "2", 0.0),  # 2⁴ is 16, not 2
    ("2+2", "2", 0.0), ("2+2", "4", 0.0),  # an expression is not read (its first or last number)
    ("5-3", "3", 0.0), ("\\boxed{\\frac{1}{2}}", "2", 0.0), ("2\\sqrt{3}", "2", 0.0), ("\\boxed{5!}", "5", 0.0),
    ("\\boxed{3}\n(see step 4)", "4", 0.0),  # the boxed answer, not the last number
    ("\\boxed{4}\n(see step 2)", "4", 1.0),
    ("\\boxed{2, 4}", "4", 0.0), ("\\boxed{3} or \\boxed{4}", "4", 0.0), ("\\boxed{4} so \\boxed{4.0}", "4", 1.0),
    ("The answer is 4. Check: 2*2 = 4, not 5", "4", 1.0), ("The answer is 3.\nIt took 4 steps", "4", 0.0),
    ("<think>let me try 4", "4", 0.0),  # reasoning cut off: no answer
    ("<think>maybe 4</think> It is 3", "4", 0.0), ("<think>maybe 3? \\boxed{3}</think> It is 4", "4", 1.0),
    # honest answers still score
    ("So 37 + 48 = 85.", "85", 1.0), ("The answer is **85**.", "85", 1.0), ("#### 1,234", "1234", 1.0),
    ("\\boxed{42 \\text{ cm}^2}", "42", 1.0), ("x = \u22127", "-7", 1.0), ("It costs $1,000.50.", "1000.5", 1.0),
    ("42 - that is all", "42", 1.0), ("\\boxed{x = 5}", "5", 1.0), ("Answer: 3e8 m/s", "300000000", 1.0),
])
def test_numeric_match_reads_one_final_number_and_compares_it_exactly(text, answer, expected):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # a fraction of two integers is its exact value, boxed or not, against a decimal or a fraction
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0), ("\\boxed{\\frac{1}{2}}", 0.5, 1.0), ("\\boxed{\\frac{1}{2}}", "1/2", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "0.5", 1.0), ("\\boxed{\\tfrac{1}{2}}", "0.5", 1.0), ("\\boxed{\\frac12}", "0.5", 1.0),
    ("\\boxed{\\frac 1 2}", "0.5", 1.0), ("\\boxed{-\\frac{1}{2}}", "-0.5", 1.0), ("\\frac{-1}{2}", "-1/2", 1.0),
    ("The answer is 1/2.", "0.5", 1.0), ("The answer is 1/2.", "1/2", 1.0), ("1/2", "\\frac{1}{2}", 1.0),
    ("x = -1/2", "-0.5", 1.0), ("\\boxed{2/4}", "0.5", 1.0), ("\\boxed{\\frac{84}{2}}", "42", 1.0),
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{3}", 1.0), ("\\boxed{0.3333}", "1/3", 0.0),  # exact, no rounding slack
    ("\\boxed{\\frac{1}{2} \\text{ cup}}", "0.5", 1.0), ("\\boxed{1/2} or \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{\\frac{1}{2}}", "2", 0.0), ("\\boxed{\\frac{1}{2}}", "1", 0.0),  # never a part of the fraction
    ("answer: 3/4", "3", 0.0), ("answer: 3/4", "4", 0.0),  # a list written 3/4 is 0.75, not a member
    # and no other expression is read, nor its value
    ("\\boxed{\\frac{a+1}{2}}", "0.5", 0.0), ("\\boxed{\\frac{\\sqrt{2}}{2}}", "2", 0.0), ("\\boxed{\\sqrt{4}}", "2", 0.0),
    ("\\boxed{2+2}", "4", 0.0), ("\\boxed{2^4}", "16", 0.0), ("\\boxed{\\frac{1}{2}^2}", "0.5", 0.0),
    ("\\boxed{\\frac{1}{2}!}", "0.5", 0.0), ("\\boxed{\\frac{1}{0}}", "0", 0.0), ("1 / 2", "0.5", 0.0),
    ("answer: 1/2/3", "0.5", 0.0), ("answer: 1/2/3", "3", 0.0), ("12/25/2024", "2024", 0.0), ("3/4.5", "0.75", 0.0),
    ("answer: 2 1/2", "2", 0.0), ("answer: 2 1/2", "0.5", 0.0), ("\\boxed{2\\frac{1}{2}}", "0.5", 0.0),
    ("\\boxed{\\frac123}", "0.5", 0.0), ("\\boxed{\\frac{1}{2}{3}}", "0.5", 0.0), ("3-\\frac12", "0.5", 0.0),
    ("\\sqrt{\\frac12}", "0.5", 0.0), ("2^\\frac12", "0.5", 0.0), ("x-1/2", "0.5", 0.0),
    ("\\frac{" + "9" * 1200 + "}{3}", "3", 0.0),
    # a power or product with a variable holds no number
    ("answer: x^2", "2", 0.0), ("answer: x^{2}", "2", 0.0), ("answer: x**2", "2", 0.0), ("answer: x ** 2", "2", 0.0),
    ("answer: x*2", "2", 0.0), ("answer: 2**3", "2", 0.0), ("answer: 2**3", "3", 0.0), ("answer: 2 ** 3", "2", 0.0),
    ("answer: x^2 = 4", "4", 0.0),  # the first number on the answer line is the exponent: no answer
    ("The answer is **85**.", "85", 1.0), ("\u7b54\u6848\u662f**85**\u4e2a", "85", 1.0),  # markdown stays markdown
    # "42!" is 42 factorial (math-verify reads it so), not an exclaimed 42
    ("The answer is 42!", "42", 0.0), ("\\boxed{42}!", "42", 1.0),
    ("\uff14\uff12", "42", 1.0), ("\\boxed{\uff14\uff12}", "42", 1.0),  # fullwidth digits are digits
])
def test_numeric_match_reads_fractions_of_integers_and_no_other_expression(text, answer, expected):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


def _numeric(text, answer):
    return score([("numeric_match", 1.0, {})], [text], rows=[{"prompt": "q", "answer": answer}]).per_reward[
        "numeric_match"][0]


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # a number glued to a variable is a product, not the number
    ("2x", "2", 0.0), ("answer: 2x", "2", 0.0), ("x = 2y", "2", 0.0), ("The answer is 4a.", "4", 0.0),
    ("\\boxed{2x}", "2", 0.0), ("answer: 2i", "2", 0.0), ("answer: 2pi", "2", 0.0), ("answer: 1/2x", "0.5", 0.0),
    ("answer: 2x2", "2", 0.0), ("2 x 3", "3", 0.0), ("2 x 3", "2", 0.0), ("answer: 5k", "5", 0.0),
    # units, percent, currency and punctuation read as before
    ("42%", "42", 1.0), ("$5", "5", 1.0), ("5 apples", "5", 1.0), ("3.0.", "3", 1.0), ("5kg", "5", 1.0),
    ("answer: 10m", "10", 1.0), ("It took 5s.", "5", 1.0), ("answer: 3cm", "3", 1.0), ("answer: 45\u00b0", "45", 1.0),
    ("She came 3rd", "3", 1.0), ("answer: 5 km/h", "5", 1.0), ("Answer: 3e8 m/s", "300000000", 1.0),
])
def test_numeric_match_reads_no_number_glued_to_a_variable(text, answer, expected):
    assert _numeric(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # an answer that hedges between different numbers gives none, whichever is right
    ("answer: 2 or 3", "2", 0.0), ("answer: 2 or 3", "3", 0.0), ("The answer is 42 and 43", "42", 0.0),
    ("answer: 2, 3", "2", 0.0), ("answer: between 2 and 3", "2", 0.0), ("answer: 2 (or maybe 3)", "2", 0.0),
    ("answer: 12 hours, or 720 minutes", "12", 0.0), ("The answer is 4, or 5.", "4", 0.0),
    # one number, repeated, restated or checked, still reads
    ("answer: 2 (two)", "2", 1.0), ("answer: 2, 2", "2", 1.0), ("answer: 1/2 = 0.5", "0.5", 1.0),
    ("The answer is 2. Check: 2+0=2", "2", 1.0), ("The answer is 4. Check: 2*2 = 4, not 5", "4", 1.0),
    ("answer: 10 (since 2*5 = 10)", "10", 1.0), ("answer: 42 \\text{ cm}^2", "42", 1.0),
    ("answer: approx. 5", "5", 1.0), ("The answer is 18 dollars. 18 = 9*2", "18", 1.0),
    # an expression after the answer is a second candidate unless an "=" makes it a check: its
    # value is not computed, so "7 (3+4)" reads as "2 or 1+2" does (write "7 (3+4 = 7)")
    ("answer: 7 (3+4)", "7", 0.0), ("answer: 7 (3+4 = 7)", "7", 1.0),
    ("answer: 42!", "42", 0.0),  # still a factorial, not the end of a sentence
])
def test_numeric_match_refuses_an_answer_that_hedges_between_numbers(text, answer, expected):
    assert _numeric(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # a second candidate written as an expression hedges too, whatever ends the sentence: "5!" is an
    # exclaimed 5 or 5 factorial, either way not 4 (both read 4 before)
    ("answer: 4 or 5!", "4", 0.0), ("answer: 4 or 5!", "5", 0.0), ("answer: 4 or 5!!", "4", 0.0),
    ("answer: 4 or 5! ", "4", 0.0), ("answer: 4 or 5!.", "4", 0.0), ("answer: 4 or 5!)", "4", 0.0),
    ("answer: 4 or 5!\nmore", "4", 0.0), ("answer: 2 or 3x", "2", 0.0), ("answer: 2 or 1+2", "2", 0.0),
    ("\\boxed{4 or 5!}", "4", 0.0), ("\\boxed{2 or 3x}", "2", 0.0),
    # an expression continuing after the first number: "2 x + 1" is 2x + 1, not 2
    ("answer: 2 x + 1", "2", 0.0), ("answer: 2 x + 1", "1", 0.0), ("answer: 2 x^2", "2", 0.0),
    ("answer: 2 a - 1", "2", 0.0), ("answer: 2 x - y", "2", 0.0), ("\\boxed{2 x + 1}", "2", 0.0),
    # a check or a unit's power after the answer still reads, as do the units and sentence ends
    ("answer: 4, since 2*2 = 4", "4", 1.0), ("answer: 10 (since 2*5 = 10)", "10", 1.0),
    ("answer: 4 or 2*2 = 4", "4", 1.0), ("answer: 42 \\text{ cm}^2", "42", 1.0), ("answer: 9.8 m/s^2", "9.8", 1.0),
    ("The answer is 42.", "42", 1.0), ("answer: 10m", "10", 1.0), ("answer: $5", "5", 1.0), ("answer: 42%", "42", 1.0),
    ("answer: 5 a day", "5", 1.0), ("answer: 2 x 3", "2", 0.0),
])
def test_numeric_match_refuses_a_hedge_or_expression_after_the_first_number(text, answer, expected):
    assert _numeric(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # markdown emphasis around a number, glued to the word before it, is emphasis
    ("So it is**42**", "42", 1.0), ("We get**42**.", "42", 1.0), ("The answer is**42**", "42", 1.0),
    ("answer: **42**", "42", 1.0), ("The answer is __42__", "42", 1.0), ("answer:__42__", "42", 1.0),
    ("So it is*42*", "42", 1.0), ("It is **-42**.", "-42", 1.0), ("x = **42**", "42", 1.0),
    # a run that is an operator stays one
    ("x**2**", "2", 0.0), ("2**3**", "3", 0.0), ("**2**3", "2", 0.0), ("x__2__", "2", 0.0), ("2+**3**", "3", 0.0),
])
def test_numeric_match_reads_a_number_in_markdown_emphasis(text, answer, expected):
    assert _numeric(text, answer) == expected


@pytest.mark.parametrize("answer", ["1 / 2", "\\frac{a}{2}", "1/0", "\\frac{1}{2}+1"])
def test_numeric_match_refuses_a_row_answer_that_is_an_expression(answer):
    with pytest.raises(RewardError, match="not a number"):
        score([("numeric_match", 1.0, {})], ["0.5"], rows=[{"prompt": "q", "answer": answer}])


def test_numeric_match_tolerances():
    rows = [{"prompt": "q", "answer": a} for a in ("3.14159", "100", "100", "0.5")]
    texts = ["pi is 3.1416", "101", "100.5", "0.5000001"]
    got = score([("numeric_match", 1.0, {"tolerance": 0.001})], texts, rows=rows).per_reward["numeric_match"]
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0, 1.0])
    got = score([("numeric_match", 1.0, {"rel_tolerance": 0.01})], texts, rows=rows).per_reward["numeric_match"]
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0, 1.0])  # integers: only the absolute tolerance widens them
    got = score([("numeric_match", 1.0, {"tolerance": 1})], texts, rows=rows).per_reward["numeric_match"]
    np.testing.assert_array_equal(got, [1.0, 1.0, 1.0, 1.0])
    with pytest.raises(ConfigError, match="rel_tolerance must be a number >= 0"):
        score([("numeric_match", 1.0, {"rel_tolerance": -1})], ["1"])


def test_numeric_match_is_quick_on_huge_numbers():
    """Counted, not timed: exact arithmetic on 1e999999999 (a billion-digit integer) checks for
    signals in its loops and runs past the budget; the numbers are refused unread instead."""
    texts = ["9" * 100_000, "1e999999999", "\\boxed{1e-999999999}"]
    context = RewardContext(rows=[{"answer": "42"}] * 3, wanted=("numeric_match",), options={})
    got, _ = measured(lambda: builtin.numeric_match(texts, context), budget=20_000)
    assert got == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("text", "answer"), [
    # an expression right of an "=" after the answer restates it, as a left side ending at "=" does
    ("answer: 8 = 2^3", "8"), ("answer: 7 = 3 + 4", "7"), ("answer: 120 = 5!", "120"), ("\\boxed{8 = 2^3}", "8"),
    ("answer: 6 = 2*3 = 3*2", "6"), ("answer: 5 = 2 + 3 km", "5"),
])
def test_numeric_match_reads_an_answer_restated_as_an_equations_right_side(text, answer):
    assert _numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", ["answer: 4 or x = 2+3", "answer: 4 or x = 5!", "answer: 4 == 2^2"])
def test_numeric_match_an_expression_right_of_another_unknown_still_hedges(text):
    assert _numeric(text, "4") == 0.0


def test_numeric_match_is_quick_on_many_expressions_after_the_answer(monkeypatch):
    """Whether each expression is a check ("2*2 = 4") is found in one scan, not one per number:
    the characters the expression scan reads stay within the text's length (one scan per number
    read 50,000 numbers x the rest of the text). Counted, not timed: a timed limit failed on a
    loaded machine."""
    from polyrl.rewards import builtin

    real = builtin._EXPRESSION_REST
    scanned = [0]

    class Counting:
        def match(self, text: str, pos: int = 0):  # type: ignore[no-untyped-def]
            found = real.match(text, pos)
            scanned[0] += (found.end() if found else pos) - pos
            return found

    monkeypatch.setattr(builtin, "_EXPRESSION_REST", Counting())
    texts = ["answer: 0 " + "1!" * 50_000, "answer: 0 " + "2 x+" * 25_000]
    got = score([("numeric_match", 1.0, {})], texts)
    assert list(got.per_reward["numeric_match"]) == [0.0, 0.0]
    assert 0 < scanned[0] <= sum(len(t) for t in texts), scanned


def test_numeric_match_non_numeric_answer():
    with pytest.raises(RewardError, match="not a number"):
        score([("numeric_match", 1.0, {})], ["42"], rows=[{"prompt": "q", "answer": "Paris"}])
    for answer in ("nan", "inf", "1e999", float("nan")):  # no completion matches: every one scored 0
        with pytest.raises(RewardError, match=r"is .*, not a finite number.*Fix: .*null to skip the row"):
            score([("numeric_match", 1.0, {})], ["nan"], rows=[{"prompt": "q", "answer": answer}])


def test_missing_answer_cell_gives_none():
    rows = [{"prompt": "q", "answer": "42"}, {"prompt": "q", "answer": None}]
    res = score([("exact_match", 1.0, {})], ["42", "42"], rows=rows)
    assert res.total[0] == 1.0 and np.isnan(res.total[1])
    assert res.metrics["exact_match"]["none_count"] == 1


# --- function rewards --------------------------------------------------------------------------


def test_sync_function_sees_columns_and_ids():
    seen = {}

    def my_reward(prompts, completions, answer, completion_ids, difficulty, **kwargs):
        seen.update(prompts=prompts, completions=completions, answer=answer, ids=completion_ids,
                    difficulty=difficulty, rest=sorted(kwargs))
        return [float(c == a) for c, a in zip(completions, answer)]

    rows = [{"prompt": "p1", "answer": "x", "difficulty": 1}, {"prompt": "p2", "answer": "y", "difficulty": 2}]
    res = score([("my_reward", 1.0, {})], ["x", "z"], rows=rows, extra=[function_reward_plugin(my_reward)],
                tokens=[2, 1])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])
    assert seen["prompts"] == ["p1", "p2"] and seen["completions"] == ["x", "z"]
    assert seen["answer"] == ["x", "y"] and seen["difficulty"] == [1, 2]
    assert seen["ids"] == [[0, 1], [0]]
    assert seen["rest"] == ["log_extra", "log_metric", "trainer_state"]  # TRL's extras; no "prompt"


def test_function_without_kwargs_gets_only_named_columns():
    def strict(prompts, completions, answer):
        return [1.0] * len(completions)

    res = score([("strict", 1.0, {})], ["a"], extra=[function_reward_plugin(strict)])
    assert res.total[0] == 1.0


def test_async_functions_run_concurrently():
    # each reward waits for the other's event: this only finishes when both run at once
    events: dict[str, asyncio.Event] = {}

    def make(me: str, other: str):
        async def fn(prompts, completions, **kw):
            events.setdefault(me, asyncio.Event()).set()
            await asyncio.wait_for(events.setdefault(other, asyncio.Event()).wait(), timeout=2)
            return [1.0] * len(completions)

        fn.__name__ = me
        return fn

    plugins = [function_reward_plugin(make("a", "b")), function_reward_plugin(make("b", "a"))]
    res = score([("a", 1.0, {}), ("b", 2.0, {})], ["x", "y"], extra=plugins)
    np.testing.assert_array_equal(res.total, [3.0, 3.0])
    assert res.metrics["a"]["latency_s"] >= 0


def test_async_function_through_the_plain_hook():
    async def judge(prompts, completions, **kw):
        await asyncio.sleep(0)
        return [0.5 for _ in completions]

    plugin = function_reward_plugin(judge)
    pm = get_plugin_manager(extra=[plugin], entry_points=False)
    ctx = RewardContext(rows=[{"prompt": "q"}], wanted=("judge",))
    answers = pm.hook.reward(prompts=["q"], completions=[completion("a")], context=ctx)
    assert {"judge": [0.5]} in answers


def test_wrong_length_is_named():
    def short(prompts, completions, **kw):
        return [1.0]

    with pytest.raises(RewardError, match=r"reward 'short' from function .*short.*expected 3 got 1"):
        score([("short", 1.0, {})], ["a", "b", "c"], extra=[function_reward_plugin(short)])


def test_raising_reward_is_named():
    def boom(prompts, completions, **kw):
        raise KeyError("difficulty")

    with pytest.raises(RewardError, match=r"reward 'boom' from function .* raised KeyError.*Fix:"):
        score([("boom", 1.0, {})], ["a"], extra=[function_reward_plugin(boom)])


@pytest.mark.parametrize("bad", [[float("inf")], [float("-inf")], [np.float32("inf")], ["1.0"], 1.0])
def test_infinite_or_wrong_type_scores_are_rejected(bad):
    def odd(prompts, completions, **kw):
        return bad

    with pytest.raises(RewardError, match="reward 'odd'"):
        score([("odd", 1.0, {})], ["a"], extra=[function_reward_plugin(odd)])


def _nan_scores(form: str):
    """A reward's NaN in each form TRL reads as its None: Python's, numpy's, torch's (a 1-d tensor and a
    list of 0-d ones, as TRL's ``torch.tensor`` takes them)."""
    if form.startswith("torch"):
        torch = pytest.importorskip("torch")
        return torch.tensor([0.5, math.nan]) if form == "torch-1d" else [torch.tensor(0.5), torch.tensor(math.nan)]
    return {"float": [0.5, math.nan], "numpy": np.array([0.5, np.nan]),
            "numpy-float32": [np.float32(0.5), np.float32("nan")]}[form]


@pytest.mark.parametrize("form", ["float", "numpy", "numpy-float32", "torch-1d", "torch-0d"])
def test_a_nan_score_is_read_as_none_as_trl_reads_it_with_one_warning_naming_the_function(form):
    """TRL turns a function's None into NaN and sums the functions with ``nansum``, so a function that
    returns NaN for "not applicable" trains under TRL as one returning None. polyrl refused the NaN
    (one RewardError, the run stopped); now it is that sample's None, said once per function."""
    from structlog.testing import capture_logs

    def maybe(prompts, completions, **kw):
        return _nan_scores(form)

    def other(prompts, completions, **kw):
        return [1.0, 2.0]

    pm = get_plugin_manager(extra=[function_reward_plugin(maybe), function_reward_plugin(other)], entry_points=False)
    computer = RewardComputer(pm, [("maybe", 1.0, {}), ("other", 1.0, {})])
    with capture_logs() as logs:
        for step in range(2):
            res = computer(["q", "q"], [completion("a"), completion("b")],
                           RewardContext(rows=[{}, {}], wanted=("maybe", "other"), step=step))
            np.testing.assert_array_equal(res.per_reward["maybe"], [0.5, np.nan])
            np.testing.assert_array_equal(res.total, [1.5, 2.0])  # TRL's nansum: the NaN adds nothing
            assert res.metrics["maybe"]["none_count"] == 1 and res.metrics["maybe"]["mean"] == 0.5
    warned = [e for e in logs if e["log_level"] == "warning" and "NaN" in e["event"]]
    assert len(warned) == 1 and warned[0]["reward"] == "maybe", logs
    assert "'maybe' returned NaN for 1 of 2 samples (first: sample 1)" in warned[0]["event"]
    assert "read as None" in warned[0]["event"] and "as TRL reads it" in warned[0]["event"]


def test_a_reward_of_only_nan_leaves_its_samples_unscored_as_none_does():
    def never(prompts, completions, **kw):
        return [float("nan")] * len(completions)

    res = score([("never", 1.0, {})], ["a", "b"], extra=[function_reward_plugin(never)])
    assert np.isnan(res.total).all() and res.metrics["never"]["none_count"] == 2


@pytest.mark.parametrize("bad", [10**400, -(10**400), 10**5000, np.float64("inf")],
                         ids=["1e400", "-1e400", "1e5000", "np-inf"])
def test_a_number_past_floats_range_is_a_bad_score_not_a_traceback(bad):
    """A huge int is as unusable as inf: one RewardError naming the reward, a short value (the
    repr of 10**5000 would itself raise, and would not fit on a line)."""
    def huge(prompts, completions, **kw):
        return [bad] * len(completions)

    with pytest.raises(RewardError, match=r"reward 'huge' .*returned .* for sample 0.*Fix: return finite") as info:
        score([("huge", 1.0, {})], ["a", "b"], extra=[function_reward_plugin(huge)])
    assert len(str(info.value)) < 400


def test_a_number_whose_float_raises_is_a_bad_score_not_a_traceback():
    """A float subclass whose ``__float__`` raises (a lazy or unit-carrying number type) passed the
    number check and its ValueError left the step as a traceback; now it is the reward's error."""
    class Lazy(float):
        def __float__(self):
            raise ValueError("not evaluated yet")

    def lazy(prompts, completions, **kw):
        return [Lazy(0.5)] * len(completions)

    with pytest.raises(RewardError, match=r"reward 'lazy' .*returned 0.5 for sample 0 \(a Lazy whose float\(\) "
                                          r"raised ValueError: not evaluated yet\)\. Fix: return finite floats"):
        score([("lazy", 1.0, {})], ["a", "b"], extra=[function_reward_plugin(lazy)])


@pytest.mark.parametrize(("scores", "where"), [
    ([1, True, 0.5], "True for sample 1, 1 for sample 0"),
    ([None, 0.0, np.bool_(False)], "False for sample 2, 0.0 for sample 1"),
    ((True, False, 2), "True for sample 0, 2 for sample 2"),
])
def test_bools_among_numbers_read_as_trl_reads_them_and_are_named_once(scores, where):
    """TRL builds ``torch.tensor(scores, dtype=float32)``, which reads True as 1.0 and False as
    0.0 in any mix; a reward that trains under TRL trains here, with one warning per reward."""
    from structlog.testing import capture_logs

    torch = pytest.importorskip("torch")

    def mixed(prompts, completions, **kw):
        return scores

    with capture_logs() as logs:
        got = score([("mixed", 1.0, {})], ["a", "b", "c"], extra=[function_reward_plugin(mixed)]).per_reward["mixed"]
    trl = torch.tensor([float("nan") if v is None else v for v in list(scores)], dtype=torch.float32)
    np.testing.assert_array_equal(got, trl.double().numpy())
    warned = [e for e in logs if e["log_level"] == "warning" and "mix of bools and numbers" in e["event"]]
    assert len(warned) == 1 and where in warned[0]["event"] and warned[0]["reward"] == "mixed"


def test_the_mixed_bools_warning_is_said_once_per_reward_not_per_step():
    from structlog.testing import capture_logs

    def mixed(prompts, completions, **kw):
        return [True, 0.5]

    pm = get_plugin_manager(extra=[function_reward_plugin(mixed)], entry_points=False)
    computer = RewardComputer(pm, [("mixed", 1.0, {})])
    with capture_logs() as logs:
        for step in range(3):
            res = computer(["q", "q"], [completion("a"), completion("b")], RewardContext(rows=[{}, {}], wanted=("mixed",), step=step))
            np.testing.assert_array_equal(res.per_reward["mixed"], [1.0, 0.5])
    assert sum("mix of bools" in e["event"] for e in logs) == 1


@pytest.mark.parametrize("scores", [
    [Decimal("0.25"), Decimal("1.5"), Decimal("-2")],
    [Fraction(1, 3), Fraction(2, 1), Fraction(-1, 4)],
    [Decimal("0.5"), Decimal("NaN"), Fraction(1, 2)],
], ids=["decimal", "fraction", "decimal-nan"])
def test_exact_numbers_are_scores_as_trl_reads_them(scores):
    """A reward computing exactly (``Decimal``, ``Fraction``) trains under TRL, whose
    ``torch.tensor(scores, dtype=float32)`` reads them through ``float()`` (a Decimal NaN as its
    None); polyrl refused them as "(a Decimal, not a number)" and stopped the run."""
    torch = pytest.importorskip("torch")

    def exact(prompts, completions, **kw):
        return scores

    got = score([("exact", 1.0, {})], ["a", "b", "c"], extra=[function_reward_plugin(exact)]).per_reward["exact"]
    trl = torch.tensor(scores, dtype=torch.float32).double().numpy()
    np.testing.assert_allclose(got, trl, rtol=1e-7)  # float32 there, float64 here
    assert np.isnan(got).tolist() == np.isnan(trl).tolist()


@pytest.mark.parametrize(("bad", "said"), [(Decimal("Infinity"), r"inf for sample 1\. Fix"),  # read as float first
                                           (1 + 2j, r"\(1\+2j\) for sample 1 \(a complex, not a real number\)")])
def test_an_infinite_decimal_or_a_complex_score_is_still_refused(bad, said):
    def odd(prompts, completions, **kw):
        return [1.0, bad]

    with pytest.raises(RewardError, match=rf"reward 'odd' .*returned {said}"):
        score([("odd", 1.0, {})], ["a", "b"], extra=[function_reward_plugin(odd)])


@pytest.mark.parametrize(("bad", "shown"), [("3x", "'3x'"), (b"1", "b'1'"), ([0.5], r"\[0.5\]")])
def test_a_string_score_is_refused_naming_the_function_the_sample_and_the_value(bad, shown):
    """TRL fails inside ``torch.tensor`` ("too many dimensions 'str'") without naming the reward;
    polyrl names the function, the sample and the value, and never reads "3x" as 3."""
    def three_x(prompts, completions, **kw):
        return [1.0, bad, 0.0]

    with pytest.raises(RewardError, match=rf"reward 'three_x' from function .*three_x returned {shown} for sample 1 "
                                          r"\(a \w+, not a number\)\. Fix: return finite floats"):
        score([("three_x", 1.0, {})], ["a", "b", "c"], extra=[function_reward_plugin(three_x)])


@pytest.mark.parametrize("scores", [[True, False, None], np.array([True, False, True]), [1, 0.5, None]])
def test_scores_all_bools_or_all_numbers_still_read(scores):
    def same(prompts, completions, **kw):
        return scores

    got = score([("same", 1.0, {})], ["a", "b", "c"], extra=[function_reward_plugin(same)]).per_reward["same"]
    expected = [np.nan if v is None else float(v) for v in list(scores)]
    np.testing.assert_array_equal(got, expected)


def test_none_handling_and_weights():
    def first(prompts, completions, **kw):
        return [1.0, None, None]

    def second(prompts, completions, **kw):
        return [2.0, 3.0, None]

    plugins = [function_reward_plugin(first), function_reward_plugin(second)]
    res = score([("first", 0.5, {}), ("second", 2.0, {})], ["a", "b", "c"], extra=plugins)
    np.testing.assert_allclose(res.total[:2], [0.5 + 4.0, 6.0])
    assert np.isnan(res.total[2])
    np.testing.assert_array_equal(np.isnan(res.per_reward["first"]), [False, True, True])
    assert res.metrics["first"]["none_count"] == 2 and res.metrics["second"]["mean"] == 2.5
    assert set(res.metrics["second"]) == {"mean", "std", "latency_s", "none_count"}


def test_unknown_reward_name_lists_known_ones():
    with pytest.raises(ConfigError, match=r"unknown reward 'numeric_mach'.*exact_match.*numeric_match") as info:
        RewardComputer(get_plugin_manager(entry_points=False), [("numeric_mach", 1.0, {})])
    assert info.value.field == "rewards"


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{1} \\boxed{2} \\boxed{42}", 0.0),  # every candidate listed: no reward
    ("\\boxed{41} no wait, \\boxed{42}", 0.0),  # two different final answers (math-verify: 0)
    ("So \\boxed{42}. Check: 6*7 = 42, so \\boxed{ 42 }.", 1.0),  # one answer, repeated
    ("\\boxed{\\boxed{42}}", 1.0),  # a box inside a box is one answer
    ("\\boxed{7} \\boxed{ and then \\boxed{42}", 0.0),  # an unclosed box hides no earlier box
])
def test_exact_match_gives_nothing_for_several_different_boxed_answers(text, expected):
    assert score([("exact_match", 1.0, {})], [text]).per_reward["exact_match"][0] == expected


@pytest.mark.parametrize(("text", "expected", "unclosed"), [
    ("<think>maybe \\boxed{42}</think>\nThe answer is 3", 0.0, False),  # a box in the reasoning is not the answer
    ("<think>try \\boxed{41}? no</think>\n\\boxed{42}", 1.0, False),  # nor a second candidate
    ("<think>so it is \\boxed{42}", 0.0, True),  # reasoning cut off: no answer given
    ("<think>a</think> answer: 41 <think>\\boxed{42}", 0.0, True),  # a think reopened after the last close
    ("the template opened the think. \\boxed{41}</think>\nThe answer is 42.", 1.0, False),  # Qwen3-style
    ("<think>x</think><think>y \\boxed{41}</think>42", 1.0, False),
    ("no reasoning at all: \\boxed{42}", 1.0, False),
])
def test_exact_match_reads_the_answer_after_the_reasoning(text, expected, unclosed):
    assert score([("exact_match", 1.0, {})], [text]).per_reward["exact_match"][0] == expected
    last_line = score([("exact_match", 1.0, {"extract": "last_line"})], [text + "\n42"]).per_reward["exact_match"][0]
    assert last_line == (0.0 if unclosed else 1.0)


@pytest.mark.parametrize(("text", "expected"), [
    ("the template opened the think: so it is \\boxed{42}", 0.0),  # cut off before </think>: no answer
    ("so it is 42 maybe", 0.0),
    ("it is 42</think>\nThe answer is \\boxed{42}", 1.0),  # closed: the answer after it
    ("maybe \\boxed{42}</think>\nThe answer is 3", 0.0),
])
@pytest.mark.parametrize("reward", ["exact_match", "numeric_match"])
def test_a_completion_whose_prompt_opened_the_think_is_all_reasoning_until_its_close(reward, text, expected):
    """A template whose generation prompt ends with ``<think>`` (QwQ, DeepSeek-R1 distills): a completion
    cut off before ``</think>`` was read whole, its reasoning scored as the answer."""
    computer = RewardComputer(get_plugin_manager(entry_points=False), [(reward, 1.0, {})])
    opened = Completion(0, [1, 2], [0, 1, 2], [0.0] * 3, text=text, reasoning_open=True)
    context = RewardContext(rows=[{"prompt": "q", "answer": "42"}], wanted=(reward,), options={})
    assert computer(["q"], [opened], context).per_reward[reward][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("5! = 120, so the answer is \\boxed{5!}", "5", 0.0),  # a factorial is not its base
    ("\\boxed{5!}", "5!", 1.0),
    ("\\boxed{(n+1)!}", "(n+1)", 0.0),
    ("The answer is Paris!", "Paris", 1.0),  # an exclamation still goes
    ("The answer is 42!!", "42", 0.0),
    ("\\boxed{3 \\boxed{42}}", "42", 0.0),  # the inner box is part of the outer one's answer
    ("\\boxed{ \\boxed{42} }", "42", 1.0),  # a box around the whole answer is still the answer
    ("\\boxed{3}\nanswer: 42\n\\boxed{", "42", 0.0),  # an unclosed box hides no earlier box
    ("answer: 42\n\\boxed{", "42", 1.0),  # and is no answer of its own
])
def test_exact_match_factorials_and_nested_or_unclosed_boxes(text, answer, expected):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\boxed{\\text{4}}", "4", 1.0), ("\\boxed{\\textbf{4}}", "4", 1.0), ("\\boxed{\\mathrm{4}}", "4", 1.0),
    ("\\boxed{\\mathbf{ 4 }}", "4", 1.0), ("\\boxed{\\text{\\textbf{Paris}}}", "Paris", 1.0),
    ("The answer is $\\text{4}$.", "4", 1.0), ("\\boxed{\\text{Paris}}", "\\text{Paris}", 1.0),
    ("\\boxed{\\text{4} \\text{5}}", "4", 0.0), ("\\boxed{\\text{4}+\\text{5}}", "4", 0.0),  # not around all of it
    ("\\boxed{\\text{4}+\\text{5}}", "4}+\\text{5", 0.0),
    ("\\boxed{\\text{3}} or \\boxed{\\text{4}}", "4", 0.0),  # still two different answers
    ("\\boxed{\\text{4}} so \\boxed{4}", "4", 1.0),
    ("\\boxed{\\textbf{5!}}", "5", 0.0),  # unwrapping does not turn a factorial into an exclamation
    # compatibility forms: fullwidth, math bold digits; not superscripts, subscripts, vulgar fractions
    ("\uff14\uff12", "42", 1.0), ("\\boxed{\uff14\uff12}", "42", 1.0), ("The answer is \uff30\uff41\uff52\uff49\uff53\uff0e",
                                                                      "Paris", 1.0),
    ("\\boxed{\U0001d7d2}", "4", 1.0), ("\\boxed{42}", "\uff14\uff12", 1.0),
    ("\\boxed{4\u00b2}", "42", 0.0), ("\\boxed{2\u2082}", "22", 0.0), ("\\boxed{1\u00bd}", "11/2", 0.0),
    ("\\boxed{1\u00bd}", "1\u00bd", 1.0), ("\\boxed{\uff14\uff12\uff01}", "42", 0.0),  # "４２！" is 42!
])
def test_exact_match_reads_styled_and_fullwidth_answers(text, answer, expected):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\boxed{\\frac{1}{2}}", "1/2", 1.0), ("\\boxed{\\dfrac{1}{2}}", "1/2", 1.0), ("\\boxed{\\tfrac12}", "1/2", 1.0),
    ("The answer is $\\frac 1 2$.", "1/2", 1.0), ("The answer is 1/2", "\\frac{1}{2}", 1.0),
    ("\\boxed{-\\frac{3}{4}}", "-3/4", 1.0), ("\\boxed{\\frac{-3}{4}}", "-3/4", 1.0),
    ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2", 1.0), ("\\boxed{x-\\frac{1}{2}}", "x-1/2", 1.0),
    ("\\boxed{\\frac{1}{2}} or \\boxed{1/2}", "1/2", 1.0),  # one answer, two spellings
    ("\\boxed{0.5}", "1/2", 1.0),  # one number, two spellings (test_exact_match_compares_a_number_by_its_value)
    # only where "a/b" reads the same as the fraction
    ("\\boxed{2\\frac{1}{2}}", "21/2", 0.0), ("\\boxed{\\frac{2}{3}^2}", "2/3^2", 0.0),
    ("\\boxed{\\frac{1}{2}x}", "1/2x", 0.0), ("\\boxed{\\frac{1}{2x}}", "1/2x", 0.0),
    ("\\boxed{\\frac{a+1}{2}}", "a+1/2", 0.0), ("\\boxed{\\frac123}", "1/23", 0.0),
])
def test_exact_match_reads_a_latex_fraction_as_a_slash(text, answer, expected):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == expected


@pytest.mark.parametrize(("text", "answer"), [
    ("\\boxed{0.5}", "1/2"), ("The answer is 1/2.", "0.5"), ("\\boxed{\\frac{1}{2}}", "0.50"), ("answer: .5", "1/2"),
    ("\\boxed{\\dfrac12}", ".5"), ("The answer is $0.5$.", "\\frac{1}{2}"), ("\\boxed{-0.75}", "-\\frac{3}{4}"),
    ("\\boxed{2/4}", "1/2"), ("\\boxed{1,000}", "1000"), ("answer: 1000", "1,000"), ("\\boxed{42.0}", "42"),
    ("\\boxed{\\text{0.5}}", "1/2"), ("\\boxed{1e3}", "1000"), ("\\boxed{0.5}", 0.5),
])
def test_exact_match_compares_a_number_by_its_value(text, answer):
    """An answer that is one number is one answer however it is written (as math-verify, TRL's
    accuracy_reward, scores it): "0.5" and "1/2" scored 0 against each other."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == 1.0


@pytest.mark.parametrize(("text", "answer"), [
    ("\\boxed{1/2}", "2"), ("\\boxed{0.5}", "0.05"), ("\\boxed{1/2}", "1/3"), ("\\boxed{-0.5}", "1/2"),
    ("\\boxed{0.5}", "5"), ("\\boxed{12}", "1,2"), ("\\boxed{1.5}", "1,5"), ("\\boxed{2 1/2}", "2.5"),
    ("\\boxed{1/2 cup}", "0.5"), ("\\boxed{0.5 \\text{ cup}}", "1/2 cup"), ("\\boxed{2+2}", "4"),
    ("\\boxed{1/0}", "0"), ("\\boxed{0.5} or \\boxed{0.05}", "0.5"),
])
def test_exact_match_keeps_different_numbers_and_expressions_apart(text, answer):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == 0.0


def test_exact_match_counts_one_number_in_two_spellings_as_one_boxed_answer():
    rows = [{"prompt": "q", "answer": "1/2"}]
    got = score([("exact_match", 1.0, {})], ["\\boxed{0.5}, that is \\boxed{\\frac{1}{2}}"], rows=rows)
    assert got.per_reward["exact_match"][0] == 1.0  # not two different candidates


def test_normalising_an_answer_is_linear_in_its_layers(monkeypatch):
    """Each layer ("!." pairs, nested \\text{) was peeled by copying the rest: 20k pairs took seconds.
    Counted, not timed: the Python work per layer is bounded (tests/work_meter.py), and the text
    is peeled by moving indices over one string, never by copying what is left (a copy is one C
    call the meter cannot see: the string each layer's style match is handed shows it)."""
    handed: list[str] = []
    real = builtin._STYLE

    class Seen:
        def match(self, text: str, *span: int):  # type: ignore[no-untyped-def]
            handed.append(text)
            return real.match(text, *span)

    monkeypatch.setattr(builtin, "_STYLE", Seen())
    n = 20_000
    cases = [("Paris" + "!." * n, "paris"), ("\\text{" * n + "4" + "}" * n, "4"),
             ("\\frac12+" * n + "1", "1/2+" * n + "1")]
    for text, expected in cases:
        handed.clear()
        got, _ = measured(functools.partial(normalize_answer, text), budget=40 * len(text))
        assert got == expected
        assert len({id(s) for s in handed}) == 1, "a layer was peeled by copying the rest"


def test_boxes_nested_thousands_deep_are_read_in_linear_time():
    """Counted, not timed (tests/work_meter.py): a bounded number of Python steps per box."""
    n = 20_000
    got, _ = measured(lambda: boxed_answers("\\boxed{" * n + "42" + "}" * n), budget=40 * n)
    assert got == ["42"]


def test_exact_match_skips_an_empty_answer_instead_of_rewarding_an_empty_completion():
    rows = [{"prompt": "q", "answer": a} for a in ("", " $ ", "42")]
    got = score([("exact_match", 1.0, {})], ["", "\\boxed{}", "\\boxed{42}"], rows=rows)
    assert np.isnan(got.per_reward["exact_match"][:2]).all() and got.per_reward["exact_match"][2] == 1.0


def test_boxed_answers_is_linear_on_thousands_of_unclosed_boxes():
    """Counted, not timed (tests/work_meter.py): a bounded number of Python steps per box."""
    n = 20_000
    assert measured(lambda: boxed_answers("\\boxed{" * n + "\\boxed{3}"), budget=40 * n)[0] == ["3"]


def test_rows_must_align_with_completions():
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("exact_match", 1.0, {})])
    with pytest.raises(RewardError, match="2 completions but 2 prompts and 1 dataset rows"):
        computer(["q", "q"], [completion("a"), completion("b")], RewardContext(rows=[{"answer": "a"}], wanted=()))


# --- real plugin objects -----------------------------------------------------------------------


class VowelPlugin:
    """A third-party reward plugin object: counts vowels, reads a dataset column."""

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name="vowels", summary="fraction of vowels"))

    @hookimpl
    def reward(self, prompts, completions, context):
        if "vowels" not in context.wanted:
            return None
        scale = context.options.get("vowels", {}).get("scale", 1.0)
        return {"vowels": [scale * sum(ch in "aeiou" for ch in c.text) / max(len(c.text), 1) * row["bonus"]
                           for c, row in zip(completions, context.rows)]}


def test_real_plugin_object_passed_as_extra():
    plugin = VowelPlugin()
    pm = get_plugin_manager(extra=[plugin], entry_points=False)
    assert "vowels" in Registry(pm).reward_names()
    rows = [{"prompt": "q", "answer": "aa", "bonus": 2.0}, {"prompt": "q", "answer": "x", "bonus": 1.0}]
    res = score([("vowels", 1.0, {"scale": 0.5}), ("exact_match", 1.0, {})], ["aa", "bb"], rows=rows,
                extra=[plugin])
    np.testing.assert_allclose(res.per_reward["vowels"], [1.0, 0.0])
    np.testing.assert_allclose(res.total, [2.0, 0.0])


def test_a_plugin_registered_later_overrides_a_builtin_name():
    class Override:
        @hookimpl
        def polyrl_register_rewards(self, register):
            register(RewardSpec(name="exact_match"))

        @hookimpl
        def reward(self, prompts, completions, context):
            return {"exact_match": [0.25] * len(completions)}

    res = score([("exact_match", 1.0, {})], ["42"], extra=[Override()])
    assert res.total[0] == 0.25


# --- loading function rewards from spec strings ------------------------------------------------


def test_load_from_file_and_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def score(prompts, completions, **kw):\n"
        "    '''Ones for everyone.'''\n"
        "    return [1.0 for _ in completions]\n"
        "value = 3\n"
    )
    plugin = load_function_reward(f"{tmp_path / 'my_rewards.py'}:score")
    assert plugin.name == "score"
    res = score([("score", 1.0, {})], ["a"], extra=[plugin])
    assert res.total[0] == 1.0
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_function_reward("my_rewards:score", name="again").name == "again"
    specs = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [("score", 1.0, {})]).specs
    assert specs["score"].summary == "Ones for everyone."


@pytest.mark.parametrize(("spec", "match"), [
    ("no_colon", "no ':function' part"),
    ("missing/file.py:f", "not found"),
    ("polyrl_no_such_module_xyz:f", "module 'polyrl_no_such_module_xyz' not found"),
    ("FILE:nope", "has no attribute 'nope'.*score"),
    ("FILE:value", "not a function"),
    ("BROKEN:f", "raised ZeroDivisionError"),
])
def test_load_errors_are_clear(tmp_path, spec, match):
    (tmp_path / "ok.py").write_text("def score(p, c, **k):\n    return [1.0]\nvalue = 3\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    spec = spec.replace("FILE", str(tmp_path / "ok.py")).replace("BROKEN", str(tmp_path / "broken.py"))
    with pytest.raises(ConfigError, match=match) as info:
        load_function_reward(spec)
    assert info.value.field == "rewards.function"


SCRIPT_AT_IMPORT = {  # a converted TRL training script: its argument parsing at module level
    "argparse": "import argparse\np = argparse.ArgumentParser()\np.add_argument('--model', required=True)\n"
                "args = p.parse_args()\n",
    "exit": "import sys\nsys.exit('need --flag')\n",
}


@pytest.mark.parametrize(("kind", "said"), [
    ("argparse", "SystemExit(2) after writing '"), ("exit", "SystemExit('need --flag')")])
def test_a_reward_file_that_exits_when_imported_is_one_error_naming_it(tmp_path, capsys, kind, said):
    """sys.exit (argparse's parse_args) at a reward file's import escaped the loader: polyrl ended
    with argparse's usage under its own name (rc 2) or with "need --flag" alone (rc 1)."""
    path = tmp_path / f"{kind}_reward.py"
    path.write_text(SCRIPT_AT_IMPORT[kind] + "def r(completions, **kw):\n    return [0.0] * len(completions)\n")
    with pytest.raises(ConfigError) as info:
        load_function_reward(f"{path}:r")
    text = str(info.value)
    assert info.value.field == "rewards.function" and f"importing {str(path)!r} raised {said}" in text, text
    assert 'Fix: move the script code under if __name__ == "__main__"' in text and "\n" not in text, text
    if kind == "argparse":  # argparse's own message, folded into the line, not printed as polyrl's
        assert "the following arguments are required: --model" in text and "usage:" not in capsys.readouterr().err
    (tmp_path / "noisy.py").write_text("import sys\nsys.stderr.write('a warning\\n')\ndef r(c, **k):\n    return [0.0]\n")
    load_function_reward(f"{tmp_path / 'noisy.py'}:r")
    assert "a warning" in capsys.readouterr().err  # what an import that works writes is still shown


def test_polyrl_train_prints_one_error_line_for_a_reward_file_running_argparse(tiny_model_dir, tmp_path):
    import subprocess

    (tmp_path / "script.py").write_text(SCRIPT_AT_IMPORT["argparse"] + "def r(completions, **kw):\n    return [0.0]\n")
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\ntask = "arithmetic"\n'
                      f'[[rewards]]\nfunction = "{tmp_path / "script.py"}:r"\n')
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "usage:" not in result.stderr, result.stderr[-2000:]
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "script.py' raised SystemExit(2)" in line, line


def test_a_reward_file_importing_a_module_beside_it_says_to_set_pythonpath(tmp_path):
    """A reward file is loaded by path, so its folder is not searched (a TRL script's is): the
    error says so and gives the PYTHONPATH to set, not just "fix the error in that file"."""
    from polyrl.rewards.functions import load_function_reward

    (tmp_path / "helper_mod.py").write_text("def helper():\n    return 1.0\n")
    (tmp_path / "uses_helper.py").write_text(
        "from helper_mod import helper\n\ndef r(completions, **kw):\n    return [helper()] * len(completions)\n")
    with pytest.raises(ConfigError) as info:
        load_function_reward(f"{tmp_path}/uses_helper.py:r")
    assert "ModuleNotFoundError" in str(info.value)
    assert f"PYTHONPATH={tmp_path.resolve()}" in info.value.fix
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere_xyz\n")
    with pytest.raises(ConfigError) as info:
        load_function_reward(f"{tmp_path}/broken.py:r")
    assert info.value.fix == "fix the error in that file"


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{3} or \\boxed {4}", 0.0),  # a spaced box is a box: two different answers
    ("\\boxed {3} \\boxed{4}", 0.0),  # the spaced box was unseen, the last box paid
    ("\\boxed{3}\\fbox{4}", 0.0),  # \fbox draws the same box
    ("\\fbox{4} \\boxed{3}", 0.0),
    ("So \\boxed {4}.", 1.0),  # one spaced box: the answer (was read as its line "\boxed {4}": 0)
    ("\\fbox{ 4 }", 1.0),
    ("\\boxed{4} and again \\boxed {4}", 1.0),  # one answer, repeated
    ("\\boxed{\\fbox{4}}", 1.0),  # a box around a box is one answer
])
@pytest.mark.parametrize("reward", ["exact_match", "numeric_match"])
def test_spaced_and_fbox_boxes_are_boxes_so_listing_answers_in_them_does_not_pay(reward, text, expected):
    """LaTeX draws ``\\boxed {4}`` and ``\\fbox{4}`` as ``\\boxed{4}``; only ``\\boxed{`` was read as a
    box, so a policy could list a second answer in the other spelling and still be paid the last one."""
    rows = [{"prompt": "q", "answer": "4"}]
    assert score([(reward, 1.0, {})], [text], rows=rows).per_reward[reward][0] == expected


@pytest.mark.parametrize("blank", ["\u200b", "\ufeff", "\u2060", "\u200b\u200c\u200d", "\u2800", "\u3164", " \u200b\n"])
def test_the_suggested_think_pattern_takes_no_think_of_invisible_characters(blank):
    """A think block of zero-width spaces (or the byte-order mark, the braille blank...) prints
    nothing: the format's reward must not be paid for it, as it is not for an empty one."""
    suggested = suggested_pattern()
    for text, expected in ((f"<think>{blank}</think>42", 0.0), (f"<think>{blank}so 6*7</think>42", 1.0)):
        got = score([("regex_format", 1.0, {"pattern": suggested})], [text])
        assert got.per_reward["regex_format"][0] == expected, text


@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is 4\u00bd.", 0.0),  # 4½ is 4.5, a mixed number: not 4
    ("answer: 4 \u00bd cups", 0.0),
    ("\\boxed{4\u00be}", 0.0),
    ("answer: 4\u0336", 0.0),  # a struck-through 4 (combining long stroke): retracted
    ("\\boxed{4\u0338}", 0.0),  # 4 with a slash through it
    ("answer: x > 4", 0.0),  # a bound, not the answer
    ("answer: >= 4", 0.0),
    ("answer: \u2260 4", 0.0),
    ("\\boxed{\\neq 4}", 0.0),
    ("\\boxed{\\not 4}", 0.0),
    ("answer: 4 < 5", 0.0),  # was 0 before and stays 0: neither number is the answer
    ("The answer is 4.", 1.0),  # and a plain answer, next to what looks like those, still reads
    ("<answer>4</answer>", 1.0),  # a tag's ">" is no relation
    ("3 > 2, so => 4", 1.0),  # an arrow neither
    ("answer: x = 4", 1.0),
    ("answer: \u2248 4", 1.0),  # an approximate answer reads (tolerance decides)
    ("x < 9, so \\boxed{4}", 1.0),
    ("The answer is 4\u00b7\u00bd.", 0.0),
    ("The answer:\n> 4", 1.0),  # a markdown blockquote's ">" opening a line is no relation
    ("The answer:\n\n  > **4**", 1.0),
    ("The answer: > 4", 0.0),  # on the marker's own line it is a bound
    ("So:\n> 4", 1.0),
])
def test_numeric_match_does_not_read_a_mixed_number_a_struck_digit_or_a_bound_as_the_number(text, expected):
    """Each of these wrote something other than 4 (4½, a retracted 4, "more than 4", "not 4") and was
    paid as 4 against the answer 4."""
    rows = [{"prompt": "q", "answer": "4"}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize("entity", ["&nbsp;", "&#8203;", "&#x200B;", "&zwnj;", "&nbsp; &ZeroWidthSpace;\n&#160;"])
def test_the_suggested_think_pattern_takes_no_think_of_html_entities_only(entity):
    """``&nbsp;`` (or ``&#8203;``, ``&zwnj;``) renders as nothing in a chat UI: a think block holding
    only such references passed the suggested format as one that says something."""
    suggested = suggested_pattern()
    for text, expected in ((f"<think>{entity}</think>42", 0.0), (f"<think>{entity}so 6*7</think>42", 1.0),
                           ("<think>a &amp; b</think>42", 1.0), ("<think>& so on</think>42", 1.0)):
        got = score([("regex_format", 1.0, {"pattern": suggested})], [text])
        assert got.per_reward["regex_format"][0] == expected, text


@pytest.mark.parametrize(("text", "expected"), [
    ("100\u2082", 0.0), ("answer: 100\u2082", 0.0), ("\\boxed{100_2}", 0.0), ("\\boxed{100_{2}}", 0.0),
    ("answer: 100_2", 0.0),  # 100 in base 2 is 4: the digits as written are not the number meant
    ("answer: \\sout{100}", 0.0), ("answer: \\cancel{100}", 0.0), ("\\boxed{\\phantom{100}}", 0.0),
    ("answer: ~~100~~", 0.0), ("answer: <del>100</del>", 0.0),  # struck out or invisible: not given
    ("answer: 100", 1.0), ("\\boxed{100}", 1.0), ("answer: __100__", 1.0), ("answer: ~100", 1.0),
    ("x_1 = 3, so the answer is 100", 1.0), ("The answer is 100. ~~99~~", 1.0),
])
def test_numeric_match_does_not_read_a_subscripted_struck_or_hidden_number(text, expected):
    """"100₂" (a base or an index), ``\\sout{100}`` (retracted) and ``\\phantom{100}`` (invisible) were
    each paid as 100, the digits read without what is around them."""
    rows = [{"prompt": "q", "answer": "100"}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize(("text", "answer"), [
    ("8 - 4 = 4\n\nAlso, the answer to the problem", "4"), ("0 * 3 = 0\n\nSo there is no fractional part", "0"),
    ("4\n\nIn a field of pizza recipes", "4"), ("So she still has 12 apples.", "12"),
])
def test_numeric_match_pays_a_last_number_the_question_also_writes(text, answer):
    """An arithmetic answer is often one of the question's numbers (the demo's "What is 8 - 4?"), and
    the model often goes on after it: a rule that did not pay a last number the prompt writes when a
    sentence followed it scored these right answers 0 and cost the demo 12 points of accuracy."""
    rows = [{"prompt": "What is 8 - 4? Or 0 * 3? You have 12 apples.", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 1.0


@pytest.mark.parametrize(("text", "expected"), [
    ("answer: not 12", 0.0), ("answer: NOT 12", 0.0), ("answer: \u00ac12", 0.0), ("\\boxed{\\neg 12}", 0.0),
    ("\\boxed{\\not{12}}", 0.0), ("\\boxed{\\text{not } 12}", 0.0), ("answer: !12", 0.0),  # what it is not
    ("answer: 12, not 12", 0.0), ("It is 14, not 12", 0.0),  # the last number is negated: not read
    ("answer: 12, not 14", 1.0), ("answer: 12 (not 14)", 1.0), ("Great! 12", 1.0), ("knot 12", 1.0),
])
def test_numeric_match_does_not_pay_a_negated_number(text, expected):
    """"answer: not 12" and ``\\boxed{\\neg 12}`` say the answer is anything but 12, and were paid as 12;
    "It is 14, not 12" was paid as 12, its last number."""
    rows = [{"prompt": "q", "answer": "12"}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize("blank", ["\u034f", "\u061c", "\ufe0f", "\U000e0041", "\U000e0100", "\u206a", "\ufff9",
                                   "\U0001d173", "\x00", "\x7f", "\u17b4"])
def test_the_suggested_think_pattern_takes_no_think_of_other_characters_that_draw_nothing(blank):
    """The combining grapheme joiner, a variation selector, a tag character, a control character...
    draw nothing alone: a think block of them passed the suggested format as one that says something."""
    suggested = suggested_pattern()
    for text, expected in ((f"<think>{blank}</think>42", 0.0), (f"<think>{blank}so 6*7\U0001f600</think>42", 1.0)):
        got = score([("regex_format", 1.0, {"pattern": suggested})], [text])
        assert got.per_reward["regex_format"][0] == expected, repr(text)


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("answer: \u201312", "12", 0.0), ("answer: \u201012", "12", 0.0), ("\\boxed{\uff0d12}", "12", 0.0),  # minus twelve
    ("answer: \u207b12", "12", 0.0),  # a superscript minus: an exponent's sign, not 12
    ("answer: \u201312", "-12", 1.0), ("answer: \u221212", "-12", 1.0), ("answer: 12 \u2013 that is all", "12", 1.0),
    ("answer: 12 \u2014 no, 14", "12", 0.0),  # the em dash is punctuation: a hedge, as before
])
def test_numeric_match_reads_a_typeset_minus_as_a_sign(text, answer, expected):
    """An en dash or hyphen before digits is how typesetting writes a minus: "answer: –12" was read
    as 12, paid against 12 and never against -12."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("+5", "5", 1.0), ("The answer is +5", "5", 1.0), ("\\boxed{+5}", "5", 1.0), ("answer: +5", "5", 1.0),
    ("answer: +5", "+5", 1.0), ("answer: **+5** degrees", "5", 1.0), ("x = +5", "5", 1.0), ("(+5)", "5", 1.0),
    ("answer: +1/2", "0.5", 1.0), ("\\boxed{+\\frac{1}{2}}", "1/2", 1.0), ("answer: +1,234.5", "1234.5", 1.0),
    ("answer: +5", "-5", 0.0),  # a plus sign is no minus
    ("3 +5", "5", 1.0), ("3 -5", "-5", 1.0),  # spaced, a number then a signed one, for "+" as for "-"
])
def test_numeric_match_reads_a_plus_sign_as_a_sign(text, answer, expected):
    """An honest "+5" (a change in temperature, a score difference) was read as an operator on
    nothing: every one of these scored 0 against 5."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize(("text", "answer"), [
    ("3+5", "5"), ("3+5", "8"), ("x+5", "5"), ("2 + 5", "5"), ("answer: 2 + 5", "7"), ("+ 5", "5"),
    ("answer: + 5", "5"), ("answer: 3 +5", "5"), ("answer: 3 -5", "-5"),  # the 3 opens an expression: a hedge
    ("x^+5", "5"), ("2*+5", "5"), ("-+5", "5"), ("-+5", "-5"), ("++5", "5"), ("answer: +5x", "5"), ("+5!", "5"),
    ("1.+5", "5"), ("e+5", "5"),
])
def test_numeric_match_reads_a_plus_after_an_operand_or_operator_as_an_operator(text, answer):
    """A "+" after a digit, letter, "." or bracket, spaced from its number, or after another sign is an
    operator, as a "-" there is: the number it is glued to is part of an expression, not the answer."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 0.0


@pytest.mark.parametrize("text", ["(3)-5", "answer: (a)-5", "\\text{x}-5", "[3]-5"])
def test_numeric_match_reads_a_minus_after_a_closing_bracket_as_an_operator(text):
    """"(3)-5" is 3 minus 5, as "3-5" is: the "-" after a bracket was read as a sign, paying -5."""
    rows = [{"prompt": "q", "answer": "-5"}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 0.0


@pytest.mark.parametrize("value", ["+5", " +5 ", "+1/2", "+\\frac{1}{2}", "-1/2"])
def test_numeric_match_reads_a_plus_sign_in_the_answer_column(value):
    """The row's "+1/2" (or "+\\frac{1}{2}") was refused as no number, though "+5" and "-1/2" read."""
    texts = {"+5": "answer: 5", " +5 ": "answer: +5", "+1/2": "answer: 0.5", "+\\frac{1}{2}": "answer: 1/2",
             "-1/2": "answer: -0.5"}
    rows = [{"prompt": "q", "answer": value}]
    assert score([("numeric_match", 1.0, {})], [texts[value]], rows=rows).per_reward["numeric_match"][0] == 1.0


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("x = - 5", "-5", 1.0), ("x = - 5", "5", 0.0), ("answer: - 5", "-5", 1.0), ("answer: - 5", "5", 0.0),
    ("\\boxed{- 5}", "-5", 1.0), ("\\boxed{- 5}", "5", 0.0), ("The answer is - 5", "-5", 1.0), ("(- 5)", "-5", 1.0),
    ("x = - \\frac{1}{2}", "-0.5", 1.0),
    # a markdown list's dash opens its line: the item is 5, as markdown renders it
    ("- 5", "5", 1.0), ("Total:\n- 5", "5", 1.0), ("answer:\n- 5", "5", 1.0), ("answer:\n- 5", "-5", 0.0),
    # after an operand it is a difference, not a sign
    ("3 - 5", "5", 0.0), ("3 - 5", "-5", 0.0), ("answer: 3 - 5", "-5", 0.0), ("answer: 2, - 5", "-5", 0.0),
])
def test_numeric_match_reads_a_spaced_minus_after_no_operand_as_a_sign(text, answer, expected):
    """"x = - 5", "answer: - 5" and ``\\boxed{- 5}`` (math-verify: -5) were read as 5: paid against 5,
    never against -5."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\boxed{- 5}", "-5", 1.0), ("\\boxed{- 5}", "5", 0.0), ("answer: - 5", "-5", 1.0), ("answer: - 5", "5", 0.0),
    ("The answer is - 5", "-5", 1.0), ("\\boxed{- \\frac{1}{2}}", "-0.5", 1.0), ("\\boxed{$- 5$}", "-5", 1.0),
    ("\\boxed{-5} or \\boxed{- 5}", "-5", 1.0), ("\\boxed{5} or \\boxed{- 5}", "5", 0.0),
    # a typeset minus is "-", as numeric_match reads it
    ("\\boxed{\u22125}", "-5", 1.0), ("answer: \u2013 5", "-5", 1.0), ("\\boxed{\u22125}", "5", 0.0),
    # a markdown list's dash opens its line: never a sign
    ("- 5", "-5", 0.0), ("Total:\n- 5", "-5", 0.0), ("answer:\n- 5", "-5", 0.0),
    # after an operand it is a difference: the answer is an expression, compared as text
    ("\\boxed{3 - 5}", "-5", 0.0), ("\\boxed{3 - 5}", "-2", 0.0), ("\\boxed{3 - 5}", "3 - 5", 1.0),
])
def test_exact_match_reads_a_spaced_minus_as_numeric_match_does(text, answer, expected):
    """``\\boxed{- 5}`` and "answer: - 5" were compared as the text "- 5", so they never equalled the
    gold -5, though numeric_match reads -5 there; a list's "- 5" opening a line stays no -5."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("exact_match", 1.0, {})], [text], rows=rows).per_reward["exact_match"][0] == expected
    if expected == 1.0 and "3 - 5" not in text:  # the same reading as numeric_match's
        assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 1.0


@pytest.mark.parametrize(("mode", "text", "expected"), [
    ("last_line", "x\n- 5", 0.0), ("full", "- 5", 0.0), ("last_line", "so\nx = 1\n\u2212 5", 0.0),
    ("last_line", "x\n-5", 1.0), ("full", "\u22125", 1.0),
])
def test_exact_match_keeps_a_dash_that_opens_the_line_a_dash_in_every_mode(mode, text, expected):
    rows = [{"prompt": "q", "answer": "-5"}]
    options = {"exact_match": {"extract": mode}}
    assert score([("exact_match", 1.0, {})], [text], rows=rows, options=options).per_reward["exact_match"][0] == expected


@pytest.mark.parametrize(("text", "answer"), [
    ("1.-5", "5"), ("1.-5", "-5"), ("answer: 1.-5", "1"), ("answer: 1.+5", "1"), ("x = 12.-3", "3"),
    ("5! - 3", "3"), ("50% - 5", "5"), ("50% - 5", "-5"),
])
def test_numeric_match_reads_an_operator_after_a_decimal_point_factorial_or_percent_as_an_operator(text, answer):
    """"1.-5" is 1. minus 5, as "3-5" is 3 minus 5 (math-verify: -4): the 5 was read as the answer, and
    "answer: 1.+5" read 1; "5! - 3" read 3 and "50% - 5" read 5."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("answer: 1.5", "1.5"), ("The answer is 12.", "12"), ("answer: 3. Then -5 more", "3"), ("1. - 5", "5"),
    ("answer: 50%", "50"),
])
def test_numeric_match_still_reads_a_decimal_a_sentences_point_and_a_percent(text, answer):
    rows = [{"prompt": "q", "answer": answer}]
    assert score([("numeric_match", 1.0, {})], [text], rows=rows).per_reward["numeric_match"][0] == 1.0


@pytest.mark.parametrize(("reward", "text", "answer", "expected"), [
    ("numeric_match", "\\frac{+1}{2}", "0.5", 1.0), ("numeric_match", "answer: \\frac{+1}{2}", "1/2", 1.0),
    ("numeric_match", "\\boxed{\\dfrac{+3}{4}}", "0.75", 1.0), ("numeric_match", "\\boxed{-\\frac{+1}{2}}", "-0.5", 1.0),
    ("numeric_match", "answer: 0.5", "\\frac{+1}{2}", 1.0),  # in the answer column too
    ("numeric_match", "\\frac{+1}{2}", "-0.5", 0.0), ("numeric_match", "\\frac{+1}{2}", "1", 0.0),
    ("exact_match", "\\boxed{\\frac{+1}{2}}", "0.5", 1.0), ("exact_match", "\\boxed{-\\frac{+1}{2}}", "-1/2", 1.0),
    ("exact_match", "\\boxed{\\frac{+1}{2}}", "-0.5", 0.0),
])
def test_a_latex_fraction_with_a_plus_signed_numerator_is_its_value(reward, text, answer, expected):
    """``\\frac{-1}{2}`` was read as -1/2 but ``\\frac{+1}{2}`` as no number (0 against 0.5), and as
    the row's answer it was an error."""
    rows = [{"prompt": "q", "answer": answer}]
    assert score([(reward, 1.0, {})], [text], rows=rows).per_reward[reward][0] == expected


@pytest.mark.parametrize("reward", ["numeric_match", "exact_match"])
@pytest.mark.parametrize("text", ["\\boxed{12}!", "The answer is \\boxed{12}!", "$\\boxed{12}$!", "\\boxed{12}^2",
                                  "\\boxed{12}+1", "\\boxed{12}."])
def test_a_box_answers_what_it_holds_whatever_follows_it(reward, text):
    """A decision, not a fix: the box delimits the answer, so what follows it ("!", "^2", "+1") is
    not part of it, for every operator alike, as math-verify (TRL's ``accuracy_reward``) reads
    these. An exclamation after the box is common; "12 factorial" is written ``\\boxed{12!}``."""
    rows = [{"prompt": "q", "answer": "12"}, {"prompt": "q", "answer": "479001600"}]
    assert list(score([(reward, 1.0, {})], [text, text], rows=rows).per_reward[reward]) == [1.0, 0.0]


@pytest.mark.parametrize("source", ["dataset", "parquet"])
def test_a_float32_answer_column_matches_the_completion_that_writes_its_value(tmp_path, source):
    """🤗 datasets gives a float32 column (Value("float32"), a Parquet float32) as the Python float
    TRL passes a reward, 0.1 as 0.10000000149011612: exact_match and numeric_match read that and
    scored every correct "0.1" 0. Rows come from a real 🤗 Dataset, or a Parquet file through
    polyrl's [data] loader, with a float64 column beside it read as before."""
    datasets = pytest.importorskip("datasets")
    from polyrl import data

    values = [0.1, 2.675, 0.001, -3.3]
    features = datasets.Features({"prompt": datasets.Value("string"), "answer": datasets.Value("float32"),
                                  "wide": datasets.Value("float64")})
    table = datasets.Dataset.from_dict({"prompt": ["q"] * 4, "answer": values, "wide": values}, features=features)
    if source == "parquet":
        table.to_parquet(tmp_path / "rows.parquet")
        found = data.load_dataset(path=str(tmp_path / "rows.parquet"))
        rows = found.take(list(range(len(found))))
    else:
        rows = [dict(row) for row in table]
    assert rows[0]["answer"] != 0.1 and rows[0]["wide"] == 0.1  # float32's value, as TRL's reward gets it
    said = [f"The answer is {v}" for v in values]
    for column in ("answer", "wide"):
        for reward in ("exact_match", "numeric_match"):
            context = RewardContext(rows=rows, wanted=(reward,), options={reward: {"column": column}})
            assert getattr(builtin, reward)(said, context) == [1.0] * 4, (reward, column)
            assert getattr(builtin, reward)([f"The answer is {v + 0.01}" for v in values], context) == [0.0] * 4
