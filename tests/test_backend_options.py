"""``[backends.options]``: each value a backend reads is typed and ranged, named as
``backends.options.<key>`` when wrong, and a key no backend of the run reads (a typo) is refused
with a "did you mean" before any engine loads, as every other section's unknown keys are."""

from __future__ import annotations

import math

import attrs
import pytest

from polyrl.backend_kit.options import bool_option, check_option_keys, float_option, int_option, text_option
from polyrl.config import RunConfig
from polyrl.engines import check_backend_options
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec

FIX = "the fix"


@pytest.mark.parametrize("value", ["no", "false", 0, 1, None, [True]])
def test_bool_option_refuses_anything_but_a_boolean(value):
    with pytest.raises(ConfigError, match=r"backends\.options\.flag") as err:
        bool_option({"flag": value}, "flag", True, fix=FIX)
    assert err.value.fix == FIX


@pytest.mark.parametrize(("value", "want"), [(None, 7), (0, 0), (12, 12)])
def test_int_option_reads_whole_numbers_in_range(value, want):
    options = {} if value is None else {"n": value}
    assert int_option(options, "n", 7, minimum=0, fix=FIX) == want


@pytest.mark.parametrize("value", ["abc", "5", 2.5, 2.0, True, -1, None, math.inf])
def test_int_option_refuses_non_integers_and_values_below_the_minimum(value):
    with pytest.raises(ConfigError, match=r"backends\.options\.n") as err:
        int_option({"n": value}, "n", 7, minimum=0, fix=FIX)
    assert err.value.field == "backends.options.n" and err.value.fix == FIX


@pytest.mark.parametrize(("value", "want"), [(None, 1.5), (0, 0.0), (3, 3.0), (2.5, 2.5)])
def test_float_option_reads_finite_numbers_in_range(value, want):
    options = {} if value is None else {"x": value}
    assert float_option(options, "x", 1.5, minimum=0, fix=FIX) == want


@pytest.mark.parametrize("value", ["1", -5, -0.1, math.nan, math.inf, True, None])
def test_float_option_refuses_non_numbers_non_finite_and_below_the_minimum(value):
    with pytest.raises(ConfigError, match=r"backends\.options\.x"):
        float_option({"x": value}, "x", 1.5, minimum=0, fix=FIX)


def test_text_option_reads_a_non_empty_string_or_the_default():
    assert text_option({}, "s", None, fix=FIX) is None
    assert text_option({"s": "eager"}, "s", "sdpa", fix=FIX) == "eager"
    for bad in ("", 3, ["x"], None):
        with pytest.raises(ConfigError, match=r"backends\.options\.s"):
            text_option({"s": bad}, "s", "sdpa", fix=FIX)


def test_check_option_keys_names_the_typo_and_the_close_match():
    check_option_keys({"packed_generation": False}, {"torch": ("packed_generation", "fsdp")})
    with pytest.raises(ConfigError) as err:
        check_option_keys({"packed_generaton": False}, {"torch": ("packed_generation", "fsdp")})
    assert err.value.field == "backends.options.packed_generaton"
    assert "did you mean 'packed_generation'" in str(err.value) and "torch" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_option_keys({"bogus": 1}, {"torch": ("fsdp",), "remote": ("servers",)})
    assert "fsdp" in str(err.value) and "servers" in str(err.value)  # no close match: the known keys


def _registry(**declared: tuple[str, ...] | None) -> Registry:
    """A registry with one extra backend per keyword (names not installed here), declaring those keys."""

    class Declares:
        @hookimpl
        def polyrl_register_backends(self, register):
            for name, keys in declared.items():
                register(BackendSpec(name=name, load=lambda config: None, options=keys))

    return Registry(get_plugin_manager(extra=[Declares()]))


def _config(**backends) -> RunConfig:
    base = RunConfig.from_dict({"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}]})
    return attrs.evolve(base, backends=attrs.evolve(base.backends, **backends))


def test_the_core_refuses_a_key_no_backend_of_the_run_reads():
    reg = _registry(t1=("fsdp",), r1=("servers",), other=None)
    check_backend_options(_config(train="t1", options={"fsdp": True}), reg)
    with pytest.raises(ConfigError, match=r"backends\.options\.bogus"):
        check_backend_options(_config(train="t1", options={"bogus": 1}), reg)
    # a key of the generate backend is fine; one only an unused backend reads is not
    check_backend_options(_config(train="t1", generate="r1", options={"servers": ["u"], "fsdp": True}), reg)
    with pytest.raises(ConfigError, match=r"backends\.options\.servers"):
        check_backend_options(_config(train="t1", options={"servers": ["u"]}), reg)
    # a backend that declares nothing could read anything: nothing is refused
    check_backend_options(_config(train="t1", generate="other", options={"bogus": 1}), reg)


def test_every_installed_backend_declares_its_option_keys():
    from polyrl.registry import get_registry

    reg = get_registry()
    for name in ("torch", "mlx", "max", "remote"):
        if name in reg.names():
            assert reg.spec(name).options, name
    assert {"servers", "timeout_s", "weight_push", "max_reply_bytes"} <= set(reg.spec("remote").options or ())
