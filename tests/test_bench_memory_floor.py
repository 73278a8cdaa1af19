"""``polyrl.bench.memory_floor``: generation's bounds from streaming the weights and from arithmetic."""

from __future__ import annotations

import pytest

from polyrl.bench.flops import ModelShape
from polyrl.bench.memory_floor import generation_floor, read_rate, weight_passes
from polyrl.bench.report import generation_floor_line

# SmolLM2-135M's sizes: 134.5 M weights a decode step streams (30 layers + the tied head)
SMOLLM2 = ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, head_dim=64, vocab=49152)


def test_each_generated_token_of_the_longest_completion_streams_the_weights_once():
    assert weight_passes([32, 32, 32]) == 32
    assert weight_passes([3, 17, 9]) == 17  # finished rows ride along until the longest ends
    assert weight_passes([]) == 0


def test_the_bounds_are_the_slower_of_and_the_sum_of_streaming_and_arithmetic():
    """8 prompts x 4 x 32 tokens in float32: 32 passes of 134.5 M x 4 bytes = 17.2 GB; at
    14.1 GB/s that is 1.22 s of streaming beside 359 GFLOP / 155 GFLOP/s = 2.31 s of arithmetic."""
    weights = SMOLLM2.layers * SMOLLM2.layer_params + SMOLLM2.hidden * SMOLLM2.vocab
    assert weights == 134_479_872
    floor = generation_floor(SMOLLM2, [32] * 32, 359.0, 155.0, 14.1)
    assert floor["stream_gb"] == pytest.approx(32 * weights * 4 / 1e9)
    assert floor["stream_s"] == pytest.approx(floor["stream_gb"] / 14.1)
    assert floor["arithmetic_s"] == pytest.approx(359.0 / 155.0)
    assert floor["overlapped_s"] == pytest.approx(floor["arithmetic_s"])  # arithmetic is the slower here
    assert floor["taking_turns_s"] == pytest.approx(floor["arithmetic_s"] + floor["stream_s"])
    assert floor["mfu_overlapped"] == pytest.approx(1.0)
    assert floor["mfu_taking_turns"] == pytest.approx(2.316 / (2.316 + 1.221), abs=2e-3)
    half = generation_floor(SMOLLM2, [32], 359.0, 155.0, 14.1, dtype="bfloat16")  # 2 bytes a weight
    assert half["stream_gb"] == pytest.approx(floor["stream_gb"] / 2)
    slow = generation_floor(SMOLLM2, [32], 359.0, 155.0, 1.0)  # a slow reader: streaming dominates
    assert slow["overlapped_s"] == pytest.approx(slow["stream_s"]) and slow["mfu_overlapped"] < 0.2


def test_the_report_line_names_the_floor_and_each_side_measured_mfu():
    floor = generation_floor(SMOLLM2, [32], 359.0, 155.0, 14.1)
    line = generation_floor_line([{"backend": "torch", "generate_mfu": 0.45, "generate_floor": floor},
                                  {"backend": "trl", "generate_mfu": 0.28, "generate_floor": floor},
                                  {"backend": "mlx", "error": "failed"}])
    assert line is not None and "streamed 32 times (17.2 GB, float32) at 14.1 GB/s" in line
    assert "cap generation MFU at 65%, overlapped at 100%" in line and "(measured: torch 45%, trl 28%)" in line
    assert generation_floor_line([{"backend": "torch", "generate_mfu": 0.4}]) is None  # no read rate: no line


def test_the_bench_measures_how_fast_its_threads_read_memory():
    pytest.importorskip("polyrl_torch")
    from polyrl.bench.workload import memory_read

    found = memory_read(1)
    assert found["threads"] == 1 and found["library"].startswith("torch ")
    assert 0.5 < found["read_gb_per_s"] < 1000


def test_the_read_rate_is_the_bytes_summed_after_one_untimed_call_over_the_time_taken():
    """One call warms the buffer and is not counted; the rest repeat for the given seconds."""
    import time

    calls: list[float] = []

    def sum_once() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.01)

    rate = read_rate(sum_once, 10**9, seconds=0.05)  # 1 GB a call, ~0.01 s a call: ~100 GB/s
    assert len(calls) >= 3
    timed = len(calls) - 1
    assert rate == pytest.approx(timed * 1.0 / (timed * 0.01), rel=0.5)
    assert rate <= 100.0  # the sleeps are at least 0.01 s, so never faster than that
