"""bench.roofline: the keys it prints, measured on the tiny model; and bench.trainer's update_mfu from its figures."""

from __future__ import annotations

import dataclasses
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
    per_token = out["flops_per_token"]  # charged (spec 14) beside the useful executed FLOPs
    assert per_token["charged_trained"] == 3 * per_token["charged_forward"] > 0
    assert 0 < per_token["update_useful"] < per_token["charged_trained"]
    assert per_token["prompt_pass_useful"] > 0 and per_token["decode_step_useful"] > 0
    assert "bench.roofline: measuring" in proc.stderr  # where it is, for whoever watches


def test_update_mfu_is_the_update_s_useful_flops_per_second_over_the_peak(monkeypatch):
    from populora.analysis.work import Shapes, update

    shapes = Shapes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=1000)
    peaks = Peaks(device="cpu", threads=2, cores=2, gflops={"float32": 100.0}, bandwidth_gb_s=10.0)
    monkeypatch.setattr(roofline, "measured_here", lambda model, device="cpu": (peaks, shapes))
    mode = {"rows": 16, "row_prompt_tokens": 32, "row_response_tokens": 96, "checkpointing": True}
    result = {"default_mode": "sequential", "rank": 4, "lora_targets": ["q_proj", "v_proj"],
              "sequential": {**mode, "seconds_per_update_batch": 2.0}, "batched": {**mode, "seconds_per_update_batch": 1.0},
              "memory_probes": {"saving_1024": {"rows": 8, "row_tokens": 128, "response_tokens": 8 * 96,
                                                "seconds": 2.0, "checkpointing": True}}}
    got = roofline.update_fractions("tiny", result)
    adapted = dataclasses.replace(shapes, rank=4, targets=("q_proj", "v_proj"))
    work = update(adapted, [(32, 96)] * 16, checkpointing=True)
    assert got["update_mfu_sequential"] == pytest.approx(work.useful / 2.0 / 100e9) == got["update_mfu"]
    assert got["update_mfu_batched"] == pytest.approx(work.useful / 1.0 / 100e9)
    assert got["update_useful_flops_per_token"] == pytest.approx(work.useful / (16 * 128))
    assert got["update_recomputed_flops_per_token"] == pytest.approx(work.recomputed / (16 * 128))
    # the useful work is not spec 14's charge: no weight gradients for the frozen base, the head on the response only
    n = shapes.parameters() + adapted.adapter_params()
    assert work.useful < 6 * n * 16 * 128
    probe = update(adapted, [(32, 96)] * 8, checkpointing=True)
    assert got["update_mfu_saving_1k"] == pytest.approx(probe.useful / 2.0 / 100e9)
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
    assert "bench.products: generation = round 1 of 1" in proc.stderr and "bench.products: update = round" in proc.stderr
