"""Render README.md's "Supported architectures" table from measurements, not by hand.

Inputs: ``bench/results/architectures_torch_vs_mlx.json`` (written by
``POLYRL_ARCH_RESULTS=bench/results/architectures_torch_vs_mlx.json pytest tests/test_architectures.py``)
and each installed backend's declared ``Capabilities.architectures`` (``polyrl backends --json``).
The table goes between the ``architectures`` markers of README.md.

    python tools/architectures_table.py            # rewrite README.md
    python tools/architectures_table.py --print    # print the table only
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from polyrl.registry import get_registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results" / "architectures_torch_vs_mlx.json"
BACKENDS = ("torch", "mlx", "max")


def _cell(archs: dict, model_type: str) -> str:
    if not archs:
        return "not declared"
    arch = archs.get(model_type) or archs.get("*")
    if arch is None:
        return "no"
    roles = [r for r in ("generate", "train") if arch[r]]
    text = " + ".join(roles) if roles else "no"
    devices = arch.get("devices") or ()
    if roles and devices and "cpu" not in devices:
        text += " (GPU only)"
    if model_type not in archs:
        text += " (untested)"
    return text


def _deviation(archs: dict, model_type: str) -> str:
    """A backend's declared (test-measured) log-prob gap to torch, or a dash when unmeasured."""
    value = (archs.get(model_type) or {}).get("logprob_deviation")
    return f"{value:.1e}" if value is not None else "-"


def render(results: dict) -> str:
    reg = get_registry()
    declared = {b: (reg.status(b).capabilities.get("architectures") or {}) if b in reg.names() else {}
                for b in BACKENDS}
    rows = ["| architecture (`model_type`) | tied head | torch | MLX | MAX "
            "| max \\|Δ log-prob\\| MLX vs torch | max \\|Δ log-prob\\| MAX vs torch | notes |",
            "|---|---|---|---|---|---|---|---|"]
    for model_type, measured in sorted(results["architectures"].items()):
        gap = max(v for k, v in measured.items() if k.startswith("logprob_gap"))
        notes = "; ".join(f"{b}: {declared[b][model_type]['notes']}" for b in BACKENDS
                          if model_type in declared[b] and declared[b][model_type].get("notes"))
        rows.append(f"| `{model_type}` | {'yes' if measured['tie_word_embeddings'] else 'no'} "
                    f"| {_cell(declared['torch'], model_type)} | {_cell(declared['mlx'], model_type)} "
                    f"| {_cell(declared['max'], model_type)} | {gap:.1e} | {_deviation(declared['max'], model_type)} "
                    f"| {notes} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the table, leave README alone")
    args = parser.parse_args()
    table = render(json.loads(RESULTS.read_text()))
    if args.print:
        print(table, end="")
        return
    text = README.read_text()
    new, count = re.subn(r"(<!-- architectures:start -->\n).*?(<!-- architectures:end -->)",
                         lambda m: m.group(1) + table + m.group(2), text, flags=re.DOTALL)
    if count != 1:
        raise SystemExit("error: README.md has no <!-- architectures:start/end --> markers; "
                         "fix: add them under '### Supported architectures'")
    README.write_text(new)


if __name__ == "__main__":
    main()
