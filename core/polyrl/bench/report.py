"""Presenting a ``polyrl bench`` report: a PNG chart of each step's phases and a terminal table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Phases of one GRPO step, in the order they run (seconds keys in a bench result).
STEP_PHASES = ("generate", "scoring", "forward", "backward", "grad_sync", "optimizer")


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
        ax.text(left[y], y, " " + note, va="center")
    w, m = report["workload"], report["machine"]
    ax.set_xlabel("seconds per GRPO step")
    ax.set_title(f"{Path(str(w['model'])).name}: {w['prompts']} prompts x {w['group_size']} x "
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


def print_table(report: dict[str, Any]) -> None:
    """A rich table of the report's headline numbers (the JSON holds everything)."""
    from rich.console import Console
    from rich.table import Table

    def fmt(value: Any, spec: str = ".2f") -> str:
        return format(value, spec) if isinstance(value, (int, float)) and value == value else "-"

    table = Table(title="polyrl bench (seconds per step; MFU = fraction of the measured matmul peak)")
    for col in ("backend", "step s", "generate s", "forward s", "backward s", "optimizer s", "tok/s",
                "gen MFU", "train MFU", "peak RSS MB", "x TRL", "gen x HF"):
        table.add_column(col, justify="right")
    for r in report["results"]:
        if "error" in r:
            table.add_row(r["backend"], f"error: {r['error'][:60]}")
            continue
        table.add_row(r["backend"], fmt(r.get("step_s")), fmt(r.get("generate_s")), fmt(r.get("forward_s")),
                      fmt(r.get("backward_s")), fmt(r.get("optimizer_s")), fmt(r.get("generate_tokens_per_s"), ".0f"),
                      fmt(r.get("generate_mfu"), ".0%"), fmt(r.get("train_mfu"), ".0%"),
                      fmt(r.get("peak_rss_mb"), ".0f"), fmt(r.get("speedup_vs_trl")),
                      fmt(r.get("generate_speedup_vs_hf")))
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=160)  # logs and pipes: no truncated columns
    console.print(table)
    peak = report["machine"]["matmul_peak"]
    console.print(f"matmul peak {peak['peak_gflops']:.1f} GFLOP/s ({peak.get('library')}, "
                  f"{report['machine']['threads']} thread(s)); chart: {report.get('chart') or 'none (pip install matplotlib)'}")
    for dtype, other in report["machine"].get("matmul_peaks", {}).items():
        if dtype != "float32":  # a --compute-dtype run's MFU is against this one
            console.print(f"{dtype} matmul peak {other['peak_gflops']:.1f} GFLOP/s (MFU of {dtype} runs)")
