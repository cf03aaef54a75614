"""The league benchmark's machinery: a private Postgres schema, league servers in their own processes (as
`populora serve league` starts them) and HTTP clients that load them, with latency figures."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

from bench.loadgen import load, run_async, wait_http
from populora.ports import free_port

BENCH_TOKEN = "bench-league-token"  # the token of the league servers this benchmark starts
DEFAULT_PG = os.environ.get("POPULORA_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


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


def serve_rest(url: str, port: int, read_cache_s: float, tls=None) -> None:
    """Child process: the league REST app alone on uvicorn (over HTTPS with `tls`, a populora.tls.TlsFiles, as
    `populora serve league` serves it with services.tls on)."""
    import uvicorn

    from populora.tls import uvicorn_ssl
    from services.league.db import LeagueDB
    from services.league.rest import create_app
    from services.league.service import LeagueService

    service = LeagueService(LeagueDB(url), read_cache_s=read_cache_s)
    uvicorn.run(create_app(service), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                **(uvicorn_ssl(tls) if tls else {}))


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


