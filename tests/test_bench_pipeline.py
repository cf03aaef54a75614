"""bench/pipeline.py: its pure parts (figures from journal and metrics rows, the result keys), and the bench end to end at
its smallest setting."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline import arm_figures, results
from tests.conftest import need_server


def _row(step, phase, start, end):
    return {"step": step, "phase": phase, "seconds": end - start, "finished_at": end}


def _metrics(step, stale=None):
    row = {"step": step, "valid_rate": 0.5, "task_types": {"code_o": {"proposals": 4}},
           "updates": {"a": {"grad_norm": 1.0}, "b": {"grad_norm": 0.0}}}
    if stale is not None:
        row["staleness"] = {"max": stale, "update_to_served_ms": 10.0 * (step + 1)}
    return row


def test_lockstep_and_overlapped_figures():
    # lock-step: games 0-6 s, update 6-10 s per step; step 0 ends at 0
    lock = [_row(0, "seed", -1, 0)]
    for t, base in ((1, 0), (2, 10)):
        lock += [_row(t, "propose", base, base + 3), _row(t, "solve", base + 3, base + 6),
                 _row(t, "update", base + 6, base + 10)]
    k0 = arm_figures(lock, [_metrics(0), _metrics(1), _metrics(2)])
    assert k0["steps"] == 2 and k0["seconds"] == 20 and k0["steps_per_hour"] == pytest.approx(360)
    assert k0["trainer_idle_fraction"] == pytest.approx(0.6) and k0["inference_idle_fraction"] == pytest.approx(0.4)
    assert k0["valid_rate"] == 0.5 and k0["nonzero_gradient_fraction"] == 0.5 and k0["served_ms"] == []

    # overlapped: step 2's games (6-12) run beside step 1's update (6-10); step 2's update 12-16
    over = [_row(0, "seed", -1, 0), _row(1, "propose", 0, 3), _row(1, "solve", 3, 6), _row(1, "update", 6, 10),
            _row(2, "propose", 6, 9), _row(2, "solve", 9, 12), _row(2, "update", 12, 16)]
    k1 = arm_figures(over, [_metrics(0), _metrics(1, 0), _metrics(2, 1)])
    assert k1["seconds"] == 16 and k1["staleness_max"] == 1 and k1["served_ms"] == [20.0, 30.0]
    assert k1["trainer_idle_fraction"] == pytest.approx(0.5) and k1["inference_idle_fraction"] == pytest.approx(0.25)

    out = results(k0, k1, True)
    assert out["pipeline_gain"] == pytest.approx(20 / 16, abs=1e-3)
    assert out["steps_per_hour_k1"] == pytest.approx(450) and out["staleness_max_observed_k1"] == 1
    assert out["update_to_served_ms"] == {"p50": 20.0, "p99": 30.0} and out["identical_k0"] is True
    assert out["nonzero_gradient_fraction_k1"] == 0.5 and out["first_difference"] is None
    assert results(k0, k1, False, "1/propose/x: 1 expected, 2 got")["first_difference"] == "1/propose/x: 1 expected, 2 got"



@pytest.mark.slow
def test_the_bench_at_its_smallest_on_the_tiny_preset():
    """Both arms and the lock-step check, one step each, distributed on loopback: every figure from the runs."""
    need_server("Postgres", 5432)
    need_server("Redis", 6379)
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--json", "--preset", "cpu-tiny", "--steps", "1",
                           "--check-steps", "1", "--set", "warmstart.enabled=false"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["steps_per_hour_k0"] > 0 and out["steps_per_hour_k1"] > 0
    assert out["pipeline_gain"] == pytest.approx(out["steps_per_hour_k1"] / out["steps_per_hour_k0"], rel=1e-2)
    assert out["identical_k0"] is True and out["first_difference"] is None  # the same seed, bit for bit
    assert "pipeline: arm = loop.max_staleness=1" in proc.stderr and "lock-step again" in proc.stderr
