"""Fast BLAS for MLX's CPU backend on Linux, with nothing for the user to do.

The ``mlx[cpu]`` wheel for Linux links ``libmlx.so`` against a bundled *reference* BLAS
(``mlx_cpu.libs/libblas-*.so``): float32 matmuls run an order of magnitude slower than with
OpenBLAS on the same machine (``polyrl doctor`` measures the one in use). ``libmlx.so`` resolves
``cblas_sgemm`` & co. dynamically, and the dynamic linker looks in the global scope before a
library's own dependencies, so loading OpenBLAS with ``RTLD_GLOBAL`` *before* ``import mlx.core``
makes MLX use it. That is all this module does: :func:`preload` finds a ``libopenblas``
(``$POLYRL_OPENBLAS``, the Debian/Ubuntu ``libopenblas0-pthread`` locations, or the linker's
search path) and loads it; every module of this package that needs MLX imports it through
:mod:`polyrl_mlx._mx`, which calls :func:`preload` first.

:func:`blas_status` says, in one line, which BLAS MLX will call (``polyrl doctor`` shows it);
:func:`set_threads` sets OpenBLAS's thread count at run time.

Environment:
    POLYRL_OPENBLAS      path of the libopenblas to load (overrides the search)
    POLYRL_MLX_BLAS=0    do not preload anything (keep MLX's bundled reference BLAS)

Only float32 matmuls go through BLAS; bfloat16/float16/quantized matmuls on CPU do not, which is
why float32 is this backend's default dtype on CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import platform
import sys
import threading
import time

#: Where Debian/Ubuntu put OpenBLAS (``libopenblas0-pthread``, ``-openmp``, ``-serial``).
_CANDIDATES = (
    "/usr/lib/{arch}-linux-gnu/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/openblas-serial/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
    "/usr/lib/libopenblas.so.0",
    "/usr/local/lib/libopenblas.so.0",
    "/opt/conda/lib/libopenblas.so.0",
)
INSTALL_HINT = ("apt-get install libopenblas0-pthread (Debian/Ubuntu) "
                "or set POLYRL_OPENBLAS=/path/libopenblas.so.0")

_lock = threading.Lock()
_state: dict[str, object] = {"done": False, "path": None, "error": None, "late": False, "lib": None}


def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def find_openblas() -> str | None:
    """The path of a loadable libopenblas, or None."""
    env = os.environ.get("POLYRL_OPENBLAS")
    if env:
        return env
    arch = _arch()
    for pattern in _CANDIDATES:
        path = pattern.format(arch=arch)
        if os.path.exists(path):
            return path
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        hits = sorted(glob.glob(os.path.join(conda, "lib", "libopenblas*.so*")))
        if hits:
            return hits[0]
    name = ctypes.util.find_library("openblas")
    return name  # a soname such as "libopenblas.so.0" (dlopen searches for it) or None


def preload() -> str | None:
    """Load OpenBLAS into the global symbol scope (once); return its path or None.

    A no-op off Linux (macOS MLX uses Accelerate), when ``POLYRL_MLX_BLAS=0``, or when no
    OpenBLAS is installed (then :func:`blas_status` says how to get one).
    """
    with _lock:
        if _state["done"]:
            return _state["path"]  # type: ignore[return-value]
        _state["done"] = True
        if not sys.platform.startswith("linux") or os.environ.get("POLYRL_MLX_BLAS") == "0":
            return None
        _state["late"] = "mlx.core" in sys.modules
        path = find_openblas()
        if path is None:
            _state["error"] = "libopenblas not found"
            return None
        try:
            _state["lib"] = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            _state["error"] = f"could not load {path}: {exc}"
            return None
        _state["path"] = path
        return path


def set_threads(n: int | None) -> None:
    """Set OpenBLAS's thread count (no-op when OpenBLAS is not loaded or ``n`` is None)."""
    lib = _state.get("lib")
    if lib is None or n is None:
        return
    fn = getattr(lib, "openblas_set_num_threads", None)
    if fn is not None:
        fn(int(n))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def resolved_sgemm() -> str | None:
    """The file that provides ``cblas_sgemm`` in the global scope (what libmlx binds to)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        addr = ctypes.cast(libc.cblas_sgemm, ctypes.c_void_p).value
        libdl = ctypes.CDLL(ctypes.util.find_library("dl") or "libc.so.6")
        dladdr = libdl.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (AttributeError, OSError):
        return None
    return None


def measure_gflops(n: int = 512, repeats: int = 3) -> float:
    """float32 ``n x n`` matmul throughput of MLX on the CPU, in GFLOP/s (imports mlx)."""
    from polyrl_mlx._mx import mx

    with mx.stream(mx.cpu):
        a = mx.random.normal((n, n), key=mx.random.key(0))
        b = mx.random.normal((n, n), key=mx.random.key(1))
        mx.eval(a @ b)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            mx.eval(a @ b)
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def fast_blas_active() -> bool | None:
    """True when MLX's matmuls go to OpenBLAS, False when to the reference BLAS, None off Linux.

    Python loads extension modules with ``RTLD_NOW``, so ``libmlx`` binds ``cblas_*`` when
    ``mlx.core`` is imported: OpenBLAS loaded later is never used by that process.
    """
    if not sys.platform.startswith("linux"):
        return None
    preload()
    if _state["path"] is None or _state["late"]:
        return False
    provider = resolved_sgemm()
    return provider is not None and "openblas" in os.path.basename(provider).lower()


def blas_status() -> str:
    """One line for ``polyrl doctor``: which BLAS MLX uses on this machine and why."""
    if sys.platform == "darwin":
        return "Accelerate (macOS; MLX links it directly)"
    if not sys.platform.startswith("linux"):
        return f"unknown platform {sys.platform}: MLX's default BLAS"
    if os.environ.get("POLYRL_MLX_BLAS") == "0":
        return "reference BLAS (slow, ~20-45x): disabled by POLYRL_MLX_BLAS=0"
    preload()
    if _state["path"] is None:
        return f"reference BLAS (slow, ~20-45x): {_state['error']}. Fix: {INSTALL_HINT}"
    if _state["late"]:
        return ("reference BLAS (slow, ~20-45x): mlx.core was imported before polyrl_mlx could "
                "preload OpenBLAS. Fix: import polyrl_mlx._mx (or use polyrl) before mlx.core")
    provider = resolved_sgemm()
    if provider and "openblas" in os.path.basename(provider).lower():
        return f"OpenBLAS {provider}"
    return (f"reference BLAS (slow): {_state['path']} was loaded but cblas_sgemm resolves to "
            f"{provider or 'unknown'}. Fix: {INSTALL_HINT}")


__all__ = ["blas_status", "fast_blas_active", "find_openblas", "measure_gflops", "preload",
           "resolved_sgemm", "set_threads"]
