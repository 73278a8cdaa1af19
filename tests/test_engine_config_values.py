"""An ``EngineConfig`` built in Python (backend authors, third-party code) gets the checks its config
keys get: a bad value is one ConfigError naming ``EngineConfig.<field>`` and the fix, before any
backend's ``load`` misreads it or fails deep inside torch, numpy or MLX."""

from __future__ import annotations

import math

import pytest

from polyrl.errors import ConfigError
from polyrl.types import EngineConfig

pytestmark = pytest.mark.faults


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"role": "training"}, "EngineConfig.role"),  # was loaded as a generator that could not train
    ({"role": "Train"}, "EngineConfig.role"),
    ({"role": None}, "EngineConfig.role"),
    ({"seed": -1}, "EngineConfig.seed"),  # numpy and MLX raised inside load; torch wrapped it to 2**64 - 1
    ({"seed": 2**64}, "EngineConfig.seed"),  # torch: "Overflow when unpacking long long"
    ({"seed": 2**32}, "EngineConfig.seed"),  # past train.seed's range (np.random.seed's)
    ({"seed": 1.5}, "EngineConfig.seed"),
    ({"seed": True}, "EngineConfig.seed"),
    ({"threads": 0}, "EngineConfig.threads"),  # torch.set_num_threads(0) raised inside load
    ({"threads": -2}, "EngineConfig.threads"),
    ({"max_length": 0}, "EngineConfig.max_length"),
    ({"max_length": -5}, "EngineConfig.max_length"),
    ({"collective_timeout_s": 0}, "EngineConfig.collective_timeout_s"),
    ({"collective_timeout_s": -1.0}, "EngineConfig.collective_timeout_s"),
    ({"collective_timeout_s": math.nan}, "EngineConfig.collective_timeout_s"),
    ({"trust_remote_code": "false"}, "EngineConfig.trust_remote_code"),  # a truthy string: ran the folder's code
    ({"gradient_checkpointing": "no"}, "EngineConfig.gradient_checkpointing"),
])
def test_a_bad_engine_config_value_names_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ConfigError) as err:
        EngineConfig(model="unused", **kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ") and "Fix:" in str(err.value)


@pytest.mark.parametrize("kwargs", [
    {"role": "generate"}, {"role": "train"}, {"role": "reference"},
    {"seed": 0}, {"seed": 2**32 - 1}, {"threads": None}, {"threads": 1}, {"max_length": 2},
    {"collective_timeout_s": 1}, {"collective_timeout_s": 0.5}, {"trust_remote_code": True},
    {"gradient_checkpointing": True}, {"dtype": "auto"},  # dtype names are the backend's (MAX takes "auto")
])
def test_every_value_a_config_file_allows_still_builds_an_engine_config(kwargs):
    config = EngineConfig(model="unused", **kwargs)
    assert all(getattr(config, key) == value for key, value in kwargs.items())
