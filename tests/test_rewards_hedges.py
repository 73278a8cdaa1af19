"""Answers that do not commit to one number: a second candidate after the answer, a number the
completion rejects, a bare list read as its last member. Each forgery is scored against both of its
numbers, and beside it the right single answer, written naturally, that must keep its credit."""

from __future__ import annotations

import re

import pytest

from polyrl.errors import RewardError
from polyrl.rewards.builtin import regex_format
from polyrl.types import RewardContext
from test_rewards_spellings import exact, numeric


@pytest.mark.parametrize("reward", [exact, numeric])
@pytest.mark.parametrize("text", [
    # a hedge in the sentence that gives the answer, after a box, which won over everything after it
    "\\boxed{5}, though 6 is possible", "\\boxed{5} (or 6)", "\\boxed{5} or maybe 6",
    # ... or spelled in words beside the digits
    "answer: 5 (or six)", "\\boxed{5}, or perhaps six",
])
@pytest.mark.parametrize("answer", ["5", "6"])
def test_a_second_candidate_in_the_answers_sentence_pays_neither(reward, text, answer):
    assert reward(text, answer) == 0.0


@pytest.mark.parametrize("text", [
    "The answer: 5. Or 6.", "The answer is 5. Maybe 6 though.", "answer: 5. Alternatively 6.",
    "The answer is 5. It could also be 6.", "answer: 5\nor 6", "\\boxed{5}. Or 6.", "answer: 5. Or 6!",
    "\\boxed{5}. Or maybe 2x.",
])
def test_a_hedge_in_a_later_sentence_pays_the_first_answer_only(text):
    """What follows the answer's sentence is its explanation, where hedge words sit beside other
    numbers in right answers too; the answer read is the first, so "Or 6." gains a policy nothing."""
    assert numeric(text, "5") == 1.0 and numeric(text, "6") == 0.0 and exact(text, "6") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("The answer is 12. You could also split it into 2 groups of 6.", "12"),
    ("#### 18\nShe either eats 3 or bakes 4, leaving 9 to sell.", "18"),
    ("The answer is 5 apples. Alternatively, count the 2 red and the 3 green ones.", "5"),
    ("answer: 40\nThis is likely because each of the 4 boxes holds 10.", "40"),
    ("\\boxed{7}. Note that 3 or 4 alone would be too small.", "7"),
])
def test_an_explanation_after_the_answer_with_hedge_words_and_numbers_still_pays(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize(("text", "exact_too"), [
    ("The answer is 5.", True), ("5 is the answer because 2+3=5", False), ("The answer is 5. Check: 5+1=6.", True),
    ("\\boxed{5}. Check: 2+3=5", True), ("The answer is 5 (five).", False), ("answer: 5 or five", False),
    ("The answer is 5 apples. She had 2 and got 3 more.", False), ("The answer is 5.\nIt could not be 6, as 6 > 5.", True),
    ("\\boxed{5}\n\nThis could also be checked: 2 + 3 = 5.", True),
    ("Therefore, the final answer is $\\boxed{5}$. I hope it is correct.", True),
    ("The answer is 5. Perhaps one could double-check by adding.", True), ("The answer is 5. Either way, 10/2 = 5.", True),
    ("\\boxed{5}, or equivalently 10/2", True), ("\\boxed{5} is correct.", True),
])
def test_the_right_single_answer_beside_a_check_or_an_explanation_still_pays(text, exact_too):
    assert numeric(text, "5") == 1.0
    assert exact(text, "5") == (1.0 if exact_too else 0.0)


@pytest.mark.parametrize("text", [
    "the answer cannot be 5", "The answer can't be 5.", "x is not equal to 5", "it won't be 5",
    "5 is wrong", "5 is incorrect.", "5 is not the answer", "5 isn't right", "5 would be the wrong answer",
    "answer: 5 is wrong", "answer: \\(5\\) is wrong",
])
def test_numeric_match_reads_no_number_the_completion_rejects(text):
    assert numeric(text, "5") == 0.0


@pytest.mark.parametrize("reward", [exact, numeric])
@pytest.mark.parametrize("text", ["\\boxed{5} is wrong", "$\\boxed{5}$ is incorrect", "\\boxed{5} is not the answer"])
def test_a_box_the_completion_rejects_pays_nothing(reward, text):
    assert reward(text, "5") == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("4 is wrong; the answer is 5.", "5"), ("It cannot be 4, so it is 5.", "5"), ("5 is correct.", "5"),
    ("5 is not divisible by 2, so the answer is 5.", "5"), ("It is not 4. The answer is 5.", "5"),
])
def test_numeric_match_still_reads_the_answer_beside_a_rejected_one(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("text", ["5 6", "5, 6", "5 or 6", "between 5 and 6", "x = 5 or x = 6", "six or 6"])
def test_a_bare_list_pays_its_last_number_only_as_a_quote_does(text):
    """With no box or marker the last number is read (rule 3's price: a quote of the question is
    paid); a policy gains nothing by listing, as only the last number can pay. Refusing such lists
    cost the demo 7 points of held-out accuracy (85.0 % -> 78.3 %): its subtraction quotes."""
    assert numeric(text, "6") == 1.0 and numeric(text, "5") == 0.0


@pytest.mark.parametrize("text", ["6 or five", "5, or perhaps six", "6, maybe five"])
@pytest.mark.parametrize("answer", ["5", "6"])
def test_a_last_number_a_hedge_follows_pays_neither(text, answer):
    assert numeric(text, answer) == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("She has 8 apples and eats 4, so 8 - 4 = 4 apples remain.", "4"), ("Step 1: 2 + 3 = 5\nStep 2: 5 * 2 = 10\n\n10", "10"),
    ("He walks 3 miles a day for 7 days: 21 miles.", "21"), ("Each of the two boxes holds 6 pens, so there are 12 pens.", "12"),
    ("step 1, then 5", "5"), ("We need 2 or more, so 5.", "5"), ("Total: 3 + 4 = 7\n7", "7"), ("It is 5 or five", "5"),
])
def test_numeric_match_still_reads_the_last_number_after_the_working(text, answer):
    assert numeric(text, answer) == 1.0


def _format_scores(pattern: str, texts: list[str]) -> list[float | None]:
    context = RewardContext(rows=[{}] * len(texts), wanted=("regex_format",), options={"regex_format": {"pattern": pattern}})
    return list(regex_format(texts, context))


@pytest.mark.parametrize("pattern", ["(?!x)", "(?<!x)", "$|^", "^|$", "(?:$|^)", "(?!x)$", "x|(?!y)", "(?>)"])
def test_a_regex_format_with_a_branch_or_lookaround_every_text_passes_is_refused(pattern):
    """``(?!x)`` is found at the end of any text, ``(?<!x)`` at its start, ``$|^`` in either branch."""
    assert all(re.search(pattern, text) for text in ["", "x", "y", "x y"])
    with pytest.raises(RewardError, match="matches an empty text at the start or the end of any text"):
        _format_scores(pattern, ["x"])


@pytest.mark.parametrize(("pattern", "scores"), [
    ("^(?!x)", [0.0, 1.0, 1.0]), ("(?=x)", [1.0, 0.0, 0.0]), ("(?<=x)$", [1.0, 0.0, 0.0]), ("^$|^y", [0.0, 1.0, 1.0]),
    (r"\b|x", [1.0, 1.0, 0.0]),
])
def test_a_regex_format_whose_branches_can_all_fail_is_kept(pattern, scores):
    """A lookaround that looks at the text, or a branch that needs it, can fail: kept as a format
    (``\\b`` is one already: a text without a letter or digit fails it)."""
    assert _format_scores(pattern, ["x", "y", ""]) == scores


@pytest.mark.parametrize(("text", "answer", "not_answer"), [
    ("So x = 5. Check: 5+1=6.", "5", "6"), ("Total is 8 - 4 = 4.\nCheck: 4 + 4 = 8 ✓", "4", "8"),
    ("x + 3 = 5, so x = 2. **Verification:** 2 + 3 = 5.", "2", "5"),
])
def test_numeric_match_reads_the_answer_before_a_check_ending_the_text(text, answer, not_answer):
    """With no marker the last number was read: the check's result, not the answer it checks."""
    assert numeric(text, answer) == 1.0
    assert numeric(text, not_answer) == 0.0


@pytest.mark.parametrize(("text", "answer"), [
    ("Checking: 5 + 1 = 6, so x = 5.", "5"), ("Check: 2+3=5", "5"), ("Check the units. She has 5 apples.", "5"),
])
def test_numeric_match_still_reads_an_answer_a_check_sentence_gives(text, answer):
    assert numeric(text, answer) == 1.0


@pytest.mark.parametrize("answer", ["5", "6"])
def test_a_check_cut_from_the_end_pays_what_the_text_without_it_pays(answer):
    for text in ("5 or 6", "6, or perhaps five", "x = 5"):
        assert numeric(text + ". Check: 1+1=2", answer) == numeric(text + ".", answer)
