"""What a benchmark records about the machine: figures are only comparable on the same CPU."""

from __future__ import annotations

import os
import platform
import subprocess


def cpu_info(threads: int | None = None) -> dict[str, object]:
    """lscpu's model name, the CPU count and the AVX-512 flags (plus ``threads`` when given)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        text = ""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    info: dict[str, object] = {"model": fields.get("Model name", platform.processor()).strip(),
                               "cpus": os.cpu_count(),
                               "avx512": sorted(f for f in flags if f.startswith("avx512"))}
    if threads is not None:
        info["threads"] = threads
    return info
