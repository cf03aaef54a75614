"""The league benchmark's machinery: a private Postgres schema, league servers in their own processes (as
`populora serve league` starts them) and HTTP clients that load them, with latency figures."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import statistics
import time
import uuid

BENCH_TOKEN = "bench-league-token"  # the token of the league servers this benchmark starts
DEFAULT_PG = os.environ.get("POPULORA_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


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



def serve_rest(url: str, port: int, read_cache_s: float) -> None:
    """Child process: the league REST app alone on uvicorn."""
    import uvicorn

    from services.league.db import LeagueDB
    from services.league.rest import create_app
    from services.league.service import LeagueService

    service = LeagueService(LeagueDB(url), read_cache_s=read_cache_s)
    uvicorn.run(create_app(service), host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
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


async def client_loop(port: int, paths: list[str], deadline: float, latencies: list[float]) -> None:
    """A keep-alive HTTP/1.1 client: one request at a time, read the full body, time it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < deadline:
            path = paths[i % len(paths)]
            i += 1
            start = time.perf_counter()
            await http_get(reader, writer, path)
            latencies.append((time.perf_counter() - start) * 1000)
    finally:
        writer.close()


def run_async(coro):
    """asyncio.run on uvloop where it is installed (a lighter client leaves more CPU to the server)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


async def load(port: int, paths: list[str], clients: int, seconds: float) -> tuple[list[float], float]:
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*(client_loop(port, paths, start + seconds, latencies) for _ in range(clients)))
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




def latency_figures(latencies: list[float], wall: float) -> dict:
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



def cpu_ms_per_request(league: LeagueProcess, paths: list[str], clients: int, seconds: float) -> float:
    """CPU milliseconds per request of the server and its Postgres backends together (no writes meanwhile): what a
    request costs, whatever else the machine is running."""
    before = league.cpu_seconds()
    latencies, _ = run_async(load(league.rest_port, paths, clients, seconds))
    after = league.cpu_seconds()
    spent = sum(t - before.get(pid, 0.0) for pid, t in after.items())
    return round(1000 * spent / len(latencies), 3)


