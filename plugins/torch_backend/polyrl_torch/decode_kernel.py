"""The sampler's own float32 matmul on AVX-512 and AVX2 CPUs (``decode_kernel.c``), built with the system's
C compiler on first use for the widest of the two this CPU has, and loaded with ctypes.

Why: a decode step multiplies a few tens of rows by every weight once, so it costs the weights'
streaming from memory plus the arithmetic. On the Intel Xeons here oneDNN's packed matmul does the
two in turns (``bench/decode_kernel_probe.py``); this kernel prefetches the next weights while it
multiplies, and reads each weight once for up to 8 rows (4 with AVX2), which shortened generation
there and on an AVX2-only AMD EPYC (README, Performance). Where it is not measured to win (AMD CPUs
with AVX-512, Intel CPUs without it), not buildable (no ``cc``, neither AVX-512F nor AVX2 with FMA)
or capped (an ISA limit such as ``ONEDNN_MAX_CPU_ISA`` in the environment), the sampler keeps
oneDNN's packed weights.

``backends.options.decode_kernel``: "auto" (the default: on for Intel CPUs with AVX-512 and AMD
CPUs with AVX2 but not AVX-512, where it builds and one torch thread samples), "on" (any AVX-512
or AVX2 CPU, any thread count: the kernel runs on one; an error where it cannot run) or "off".
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from polyrl.backend_kit.options import choice_option
from polyrl.errors import ConfigError
from polyrl.logs import get_logger

MODES = ("auto", "on", "off")
#: The name of each call in torch's profiler, followed by "ROWSxINxOUT" (``bench/step_profile.py``
#: reads it: a ctypes call is no torch op, so the profiler would not see the time otherwise).
PROFILER_NAME = "polyrl::decode_linear"
#: Compiler flags: nothing tuned to the build machine; no multiply-add the source does not write
#: (``decode_ops``' rotary embedding is torch's products and sums, bit for bit).
FLAGS = ("-O3", "-mfma", "-ffp-contract=off", "-shared", "-fPIC")
#: The instruction sets the C files are written for (``native_simd.h``), widest first: each one's
#: /proc/cpuinfo flags and compiler flag. A build packs panels of three vectors: 48 or 24 columns.
INSTRUCTION_SETS = {"avx512": (("avx512f", "fma"), "-mavx512f"), "avx2": (("avx2", "fma"), "-mavx2")}
SOURCE = Path(__file__).with_name("decode_kernel.c")
#: Every C file of the sampler's native library, built into one shared object: this matmul, the
#: shared-prompt attention (``decode_attention``) and a decode step's elementwise ops (``decode_ops``);
#: and the header they include (its text is in the build's cache key too).
SOURCES = (SOURCE, Path(__file__).with_name("decode_attention.c"), Path(__file__).with_name("decode_ops.c"))
HEADERS = (Path(__file__).with_name("native_exp.h"), Path(__file__).with_name("native_simd.h"))
#: Environment variables that cap the instruction set torch's kernels use; set, this kernel stays off too.
ISA_LIMIT_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def mode(options: Mapping[str, Any]) -> str:
    """``backends.options.decode_kernel``, checked."""
    return choice_option(options, "decode_kernel", "auto", MODES,
                         fix='write "auto" (Intel AVX-512 and AMD AVX2-only CPUs), "on" (any AVX-512 or AVX2 CPU) '
                             'or "off" (oneDNN\'s packed weights)')


def wanted(options: Mapping[str, Any], device: torch.device, dtype: torch.dtype, threads: int = 1) -> bool:
    """Whether the sampler's float32 linears run this kernel. "on" where it cannot run is a ConfigError
    naming the reason; "auto" quietly keeps oneDNN there, and where torch runs ``threads`` > 1 (the
    kernel has no threads of its own: oneDNN's would do the work sooner)."""
    chosen = mode(options)
    if chosen == "off" or device.type != "cpu" or dtype != torch.float32:
        return False
    reason = unavailable_reason()
    if chosen == "on" and reason is not None:
        raise ConfigError(f"decode_kernel = \"on\" cannot run here: {reason}", field="backends.options.decode_kernel",
                          fix='write "auto" or "off" (oneDNN\'s packed weights)')
    return reason is None and (chosen == "on" or (threads == 1 and measured_to_win()))


def measured_to_win() -> bool:
    """Whether "auto" takes the kernel on this CPU: the kinds where whole generate calls ran faster on it than
    on oneDNN's packed weights (README, Performance): Intel CPUs with AVX-512 (that build) and AMD CPUs whose
    widest build is AVX2 (an EPYC of that kind). AMD with AVX-512 and Intel without it are not measured:
    oneDNN there ("on" takes the kernel anyway)."""
    chosen, vendor = instruction_set(), cpu_vendor()
    return (chosen, vendor) in (("avx512", "GenuineIntel"), ("avx2", "AuthenticAMD"))


def _cpuinfo(field: str) -> str:
    """The first ``field`` line's value in /proc/cpuinfo ("" where there is none, or no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    line = next((line for line in text.splitlines() if line.startswith(field)), "")
    return line.partition(":")[2].strip()


def cpu_flags() -> set[str]:
    return set(_cpuinfo("flags").split())


def cpu_vendor() -> str:
    return _cpuinfo("vendor_id")


def instruction_set() -> str | None:
    """The widest of ``INSTRUCTION_SETS`` this CPU runs (None: neither)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    flags = cpu_flags()
    return next((name for name, (needs, _) in INSTRUCTION_SETS.items() if flags.issuperset(needs)), None)


def described() -> str:
    """One line for ``polyrl doctor``: the build the sampler's kernel uses here and whether "auto" takes it,
    or why it cannot run (builds the library where it can)."""
    if reason := unavailable_reason():
        return f"off ({reason})"
    auto = "on where one thread samples" if measured_to_win() else 'off (not measured on this CPU; "on" takes it)'
    return f'{instruction_set()} build; "auto": {auto}'


@functools.cache
def unavailable_reason() -> str | None:
    """Why the kernel cannot run in this process (None: it can; it is then built and loaded)."""
    if instruction_set() is None:
        return "this CPU has neither AVX-512F nor AVX2 with FMA"
    if capped := [name for name in ISA_LIMIT_VARIABLES if os.environ.get(name)]:
        return f"{capped[0]} caps the instruction set torch uses"
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build it"
    try:
        _library()
    except (OSError, subprocess.SubprocessError) as err:
        return f"building it failed: {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}"
    return None


@functools.cache
def _library() -> ctypes.CDLL:
    """The compiled kernels for ``instruction_set()``, from the user's cache (keyed by sources and flags)
    or built there now."""
    flags = _flags()
    source = b"".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
    key = hashlib.sha256(source + " ".join(flags).encode()).hexdigest()[:16]
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polyrl" / "kernels"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    built = folder / f"decode_kernel-{key}.so"
    if not built.exists():
        # built beside its final name, then renamed: a concurrent run never loads half a file
        handle, partial = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(handle)
        try:
            build(SOURCES, Path(partial))
            os.replace(partial, built)
        finally:
            Path(partial).unlink(missing_ok=True)
        get_logger().debug("decode_kernel_built", path=str(built))
    return load(built)


def _flags() -> tuple[str, ...]:
    chosen = instruction_set()
    if chosen is None:
        raise OSError("this CPU has neither AVX-512F nor AVX2 with FMA")
    return (*FLAGS, INSTRUCTION_SETS[chosen][1])


def build(sources: Sequence[Path], built: Path) -> None:
    """Compile ``sources`` (``SOURCES``, or another checkout's copies: ``bench/native_build_ab.py``) into
    the shared object ``built`` with this CPU's flags; OSError with the compiler's message where it fails."""
    try:
        subprocess.run([shutil.which("cc") or "cc", *_flags(), "-o", str(built), *map(str, sources)], check=True,
                       capture_output=True, text=True, timeout=120)
    except subprocess.CalledProcessError as err:
        raise OSError(err.stderr or f"cc exited with {err.returncode}") from None


def load(built: Path) -> ctypes.CDLL:
    """A built library, its matmul's and panel width's C signatures declared."""
    lib = ctypes.CDLL(str(built))
    lib.polyrl_decode_linear.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                         ctypes.c_int, ctypes.c_int]
    lib.polyrl_decode_linear.restype = None
    lib.polyrl_decode_panel.argtypes = []
    lib.polyrl_decode_panel.restype = ctypes.c_int
    return lib


@functools.cache
def panel() -> int:
    """Output columns per packed panel of the built kernel: three vectors of float32 (48 on AVX-512, 24 on
    AVX2; the C file's PANEL)."""
    return int(_library().polyrl_decode_panel())


def panels_of(weight: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``weight`` (``[out, in]``, as nn.Linear holds it) in the kernel's layout: ``[ceil(out / P), in, P]``
    float32 with P = ``panel()``, the last panel's missing columns zero. Written into ``into`` where it has
    that shape and may be written here (a weight update re-packs in place: one pass over the weights, no
    fresh memory to fault in; panels made under ``torch.inference_mode``, as generate makes them, are
    written in place only there)."""
    out_features, in_features = weight.shape
    width = panel()
    count, whole = -(-out_features // width), out_features // width
    shape = (count, in_features, width)
    writable = torch.is_inference_mode_enabled() or into is None or not into.is_inference()
    panels = into if into is not None and into.shape == shape and writable \
        else torch.empty(shape, dtype=torch.float32)
    weight = weight.detach()
    if whole:
        panels[:whole].copy_(weight[:whole * width].view(whole, width, in_features).transpose(1, 2))
    if whole < count:
        last = panels[whole]
        last.zero_()
        last[:, :out_features - whole * width].copy_(weight[whole * width:].t())
    return panels


def _multiply(rows: torch.Tensor, panels: torch.Tensor, out: torch.Tensor) -> None:
    _library().polyrl_decode_linear(rows.data_ptr(), panels.data_ptr(), out.data_ptr(), rows.shape[0],
                                    out.shape[1], rows.shape[1])


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for float32 ``x`` of any leading shape, ``panels = panels_of(weight)``."""
    width = panel()
    panel_count = -(-out_features // width)
    if panels.dim() != 3 or panels.shape[0] != panel_count or panels.shape[2] != width:
        raise ValueError(f"decode_kernel.linear: {out_features} outputs need panels [{panel_count}, in, {width}], "
                         f"not {tuple(panels.shape)}")
    in_features = panels.shape[1]
    count = math.prod(x.shape[:-1])
    rows = x.view(count, in_features) if x.is_contiguous() else x.reshape(count, in_features).contiguous()
    if rows.dtype != torch.float32 or panels.dtype != torch.float32:
        raise TypeError(f"decode_kernel multiplies float32 only, not {rows.dtype} by {panels.dtype}")
    out = torch.empty(rows.shape[0], out_features, dtype=torch.float32)
    if rows.shape[0]:
        if torch.autograd.profiler._is_profiler_enabled:  # seen by torch's profiler, with its shape in its name
            with torch.profiler.record_function(f"{PROFILER_NAME} {rows.shape[0]}x{in_features}x{out_features}"):
                _multiply(rows, panels, out)
        else:
            _multiply(rows, panels, out)
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], out_features)
