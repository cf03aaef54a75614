"""League benchmark against the real Postgres server: PFSP matchmaking latency, batched report throughput and
leaderboard latency under 16 concurrent REST clients, on a run of 1,000 adapters and 100,000 matches. Prints JSON.

    python -m bench.league --json [--pg-url URL] [--adapters 1000] [--matches 100000] [--clients 16]

Matchmake and ReportMatches go through the gRPC server and client on loopback; the leaderboard through a REST
server (uvicorn) in its own process, so clients and server do not share an interpreter. The leaderboard is measured
twice: as served (read cache on, `league.read_cache_s`) and with the cache off (every request queries Postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
import uuid

DEFAULT_PG = os.environ.get("POPULORA_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


from populora.config import TASK_TYPES  # noqa: E402 - after the light imports, for the subprocess workers


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_schema(base_url: str) -> tuple[str, str]:
    import sqlalchemy as sa

    schema = f"bench_league_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(base_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    sep = "&" if "?" in base_url else "?"
    return schema, f"{base_url}{sep}options=-csearch_path%3D{schema}"


def drop_schema(base_url: str, schema: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(base_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


def bench_matchmake(client, run_id: str, calls: int) -> dict:
    from populora.pb import league_pb2 as pb

    times, cpu, n = [], [], 0
    for step in range(calls):
        start, start_cpu = time.perf_counter(), time.process_time()
        resp = client.Matchmake(pb.MatchmakeRequest(run_id=run_id, step=step, seed=1))
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        n = len(resp.pairings)
    # cpu: this process's CPU time per call (client and server both run here; Postgres not counted), a view of
    # the cost that does not depend on how busy the machine is.
    return {"matchmake_p50_ms": round(statistics.median(times), 2), "matchmake_p99_ms": round(percentile(times, 99), 2),
            "matchmake_cpu_p50_ms": round(statistics.median(cpu), 2), "matchmake_pairings": n,
            "matchmake_calls": calls}


def bench_report(client, run_id: str, teachers: list[str], students: list[str], n_matches: int,
                 batch: int) -> dict:
    from populora.pb import league_pb2 as pb

    rng = random.Random(0)
    elapsed, applied = 0.0, 0
    while applied < n_matches:
        matches = []
        for g in range(applied, min(applied + batch, n_matches)):
            teacher, step = teachers[g % len(teachers)], g // len(teachers)
            task_type = TASK_TYPES[step % 3]
            matches.append(pb.MatchResult(match_id=f"{run_id}/{step}/{teacher}/{task_type}", teacher_id=teacher,
                                          student_id=rng.choice(students), task_type=task_type, step=step,
                                          rhos=[rng.choice((0.0, 0.25, 0.5, 0.75, 1.0)) for _ in range(2)]))
        start = time.perf_counter()
        out = client.ReportMatches(pb.ReportMatchesRequest(run_id=run_id, matches=matches))
        elapsed += time.perf_counter() - start
        if out.applied != len(matches):
            raise RuntimeError(f"applied {out.applied} of {len(matches)} fresh matches")
        applied += out.applied
    return {"report_matches_per_s": round(applied / elapsed, 1), "report_batch": batch, "matches": applied}


def serve_rest(url: str, port: int, read_cache_s: float) -> None:
    """Child process: the league REST app alone on uvicorn."""
    import uvicorn

    from services.league.db import LeagueDB
    from services.league.rest import create_app
    from services.league.service import LeagueService

    service = LeagueService(LeagueDB(url), read_cache_s=read_cache_s)
    uvicorn.run(create_app(service), host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def _client(port: int, paths: list[str], deadline: float, latencies: list[float]) -> None:
    """A keep-alive HTTP/1.1 client: one request at a time, read the full body, time it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < deadline:
            path = paths[i % len(paths)]
            i += 1
            start = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            body = await reader.readexactly(length)
            latencies.append((time.perf_counter() - start) * 1000)
            if status != 200 or not body:
                raise RuntimeError(f"GET {path}: HTTP {status}")
    finally:
        writer.close()


def _run(coro):
    """asyncio.run on uvloop where it is installed (a lighter client leaves more CPU to the server)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


async def _load(port: int, paths: list[str], clients: int, seconds: float) -> tuple[list[float], float]:
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*(_client(port, paths, start + seconds, latencies) for _ in range(clients)))
    return latencies, time.perf_counter() - start


def wait_http(port: int, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"REST server on port {port} not ready after {timeout:.0f}s")


def bench_leaderboard(url: str, run_id: str, clients: int, seconds: float, read_cache_s: float) -> dict:
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_rest, args=(url, port, read_cache_s), daemon=True)
    proc.start()
    try:
        wait_http(port)
        paths = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        _run(_load(port, paths, clients, 1.0))  # warm-up
        latencies, wall = _run(_load(port, paths, clients, seconds))
    finally:
        proc.terminate()
        proc.join(10)
    return {"rps": round(len(latencies) / wall, 1), "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "requests": len(latencies)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    ap.add_argument("--pg-url", default=DEFAULT_PG, help="Postgres server (a private schema is created and dropped)")
    ap.add_argument("--adapters", type=int, default=1000, help="half teachers, half students")
    ap.add_argument("--matches", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=500, help="matches per ReportMatches call")
    ap.add_argument("--matchmake-calls", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each leaderboard load")
    args = ap.parse_args(argv)

    from populora.pb import league_pb2 as pb
    from populora.rpc import Remote, make_server
    from services.league.db import LeagueDB
    from services.league.service import LeagueService

    schema, url = make_schema(args.pg_url)
    result: dict = {"backend": "postgresql", "adapters": args.adapters, "cpu_count": os.cpu_count(),
                    "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    try:
        db = LeagueDB(url)
        db.migrate()
        service = LeagueService(db)
        token = "bench-league-token"
        server, port, _ = make_server([service], 0, "127.0.0.1", token)
        client = Remote(service.CONTRACT, f"127.0.0.1:{port}", token, timeout=120)
        run_id = "bench"
        client.CreateRun(pb.CreateRunRequest(run_id=run_id, mode="population"))
        half = args.adapters // 2
        teachers = [f"T{i:04d}" for i in range(half)]
        students = [f"S{i:04d}" for i in range(args.adapters - half)]
        client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=run_id, adapters=[
            *(pb.AdapterSpec(adapter_id=t, role="teacher", rank=32) for t in teachers),
            *(pb.AdapterSpec(adapter_id=s, role="student", rank=32) for s in students)]))
        result.update(bench_report(client, run_id, teachers, students, args.matches, args.batch))
        result.update(bench_matchmake(client, run_id, args.matchmake_calls))
        client.close()
        server.stop(0)
        service.close()
        cached = bench_leaderboard(url, run_id, args.clients, args.seconds, read_cache_s=1.0)
        uncached = bench_leaderboard(url, run_id, args.clients, args.seconds, read_cache_s=0.0)
        result.update({"leaderboard_rps": cached["rps"], "leaderboard_p50_ms": cached["p50_ms"],
                       "leaderboard_p99_ms": cached["p99_ms"], "leaderboard_clients": args.clients,
                       "leaderboard_rows": half, "leaderboard_cache_s": 1.0,
                       "leaderboard_uncached_rps": uncached["rps"], "leaderboard_uncached_p50_ms": uncached["p50_ms"],
                       "leaderboard_uncached_p99_ms": uncached["p99_ms"]})
        result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
        result["targets_met"] = {"matchmake_p99_ms<=20": result["matchmake_p99_ms"] <= 20,
                                 "report_matches_per_s>=1000": result["report_matches_per_s"] >= 1000,
                                 "leaderboard_p99_ms<=50": result["leaderboard_p99_ms"] <= 50,
                                 "leaderboard_rps>=500": result["leaderboard_rps"] >= 500}
    finally:
        drop_schema(args.pg_url, schema)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
