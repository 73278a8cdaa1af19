"""``polyrl report RUN_A RUN_B ...``: several runs side by side, as a table and one chart.

Why: tuning a run (a learning rate, a KL weight, a backend) means reading two runs against each
other, and one report per run left that to the eye across two images. The table gives each
metric's first, last and best value per run; the chart draws the single-run panels with one line
per run. Runs of different lengths or metric sets compare too: a metric a run lacks is missing
in its columns ("missing" in the text, null in the JSON), and a panel is drawn when any run has it.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.cells import cell_len

from polyrl import plot_warnings
from polyrl.report import (
    PAGE_STYLE,
    RunData,
    _cell,
    _shown,
    _writing,
    drawable,
    label,
    panels_for,
    pyplot,
    save_figure,
    series,
    warnings_html,
    whole_steps,
)

#: the text table's mark for a metric a run did not log (a best no direction defines is "-")
MISSING = "missing"


def better(key: str) -> str | None:
    """Which way a metric improves: "max", "min", or None where neither reads as better (a lower
    loss, KL or entropy is no better RL run; a longer completion neither)."""
    if key.endswith("tokens_per_s") or key == "reward_mean" or key.startswith("reward/") and key.endswith("/mean"):
        return "max"
    if key.startswith("eval/") and (key in ("eval/accuracy",) or key.startswith("eval/pass@")
                                    or "reward" in key and key.endswith("mean")):
        return "max"
    if key.startswith("time/") or key in ("step_time", "perf/peak_rss_mb") or key.startswith("memory/") and key.endswith("_mb"):
        return "min"
    return None


def labels(runs: Sequence[RunData], given: Sequence[str]) -> list[str]:
    """Each run's name in the table and legend: its folder's name, or the path as given when two
    runs share a folder name (``a/run`` and ``b/run`` were one legend entry twice)."""
    names = [run.name for run in runs]
    return [name if names.count(name) == 1 else str(path) for name, path in zip(names, given)]


def summary(runs: Sequence[RunData], names: Sequence[str]) -> dict[str, dict[str, dict[str, float | None] | None]]:
    """{metric: {run: {"first", "last", "best"} or None when the run lacks it}} over every metric
    any run logged, sorted; points in step order (the evaluation before training first)."""
    per_run = [series(run.lines, run.records, run.evals) for run in runs]
    keys = sorted({key for data in per_run for key in data})
    table: dict[str, dict[str, dict[str, float | None] | None]] = {}
    for key in keys:
        way = better(key)
        row: dict[str, dict[str, float | None] | None] = {}
        for name, data in zip(names, per_run):
            points = sorted(data.get(key, []), key=lambda p: p[0])
            values = [v for _, v in points]
            best = (max(values) if way == "max" else min(values)) if values and way else None
            row[name] = {"first": values[0], "last": values[-1], "best": best} if values else None
        table[key] = row
    return table


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def text_table(table: dict[str, dict[str, dict[str, float | None] | None]], names: Sequence[str]) -> str:
    """The summary as aligned plain text: a column each for first, last and best per run."""
    header = ["metric", *(f"{name} {what}" for name in names for what in ("first", "last", "best"))]
    rows = [header]
    for key, row in table.items():
        cells = [key]
        for name in names:
            got = row[name]
            cells += [MISSING] * 3 if got is None else [_number(got[w]) for w in ("first", "last", "best")]
        rows.append(cells)
    widths = [max(cell_len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(_padded(c, w, left=i == 0) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def _padded(text: str, width: int, left: bool) -> str:
    """``text`` padded to ``width`` terminal cells. Why: ``str.ljust`` counts characters, and a CJK
    character or an emoji takes two cells, so a run or metric named in them pushed its row's
    columns one cell right per such character."""
    fill = " " * max(0, width - cell_len(text))
    return text + fill if left else fill + text


def write_png(runs: Sequence[RunData], names: Sequence[str], output: str | Path) -> Path:
    """The single-run panels with one line per run (a colour each), each panel drawn when any run
    has its metrics; a panel of several metrics tells them apart by line style."""
    with plot_warnings.routed():
        plt = pyplot()
        per_run = [drawable(series(run.lines, run.records, run.evals), name) for name, run in zip(names, runs)]
        merged: dict[str, list[tuple[float, float]]] = {}
        for data in per_run:
            for key, points in data.items():
                merged.setdefault(key, []).extend(points)
        chosen = panels_for(merged)
        cols = 2
        rows = max(1, math.ceil(len(chosen) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(12, 3.2 * rows), squeeze=False)
        colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
        styles = ("-", "--", ":", "-.")
        for ax, (panel, keys) in zip(axes.flat, chosen):
            for k, key in enumerate(keys):
                for r, (name, data) in enumerate(zip(names, per_run)):
                    if key not in data:
                        continue
                    xs, ys = zip(*data[key])
                    ax.plot(xs, ys, color=colours[r % len(colours)], linestyle=styles[k % len(styles)],
                            marker="o" if len(xs) < 30 else None, markersize=3,
                            label=label(name if len(keys) == 1 else f"{name}: {key}"))
            if panel.log_scale and all(y > 0 for key in keys for _, y in merged[key]):
                ax.set_yscale("log")
            whole_steps(ax, panel.title)
            ax.legend(fontsize=6, ncol=2 if len(keys) * len(runs) > 4 else 1)
        for ax in list(axes.flat)[len(chosen):]:
            ax.axis("off")
        fig.suptitle(_shown(" vs ".join(f"{name} ({len(run.lines)} steps)" for name, run in zip(names, runs))))
        return save_figure(plt, fig, output)


def write_html(runs: Sequence[RunData], names: Sequence[str], table: dict[str, Any], png: Path,
               output: str | Path) -> Path:
    """One self-contained page: the chart embedded and the first/last/best table."""
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    head = "<th>metric</th>" + "".join(f"<th>{html.escape(f'{n} {w}')}</th>" for n in names
                                       for w in ("first", "last", "best"))
    body = "".join(
        f"<tr><td>{html.escape(key)}</td>" + "".join(
            "".join(f"<td>{MISSING if row[n] is None else '-' if row[n][w] is None else _cell(row[n][w])}</td>"
                    for w in ("first", "last", "best")) for n in names) + "</tr>"
        for key, row in table.items())
    title = html.escape("polyrl report: " + " vs ".join(names))
    notes = "".join(f"<p><b>Not finished ({html.escape(n)}):</b> {html.escape(run.unfinished)}</p>"
                    for n, run in zip(names, runs) if run.unfinished)
    notes += "".join(warnings_html(run.warnings, n) for n, run in zip(names, runs))
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"{PAGE_STYLE}</head><body>"
            f"<h1>{title}</h1>{notes}<img alt=\"curves\" style=\"max-width:100%\" "
            f"src=\"data:image/png;base64,{image}\"><h2>first, last and best value of each metric</h2>"
            f"<div class=\"t\"><table><tr>{head}</tr>{body}</table></div></body></html>\n")
    out = Path(output)
    with _writing(out, "--html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out
