"""The max backend's ``[backends.options]``: every key it reads, typed and read before MAX loads.

Why one place: these values were read raw, so ``cache_dir = 5`` or ``max_overrides = "x"`` died
with a bare TypeError/ValueError, ``cache_dir = ""`` silently put MAX's compile cache (~80 MB) in
the working directory, and ``max_overrides = {devices = "gpu"}`` silently replaced the device,
length and encoding polyrl had checked. Each reader names ``backends.options.<key>`` and the fix.
Imports no ``max``: the plugin registers ``KEYS`` at every polyrl start.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Mapping
from typing import Any

from polyrl.backend_kit.options import int_option, table_option, text_option
from polyrl.errors import ConfigError

DEFAULT_MAX_BATCH_SIZE = 32
#: Every key this backend reads (the plugin declares them; the core refuses any other key).
KEYS = ("cache_dir", "max_batch_size", "max_model_path", "max_overrides", "quantization_encoding")
#: ``AutoModel`` arguments polyrl sets from its own checked settings -> the setting to use instead.
RESERVED_OVERRIDES = {
    "model_path": "model.path (or backends.options.max_model_path)",
    "weight_path": "backends.options.max_model_path",
    "devices": "model.device",
    "device_specs": "model.device",
    "max_batch_size": "backends.options.max_batch_size",
    "max_length": "model.max_length",
    "quantization_encoding": "backends.options.quantization_encoding (or model.dtype)",
    "trust_remote_code": "model.trust_remote_code",  # the one switch for a folder's own code, all backends
}


def max_batch_size(options: Mapping[str, Any]) -> int:
    """``backends.options.max_batch_size``: rows per MAX batch, a whole number >= 1."""
    return int_option(options, "max_batch_size", DEFAULT_MAX_BATCH_SIZE, minimum=1,
                      fix=f"give the rows MAX runs in one batch, e.g. {DEFAULT_MAX_BATCH_SIZE} (the "
                          "default; larger requests run in chunks)")


def cache_dir(options: Mapping[str, Any]) -> str | None:
    """``backends.options.cache_dir``: the compile cache folder, or None for the default."""
    return text_option(options, "cache_dir", None,
                       fix='give a folder path, e.g. cache_dir = "~/.cache/polyrl/max", or remove it')


def max_model_path(options: Mapping[str, Any]) -> str | None:
    """``backends.options.max_model_path``: what MAX loads instead of the model, or None."""
    return text_option(options, "max_model_path", None,
                       fix="give a .gguf file or a model folder MAX loads, or remove it")


def quantization_encoding(options: Mapping[str, Any]) -> str | None:
    """``backends.options.quantization_encoding``: an explicit MAX encoding, or None (from dtype)."""
    return text_option(options, "quantization_encoding", None,
                       fix='give a MAX encoding, e.g. "float32", "q4_k", or remove it to follow dtype')


@functools.cache
def override_keys() -> tuple[frozenset[str], frozenset[str]] | None:
    """(the flat keys MAX's ``AutoModel`` accepts, the whole sections it refuses), read from MAX:
    ``PipelineArgs``' fields, its sub-configs' fields that ``from_flat_kwargs`` routes into them,
    ``draft_``-prefixed model fields, and ``AutoModel``'s own keywords. None where this MAX no
    longer has those names: its own error then stands. Imports MAX (seconds): call it when MAX loads."""
    from polyrl_max.engine import restore_child_environment

    try:
        from max.pipelines.lib import auto_model, pipeline_args as pa

        keys = set(pa.PipelineArgs.model_fields)
        for _, section in pa._FLAT_KWARG_SUBTREES:
            keys |= set(section.model_fields) - pa._SHARED_CONFIG_FIELDS - pa._SECTION_NAMES
        keys |= {f"draft_{name}" for name in pa.MAXModelConfig.model_fields}
        signature = inspect.signature(auto_model.AutoModel.__init__).parameters.values()
        keys |= {p.name for p in signature if p.kind is p.KEYWORD_ONLY}
        whole = frozenset(auto_model._CLOBBERED_SECTIONS)
    except (ImportError, AttributeError, TypeError):
        return None
    finally:
        restore_child_environment()  # importing MAX set variables that would misdirect child Pythons
    return frozenset(keys - whole), whole


def max_overrides(options: Mapping[str, Any], *, known: bool = False) -> dict[str, Any]:
    """``backends.options.max_overrides``: extra flat ``PipelineArgs`` fields for ``AutoModel``;
    one that polyrl sets itself is refused with the setting that owns it. ``known``: also refuse a
    key MAX does not take (``override_keys``; imports MAX), naming it instead of MAX's ``model``."""
    overrides = table_option(options, "max_overrides",
                             fix="write a table of MAX PipelineArgs fields, e.g. "
                                 "max_overrides = {enable_prefix_caching = false}")
    for key in sorted(overrides):
        if key in RESERVED_OVERRIDES:
            raise ConfigError(f"backends.options.max_overrides may not set {key!r}: polyrl sets it "
                              "from its own checked settings", field="backends.options.max_overrides",
                              fix=f"remove {key!r} from max_overrides and set {RESERVED_OVERRIDES[key]}")
    accepted = override_keys() if known and overrides else None
    if accepted is not None:
        valid, whole = accepted
        for key in sorted(overrides):
            if key in whole:
                raise ConfigError(f"MAX's AutoModel takes no whole {key!r} section",
                                  field=f"backends.options.max_overrides.{key}",
                                  fix="write that section's fields flat in max_overrides, e.g. "
                                      "max_overrides = {enable_prefix_caching = false}")
            if key not in valid:
                close = difflib.get_close_matches(key, sorted(valid - set(RESERVED_OVERRIDES)), n=1)
                raise ConfigError(f"unknown key {key!r}: MAX {_max_version()}'s PipelineArgs has no such field",
                                  field=f"backends.options.max_overrides.{key}",
                                  fix=f"did you mean {close[0]!r}?" if close else
                                  f"use a flat PipelineArgs field ({len(valid)} in this MAX), e.g. "
                                  "enable_prefix_caching, enable_chunked_prefill, device_memory_utilization")
    return overrides


def _max_version() -> str:
    from polyrl.backend_kit.versions import installed_version

    return installed_version("max") or ""


def check(options: Mapping[str, Any]) -> None:
    """Check every key at once, before anything loads or compiles (a ConfigError names the key;
    max_overrides' keys against MAX's own, so this imports MAX when there are any)."""
    max_batch_size(options)
    cache_dir(options)
    max_model_path(options)
    quantization_encoding(options)
    max_overrides(options, known=True)
