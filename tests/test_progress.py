"""The training progress bar: time left and seconds per step a person can read."""

from __future__ import annotations

import re

from polyrl.progress import step_progress


def test_the_bar_shows_time_left_and_short_steps_in_milliseconds(capsys):
    with step_progress(total=4, start=1) as advance:
        for _ in range(3):
            advance({"reward_mean": 0.5, "time/step": 0.0042})
    err = capsys.readouterr().err
    assert "4/4" in err and "s/step=0.0042" in err  # it read "s/step=0.0"
    assert re.search(r"left\s+\d+:\d\d:\d\d", err), err  # the estimated time left beside the elapsed time


def test_no_bar_when_not_wanted(capsys):
    with step_progress(total=2, enabled=False) as advance:
        advance({"reward_mean": 1.0})
    assert capsys.readouterr().err == ""
