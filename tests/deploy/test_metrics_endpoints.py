"""Every service, started as its container starts it (`populora serve NAME`), answers gRPC health, serves
Prometheus /metrics that count the requests it got, logs JSON lines, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from populora.ports import free_port
from tests.deploy.deployment import REST_SERVICES, ROOT, SERVICES

START_TIMEOUT_S = 180.0
pytestmark = pytest.mark.slow


@dataclass
class Running:
    """A `populora serve` subprocess and where to reach it."""

    name: str
    proc: subprocess.Popen
    grpc_port: int
    http_port: int
    log: Path

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def start(name: str, tmp_path: Path) -> Running:
    grpc_port, http_port = free_port(), free_port()
    http_field = "rest_port" if name in REST_SERVICES else "metrics_port"
    argv = [sys.executable, "-m", "coordinator.cli", "serve", name, "--preset", "cpu-tiny",
            "--port", str(grpc_port), "--bind", "127.0.0.1",
            # the whole endpoint: a partial services.<name> override does not keep the other defaults
            "--set", f"services.{name}.port={grpc_port}", "--set", f"services.{name}.{http_field}={http_port}",
            "--set", f"run.output_dir={tmp_path}", "--set", f"store.root={tmp_path}/store",
            "--set", "sandbox.workers=1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPULORA")}
    env.update(POPULORA_LOG_JSON="1", POPULORA_TOKEN="metrics-test-token", POPULORA_SERVICE=name,
               POPULORA_CACHE=os.environ.get("POPULORA_CACHE", str(Path.home() / ".cache" / "populora")))
    log = tmp_path / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Running(name, proc, grpc_port, http_port, log)


def wait_serving(svc: Running) -> None:
    from populora import healthcheck

    deadline = time.monotonic() + START_TIMEOUT_S
    seen = ""
    while time.monotonic() < deadline:
        if svc.proc.poll() is not None:
            pytest.fail(f"`populora serve {svc.name}` exited with {svc.proc.returncode} before serving:\n"
                        f"{svc.log_tail()}")
        healthy, seen = healthcheck.check(healthcheck.Probe(f"127.0.0.1:{svc.grpc_port}", timeout_s=2.0))
        if healthy:
            return
        time.sleep(0.3)
    pytest.fail(f"`populora serve {svc.name}` not SERVING after {START_TIMEOUT_S:.0f}s ({seen}):\n{svc.log_tail()}")


def get(url: str, timeout_s: float = 30.0) -> httpx.Response:
    """GET, retrying while the HTTP side (started after gRPC) is still coming up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return httpx.get(url, timeout=5.0)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stop(svc: Running) -> int | None:
    if svc.proc.poll() is None:
        svc.proc.send_signal(signal.SIGTERM)
        try:
            svc.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            svc.proc.kill()
            svc.proc.wait(timeout=10)
            return None
    return svc.proc.returncode


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> dict[str, Running]:
    """All five started at once (their start-up is mostly waiting on imports and model set-up), each in its own
    directory; every test then checks and stops its own."""
    running = {name: start(name, tmp_path_factory.mktemp(name)) for name in SERVICES}
    yield running
    for svc in running.values():
        if svc.proc.poll() is None:
            svc.proc.kill()
            svc.proc.wait(timeout=10)


@pytest.mark.parametrize("name", SERVICES)
def test_service_exposes_metrics(name, started):
    svc = started[name]
    try:
        wait_serving(svc)
        response = get(f"http://127.0.0.1:{svc.http_port}/metrics")
        assert response.status_code == 200, f"{name}: GET /metrics -> {response.status_code}"
        assert response.headers["content-type"].startswith("text/plain"), response.headers["content-type"]
        body = response.text
        for metric in ("populora_rpc_requests", "populora_rpc_latency_seconds", "populora_batch_size",
                       "populora_queue_depth", "populora_sandbox_results", "populora_tokens_per_second"):
            assert f"# TYPE {metric}" in body, f"{name}: /metrics has no {metric}"
        # the health checks made above went through the service's interceptor and were counted
        assert re.search(r'populora_rpc_requests_total\{[^}]*method="Check"[^}]*\} [1-9]', body), \
            f"{name}: the health-check requests it answered are not counted in /metrics"
        if name in REST_SERVICES:
            assert get(f"http://127.0.0.1:{svc.http_port}/healthz").status_code == 200, f"{name}: GET /healthz"
    finally:
        code = stop(svc)
    lines = [ln for ln in svc.log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    records = [json.loads(ln) for ln in lines]
    assert any("level" in r and "msg" in r for r in records), f"{name}: no JSON log lines:\n{svc.log_tail()}"
    assert code == 0, f"{name}: exit code {code} after SIGTERM (expected a clean shutdown):\n{svc.log_tail()}"
