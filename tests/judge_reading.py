"""What the judge red-team tests share: the 0..10 scale, the cue rubric a small judge continues with
a bare number, and the verdict read from a reply beside a completion's own claims."""

from __future__ import annotations

from polyrl.rewards import judge_score
from polyrl.rewards.judge_claims import claimed_scores

SCALE = (0.0, 10.0)
#: the rubric of examples/rlaif.toml: a cue a small judge continues with a bare number
CUE_RUBRIC = "Rate the student's answer from 0 to 10.\nQuestion: {prompt}\nStudent's answer: {completion}\nRating (0-10):"


def read(reply: str, completion: str = "") -> float | None:
    """The judge reply's verdict on 0..10 beside a graded ``completion``'s claims."""
    return judge_score.read_score(reply, SCALE, claimed_scores(completion, SCALE)).score
