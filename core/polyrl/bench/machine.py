"""What a benchmark records about the machine: figures are only comparable on the same CPU."""

from __future__ import annotations

import os
import platform
import subprocess

#: Environment variables that cap the instruction set torch's kernels use (ATen's own kernels,
#: oneDNN, MKL): set, they make an AVX-512 machine run its AVX2 code paths, so a figure taken
#: under them is not the machine's own and the report says so.
ISA_LIMIT_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                       "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")

#: lscpu flags that decide which matmul kernels run (and so the peak a figure is measured against).
SIMD_FLAG_PREFIXES = ("avx", "fma", "amx")


def isa_limits() -> dict[str, str]:
    """The instruction-set caps set in this process's environment (empty when none)."""
    return {name: os.environ[name] for name in ISA_LIMIT_VARIABLES if os.environ.get(name)}


def cpu_info(threads: int | None = None) -> dict[str, object]:
    """lscpu's model name, the CPU count, the SIMD flags (AVX/FMA/AMX families) and any
    instruction-set caps in force (plus ``threads`` when given)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        text = ""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    info: dict[str, object] = {"model": fields.get("Model name", platform.processor()).strip(),
                               "cpus": os.cpu_count(),
                               "avx512": sorted(f for f in flags if f.startswith("avx512")),
                               "simd_flags": sorted(f for f in flags if f.startswith(SIMD_FLAG_PREFIXES))}
    limits = isa_limits()
    if limits:
        info["isa_limits"] = limits
    if threads is not None:
        info["threads"] = threads
    return info
