"""What TLS costs the league's REST reads: the uncached leaderboard of a REST process alone, served over HTTPS (the
league's certificate from a development CA, as `populora serve league` serves it with services.tls on) and over
plain HTTP, in the same run and alternating, so the machine's load falls on both alike. `tls_throughput_ratio` is
the requests per second with TLS over those without (target >= 0.95); each keep-alive client makes one handshake,
as a dashboard or a script does."""

from __future__ import annotations

import multiprocessing as mp
import ssl
import tempfile

from bench.league_server import serve_rest
from bench.loadgen import latency_figures, load, run_async, wait_http
from populora import certs
from populora.ports import free_port
from populora.tls import TlsFiles


def leaderboard_rps(url: str, run_id: str, clients: int, seconds: float, tls: TlsFiles | None) -> float:
    """Requests per second of the uncached leaderboard (teachers, students) of a REST process alone."""
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_rest, args=(url, port, 0.0, tls), daemon=True)
    proc.start()
    context = ssl.create_default_context(cafile=str(tls.ca)) if tls else None
    try:
        wait_http(port, ssl=context)
        paths = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        run_async(load(port, paths, clients, min(1.0, seconds), context))  # warm-up
        latencies, wall = run_async(load(port, paths, clients, seconds, context))
    finally:
        proc.terminate()
        proc.join(10)
    return latency_figures(latencies, wall)["rps"]


def bench_tls(url: str, run_id: str, clients: int, seconds: float, rounds: int = 2) -> dict:
    """`rounds` of (plain, TLS) measurements of `seconds` each; the ratio of their sums."""
    with tempfile.TemporaryDirectory() as folder:
        certs.write_certs(folder, ["league"], days=1, hosts=["127.0.0.1"])
        files = TlsFiles("league", certs.ca_file(folder), certs.cert_file(folder, "league"),
                         certs.key_file(folder, "league"))
        plain, secure = [], []
        for _ in range(rounds):
            plain.append(leaderboard_rps(url, run_id, clients, seconds, None))
            secure.append(leaderboard_rps(url, run_id, clients, seconds, files))
    return {"tls_throughput_ratio": round(sum(secure) / sum(plain), 3),
            "leaderboard_uncached_tls_rps": round(sum(secure) / rounds, 1),
            "leaderboard_uncached_plain_rps": round(sum(plain) / rounds, 1), "tls_rounds": rounds}
