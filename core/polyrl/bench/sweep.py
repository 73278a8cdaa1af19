"""The scaling sweep: polyrl and TRL side by side over completion length, group size and LoRA.

Why a sweep: one ``polyrl bench`` point says who is faster at one shape; where a lead shrinks
(long completions, big groups, LoRA) only shows across shapes. Every point runs at a *fixed*
completion length (``ignore_eos`` on polyrl's side, ``min_new_tokens`` on TRL's), so both sides do
the same work; the lengths each side really produced are recorded and a point where they differ
is flagged, never silently compared. Each side runs in its own child process (``workload``'s
children) with a timeout, so a slow or crashed side becomes a recorded outcome, not a lost sweep.
The report is saved after every point, and ``resume`` skips the points already in it.

``interleave`` runs a speed point's two sides at once, stepping in turn (``polyrl.bench.lockstep``,
as ``polyrl bench --interleave``): a shared machine whose speed drifts between one side's run and
the other's then slows both sides of a step pair alike, and each pair's ratio is recorded. Memory
points always run one side after the other: two long-completion processes resident together could
run the machine out of memory.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from polyrl import strict_json
from polyrl.bench.machine import cpu_info
from polyrl.bench.workload import (_trl, add_utilisation, backend_child, matmul_peak, run_interleaved,
                                   step_pair_ratios, trl_missing)
from polyrl.errors import ConfigError
from polyrl.registry import get_registry

#: The workload settings a resumed sweep must share with the report it extends.
SHARED_SETTINGS = ("model", "backend", "threads", "steps", "tokens_per_step")


@attrs.frozen
class SweepPoint:
    """One workload of the sweep: ``prompts`` x ``group_size`` completions of ``length`` tokens."""

    kind: str  # "scaling" (speed and memory) or "memory" (1 prompt x 2 completions, one step)
    length: int
    group_size: int
    prompts: int
    lora: bool
    steps: int

    @property
    def key(self) -> str:
        """The point's identity in a report (what ``resume`` matches on)."""
        return (f"{self.kind}/len{self.length}/g{self.group_size}/p{self.prompts}/"
                f"{'lora' if self.lora else 'full'}/s{self.steps}")


def prompts_for(tokens_per_step: int, group_size: int, length: int) -> int:
    """Prompts per step so a step samples about ``tokens_per_step`` tokens (at least one prompt):
    long completions get fewer prompts, keeping each point's cost of the same order."""
    return max(1, tokens_per_step // (group_size * length))


def plan_points(lengths: Sequence[int], groups: Sequence[int], lora_modes: Sequence[bool],
                tokens_per_step: int, steps: int, memory_lengths: Sequence[int] = ()) -> list[SweepPoint]:
    """Every length x group size x full/LoRA point, then the memory-only points (1 prompt x 2
    completions, one step, the first of ``lora_modes``) at ``memory_lengths``."""
    points = [SweepPoint("scaling", length, group, prompts_for(tokens_per_step, group, length), lora, steps)
              for lora in lora_modes for group in groups for length in lengths]
    points += [SweepPoint("memory", length, 2, 1, lora_modes[0], 1) for length in memory_lengths]
    return points


def length_check(requested: int, sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The completion lengths each side produced against the requested one: ``equal`` only when
    every side that ran produced exactly ``requested`` tokens for every completion."""
    seen = {name: r.get("completion_lens_seen") for name, r in sides.items() if "error" not in r}
    return {"requested": requested, **{f"{name}_lens": lens for name, lens in seen.items()},
            "equal": bool(seen) and all(lens == [requested] for lens in seen.values())}


def compare(point_result: dict[str, Any]) -> None:
    """The point's ``status`` and, where both sides ran and produced the requested lengths, the
    ratios of TRL to polyrl (above 1: polyrl is faster / TRL uses more memory)."""
    ours, trl = point_result["polyrl"], point_result.get("trl")
    failed = [f"{side} {r['error']}" for side, r in (("polyrl", ours), ("trl", trl or {})) if "error" in r]
    if failed:
        point_result["status"] = "; ".join(failed)
    elif not point_result["lengths"]["equal"]:
        point_result["status"] = "lengths differ: not compared"
    elif trl is None:
        point_result["status"] = "ok (polyrl only)"
    else:
        point_result["status"] = "ok"
        ratios = {key.removesuffix("_s"): trl[key] / ours[key]
                  for key in ("step_s", "generate_s", "train_step_s") if ours.get(key) and trl.get(key)}
        if ours.get("peak_rss_mb") and trl.get("peak_rss_mb"):
            ratios["peak_rss"] = trl["peak_rss_mb"] / ours["peak_rss_mb"]
        point_result["trl_over_polyrl"] = ratios
        if point_result.get("interleaved"):  # step i of each side ran back to back
            point_result["trl_over_polyrl_each_step"] = step_pair_ratios(trl, ours)


def run_point(point: SweepPoint, model_dir: str, backend: str, threads: int, peak_gflops: float, *,
              trl: bool, timeout: float | None, trl_timeout: float | None,
              interleave: bool = False) -> dict[str, Any]:
    """polyrl, then TRL (or both at once: ``interleave``), on one point, each in its own child process;
    both with MFU per phase.
    Both sides leave their first step out of the medians when there are more (lazy initialisation).
    ``interleave``: a speed point's sides run at once, stepping in turn (module docstring)."""
    started = time.time()
    paired = interleave and trl and point.kind == "scaling" and trl_missing() is None
    if paired:
        ours, theirs = run_interleaved([backend], model_dir, point.prompts, point.group_size, point.length, threads,
                                       point.steps, point.lora, ignore_eos=True, timeout=timeout,
                                       trl_timeout=trl_timeout)
        sides = {"polyrl": ours, "trl": theirs}
    else:
        ours = backend_child(backend, model_dir, point.prompts, point.group_size, point.length, threads,
                             point.steps, point.lora, ignore_eos=True, timeout=timeout)
        sides = {"polyrl": ours}
        if trl:
            sides["trl"] = _trl(model_dir, point.prompts, point.group_size, point.length, threads, point.steps,
                                point.lora, ignore_eos=True, timeout=trl_timeout)
    for r in sides.values():
        if "error" not in r:
            add_utilisation(r, model_dir, peak_gflops, point.lora)
    result: dict[str, Any] = {"key": point.key, "workload": attrs.asdict(point), **sides,
                              "lengths": length_check(point.length, sides), "interleaved": paired,
                              "wall_s": time.time() - started}
    compare(result)
    return result


def load_report(path: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The report a resumed sweep extends, or None when there is none; refuses one made with other
    settings (its points would not be comparable with the new ones)."""
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} is not a sweep report ({exc})", field="--output",
                          fix="give another --output, or delete the file to start afresh") from exc
    theirs = report.get("settings", {})
    for name in SHARED_SETTINGS:
        if theirs.get(name) != settings[name]:
            raise ConfigError(f"{path} was made with {name} = {theirs.get(name)!r}, not {settings[name]!r}",
                              field=f"--{name.replace('_', '-')}",
                              fix="resume with the same settings, or give another --output")
    return report


def save(report: dict[str, Any], path: Path) -> None:
    """Write the report atomically (a crash mid-write leaves the previous one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(strict_json.dumps(report, indent=2) + "\n")
    tmp.replace(path)


def run_sweep(model: str, points: Sequence[SweepPoint], output: str | Path, *, backend: str = "torch",
              threads: int = 1, tokens_per_step: int = 1024, steps: int = 2, trl: bool = True,
              timeout: float | None = None, trl_timeout: float | None = None, resume: bool = False,
              interleave: bool = False, command: Sequence[str] | None = None,
              on_point: Callable[[SweepPoint, str], None] | None = None) -> dict[str, Any]:
    """Run ``points`` (skipping those already in ``output`` with ``resume``), saving after each.
    ``on_point(point, "ran" | "skipped")`` follows progress; ``interleave``: see the module docstring."""
    path = Path(output)
    resolved = get_registry().resolve_model(model)
    settings = {"model": model, "backend": backend, "threads": threads, "steps": steps,
                "tokens_per_step": tokens_per_step, "trl": trl, "timeout_s": timeout, "trl_timeout_s": trl_timeout,
                "interleave": interleave}
    report = load_report(path, settings) if resume else None
    if report is None:
        if path.exists() and not resume:
            path.unlink()
        report = {"machine": strict_json.sanitize({**cpu_info(threads), "matmul_peak": matmul_peak(threads)}),
                  "settings": settings, "points": []}
    report["command"] = list(command if command is not None else sys.argv)
    done = {p["key"] for p in report["points"]}
    peak = float(report["machine"]["matmul_peak"]["peak_gflops"])
    for point in points:
        if point.key in done:
            if on_point:
                on_point(point, "skipped")
            continue
        result = run_point(point, resolved, backend, threads, peak, trl=trl, timeout=timeout, trl_timeout=trl_timeout,
                           interleave=interleave)
        report["points"].append(strict_json.sanitize(result))  # as the file holds it (NaN -> null)
        done.add(point.key)
        save(report, path)
        if on_point:
            on_point(point, "ran")
    save(report, path)
    return report
