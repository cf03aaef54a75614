"""What TLS costs the league's REST reads: the uncached leaderboard of a REST process alone, served over HTTPS (the
league's certificate from a development CA, as `populora serve league` serves it with services.tls on) and over
plain HTTP, in the same run and alternating, so the machine's load falls on both alike. `tls_throughput_ratio` is
the requests per second with TLS over those without (target >= 0.95); each keep-alive client makes one handshake,
as a dashboard or a script does. Beside it, where the difference goes: the CPU milliseconds a request cost the
server process and the clients (the bench's process, on the same cores), with TLS and without."""

from __future__ import annotations

import multiprocessing as mp
import ssl
import tempfile
import time

from bench.harness import process_cpu_s
from bench.league_server import serve_rest
from bench.loadgen import latency_figures, load, run_async, wait_http
from populora import certs
from populora.ports import free_port
from populora.tls import TlsFiles


def leaderboard_rps(url: str, run_id: str, clients: int, seconds: float, tls: TlsFiles | None) -> dict:
    """Requests per second of the uncached leaderboard (teachers, students) of a REST process alone, and the CPU
    milliseconds a request cost the server process and the clients (this process)."""
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_rest, args=(url, port, 0.0, tls), daemon=True)
    proc.start()
    context = ssl.create_default_context(cafile=str(tls.ca)) if tls else None
    try:
        wait_http(port, ssl=context)
        paths = [f"/v1/runs/{run_id}/leaderboard?role=teacher", f"/v1/runs/{run_id}/leaderboard?role=student"]
        run_async(load(port, paths, clients, min(1.0, seconds), context))  # warm-up
        server0, client0 = process_cpu_s([proc]), time.process_time()
        latencies, wall = run_async(load(port, paths, clients, seconds, context))
        server_s, client_s = process_cpu_s([proc]) - server0, time.process_time() - client0
    finally:
        proc.terminate()
        proc.join(10)
    n = max(1, len(latencies))
    return {"rps": latency_figures(latencies, wall)["rps"], "server_cpu_ms": 1000 * server_s / n,
            "client_cpu_ms": 1000 * client_s / n}


def bench_tls(url: str, run_id: str, clients: int, seconds: float, rounds: int = 2) -> dict:
    """`rounds` of (plain, TLS) measurements of `seconds` each; the ratio of their sums, and where the difference
    goes: the server's and the clients' CPU milliseconds a request, each side's mean over its rounds."""
    with tempfile.TemporaryDirectory() as folder:
        certs.write_certs(folder, ["league"], days=1, hosts=["127.0.0.1"])
        files = TlsFiles("league", certs.ca_file(folder), certs.cert_file(folder, "league"),
                         certs.key_file(folder, "league"))
        plain, secure = [], []
        for _ in range(rounds):
            plain.append(leaderboard_rps(url, run_id, clients, seconds, None))
            secure.append(leaderboard_rps(url, run_id, clients, seconds, files))
    def mean(side: list[dict], key: str) -> float:
        return round(sum(m[key] for m in side) / len(side), 3)

    return {"tls_throughput_ratio": round(sum(m["rps"] for m in secure) / sum(m["rps"] for m in plain), 3),
            "leaderboard_uncached_tls_rps": mean(secure, "rps"),
            "leaderboard_uncached_plain_rps": mean(plain, "rps"), "tls_rounds": rounds,
            "tls_server_cpu_ms_per_request": mean(secure, "server_cpu_ms"),
            "plain_server_cpu_ms_per_request": mean(plain, "server_cpu_ms"),
            "tls_client_cpu_ms_per_request": mean(secure, "client_cpu_ms"),
            "plain_client_cpu_ms_per_request": mean(plain, "client_cpu_ms")}
