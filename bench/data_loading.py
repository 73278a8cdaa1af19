"""Time to the first training batch and memory for a large prompt file: Parquet vs JSONL.

    python bench/data_loading.py [--rows 1000000] [--batch 8] [--repeats 3] [--out FILE]

Writes the same rows (a chat prompt, a plain question, an answer) once as Parquet and once as
JSON lines, then, each in a fresh child process, loads them the way ``polyrl train`` does
(``polyrl.data.load_dataset`` + ``PromptSampler``, the seeded hold-out on) and draws one batch:

* ``jsonl``: the JSON-lines path, every row a Python dict (the only loader before 🤗 datasets);
* ``parquet, cold``: Parquet through 🤗 datasets into a fresh cache (converted once to Arrow);
* ``parquet, warm``: the same file again, its Arrow cache already there (a restart, a resume).

Reported per case: seconds from the load call to the first batch (the median of ``--repeats``
runs, with min and max, since other processes share the machine), how much of it was importing
🤗 datasets, peak RSS, and the RSS after the
first batch split into anonymous memory (the heap) and file-backed pages (the memory-mapped Arrow
file, which the kernel can drop and re-read). Writes JSON (default
``bench/results/data_loading_<rows>rows.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def child_main(path: str, cache_dir: str, batch: int) -> dict:
    import polyrl.data  # noqa: F401 - the core import is not what we measure

    start = time.perf_counter()
    from polyrl.data import PromptSampler, load_dataset

    if not path.endswith(".jsonl"):  # the JSONL path never imports it
        import datasets  # noqa: F401 - timed apart to show its share
    imported = time.perf_counter()
    dataset = load_dataset(path=path, cache_dir=cache_dir, options={"eval_count": 100, "seed": 0})
    rows = PromptSampler(dataset, batch, seed=0).next_batch()
    seconds = time.perf_counter() - start
    assert len(rows) == batch and all("prompt" in r for r in rows)
    return {
        "first_batch_s": seconds, "datasets_import_s": imported - start, "rows": len(dataset), "arrow_backed": dataset.arrow_backed,
        # VmHWM, not ru_maxrss: the latter carries the parent's peak over fork + exec
        "peak_rss_mb": _status_kb("VmHWM") / 1024,
        "rss_anon_mb": _status_kb("RssAnon") / 1024, "rss_file_mb": _status_kb("RssFile") / 1024,
    }


def write_files(folder: Path, rows: int) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    a, b = rng.integers(10, 100, rows), rng.integers(10, 100, rows)
    questions = [f"What is {x} + {y}?" for x, y in zip(a, b)]
    table = pa.table({
        "prompt": [[{"role": "user", "content": f"{q} Answer with the number only."}] for q in questions],
        "question": questions,
        "answer": [str(x + y) for x, y in zip(a, b)],
    })
    parquet, jsonl = folder / "prompts.parquet", folder / "prompts.jsonl"
    pq.write_table(table, parquet)
    with jsonl.open("w") as fh:
        for row in table.to_pylist():
            fh.write(json.dumps(row) + "\n")
    return parquet, jsonl


def run_child(path: Path, cache_dir: Path, batch: int) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import data_loading; "
            f"print(json.dumps(data_loading.child_main({str(path)!r}, {str(cache_dir)!r}, {batch})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    results: dict[str, list[dict]] = {"jsonl": [], "parquet, cold": [], "parquet, warm": []}
    with tempfile.TemporaryDirectory(prefix="polyrl-bench-data-") as tmp:
        folder = Path(tmp)
        parquet, jsonl = write_files(folder, args.rows)
        sizes = {"parquet_mb": parquet.stat().st_size / 2**20, "jsonl_mb": jsonl.stat().st_size / 2**20}
        for i in range(args.repeats):
            cache = folder / f"cache{i}"
            results["jsonl"].append(run_child(jsonl, cache, args.batch))
            results["parquet, cold"].append(run_child(parquet, cache, args.batch))
            results["parquet, warm"].append(run_child(parquet, cache, args.batch))

    summary = {}
    for case, runs in results.items():
        times = [r["first_batch_s"] for r in runs]
        summary[case] = {
            "first_batch_s_median": float(np.median(times)), "first_batch_s_min": min(times),
            "first_batch_s_max": max(times),
            **{k: float(np.median([r[k] for r in runs]))
               for k in ("datasets_import_s", "peak_rss_mb", "rss_anon_mb", "rss_file_mb")},
            "arrow_backed": runs[0]["arrow_backed"],
        }
    report = {"rows": args.rows, "batch": args.batch, "repeats": args.repeats, "cpu": _cpu(),
              "cpus_visible": os.cpu_count(), "python": platform.python_version(), **sizes,
              "summary": summary, "runs": results}
    out = Path(args.out or Path(__file__).parent / "results" / f"data_loading_{args.rows}rows.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

    print(f"{args.rows:,} rows; Parquet {sizes['parquet_mb']:.1f} MiB, JSONL {sizes['jsonl_mb']:.1f} MiB; "
          f"{report['cpu']}; median of {args.repeats} (min-max)")
    print(f"{'loader':<16}{'first batch s':>22}{'of it import s':>16}{'peak RSS MiB':>14}{'anon MiB':>10}"
          f"{'file MiB':>10}")
    for case, s in summary.items():
        span = f"{s['first_batch_s_median']:.2f} ({s['first_batch_s_min']:.2f}-{s['first_batch_s_max']:.2f})"
        print(f"{case:<16}{span:>22}{s['datasets_import_s']:>16.2f}{s['peak_rss_mb']:>14.0f}"
              f"{s['rss_anon_mb']:>10.0f}{s['rss_file_mb']:>10.0f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
