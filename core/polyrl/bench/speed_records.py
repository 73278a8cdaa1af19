"""Which backend generates fastest on this machine: measured by ``polyrl bench``, read by ``auto``.

``backends.generate = "auto"`` should not guess from a rule of thumb (which backend samples
fastest depends on the model, the CPU or GPU and the thread count), so every ``polyrl bench`` run stores
each backend's generation tokens/s for its model under this machine's key in
``<cache>/generate_speed.json`` (``$POLYRL_CACHE`` or ``~/.cache/polyrl``). ``auto`` then picks
the fastest usable backend measured for the run's model; with no measurement it keeps generation
in the train backend (no weight push, no second copy of the model).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from polyrl.cache import cache_error, default_cache_dir, make_writable_folder

FILE = "generate_speed.json"


def machine_key() -> str:
    """CPU model, core count and visible accelerators: what decides which backend is fastest."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"{platform.system()}-{platform.machine()}|{cpu}|{os.cpu_count()} cpus|gpus={gpus or 'default'}"


def _path(cache: Path | None) -> Path:
    return (cache or default_cache_dir()) / FILE


def check_writable(cache: Path | None = None) -> None:
    """Make the records' folder and write a file there, or raise the ConfigError naming
    POLYRL_CACHE (``cache`` None): a bench found out only after minutes of measuring."""
    folder = _path(cache).parent
    try:
        make_writable_folder(folder)
    except OSError as exc:
        if cache is None:
            raise cache_error(folder, exc) from None
        raise


def load(cache: Path | None = None) -> dict[str, Any]:
    path = _path(cache)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(model: str, results: list[dict[str, Any]], threads: int, cache: Path | None = None) -> Path:
    """Store each result's generation tokens/s for ``model`` on this machine (atomic rewrite)."""
    data = load(cache)
    per_model = data.setdefault(machine_key(), {}).setdefault(model, {})
    for r in results:
        speed = r.get("generate_tokens_per_s")
        if "error" in r or not isinstance(speed, (int, float)) or speed != speed or speed <= 0:
            continue
        per_model[r["backend"]] = {"tokens_per_s": float(speed), "threads": threads,
                                   "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = _path(cache)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError as exc:
        if cache is None:  # POLYRL_CACHE (or the default) is a file or read-only: one error line naming it
            raise cache_error(path.parent, exc) from None
        raise
    return path


def fastest(model: str, candidates: list[str], cache: Path | None = None) -> tuple[str, dict[str, float]] | None:
    """The fastest of ``candidates`` measured for ``model`` here, with every candidate's tokens/s."""
    measured = load(cache).get(machine_key(), {}).get(model, {})
    speeds = {name: float(measured[name]["tokens_per_s"]) for name in candidates if name in measured}
    if not speeds:
        return None
    return max(speeds, key=lambda name: speeds[name]), speeds
