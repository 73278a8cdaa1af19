"""Presenting a ``polyrl bench`` report: a PNG chart of each step's phases and a terminal table."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

#: Phases of one GRPO step, in the order they run (seconds keys in a bench result).
#: ``forward_backward``: a trainer that evaluates loss and gradient as one (mlx-lm-lora's).
STEP_PHASES = ("generate", "scoring", "forward", "backward", "forward_backward", "grad_sync", "optimizer")


def step_phases(result: dict[str, Any]) -> dict[str, float]:
    """Seconds per phase of one step; ``other`` is what the step took beyond the named phases."""
    phases = {p: float(result[f"{p}_s"]) for p in STEP_PHASES
              if isinstance(result.get(f"{p}_s"), (int, float)) and result[f"{p}_s"] == result[f"{p}_s"]}
    step = result.get("step_s")
    if isinstance(step, (int, float)):
        phases["other"] = max(0.0, float(step) - sum(phases.values()))
    return phases


def write_chart(report: dict[str, Any], path: Path) -> str | None:
    """Stacked bars of seconds per step by phase, one bar per backend; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in report["results"] if "error" not in r and r.get("step_s")]
    if not rows:
        return None
    names = [r["backend"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * len(rows)))
    left = [0.0] * len(rows)
    for phase in (*STEP_PHASES, "other"):
        widths = [step_phases(r).get(phase, 0.0) for r in rows]
        if any(widths):
            ax.barh(names, widths, left=left, label=phase)
            left = [a + b for a, b in zip(left, widths)]
    for y, r in enumerate(rows):
        note = f"{r['step_s']:.1f} s"
        if r.get("speedup_vs_trl"):
            note += f"  ({r['speedup_vs_trl']:.2f}x TRL)"
        if r.get("speedup_vs_mlx_lm_lora"):
            note += f"  ({r['speedup_vs_mlx_lm_lora']:.2f}x mlx-lm-lora)"
        ax.text(left[y], y, " " + note, va="center")
    w, m = report["workload"], report["machine"]
    ax.set_xlabel("seconds per GRPO step")
    few_shot = f" ({w['few_shot']}-shot)" if w.get("few_shot") else ""
    ax.set_title(f"{Path(str(w['model'])).name}: {w['prompts']} prompts{few_shot} x {w['group_size']} x "
                 f"{w['max_new_tokens']} tokens, {'LoRA' if w['lora'] else 'full'}, {m['threads']} thread(s)",
                 fontsize=9)
    ax.set_xlim(0, max(left) * 1.35)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


#: the longest piece of one side's error the all-failed line quotes
_ERROR_QUOTED = 200


def every_side_failed(report: dict[str, Any], output: str | None) -> str | None:
    """The ``error:`` line's text when every side of ``report`` failed (each result an ``error``),
    naming each side's last error line and where the report is; None when any side measured.
    Why: such a bench measured nothing, yet exited 0 as if it had (a missing ``--model`` is
    refused before any side runs: ``resolve_bench_model``)."""
    results = report.get("results") or []
    if not results or any("error" not in r for r in results):
        return None
    said = "; ".join(f"{r.get('backend', '?')}: {(str(r['error']).strip().splitlines() or ['?'])[-1][:_ERROR_QUOTED]}"
                     for r in results)
    kept = f", each side's stderr_tail in {output}" if output else ""
    return (f"every side of the bench failed, nothing was measured ({said}){kept}. Fix: correct what each "
            "error names (a --model folder every --backends side loads, the side's package installed), then run "
            "polyrl bench again")


def print_table(report: dict[str, Any]) -> None:
    """A rich table of the report's headline numbers (the JSON holds everything)."""
    from rich.console import Console
    from rich.table import Table

    def fmt(value: Any, spec: str = ".2f") -> str:
        return format(value, spec) if isinstance(value, (int, float)) and value == value else "-"

    table = Table(title="polyrl bench (seconds per step; MFU = fraction of the measured matmul peak)")
    # an accelerator run's memory is the device's high-water mark (host RSS is beside the point there)
    on_device = any("peak_device_mb" in r for r in report["results"])
    for col in ("backend", "step s", "generate s", "forward s", "backward s", "optimizer s", "tok/s",
                "gen MFU", "train MFU", "peak RSS MB", *(("peak GPU MB",) if on_device else ()),
                "x TRL", "x mlx-lm-lora", "gen x HF"):
        table.add_column(col, justify="right")
    for r in report["results"]:
        if "error" in r:
            table.add_row(r["backend"], "failed (below)")
            continue
        table.add_row(r["backend"], fmt(r.get("step_s")), fmt(r.get("generate_s")), fmt(r.get("forward_s")),
                      fmt(r.get("backward_s")), fmt(r.get("optimizer_s")), fmt(r.get("generate_tokens_per_s"), ".0f"),
                      fmt(r.get("generate_mfu"), ".0%"), fmt(r.get("train_mfu"), ".0%"),
                      fmt(r.get("peak_rss_mb"), ".0f"),
                      *((fmt(r.get("peak_device_mb"), ".0f"),) if on_device else ()),
                      fmt(r.get("speedup_vs_trl")), fmt(r.get("speedup_vs_mlx_lm_lora")),
                      fmt(r.get("generate_speedup_vs_hf")))
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=160)  # logs and pipes: no truncated columns
    console.print(table)
    for r in report["results"]:
        if "error" in r:  # one line: the exception, not the traceback (the JSON's stderr_tail has it)
            lines = str(r["error"]).strip().splitlines() or ["?"]
            console.print(f"{r['backend']}: failed: {lines[-1][:300]}", markup=False, highlight=False)
    for r in report["results"]:
        if r.get("mfu_note"):
            console.print(f"{r['backend']}: {r['mfu_note']}")
    for r in report["results"]:
        each = [x for x in r.get("step_s_each") or [] if isinstance(x, (int, float))]
        if len(each) > 1:
            console.print(f"{r['backend']}: {len(each)} timed steps, {min(each):.2f}-{max(each):.2f} s "
                          f"(the table's step s: {r['step_s']:.2f})")
    for r in report["results"]:
        pairs = [x for x in r.get("speedup_vs_trl_each") or [] if isinstance(x, (int, float))]
        if pairs:
            console.print(f"{r['backend']}: interleaved with TRL, x TRL per step pair {min(pairs):.2f}-{max(pairs):.2f} "
                          f"(median {statistics.median(pairs):.2f})")
    for r in report["results"]:
        if r.get("max_speedup_vs_trl"):
            console.print(f"{r['backend']}: FLOP floor {r['flop_floor_s']:.1f} s/step at the measured peak; TRL's step "
                          f"is {r['max_speedup_vs_trl']:.2f}x that, so 3x TRL needs "
                          f"{r['peak_share_for_3x_trl']:.0%} of the peak across the whole step")
    floor_line = generation_floor_line(report["results"])
    if floor_line:
        console.print(floor_line, markup=False, highlight=False)
    machine = report["machine"]
    if machine.get("model"):
        console.print(f"CPU: {machine['model']}, {machine.get('cpus')} CPUs, SIMD: "
                      f"{', '.join(machine.get('simd_flags') or []) or 'none listed'}")
    if machine.get("isa_limits"):
        console.print(f"instruction set capped by {machine['isa_limits']}: these are not this CPU's own figures")
    peak = machine["matmul_peak"]
    if peak.get("device", "cpu") != "cpu":
        console.print(f"device: {machine.get('device')} ({peak.get('device')}, CUDA {peak.get('cuda_version')}); "
                      "the peaks below and every side ran there")
    console.print(f"matmul peak {peak['peak_gflops']:.1f} GFLOP/s ({peak.get('library')}, "
                  f"{machine['threads']} thread(s)); chart: {report.get('chart') or 'none (pip install matplotlib)'}")
    for dtype, other in machine.get("matmul_peaks", {}).items():
        if dtype != "float32":  # a --compute-dtype run's MFU is against this one
            console.print(f"{dtype} matmul peak {other['peak_gflops']:.1f} GFLOP/s (MFU of {dtype} runs)")


def generation_floor_line(results: list[dict[str, Any]]) -> str | None:
    """One line: what streaming the weights lets generation reach on this CPU, beside each side's
    measured generation MFU (the floor is the workload's, the same for every side)."""
    sides = [r for r in results if r.get("generate_floor") and r.get("generate_mfu") is not None]
    if not sides:
        return None
    floor = sides[0]["generate_floor"]
    measured = ", ".join(f"{r['backend']} {r['generate_mfu']:.0%}" for r in sides)
    return (f"generation floor: the weights streamed {floor['weight_passes']} times ({floor['stream_gb']:.1f} GB, "
            f"{floor['dtype']}) at {floor['read_gb_per_s']:.1f} GB/s read: streaming and arithmetic taking turns "
            f"cap generation MFU at {floor['mfu_taking_turns']:.0%}, overlapped at {floor['mfu_overlapped']:.0%} "
            f"(measured: {measured})")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


def sweep_series(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The sweep's points grouped into lines over completion length: one per group size and
    full/LoRA for the scaling points, one for the memory-only points; each sorted by length."""
    series: dict[str, list[dict[str, Any]]] = {}
    for p in report["points"]:
        w = p["workload"]
        name = ("memory: 1 prompt x 2" if w["kind"] == "memory"
                else f"group {w['group_size']}, {'LoRA' if w['lora'] else 'full'}")
        series.setdefault(name, []).append(p)
    return {k: sorted(v, key=lambda p: p["workload"]["length"]) for k, v in series.items()}


def write_sweep_chart(report: dict[str, Any], path: Path) -> str | None:
    """Three panels against completion length: (a) TRL's step time over polyrl's, one line per
    group size and full/LoRA; (b) peak RSS of both frameworks; (c) MFU per phase of both, for the
    first scaling line. None without matplotlib or without a point that ran."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = sweep_series(report)
    if not series:
        return None
    fig, (speed, memory, mfu) = plt.subplots(1, 3, figsize=(15, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, points) in enumerate(series.items()):
        colour = colours[index % len(colours)]  # one colour per line, solid polyrl, dashed TRL
        xs = [p["workload"]["length"] for p in points]
        ratios = [_number(p.get("trl_over_polyrl", {}).get("step")) for p in points]
        if any(r is not None for r in ratios) and not name.startswith("memory"):
            speed.plot(xs, [r if r is not None else float("nan") for r in ratios], "o-", color=colour, label=name)
        for side, style in (("polyrl", "-"), ("trl", "--")):
            rss = [_number((p.get(side) or {}).get("peak_rss_mb")) for p in points]
            if any(r is not None for r in rss):
                memory.plot(xs, [r / 1024 if r is not None else float("nan") for r in rss], "o" + style,
                            color=colour, label=f"{side}, {name}")
    first = next((v for k, v in series.items() if not k.startswith("memory")), None)
    if first:
        xs = [p["workload"]["length"] for p in first]
        for side, style in (("polyrl", "-"), ("trl", "--")):
            for phase, colour in (("generate", colours[0]), ("train", colours[1])):
                values = [_number((p.get(side) or {}).get(f"{phase}_mfu")) for p in first]
                if any(v is not None for v in values):
                    mfu.plot(xs, [100 * v if v is not None else float("nan") for v in values], "o" + style,
                             color=colour, label=f"{side} {phase}")
        mfu.set_title(f"(c) MFU per phase ({next(k for k in series if not k.startswith('memory'))})", fontsize=9)
    speed.axhline(1.0, color="grey", linewidth=0.8)
    speed.set_title("(a) speed-up vs TRL (TRL step s / polyrl step s)", fontsize=9)
    speed.set_ylabel("x TRL")
    memory.set_title("(b) peak RSS (solid polyrl, dashed TRL)", fontsize=9)
    memory.set_ylabel("GiB")
    mfu.set_ylabel("% of measured fp32 matmul peak")
    lengths = sorted({p["workload"]["length"] for points in series.values() for p in points})
    for ax in (speed, memory, mfu):
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
        ax.set_xlabel("completion length (tokens)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    m, s = report["machine"], report["settings"]
    fig.suptitle(f"{Path(str(s['model'])).name}, {s['backend']} vs TRL, {s['threads']} thread(s), {m.get('model')}",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _change(short: dict[str, Any], long: dict[str, Any], key: str) -> str:
    a, b = (_number(p["trl_over_polyrl"].get(key)) for p in (short, long))
    return "-" if a is None or b is None else f"{a:.2f}x -> {b:.2f}x"


def lead_trends(report: dict[str, Any]) -> list[str]:
    """For each scaling line with two compared points or more: polyrl's lead over TRL at its
    shortest and longest length, per phase, so where the lead shrinks (and in which phase) reads
    off directly."""
    lines = []
    for name, points in sweep_series(report).items():
        ok = [p for p in points if p.get("trl_over_polyrl") and not name.startswith("memory")]
        if len(ok) < 2:
            continue
        short, long = ok[0], ok[-1]
        lines.append(f"{name}: x TRL per step {_change(short, long, 'step')} from {short['workload']['length']} "
                     f"to {long['workload']['length']} tokens (generate {_change(short, long, 'generate')}, "
                     f"train {_change(short, long, 'train_step')}, "
                     f"TRL/polyrl peak RSS {_change(short, long, 'peak_rss')})")
    return lines


def sweep_markdown(report: dict[str, Any]) -> str:
    """The sweep as a markdown table (one row per point), ready to paste into the README."""

    def fmt(value: Any, spec: str = ".2f") -> str:
        number = _number(value)
        return "-" if number is None else format(number, spec)

    head = ("| kind | length | group | prompts | LoRA | polyrl step s | TRL step s | x TRL step | x TRL generate "
            "| x TRL train | polyrl tok/s | TRL tok/s | polyrl RSS MB | TRL RSS MB | polyrl MFU gen/train "
            "| TRL MFU gen/train | status |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for p in report["points"]:
        w, ours, trl = p["workload"], p["polyrl"], p.get("trl") or {}
        ratio = p.get("trl_over_polyrl", {})
        lines.append("| " + " | ".join([
            w["kind"], str(w["length"]), str(w["group_size"]), str(w["prompts"]), "yes" if w["lora"] else "no",
            fmt(ours.get("step_s")), fmt(trl.get("step_s")), fmt(ratio.get("step")), fmt(ratio.get("generate")),
            fmt(ratio.get("train_step")), fmt(ours.get("generate_tokens_per_s"), ".0f"),
            fmt(trl.get("generate_tokens_per_s"), ".0f"), fmt(ours.get("peak_rss_mb"), ".0f"),
            fmt(trl.get("peak_rss_mb"), ".0f"),
            f"{fmt(ours.get('generate_mfu'), '.1%')} / {fmt(ours.get('train_mfu'), '.1%')}",
            f"{fmt(trl.get('generate_mfu'), '.1%')} / {fmt(trl.get('train_mfu'), '.1%')}",
            _status(p).replace("|", "/")]) + " |")
    trends = lead_trends(report)
    lines += ["", *(f"- {line}" for line in trends), *([""] if trends else [])]
    m, s = report["machine"], report["settings"]
    peak = m["matmul_peak"]
    lines.append(f"{s['model']}, {s['backend']} backend vs TRL, {s['threads']} thread(s), {s['steps']} step(s) "
                 f"per point (medians; the first left out when there are more), about {s['tokens_per_step']} sampled tokens per step, fixed lengths; "
                 f"{m.get('model')}, fp32 matmul peak {fmt(peak.get('peak_gflops'), '.1f')} GFLOP/s "
                 f"({peak.get('library')}). x TRL = TRL's seconds / polyrl's (above 1: polyrl faster)."
                 + (" Speed points interleaved: both sides loaded at once, stepping in turn; the status gives each"
                    " step pair's x TRL." if s.get("interleave") else ""))
    return "\n".join(lines) + "\n"


def _status(point: dict[str, Any]) -> str:
    """The point's status, with its step pairs' ratios when its sides ran interleaved."""
    pairs = point.get("trl_over_polyrl_each_step") or []
    if not pairs:
        return str(point["status"])
    return f"{point['status']}; step pairs x TRL {', '.join(f'{r:.2f}' for r in pairs)}"
