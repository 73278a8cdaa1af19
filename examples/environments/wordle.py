"""A complete third-party environment: guess a five-letter word with per-letter feedback.

Use it from a config with ``[environment] name = "examples/environments/wordle.py:create"``, or ship
it in a package and register it (entry-point group ``polyrl.environments``) with the hook below.
"""

import re

from polyrl.agents import EnvironmentSpec, Observation
from polyrl.hookspecs import hookimpl


class Wordle:
    def __init__(self, options):
        self.max_guesses = int(options.get("max_guesses", 4))
        self.guesses = 0

    def reset(self, row):  # the first observation: the prompt, built from the dataset row
        self.secret = row["answer"].lower()
        return [{"role": "user", "content": "Guess my five-letter word. Answer with one word."}]

    def step(self, message):  # one assistant turn in, feedback (and a reward when solved) out
        self.guesses += 1
        words = re.findall(r"[a-z]{5}", message["content"].lower())
        if not words:
            return Observation([{"role": "user", "content": "Please answer with a five-letter word."}],
                               done=self.guesses >= self.max_guesses)
        guess = words[-1]
        if guess == self.secret:
            return Observation([], reward=1.0, done=True)
        marks = "".join(g.upper() if g == s else g if g in self.secret else "_" for g, s in zip(guess, self.secret))
        return Observation([{"role": "user", "content": f"{marks} (capital: right place; lowercase: elsewhere)"}],
                           reward=0.0, done=self.guesses >= self.max_guesses)


def create(options):
    return Wordle(options)


@hookimpl
def polyrl_register_environments(register):
    register(EnvironmentSpec(name="wordle", create=create, summary="guess a five-letter word"))
