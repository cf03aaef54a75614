"""bench.evolver and bench.evolver_ranks at their smallest settings, end to end: every key the benches print, each
figure from the run, and a progress line on stderr for each stage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _bench(*args: str, timeout: int = 900) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_the_evolver_bench_on_one_layer_of_rank_2():
    out, err = _bench("bench.evolver", "--json", "--rank", "2", "--layers", "1", "--operators", "M1,X1",
                      "--dense-sample", "quick")
    assert set(out["seconds"]) == set(out["cpu_seconds"]) == {"M1", "X1"}
    assert out["max_seconds"] == max(out["seconds"].values()) > 0
    assert out["peak_rss_mb"] >= out["baseline_rss_mb"] > 0 and out["adapter_mb"] > 0
    assert out["effective_rank"]["M1"] <= 2 and out["relative_change"]["X1"] > 0
    assert out["dense_seconds_estimate"] > 0 and set(out["targets_met"]) == {
        "max_seconds<=5", "speedup_vs_dense>=100", "peak_rss_mb<=4*adapter_mb+baseline"}
    assert "bench.evolver: operator = X1 (2 of 2" in err and "bench.evolver: dense estimate" in err


def test_the_evolver_ranks_bench_with_one_seed():
    out, err = _bench("bench.evolver_ranks", "--json", "--seeds", "1")
    assert out["seeds"] == 1
    for parents in ("siblings", "random"):
        assert set(out[parents]) == {"8->32", "32->8"}
        for row in out[parents].values():
            assert "X1@eps" in row and all(v["mean"] == v["max"] >= 0 for v in row.values())  # one seed
    assert err.count("bench.evolver_ranks: rank pair") == 4 and "parents = two random adapters" in err
