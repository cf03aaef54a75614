"""The league benchmark's league workloads: matchmaking latency, batched report throughput, the leaderboard and
lineage under concurrent REST clients while matches are reported, the leaderboard's staleness, and the size of the
tables every report rewrites."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import random
import statistics
import time

from bench.league_server import BENCH_TOKEN, LeagueProcess, cpu_ms_per_request, serve_rest
from bench.loadgen import (
    client_loop,
    http_get,
    latency_figures,
    load,
    percentile,
    run_async,
    wait_http,
)
from populora.config import TASK_TYPES
from populora.ports import free_port


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




def bench_leaderboard(url: str, run_id: str, clients: int, seconds: float, read_cache_s: float) -> dict:
    """The leaderboard of a REST process alone, receiving no writes (the figure bench.league always printed)."""
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_rest, args=(url, port, read_cache_s), daemon=True)
    proc.start()
    try:
        wait_http(port)
        paths = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        run_async(load(port, paths, clients, 1.0))  # warm-up
        latencies, wall = run_async(load(port, paths, clients, seconds))
    finally:
        proc.terminate()
        proc.join(10)
    return latency_figures(latencies, wall)




def report_at_rate(address: str, run_id: str, teachers: list[str], students: list[str], rate: float,
                   seconds: float, tag: str, acks) -> None:
    """Child process: report fresh matches to a league server over gRPC at `rate` matches/s (ten reports a second)
    for `seconds`; puts [(monotonic time of each acknowledgement, matches applied so far)] on `acks`."""
    from populora.pb import league_pb2 as pb
    from populora.rpc import connect

    client = connect("league", address, BENCH_TOKEN, timeout=60)
    rng = random.Random(tag)
    batch = max(1, round(rate / 10))
    log, applied, n = [], 0, 0
    start = time.monotonic()
    due = start
    while time.monotonic() - start < seconds:
        matches = []
        for _ in range(batch):
            teacher, task_type = rng.choice(teachers), TASK_TYPES[n % 3]
            matches.append(pb.MatchResult(match_id=f"{run_id}/{tag}/{n}", teacher_id=teacher,
                                          student_id=rng.choice(students), task_type=task_type,
                                          step=10_000 + n // len(teachers),
                                          rhos=[rng.choice((0.0, 0.25, 0.5, 0.75, 1.0))]))
            n += 1
        applied += client.ReportMatches(pb.ReportMatchesRequest(run_id=run_id, matches=matches)).applied
        log.append((time.monotonic(), applied))
        due += batch / rate
        time.sleep(max(0.0, due - time.monotonic()))
    client.close()
    acks.put(log)


class Writer:
    """A `report_at_rate` process; `result()` gives the acknowledgements and the rate achieved."""

    def __init__(self, address: str, run_id: str, teachers: list[str], students: list[str], rate: float,
                 seconds: float, tag: str):
        ctx = mp.get_context("spawn")
        self.acks = ctx.Queue()
        self.proc = ctx.Process(target=report_at_rate, daemon=True,
                                args=(address, run_id, teachers, students, rate, seconds, tag, self.acks))

    def __enter__(self) -> Writer:
        self.proc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.join(30)

    def result(self) -> tuple[list[tuple[float, int]], float]:
        log = self.acks.get(timeout=120)
        self.proc.join(30)
        if len(log) < 2:
            return log, 0.0
        return log, (log[-1][1] - log[0][1]) / (log[-1][0] - log[0][0])




def bench_reads_under_writes(url: str, run_id: str, teachers: list[str], students: list[str], lineage_ids: list[str],
                             clients: int, seconds: float, rate: float, read_cache_s: float, tag: str) -> dict:
    """The leaderboard (teachers, students) and lineage reads of a league server while another process reports
    matches to it; a warm-up second first, then (without writes) the CPU each leaderboard request costs."""
    with LeagueProcess(url, read_cache_s) as league:
        address = f"127.0.0.1:{league.grpc_port}"
        board = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        lineage = [f"/v1/adapters/{a}/lineage" for a in lineage_ids]
        run_async(load(league.rest_port, board + lineage, clients, 1.0))
        cpu_ms = cpu_ms_per_request(league, board, clients, min(seconds, 3.0))
        with Writer(address, run_id, teachers, students, rate, seconds + 2, tag) as writer:
            time.sleep(0.5)
            board_lat, lineage_lat, wall = run_async(_load_split(league.rest_port, board, lineage, clients, seconds))
            _, achieved = writer.result()
    return {"board": latency_figures(board_lat, wall), "lineage": latency_figures(lineage_lat, wall),
            "write_rate": achieved, "cpu_ms": cpu_ms}


async def _load_split(port: int, board: list[str], lineage: list[str], clients: int,
                      seconds: float) -> tuple[list[float], list[float], float]:
    """`clients` keep-alive clients, three in four reading the leaderboard, one in four lineages."""
    board_lat: list[float] = []
    lineage_lat: list[float] = []
    start = time.perf_counter()
    n_lineage = max(1, clients // 4)
    await asyncio.gather(*(client_loop(port, lineage if i < n_lineage else board, start + seconds,
                                   lineage_lat if i < n_lineage else board_lat) for i in range(clients)))
    return board_lat, lineage_lat, time.perf_counter() - start


async def _probe(port: int, path: str, seconds: float) -> list[tuple[float, int]]:
    """Read `path` (a teacher leaderboard) in a loop: (monotonic send time, matches it shows)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    seen = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            sent = time.monotonic()
            rows = json.loads(await http_get(reader, writer, path))["rows"]
            seen.append((sent, sum(r["matches"] for r in rows)))
            await asyncio.sleep(0.005)
    finally:
        writer.close()
    return seen


def staleness_ms(acks: list[tuple[float, int]], seen: list[tuple[float, int]], base: int) -> float:
    """The age of the oldest acknowledged report an answer did not show, over every answer: for an answer sent at
    t showing m matches, the earliest acknowledgement before t whose total exceeds m (totals counted from `base`)."""
    worst = 0.0
    for sent, matches in seen:
        for acked, total in acks:
            if acked > sent:
                break
            if base + total > matches:
                worst = max(worst, sent - acked)
                break
    return round(worst * 1000, 1)


def bench_staleness(url: str, run_id: str, teachers: list[str], students: list[str], seconds: float, rate: float,
                    read_cache_s: float, replica: bool) -> dict:
    """How old the cached teacher leaderboard can be after a report: writes to the server that serves the reads
    (replica=False), or to a second league process on the same database (replica=True)."""
    import sqlalchemy as sa

    path = f"/v1/runs/{run_id}/leaderboard?role=teacher"
    with LeagueProcess(url, read_cache_s) as reads:
        other = LeagueProcess(url, read_cache_s) if replica else None
        if other is not None:
            other.__enter__()
        try:
            target = other or reads
            engine = sa.create_engine(url)
            with engine.connect() as conn:
                base = conn.execute(sa.text("SELECT count(*) FROM league_matches WHERE run_id = :r"),
                                    {"r": run_id}).scalar()
            engine.dispose()
            run_async(_probe(reads.rest_port, path, 0.5))
            with Writer(f"127.0.0.1:{target.grpc_port}", run_id, teachers, students, rate, seconds,
                        f"stale-{replica}") as writer:
                seen = run_async(_probe(reads.rest_port, path, seconds + 1.0))
                acks, _ = writer.result()
        finally:
            if other is not None:
                other.__exit__()
    return {"max_ms": staleness_ms(acks, seen, base), "answers": len(seen), "reports": len(acks)}


def table_health(url: str) -> dict:
    """Size and update kind of the tables every report rewrites (no bloat: updates HOT, dead rows pruned)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    out = {}
    with engine.connect() as conn:
        for table in ("league_adapters", "league_payoff"):
            row = conn.execute(sa.text(
                "SELECT pg_total_relation_size(c.oid), s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd "
                "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.oid = to_regclass(:t)"), {"t": table}).first()
            size, live, dead, upd, hot = row
            out[table] = {"bytes": int(size), "live_rows": int(live), "dead_rows": int(dead),
                          "hot_update_ratio": round(hot / upd, 3) if upd else None}
    engine.dispose()
    return out
