"""backends.options.max_overrides keys checked against MAX's own PipelineArgs (the installed `max`),
so a typo names polyrl's field and the close key, not MAX's "Unmatched kwargs" blamed on `model`."""

from __future__ import annotations

import pytest

from polyrl.engine import Engine, EngineConfig
from polyrl.errors import ConfigError
from polyrl.registry import get_registry


def _max() -> None:
    status = get_registry().status("max")
    if not status.available:
        pytest.skip(f"backend 'max' not usable here: {status.reason}")


def test_the_accepted_keys_are_read_from_max():
    _max()
    from max.pipelines.lib.pipeline_args import PipelineArgs
    from polyrl_max.options import override_keys

    accepted = override_keys()
    assert accepted is not None
    valid, whole = accepted
    assert set(PipelineArgs.model_fields) - whole <= valid  # every top-level field, then the routed ones
    assert {"enable_prefix_caching", "enable_chunked_prefill", "device_graph_capture"} <= valid
    assert "kv_cache" in whole and "kv_cache" not in valid


@pytest.mark.parametrize(("key", "says"), [
    ("enable_prefix_cachin", "did you mean 'enable_prefix_caching'?"),
    ("zzz_not_a_field", "use a flat PipelineArgs field"),
])
def test_an_unknown_override_names_its_field_and_the_fix(key, says):
    _max()
    from polyrl_max.options import max_overrides

    with pytest.raises(ConfigError) as err:
        max_overrides({"max_overrides": {"enable_chunked_prefill": False, key: False}}, known=True)
    assert err.value.field == f"backends.options.max_overrides.{key}"
    assert says in str(err.value) and "PipelineArgs has no such field" in str(err.value)


def test_a_whole_section_is_refused_with_its_flat_form():
    _max()
    from polyrl_max.options import max_overrides

    with pytest.raises(ConfigError) as err:
        max_overrides({"max_overrides": {"kv_cache": {"enable_prefix_caching": False}}}, known=True)
    assert err.value.field == "backends.options.max_overrides.kv_cache" and "flat" in err.value.fix


def test_known_overrides_pass():
    _max()
    from polyrl_max.options import max_overrides

    table = {"enable_prefix_caching": False, "device_graph_capture": False, "draft_max_length": 8}
    assert max_overrides({"max_overrides": table}, known=True) == table


def test_the_engine_refuses_a_typo_before_max_loads(tiny_model_dir, tmp_path, monkeypatch):
    """It was MAX's ValueError, re-raised as `model: MAX could not load ...: Unmatched kwargs`."""
    _max()
    from max.pipelines.lib import auto_model

    def no_load(*args, **kwargs):
        raise AssertionError("MAX's AutoModel was built before the overrides were checked")

    monkeypatch.setattr(auto_model, "AutoModel", no_load)
    monkeypatch.setattr("max.pipelines.AutoModel", no_load)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        Engine(get_registry(), "max", EngineConfig(model=tiny_model_dir, role="generate", threads=1,
                                                    options={"max_overrides": {"enable_prefix_cachin": False}}))
    assert err.value.field == "backends.options.max_overrides.enable_prefix_cachin"
    assert "enable_prefix_caching" in str(err.value)
