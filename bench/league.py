"""League benchmark against the real Postgres server: PFSP matchmaking latency, batched report throughput, the
leaderboard and lineage reads under 16 concurrent REST clients while matches are being reported, and the JSON calls
of the web dashboard. Prints JSON.

    python -m bench.league --json [--pg-url URL] [--adapters 1000] [--matches 100000] [--clients 16]

Matchmake and ReportMatches go through the gRPC server and client on loopback. The reads go to a league server in
its own process, started exactly as `populora serve league` starts it (gRPC and REST in one process), while another
process reports matches to that server over gRPC at `--write-rate` matches/s (the production path: every report
invalidates the read cache). Each read is measured with the cache on (`league.read_cache_s`) and off. As before,
`leaderboard_rps` / `_p50_ms` / `_p99_ms` are the cached leaderboard of a REST process that receives no writes.

Staleness: a probe reads the teacher leaderboard in a loop while reports go on, and for every answer finds the
oldest acknowledged report it does not show yet: `leaderboard_staleness_max_ms` with the writes going to the same
server, `leaderboard_staleness_replica_max_ms` with them going to another league process on the same database
(where only the cache window bounds it).

The dashboard: a run of 64 members (32 teachers, 32 students; 8 evolutions retired 32 more), 10,000 matches and a
phase journal of its steps written by the coordinator's own JournalDB; while a writer adds steps (journal rows and
their matches, >= 200 matches/s), 4 dashboards refresh in a loop, each refresh being the JSON calls the page makes:
overview, steps, leaderboard, rating curves, lineage and payoff (`dashboard_api_p99_ms`).
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

BENCH_TOKEN = "bench-league-token"  # the token of the league servers this benchmark starts
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


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
    """One GET on a keep-alive HTTP/1.1 connection: the whole body; anything but 200 raises."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    body = await reader.readexactly(length)
    if status != 200 or not body:
        raise RuntimeError(f"GET {path}: HTTP {status}")
    return body


async def _client(port: int, paths: list[str], deadline: float, latencies: list[float]) -> None:
    """A keep-alive HTTP/1.1 client: one request at a time, read the full body, time it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < deadline:
            path = paths[i % len(paths)]
            i += 1
            start = time.perf_counter()
            await _get(reader, writer, path)
            latencies.append((time.perf_counter() - start) * 1000)
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
    """The leaderboard of a REST process alone, receiving no writes (the figure bench.league always printed)."""
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
    return _figures(latencies, wall)


def _figures(latencies: list[float], wall: float) -> dict:
    return {"rps": round(len(latencies) / wall, 1), "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "requests": len(latencies)}


class LeagueProcess:
    """A league server in its own process, started as `populora serve league` starts one (populora.rpc.run_server:
    gRPC, and the REST app in the same process). Its database connections carry its own application_name, so
    `cpu_seconds()` can add their Postgres backends' CPU to its own."""

    def __init__(self, url: str, read_cache_s: float):
        self.grpc_port, self.rest_port = free_port(), free_port()
        self.url = url
        self.app_name = f"bench-league-{uuid.uuid4().hex[:8]}"
        self.proc = mp.get_context("spawn").Process(target=serve_league, daemon=True, args=(
            f"{url}&application_name={self.app_name}", self.grpc_port, self.rest_port, read_cache_s))

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds (user + system) so far of the server process and of each of its Postgres backends."""
        import psutil
        import sqlalchemy as sa

        engine = sa.create_engine(self.url)
        with engine.connect() as conn:
            pids = [r[0] for r in conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :a"),
                                                {"a": self.app_name})]
        engine.dispose()
        out = {}
        for pid in [self.proc.pid, *pids]:
            try:
                t = psutil.Process(pid).cpu_times()
                out[pid] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return out

    def __enter__(self) -> LeagueProcess:
        self.proc.start()
        wait_http(self.rest_port)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.join(10)


def serve_league(url: str, grpc_port: int, rest_port: int, read_cache_s: float) -> None:
    """Child process: the league's gRPC server and REST app, as `populora serve league` runs them."""
    import logging

    from populora.rpc import run_server
    from services.league.db import LeagueDB
    from services.league.rest import create_app
    from services.league.service import LeagueService

    logging.basicConfig(level=logging.WARNING)
    service = LeagueService(LeagueDB(url), read_cache_s=read_cache_s, token=BENCH_TOKEN)
    run_server("league", service, grpc_port, "127.0.0.1", BENCH_TOKEN, rest_app=create_app(service),
               rest_port=rest_port)


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


def cpu_ms_per_request(league: LeagueProcess, paths: list[str], clients: int, seconds: float) -> float:
    """CPU milliseconds per request of the server and its Postgres backends together (no writes meanwhile): what a
    request costs, whatever else the machine is running."""
    before = league.cpu_seconds()
    latencies, _ = _run(_load(league.rest_port, paths, clients, seconds))
    after = league.cpu_seconds()
    spent = sum(t - before.get(pid, 0.0) for pid, t in after.items())
    return round(1000 * spent / len(latencies), 3)


def bench_reads_under_writes(url: str, run_id: str, teachers: list[str], students: list[str], lineage_ids: list[str],
                             clients: int, seconds: float, rate: float, read_cache_s: float, tag: str) -> dict:
    """The leaderboard (teachers, students) and lineage reads of a league server while another process reports
    matches to it; a warm-up second first, then (without writes) the CPU each leaderboard request costs."""
    with LeagueProcess(url, read_cache_s) as league:
        address = f"127.0.0.1:{league.grpc_port}"
        board = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        lineage = [f"/v1/adapters/{a}/lineage" for a in lineage_ids]
        _run(_load(league.rest_port, board + lineage, clients, 1.0))
        cpu_ms = cpu_ms_per_request(league, board, clients, min(seconds, 3.0))
        with Writer(address, run_id, teachers, students, rate, seconds + 2, tag) as writer:
            time.sleep(0.5)
            board_lat, lineage_lat, wall = _run(_load_split(league.rest_port, board, lineage, clients, seconds))
            _, achieved = writer.result()
    return {"board": _figures(board_lat, wall), "lineage": _figures(lineage_lat, wall), "write_rate": achieved,
            "cpu_ms": cpu_ms}


async def _load_split(port: int, board: list[str], lineage: list[str], clients: int,
                      seconds: float) -> tuple[list[float], list[float], float]:
    """`clients` keep-alive clients, three in four reading the leaderboard, one in four lineages."""
    board_lat: list[float] = []
    lineage_lat: list[float] = []
    start = time.perf_counter()
    n_lineage = max(1, clients // 4)
    await asyncio.gather(*(_client(port, lineage if i < n_lineage else board, start + seconds,
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
            rows = json.loads(await _get(reader, writer, path))["rows"]
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
            _run(_probe(reads.rest_port, path, 0.5))
            with Writer(f"127.0.0.1:{target.grpc_port}", run_id, teachers, students, rate, seconds,
                        f"stale-{replica}") as writer:
                seen = _run(_probe(reads.rest_port, path, seconds + 1.0))
                acks, _ = writer.result()
        finally:
            if other is not None:
                other.__exit__()
    return {"max_ms": staleness_ms(acks, seen, base), "answers": len(seen), "reports": len(acks)}


# ---- the dashboard ------------------------------------------------------------------------------------------------
DASH_RUN = "dash"


def journal_step(step: int, teachers: list[str], students: list[str], rng: random.Random) -> dict[str, dict]:
    """A training step's phase results in the coordinator's layout, sized like a small population's step: one
    proposal per teacher and task type (about 400 characters, 120 tokens), half of them valid, two answers each."""
    pairings = [{"match_id": f"{DASH_RUN}/{step}/{t}/{tt}", "teacher": t, "student": rng.choice(students),
                 "task_type": tt, "p_student": 0.03} for t in teachers for tt in TASK_TYPES]
    program = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x * x\n    return total"
    proposals, verdicts, attempts, outcomes, rho = [], {}, [], {}, {}
    for p in pairings:
        pid = p["match_id"] + "/p0"
        proposals.append({"id": pid, "match_id": p["match_id"], "task_type": p["task_type"], "teacher": p["teacher"],
                          "text": "<think>" + "x" * 300 + "</think><answer>...</answer>", "version": step,
                          "prompt_token_ids": list(range(300)), "response_token_ids": list(range(120))})
        valid = rng.random() < 0.5
        verdicts[pid] = {"valid": valid, "reason": "ok" if valid else "no_answer", "detail": "", "task": {
            "task_type": p["task_type"], "program": program, "inputs": ["[1, 2, 3]"] * 5, "outputs": ["14"] * 5,
            "message": "sum of squares", "complexity": {"ast_depth": 6, "cyclomatic": 2, "lines_of_code": 5}}
            if valid else None}
        if valid:
            for k in range(2):
                aid = f"{pid}/a{k}"
                attempts.append({"id": aid, "task_id": pid, "student": p["student"], "match_id": p["match_id"],
                                 "text": "<answer>14</answer>", "prompt_token_ids": list(range(200)),
                                 "response_token_ids": list(range(40))})
                outcomes[aid] = rng.choice(("correct", "wrong"))
            rho[pid] = sum(outcomes[f"{pid}/a{k}"] == "correct" for k in range(2)) / 2
    population = {a: {"role": "teacher" if a in teachers else "student", "version": step} for a in teachers + students}
    return {"match": {"pairings": pairings}, "propose": {"proposals": proposals},
            "validate": {"verdicts": verdicts, "buffers": {}}, "solve": {"attempts": attempts},
            "check": {"outcomes": outcomes, "rho": rho},
            "rate": {"applied": len(pairings), "duplicates": 0, "reported": [p["match_id"] for p in pairings]},
            "update": {"population": population, "stats": {a: {"loss": 0.1, "tokens": 500} for a in population}}}


def dashboard_steps(url: str, grpc_address: str, teachers: list[str], students: list[str], first_step: int,
                    rate: float, seconds: float, done) -> None:
    """Child process: a run going on: step after step, the phase rows (through the coordinator's JournalDB) and
    the step's matches (gRPC), paced at `rate` matches/s; puts the matches/s achieved on `done`."""
    from coordinator.journal import JournalDB
    from populora.pb import league_pb2 as pb
    from populora.rpc import connect

    state = JournalDB(url)
    client = connect("league", grpc_address, BENCH_TOKEN, timeout=60)
    rng = random.Random(first_step)
    step, applied = first_step, 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        results = journal_step(step, teachers, students, rng)
        for phase, result in results.items():
            state.put(DASH_RUN, step, phase, result, seconds=0.1)
        matches = [pb.MatchResult(match_id=p["match_id"], teacher_id=p["teacher"], student_id=p["student"],
                                  task_type=p["task_type"], step=step, rhos=[rng.random()])
                   for p in results["match"]["pairings"]]
        applied += client.ReportMatches(pb.ReportMatchesRequest(run_id=DASH_RUN, matches=matches)).applied
        step += 1
        time.sleep(max(0.0, start + applied / rate - time.monotonic()))
    done.put(applied / (time.monotonic() - start))
    client.close()
    state.close()


def build_dashboard_run(client, url: str, n_adapters: int, n_matches: int) -> tuple[list[str], list[str], int]:
    """The dashboard's run: n/2 teachers and n/2 students, 8 evolutions (a quarter of each role replaced by a child
    each time, lineage recorded), `n_matches` matches in steps of one per teacher and task type, and the phase
    journal of every step. Returns the members at the end and the next step."""
    from coordinator.journal import JournalDB
    from populora.pb import league_pb2 as pb

    half = n_adapters // 2
    teachers = [f"dT{i:02d}" for i in range(half)]
    students = [f"dS{i:02d}" for i in range(n_adapters - half)]
    client.CreateRun(pb.CreateRunRequest(run_id=DASH_RUN, mode="population",
                                          config_yaml="run: {steps: 1000, mode: population}\nevolution: {every_k: 13}\n"))
    client.RegisterAdapters(pb.RegisterAdaptersRequest(run_id=DASH_RUN, adapters=[
        *(pb.AdapterSpec(adapter_id=t, role="teacher") for t in teachers),
        *(pb.AdapterSpec(adapter_id=s, role="student") for s in students)]))
    state = JournalDB(url)
    state.create_run(DASH_RUN, "population", "run: {steps: 1000, mode: population}\nevolution: {every_k: 13}\n")
    rng = random.Random(1)
    per_step = len(teachers) * len(TASK_TYPES)
    steps = max(1, n_matches // per_step)
    every = max(1, steps // 8)
    for step in range(1, steps + 1):
        results = journal_step(step, teachers, students, rng)
        for phase, result in results.items():
            state.put(DASH_RUN, step, phase, result, seconds=0.1)
        client.ReportMatches(pb.ReportMatchesRequest(run_id=DASH_RUN, matches=[pb.MatchResult(
            match_id=p["match_id"], teacher_id=p["teacher"], student_id=p["student"], task_type=p["task_type"],
            step=step, rhos=[rng.random()]) for p in results["match"]["pairings"]]))
        if step % every == 0:
            events = []
            for members, role in ((teachers, "teacher"), (students, "student")):
                for k in range(len(members) // 8):
                    retire = members.pop(rng.randrange(len(members)))
                    parents = rng.sample(members, 2)
                    child = f"{retire[:2]}{step}c{k}"
                    client.RecordChild(pb.RecordChildRequest(
                        run_id=DASH_RUN, child_id=child, role=role, parent_ids=parents, operator="X1", step=step,
                        retire_id=retire, params_json=json.dumps({"epsilon": 0.1 * rng.random()})))
                    members.append(child)
                    events.append({"step": step, "role": role, "retired": retire, "child": child, "parents": parents,
                                   "operator": "X1", "relative_change": 0.1})
            population = {a: {"role": "teacher" if a in teachers else "student", "version": step}
                          for a in teachers + students}
            state.put(DASH_RUN, step, "evolve", {"population": population, "events": events}, seconds=0.1)
    state.close()
    return teachers, students, steps + 1


def dashboard_paths(run_id: str) -> list[str]:
    """The JSON calls of one dashboard refresh (every view's data; static files are cached by the browser)."""
    return [f"/v1/runs/{run_id}/{p}" for p in ("overview", "steps", "leaderboard", "ratings", "lineage", "payoff")]


def bench_dashboard(url: str, teachers: list[str], students: list[str], next_step: int, clients: int,
                    seconds: float, rate: float, read_cache_s: float) -> dict:
    with LeagueProcess(url, read_cache_s) as league:
        paths = dashboard_paths(DASH_RUN)
        _run(_load(league.rest_port, paths, clients, 2.0))  # warm-up (the journal's steps parsed once)
        cpu_ms = cpu_ms_per_request(league, paths, clients, min(seconds, 3.0))
        ctx = mp.get_context("spawn")
        done = ctx.Queue()
        writer = ctx.Process(target=dashboard_steps, daemon=True, args=(
            url, f"127.0.0.1:{league.grpc_port}", teachers, students, next_step, rate, seconds + 2, done))
        writer.start()
        time.sleep(0.5)
        by_path = _run(_load_by_path(league.rest_port, paths, clients, seconds))
        achieved = done.get(timeout=120)
        writer.join(30)
    every = [x for lat in by_path.values() for x in lat]
    return {"p99_ms": round(percentile(every, 99), 2), "p50_ms": round(statistics.median(every), 2),
            "calls": len(every), "write_rate": round(achieved, 1), "cpu_ms": cpu_ms,
            "by_endpoint_p99_ms": {p.rsplit("/", 1)[1]: round(percentile(lat, 99), 2) for p, lat in by_path.items()}}


async def _load_by_path(port: int, paths: list[str], clients: int, seconds: float) -> dict[str, list[float]]:
    """`clients` dashboards, each refreshing in a loop: the calls of one refresh in turn, one at a time."""
    by_path: dict[str, list[float]] = {p: [] for p in paths}

    async def dashboard() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        end = time.perf_counter() + seconds
        try:
            while time.perf_counter() < end:
                for path in paths:
                    start = time.perf_counter()
                    await _get(reader, writer, path)
                    by_path[path].append((time.perf_counter() - start) * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(dashboard() for _ in range(clients)))
    return by_path


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
                    "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
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
        result.update(bench_report(client, run_id, teachers, students, args.matches, args.batch))
        result.update(bench_matchmake(client, run_id, args.matchmake_calls))
        # a line of 8 generations, for lineage reads with ancestors and descendants
        line = [teachers[0]]
        for g in range(1, 9):
            client.RecordChild(pb.RecordChildRequest(run_id=run_id, child_id=f"L{g}", role="teacher",
                                                      parent_ids=[line[-1], teachers[g]], operator="X1", step=g))
            line.append(f"L{g}")
        dash_teachers, dash_students, next_step = build_dashboard_run(client, url, args.dashboard_adapters,
                                                                      args.dashboard_matches)
        client.close()
        server.stop(0)
        service.close()

        cached = bench_leaderboard(url, run_id, args.clients, args.seconds, read_cache_s=1.0)
        result.update({"leaderboard_rps": cached["rps"], "leaderboard_p50_ms": cached["p50_ms"],
                       "leaderboard_p99_ms": cached["p99_ms"], "leaderboard_clients": args.clients,
                       "leaderboard_rows": half, "leaderboard_cache_s": 1.0})
        lineage_ids = line[::2]
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
        same = bench_staleness(url, run_id, teachers, students, 5.0, args.write_rate, 1.0, replica=False)
        other = bench_staleness(url, run_id, teachers, students, 5.0, args.write_rate, 1.0, replica=True)
        result.update({"leaderboard_staleness_max_ms": same["max_ms"],
                       "leaderboard_staleness_replica_max_ms": other["max_ms"],
                       "leaderboard_staleness_answers": same["answers"] + other["answers"]})
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
        result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
        result["targets_met"] = {
            "matchmake_p99_ms<=20": result["matchmake_p99_ms"] <= 20,
            "report_matches_per_s>=1000": result["report_matches_per_s"] >= 1000,
            "leaderboard_p99_ms<=50": result["leaderboard_p99_ms"] <= 50,
            "leaderboard_rps>=500": result["leaderboard_rps"] >= 500,
            "leaderboard_uncached_p99_ms<=50": result["leaderboard_uncached_p99_ms"] <= 50,
            "leaderboard_uncached_rps>=500": result["leaderboard_uncached_rps"] >= 500,
            "writes_matches_per_s>=200": result["writes_matches_per_s"] >= 200,
            "leaderboard_staleness_replica_max_ms<=cache window + 50": other["max_ms"] <= 1000 + 50,
            "dashboard_api_p99_ms<=50": result["dashboard_api_p99_ms"] <= 50}
    finally:
        drop_schema(args.pg_url, schema)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
