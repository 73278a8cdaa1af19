"""Keep freed host memory for reuse instead of handing it back to the OS (glibc only).

Why: glibc serves every allocation above its mmap threshold (which adapts up to 32 MB, and many
activations, logits blocks and weight casts of a training step are larger) with a fresh ``mmap``
and unmaps it on free; blocks it does keep are trimmed from the top of the heap. The next step then
gets new pages, and the kernel zeroes and maps them one 4 KiB fault at a time. A SmolLM2 training
step took about half a million page faults (two gigabytes of pages mapped anew); with freed memory
kept, none after the first step, and the step runs faster by the time those faults took
(``bench/results`` and README, Performance). PyTorch's CPU tuning guide gives the same advice in
the form of jemalloc or tcmalloc; ``mallopt`` does it without preloading another allocator.

Cost: resident memory stays near its high-water mark, and reuse fragments the heap, which raises
that mark (SmolLM2 training at 1,024 tokens per completion +6 %, at 2,048 +15 %).
``backends.options.retain_freed_memory = false`` keeps glibc's defaults.
The setting is per process and made once, by the first CPU torch engine that loads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from collections.abc import Mapping
from typing import Any

from polyrl.backend_kit.options import bool_option
from polyrl.logs import get_logger

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks from this size up still get their own mapping, returned on free: they are few, and
#: kept in the heap they fragment it (peak resident memory at 1,024 tokens per completion: +13 %
#: with no mapping at all, +6 % with this threshold).
MMAP_FROM_BYTES = 256 << 20
#: Free memory at the heap's top is returned to the OS only beyond this (``mallopt`` takes an
#: int, so at most 2 GiB; glibc's default is 128 KiB).
TRIM_FROM_BYTES = 2**31 - 1

_applied: bool | None = None


def retain_requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.retain_freed_memory`` (default on), checked to be a boolean."""
    return bool_option(options, "retain_freed_memory", True,
                       fix="write retain_freed_memory = false to keep the C library's defaults (or remove it)")


def retain_freed_memory() -> bool:
    """Ask glibc to serve blocks below ``MMAP_FROM_BYTES`` from its heap and to trim the heap only
    past ``TRIM_FROM_BYTES`` free; True when it took effect. A no-op (False) with another C library
    (macOS, musl), where the defaults stay."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # large blocks come from the heap and are reused; the heap is trimmed only past 2 GiB free
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_FROM_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_FROM_BYTES))
    get_logger("polyrl.torch").debug("host memory", retain_freed=_applied)
    return _applied
