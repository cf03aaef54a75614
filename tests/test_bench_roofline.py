"""bench.roofline: the keys it prints, measured on the tiny model; and bench.trainer's update_mfu from its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench.roofline as roofline
from populora.peaks import Peaks

ROOT = Path(__file__).resolve().parents[1]


def test_the_bench_prints_the_peaks_bandwidth_and_threads():
    proc = subprocess.run([sys.executable, "-m", "bench.roofline", "--json", "--model", "tiny", "--quick",
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["peak_gflops_fp32"] > 0 and out["bandwidth_gb_s"] > 0 and out["threads"] == 1 and out["cores"] >= 1
    assert "peak_gflops_bf16" in out  # null where the cores have no native bfloat16 product
    assert out["best_known_gflops_fp32"] >= out["peak_gflops_fp32"]
    rates = out["decode_ceiling_tokens_per_s_at_rows"]
    assert rates["1"] <= rates["8"] <= rates["128"]  # more rows a step: never fewer tokens a second


def test_update_mfu_is_6n_tokens_per_second_over_the_peak(monkeypatch):
    peaks = Peaks(device="cpu", threads=2, cores=2, gflops={"float32": 100.0}, bandwidth_gb_s=10.0)
    monkeypatch.setattr(roofline, "measured_here", lambda model, device="cpu": (peaks, 10**8, 4 * 10**8))
    result = {"default_mode": "sequential", "lora_params_per_adapter": 0,
              "sequential": {"processed_tokens_per_s": 50.0}, "batched": {"processed_tokens_per_s": 100.0},
              "memory_probes": {"saving_1024": {"rows": 8, "row_tokens": 128, "seconds": 2.0}}}
    got = roofline.update_fractions("tiny", result)
    assert got["update_mfu_sequential"] == pytest.approx(6e8 * 50 / 100e9) == got["update_mfu"]
    assert got["update_mfu_batched"] == pytest.approx(0.6)
    assert got["update_mfu_saving_1k"] == pytest.approx(6e8 * 1024 / 2.0 / 100e9)
    assert "update_mfu_plain_1k" not in got


@pytest.mark.slow
def test_the_products_bench_compares_both_settings_on_the_tiny_model():
    proc = subprocess.run([sys.executable, "-m", "bench.products", "--json", "--model", "tiny", "--new-tokens", "3",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("generation_speedup", "prefill_speedup", "update_speedup"):
        assert out[key] > 0, key
    assert 0 <= out["greedy_same"] <= 1 and out["max_logprob_diff"] >= 0 and -1 <= out["update_cosine"] <= 1
