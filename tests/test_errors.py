"""ConfigError's one line names its field: the ``<field>: `` prefix is left out only when the
message already opens with the field, never because the field's name occurs somewhere in it."""

from __future__ import annotations

import pytest

from polyrl.data import load_dataset
from polyrl.errors import CollectiveTimeout, ConfigError


@pytest.mark.parametrize(("message", "field"), [
    ("must name a schedule, not optimizer.lr_schedule", "lr"),  # inside a longer name
    ("the dataset differs from the one the checkpoint was trained on", "data"),  # inside a word
    ("give at most one of data.eval_path and data.eval_split", "data.eval_split"),  # mid-sentence
    ("cuda requested but torch sees no CUDA device", "device"),
    ("lr_schedule is unknown", "lr"),  # opens with a longer name, not the field
])
def test_the_field_is_named_first_even_when_the_message_mentions_it(message, field):
    assert str(ConfigError(message, field=field, fix="x")) == f"{field}: {message}. Fix: x"


@pytest.mark.parametrize("message", ["lr must be > 0, got -1", "lr: must be > 0, got -1", "lr"])
def test_a_message_opening_with_its_field_is_not_prefixed_twice(message):
    assert str(ConfigError(message, field="lr")) == message


def test_placing_a_field_under_a_section_names_the_full_path_first():
    exc = ConfigError("unknown device 'xpu'", field="device").under("model")
    assert str(exc) == "model.device: unknown device 'xpu'"
    assert str(ConfigError("no field here")) == "no field here"


def test_real_errors_name_their_field():
    with pytest.raises(ConfigError) as info:
        load_dataset(task="arithmetic", split="validation")
    assert str(info.value).startswith("split: unknown split 'validation'. Fix: use one of")
    timeout = CollectiveTimeout("all_gather", 10.0, rank=0, world_size=2).during("step 0")
    assert str(timeout).startswith("train.collective_timeout_s: rank 0 of 2 waited 10 s in all_gather during step 0 ")
