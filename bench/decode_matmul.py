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
once for oneDNN (``polyrl_torch.generation_weights.PackedLinear``, what polyrl's CPU sampler runs).
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


def rate(shape: ModelShape, rows: int, dtype_name: str, seconds: float, pack: bool = False) -> dict[str, float]:
    """GFLOP/s of one decode step's matmuls (backbone, then ``lm_head``) at ``rows`` rows, with
    torch's matmul or (``pack``) on packed weights."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    weights = layer_weights(shape, dtype, shape.layers)
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
    report = {"machine": cpu_info(args.threads), "model": args.model, "square_peak": measure(args.threads),
              "decode": {d: {str(r): rate(shape, r, d, args.seconds) for r in rows} for d in dtypes},
              "decode_packed": {d: {str(r): rate(shape, r, d, args.seconds, pack=True) for r in rows} for d in dtypes
                                if packing_available(torch.device("cpu"), getattr(torch, d))}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(strict_json.dumps(report, indent=2))
    for kind in ("decode", "decode_packed"):
        print(kind, json.dumps({d: {r: round(v["gflops"], 1) for r, v in by.items()} for d, by in report[kind].items()}))
    print(f"square fp32 peak {report['square_peak']['peak_gflops']:.1f} GFLOP/s; {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
