"""Property-based tests (hypothesis): config parsing never fails with anything but ConfigError;
advantages stay finite and behave under permutation, NaN rewards and zero-variance groups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polyrl.algorithms.advantages import compute_advantages
from polyrl.config import RunConfig
from polyrl.errors import ConfigError

pytestmark = pytest.mark.faults

SECTIONS = ["model", "data", "rewards", "backends", "generation", "algorithm", "optimizer", "lora",
            "train", "eval", "trainer"]
KEYS = ["path", "task", "name", "function", "weight", "group_size", "max_new_tokens", "temperature",
        "top_p", "top_k", "stop", "lr", "betas", "rank", "steps", "prompts_per_step", "beta", "epsilon",
        "loss_aggregation", "num_iterations", "threads", "count", "options", "train", "generate",
        "max_grad_norm", "dtype", "seed", "trust_remote_code", "overlong_buffer", "dynamic_sampling"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["grpo", "dapo", "arithmetic", "numeric_match", "torch"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                      max_leaves=8)
tables = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)
configs = st.dictionaries(st.sampled_from(SECTIONS),
                          st.one_of(tables, st.lists(tables, max_size=2), scalars), max_size=7)


@settings(max_examples=300, deadline=None)
@given(configs)
def test_any_config_dict_parses_or_raises_config_error(data):
    try:
        RunConfig.from_dict(data)
    except ConfigError as exc:
        assert exc.field, exc  # every error names the field at fault
        assert "Traceback" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_valid_minimal_configs_with_random_generation_values(draw):
    temperature = draw.draw(st.floats(1e-5, 5))  # 0 with groups: test_config_trl_names; below 1e-5: refused
    group = draw.draw(st.integers(2, 64))
    config = RunConfig.from_dict({
        "model": {"path": "m"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}],
        "generation": {"temperature": temperature, "group_size": group},
    })
    assert config.generation.group_size == group and config.generation.temperature == temperature


groups = st.integers(2, 8).flatmap(lambda g: st.tuples(
    st.just(g), st.lists(st.lists(st.one_of(st.floats(-1e3, 1e3), st.just(float("nan"))),
                                  min_size=g, max_size=g), min_size=1, max_size=6)))
ESTIMATORS = [("group", "group"), ("group", "batch"), ("group", "none"), ("rloo", "none"),
              ("reinforce", "none")]


@settings(max_examples=200, deadline=None)
@given(groups, st.sampled_from(ESTIMATORS))
@example((3, [[683.6604389001839] * 3]), ("group", "group"))  # their float mean is not 683.66...
@example((3, [[683.6604389001839] * 3]), ("rloo", "none"))
def test_advantages_are_finite_with_nan_rewards_and_zero_variance(data, estimator):
    size, rows = data
    adv = compute_advantages(np.array(rows).reshape(-1), size, *estimator)
    assert adv.shape == (size * len(rows),) and np.isfinite(adv).all()
    for row, a in zip(rows, adv.reshape(-1, size)):
        finite = [r for r in row if not np.isnan(r)]
        if len(set(finite)) <= 1 and estimator[0] != "reinforce":
            np.testing.assert_allclose(a, 0.0, atol=1e-9)  # nothing to learn from this group


@settings(max_examples=150, deadline=None)
@given(groups, st.sampled_from(ESTIMATORS), st.randoms(use_true_random=False))
def test_permuting_samples_within_groups_permutes_their_advantages(data, estimator, rnd):
    size, rows = data
    rewards = np.array(rows)
    perms = [rnd.sample(range(size), size) for _ in rows]
    shuffled = np.array([row[p] for row, p in zip(rewards, perms)])
    a = compute_advantages(rewards.reshape(-1), size, *estimator).reshape(-1, size)
    b = compute_advantages(shuffled.reshape(-1), size, *estimator).reshape(-1, size)
    np.testing.assert_allclose(np.array([row[p] for row, p in zip(a, perms)]), b, rtol=1e-9, atol=1e-9)
