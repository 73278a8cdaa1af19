"""The builds of the sampler's C library (``polyrl_torch.decode_kernel``) this CPU runs, as a fixture: the
tests of the kernels run once per build, so an AVX-512 machine also checks the AVX2 build that AVX2-only
CPUs load (half-width vectors, 24-column panels, tiles of at most 4 rows)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from polyrl_torch import decode_attention, decode_kernel, decode_ops


def runnable() -> list[str]:
    """The instruction sets of ``decode_kernel.INSTRUCTION_SETS`` this CPU runs, widest first."""
    widest = decode_kernel.instruction_set()
    names = list(decode_kernel.INSTRUCTION_SETS)
    return [] if widest is None else names[names.index(widest):]


def params() -> list[Any]:
    """``parametrize("native_build", params(), indirect=True)``: one run per build, or one skip naming why."""
    return [pytest.param(name, id=name) for name in runnable()] or [pytest.param(None, marks=pytest.mark.skip(
        reason="polyrl's C kernels cannot run here: this CPU has neither AVX-512F nor AVX2 with FMA"))]


def _forget_builds() -> None:
    for cached in (decode_kernel._library, decode_kernel.unavailable_reason, decode_kernel.panel, decode_ops._functions,
                   decode_attention._function):
        cached.cache_clear()


def built_for(name: str) -> Iterator[str]:
    """The library built for ``name`` while a test runs (the widest build again after it): the body of
    conftest's ``native_build`` fixture, which patches ``decode_kernel.instruction_set`` to ``name``."""
    _forget_builds()
    try:
        if reason := decode_kernel.unavailable_reason():
            pytest.skip(f"polyrl's C kernels cannot run here: {reason}")
        assert decode_kernel.panel() == {"avx512": 48, "avx2": 24}[name]
        yield name
    finally:
        _forget_builds()
