"""HTTP load generation shared by the benchmarks: keep-alive HTTP/1.1 clients on asyncio (uvloop where installed),
each sending one GET at a time and timing it to the full body, and the latency figures of a load (requests per
second, p50, p99). bench/harness.py holds the rest of what benchmarks share."""

from __future__ import annotations

import asyncio
import statistics
import time


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile q (0-100) of the values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


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


async def client_loop(port: int, paths: list[str], deadline: float, latencies: list[float], ssl=None) -> None:
    """A keep-alive HTTP/1.1 client: one request at a time, read the full body, time it. With `ssl` (an
    ssl.SSLContext), over TLS: one handshake per client, as a keep-alive client makes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl,
                                                   server_hostname="127.0.0.1" if ssl else None)
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


async def load(port: int, paths: list[str], clients: int, seconds: float, ssl=None) -> tuple[list[float], float]:
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*(client_loop(port, paths, start + seconds, latencies, ssl) for _ in range(clients)))
    return latencies, time.perf_counter() - start


def wait_http(port: int, timeout: float = 60.0, ssl=None) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    scheme = "https" if ssl else "http"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2, context=ssl) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"REST server on port {port} not ready after {timeout:.0f}s")


def latency_figures(latencies: list[float], wall: float) -> dict:
    return {"rps": round(len(latencies) / wall, 1), "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "requests": len(latencies)}
