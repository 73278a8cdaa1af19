"""Spellings that drew one answer (or two) while exact_match and numeric_match read another: a
policy that finds them is paid for an answer it never gives. Each case pairs the forgery with the
right single answer it must not cost."""

from __future__ import annotations

import time

import pytest

from polyrl.rewards.builtin import boxed_answers
from test_rewards_spellings import exact, numeric


@pytest.mark.parametrize("text", [
    # LaTeX's "\\!" is a negative thin space: "5\\!6" draws 56, not "5, not 6", and it ends no sentence
    "\\boxed{5\\!6}", "\\boxed{5 \\! 6}", "answer: 5\\!6", "answer: 5 \\! 6",
    # a minus before a signed number is subtraction: "5 - -6" is 11 (math-verify reads 5 + 6), not 5
    "\\boxed{5 - -6}", "\\boxed{5 -- 6}", "\\boxed{5 - - 6}", "\\boxed{5 -+ 6}", "answer: 5 - -6", "answer: 5 -- 6",
])
def test_numeric_match_reads_no_number_of_a_spacing_or_a_double_sign(text):
    assert numeric(text, "5") == 0.0
    assert numeric(text, "6") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("\\boxed{\\!12}", "12"),  # a thin space before the answer was read as "not 12": 0
    ("answer: 5 = 3 - -2", "5"), ("answer: 9 = 7 - -2", "9"),  # a check right of "=" still reads
    ("answer: -1 = 5 - 6", "-1"), ("answer: -5", "-5"), ("answer: - 5", "-5"), ("answer: 12 -- that is all", "12"),
    ("answer: 4, not 5", "4"), ("\\boxed{- 5}", "-5"),
])
def test_numeric_match_still_reads_one_answer_near_a_thin_space_or_minus(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", ["\\boxed{\\sqrt[3]{x}}", "answer: \\sqrt[3]{x}", "\\boxed{\\sqrt [3] {y}}"])
def test_numeric_match_reads_no_root_index_as_the_answer(text):
    """``\\sqrt[3]{x}`` is the cube root of x (math-verify: x**(1/3)); it was read as 3."""
    assert numeric(text, "3") == 0.0


@pytest.mark.parametrize("reward", [exact, numeric])
@pytest.mark.parametrize(("text", "expected"), [
    # LaTeX boxes a brace-less argument too: two boxed answers, whichever is right, pay nothing
    ("\\boxed{5} \\boxed6", 0.0), ("\\boxed6 \\boxed{5}", 0.0), ("\\boxed{5}\\fbox 6", 0.0), ("\\boxed{5} \\boxed 6", 0.0),
    # \framebox is \fbox with options, \fcolorbox a framed coloured box: boxes as \fbox is
    ("\\boxed{5}\\framebox{6}", 0.0), ("\\framebox[2cm][c]{6} \\boxed{5}", 0.0),
    ("\\boxed{5} \\fcolorbox{red}{white}{6}", 0.0),
    # one answer in any of them still reads, and agrees with itself
    ("\\boxed5", 1.0), ("\\boxed 5", 1.0), ("\\boxed{5} \\boxed5", 1.0), ("\\framebox{5}", 1.0),
    ("\\framebox[2cm]{5}", 1.0), ("\\fcolorbox{red}{white}{$5$}", 1.0), ("\\boxed{\\boxed5}", 1.0),
    ("\\boxed{5}, with \\fboxsep = 3pt", 1.0), ("\\boxed{5} \\boxed{5}", 1.0),
])
def test_a_box_without_braces_or_a_framebox_is_a_box(reward, text, expected):
    assert reward(text, "5") == expected


def test_exact_match_reads_a_lone_letter_in_a_box_without_braces():
    assert exact("\\boxed A", "A") == 1.0
    assert exact("\\boxed{B} \\boxed A", "B") == 0.0
    assert exact("I wrote \\boxed to mark it: \\boxed{B}", "B") == 1.0  # "\\boxed to" boxes no word


def test_reading_boxes_stays_linear_on_unclosed_framebox_options():
    """The options of ``\\framebox[`` and the colours of ``\\fcolorbox{`` are read within a bounded
    span. Timed, with a wide margin: the regex engine checks no signal inside a one-character
    repeat, so tests/work_meter.py cannot count it; an unbounded scan takes about a minute here."""
    n = 50_000
    text = "\\framebox[" * n + " \\fcolorbox{" * n
    start = time.perf_counter()
    assert boxed_answers(text) == []
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize("text", [
    # a number the answer is said not to be: "!=", "=/=", \\not=, ≢, ∉ are relations as "≠" is ...
    "answer: x != 5", "x != 5", "answer: x =/= 5", "answer: x \\not= 5", "answer: x \\not = 5", "answer: x ≢ 5",
    "answer: x ∉ 5", "answer: x ≉ 5",
    # ... and "isn't", "never", "cannot" negate it as "not" does ("The answer is" is no marker in "isn't")
    "The answer isn't 5.", "The answer isn\u2019t 5.", "answer: isn't 5", "The answer is never 5.", "x cannot 5",
    # a minus before a bracket negates what it holds: "-(5)" is -5, never 5
    "answer: -(5)", "\\boxed{-(5)}",
])
def test_numeric_match_reads_no_number_the_answer_is_said_not_to_be(text):
    assert numeric(text, "5") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("The answer isn't 4, it is 5.", "5"), ("x != 4, so x = 5", "5"), ("I spent 5 dollars", "5"),
    ("answer: 5, not 6", "5"), ("answer: (-5)", "-5"), ("The answer is 5", "5"), ("\\boxed{5} since x \\neq 4", "5"),
])
def test_numeric_match_still_reads_the_answer_beside_a_negated_number(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", [
    # a currency sign, LaTeX spacing or braces, markdown emphasis or a zero-width space between the
    # minus and the digits: the number drawn is -5, never 5
    "answer: -$5", "\\boxed{-\\$5}", "The answer is $-\\$5$.", "answer: - $5", "Total:\n-$5", "answer: -\u20ac5",
    "\\boxed{-\\,5}", "\\boxed{-~5}", "\\boxed{{-}5}", "\\boxed{-{5}}", "\\boxed{\\text{-}5}", "\\boxed{\\mathrm{-}5}",
    "answer: -**5**", "answer: **-**5", "answer: -\u200b5", "\\boxed{\\text{\u2212}5}",
])
def test_a_minus_kept_from_its_digits_by_markup_is_still_a_sign(text):
    assert numeric(text, "5") == 0.0
    assert numeric(text, "-5") == 1.0


@pytest.mark.parametrize(("text", "answer"), [
    # a list's dash before a currency is still a bullet, and a spaced minus after an operand a difference
    ("- $5", "5"), ("Total:\n- $5.00", "5"), ("Total:\n  - $5", "5"), ("answer: $5", "5"), ("$10 - $5 = $5", "5"),
])
def test_a_bullet_or_a_difference_before_a_currency_sign_is_no_sign(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("reward", [exact, numeric])
@pytest.mark.parametrize("text", ["\\boxed{-\\$5}", "answer: -$5", "\\boxed{{-}5}", "\\boxed{-\\,5}"])
def test_exact_match_reads_a_minus_kept_from_its_digits_as_numeric_match_does(reward, text):
    assert reward(text, "-5") == 1.0
    assert reward(text, "5") == 0.0


@pytest.mark.parametrize("text", [
    # pi after a space or LaTeX's spacing is a product, as "5\\pi" glued is: 5 pi, not 5
    "\\boxed{5 \\pi}", "\\boxed{5\\,\\pi}", "\\boxed{5~\\pi}", "The answer is 5 \\pi.", "answer: 5 \u03c0", "\\boxed{5 \u03c0}",
    # ... and so is a root after LaTeX's spacing: 5 times the square root of 3
    "\\boxed{5\\,\\sqrt{3}}", "answer: 5\\;\\sqrt{3}",
])
def test_numeric_match_reads_no_number_a_spaced_pi_or_root_multiplies(text):
    assert numeric(text, "5") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("The circumference is 10 pi, or about 31.4 cm. The answer is 31.4", "31.4"), ("\\boxed{5} \\pi", "5"),
    ("answer: 5\\,\\text{cm}", "5"), ("\\boxed{5 \\text{ cm}}", "5"),
])
def test_numeric_match_still_reads_a_number_beside_pi_or_spacing(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", ["\\boxed{--5}", "answer: --5"])
def test_numeric_match_reads_no_number_a_second_minus_negates(text):
    """"--5" is -(-5): reading it as -5 paid a sign error."""
    assert numeric(text, "-5") == 0.0
    assert numeric(text, "5") == 0.0


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # U+066B and U+066C are the Arabic decimal and thousands separators: "٥٫٥" is 5.5, "٥٬٠٠٠" 5000
    ("answer: \u0665\u066b\u0665", "5", 0.0), ("answer: \u0665\u066b\u0665", "5.5", 1.0), ("answer: 5\u066b5", "5", 0.0),
    ("answer: \u0665\u066c\u0660\u0660\u0660", "5000", 1.0), ("answer: 5\u066c5", "5", 0.0),
])
def test_numeric_match_reads_the_arabic_decimal_and_thousands_separators(text, answer, expected):
    assert numeric(text, answer) == expected
