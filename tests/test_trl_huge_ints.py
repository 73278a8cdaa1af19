"""A ``trl.GRPOConfig`` field holding an int past Python's digit limit (``fp16=10**5000``) is one
ConfigError naming the field: its ``repr`` raises ``ValueError``, and ``float()`` of it overflows,
which were tracebacks from ``GRPOConfig.from_trl``."""

from __future__ import annotations

import pytest

from polyrl import api
from polyrl.errors import ConfigError
from polyrl.validators import shown

trl = pytest.importorskip("trl")
HUGE = 10**5000


@pytest.mark.parametrize(("field", "trl_field", "more"), [
    ("fp16", "fp16", {}), ("learning_rate", "learning_rate", {}), ("temperature", "temperature", {}),
    ("beta", "beta", {}), ("adam_beta1", "adam_beta1", {}),  # float() of it overflowed in the [0, 1) check
    ("num_train_epochs", "num_train_epochs", {"max_steps": -1}),  # and in the epochs' check
])
def test_a_huge_int_in_a_trl_field_is_one_error_naming_it(field, trl_field, more):
    config = trl.GRPOConfig(use_cpu=True, **{field: HUGE}, **more)
    with pytest.raises(ConfigError) as info:
        api.run_config(api.grpo, policy=api.Agent("tiny-llama"), prompts=["a", "b"], grpo_config=config)
    assert info.value.field == f"grpo_config.{trl_field}", info.value
    assert len(str(info.value)) < 1000


def test_shown_cuts_an_int_it_cannot_print():
    assert shown(HUGE) == "an integer of about 5001 digits, more than the 4300 Python reads"
    assert shown([-HUGE]).startswith("a list holding an integer of too many digits")
    assert shown(10**100, limit=20) == repr(10**100)[:17] + "..."
