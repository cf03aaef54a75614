"""bench.league at its smallest setting against the real Postgres server: a small league, a few reports and
matchmaking calls, half-second read loads; every figure from the run and its stages on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_URL, need_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_league_bench_on_a_small_league():
    need_server("Postgres", 5432)
    proc = subprocess.run([sys.executable, "-m", "bench.league", "--json", "--pg-url", PG_URL, "--adapters", "20",
                           "--matches", "400", "--batch", "100", "--matchmake-calls", "5", "--clients", "2",
                           "--seconds", "0.5", "--write-rate", "50", "--dashboard-adapters", "8",
                           "--dashboard-matches", "100", "--dashboard-clients", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["adapters"] == 20 and out["report_matches_per_s"] > 0 and out["matchmake_p99_ms"] > 0
    for key in ("leaderboard_rps", "leaderboard_under_writes_rps", "leaderboard_uncached_rps", "tls_throughput_ratio",
                "dashboard_api_p99_ms"):
        assert out[key] > 0, key
    assert out["leaderboard_staleness_answers"] > 0 and out["dashboard_adapters"] == 8
    assert set(out["targets_met"]) >= {"matchmake_p99_ms<=20", "dashboard_api_p99_ms<=50"}
    assert "bench.league: stage = 7/7" in proc.stderr
