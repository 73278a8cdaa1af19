"""The built-in reward plugin: ``exact_match``, ``numeric_match``, ``regex_format``, ``length_penalty``.

Registered by ``polyrl.plugins.get_plugin_manager`` as "polyrl-builtin-rewards". Each reward reads
its options from ``context.options[name]``; unknown options are an error (a typo must not be
silently ignored). Options:

``exact_match``      1.0 when the completion's final answer equals the row's answer, else 0.0.
    ``column`` ("answer"), ``extract`` ("auto" | "last_line" | "full"), ``case_sensitive`` (false).
    A completion with reasoning is read after its last ``</think>`` only, in every mode (TRL's
    ``reasoning_accuracy_reward``): a ``\\boxed{}`` tried inside ``<think>`` is neither the answer nor
    a second candidate; one whose ``<think>`` is never closed (cut off while reasoning) scores 0,
    as does one without any ``</think>`` whose chat template opened the ``<think>`` in the prompt
    (``Completion.reasoning_open``: QwQ, DeepSeek-R1 distills).
    How "auto" finds the final answer, first rule that applies:
    1. the content of the last ``\\boxed{...}`` (braces balanced; ``\\boxed {...}``, ``\\fbox{...}``,
       ``\\framebox{...}``, ``\\fcolorbox{..}{..}{...}`` and a box without braces, ``\\boxed4``, which
       LaTeX draws alike, are boxes too); a completion with several boxes
       holding different answers ("\\boxed{3} or \\boxed{4}") scores 0, as math-verify (TRL's
       ``accuracy_reward``) scores it: listing candidates must not pay;
    2. the text after the last "####" (GSM8K), "answer:" or "answer is", up to the end of that line
       (several such markers: the last, a correction, is the answer; a box before them still wins),
       or its first sentence where that is one number, as ``numeric_match`` reads it ("The final
       answer is $42$. I hope it is correct.", MATH's closing line, answers 42);
    3. the last non-empty line.
    A LaTeX display block over several lines (``\\[``, the answer and ``\\]``, or ``$$``, on lines of
    their own, as models write it after "The final answer is:") is one line there (``joined_display``).
    An answer that opens its line (rule 3, or the line after "answer:") loses a markdown list's
    dash: "- 5" and "- Paris" there answer 5 and Paris ("-5", glued, is no list item).
    Both sides are then normalised: LaTeX that draws a plain character is written plainly
    (``\\$`` is "$", ``\\%`` is "%", a ``{,}`` or ``\\,`` between thousands ("1{,}000") is ",",
    ``\\dfrac``/``\\tfrac`` are ``\\frac``, ``x^{2}`` and ``a_{n}`` are "x^2" and "a_n"), surrounding
    whitespace, markdown ``*``/``_``, ``$``, quotes, math delimiters around all of it (``\\(5\\)``,
    ``\\[5\\]``, "$$5$$": 5; "\\(5\\) and \\(6\\)" keeps them: ``_math_content``), a
    trailing ``.`` and a trailing ``!`` that is not a factorial ("5!" stays 5!) are stripped, so is
    a styling command or a bare group around all of it (``\\text{4}``, ``{4}``, ``\\textbf``, ``\\mathrm``, ``\\mathbf``...: 4;
    ``\\text{4}+\\text{5}`` stays as written), a LaTeX fraction of plain operands (a number, one
    letter or one command each, the numerator maybe signed) is written with a slash (``\\frac{1}{2}``,
    ``\\frac{+1}{2}``, ``\\dfrac12``, ``\\tfrac``: "1/2"; ``\\frac{\\pi}{2}``: "\\pi/2") where the slash reads the same (not next to a digit, letter,
    bracket or power: ``2\\frac12``, ``\\frac{2}{3}^2`` stay), inner whitespace is collapsed, case is folded, and the
    text is read in Unicode compatibility form (NFKC: fullwidth "４２" is 42, "𝟒" is 4) except for
    superscripts, subscripts and vulgar fractions, whose plain form is another answer ("2²" is
    not "22"). A box holding a box answers what the outer one
    holds (``\\boxed{\\boxed{4}}`` is 4, ``\\boxed{3 \\boxed{4}}`` is "3 \\boxed{4}"); a ``\\boxed{``
    never closed is not a box, and hides no box before it.
    An answer that is then one number, as ``numeric_match`` reads numbers (a signed integer or
    decimal, thousands commas, an exponent, or a fraction of two integers), is compared by its
    exact value: "0.5", ".5", "0.50", "1/2" and ``\\frac{1}{2}`` are one answer, as "1,000" and
    "1000" are; "0.5" is not "0.05" and "1/2" not "2"; a percent sign after it is dropped, as
    ``numeric_match`` reads "42%" (and MATH's grader drops it): "50%", ``50\\%`` and "50" are one
    answer, not 0.5. A comma between digits that groups no thousands ("1,5": a decimal comma, or a
    list) makes it no number: text. One letter given a number's value ("x = 5", "x=5") answers that
    number, as in ``numeric_match``. An expression or a number with words or a unit around it
    ("1/2 cup", "5 cm", "2+2", "so x = 5", "y = 2x+3") is compared as text: for a unit, use
    ``numeric_match``. Its sign is read as ``numeric_match`` reads it: ``\\boxed{- 5}``, "answer: - 5",
    "x = - 5" and a typeset minus ("\u22125") are -5, and a spaced minus in a text answer is glued
    ("y = - 2x" is "y = -2x"); a "- 5" that opens the line it is read from is a list's dash: 5.
    A number answer given by a box or a marker that a hedge follows ("\\boxed{5}, though 6 is
    possible", "answer: 5\\nor 6") or a verdict rejects ("\\boxed{5} is wrong") scores 0, as in
    ``numeric_match``.
``numeric_match``    1.0 when the completion's final number equals the number in ``row[column]``, else
    0.0. ``column`` ("answer"), ``tolerance`` (absolute, default 0), ``rel_tolerance`` (1e-9),
    ``last_number`` (true: rule 3 below; false: a completion with neither a box nor a marker scores 0).
    The completion is read after its reasoning, as ``exact_match`` reads it (an unclosed ``<think>``
    scores 0); its final number is, first rule that applies:
    1. the number in the last ``\\boxed{...}``, which must hold one ("\\boxed{42 \\text{ cm}}" is 42,
       "\\boxed{2, 3}" none); several boxes with different numbers score 0, as in ``exact_match``;
       what follows a box is not part of its answer ("\\boxed{12}!", "\\boxed{12}^2": 12, as
       math-verify reads them; 12 factorial is ``\\boxed{12!}``), but the rest of its sentence, if it
       hedges (a word such as "or", "maybe", "though": ``_HEDGE``) and offers another number
       standing alone or spelled ("\\boxed{5}, though 6 is possible", "\\boxed{5} (or six)") makes
       it no one answer: 0, as does a verdict rejecting the box ("\\boxed{5} is wrong"); a check,
       "\\boxed{5}. Check: 2+3=5", still reads; a box holding an equation of arithmetic holds the
       number it states, as an answer sentence does (rule 2: ``\\boxed{6 \\times 7 = 42}`` is 42);
    2. the number after the last "####", "answer:" or "answer is", in the first sentence of that
       line that holds a number (a sentence ends at ".", "?" or "!" before a space, not at a
       factorial's "!"): its first number, which every other number standing alone there must
       equal and no number after it may open an expression that is no side of an equation, so an
       answer that hedges ("answer: 2 or 3", "42 and 43", "2, 3", "4 or 5!", "2 or 3x") scores 0,
       while "answer: 2 (two)", "2, 2", "1/2 = 0.5", "4, since 2*2 = 4", "8 = 2^3" (an expression
       either side of an "="), "42 cm^2" and "The answer is 2. Check: 2+0=2" read 2, 1/2, 4, 8 or 42;
       a hedge in that sentence in words ("answer: 5 (or six)") scores 0 as after a box (a later
       sentence or line is explanation: "The answer: 5. Or 6." reads 5, the first answer); a
       sentence whose first number opens an expression is read as an equation: the number after its
       last "=", as read here, where the left side has no unknown, word or number standing alone
       ("The answer is: 3 + 4 = 7" and "answer: x = 6 \\times 7 = 42" read 7 and 42; "answer: x^2 = 4",
       "answer: 5, 3 + 4 = 7" and "answer: 3 + 4 = 7 or 8" none: ``_equation_result``);
    3. the last number of the text, even one the prompt also writes: arithmetic answers are often
       one of the question's numbers ("8 - 4 = 4", "0 * 3 = 0", "4" then more text), and not paying
       those was a false zero that cost the demo 12 points of held-out accuracy. The price: "You
       asked about 12 apples." (a quote of the question) is paid against 12, as math-verify's
       default ``parse`` and verl's "flexible" GSM8K score pay it; ``last_number = false`` reads
       none here, the side verl's "strict" score and TRL's ``accuracy_reward`` take. A last number a
       hedge follows ("5, or perhaps six") is no one answer: 0; a bare list ("5 6", "between 5 and
       6") pays its last number, as a quote does (refusing those cost the demo 7 points). A check ending the
       text whose equation gives the last number ("So x = 5. Check: 5+1=6.") is not read: 5.
    Numbers may carry a sign, thousands commas, decimals and an exponent ("-1,234.5", "+5", "3e8"); a
    "-" or "+" directly after a digit, letter, decimal point or closing bracket ("3-5", "x+5", "(3)-5",
    "1.-5"), or a "+" after another sign ("-+5"), is an operator, not a sign, as a spaced "-" after
    an operand is ("3 - 5", "5! - 3", "50% - 5"); a spaced "-" after no operand is a sign ("x = - 5",
    "answer: - 5", ``\\boxed{- 5}``: -5, as math-verify reads them) except where it opens a line, a
    markdown list's dash ("- 5", "Total:\\n- 5", "Steps\\n- 5": 5, no difference across the line
    break), and so is a minus markup keeps from its digits ("-$5", "-\\$5", "-{5}", "{-}5", ``\\text{-}5``,
    "-\\,5", "-**5**": -5; ``_SPACED_MINUS``), while a "-" glued before a signed number ("--5") makes
    it no number; a spaced "+" is no sign ("+ 5" is an
    expression), and "3 +5" and "3 -5" are 3, an expression's first number,
    then a signed 5; a minus typeset as U+2212, an en
    dash, a hyphen or a fullwidth hyphen-minus ("\u201312") is a "-", and the Arabic decimal and
    thousands separators ("\u0665\u066b\u0665") are "." and "," (``_MINUS_SIGNS``). LaTeX's
    thousands separators ``{,}`` and ``\\,`` ("1{,}000") are commas; a comma glued between digits
    that groups no thousands ("1,5", a decimal comma, or "(1,2)") joins numbers that are not read,
    neither 1 nor 5 (the row's answer may not be written so: an error). A fraction of two integers is one
    number, its exact value: "1/2", "-1/2", "+1/2" (no spaces: "1 / 2" is an expression), ``\\frac{1}{2}``,
    ``\\dfrac``, ``\\tfrac``, ``\\frac12``, ``-\\frac{1}{2}``, ``\\frac{-1}{2}``, ``\\frac{+1}{2}``; a fraction over 0 is
    none, and a fraction next to another number ("2 1/2", ``2\\frac{1}{2}``: a mixed number or a
    product) is an expression. A number that is part of an expression is not read, and that
    answer scores 0 (never the expression's first or last number, nor its value: "2+2" is not 4):
    one next to an operator (``+ - * / ^ ** × ÷ ·``, ``\\cdot``, ``\\times``, ``\\pm``; "x^2", "x**2"
    and "x*2" hold no 2; LaTeX's spacing ``\\,`` is a space there) or before π ("5π", "5 \\pi"),
    inside any other ``\\frac{}{}`` (``\\frac{a+1}{2}``) or ``\\sqrt{}``, a
    root's index (``\\sqrt[3]{x}``), a number after a second sign ("5 - -6" is 5 + 6, not 5),
    before a superscript ("2⁴"), ``(``, ``π``, a vulgar fraction ("4½", "4 ½": 4.5), a combining mark
    ("4\u0336", a struck-through 4), a subscript ("100₂", "100_2": a base or an index) or a factorial: "The answer is 42!" scores 0 against
    42, since "42!" is 42 factorial (as math-verify reads it), not an exclamation. A number after
    a relation (``<``, ``>``, ``<=``, ``≠``, "!=", ``≢``, ``∉``, ``≤``, ``\\neq``, ``\\not``, ``\\not=``, ``\\le``...) is a bound, not the
    answer, and a candidate besides it: "x > 4", ``\\boxed{\\neq 4}`` and "4 < 5" score 0 against 4
    (an arrow "=> 4", a tag's "<answer>4" and "≈ 4" still read). A number struck out or hidden
    (``\\sout{4}``, ``\\cancel{4}``, "~~4~~", "<del>4</del>", ``\\phantom{4}``) or negated ("not 4",
    "isn't 4", "never 4", "cannot 4", "cannot be 4", "is not equal to 4", ``\\neg 4``, "¬4", "!4", "-(4)", or
    rejected after it: "4 is wrong", "4 is not the answer", "4 isn't right"; LaTeX's thin space ``\\!`` is no negation: ``5\\!6`` draws 56) is not
    read, and an answer that gives a number and negates it ("4, not 4") gives none ("4, not 5"
    reads 4). A number glued to
    a lone letter is a product with a variable ("2x", "4a", "2i", "2pi", "2x2"; "2 x 3" too), except
    a single-letter unit ("10m", "5s", "3h", "2L", "25C": m s g h l L N J W V C F), and so is one
    a space and such a letter before an operator follow ("2 x + 1", "2 x^2"); "5k" and "2M" are
    not read either way; a glued word is a unit or suffix ("5kg", "3rd"), and "42%", "$5",
    "5 apples" read 42, 5, 5. Markdown emphasis around a number is emphasis, even glued to the word
    before it ("is**42**", "__42__"), but not after a digit, bracket or lone letter ("x**2**" is a
    power, "x__2__" an index).
    The row's answer may be a number or such a fraction ("1/2", ``\\frac{1}{2}``), in math delimiters
    or not (``\\(5\\)``, ``\\[5\\]``, "$5$"), with LaTeX thousands separators ("1{,}000"), with a currency
    or percent sign read as a completion's is ("$5.00", ``\\$18.90``, ``20\\%``: 5, 18.9, 20); a
    comma in it must group thousands ("1,5" is an error, not 15). An integer answer
    is matched exactly ("12345678901234567000" is not 12345678901234567890, "42.0" is 42; only
    ``tolerance`` widens it); any other within ``math.isclose(got, expected,
    rel_tol=rel_tolerance, abs_tol=tolerance)``. Both sides are read as written (exact decimals and
    fractions, not binary floats: ``\\frac{1}{2}`` equals 0.5 exactly, ``\\frac{1}{3}`` is 1/3), so a
    gold rounded to a few digits needs a ``tolerance`` to accept more digits.
``regex_format``     1.0 when ``pattern`` matches the completion, else 0.0.
    ``pattern`` (required), ``match`` ("search" | "fullmatch", default "search"),
    ``flags`` (letters from "imsx", default "s" so that ``.`` spans lines). A pattern search finds in
    any text (``x*``, ``^``, ``(a|)``, ``$``, ``x*$``, ``$|^``, ``(?!x)``, ``(?<!x)``: an empty match
    needing nothing of the text but, in one branch, an anchor or a negative lookaround at its start
    or its end) is refused.
    The pattern is the user's, and ``.*`` patterns are easy to satisfy: ``<think>.*</think>`` is
    found in "junk <think></think> junk", and with the "s" flag ``<think>.*</think><answer>.*</answer>``
    spans several tag pairs. To check a reasoning format, anchor the pattern, keep the tag out of
    what it encloses and ask for some text, as ``THINK_FORMAT`` does (TRL's ``think_format_reward``
    is ``^<think>(?!.*<think>)(.*?)</think>.*$``, which also takes an empty think):
    ``^<think>(?:[B]|E)*(?!E)[^B<](?:(?!</?think>).)*</think>(?:(?!</?think>).)*$``, B the
    whitespace and the characters that print nothing (zero-width spaces, the byte-order mark...:
    ``_BLANK``), E an HTML character reference (``&nbsp;``, ``&#8203;``, ``&zwnj;``: ``_ENTITY``), so
    an invisible think, or one of escapes only, is empty too; with an answer tag, after ``</think>``:
    ``\\s*<answer>(?:[B]|E)*(?!E)[^B<](?:(?!</?answer>).)*</answer>\\s*$``.
``length_penalty``   ``-scale * max(0, length - target) / target`` (0 within the target).
    ``target`` (required, finite, > 0), ``unit`` ("tokens" | "chars", default "tokens"), ``scale`` (1.0).
    Only what the model wrote counts: in a multi-turn episode, the tokens it sampled (not the
    template glue, tool results or observations the core inserted, as the loss mask and
    ``algorithms/shaping.py`` count them) or the characters of all its assistant turns (not only
    the last one, which other text rewards read as the answer: earlier turns are not free).

A row whose answer cell is None gets score None (no reward), so it is dropped, not punished; so does
an ``exact_match`` answer that is empty after normalising (TRL skips a gold answer it cannot parse):
else an empty completion would be rewarded as correct.
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from fractions import Fraction
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from polyrl.errors import RewardError
from polyrl.reasoning import final_part
from polyrl.rewards.inputs import answer_part, completion_text, reasoning_open
from polyrl.rewards.options import merged, positive_number, true_or_false
from polyrl.hookspecs import hookimpl
from polyrl.types import Completion, Prompt, RewardContext, RewardScores, RewardSpec

# --- answer extraction -------------------------------------------------------------------------

_MARKER = re.compile(r"####|answer\s*:|answer\s+is(?!n['\u2019]t)\s*:?", re.IGNORECASE)
#: A sign glued to the digits: "-5", "+5" (a change, a difference: 5). Not right after a digit, letter, "."
#: or closing bracket, where it is an operator ("3-5", "x+5", "(3)-5"), nor a "+" right after another
#: sign ("-+5", "++5"); spaced, "3 -5" and "3 +5" are a number and a signed one. Why "+": an honest
#: "+5" was read as an operator on nothing, so it scored 0 against 5.
_SIGN_CHAR = r"(?:(?<![\w.)\]}])-|(?<![\w.)\]}+-])\+)"
_SIGN = f"{_SIGN_CHAR}?"
#: A box's opening: ``\\boxed{``, also spaced (``\\boxed {4}``), and ``\\fbox{``, ``\\framebox{`` (its
#: width and position options too: ``\\framebox[2cm]{``) and ``\\fcolorbox{frame}{background}{``, which
#: LaTeX draws as framed boxes: read as boxes, so "\\boxed{3} or \\framebox{4}" is two answers, not one.
_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox|framebox(?:\s*\[[^\]\n]{0,64}\]){0,2}"  # bounded: linear time
                        r"|fcolorbox\s*\{[^{}]{0,64}\}\s*\{[^{}]{0,64}\})\s*\{|[{}]")
#: A box whose argument has no braces, as LaTeX takes one: a number glued or spaced (``\\boxed6``,
#: ``\\fbox 12``; its digits whole, as a reader takes them) or a lone letter after a space
#: (``\\boxed A``). Why: "\\boxed{5} \\boxed6" draws two boxed answers and paid 5 as one.
_BARE_BOX = re.compile(r"\\(?:boxed|fbox)(?:\s*(\d+(?:\.\d+)?)|\s+([A-Za-z])(?![A-Za-z]))")
_NUMBER = re.compile(_SIGN + r"(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)")


def boxed_answers(text: str) -> list[str]:
    """The contents of every outermost balanced ``\\boxed{...}`` (or ``\\boxed {...}``,
    ``\\fbox{...}``), in order (one pass: linear even for thousands of unclosed boxes). A box
    inside another box is part of that box's answer (``\\boxed{3 \\boxed{4}}`` answers
    "3 \\boxed{4}"); boxes around the whole content are removed. A box without braces
    (``_BARE_BOX``: ``\\boxed6``) is read as braced."""
    if "box" in text:
        text = _BARE_BOX.sub(lambda m: "\\boxed{" + (m.group(1) or m.group(2)) + "}", text)
    closes = _box_closes(text)
    out: list[str] = []
    covered = -1
    for start in sorted(closes):
        if start > covered:
            out.append(_unwrapped(text, *closes[start], closes))
            covered = closes[start][1]
    return out


def _box_closes(text: str) -> dict[int, tuple[int, int]]:
    """Where each closed box of ``text`` starts -> (where its content starts, the index of its
    ``}``) (braces balanced; a box never closed is not a box)."""
    closes: dict[int, tuple[int, int]] = {}
    stack: list[tuple[int, int]] = []  # an open box's start and content start, or (-1, -1) for a plain "{"
    for m in _BOX_TOKEN.finditer(text):
        if m.group() == "}":
            if stack and (opened := stack.pop())[0] >= 0:
                closes[opened[0]] = (opened[1], m.start())
        else:
            stack.append((m.start(), m.end()) if m.group() != "{" else (-1, -1))
    return closes


def _unwrapped(text: str, start: int, end: int, closes: dict[int, tuple[int, int]]) -> str:
    """``text[start:end]`` (a box's content) without boxes around all of it
    (``\\boxed{\\boxed{42}}`` holds 42): the same scan's ``closes``, so linear however deep."""
    while True:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        inner = closes.get(start)
        if inner is None or inner[1] != end - 1:
            return text[start:end]
        start, end = inner


def last_boxed(text: str) -> str | None:
    """The last of ``boxed_answers`` (an unclosed ``\\boxed{`` is not a box and hides none), or None."""
    boxes = boxed_answers(text)
    return boxes[-1] if boxes else None


def extract_answer(text: str, mode: str = "auto") -> str:
    """The final answer of a completion, per the rules in the module docstring."""
    return _extracted(text, mode)[0]


def _extracted(text: str, mode: str) -> tuple[str, bool]:
    """``extract_answer``, and whether that answer opens a line, where a "- " before a number is a
    markdown list's dash, not a sign (``_glued_minus``): the last line, the full text, or an answer
    on the line after "answer:"; not a box's content nor the rest of the marker's line."""
    if mode == "full":
        return text, True
    if mode == "auto":
        boxed = last_boxed(text)
        if boxed is not None:
            return boxed, False
        text = joined_display(text)
        markers = list(_MARKER.finditer(text))
        if markers:
            after = text[markers[-1].end():]
            rest = after.strip()
            return (rest.splitlines()[0] if rest else ""), "\n" in after[:len(after) - len(after.lstrip())]
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else ""), True


#: What opens or closes a LaTeX display block (``\\[``, ``\\]``, ``$$``; not a line break's ``\\\\[2pt]``),
#: and a paragraph break, which no display block holds (LaTeX refuses one there).
_DISPLAY_TOKEN = re.compile(r"(?<!\\)\\[\[\]]|\$\$|\n[^\S\n]*\n")


def joined_display(text: str) -> str:
    """``text`` with each display block (``\\[ ... \\]``, ``$$ ... $$``) written on one line. Why:
    "The final answer is:\\n\\[\\n\\frac{1}{2}\\n\\]", as models write it, was read as its "\\[" or
    "\\]" line, so a right answer scored 0. One pass, pairing each opener with the next closer of its
    kind before a paragraph break: linear however many openers are never closed."""
    if "\\[" not in text and "$$" not in text:
        return text
    out: list[str] = []
    done, opened, closer = 0, -1, ""
    for m in _DISPLAY_TOKEN.finditer(text):
        token = m.group()
        if token.startswith("\n"):
            opened = -1
        elif opened < 0 and token in ("\\[", "$$"):
            opened, closer = m.start(), "\\]" if token == "\\[" else "$$"
        elif opened >= 0 and token == closer:
            out += [text[done:opened], " ".join(text[opened:m.end()].split())]
            done, opened = m.end(), -1
    out.append(text[done:])
    return "".join(out)


#: LaTeX's math delimiters around a whole answer: inline ``\\( \\)`` and ``$ $``, display ``\\[ \\]``
#: and ``$$ $$``; what they enclose is the answer, as LaTeX draws it.
_MATH_DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$"))
#: A math delimiter opening a text: a "- " after it is a sign, never a list's dash.
_MATH_OPEN = re.compile(r"\\[(\[]|\$")


def _math_content(s: str, lo: int, hi: int) -> tuple[int, int]:
    """The indices of what one pair of math delimiters encloses when ``s[lo:hi]`` is that pair around
    its content (the first closer is the last, and no backslash escapes it: ``\\(5\\) and \\(6\\)``
    and ``\\[5\\\\]`` are no one pair), else ``lo, hi``. Why: ``\\(5\\)`` and ``\\[5\\]`` were texts
    unequal to 5, though "$5$", the same math, was 5."""
    for opener, closer in _MATH_DELIMITERS:
        inner_lo, inner_hi = lo + len(opener), hi - len(closer)
        if (inner_lo <= inner_hi and s.startswith(opener, lo) and s.startswith(closer, inner_hi)
                and s.find(closer, inner_lo, hi) == inner_hi and s[inner_hi - 1:inner_hi] != "\\"):
            return inner_lo, inner_hi
    return lo, hi


def unwrapped_math(text: str) -> str:
    """``text`` without the math delimiters and whitespace around all of it (``_math_content``): a
    dataset's ``\\(5\\)``, ``\\[\\frac{1}{2}\\]`` or "$5$" answers 5 or 1/2."""
    lo, hi = 0, len(text)
    previous = None
    while (lo, hi) != previous:
        previous = lo, hi
        lo, hi = _stripped(text, lo, hi, " \t\r\n")
        lo, hi = _math_content(text, lo, hi)
    return text[lo:hi]


def normalize_answer(text: str, case_sensitive: bool = False) -> str:
    """Canonical form for comparing answers (see the module docstring). Peeled by moving two
    indices, never by copying the rest: linear however many layers ("4!.!.!." or ``\\text{`` nested
    thousands deep) a completion piles up."""
    s = " ".join(_LATEX_SPELLINGS.sub(_plain_spelling, compatible(str(text))).split())
    closes = _brace_closes(s)
    lo, hi = 0, len(s)
    previous = None
    while (lo, hi) != previous:
        previous = lo, hi
        lo, hi = _stripped(s, lo, hi, " ")
        lo, hi = _stripped(s, lo, hi, _QUOTES)
        lo, hi = _stripped(s, lo, hi, " ")
        lo, hi = _stripped(s, lo, hi, ".", left=False)
        lo, hi = _stripped(s, lo, hi, " ")
        if hi > lo and s[hi - 1] == "!":  # "5!" is 120, not an exclamation
            before = hi - 2 if hi - 2 >= lo and s[hi - 2] != " " else hi - 3  # spaces are single here
            if not (before >= lo and (s[before].isdecimal() or s[before] in ")}]")):
                lo, hi = _stripped(s, lo, hi - 1, " ")
        lo, hi = _math_content(s, lo, hi)
        m = _STYLE.match(s, lo, hi)
        if m is not None and closes.get(m.end() - 1) == hi - 1:
            lo, hi = m.end(), hi - 1
    s = _LATEX_FRACTION.sub(_slashed, s[lo:hi])
    return s if case_sensitive else s.casefold()


def _fraction_operand(name: str, sign: str) -> str:
    """A ``\\frac`` argument that is plain: in braces a number, one letter or one command (the
    numerator may be signed: ``_slashed`` drops a "+"), or a lone digit without braces (``\\frac12``)."""
    plain = sign + r"(?:\d+(?:\.\d+)?|[^\W\d_]|\\[A-Za-z]+)"
    return rf"(?:\{{\s*(?P<{name}>{plain})\s*\}}|(?P<{name}_digit>\d))"


#: A LaTeX fraction of plain operands: ``\\frac{1}{2}``, ``\\dfrac{-3}{4}``, ``\\tfrac{x}{2}``,
#: ``\\frac12``, ``\\frac{\\pi}{2}``.
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*" + _fraction_operand("num", "[-+]?") + r"\s*" + _fraction_operand("den", ""))


def _slashed(m: re.Match[str]) -> str:
    """A LaTeX fraction written "a/b", as "1/2" is written: ``\\frac{1}{2}`` and "1/2" are the same
    answer. Only where the slash reads the same: not next to a digit, letter, bracket or power
    ("2\\frac12" is 2½, ``\\frac{2}{3}^2`` is not "2/3^2", ``\\frac{1}{2}x`` is not "1/2x")."""
    text, start, end = m.string, m.start(), m.end()
    start -= start > 0 and text[start - 1] == " "  # spaces are single here (normalize_answer)
    end += end < len(text) and text[end] == " "
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if (before and before not in "+-=([{,;:<>$") or (after and after not in "+-=)]},;:<>$"):
        return m.group()
    num = m.group("num").lstrip("+") if m.group("num") is not None else m.group("num_digit")
    den = m.group("den") if m.group("den") is not None else m.group("den_digit")
    return f"{num}/{den}"


#: LaTeX spellings of plain characters (``_plain_spelling``): ``\\$``, ``\\%``, a ``{,}`` or ``\\,`` that
#: groups thousands ("1{,}000"), ``\\dfrac``/``\\tfrac``, and ``^{2}``/``_{2}`` around one character.
#: A LaTeX thousands separator between digit groups ("1{,}000", "1\\,000"): a comma, in both rewards.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|\\,)(?=\d{3}(?!\d))")
_LATEX_SPELLINGS = re.compile(
    rf"\\([$%])|{_LATEX_THOUSANDS.pattern}|\\[dt]frac(?![A-Za-z])|([\^_])\{{\s*(\w)\s*\}}")


def _plain_spelling(m: re.Match[str]) -> str:
    """What a ``_LATEX_SPELLINGS`` match draws, written plainly. Why: MATH-style answers escape
    their dollars and percents (``\\$18.90``, ``50\\%``) and group thousands as ``1{,}000``, and
    each was text unequal to "$18.90", "50%" or "1000"; ``\\dfrac{\\sqrt{3}}{2}`` was unequal to
    ``\\frac{\\sqrt{3}}{2}`` and ``x^{2}`` to "x^2", though LaTeX draws each pair alike."""
    if m.group(1):
        return m.group(1)
    if m.group(2):
        return m.group(2) + m.group(3)
    return "\\frac" if "frac" in m.group() else ","


#: What ``normalize_answer`` strips from both ends besides whitespace: markdown, ``$``, quotes.
_QUOTES = "*_$`\"'"
#: LaTeX commands that only style their argument, or a bare group: ``\\boxed{\\text{4}}`` and ``\\boxed{{4}}`` answer 4.
_STYLE = re.compile(r"(?:\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox)\s*)?\{")
#: Characters whose compatibility form says another thing: "2²" is 4, not "22"; "1½" is not "11⁄2".
_KEEP_TAGS = ("<super>", "<sub>", "<fraction>")


def _stripped(s: str, lo: int, hi: int, chars: str, left: bool = True) -> tuple[int, int]:
    """The indices of ``s[lo:hi]`` with ``chars`` stripped from its end (and its start if ``left``)."""
    while left and lo < hi and s[lo] in chars:
        lo += 1
    while hi > lo and s[hi - 1] in chars:
        hi -= 1
    return lo, hi


def _brace_closes(s: str) -> dict[int, int]:
    """Where each ``{`` of ``s`` is closed: its index -> the index of its ``}`` (one pass)."""
    closes: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(s):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closes[stack.pop()] = i
    return closes


def compatible(text: str) -> str:
    """``text`` in Unicode compatibility form (NFKC): fullwidth "４２" is 42, "ｘ" is x, math bold
    "𝟒" is 4. Why not NFKC itself: it writes superscripts, subscripts and vulgar fractions as
    plain digits, so "2²" (4) would equal "22" and "1½" "11⁄2": those characters are kept."""
    if text.isascii():
        return text
    kept = [i for i, ch in enumerate(text) if unicodedata.decomposition(ch).startswith(_KEEP_TAGS)]
    if not kept:
        return unicodedata.normalize("NFKC", text)
    out, start = [], 0
    for i in kept:
        out += [unicodedata.normalize("NFKC", text[start:i]), text[i]]
        start = i + 1
    out.append(unicodedata.normalize("NFKC", text[start:]))
    return "".join(out)


_SUPERSCRIPTS = "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b\u207d"
#: Subscripts after a number ("100₂", "100_2", "100_{2}"): a base or an index, so the digits as
#: written are not the number meant (100 in base 2 is 4): the number is not read.
_SUBSCRIPTS = "\u2080-\u208e"
_OPERATORS = "+/^\u00d7\u00f7\u00b7\u22c5\u2219"  # + / ^ × ÷ · ⋅ ∙
_COMMANDS = r"\\(?:[dt]?frac|sqrt|binom|cdot|times|div|pm|mp|log|ln|exp|sin|cos|tan)(?![a-zA-Z])"
#: Single letters that, glued to a number, are a unit ("10m", "5s", "25C"), not a variable: SI
#: symbols seldom used as an answer's variable. Any other lone letter glued to a number is a
#: variable ("2x", "4a", "2i": a product, not the number); "5k" and "2M" (thousands, millions, or
#: kelvin) are not read either way. A glued word ("5kg", "3rd", "2pm") is a unit or suffix.
_UNIT_LETTERS = "msghlLNJWVCF"
#: Vulgar fractions: "4½" and "4 ½" are 4.5 (a mixed number), never 4.
_VULGAR = "\u00bc-\u00be\u2150-\u215f\u2189"
#: Combining marks: a digit struck through ("4\u0336", "4\u0338": not 4) or otherwise marked is not
#: that digit as written.
_COMBINING = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
#: A relation before a number makes it a bound, not the answer: "x > 4", "< 4", "≠ 4", "!= 4", "≢ 4",
#: "∉ 4", "\\neq 4", "\\not 4", "\\not= 4" (4 is then what the answer is not). Not an arrow ("=> 4", "-> 4"), a tag's ">"
#: ("<answer>4") nor a blockquote's (a ">" opening a line, up to 3 spaces in, as markdown indents
#: one: "answer:\n> 4"); "≈ 4" and "~4" approximate the answer and read.
_RELATION = (r"(?:(?<![\w\"'/=\n-])(?<!\n )(?<!\n  )(?<!\n   )>|(?<![\w\"'/=-])[<\u2260\u2264\u2265\u226e\u226f\u2262\u2249\u2247\u2209])=?"
             r"|!=|=/=|\\(?:neq?|not|[lg]eq?(?:slant)?|[lg]t|nless|ngtr)(?![a-zA-Z])(?:\s*=)?")
#: Space between a number and an operator, as text or LaTeX draws it: whitespace, LaTeX's spacing
#: commands (``\\,``, ``\\;``, ``\\:``, ``\\!``, ``\\>``, a backslash-space) and its tie "~". Why: "5\\,\\pi",
#: "2\\,\\sqrt{3}" and "5 \\pi" were read as 5 and 2, paying 5\u03c0 against 5.
_LATEX_GAP = r"(?:\s|\\[,;:!> ]|~)*"
#: what after a number makes it part of an expression: right after it a superscript, "!", "(", "^",
#: π, √, \\pi, "pi", a lone Latin letter that is no unit ("2x"), or a "*"/"**" glued to an operand
#: ("2**3", "2*x"); or, spaces allowed, an operator or a command, a "*" or "-" with an operand after
#: it ("**42**" is markdown, "42 - that is all" a dash), π or \\pi ("5 \\pi"; LaTeX spacing counts as
#: spaces: ``_LATEX_GAP``), a spaced "**" ("2 ** 3") or "x" between
#: numbers ("2 x 3"), a spaced lone letter that is no unit before an operator ("2 x + 1", "2 x^2":
#: "5 a day" and "9.8 m/s^2" read), "}{" / "}^" (\\frac{1}{2}, {2}^3), or a decimal point glued to
#: an operator with an operand after it ("1.-5", "1.+5": 1. minus 5)
_EXPRESSION_AFTER = re.compile(
    rf"[{_SUPERSCRIPTS}{_SUBSCRIPTS}{_COMBINING}!(^\u03c0\u221a]|_(?=[{{\dA-Za-z])|\\pi(?![a-zA-Z])|pi(?![A-Za-z])|(?![{_UNIT_LETTERS}])[A-Za-z](?![A-Za-z])"
    rf"|,(?=\d)|\*\*?(?=[A-Za-z\d(])|\s+\*\*\s+(?=[\d(])|\s+x\s+(?=[\d(])|\.(?=[-*{_OPERATORS}]\s*[\d(.\\])"
    rf"|\s+(?![{_UNIT_LETTERS}])[A-Za-z](?=\s*(?:[{_OPERATORS}]|(?:\*\*?|-)\s*(?:[\d(.\\]|[A-Za-z](?![A-Za-z]))))"
    rf"|{_LATEX_GAP}(?:[{_OPERATORS}{_VULGAR}\u03c0]|\*(?=\s*[\d(])|-(?=\s*(?:[-+]\s*)?[\d(.\\])|{_COMMANDS}|\\pi(?![a-zA-Z])"
    rf"|\}}\s*[{{^])")
#: Markup that strikes out or hides what it encloses: a number in it is retracted or invisible, not
#: given (``\\sout{4}``, ``\\cancel{4}``, ``\\phantom{4}``, "~~4~~", "<del>4</del>"), as a digit
#: struck through with a combining mark is.
_STRUCK = (r"\\(?:sout|st|strike|cancel|bcancel|xcancel|phantom|hphantom|vphantom)\s*\{"
           r"|~~|<(?:del|s|strike)>")
#: what before a number makes it part of an expression (searched in the few characters before it):
#: an operator or "√", a "(" right after a digit or ")" ("2(3)"), a "*" or "**" after a digit or
#: bracket, or after a Latin letter either glued ("x**2", "x*2") or spaced on both sides ("x ** 2";
#: "is **85**" and "是**85**" are markdown), a "-" after a digit, letter, bracket, "%", a factorial's
#: "!" ("50% - 5", "5! - 3") or a decimal point glued to it ("1.-5") (a sign, "-" or "+"
#: (``_SIGN``), is part of the number), a
#: command, "^" or an index "x_" (with or without "{"), the "{" of \\frac{ / \\sqrt{ or of a
#: second argument "}{", or an "x" between numbers ("2 x 3"); or a "-" glued before a signed number
#: ("--5" is 5 negated twice: neither -5 nor, as written, 5)
_EXPRESSION_BEFORE = re.compile(
    rf"(?:[{_OPERATORS}\u221a\u207b\u208b]|[\d)]\(|-\(|[\d)}}\]]\s*\*\*?|[A-Za-z]\*\*?|[A-Za-z]\s+\*\*?\s|[\w)}}\]%][^\S\n]*-|[\d)}}\]]!\s*-|\d\.-|\d\s+x\s+"
    rf"|{_COMMANDS}|\\sqrt\s*\[|\^\s*\{{?|[\w}}]_\s*\{{?|(?:{_COMMANDS}|\}})\s*\{{|{_RELATION}|{_STRUCK}){_LATEX_GAP}$|\d,$|-$")
_LONGEST_NUMBER = 1000  # characters: a longer "number" is a decompression bomb for exact arithmetic, not an answer
#: A fraction of two integers, read as its exact value: "1/2" (no spaces, nothing glued on: "1/2/3" and
#: "1/2.5" are no fraction), or LaTeX's ``\\frac``/``\\dfrac``/``\\tfrac`` with integer arguments
#: (``\\frac{-3}{4}``, and ``\\frac12``, whose arguments are single digits). Why these and no other
#: expression: they are how a rational answer is written, their value needs no evaluator, and a list
#: written "3/4" cannot pass for one of its members ("3/4" is 0.75, never 3 or 4).
_FRACTION = (rf"(?P<sign>{_SIGN_CHAR})?"
             r"(?:(?P<num>\d+)/(?P<den>\d+)(?![.,]?\d)"
             r"|\\[dt]?frac\s*(?:\{\s*(?P<tex_num>[-+]?\d+)\s*\}|(?P<tex_digit_num>\d))"
             r"\s*(?:\{\s*(?P<tex_den>\d+)\s*\}|(?P<tex_digit_den>\d)))")
_TOKEN = re.compile(f"{_FRACTION}|(?P<number>{_NUMBER.pattern})")
#: What between a fraction and a number next to it makes them one term (a mixed number or a product).
_JUXTAPOSED = re.compile(r"[\s{}]*")


#: The rest of an expression (operands, operators, brackets, lone letters and commands, no word):
#: when an "=" ends it, a number that opens it is a side of an equation ("4, since 2*2 = 4": a
#: check of the answer), not another candidate.
_EXPRESSION_REST = re.compile(
    rf"(?:[\d\s.!*\-{_OPERATORS}(){{}}\[\]]|\\[A-Za-z]+|(?<![A-Za-z])[A-Za-z](?![A-Za-z]))*")
#: what before a number makes the expression it opens the right side of an equation whose left side
#: ends in a number or bracket ("8 = 2^3", "6 = 2*3 = 3*2", "120 = 5!"): a restatement of the answer,
#: as a left side ending at "=" is; "4 or x = 2+3" still hedges
_EQUATION_BEFORE = re.compile(r"(?:[\d)}\]]|!\s)\s*=\s*$")
#: a relation right before a number: that number is a bound, a candidate that is not the answer
#: ("answer: 4 < 5" and "4 (> 3)" state no one answer, as "4 or 5" does not)
_RELATION_BEFORE = re.compile(rf"(?:{_RELATION})\s*$")
#: a negation right before a number: "not 12", "isn't 12", "never 12", "cannot 12", ``\\not{12}``, ``\\neg 12``, "¬12", "!12" (glued: a
#: subfactorial, or "not"): that number is what the answer is not, so it is not read, and an
#: answer that also gives it ("12, not 12") gives nothing. Not "\\!", LaTeX's negative thin space:
#: "\\boxed{5\\!6}" draws 56 and was read as "5, not 6", paying 5.
_NEGATION_BEFORE = re.compile(r"(?:(?:(?<![A-Za-z])(?i:not|never|cannot)|(?i:n['\u2019]t))(?![A-Za-z])"
                              r"(?:\s+(?i:be|been|equal(?:s)?(?:\s+to)?)(?![A-Za-z]))?\s*\}?"
                              r"|\\(?:not|neg|lnot)\s*\{?|\u00ac|(?<![\w)\]}!\\])!)\s*$")
#: A verdict after a number that rejects it: "5 is wrong", "5 is incorrect", "5 is not the answer",
#: "5 isn't right", "5 would be the wrong answer". Why: "5 is wrong" and "the answer cannot be 5"
#: were read as the answer 5, paying a completion that rejects it.
_NEGATION_AFTER = re.compile(
    r"(?:[^\S\n]*(?:\\[)\]]|[$*_}]))*[^\S\n]*(?i:(?:is|was|would\s+be|seems|looks)\s+(?:(?:the\s+|an?\s+)?(?:wrong|incorrect|false|invalid|impossible)"
    r"|(?:not|never)\s+(?:the\s+(?:\w+\s+)?answer|correct|right|valid|possible|it))"
    r"|(?:isn|wasn)['\u2019]t\s+(?:the\s+(?:\w+\s+)?answer|correct|right|valid|possible|it))(?![A-Za-z])")


#: The dashes that typeset a minus sign: the minus (U+2212), the hyphens (U+2010, U+2011), the figure
#: and en dashes (U+2012, U+2013) and the small and fullwidth hyphen-minus (U+FE63, U+FF0D), each read
#: as "-". Why: "answer: \u201312" (an en dash, as typesetting writes minus twelve) was read as 12,
#: paid against 12 and never against -12. The em dash is punctuation ("12 \u2014 no, 14") and stays.
#: Also the Arabic decimal and thousands separators (U+066B, U+066C), read as "." and ",": "\u0665\u066b\u0665"
#: (5.5 in Arabic-Indic digits) was read as the numbers 5 and 5, paying 5.5 against 5.
_MINUS_SIGNS = str.maketrans({**dict.fromkeys("\u2212\u2010\u2011\u2012\u2013\ufe63\uff0d", "-"),
                              "\u066b": ".", "\u066c": ","})


class _Number(NamedTuple):
    """A number read from a text (see ``_numbers``)."""

    value: Fraction | None  # exact; None past ``_LONGEST_NUMBER``
    alone: bool  # it stands alone (False: it is part of an expression, see ``numeric_match``)
    opens: bool  # it opens an expression that is no side of an equation ("5!", "3x", "1+2"): a candidate
    start: int = -1  # where it starts in the text
    end: int = -1  # where it ends in the text
    negated: bool = False  # a negation is before it ("not 12"): what the answer is not


#: A "-" spaced from the number it negates ("x = - 5", "answer: - 5", ``\\boxed{- 5}``, "(- 5)"): after
#: no operand (a digit, letter, "." or "%", bracket, "!": "3 - 5" is a difference) on its own line
#: (after a line break it is a markdown list's dash: "Total:\n- 5" lists 5). Also a minus that markup
#: keeps from its digits though it draws them signed: a currency sign ("-$5", ``-\\$5``, "-\u20ac5"), LaTeX
#: spacing or braces ("-\\,5", "-~5", "-{5}", "{-}5", ``\\text{-}5``), markdown emphasis ("-**5**",
#: "**-**5") or a zero-width character. Why: each was read as 5, so "-\\$5" paid against 5 and never -5.
_SPACED_MINUS = re.compile(
    r"(?:(?<=[^\w.%!)\]}\s])|(?<=\n)|^)([ \t]*)"
    r"(?:-|(?:\\(?:text|textrm|textbf|mathrm|mathbf|mbox)\s*)?\{[ \t]*-[ \t]*\}|(?P<emphasis>\*{1,3})-(?P=emphasis))"
    r"(?:[ \t~{\u200b-\u200d\u2060\ufeff]|\\[,;:! ]|\\?[$\u20ac\u00a3\u00a5]|\*)*(?=\.?\d|\\[dt]?frac)")
#: A plain "-" then a space: where it opens a line, a markdown list's dash ("- 5", "- $5"), no sign.
_LIST_DASH_OPENING = re.compile(r"[ \t]*-[ \t]")


def _glued_minus(text: str, line_start: bool) -> str:
    """``text`` with each sign ``_SPACED_MINUS`` finds moved next to its number, the spaces before it
    (same length: positions still index the text). Why: "x = - 5" and ``\\boxed{- 5}`` were read as 5,
    paid against 5 and never against -5. ``line_start``: ``text`` opens a line, so a "- " opening it
    is a list's dash ("- 5" alone lists 5, as markdown renders it), as it is not in a box or after
    "answer:"."""
    def glued(m: re.Match[str]) -> str:
        opens_line = (line_start and m.start() == 0) or m.string[m.start() - 1:m.start()] == "\n"
        if opens_line and _LIST_DASH_OPENING.match(m.group()):
            return m.group()
        return " " * (len(m.group()) - 1) + "-"
    return _SPACED_MINUS.sub(glued, text) if "-" in text else text


def _numbers(text: str, line_start: bool = True) -> list[_Number]:
    """Each number in ``text``, in order. A fraction of two integers is one number, its exact value.
    ``line_start``: whether ``text`` opens a line (see ``_glued_minus``)."""
    text = _glued_minus(_LATEX_THOUSANDS.sub(",", text.translate(_MINUS_SIGNS)), line_start)
    out: list[_Number] = []
    previous: tuple[int, bool] | None = None  # the last token's end, and whether it was a fraction
    rest_end = -1  # where the last expression scanned ends: a number before it ends there too (linear time)
    for m in _TOKEN.finditer(text):
        value, known = _token_value(m)
        start, end = _emphasised(text, m.start(), m.end())
        after = _EXPRESSION_AFTER.match(text, end) is not None
        before = _EXPRESSION_BEFORE.search(text[max(0, start - 16):start]) is not None
        opens = known and after and not before
        if opens:
            if end > rest_end:
                rest = _EXPRESSION_REST.match(text, end)
                rest_end = rest.end() if rest else end
            opens = not (text.startswith("=", rest_end)
                         or _EQUATION_BEFORE.search(text[max(0, start - 16):start]) is not None)
        opens = opens or (known and _RELATION_BEFORE.search(text[max(0, start - 16):start]) is not None)
        negated = known and (_NEGATION_BEFORE.search(text[max(0, start - 24):start]) is not None
                             or _NEGATION_AFTER.match(text, end) is not None)
        alone = known and not (after or before or negated)
        fraction = m.group("number") is None
        if (previous is not None and (fraction or previous[1])
                and _JUXTAPOSED.fullmatch(text, previous[0], m.start())):
            # "2 1/2", "2\\frac{1}{2}", "\\frac12 3": a mixed number or a product, neither part the answer
            out[-1], alone, opens = out[-1]._replace(alone=False), False, False
        out.append(_Number(value, alone, opens, m.start(), m.end(), negated))
        previous = (m.end(), fraction)
    return out


#: Markdown emphasis around a number: the same run of up to three "*" or "_" on both sides.
_EMPHASIS_OPEN = re.compile(r"(?:\*{1,3}|_{1,3})$")
def _emphasised(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the number ``text[start:end]`` with markdown emphasis around it ("**42**",
    "__42__") included, so that what is around the emphasis decides whether it stands alone. Why:
    "The answer is**42**" (bold glued to a word) read "s**42" as a power, scoring a right answer 0.
    A run that is an operator ("2**3**", "x**2**", "**2**3") is left as it is."""
    m = _EMPHASIS_OPEN.search(text, max(0, start - 3), start)
    if m is None:
        return start, end
    run = m.group()
    close = end + len(run)
    if text[end:close] != run or re.match(r"[*_A-Za-z\d(]", text[close:close + 1]):
        return start, end
    return (m.start(), close) if _opens_emphasis(text[max(0, m.start() - 2):m.start()], run) else (start, end)


def _opens_emphasis(before: str, run: str) -> bool:
    """Whether a ``run`` of "*" or "_" after the text ``before`` (its last two characters) opens
    emphasis: after the start, a space or punctuation; for "*" also after a word of two or more
    letters ("is**42**") or a letter of a script without spaces ("是**85**"). Not after a digit, a
    bracket or a lone Latin letter ("2**3**" and "x**2**" are powers), nor "_" after any word
    character ("x__2__" is an index, as markdown has no intraword "_" emphasis)."""
    last = before[-1:]
    if not last or not (last.isalnum() or last in "_)]}"):
        return True
    if run[0] == "_" or not last.isalpha():
        return False
    return not last.isascii() or (len(before) == 2 and before[0].isalpha())


def _token_value(m: re.Match[str]) -> tuple[Fraction | None, bool]:
    """A ``_TOKEN`` match's exact value (None when too long to compute) and whether it has one
    (a fraction over 0 has none)."""
    if m.group("number") is not None:
        token = m.group("number").replace(",", "")
        _, _, exponent = token.lower().partition("e")
        if len(token) > _LONGEST_NUMBER or abs(int(exponent or 0)) > _LONGEST_NUMBER:
            return None, True
        return Fraction(token), True
    numerator = m.group("num") or m.group("tex_num") or m.group("tex_digit_num")
    denominator = m.group("den") or m.group("tex_den") or m.group("tex_digit_den")
    if len(numerator) + len(denominator) > _LONGEST_NUMBER:
        return None, True
    if int(denominator) == 0:
        return None, False
    return (-1 if m.group("sign") == "-" else 1) * Fraction(int(numerator), int(denominator)), True


def read_fraction(text: str) -> Fraction | None:
    """``text`` when it is one fraction of two integers ("1/2", "-\\frac{1}{2}", "\\dfrac34"), exactly."""
    m = _TOKEN.fullmatch(text.strip().replace("\u2212", "-"))
    if m is None or m.group("number") is not None:
        return None
    value, known = _token_value(m)
    return value if known else None


def final_number(text: str, opened: bool = False, last_number: bool = True) -> Fraction | None:
    """The final number of a completion (see ``numeric_match``), exactly, or None. ``opened``: the
    prompt opened its ``<think>`` (``polyrl.reasoning.final_part``); ``last_number``: with neither a
    box nor an answer marker, read the text's last number (else none)."""
    part = final_part(text, opened)
    if part is None:
        return None
    boxes = boxed_answers(part)
    if boxes:
        values: set[Fraction | None] = set()
        for box in boxes:
            # one number, first in its box: "42 \\text{ cm}^2" holds 42; "2+2", "4 or 5!" none
            found = _numbers(box, line_start=False)
            if found and not found[0].alone:  # an equation ("6 \\times 7 = 42"): the number it states
                if (stated := _equation_result(box, found)) is None:
                    return None
                values.add(stated)
                continue
            if (not found or not found[0].alone or sum(n.alone for n in found) != 1
                    or any(n.opens for n in found[1:])):
                return None
            values.add(found[0].value)
        value = values.pop() if len(values) == 1 else None
        return None if value is None or _uncommitted(after_last_box(part), True, value) else value
    markers = list(_MARKER.finditer(part))
    if markers:
        after = joined_display(part[markers[-1].end():])
        rest = after.strip()
        first_line = rest.splitlines()[0] if rest else ""
        if "\n" in after[:len(after) - len(after.lstrip())]:  # the answer on a line of its own:
            first_line = "\n" + first_line  # a blockquote's ">" there opens the line ("answer:\n> 4")
        for sentence in _SENTENCE_END.split(first_line):
            numbers = _numbers(sentence, line_start=False)
            if numbers:
                value = _answered(numbers, sentence)
                return None if value is None or _uncommitted(after, False, value) else value
    if not last_number:
        return None
    part = _LATEX_THOUSANDS.sub(",", part.translate(_MINUS_SIGNS))  # as _numbers reads it: its positions
    numbers = _numbers(part)
    check = _trailing_check(part, numbers)
    if check is not None:
        part, numbers = part[:check], [n for n in numbers if n.end <= check]
    if not numbers or not numbers[-1].alone:
        return None
    last = numbers[-1]
    if last.value is None or _hedged(part[last.start:], last.value):
        return None
    return last.value


#: A sentence opening the last line that checks the answer: "Check: 5+1=6", "**Verification:** ...".
_CHECK_OPENING = re.compile(r"(?:^|(?<=[.?!\u3002])[^\S\n]+)(?:[*_#>]+[^\S\n]*)?"
                            r"(?i:check(?:ing)?|verif(?:y|ying|ication)|sanity\s+check)(?![A-Za-z])", re.MULTILINE)


def _trailing_check(text: str, numbers: list[_Number]) -> int | None:
    """Where a check that ends ``text`` starts, when the text's last number is the result of that
    check's equation ("So x = 5. Check: 5+1=6."; not "Checking: 5+1=6, so x = 5") and a number
    precedes it; else None. Why: with no marker, the last number was read, so the check's 6 was
    the answer and a right "x = 5" scored 0. Cutting the check pays nothing the text without it
    would not pay."""
    if not numbers:
        return None
    stripped = text.rstrip()
    m = _CHECK_OPENING.search(stripped, stripped.rfind("\n") + 1)
    last = numbers[-1]
    if (m is None or last.start < m.end() or numbers[0].end > m.start()
            or _EQUATION_BEFORE.search(text[max(0, last.start - 16):last.start]) is None):
        return None
    return m.start()


def after_last_box(text: str) -> str:
    """What follows the last closed box of ``text`` (``boxed_answers``' boxes), or "" without one."""
    if "box" in text:
        text = _BARE_BOX.sub(lambda m: "\\boxed{" + (m.group(1) or m.group(2)) + "}", text)
    closes = _box_closes(text)
    return text[max(end for _, end in closes.values()) + 1:] if closes else ""


def _after_marked(text: str) -> tuple[str, bool]:
    """What follows ``exact_match``'s answer where a box or a marker gives it: the text after the
    last box, or after the last marker (its answer included), else ""; and whether a box gave it."""
    if boxed_answers(text):
        return after_last_box(text), True
    text = joined_display(text)
    markers = list(_MARKER.finditer(text))
    return (text[markers[-1].end():] if markers else ""), False


def _uncommitted(after: str, boxed: bool, value: Fraction) -> bool:
    """Whether the text ``after`` a box (``boxed``) or an answer marker withdraws the answer ``value``:
    the sentence that gives it hedges (``_hedged``), or a verdict rejects the box ("\\boxed{5} is
    wrong", "$\\boxed{5}$ is not the answer": ``_NEGATION_AFTER``, which ``_numbers`` applies to a
    number after a marker). Only that sentence: the explanation after it ("The answer is 12. You
    could also split it into 2 groups of 6.") mentions other numbers beside hedge words, and the
    answer read is the first one anyway, so a later "Or 6." pays nothing a policy could gain."""
    first = _SENTENCE_END.split(after.split("\n", 1)[0], maxsplit=1)[0]
    return _hedged(first, value) or (boxed and _NEGATION_AFTER.match(after) is not None)


#: Words that weigh candidates: a number standing alone in a sentence holding one, the answer's own,
#: is a second candidate ("\\boxed{5}, though 6 is possible", "answer: 5 (or six)"), not a check
#: or an explanation ("\\boxed{5}. Check: 2+3=5", "The answer is 5. She had 2 apples and got 3
#: more."), nor a rejected one ("It could not be 6, since 6 > 5").
_HEDGE = re.compile(r"(?<![A-Za-z])(?i:or|maybe|perhaps|possibly|possible|alternatively|might|could|probably"
                    r"|likely|either|unsure|otherwise|though|although|unless)(?![A-Za-z])(?!\s+not(?![A-Za-z]))")
_SMALL_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen").split()
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
#: A number spelled in words, up to ninety-nine ("six", "twenty-five"; not "five hundred", whose
#: value this does not read, and "one" only after "or", as it is a pronoun elsewhere: "perhaps one
#: could check").
_NUMBER_WORD = re.compile(
    rf"(?<![\w-])(?i:(?P<tens>{'|'.join(_TENS_WORDS)})(?:[-\s](?P<unit>{'|'.join(_SMALL_WORDS[1:10])})(?![\w-]))?"
    rf"|(?P<small>{'|'.join(w for w in _SMALL_WORDS if w != 'one')})|(?<=[oO][rR]\s)(?P<one>one))"
    r"(?![\w-])(?!\s+(?i:hundred|thousand|million|billion))")


def _word_value(m: re.Match[str]) -> int:
    """The value of a ``_NUMBER_WORD`` match."""
    if m.group("tens"):
        unit = m.group("unit")
        return 10 * (2 + _TENS_WORDS.index(m.group("tens").lower())) + (
            _SMALL_WORDS.index(unit.lower()) if unit else 0)
    return 1 if m.group("one") else _SMALL_WORDS.index(m.group("small").lower())


def _hedged(text: str, value: Fraction) -> bool:
    """Whether ``text``, what holds or follows the answer ``value``, offers another number beside it:
    in a sentence holding a hedge word (``_HEDGE``), a number standing alone, or spelled in words,
    that is not ``value`` and no side of an equation ("6" in "5+1=6", not in "x = 6"). Why: "answer: 5
    (or six)" and "\\boxed{5}, though 6 is possible" paid 5 (a hedge read as its first candidate),
    while "answer: 5 or 6" scored 0."""
    for sentence in _SENTENCE_END.split(text):
        if _HEDGE.search(sentence) is None:
            continue
        if any(_word_value(m) != value for m in _NUMBER_WORD.finditer(sentence)):
            return True
        if any((n.alone or n.opens) and n.value != value
               and _EQUATION_BEFORE.search(sentence[max(0, n.start - 16):n.start]) is None
               for n in _numbers(sentence, line_start=False)):
            return True
    return False


#: Where the sentence that gives the answer ends: a ".", "?" or "!" before a space or the end (not
#: a decimal point, nor the "!" of a factorial "42!" or of LaTeX's thin space "\\!"), or "。".
_SENTENCE_END = re.compile(r"(?:[.?]|(?<![\d)}\]\\])!)(?=\s|$)|\u3002")


def _answered(numbers: list[_Number], text: str = "") -> Fraction | None:
    """The number an answer sentence gives: its first, which must stand alone, and which every
    other number standing alone there must equal, with no expression opened by a number after it.
    Why: "answer: 2 or 3" hedges, and reading its first number paid a policy that lists candidates;
    so does "answer: 4 or 5!" (an exclaimed 5 or 5 factorial: not 4 either way) or "2 or 3x".
    "answer: 2 (two)", "answer: 1/2 = 0.5", a check ("4, since 2*2 = 4") and a unit's power
    ("answer: 42 cm^2") still read. With the ``text`` the numbers were read from, an answer whose
    first number opens an expression is read as an equation (``_equation_result``)."""
    first = numbers[0]
    if not first.alone and text:
        return _equation_result(text, numbers)
    if not first.alone or any(n.opens or (n.alone and n.value != first.value) or (n.negated and n.value == first.value)
                              for n in numbers[1:]):
        return None
    return first.value


#: A plain "=" (not "<=", ">=", "!=", "==", "=>", "=/=", ":="): the end of an equation's left side.
_EQUALS = re.compile(r"(?<![<>!=/:\\])=(?![=>/])")


#: What a left side of arithmetic may spell in letters: a LaTeX command (``\\times``, ``\\frac``), an
#: "x" between numbers ("5 x 3"), and "x =" opening it (the letter the answer is given to).
_ARITHMETIC_SPELLING = re.compile(r"\\[A-Za-z]+|(?<=[\d\s)])x(?=\s*[\d(])|^\s*[A-Za-z]\s*=")
#: A letter left of the "=" besides those: an unknown ("x^2 = 4" states no answer 4) or a word.
_VARIABLE = re.compile(r"[A-Za-z]")


def _equation_result(text: str, numbers: list[_Number]) -> Fraction | None:
    """The number an answer written as an equation states after its last "=" ("3 + 4 = 7",
    "6 \\times 7 = 42": 7, 42), read as ``_answered`` reads that side, where the left side is arithmetic
    (no unknown nor word: "x^2 = 4" is no answer 4) whose every number is part of the expression
    (none stands alone, none is negated); else None. Why: "The answer
    is: 3 + 4 = 7" and ``\\boxed{6 \\times 7 = 42}`` scored 0 (their first number opens an expression),
    though "3 + 4 = 7" without a marker paid 7. A candidate beside the equation still gives none
    ("5, 3 + 4 = 7", "3 + 4 = 7 or 8"), and no number left of the "=" is ever read."""
    text = _LATEX_THOUSANDS.sub(",", text)  # as _numbers reads it: its positions
    equals = list(_EQUALS.finditer(text))
    last = equals[-1] if equals else None
    if last is None or _VARIABLE.search(_ARITHMETIC_SPELLING.sub(" ", text[:last.start()])):
        return None
    left = [n for n in numbers if n.end <= last.start()]
    right = [n for n in numbers if n.start >= last.end()]
    if not left or not right or any(n.alone or n.negated for n in left):
        return None
    return _answered(right)


def last_number(text: str) -> float | None:
    """``final_number`` as a float (None for none, or one too large for a float)."""
    value = final_number(text)
    try:
        return None if value is None else float(value)
    except OverflowError:
        return None


# --- helpers -----------------------------------------------------------------------------------


def _options(name: str, context: RewardContext, allowed: dict[str, Any]) -> dict[str, Any]:
    return merged(name, context.options.get(name), allowed)


def _answer(name: str, row: Mapping[str, Any], column: str, index: int) -> Any:
    if column not in row:
        present = ", ".join(sorted(map(str, row))) or "none"
        raise RewardError(
            f"reward {name!r} needs column {column!r} but dataset row {index} has only: {present}. "
            f"Fix: add a {column!r} column to the dataset, or set this reward's option "
            f"column = \"<your answer column>\""
        )
    return row[column]


def _required(name: str, opts: dict[str, Any], key: str, example: str) -> Any:
    if opts.get(key) is None:
        raise RewardError(f"reward {name!r} needs option {key!r}. Fix: set options.{key} = {example}")
    return opts[key]


# --- the rewards -------------------------------------------------------------------------------

#: What a think block made only of leaves empty: whitespace and the characters that print nothing
#: (zero-width spaces and joiners, the byte-order mark, the soft hyphen, bidi marks, the braille and
#: Hangul blanks; the control characters, the combining grapheme joiner, variation selectors, tag
#: characters and the other format characters that draw nothing alone). Why: "<think>\u200b</think>"
#: passed ``[^\s<]`` as text, an empty think paid; then so did "\u034f", "\ufe0f" or "\U000e0041".
_BLANK = (r"\s\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e"
          r"\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a"
          r"\U000e0000-\U000e007f\U000e0100-\U000e01ef")

#: An HTML character reference ("&nbsp;", "&#8203;", "&#x200B;", "&zwnj;"): a think block holding
#: only these and blanks is empty too. Why: a chat UI or a markdown renderer shows "&nbsp;" as a
#: blank, and "<think>&nbsp;</think>" paid as a think that says something. Any reference counts,
#: not only the blank ones: a think written only in escapes ("&#52;") reasons in no words either.
_ENTITY = r"&(?:#[xX]?[0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);"

#: The reasoning format ``regex_format``'s messages suggest: one ``<think>`` block at the very start
#: holding a character that prints and is no character reference, no other think tag anywhere
#: (linear time: no nested repetition; the blanks and references before the first such character
#: are whole units, so a failed match backs off through them without rescanning).
#: In a TOML file, write it as a literal string (pattern = '...'), as the messages quote it.
THINK_FORMAT = (rf"^<think>(?:[{_BLANK}]|{_ENTITY})*(?!{_ENTITY})[^{_BLANK}<]"
                r"(?:(?!</?think>).)*</think>(?:(?!</?think>).)*$")

#: The dataset column exact_match and numeric_match read the reference answer from by default.
ANSWER_COLUMN = "answer"

Scores = list[float | None]


def exact_match(completions: Sequence[Completion | str], context: RewardContext) -> Scores:
    opts = _options("exact_match", context, {"column": ANSWER_COLUMN, "extract": "auto", "case_sensitive": False})
    true_or_false("exact_match", opts, "case_sensitive", "write case_sensitive = false (no quotes)")
    if opts["extract"] not in ("auto", "last_line", "full"):
        raise RewardError(f"exact_match: unknown extract {opts['extract']!r}. Fix: use auto, last_line or full")
    out: Scores = []
    for i, completion in enumerate(completions):
        answer = _answer("exact_match", context.rows[i], opts["column"], i)
        if answer is None:
            out.append(None)
            continue
        gold = normalize_answer(answer_text(answer), opts["case_sensitive"])
        if not gold:
            out.append(None)
            continue
        text = answer_part(completion)
        if text is None:  # reasoning never closed: no answer was given
            out.append(0.0)
            continue
        if opts["extract"] == "auto" and len(
                {answer_key(normalize_answer(box, opts["case_sensitive"])) for box in boxed_answers(text)}) > 1:
            out.append(0.0)
            continue
        extracted, opens_line = _extracted(text, opts["extract"])
        if opens_line:  # a bullet before the answer, before its markdown is read: "- **5**" is 5
            extracted = _LIST_DASH.sub("", extracted.lstrip(), count=1)
            # math holds no list: "$- 5$" and "\\(- 5\\)" are -5, as numeric_match reads them
            opens_line = _MATH_OPEN.match(extracted) is None
        got = answer_key(normalize_answer(extracted, opts["case_sensitive"]), opens_line)
        if not isinstance(got, Fraction) and opts["extract"] == "auto" and _marked(text):
            got = _first_sentence_number(extracted, opens_line, opts["case_sensitive"], got)
        if got == answer_key(gold) and isinstance(got, Fraction) and opts["extract"] == "auto" \
                and _uncommitted(*_after_marked(text), value=got):  # "\\boxed{5}, though 6 is possible"
            got = ""
        out.append(1.0 if got == answer_key(gold) else 0.0)
    return out


def _marked(text: str) -> bool:
    """Whether ``exact_match``'s "auto" reads ``text``'s answer after a marker: no box, a marker."""
    return not boxed_answers(text) and _MARKER.search(joined_display(text)) is not None


def _first_sentence_number(extracted: str, opens_line: bool, case_sensitive: bool,
                           whole: str | Fraction) -> str | Fraction:
    """The answer a marker's line gives when the first sentence of that line is one number
    ("The final answer is $42$. I hope it is correct.": 42), as ``numeric_match`` reads that
    sentence; else ``whole``, the line's text. Why: the MATH (Minerva) format's closing line was
    the text "$42$. i hope it is correct.", so every right answer in that format scored 0. Only a
    number: a text answer's "." may be an abbreviation's ("answer: Dr. Smith")."""
    first = _SENTENCE_END.split(extracted, maxsplit=1)[0]
    if first == extracted:
        return whole
    key = answer_key(normalize_answer(first, case_sensitive), opens_line)
    return key if isinstance(key, Fraction) else whole


def answer_key(normalized: str, opens_line: bool = False) -> str | Fraction:
    """What ``exact_match`` compares: a normalised answer that is one number, written as
    ``numeric_match`` reads one (a signed integer or decimal, with thousands commas or an
    exponent, or a fraction of two integers, which ``normalize_answer`` writes "1/2" for
    ``\\frac{1}{2}``), is its exact value, so "0.5", ".5", "0.50", "1/2" and ``\\frac{1}{2}`` are
    one answer, as math-verify (TRL's ``accuracy_reward``) scores them; anything else, an
    expression or a number with more around it included, is its text. Its sign is read as
    ``numeric_match`` reads it: a typeset minus ("\u22125", "\u20135") is "-", and so is a "- "
    before the number unless the answer ``opens_line``, where it is a list's dash (which
    ``exact_match`` removes first: ``_LIST_DASH``). Why: ``\\boxed{- 5}`` was the text "- 5", never
    equal to -5. A letter's value is read as a whole answer is (``normalize_answer``): "x = \\(5\\)",
    "x = $5$" and "x = **5**" answer 5, where they were texts unequal to 5."""
    signed = _glued_minus(normalized.translate(_MINUS_SIGNS), opens_line)
    assigned = _ASSIGNED.fullmatch(signed.strip(" "))
    answer = _glued_minus(normalize_answer(assigned.group(1)).translate(_MINUS_SIGNS), False) if assigned \
        else signed.strip(" ")
    m = _TOKEN.fullmatch(_PERCENT.sub("", answer, count=1))
    if m is None:
        return " ".join(signed.split())
    value, known = _token_value(m)
    return value if known and value is not None else normalized


#: A markdown list's dash opening the answer's line ("- 5", "- Paris"): a bullet, not part of the
#: answer (nor a sign: "-5", glued, is no list item, and stays -5).
_LIST_DASH = re.compile(r"^-[ \t]+(?=\S)")
#: One letter given a value ("x = 5", "x = - 5"): the value is the answer, as ``numeric_match`` and
#: MATH's grader read it, where it is one number (else the whole is text: "y = 2x+3").
_ASSIGNED = re.compile(r"[^\W\d_]\s*=\s*([^=]+)")
#: A percent sign after a number ("50%", "50 %", ``50\\%``): the number is read, as ``numeric_match``
#: reads "42%" (and MATH's grader drops the sign): "50%" is "50", not "0.5".
_PERCENT = re.compile(r"(?<=[\d.])\s?%$")


def answer_text(value: Any) -> str:
    """The row's answer as written. Why: 🤗 datasets gives a float32 column (``Value("float32")``,
    a Parquet float32) to the rewards as the Python float TRL passes, 0.1 as 0.10000000149011612,
    which matched no completion's "0.1" in exact_match or numeric_match (every correct one scored
    0); a float that float32 holds exactly is read as float32's shortest digits, which are the
    ones written, and any other float as its own (``repr``)."""
    if not isinstance(value, float):
        return str(value)
    with np.errstate(over="ignore"):
        single = np.float32(value)
    return str(single) if math.isfinite(value) and float(single) == value else repr(float(value))


def _as_number(value: Any, column: str, index: int) -> Fraction:
    """The row's answer, exactly as written ("0.1" is 1/10, a 20-digit integer keeps its digits, "1/2"
    and "\\frac{1}{2}" are 1/2), its currency sign or percent sign dropped as a completion's are
    ("$5.00", "\\$18.90", "50%", "50\\%": 5, 18.9, 50)."""
    if isinstance(value, float):
        text = answer_text(value)
    elif isinstance(value, int):  # bool too: 1 or 0, as float(True) read it
        text = str(int(value))
    else:
        written = _GOLD_SIGNS.sub("", _LATEX_THOUSANDS.sub(",", unwrapped_math(str(value))))
        if "," in written and not _GROUPED.fullmatch(written.strip()):
            raise RewardError(
                f"numeric_match: dataset row {index} column {column!r} is {value!r}, whose comma does not group "
                "thousands (as in 1,000): a decimal comma or a list. Fix: write the number with a decimal point "
                "(1.5) or without the comma")
        text = written.replace(",", "").strip()
        fraction = read_fraction(written)  # "1/2", "\\frac{1}{2}": read as the completion's are
        if fraction is not None:
            return fraction
    try:
        number = float(text)
    except ValueError:
        raise RewardError(
            f"numeric_match: dataset row {index} column {column!r} is {value!r}, not a number. "
            "Fix: store a number in that column, or use the exact_match reward for text answers"
        ) from None
    if not math.isfinite(number):  # "nan", "inf", "1e999": no completion could match; every one scored 0
        raise RewardError(
            f"numeric_match: dataset row {index} column {column!r} is {value!r}, not a finite number. "
            "Fix: store the answer as a finite number, or null to skip the row"
        )
    try:
        return Fraction(text)
    except ValueError:  # "1_000" and other spellings float takes: its value
        return Fraction(number)


#: A currency sign before the row's answer or a percent sign after it ("$5", "\\$5", "50%", "50\\%"),
#: which a completion's number is read without. Why: a MATH-style gold "\\$18.90" or "20\\%" was an
#: error, though "\\boxed{\\$18.90}" and "20%" in a completion read 18.9 and 20.
_GOLD_SIGNS = re.compile(r"^\s*\\?\$\s*(?=[-+.\d])|(?<=[\d.])\s*\\?%\s*$")
#: A number whose commas group thousands: "1,000", "-1,234.5". Why: "1,5" (a decimal comma) was 15.
_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def _matches(got: Fraction, expected: Fraction, abs_tol: float, rel_tol: float) -> bool:
    """``math.isclose`` in exact arithmetic, except that an integer answer gets no relative slack."""
    diff = abs(got - expected)
    if diff <= Fraction(abs_tol):
        return True
    return expected.denominator != 1 and diff <= Fraction(rel_tol) * max(abs(got), abs(expected))


def numeric_match(completions: Sequence[Completion | str], context: RewardContext) -> Scores:
    opts = _options("numeric_match", context, {"column": ANSWER_COLUMN, "tolerance": 0.0, "rel_tolerance": 1e-9,
                                               "last_number": True})
    true_or_false("numeric_match", opts, "last_number",
                  "write last_number = false (no quotes) to pay only a boxed or marked answer")
    # a string was a ValueError traceback; a negative one matched nothing, silently scoring 0
    tol = positive_number("numeric_match", opts, "tolerance", 0.01, zero=True)
    rel_tol = positive_number("numeric_match", opts, "rel_tolerance", 1e-9, zero=True)
    out: Scores = []
    for i, completion in enumerate(completions):
        answer = _answer("numeric_match", context.rows[i], opts["column"], i)
        if answer is None:
            out.append(None)
            continue
        expected = _as_number(answer, opts["column"], i)
        got = final_number(completion_text(completion), opened=reasoning_open(completion),
                           last_number=opts["last_number"])
        out.append(1.0 if got is not None and _matches(got, expected, tol, rel_tol) else 0.0)
    return out


def regex_format(completions: Sequence[Completion | str], context: RewardContext) -> Scores:
    opts = _options("regex_format", context, {"pattern": None, "match": "search", "flags": "s"})
    pattern = _required("regex_format", opts, "pattern", f"'{THINK_FORMAT}'")
    if not isinstance(pattern, str):  # str(["x"]) is "['x']", a character class matching any x or '
        raise RewardError(f"regex_format: pattern must be a string, got {pattern!r}. "
                          f"Fix: e.g. pattern = '{THINK_FORMAT}'")
    if opts["match"] not in ("search", "fullmatch"):
        raise RewardError(f"regex_format: unknown match {opts['match']!r}. Fix: use search or fullmatch")
    if pattern == "" and opts["match"] == "search":  # found in every text: 1.0 for all, nothing to learn
        raise RewardError(f"regex_format: an empty pattern is found in every completion, so every one scores 1.0. "
                          f"Fix: write the format to reward, e.g. pattern = '{THINK_FORMAT}'")
    flags = 0
    for letter in str(opts["flags"]):
        if letter.lower() not in "imsx":
            raise RewardError(f"regex_format: unknown flag {letter!r}. Fix: use letters from 'imsx'")
        flags |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}[letter.lower()]
    try:
        regex = re.compile(str(pattern), flags)
    except re.error as exc:
        raise RewardError(
            f"regex_format: invalid pattern {pattern!r}: {exc}. Fix: correct options.pattern"
        ) from None
    if opts["match"] == "search" and always_found(regex):
        raise RewardError(f"regex_format: pattern {pattern!r} matches an empty text at the start or the end of any "
                          "text (no character it requires, no anchor or lookaround that could fail there), so search "
                          "finds it in every completion and every one scores 1.0. "
                          f"Fix: make the format required (e.g. pattern = '{THINK_FORMAT}'), or use match = "
                          "\"fullmatch\"")
    test = regex.search if opts["match"] == "search" else regex.fullmatch
    return [1.0 if test(completion_text(c)) else 0.0 for c in completions]


#: anchors an empty match at position 0 always satisfies (``^``, ``\\A``, ``^`` under MULTILINE)
_HELD_AT_START = frozenset({"AT_BEGINNING", "AT_BEGINNING_STRING", "AT_BEGINNING_LINE"})
#: anchors an empty match at the end of the text always satisfies (``$``, ``\\Z``, ``$`` under MULTILINE)
_HELD_AT_END = frozenset({"AT_END", "AT_END_STRING", "AT_END_LINE"})
_REPEATS = frozenset({"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"})


def always_found(regex: re.Pattern[str]) -> bool:
    """Whether ``regex.search`` succeeds on every text: it can match an empty text at position 0 of
    any string (``x*``, ``^``, ``(?:)``, ``(a|)``, a lookbehind that must not match, ``(?<!x)``) or at
    its end (``$``, ``\\Z``, ``a?$``, a lookahead that must not match, ``(?!x)``), in any one
    branch (``$|^``: ``^$`` mixes both and can fail). Why: such a ``regex_format`` rewards every
    completion alike; ``(?!x)`` and ``$|^`` were kept. Read from the parsed pattern, exact rather
    than probed (a positive lookaround, a back-reference or a conditional counts as able to fail);
    False where the parser is unavailable."""
    try:
        from re import _parser  # type: ignore[attr-defined]  # the compiler's own parse (3.11+)
    except ImportError:  # pragma: no cover - older or other Pythons
        return False
    try:
        parsed = _parser.parse(regex.pattern, regex.flags)
    except Exception:  # noqa: BLE001 - compiled already; a parser change must not fail the reward
        return False
    return _empty_held(parsed, _HELD_AT_START, -1) or _empty_held(parsed, _HELD_AT_END, 1)


def _empty_held(node: Any, anchors: frozenset[str], side: int) -> bool:
    """Whether the parsed pattern ``node`` (a SubPattern or its item list) matches an empty text at
    the start (``side`` -1, ``anchors`` those held there) or the end (``side`` 1) of every text:
    each item can be passed there without a character (an anchor held there, a repeat of at least
    0, a branch of which one can, a negative lookaround towards the outside of the text, which sees
    nothing there, around a pattern needing a character)."""
    for op, arg in getattr(node, "data", node):
        name = str(op)
        if name == "AT":
            held = str(arg) in anchors
        elif name == "BRANCH":
            held = any(_empty_held(branch, anchors, side) for branch in arg[1])
        elif name == "SUBPATTERN":
            held = _empty_held(arg[-1], anchors, side)
        elif name == "ATOMIC_GROUP":
            held = _empty_held(arg, anchors, side)
        elif name in _REPEATS:
            held = arg[0] == 0 or _empty_held(arg[2], anchors, side)
        elif name == "ASSERT_NOT":  # (?!x) at the end, (?<!x) at the start: nothing there to match x
            held = arg[0] == side and arg[1].getwidth()[0] > 0
        else:  # a character, a class, a positive lookaround, a back-reference: can fail
            held = False
        if not held:
            return False
    return True


def _written_chars(completion: Completion | str) -> int:
    """Characters the model wrote: every assistant turn of an episode, else the completion's text."""
    if isinstance(completion, Completion) and completion.messages is not None:
        return sum(len(m["content"]) for m in completion.messages
                   if m.get("role") == "assistant" and isinstance(m.get("content"), str))
    return len(completion_text(completion))


def length_penalty(completions: Sequence[Completion | str], context: RewardContext) -> Scores:
    opts = _options("length_penalty", context, {"target": None, "unit": "tokens", "scale": 1.0})
    target = _required("length_penalty", opts, "target", "128")
    # nan (every score nan) and inf (nothing ever penalised), which TOML writes, are no target either
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < math.inf:
        raise RewardError(f"length_penalty: target must be a finite number > 0, got {target!r}. "
                          "Fix: e.g. target = 128")
    if opts["unit"] not in ("tokens", "chars"):
        raise RewardError(f"length_penalty: unknown unit {opts['unit']!r}. Fix: use tokens or chars")
    scale = opts["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise RewardError(f"length_penalty: scale must be a finite number, got {scale!r}. Fix: e.g. scale = 1.0")
    scale = float(scale)
    out: Scores = []
    for i, completion in enumerate(completions):
        if opts["unit"] == "chars":
            length = _written_chars(completion)
        elif isinstance(completion, Completion):
            length = len(completion.completion_ids) if completion.mask is None else int(completion.mask.sum())
        elif context.completion_ids is not None:
            length = len(context.completion_ids[i])
        else:
            raise RewardError("length_penalty: unit 'tokens' needs token ids. Fix: pass Completion objects "
                              "or context.completion_ids, or use unit = \"chars\"")
        out.append(-scale * max(0.0, length - float(target)) / float(target))
    return out


def environment(completions: Sequence[Completion | str], context: RewardContext) -> Scores:
    """The environment's own reward for each episode (the sum of its per-turn rewards; 0 when it
    gave none); None (unscored) for an episode that ended in an environment error
    (``info["env_error"]``): its reward is unknown, and a 0 would train the model away from whatever
    made the environment fail. Not an episode (no ``[environment]``): an error, since it would score
    nothing."""
    out: Scores = []
    for completion in completions:
        if not isinstance(completion, Completion) or completion.mask is None:
            raise RewardError("environment: this completion is not an episode. Fix: configure an "
                              "[environment] (name = ...) or use another reward")
        if completion.info.get("env_error") is not None:
            out.append(None)
            continue
        value = completion.info.get("env_reward")
        out.append(0.0 if value is None else float(value))
    return out


BUILTIN_REWARDS: dict[str, tuple[Callable[[Sequence[Any], RewardContext], Scores], str]] = {
    "exact_match": (exact_match, "1 if the final answer equals the row's answer (normalised)"),
    "numeric_match": (numeric_match, "1 if the final number (boxed, after 'answer:', else the last) equals the row's "
                      "numeric answer"),
    "regex_format": (regex_format, "1 if the completion matches options.pattern"),
    "length_penalty": (length_penalty, "negative, proportional to the length beyond options.target"),
    "environment": (environment, "the [environment]'s own reward for each episode (0 when it gave none; unscored "
                    "when the environment failed)"),
}


# --- the plugin hooks --------------------------------------------------------------------------


#: The built-in rewards that read the row's answer from option ``column`` (default ``ANSWER_COLUMN``).
ANSWER_READERS = ("exact_match", "numeric_match")


def check_options(name: str, options: Mapping[str, Any], columns: Collection[str] | None = None) -> None:
    """Check a built-in reward's options when the run is set up (``RewardSet`` calls this): each
    reward checks its options before it looks at a completion, so it runs on none. A missing
    ``target`` or an unknown option is then one error before any model loads, not after the
    first rollout; so is an answer column that no row of the dataset (``columns``) has."""
    if name in BUILTIN_REWARDS and name != "environment":
        BUILTIN_REWARDS[name][0]([], RewardContext(rows=[], wanted=(name,), options={name: options},
                                                   completion_ids=[]))
    if name in ANSWER_READERS and columns is not None:
        column = (options or {}).get("column", ANSWER_COLUMN)
        if column not in columns:
            raise RewardError(
                f"reward {name!r} reads the answer from column {column!r}, which the dataset does not have "
                f"(its columns: {', '.join(map(str, columns)) or 'none'}). Fix: add a {column!r} column to the "
                f'dataset, or set this reward\'s option column = "<your answer column>"')


@hookimpl
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    for name, (_, summary) in BUILTIN_REWARDS.items():
        register(RewardSpec(name=name, summary=summary, distribution="polyrl"))


@hookimpl
def reward(
    prompts: Sequence[Prompt], completions: Sequence[Completion], context: RewardContext
) -> dict[str, Scores] | None:
    out: dict[str, Scores] = {}
    for name in (name for name in context.wanted if name in BUILTIN_REWARDS):
        t0 = time.perf_counter()
        scores = BUILTIN_REWARDS[name][0](completions, context)
        # each its own latency: one call answers them all, so the call's time named none of them
        timed = scores if isinstance(scores, RewardScores) else RewardScores(scores)
        timed.metrics["latency_s"] = time.perf_counter() - t0
        out[name] = timed
    return out or None
