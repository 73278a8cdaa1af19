"""How much of a one-thread decode step is the weights' streaming taking turns with the arithmetic.

    python bench/decode_kernel_probe.py --threads 1 --rounds 5 \
        --output bench/results/decode_kernel_probe_smollm2_1thread.json

A generation step multiplies 32 rows (8 prompts x 4) by every weight of the model once; at that
shape oneDNN's packed matmul (what polyrl's CPU sampler runs) measured close to the *serial*
roofline on the Xeons here (``bench/decode_matmul.py``): streaming a panel of weights, then
multiplying it, in turns. This puts three other ways of doing the same step beside it, in one
process, alternating round by round on the same weights: MKL's packed sgemm
(``torch.ops.mkl._mkl_linear``, packed for exactly these rows), and a plain AVX-512 kernel
(``bench/decode_kernel_probe.c``, compiled here with ``cc``) without and with software prefetch
of the weights a panel ahead. A kernel with prefetch beating the others says the step's limit on
this CPU is the overlap of memory and arithmetic, not either alone: the headroom a decode kernel
written for it would have. polyrl's sampler ships such a kernel (``polyrl_torch.decode_kernel``: a wider tile,
the panel two ahead); ``bench/decode_kernel_ab.py`` measures it on whole generate calls.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from polyrl import strict_json
from polyrl.bench.flops import ModelShape
from polyrl.bench.machine import cpu_info
from polyrl.registry import get_registry

sys.path.insert(0, str(Path(__file__).parent))  # the sibling script whose weights and packing this reuses
from decode_matmul import layer_weights, packed  # noqa: E402

ROWS = 32  # the kernel's row count: the reference workload's 8 prompts x 4
PANEL = 16  # output columns per packed panel: one AVX-512 register of float32


def compile_kernel(folder: Path) -> ctypes.CDLL:
    """``decode_kernel_probe.c`` as a shared library (``cc`` with AVX-512F and FMA)."""
    source = Path(__file__).with_name("decode_kernel_probe.c")
    library = folder / "decode_kernel_probe.so"
    subprocess.run([shutil.which("cc") or "cc", "-O3", "-mavx512f", "-mfma", "-shared", "-fPIC", "-o", str(library),
                    str(source)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.decode_gemm32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int]
    lib.decode_gemm32.restype = None
    return lib


def model_weights(shape: ModelShape) -> list[Any]:
    """Every linear weight of one decode step (each layer's seven projections, then the head), fresh."""
    import torch

    layers = layer_weights(shape, torch.float32, shape.layers)
    return [*(w for layer in layers for w in layer), torch.randn(shape.vocab, shape.hidden)]


def onednn_step(weights: list[Any]) -> Callable[[dict[int, Any]], None]:
    layers = [(packed(w), w.shape[1]) for w in weights]

    def step(xs: dict[int, Any]) -> None:
        for layer, k in layers:
            layer(xs[k])
    return step


def mkl_step(weights: list[Any]) -> Callable[[dict[int, Any]], None]:
    import torch

    packed = [(torch.ops.mkl._mkl_reorder_linear_weight(w, ROWS), w) for w in weights]

    def step(xs: dict[int, Any]) -> None:
        for p, w in packed:
            torch.ops.mkl._mkl_linear(xs[w.shape[1]], p, w, None, ROWS)
    return step


def panels_of(weight: Any) -> Any:
    """``weight`` (``[n, k]``, as nn.Linear holds it) in the kernel's layout: ``[n / 16, k, 16]``."""
    return weight.view(weight.shape[0] // PANEL, PANEL, weight.shape[1]).transpose(1, 2).contiguous()


def kernel_step(lib: ctypes.CDLL, weights: list[Any], dist: int) -> Callable[[dict[int, Any]], None]:
    import torch

    panels = [panels_of(w) for w in weights]
    outs = [torch.empty(ROWS, w.shape[0]) for w in weights]

    def step(xs_t: dict[int, Any]) -> None:
        for w, p, out in zip(weights, panels, outs):
            lib.decode_gemm32(xs_t[w.shape[1]].data_ptr(), p.data_ptr(), out.data_ptr(), w.shape[0], w.shape[1], dist)
    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0, help="timing per method per round")
    p.add_argument("--output", default="bench/results/decode_kernel_probe.json")
    args = p.parse_args(argv)
    import torch

    if "avx512f" not in (cpu_info(args.threads).get("simd_flags") or []):
        print("error: this probe's kernel needs AVX-512F (no avx512f flag in /proc/cpuinfo); run it on an AVX-512 CPU",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    shape = ModelShape.from_config(get_registry().resolve_model(args.model))
    weights = model_weights(shape)
    bad = sorted({w.shape[0] for w in weights if w.shape[0] % PANEL})
    if bad:
        print(f"error: --model {args.model}: output sizes {bad} are not multiples of {PANEL}; the probe's kernel has "
              "no remainder path: pick a model whose projections are", file=sys.stderr)
        return 2
    from polyrl_torch.bench.matmul_peak import measure

    peak = measure(args.threads)["peak_gflops"]
    with tempfile.TemporaryDirectory() as folder:
        lib = compile_kernel(Path(folder))
        xs = {k: torch.randn(ROWS, k) for k in {w.shape[1] for w in weights}}
        xs_t = {k: x.t().contiguous() for k, x in xs.items()}
        methods: dict[str, tuple[Callable[[dict[int, Any]], None], dict[int, Any]]] = {
            "onednn_packed": (onednn_step(weights), xs), "mkl_packed": (mkl_step(weights), xs),
            "kernel_no_prefetch": (kernel_step(lib, weights, 0), xs_t),
            "kernel_prefetch": (kernel_step(lib, weights, 1), xs_t)}
        check = weights[1]  # every method's answer for one projection against F.linear
        reference = torch.nn.functional.linear(xs[check.shape[1]], check)
        out = torch.empty(ROWS, check.shape[0])
        check_panels = panels_of(check)  # bound: alive during the call
        lib.decode_gemm32(xs_t[check.shape[1]].data_ptr(), check_panels.data_ptr(), out.data_ptr(),
                          check.shape[0], check.shape[1], 1)
        max_error = float((out - reference).abs().max() / reference.abs().max())
        if not max_error < 1e-5:  # float32 sums in another order differ in the last bits, not more
            print(f"error: the probe's kernel is wrong on this machine (relative error {max_error:.1e} against "
                  "torch's linear): its rates would mean nothing", file=sys.stderr)
            return 1
        flops = 2.0 * ROWS * sum(w.numel() for w in weights)
        rates: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, (step, inputs) in methods.items():
                step(inputs)
                count, start = 0, time.perf_counter()
                while count == 0 or time.perf_counter() - start < args.seconds:
                    step(inputs)
                    count += 1
                rates[name].append(flops * count / (time.perf_counter() - start) / 1e9)
    report = {"machine": cpu_info(args.threads), "model": args.model, "rows": ROWS, "square_peak_gflops": peak,
              "kernel_max_relative_error": max_error, "gflops_per_round": rates,
              "median_gflops": {n: statistics.median(r) for n, r in rates.items()},
              "median_of_peak": {n: statistics.median(r) / peak for n, r in rates.items()},
              "ratio_to_onednn_per_round": {n: [a / b for a, b in zip(r, rates["onednn_packed"])]
                                            for n, r in rates.items()}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(strict_json.dumps(report, indent=2))
    print(json.dumps({n: round(v, 1) for n, v in report["median_gflops"].items()}), f"GFLOP/s at {ROWS} rows;",
          f"square peak {peak:.1f}; kernel error {max_error:.1e}; {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
