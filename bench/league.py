"""League benchmark against the real Postgres server: PFSP matchmaking latency, batched report throughput, the
leaderboard and lineage reads under 16 concurrent REST clients while matches are being reported, and the JSON calls
of the web dashboard. Prints JSON.

    python -m bench.league --json [--pg-url URL] [--adapters 1000] [--matches 100000] [--clients 16]

Matchmake and ReportMatches go through the gRPC server and client on loopback. The reads go to a league server in
its own process, started exactly as `populora serve league` starts it (gRPC and REST in one process), while another
process reports matches to that server over gRPC at `--write-rate` matches/s (the production path: every report
invalidates the read cache). Each read is measured with the cache on (`league.read_cache_s`) and off. As before,
`leaderboard_rps` / `_p50_ms` / `_p99_ms` are the cached leaderboard of a REST process that receives no writes.

Staleness: a probe reads the teacher leaderboard in a loop (for --seconds, at most 5 s) while reports go on, and for
every answer finds the oldest acknowledged report it does not show yet: `leaderboard_staleness_max_ms` with the
writes going to the same server, `leaderboard_staleness_replica_max_ms` with them going to another league process
on the same database (where only the cache window bounds it).

The dashboard: a run of 64 members (32 teachers, 32 students; 8 evolutions retired 32 more), 10,000 matches and its
steps stored as a training run stores them (each phase's typed record through the coordinator's journal, the step's
summary through RecordStepSummary); while a writer adds steps (stored the same way, with their matches, >= 200
matches/s), 4 dashboards refresh in a loop, each refresh being the JSON calls the page makes: overview, steps,
leaderboard, rating curves, lineage and payoff (`dashboard_api_p99_ms`).

TLS: `tls_throughput_ratio`, the uncached leaderboard's requests per second over HTTPS over those over plain HTTP,
measured alternately in the same run (bench/league_tls.py).

The workloads are bench/league_reads.py (matchmaking, reports, leaderboard and lineage reads, staleness) and
bench/league_dashboard.py (the dashboard's run); bench/league_server.py starts the servers, bench/loadgen.py loads them.
Each stage is announced on stderr as it starts.
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.harness import emit, load_average, progress
from bench.league_dashboard import bench_dashboard, build_dashboard_run
from bench.league_reads import (
    bench_leaderboard,
    bench_matchmake,
    bench_reads_under_writes,
    bench_report,
    bench_staleness,
    table_health,
)
from bench.league_server import BENCH_TOKEN, DEFAULT_PG, drop_schema, make_schema
from bench.league_tls import bench_tls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    ap.add_argument("--pg-url", default=DEFAULT_PG, help="Postgres server (a private schema is created and dropped)")
    ap.add_argument("--adapters", type=int, default=1000, help="half teachers, half students")
    ap.add_argument("--matches", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=500, help="matches per ReportMatches call")
    ap.add_argument("--matchmake-calls", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each read load")
    ap.add_argument("--write-rate", type=float, default=250.0, help="matches/s reported during the reads")
    ap.add_argument("--dashboard-adapters", type=int, default=64)
    ap.add_argument("--dashboard-matches", type=int, default=10_000)
    ap.add_argument("--dashboard-clients", type=int, default=4)
    args = ap.parse_args(argv)

    from populora.pb import league_pb2 as pb
    from populora.rpc import Remote, make_server
    from services.league.db import LeagueDB
    from services.league.service import LeagueService

    schema, url = make_schema(args.pg_url)
    result: dict = {"backend": "postgresql", "adapters": args.adapters, "cpu_count": os.cpu_count(),
                    "load_average_1m_at_start": round(load_average(), 2)}
    try:
        db = LeagueDB(url)
        db.migrate()
        service = LeagueService(db)
        server, port, _ = make_server([service], 0, "127.0.0.1", BENCH_TOKEN)
        client = Remote(service.CONTRACT, f"127.0.0.1:{port}", BENCH_TOKEN, timeout=120)
        run_id = "bench"
        client.CreateRun(pb.CreateRunRequest(run_id=run_id, mode="population"))
        half = args.adapters // 2
        teachers = [f"T{i:04d}" for i in range(half)]
        students = [f"S{i:04d}" for i in range(args.adapters - half)]
        client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=run_id, adapters=[
            *(pb.AdapterSpec(adapter_id=t, role="teacher", rank=32) for t in teachers),
            *(pb.AdapterSpec(adapter_id=s, role="student", rank=32) for s in students)]))
        progress("bench.league", "stage", f"1/7 reporting {args.matches} matches, then matchmaking")
        result.update(bench_report(client, run_id, teachers, students, args.matches, args.batch))
        result.update(bench_matchmake(client, run_id, args.matchmake_calls))
        # a line of 8 generations, for lineage reads with ancestors and descendants
        line = [teachers[0]]
        for g in range(1, 9):
            client.RecordChild(pb.RecordChildRequest(run_id=run_id, child_id=f"L{g}", role="teacher",
                                                      parent_ids=[line[-1], teachers[g]], operator="X1", step=g))
            line.append(f"L{g}")
        progress("bench.league", "stage", "2/7 the dashboard's run")
        dash_teachers, dash_students, next_step = build_dashboard_run(client, url, args.dashboard_adapters,
                                                                      args.dashboard_matches)
        client.close()
        server.stop(0)
        service.close()

        progress("bench.league", "stage", f"3/7 the cached leaderboard, {args.clients} clients, {args.seconds} s")
        cached = bench_leaderboard(url, run_id, args.clients, args.seconds, read_cache_s=1.0)
        result.update({"leaderboard_rps": cached["rps"], "leaderboard_p50_ms": cached["p50_ms"],
                       "leaderboard_p99_ms": cached["p99_ms"], "leaderboard_clients": args.clients,
                       "leaderboard_rows": half, "leaderboard_cache_s": 1.0})
        lineage_ids = line[::2]
        progress("bench.league", "stage", "4/7 reads under writes, the cache on and off")
        on = bench_reads_under_writes(url, run_id, teachers, students, lineage_ids, args.clients, args.seconds,
                                      args.write_rate, 1.0, "w-on")
        off = bench_reads_under_writes(url, run_id, teachers, students, lineage_ids, args.clients, args.seconds,
                                       args.write_rate, 0.0, "w-off")
        result.update({
            "leaderboard_under_writes_rps": on["board"]["rps"], "leaderboard_under_writes_p50_ms":
            on["board"]["p50_ms"], "leaderboard_under_writes_p99_ms": on["board"]["p99_ms"],
            "lineage_under_writes_p99_ms": on["lineage"]["p99_ms"],
            "leaderboard_uncached_rps": off["board"]["rps"], "leaderboard_uncached_p50_ms": off["board"]["p50_ms"],
            "leaderboard_uncached_p99_ms": off["board"]["p99_ms"], "lineage_uncached_rps": off["lineage"]["rps"],
            "lineage_uncached_p99_ms": off["lineage"]["p99_ms"],
            "leaderboard_uncached_cpu_ms": off["cpu_ms"],
            "writes_matches_per_s": round(min(on["write_rate"], off["write_rate"]), 1)})
        progress("bench.league", "stage", "5/7 HTTPS against HTTP")
        result.update(bench_tls(url, run_id, args.clients, min(args.seconds, 5.0)))
        progress("bench.league", "stage", "6/7 staleness, the same server and a replica")
        same = bench_staleness(url, run_id, teachers, students, min(args.seconds, 5.0), args.write_rate, 1.0,
                               replica=False)
        other = bench_staleness(url, run_id, teachers, students, min(args.seconds, 5.0), args.write_rate, 1.0,
                                replica=True)
        result.update({"leaderboard_staleness_max_ms": same["max_ms"],
                       "leaderboard_staleness_replica_max_ms": other["max_ms"],
                       "leaderboard_staleness_answers": same["answers"] + other["answers"]})
        progress("bench.league", "stage", f"7/7 {args.dashboard_clients} dashboards refreshing, the cache on and off")
        dash = bench_dashboard(url, dash_teachers, dash_students, next_step, args.dashboard_clients, args.seconds,
                               args.write_rate, 1.0)
        dash_off = bench_dashboard(url, dash_teachers, dash_students, next_step + 10_000,
                                   args.dashboard_clients, args.seconds, args.write_rate, 0.0)
        result.update({"dashboard_api_p99_ms": dash["p99_ms"], "dashboard_api_p50_ms": dash["p50_ms"],
                       "dashboard_api_calls": dash["calls"], "dashboard_api_by_endpoint_p99_ms":
                       dash["by_endpoint_p99_ms"], "dashboard_api_uncached_p99_ms": dash_off["p99_ms"],
                       "dashboard_api_uncached_by_endpoint_p99_ms": dash_off["by_endpoint_p99_ms"],
                       "dashboard_api_uncached_cpu_ms": dash_off["cpu_ms"],
                       "dashboard_writes_matches_per_s": min(dash["write_rate"], dash_off["write_rate"]),
                       "dashboard_adapters": args.dashboard_adapters, "dashboard_matches": args.dashboard_matches})
        result["tables_after_reports"] = table_health(url)
        result["load_average_1m_at_end"] = round(load_average(), 2)
        result["targets_met"] = {
            "matchmake_p99_ms<=20": result["matchmake_p99_ms"] <= 20,
            "report_matches_per_s>=1000": result["report_matches_per_s"] >= 1000,
            "leaderboard_p99_ms<=50": result["leaderboard_p99_ms"] <= 50,
            "leaderboard_rps>=500": result["leaderboard_rps"] >= 500,
            "leaderboard_uncached_p99_ms<=50": result["leaderboard_uncached_p99_ms"] <= 50,
            "leaderboard_uncached_rps>=500": result["leaderboard_uncached_rps"] >= 500,
            "writes_matches_per_s>=200": result["writes_matches_per_s"] >= 200,
            "tls_throughput_ratio>=0.95": result["tls_throughput_ratio"] >= 0.95,
            "leaderboard_staleness_replica_max_ms<=cache window + 50": other["max_ms"] <= 1000 + 50,
            "dashboard_api_p99_ms<=50": result["dashboard_api_p99_ms"] <= 50}
    finally:
        drop_schema(args.pg_url, schema)
    emit(result, indent=None if args.json else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
