"""The ``tiny-llama`` model alias, answered by the core for every backend.

Why here and not in a backend: the tiny model is built with numpy, safetensors and ``tokenizers``
(never torch), and MAX, MLX and torch all load it, so any install that can run a backend can
resolve it. Without ``tokenizers`` (a core-only install, which has no backend to run it anyway)
the alias is left unanswered and ``model.path`` reports an unknown alias.
"""

from __future__ import annotations

import importlib.util

from polyrl.hookspecs import hookimpl

TINY_ALIAS = "tiny-llama"


@hookimpl
def polyrl_resolve_model(name: str) -> str | None:
    """``tiny-llama``: a random tiny Llama built once in the polyrl cache."""
    if name != TINY_ALIAS or importlib.util.find_spec("tokenizers") is None:
        return None
    from polyrl.cache import cache_error, cache_subdir, default_cache_dir
    from polyrl.testing.tiny_model import build_tiny_llama

    models = default_cache_dir() / "models"
    if not (models / TINY_ALIAS).is_dir():  # to be built: the cache must take it (one error naming POLYRL_CACHE)
        models = cache_subdir("models")
    try:  # built before: read as it is, so a read-only cache holding it (shared, in an image) serves it
        return build_tiny_llama(models / TINY_ALIAS)
    except OSError as exc:  # an older build there that a read-only cache cannot take again
        raise cache_error(models / TINY_ALIAS, exc) from None
