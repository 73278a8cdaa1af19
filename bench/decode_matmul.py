"""How fast this CPU multiplies at decode shapes: the attainable rate of a generation step.

    python bench/decode_matmul.py --model smollm2-135m-instruct --threads 1 --rows 4,8,32,128 \\
        --output bench/results/decode_matmul.json

Why: a decode step multiplies ``rows`` activations (the sequences still sampling) by every weight
of the model once. With few rows each weight is used for a handful of products after being read
from memory, so the rate is set by how the BLAS streams weights, not by its square-matmul peak
(``polyrl bench``'s MFU denominator). This measures that rate for the model's own shapes, each
layer's weights distinct (as in a real step, where they do not stay in cache), for float32 and,
where torch has it, bfloat16: the ceiling of generation MFU at a given row count, the same for
every framework that calls torch's matmul. ``decode_packed`` is the same step on weights packed
once for oneDNN (``polyrl_torch.generation_weights.PackedLinear``, what polyrl's CPU sampler runs),
and ``decode_fused`` that step with each layer's q/k/v and gate/up weights stacked and packed as
one matrix each: faster here in isolation at few rows, but a sampler built that way was no faster
end to end (README, "Tried and not kept: one matmul for sibling projections"), so the sampler
packs each projection alone.

Why it also measures how fast one thread reads memory: machines differ most there (a core of one
of this project's CPUs read 8.6 GB/s, another's ~25), and a decode step must stream every weight
from memory. Each rate then gets its roofline: ``roofline_gflops``, the rate if streaming the
weights hid entirely behind the arithmetic at the square-matmul peak (or the reverse), and
``serial_gflops``, the rate if the two took turns; a measured rate near ``serial_gflops`` says
the step is bound by memory latency, not by the kernel's arithmetic.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

from polyrl import strict_json
from polyrl.bench.flops import ModelShape
from polyrl.bench.machine import cpu_info
from polyrl.registry import get_registry


def layer_weights(shape: ModelShape, dtype: object, layers: int) -> list[list[object]]:
    """Per layer, fresh weights of the decoder's seven projections (out x in, as nn.Linear holds them)."""
    import torch

    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    dims = [(q_out, shape.hidden), (kv_out, shape.hidden), (kv_out, shape.hidden), (shape.hidden, q_out),
            (shape.intermediate, shape.hidden), (shape.intermediate, shape.hidden), (shape.hidden, shape.intermediate)]
    return [[torch.randn(o, i).to(dtype) for o, i in dims] for _ in range(layers)]


def packed(weight: object) -> object:
    """The sampler's packed layer holding ``weight``."""
    import torch

    from polyrl_torch.generation_weights import PackedLinear

    shape_only = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype, device="meta")
    layer = PackedLinear(shape_only)
    layer.pack(weight)
    return layer


def fused(layer: list[object]) -> list[object]:
    """A layer's seven weights as four: q/k/v stacked, o, gate/up stacked, down."""
    import torch

    q, k, v, o, gate, up, down = layer
    return [torch.cat([q, k, v]), o, torch.cat([gate, up]), down]


def rate(shape: ModelShape, rows: int, dtype_name: str, seconds: float, pack: bool = False,
         fuse: bool = False) -> dict[str, float]:
    """GFLOP/s of one decode step's matmuls (backbone, then ``lm_head``) at ``rows`` rows, with
    torch's matmul or (``pack``) on packed weights, siblings stacked (``fuse``) or not."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    weights = layer_weights(shape, dtype, shape.layers)
    if fuse:
        weights = [fused(layer) for layer in weights]
    head = torch.randn(shape.vocab, shape.hidden).to(dtype)
    x = {n: torch.randn(rows, n).to(dtype) for n in {shape.hidden, shape.intermediate, shape.heads * shape.head_dim}}
    layers = [[packed(w) if pack else functools.partial(F.linear, weight=w) for w in layer] for layer in weights]
    head_layer = packed(head) if pack else functools.partial(F.linear, weight=head)
    inputs = [[x[w.shape[1]] for w in layer] for layer in weights]

    def step() -> None:
        for layer, xs in zip(layers, inputs):
            for linear, inp in zip(layer, xs):
                linear(inp)
        head_layer(x[shape.hidden])

    step()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    elapsed = (time.perf_counter() - start) / count
    flops = 2.0 * rows * (shape.layers * shape.layer_params + shape.hidden * shape.vocab)
    weight_bytes = (shape.layers * shape.layer_params + shape.hidden * shape.vocab) * head.element_size()
    return {"gflops": flops / elapsed / 1e9, "step_ms": elapsed * 1e3, "weight_gb_per_s": weight_bytes / elapsed / 1e9}


def with_roofline(measured: dict[str, float], peak_gflops: float, read_gb_per_s: float) -> dict[str, float]:
    """``measured`` plus the step's two bounds: arithmetic and weight streaming overlapped
    (``roofline_gflops``) or taking turns (``serial_gflops``), and the measured share of each."""
    step_s = measured["step_ms"] / 1e3
    flops, weight_gb = measured["gflops"] * step_s, measured["weight_gb_per_s"] * step_s
    compute_s, stream_s = flops / peak_gflops, weight_gb / read_gb_per_s
    roofline, serial = flops / max(compute_s, stream_s), flops / (compute_s + stream_s)
    return {**measured, "roofline_gflops": roofline, "serial_gflops": serial,
            "of_roofline": measured["gflops"] / roofline, "of_serial": measured["gflops"] / serial}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", default="4,8,32,128", help="comma-separated decode batch sizes")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--seconds", type=float, default=2.0, help="timing per measurement")
    p.add_argument("--output", default="bench/results/decode_matmul.json")
    args = p.parse_args(argv)
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        print(f"error: --rows {args.rows!r} is not a comma-separated list of integers (e.g. 4,8,32)", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    from polyrl_torch.bench.matmul_peak import measure

    shape = ModelShape.from_config(get_registry().resolve_model(args.model))
    from polyrl_torch.generation_weights import packing_available

    dtypes = args.dtypes.split(",")
    peaks = {d: measure(args.threads, dtype=d) for d in dtypes}
    from polyrl_torch.bench.memory_read import measure as measure_read  # polyrl bench's own reading

    read = measure_read(args.threads, args.seconds)["read_gb_per_s"]

    def measured(dtype: str, pack: bool, fuse: bool = False) -> dict[str, dict[str, float]]:
        return {str(r): with_roofline(rate(shape, r, dtype, args.seconds, pack=pack, fuse=fuse),
                                      peaks[dtype]["peak_gflops"], read)
                for r in rows}

    packable = [d for d in dtypes if packing_available(torch.device("cpu"), getattr(torch, d))]

    report = {"machine": cpu_info(args.threads), "model": args.model, "square_peak": peaks["float32"] if "float32" in peaks else measure(args.threads),
              "square_peaks": peaks, "memory_read_gb_per_s": read,
              "decode": {d: measured(d, False) for d in dtypes},
              "decode_packed": {d: measured(d, True) for d in packable},
              "decode_fused": {d: measured(d, True, fuse=True) for d in packable}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(strict_json.dumps(report, indent=2))
    for kind in ("decode", "decode_packed", "decode_fused"):
        print(kind, "GFLOP/s (roofline, serial):", json.dumps(
            {d: {r: [round(v[k], 1) for k in ("gflops", "roofline_gflops", "serial_gflops")] for r, v in by.items()}
             for d, by in report[kind].items()}))
    print(f"square peaks {json.dumps({d: round(v['peak_gflops'], 1) for d, v in peaks.items()})} GFLOP/s; "
          f"one thread reads {read:.1f} GB/s; {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
