"""The roofline's arithmetic (populora/analysis/roofline.py) on numbers worked out by hand."""

from __future__ import annotations

import pytest

from populora.analysis.roofline import (
    Ceiling,
    decode_seconds,
    decode_step_seconds,
    fraction,
    generation_seconds,
    live_rows,
    mfu,
    prompt_pass_seconds,
    update_seconds,
)

# 100 GFLOP/s and 10 GB/s; a model of 1e8 parameters whose weights are 4e8 bytes
C = Ceiling(100e9, 10e9)
N, W = 10**8, 4 * 10**8


def test_a_decode_step_waits_on_memory_until_its_rows_fill_the_compute_peak():
    # reading the weights once takes 0.04 s; a row's 2N FLOPs take 2 ms, so 20 rows meet the bandwidth
    assert decode_step_seconds(1, N, W, C) == pytest.approx(0.04)
    assert decode_step_seconds(20, N, W, C) == pytest.approx(0.04)
    assert decode_step_seconds(40, N, W, C) == pytest.approx(0.08)


def test_the_steps_of_a_batch_hold_the_rows_still_generating():
    # the first token of every row comes from the prompt pass: 3 rows of 1, 3 and 4 tokens decode 3 steps
    assert live_rows([1, 3, 4]) == [2, 2, 1]
    assert live_rows([1, 1]) == []
    assert live_rows([]) == []
    assert decode_seconds([1, 3, 4], N, W, C) == pytest.approx(3 * 0.04)


def test_prompt_pass_update_and_phase_times_follow_spec_14():
    assert prompt_pass_seconds(500, N, C) == pytest.approx(2 * N * 500 / 100e9)
    assert update_seconds(500, N, C) == pytest.approx(6 * N * 500 / 100e9)
    assert generation_seconds(500, [[1, 3, 4], [2]], N, W, C) == pytest.approx(1.0 + 3 * 0.04 + 0.04)


def test_fractions():
    assert fraction(1.0, 4.0) == 0.25
    assert fraction(1.0, 0.0) is None
    assert mfu(50e9, 1.0, 100e9) == 0.5
    assert mfu(50e9, 0.0, 100e9) is None


def test_a_ceiling_is_positive():
    with pytest.raises(ValueError, match="positive"):
        Ceiling(0.0, 1.0)
