"""bench/league_tls.py at a small scale: the uncached leaderboard served over HTTPS and over HTTP by the same REST
process code, both answering, and the ratio that bench.league reports."""

from __future__ import annotations

from bench.league_tls import bench_tls
from populora.pb import league_pb2
from services.league.db import LeagueDB
from services.league.service import LeagueService


def test_tls_ratio_from_both_servers(tmp_path):
    url = f"sqlite:///{tmp_path / 'league.db'}"
    db = LeagueDB(url)
    db.migrate()
    service = LeagueService(db)
    service.CreateRun(league_pb2.CreateRunRequest(run_id="b", mode="population"))
    service.RegisterAdapters(league_pb2.RegisterAdaptersRequest(run_id="b", adapters=[
        league_pb2.AdapterSpec(adapter_id=f"{r[0].upper()}{i}", role=r, rank=8)
        for r in ("teacher", "student") for i in range(4)]))
    service.close()
    out = bench_tls(url, "b", clients=2, seconds=0.5, rounds=1)
    assert out["leaderboard_uncached_plain_rps"] > 0 and out["leaderboard_uncached_tls_rps"] > 0
    assert out["tls_throughput_ratio"] == round(out["leaderboard_uncached_tls_rps"] /
                                                out["leaderboard_uncached_plain_rps"], 3)
    for key in ("tls_server_cpu_ms_per_request", "plain_server_cpu_ms_per_request",
                "tls_client_cpu_ms_per_request", "plain_client_cpu_ms_per_request"):
        assert out[key] > 0, key  # each request cost both the server and the clients some CPU
