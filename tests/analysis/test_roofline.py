"""The roofline's arithmetic (populora/analysis/roofline.py) on numbers worked out by hand."""

from __future__ import annotations

import pytest

from populora.analysis.roofline import (
    Ceiling,
    compute_seconds,
    decode_count,
    decode_seconds,
    fraction,
    generation_seconds,
    mfu,
    prompts_count,
    step_seconds,
)
from populora.analysis.work import (
    Completion,
    Count,
    Precision,
    Shapes,
    decode_bytes,
    decode_step,
    prompt_pass,
)

# 100 GFLOP/s in float32, 200 in bfloat16, and 10 GB/s
C = Ceiling({"float32": 100e9, "bfloat16": 200e9}, 10e9)
FP32, BF16 = Precision(), Precision(base="bfloat16")
S = Shapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=1000, rank=4,
           targets=("q_proj", "v_proj"))


def test_each_precision_s_products_at_its_own_peak():
    work = Count(projections=100 * 10**9, head=10 * 10**9, adapter=5 * 10**9, attention=5 * 10**9)
    assert compute_seconds(work, FP32, C) == pytest.approx(1.2)
    # the projections in bfloat16 at 200 GFLOP/s (0.5 s), the rest in float32 (0.2 s)
    assert compute_seconds(work, BF16, C) == pytest.approx(0.7)
    assert mfu(work, 2.4, FP32, C) == pytest.approx(0.5)
    assert mfu(work, 0.0, FP32, C) is None
    # recomputation and padding are executed, not useful: they take time the ceiling does not allow them
    assert compute_seconds(work + Count(recomputed=10**12, padding=10**12), FP32, C) == pytest.approx(1.2)
    with pytest.raises(ValueError, match="no measured peak for bfloat16"):
        compute_seconds(work, BF16, Ceiling({"float32": 1e9}, 1e9))


def test_a_decode_step_waits_on_memory_until_its_rows_fill_the_compute_peak():
    one = decode_step(S, [10])
    nbytes = decode_bytes(S, [10], [4], FP32)
    assert step_seconds(one, nbytes, FP32, C) == pytest.approx(nbytes / 10e9)  # memory-bound at one row
    many = decode_step(S, [10] * 10_000)
    assert step_seconds(many, 10, FP32, C) == pytest.approx(many.useful / 100e9)  # compute-bound


def test_a_generation_phase_is_its_prompt_passes_at_the_peak_and_its_decode_steps_on_the_roofline():
    rows = [Completion(5, 1, "a"), Completion(6, 3, "a"), Completion(7, 4, "b")]
    prompts = [(5, None), (6, None), (7, None)]
    assert prompts_count(S, prompts) == prompt_pass(S, 5) + prompt_pass(S, 6) + prompt_pass(S, 7)
    steps = [(decode_step(S, [7, 8]), decode_bytes(S, [7, 8], [4, 4], FP32)),
             (decode_step(S, [8, 9]), decode_bytes(S, [8, 9], [4, 4], FP32)),
             (decode_step(S, [10]), decode_bytes(S, [10], [4], FP32))]
    decode = sum(step_seconds(c, b, FP32, C) for c, b in steps)
    assert decode_seconds(S, rows, FP32, C) == pytest.approx(decode)
    assert decode_count(S, rows, FP32) == steps[0][0] + steps[1][0] + steps[2][0]
    assert generation_seconds(S, prompts, [rows, rows], FP32, C) == pytest.approx(
        compute_seconds(prompts_count(S, prompts), FP32, C) + 2 * decode)


def test_fractions():
    assert fraction(1.0, 4.0) == 0.25
    assert fraction(1.0, 0.0) is None


def test_a_ceiling_is_positive():
    with pytest.raises(ValueError, match="positive"):
        Ceiling({"float32": 0.0}, 1.0)
    with pytest.raises(ValueError, match="positive"):
        Ceiling({}, 1.0)
