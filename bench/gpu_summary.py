"""The GPU suite's summary: one table of every bench JSON in a results folder, and the tests' counts.

    python bench/gpu_summary.py RESULTS_DIR

Per bench: the device and its measured bf16 matmul peak, the workload, polyrl's and TRL's seconds per
step, the ratio, each side's generate seconds and MFU, HF ``generate``'s seconds and polyrl's
generation speed-up over it, and the accelerator memory high-water marks; then each profile
(``bench/gpu_profile.py``) in its few lines, and each fixed-shape decode A/B (``bench/fixed_decode_ab.py``)
in one (printed by ``bench/gpu_suite.sh`` last, so the device
tool's reply carries it).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def _f(value: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(value) if isinstance(value, (int, float)) and value == value else "-"


def _rate(gflops: Any) -> str:
    if not isinstance(gflops, (int, float)):
        return "-"
    return f"{gflops / 1000:.0f} TFLOP/s" if gflops >= 1000 else f"{gflops:.0f} GFLOP/s"


def bench_rows(report: dict[str, Any]) -> list[str]:
    w, m = report["workload"], report["machine"]
    peak = m.get("matmul_peaks", {}).get(w.get("compute_dtype", "float32")) or m["matmul_peak"]
    head = (f"{w['model'].rstrip('/').split('/')[-1]} {w['prompts']}x{w['group_size']}x{w['max_new_tokens']}"
            f"{' LoRA' if w.get('lora') else ''} {w.get('compute_dtype')} on {m.get('device')} "
            f"(peak {_rate(peak.get('peak_gflops'))})")
    lines = [head]
    by = {r["backend"]: r for r in report["results"]}
    for name, r in by.items():
        if "error" in r:
            lines.append(f"  {name:12s} error: {r['error'][:160]}")
            continue
        extra = ""
        if r.get("speedup_vs_trl"):
            extra += f"  {r['speedup_vs_trl']:.2f}x TRL"
        if r.get("generate_speedup_vs_hf"):
            extra += f"  generate {r['generate_speedup_vs_hf']:.2f}x HF"
        lines.append(f"  {name:12s} step {_f(r.get('step_s'))} s  generate {_f(r.get('generate_s'))} s  "
                     f"train {_f(r.get('train_step_s'))} s  MFU gen {_f(r.get('generate_mfu'), '{:.0%}')} "
                     f"train {_f(r.get('train_mfu'), '{:.0%}')}  GPU mem {_f(r.get('peak_device_mb'), '{:.0f}')} MB"
                     f"{extra}")
    return lines


def test_counts(xml: Path) -> str:
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}.{c.get('name')}" for s in suites for c in s.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    text = (f"tests: {passed} passed, {total['failures']} failed, {total['errors']} errors, "
            f"{total['skipped']} skipped")
    return text + "".join(f"\n  FAILED {name}" for name in failed[:30])


def fixed_ab_line(shape: str, report: dict[str, Any]) -> str:
    """One line of a ``bench/fixed_decode_ab.py`` report: ms per decode step each way and the ratio."""
    ms = report["ms_per_decode_step"]
    return (f"fixed-shape decode {shape} on {report['device']}: {_f(ms['dropping'])} -> {_f(ms['fixed'])} ms/step, "
            f"{_f(report['dropping_over_fixed_median'])}x ({report['graph_replays']} of {report['fixed_steps']} "
            f"steps from a CUDA graph; log-prob gap {report['largest_logprob_gap']:.2g})")


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "bench/results/gpu")
    print(f"\n=== GPU suite summary ({folder})")
    if (folder / "tests.xml").exists():
        print(test_counts(folder / "tests.xml"))
    for path in sorted(folder.glob("bench_*.json")):
        try:
            print("\n".join(bench_rows(json.loads(path.read_text()))))
        except (ValueError, KeyError) as exc:
            print(f"{path.name}: unreadable ({exc})")
    for path in sorted(folder.glob("profile_*/profile.json")):
        from gpu_profile import render  # beside this file

        try:
            print(render(json.loads(path.read_text())))
        except (ValueError, KeyError) as exc:
            print(f"{path}: unreadable ({exc})")
    for path in sorted(folder.glob("fixed_ab_*.json")):
        try:
            print(fixed_ab_line(path.stem.removeprefix("fixed_ab_"), json.loads(path.read_text())))
        except (ValueError, KeyError) as exc:
            print(f"{path.name}: unreadable ({exc})")
    if (folder / "skipped.txt").exists():  # sections a time budget left out, for a later call to run
        print((folder / "skipped.txt").read_text().rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
