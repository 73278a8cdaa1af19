"""How exact_match and numeric_match read GSM8K/MATH-style spellings of one answer: a list's dash,
LaTeX escapes and thousands separators, percent signs, a decimal comma, repeated answers."""

from __future__ import annotations

import re

import pytest

from polyrl.errors import RewardError
from polyrl.rewards.builtin import exact_match, numeric_match
from polyrl.types import RewardContext


def _scored(reward, name: str, text: str, answer: object) -> float | None:
    """One completion scored by a built-in reward against one row's answer, default options."""
    context = RewardContext(rows=[{"prompt": "q", "answer": answer}], wanted=(name,), options={name: {}})
    return reward([text], context)[0]


def exact(text: str, answer: object) -> float | None:
    return _scored(exact_match, "exact_match", text, answer)


def numeric(text: str, answer: object) -> float | None:
    return _scored(numeric_match, "numeric_match", text, answer)


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # a "- " opening the answer's line is a markdown bullet: the answer is what it lists
    ("- 5", "5", 1.0), ("Steps:\n- 5", "5", 1.0), ("Steps\n- 5", "5", 1.0), ("answer:\n- 5", "5", 1.0),
    ("- Paris", "Paris", 1.0), ("- **5**", "5", 1.0), ("Total:\n  - $5.00", "5", 1.0),
    # ... and never a sign, as before
    ("- 5", "-5", 0.0), ("Steps\n- 5", "-5", 0.0), ("answer:\n- 5", "-5", 0.0),
    # a glued "-5" is no list item, and a spaced minus after "=", ":" or in a box is a sign
    ("-5", "-5", 1.0), ("-5", "5", 0.0), ("answer: - 5", "-5", 1.0), ("answer: - 5", "5", 0.0),
    ("\\boxed{- 5}", "-5", 1.0), ("x = - 5", "x = -5", 1.0), ("x = - 5", "x = 5", 0.0),
    # one letter given a number's value answers that number, as numeric_match reads it
    ("x = - 5", "-5", 1.0), ("x = - 5", "5", 0.0), ("x = -5", "-5", 1.0), ("\\boxed{x=\\frac{1}{2}}", "0.5", 1.0),
    ("answer: n = 1,000", "1000", 1.0), ("x = 5", "x=5", 1.0), ("\\boxed{5}", "x = 5", 1.0),
    # ... not a longer left side, an expression, nor a chain
    ("So x = 5", "5", 0.0), ("\\boxed{y = 2x+3}", "2x+3", 0.0), ("\\boxed{y = - 2x}", "y = -2x", 1.0),
    ("\\boxed{x = 2 = 3}", "3", 0.0), ("\\boxed{x = 5}", "6", 0.0),
    # the value as a whole answer is read: in math delimiters or markdown emphasis
    ("x = \\(5\\)", "5", 1.0), ("answer: x = \\(- 5\\)", "-5", 1.0), ("x = $5$", "5", 1.0), ("x = **5**", "5", 1.0),
    ("\\boxed{x = \\(\\frac{1}{2}\\)}", "0.5", 1.0), ("x = \\(5\\)", "6", 0.0), ("x = \\(5\\)", "-5", 0.0),
    ("So \\(x = 5\\)", "5", 0.0), ("x = \\(2x+3\\)", "5", 0.0),
])
def test_exact_match_reads_a_list_dash_as_a_bullet_and_a_spaced_minus_as_a_sign(text, answer, expected):
    """A last line "- 5" (a markdown bullet) scored 0 against 5, though numeric_match read 5
    there; "x = - 5" was the text "x = - 5", unequal to the gold "x = -5"."""
    assert exact(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("Steps\n- 5", "5", 1.0), ("The total is\n- 5", "5", 1.0), ("Steps\n- 5", "-5", 0.0),
    ("3 - 5", "5", 0.0), ("3\n-5", "-5", 1.0),
])
def test_numeric_match_reads_a_list_dash_after_a_word_ending_the_line_above(text, answer, expected):
    """"Steps\\n- 5" read as "Steps - 5", an expression: the bullet's 5 scored 0."""
    assert numeric(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # MATH escapes its dollars and percents: the same answers as "$5.00" and "50%"
    ("\\boxed{\\$5.00}", "5", 1.0), ("\\boxed{18.90}", "\\$18.90", 1.0), ("\\$5", "$5", 1.0),
    ("\\boxed{50\\%}", "50%", 1.0), ("50 %", "50%", 1.0),
    # a percent sign after a number is read as numeric_match reads "42%": the number, not its hundredth
    ("50%", "50", 1.0), ("\\boxed{50\\%}", "50", 1.0), ("answer: 50%", "50", 1.0),
    ("50%", "0.5", 0.0), ("\\boxed{5\\%}", "0.05", 0.0), ("\\boxed{50\\%}", "5", 0.0),
])
def test_exact_match_reads_latex_currency_and_percent_as_written_plainly(text, answer, expected):
    """``\\boxed{\\$5.00}`` scored 0 against 5 while "$5.00" scored 1; "50%" scored 0 against 50,
    which numeric_match pays."""
    assert exact(text, answer) == expected


@pytest.mark.parametrize("text", ["\\boxed{1{,}000}", "answer: 1{,}000", "1\\,000", "\\boxed{1{,}000{,}000}"])
def test_both_rewards_read_latex_thousands_separators(text):
    """"1{,}000" (how LaTeX groups thousands) was "1" and "000": 0 in both rewards."""
    answer = "1000000" if text.count("{,}") == 2 else "1000"
    assert exact(text, answer) == 1.0
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", ["\\boxed{1{,}5}", "1\\,50"])
def test_a_latex_comma_that_groups_no_thousands_is_no_separator(text):
    assert numeric(text, "15") == 0.0 and numeric(text, "150") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("Die Antwort ist 1,5", "5"), ("Es sind 2,5 kg", "5"), ("1,5", "5"), ("1,5", "1"), ("1,5", "15"),
    ("The point is (1,2)", "2"),
])
def test_numeric_match_reads_no_number_from_a_comma_that_groups_no_thousands(text, answer):
    """A decimal comma ("1,5" in a European text) was read as its last digits: 5 was paid. It is
    1.5 or a list written without spaces; neither reading is safe, so it is no number."""
    assert numeric(text, answer) == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("It costs $1,000.50.", "1000.5"), ("answer: -1,234", "-1234"), ("#### 1,234", "1,234"), ("so 1, 5", "5"),
    ("so 1, 5 sum to 6", "6"),
])
def test_numeric_match_still_reads_thousands_commas_and_spaced_lists(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("gold", ["1,5", "12,34", "1,50"])
def test_numeric_match_refuses_a_gold_whose_comma_groups_no_thousands(gold):
    """A gold "1,5" was read as 15 (its commas dropped): a completion answering 15 was paid."""
    with pytest.raises(RewardError, match=r"comma does not group thousands.*Fix: write the number"):
        numeric("15", gold)


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0), ("\\boxed{\\tfrac{\\pi}{x+1}}", "\\frac{\\pi}{x+1}", 1.0),
    ("\\boxed{{5}}", "5", 1.0), ("\\boxed{{x+1}}", "x+1", 1.0), ("\\boxed{x^{2}}", "x^2", 1.0), ("\\boxed{a_{n}}", "a_n", 1.0),
    # a set's escaped braces are drawn: no bare group
    ("\\boxed{\\{5\\}}", "5", 0.0), ("\\boxed{x^{21}}", "x^2 1", 0.0), ("\\boxed{x^{21}}", "x^21", 0.0),
])
def test_exact_match_reads_latex_that_draws_alike_as_one_answer(text, answer, expected):
    """``\\dfrac{\\sqrt{3}}{2}`` was unequal to ``\\frac{\\sqrt{3}}{2}``, ``\\boxed{{5}}`` to 5 and
    ``x^{2}`` to "x^2", though LaTeX draws each pair alike."""
    assert exact(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    # several "answer:" or "####" lines: the last is the answer (a correction)
    ("answer: 5\nanswer: 6", "6", 1.0), ("answer: 5\nanswer: 6", "5", 0.0), ("#### 5\n#### 6", "6", 1.0),
    # a box is the answer whatever marker follows it
    ("\\boxed{5}\nSo the answer is 6", "5", 1.0), ("\\boxed{5}\nSo the answer is 6", "6", 0.0),
    # several boxes holding different answers: none
    ("\\boxed{5} ... \\boxed{6}", "6", 0.0), ("\\boxed{5} ... \\boxed{6}", "5", 0.0),
    # a trailing period ends the sentence
    ("The answer is 5.", "5", 1.0), ("\\boxed{5.}", "5", 1.0),
])
def test_which_of_repeated_answers_is_read(text, answer, expected):
    assert exact(text, answer) == expected
    assert numeric(text, answer) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\boxed{18.90}", "\\$18.90", 1.0), ("It costs $5.", "$5.00", 1.0), ("answer: 20%", "20\\%", 1.0),
    ("\\boxed{50\\%}", "50%", 1.0), ("answer: 50", "50 %", 1.0), ("answer: 0.5", "50%", 0.0), ("answer: 5", "$50", 0.0),
])
def test_numeric_match_reads_a_gold_with_a_currency_or_percent_sign(text, answer, expected):
    """A MATH-style gold "\\$18.90" or "20\\%" was refused as no number, though a completion's
    "\\$18.90" and "20%" read 18.9 and 20."""
    assert numeric(text, answer) == expected


@pytest.mark.parametrize("gold", ["$", "50%%", "five %", "$5x"])
def test_numeric_match_still_refuses_a_gold_that_is_no_number(gold):
    """Refused, and named as the dataset wrote it (not with its "$" dropped)."""
    with pytest.raises(RewardError, match=re.escape(f"is {gold!r}, not a number. Fix: store a number")):
        numeric("5", gold)


@pytest.mark.parametrize(("text", "answer"), [
    # inline \(...\) and display \[...\] math, as "$5$" is read: alone, after a marker, in a box, with a period
    ("\\(5\\)", "5"), ("\\[5\\]", "5"), ("\\( 5 \\)", "5"), ("The answer is \\(\\frac{1}{2}\\)", "0.5"),
    ("The answer is \\(\\frac{1}{2}\\).", "1/2"), ("answer: \\(5\\)", "5"), ("\\boxed{\\(5\\)}", "5"),
    ("\\[\\frac{1}{2}\\]", "0.5"), ("\\(-5\\)", "-5"), ("\\(- 5\\)", "-5"), ("\\(x = 5\\)", "5"),
    ("\\(\\$5\\)", "5"), ("\\(50\\%\\)", "50"), ("\\(\\text{Paris}\\)", "Paris"), ("\\(x^2\\)", "x^2"),
    ("$- 5$", "-5"), ("\\(- 5\\)", "-5"), ("\\[\n- 5\n\\]", "-5"),
    # display math over several lines, as models write it after "The final answer is:"
    ("The final answer is:\n\\[\n\\frac{1}{2}\n\\]", "0.5"), ("So:\n\\[\n5\n\\]", "5"), ("So:\n$$\n5\n$$", "5"),
    ("The answer is\n$$\n5\n$$\nDone", "5"), ("answer:\n\\[ 5 \\]", "5"),
    # the row's answer written in math delimiters
    ("5", "\\(5\\)"), ("5", "\\[5\\]"), ("1/2", "\\(\\frac{1}{2}\\)"), ("Paris", "\\(\\text{Paris}\\)"),
])
def test_exact_match_reads_latex_math_delimiters_as_it_reads_dollars(text, answer):
    """``\\(5\\)`` and ``\\[5\\]`` were the texts "\\(5\\)" and "\\[5\\]", unequal to 5, though "$5$"
    (the same inline math) was 5; a display block over several lines was read as its "\\]" line."""
    assert exact(text, answer) == 1.0


@pytest.mark.parametrize(("text", "answer"), [
    ("\\(5\\)", "6"), ("\\(5\\) and \\(6\\)", "5"), ("\\(5\\) and \\(6\\)", "6"), ("\\(5\\)", "\\(6\\)"),
    ("\\(5\\) apples", "5"), ("\\boxed{\\(5\\)} or \\boxed{\\(6\\)}", "5"), ("\\(x^2\\)", "x^{3}"),
    # a LaTeX line break "\\\\" before a "]" or ")" closes no math
    ("\\[5\\\\]", "5"), ("\\(5\\\\)", "5"),
    # a display block holds no paragraph break: "$$" on both sides of one is no block
    ("Costs $$\n\n5\n$$", "5"),
])
def test_exact_match_reads_no_math_delimiters_that_do_not_enclose_the_whole_answer(text, answer):
    assert exact(text, answer) == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("5", "\\(5\\)"), ("5", "\\[5\\]"), ("5", "$5$"), ("5", "$$5$$"), ("0.5", "\\(\\frac{1}{2}\\)"),
    ("0.5", "$\\frac{1}{2}$"), ("-5", "\\( -5 \\)"), ("5", "\\(\\$5\\)"), ("50", "\\[50\\%\\]"), ("1000", "\\(1{,}000\\)"),
    ("1000", "1{,}000"), ("1000", "1\\,000"),
])
def test_numeric_match_reads_a_gold_in_math_delimiters(text, answer):
    """A gold ``\\(5\\)``, ``\\[5\\]`` or "$5$" was an error ("not a number"), though a completion's
    "\\(5\\)" reads 5."""
    assert numeric(text, answer) == 1.0
    assert numeric("6", answer) == 0.0


@pytest.mark.parametrize("gold", ["\\(5", "5\\)", "\\(five\\)", "$5$ and $6$", "\\(5\\) \\(6\\)"])
def test_numeric_match_still_refuses_a_gold_that_is_no_number_in_math_delimiters(gold):
    with pytest.raises(RewardError, match=re.escape(f"is {gold!r}, not a number. Fix: store a number")):
        numeric("5", gold)


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("\\(5\\)", "5", 1.0), ("\\[5\\]", "5", 1.0), ("The answer is \\(\\frac{1}{2}\\)", "0.5", 1.0),
    ("\\boxed{\\(5\\)}", "5", 1.0), ("answer: \\(5\\)", "5", 1.0), ("\\(-5\\)", "-5", 1.0), ("\\(5\\)", "6", 0.0),
    ("The final answer is:\n\\[\n\\frac{1}{2}\n\\]", "0.5", 1.0), ("answer: \\(2\\) or \\(3\\)", "2", 0.0),
])
def test_numeric_match_reads_numbers_in_math_delimiters(text, answer, expected):
    """Already read so before the delimiters were read in ``exact_match``: kept."""
    assert numeric(text, answer) == expected


def strict(text: str, answer: object) -> float | None:
    """numeric_match with ``last_number = false``: a box or an answer marker is required."""
    context = RewardContext(rows=[{"prompt": "q", "answer": answer}], wanted=("numeric_match",),
                            options={"numeric_match": {"last_number": False}})
    return numeric_match([text], context)[0]


@pytest.mark.parametrize("text", [
    "You asked about 12 apples.", "12", "She has 12 apples left.", "8 + 4 = 12", "\\(12\\)", "answer 12",
])
def test_numeric_match_without_last_number_pays_no_unmarked_number(text):
    """By default the last number is read, so a completion that only quotes the question's 12 is
    paid against 12 (and so is a right "She has 12 apples left.": by form they are one answer).
    ``last_number = false`` reads only a box or an answer marker, as verl's strict GSM8K score and
    TRL's ``accuracy_reward`` do: both score 0 here."""
    assert numeric(text, "12") == 1.0
    assert strict(text, "12") == 0.0


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{12}", 1.0), ("So the answer is 12.", 1.0), ("#### 12", 1.0), ("Answer: 12 apples", 1.0),
    ("The answer is \\(12\\)", 1.0), ("The final answer is:\n\\[\n12\n\\]", 1.0), ("answer:\n$$\n12\n$$", 1.0),
    ("\\boxed{13}", 0.0), ("The answer is 13. You asked about 12.", 0.0), ("answer: 2 or 12", 0.0),
])
def test_numeric_match_without_last_number_reads_a_box_or_a_marker(text, expected):
    assert strict(text, "12") == expected


@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_numeric_match_last_number_must_be_a_bool(value):
    context = RewardContext(rows=[{"prompt": "q", "answer": "12"}], wanted=("numeric_match",),
                            options={"numeric_match": {"last_number": value}})
    with pytest.raises(RewardError, match=r"numeric_match: last_number must be true or false, got .*Fix: write "
                                          r"last_number = false"):
        numeric_match(["12"], context)


@pytest.mark.parametrize(("text", "answer"), [
    # an answer written as the arithmetic that gives it states the number after its last "="
    ("The answer is: 3 + 4 = 7", "7"), ("The answer is 7 \u00d7 6 = 42.", "42"), ("The answer is 5 x 3 = 15.", "15"),
    ("answer: x = 3 + 4 = 7", "7"), ("#### 9 - 4 = 5", "5"), ("\\boxed{6 \\times 7 = 42}", "42"),
    ("The answer is: 3 + 4 = 7 apples.", "7"), ("answer: 2 + 2 = 4, not 5", "4"), ("answer: 1{,}000 + 1 = 1{,}001", "1001"),
])
def test_numeric_match_reads_the_number_an_answered_equation_states(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize(("text", "answers"), [
    # no number left of the "=" is read, and a candidate beside the equation still gives none
    ("answer: 3 + 4 = 7", ("3", "4")), ("answer: 5, 3 + 4 = 7", ("5", "7")), ("answer: 3 + 4 = 7 or 8", ("7", "8")),
    ("answer: 2 + 2 = 4 (or 5)", ("4", "5")), ("answer: 3 + 4 = 7 = 8", ("7", "8")), ("answer: 3 + 4 = 5 + 2", ("2", "5", "7")),
    ("\\boxed{3 + 4 = 7} or \\boxed{8}", ("7", "8")), ("\\boxed{5 = 6}", ("5", "6")), ("answer: 3+4 <= 7", ("7",)),
    ("\\boxed{3 + 4 \\neq 7}", ("7",)), ("answer: 3 + 4 = 7!", ("7",)),
    # an unknown or a word left of the "=": no arithmetic, so no answer ("x^2 = 4" is x = 2 or -2)
    ("answer: x^2 = 4", ("4",)), ("answer: 2x = 8", ("8",)), ("The answer is: 3 apples + 4 apples = 7", ("7",)),
])
def test_numeric_match_pays_no_side_of_an_equation_that_states_no_one_number(text, answers):
    for answer in answers:
        assert numeric(text, answer) == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    # MATH's (Minerva's) closing line, and a marker's sentence that an explanation follows
    ("Final Answer: The final answer is $42$. I hope it is correct.", "42"),
    ("The final answer is $\\frac{1}{2}$. I hope it is correct.", "0.5"), ("The answer is 42. It is 6 times 7.", "42"),
    ("answer: 3.5. Done.", "3.5"),
])
def test_exact_match_reads_the_number_a_markers_first_sentence_gives(text, answer):
    assert exact(text, answer) == 1.0
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize(("text", "answer"), [
    # the first sentence must be the one number: a hedge, a rejection or a text answer stays the whole line
    ("answer: 5 or 6. Done.", "5"), ("answer: 5 or 6. Done.", "6"), ("answer: 5, though 6 is possible. Done.", "5"),
    ("answer: 5 is wrong. 6", "5"), ("answer: 5. 6", "6"), ("answer: 3.5. Done", "3"), ("answer: Paris. It is big.", "Paris"),
])
def test_exact_match_reads_no_other_first_sentence_of_a_marker(text, answer):
    assert exact(text, answer) == 0.0
